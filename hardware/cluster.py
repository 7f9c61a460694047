"""A cluster of identical GPUs: nodes, scale-up domains, the two link tiers, and its text form.

GPU ids run 0..N-1 node-major: node k holds ids k*G .. k*G+G-1 for G GPUs per node. A scale-up
domain is a run of consecutive ids whose GPUs reach each other over NVLink/xGMI (or PCIe inside a
PCIe server) without a NIC: usually one node, a whole rack on GB200 NVL72. Everything between
domains goes through the scale-out fabric (InfiniBand/RoCE NICs).

The text form, for the command line (whitespace and case do not matter):

- ``NxGPU`` - N GPUs. Up to one node's worth they share one (possibly partial) node; beyond that N
  must fill whole nodes: ``8xH100`` is one HGX node, ``16xH100`` two. ``72xGB200`` is one NVL72
  rack: 18 compute trays of 4 GPUs in one 72-GPU domain; ``144xGB200`` two racks.
- ``AxBxGPU`` - A nodes of B GPUs each, B at most the GPU's node size: ``4x8xH200``, ``2x4xH100``
  (two half-populated nodes). For rack-scale GPUs B may also be the rack: ``2x72xGB200`` is two
  NVL72 racks (36 trays of 4), the same cluster as ``144xGB200``; ``18x4xGB200`` is one rack.

It must not price anything (``collectives`` does) nor import anything of ours but ``SpecError``.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Iterable

from pydantic import (
    ConfigDict,
    Field,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    ValidationError,
    model_validator,
)

from shardplan.hardware._errors import as_spec_error
from shardplan.hardware.gpu import GPUSpec, get_gpu
from shardplan.models.errors import SpecError
from shardplan.models.frozen import HashOnce

# α of one step of a collective, before calibration. NCCL's own tuning model (src/graph/tuning.cc)
# charges ~0.5 µs per NVLink hop and a few µs of base latency per call; 1 µs per step sits between
# TensorRT-LLM's one-shot all-reduce (3.6 µs for 8 GPUs, shared/calibration/op_points.csv) and an
# NCCL ring (~15 µs). Across a NIC a step adds the network round trip and proxy thread, ~5 µs
# (NCCL's NET hop latency is 5 µs for LL trees). The calibration profile's latency_scale corrects both.
DEFAULT_SCALEUP_LATENCY_US = 1.0
DEFAULT_SCALEOUT_LATENCY_US = 5.0


class ClusterSpec(HashOnce):
    """Identical GPUs in equal nodes, grouped into equal scale-up domains."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    gpu: GPUSpec = Field(description="the GPU type of every device")
    num_nodes: PositiveInt = Field(description="nodes (servers, or GB200 compute trays)")
    gpus_per_node: PositiveInt = Field(description="GPUs in each node")
    scaleup_domain_gpus: PositiveInt = Field(
        description="GPUs per scale-up domain (consecutive ids): a node, or a whole NVL72 rack"
    )
    scaleup_gb_per_s: PositiveFloat = Field(description="per-GPU, per-direction bandwidth inside a domain, GB/s")
    scaleup_latency_us: NonNegativeFloat = Field(
        default=DEFAULT_SCALEUP_LATENCY_US, description="latency of one collective step inside a domain, µs"
    )
    scaleout_gb_per_s: PositiveFloat = Field(description="per-GPU, per-direction NIC bandwidth between domains, GB/s")
    scaleout_latency_us: NonNegativeFloat = Field(
        default=DEFAULT_SCALEOUT_LATENCY_US, description="latency of one collective step across the NICs, µs"
    )

    @model_validator(mode="after")
    def _domains_tile_the_cluster(self) -> ClusterSpec:
        domain, node, total = self.scaleup_domain_gpus, self.gpus_per_node, self.num_gpus
        if domain % node and node % domain:
            raise SpecError(
                "scaleup_domain_gpus", f"a {domain}-GPU scale-up domain neither holds nor splits {node}-GPU nodes"
            )
        if total % domain:
            raise SpecError(
                "scaleup_domain_gpus", f"{total} GPUs do not split into whole {domain}-GPU scale-up domains"
            )
        return self

    @classmethod
    def from_gpu(
        cls,
        gpu: GPUSpec,
        num_nodes: int,
        gpus_per_node: int | None = None,
        *,
        scaleup_domain_gpus: int | None = None,
        **links: float,
    ) -> ClusterSpec:
        """A cluster with the GPU's defaults for whatever is not given; bad values raise ``SpecError``.

        ``links`` overrides the bandwidths and latencies by field name. The default domain is the
        node for node-scale fabrics (HGX, OAM, PCIe servers); for a rack-scale fabric its full size,
        or all GPUs when there are fewer (``8xGB200``: 2 trays in one 8-GPU domain).
        """
        per_node = gpu.gpus_per_node if gpus_per_node is None else gpus_per_node
        if scaleup_domain_gpus is None:
            scaleup_domain_gpus = _default_domain(gpu, num_nodes, per_node)
        fields = {"scaleup_gb_per_s": gpu.scaleup_gb_per_s, "scaleout_gb_per_s": gpu.scaleout_gb_per_s, **links}
        try:
            return cls(
                gpu=gpu,
                num_nodes=num_nodes,
                gpus_per_node=per_node,
                scaleup_domain_gpus=scaleup_domain_gpus,
                **fields,
            )
        except ValidationError as exc:
            raise as_spec_error(exc, "cluster") from None

    # --- sizes and ids ---------------------------------------------------------------------

    @property
    def num_gpus(self) -> int:
        return self.num_nodes * self.gpus_per_node

    @property
    def num_domains(self) -> int:
        return self.num_gpus // self.scaleup_domain_gpus

    @property
    def gpu_ids(self) -> tuple[int, ...]:
        """0..N-1, node-major."""
        return tuple(range(self.num_gpus))

    def node_of(self, gpu: int) -> int:
        return self._checked(gpu) // self.gpus_per_node

    def domain_of(self, gpu: int) -> int:
        return self._checked(gpu) // self.scaleup_domain_gpus

    def gpus_of_node(self, node: int) -> tuple[int, ...]:
        return self._block(node, self.num_nodes, self.gpus_per_node, "node")

    def gpus_of_domain(self, domain: int) -> tuple[int, ...]:
        return self._block(domain, self.num_domains, self.scaleup_domain_gpus, "domain")

    def nodes_of(self, gpus: Iterable[int]) -> tuple[int, ...]:
        """The nodes the GPUs sit on, ascending, each once."""
        return tuple(sorted({self.node_of(g) for g in gpus}))

    def domains_of(self, gpus: Iterable[int]) -> tuple[int, ...]:
        return tuple(sorted({self.domain_of(g) for g in gpus}))

    def spans_scaleout(self, gpus: Iterable[int]) -> bool:
        """True when the GPUs are not all in one scale-up domain, so traffic among them crosses NICs."""
        return len(self.domains_of(gpus)) > 1

    # --- link tiers in base units ------------------------------------------------------------

    @property
    def scaleup_bytes_per_s(self) -> float:
        return self.scaleup_gb_per_s * 1e9

    @property
    def scaleout_bytes_per_s(self) -> float:
        return self.scaleout_gb_per_s * 1e9

    @property
    def scaleup_latency_s(self) -> float:
        return self.scaleup_latency_us * 1e-6

    @property
    def scaleout_latency_s(self) -> float:
        return self.scaleout_latency_us * 1e-6

    def describe(self) -> str:
        """One line for people, e.g. '2 nodes x 8 H100-SXM = 16 GPUs; scale-up 2 domains of 8 GPUs ...'."""
        domains = (
            f"one {self.scaleup_domain_gpus}-GPU domain"
            if self.num_domains == 1
            else f"{self.num_domains} domains of {_count(self.scaleup_domain_gpus, 'GPU')}"
        )
        shape = f"{_count(self.num_nodes, 'node')} x {self.gpus_per_node} {self.gpu.name}"
        return (
            f"{shape} = {_count(self.num_gpus, 'GPU')}; "
            f"scale-up {domains} at {self.scaleup_gb_per_s:g} GB/s, {self.scaleup_latency_us:g} us/step; "
            f"scale-out {self.scaleout_gb_per_s:g} GB/s, {self.scaleout_latency_us:g} us/step"
        )

    def _checked(self, gpu: int) -> int:
        return _index_in(gpu, self.num_gpus, "gpus", "GPU id")

    @staticmethod
    def _block(index: int, count: int, size: int, what: str) -> tuple[int, ...]:
        first = _index_in(index, count, what, what) * size
        return tuple(range(first, first + size))


def _index_in(value: int, count: int, field: str, what: str) -> int:
    """``value`` as an int in 0..count-1 (numpy integers welcome; bools and floats are not ids)."""
    try:
        index = operator.index(value) if not isinstance(value, bool) else None
    except TypeError:
        index = None
    if index is None or not 0 <= index < count:
        raise SpecError(field, f"{what} {value!r} is not in 0..{count - 1}")
    return index


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _default_domain(gpu: GPUSpec, num_nodes: int, per_node: int) -> int:
    """The node for node-scale fabrics; for a rack-scale one its full size, or all GPUs if fewer."""
    if not gpu.domain_spans_nodes:
        return per_node
    total = num_nodes * per_node if isinstance(num_nodes, int) and isinstance(per_node, int) else 0
    # a nonsense count is left for the field validators to report; 1 is a placeholder that never errs first
    return min(gpu.scaleup_domain_gpus, total) if total > 0 else 1


# Two or three fields separated by "x" (or "×"), the last being the GPU name. Signs are let through
# here only so that "-1xH100" gets a message about the count rather than about the syntax.
_CLUSTER_RE = re.compile(
    r"^\s*(?P<first>[+-]?\d+)\s*[x×]\s*(?:(?P<second>[+-]?\d+)\s*[x×]\s*)?(?P<gpu>\S.*?)\s*$", re.IGNORECASE
)
_FORMS = "expected NxGPU (8xH100) or AxBxGPU (4x8xH200)"
# The largest cluster parse_cluster builds: a million GPUs, far past any deployment, and small
# enough that per-GPU tables and every GPU count times bytes stay inside 64-bit integers.
MAX_GPUS = 1 << 20
_MAX_DIGITS = 9  # a count is read only up to this many digits, so int() never sees a huge string


def parse_cluster(text: str) -> ClusterSpec:
    """Read ``8xH100``, ``4x8xH200``, ``72xGB200`` or ``2x72xGB200`` (see the module docstring).

    >>> parse_cluster("2x8xH100").describe()
    '2 nodes x 8 H100-SXM = 16 GPUs; scale-up 2 domains of 8 GPUs at 450 GB/s, 1 us/step; scale-out 50 GB/s, 5 us/step'
    """
    text = str(text)
    if len(text) > 100:
        raise SpecError("cluster", f"{text[:20]!r}... is {len(text)} characters long; {_FORMS}")
    if "," in text:  # "2x8xH100,1x8xH200": a ClusterSpec has one GPU and one node size, so no list is read
        raise SpecError("cluster", f"{text!r} is a list; a cluster is one GPU type in nodes of one size "
                                   f"({_FORMS}): plan each part as its own cluster")
    match = _CLUSTER_RE.match(text)
    if match is None:
        raise SpecError("cluster", f"cannot read {text!r}; {_FORMS}")
    first, second, gpu_name = match["first"], match["second"], match["gpu"]
    if gpu_name.isdigit():
        raise SpecError("cluster", f"{text!r} names no GPU type; {_FORMS}")
    for digits in (first, second):
        if digits is not None and len(digits.lstrip("+-").lstrip("0")) > _MAX_DIGITS:
            raise SpecError("cluster", f"{digits[:12]}... GPUs; at most {MAX_GPUS:,} GPUs in all")
    counts = [int(first)] + ([int(second)] if second is not None else [])
    for count in counts:
        if count <= 0:
            raise SpecError("cluster", f"counts in {text!r} must be positive, got {count}")
    try:
        gpu = get_gpu(gpu_name)
    except SpecError as exc:  # get_gpu names its own argument, "gpu"; here the GPU is part of the cluster's text
        raise SpecError("cluster", exc.reason) from None
    if second is None:
        nodes, per_node = _nodes_from_total(counts[0], gpu)
    else:
        nodes, per_node = _nodes_explicit(counts[0], counts[1], gpu)
    if nodes * per_node > MAX_GPUS:
        raise SpecError("cluster", f"{nodes * per_node:,} GPUs; at most {MAX_GPUS:,} GPUs in all")
    try:
        return ClusterSpec.from_gpu(gpu, nodes, per_node)
    except SpecError as exc:
        racks = gpu.domain_spans_nodes and nodes * per_node > gpu.scaleup_domain_gpus
        hint = f"; beyond one rack use whole {gpu.scaleup_domain_gpus}-GPU racks" if racks else ""
        raise SpecError("cluster", f"{text!r}: {exc.reason}{hint}") from None


def _nodes_from_total(total: int, gpu: GPUSpec) -> tuple[int, int]:
    """``NxGPU``: one (partial) node up to the node size, whole nodes beyond it."""
    per_node = gpu.gpus_per_node
    if total <= per_node:
        return 1, total
    if total % per_node:
        raise SpecError(
            "cluster",
            f"{total} {gpu.name} GPUs do not fill whole {per_node}-GPU nodes; "
            f"use a multiple of {per_node}, or AxBx{gpu.name} for partial nodes",
        )
    return total // per_node, per_node


def _nodes_explicit(count: int, size: int, gpu: GPUSpec) -> tuple[int, int]:
    """``AxBxGPU``: A nodes of B GPUs, or A racks when B is a rack-scale GPU's domain size."""
    if gpu.domain_spans_nodes and size == gpu.scaleup_domain_gpus:
        return count * size // gpu.gpus_per_node, gpu.gpus_per_node
    if size > gpu.gpus_per_node:
        racks = f" or a whole {gpu.scaleup_domain_gpus}-GPU rack" if gpu.domain_spans_nodes else ""
        raise SpecError(
            "cluster", f"{gpu.name} nodes hold at most {_count(gpu.gpus_per_node, 'GPU')}{racks}; got {size} per node"
        )
    return count, size
