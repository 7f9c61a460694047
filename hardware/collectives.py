"""Device-level cost primitives: compute time, memory time and collective time, in float seconds.

Pure functions of a spec and a size. Roofline pieces (``compute_time_s``, ``memory_time_s``) divide
work by a peak rate times an efficiency; ``collective_time_s`` is an α-β model that counts the
steps of the textbook algorithm (rings for all-reduce, all-gather, reduce-scatter; pairwise
exchange for all-to-all) and charges every step α plus its bytes over one GPU's link bandwidth.

A group is priced on the slowest tier it spans: a group inside one scale-up domain uses the
NVLink/xGMI/PCIe bandwidth and latency, a group that crosses domains uses the per-GPU NIC
bandwidth and latency for every step. Real libraries run hierarchical algorithms that keep part of
the traffic on the fast tier, so this is an upper bound; hierarchical algorithms are out of scope,
and the calibration profile's ``bw_efficiency``/``latency_scale`` pull the model towards measurements.

It must not: know models, layouts or dtypes (callers pass FLOPs and bytes), calibrate anything,
or import anything of ours but ``SpecError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

from shardplan.hardware.cluster import ClusterSpec
from shardplan.hardware.gpu import GPUSpec
from shardplan.models.errors import SpecError


class Collective(str, Enum):
    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_TO_ALL = "all_to_all"
    SEND_RECV = "send_recv"


class Tier(str, Enum):
    SCALE_UP = "scale_up"  # inside one NVLink/xGMI (or PCIe-server) domain
    SCALE_OUT = "scale_out"  # across NICs


def compute_time_s(flops: float, gpu: GPUSpec, compute_class: str, efficiency: float = 1.0) -> float:
    """Seconds for ``flops`` at the GPU's peak dense rate for the class times ``efficiency``.

    >>> from shardplan.hardware.gpu import get_gpu
    >>> round(compute_time_s(989.4e12, get_gpu("h100"), "bf16", efficiency=0.5), 6)
    2.0
    """
    _check_nonnegative(flops, "flops")
    _check_positive(efficiency, "efficiency")
    return flops / (gpu.flops_per_s(compute_class) * efficiency)


def memory_time_s(nbytes: float, gpu: GPUSpec, efficiency: float = 1.0) -> float:
    """Seconds to move ``nbytes`` through device memory at peak bandwidth times ``efficiency``."""
    _check_nonnegative(nbytes, "nbytes")
    _check_positive(efficiency, "efficiency")
    return nbytes / (gpu.hbm_bytes_per_s * efficiency)


def collective_steps(op: Collective, n: int) -> tuple[int, float]:
    """(steps, share of ``nbytes`` each GPU sends per step) of ``op`` over ``n`` GPUs.

    ``nbytes`` is always one GPU's full buffer: the reduced tensor (all-reduce), the gathered
    result (all-gather), the input before scattering (reduce-scatter), everything a GPU sends plus
    keeps (all-to-all), the message (send/recv).

    - all-reduce, ring: reduce-scatter then all-gather, 2(n-1) steps of nbytes/n
    - all-gather and reduce-scatter, ring: n-1 steps of nbytes/n
    - all-to-all, pairwise exchange: n-1 steps, one peer's nbytes/n each
    - send/recv: 1 step of nbytes (pairs in a group send at the same time)
    A single GPU takes 0 steps.
    """
    op = Collective(op)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise SpecError("gpus", f"a collective needs a group of at least 1 GPU, got {n!r}")
    if n == 1:
        return 0, 0.0
    if op is Collective.ALL_REDUCE:
        return 2 * (n - 1), 1.0 / n
    if op is Collective.SEND_RECV:
        return 1, 1.0
    return n - 1, 1.0 / n  # ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL


def tier_of(gpus: Sequence[int], cluster: ClusterSpec) -> Tier:
    """The slowest tier the group spans: scale-out as soon as it leaves one scale-up domain."""
    return Tier.SCALE_OUT if cluster.spans_scaleout(gpus) else Tier.SCALE_UP


def collective_time_s(
    op: Collective,
    nbytes: float,
    gpus: Sequence[int],
    cluster: ClusterSpec,
    *,
    bw_efficiency: float = 1.0,
    latency_scale: float = 1.0,
) -> float:
    """Seconds for ``op`` on ``nbytes`` (see ``collective_steps``) among the distinct GPU ids ``gpus``.

    Each step costs α + bytes / β, with α the tier's step latency × ``latency_scale`` and β the
    tier's per-GPU, per-direction bandwidth × ``bw_efficiency``. ``bw_efficiency`` may exceed 1 when
    a calibration says so (in-switch reductions such as NVLS beat the ring bound).

    >>> from shardplan.hardware.cluster import parse_cluster
    >>> round(collective_time_s(Collective.SEND_RECV, 450e6, [0, 1], parse_cluster("8xH100")), 6)
    0.001001
    """
    _check_nonnegative(nbytes, "nbytes")
    _check_positive(bw_efficiency, "bw_efficiency")
    _check_nonnegative(latency_scale, "latency_scale")
    group = _distinct(gpus)
    tier = tier_of(group, cluster)  # also checks every id is in the cluster
    return collective_time_on_tier_s(
        op, nbytes, len(group), tier, cluster, bw_efficiency=bw_efficiency, latency_scale=latency_scale
    )


def collective_time_on_tier_s(
    op: Collective,
    nbytes: float,
    group_size: int,
    tier: Tier,
    cluster: ClusterSpec,
    *,
    bw_efficiency: float = 1.0,
    latency_scale: float = 1.0,
) -> float:
    """``collective_time_s`` for a caller that already knows the group's size and tier (the cost
    model prices thousands of collectives over the same few groups, some of 4,096 GPUs)."""
    steps, share = collective_steps(op, group_size)
    if steps == 0:
        return 0.0
    alpha = _latency_s(tier, cluster) * latency_scale
    beta = _bytes_per_s(tier, cluster) * bw_efficiency
    return steps * (alpha + nbytes * share / beta)


def oneshot_allreduce_s(
    nbytes: float, group_size: int, cluster: ClusterSpec, *, fixed_s: float, bw_efficiency: float = 1.0
) -> float:
    """Seconds for a one-shot all-reduce of ``nbytes`` inside one scale-up domain: every GPU reads each of
    its ``group_size - 1`` peers' whole buffers over the fabric and sums them itself, in one kernel
    (``fixed_s``, its launch and synchronisation) instead of the ring's 2(n - 1) latency-bound steps. It
    moves (n - 1) x nbytes per GPU against the ring's 2(n - 1) / n x nbytes, so engines run it for small
    messages and the ring (or two-shot) for large ones (TensorRT-LLM's and vLLM's custom all-reduce).

    >>> from shardplan.hardware.cluster import parse_cluster
    >>> round(oneshot_allreduce_s(450e3, 8, parse_cluster("8xH100"), fixed_s=3e-6) * 1e6, 3)  # 3 us + 7 x 1 us
    10.0
    """
    _check_nonnegative(nbytes, "nbytes")
    _check_positive(bw_efficiency, "bw_efficiency")
    if group_size <= 1 or nbytes == 0:
        return 0.0
    return fixed_s + (group_size - 1) * nbytes / (cluster.scaleup_bytes_per_s * bw_efficiency)


def _latency_s(tier: Tier, cluster: ClusterSpec) -> float:
    return cluster.scaleup_latency_s if tier is Tier.SCALE_UP else cluster.scaleout_latency_s


def _bytes_per_s(tier: Tier, cluster: ClusterSpec) -> float:
    return cluster.scaleup_bytes_per_s if tier is Tier.SCALE_UP else cluster.scaleout_bytes_per_s


def _distinct(gpus: Sequence[int]) -> tuple[int, ...]:
    group = tuple(gpus)
    if not group:
        raise SpecError("gpus", "a collective needs at least one GPU")
    if len(set(group)) != len(group):
        raise SpecError("gpus", f"GPU ids repeat in {list(group)}")
    return group


def _check_nonnegative(value: float, field: str) -> None:
    if not value >= 0:  # also rejects NaN
        raise SpecError(field, f"must be >= 0, got {value!r}")


def _check_positive(value: float, field: str) -> None:
    if not value > 0:
        raise SpecError(field, f"must be > 0, got {value!r}")
