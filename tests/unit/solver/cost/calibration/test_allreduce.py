"""The all-reduce price: the ring, or the engines' one-shot kernel where it is faster, and the fit of both to the
custom all-reduce points of op_points.csv (hand-computed values and the measured points themselves)."""

from __future__ import annotations

import csv
import math
import re

import pytest

from shardplan.hardware import Collective, get_gpu, oneshot_allreduce_s, parse_cluster
from shardplan.hardware.profile import get_profile
from shardplan.models import get_model
from shardplan.solver.cost.calibration.fit import (
    AllReduceFactors,
    AllReducePoint,
    allreduce_fit,
    allreduce_seconds,
    op_factors,
)
from shardplan.solver.cost.operators import CostContext
from shardplan.solver.cost.stage import shape_of

LINK_BYTES_PER_S = 450e9  # H100 NVLink per direction (hardware presets)
KIB, MIB = 2**10, 2**20


def h100_context(update: dict[str, object], cluster: str = "8xH100") -> CostContext:
    model = get_model("llama-3.1-70b")
    profile = get_profile("h100-sxm").model_copy(update=update)
    return CostContext(model, parse_cluster(cluster), profile, shape_of(model, 8, 8, 1, 1, 1))


def test_the_one_shot_reads_every_peers_buffer_once():
    # 8 GPUs, 1 MiB: 5 us + 7 x 1,048,576 B / (450e9 x 0.5) = 5 + 32.6204 us.
    seconds = oneshot_allreduce_s(MIB, 8, parse_cluster("8xH100"), fixed_s=5e-6, bw_efficiency=0.5)
    assert seconds * 1e6 == pytest.approx(5 + 7 * MIB / (LINK_BYTES_PER_S * 0.5) * 1e6)
    assert oneshot_allreduce_s(MIB, 1, parse_cluster("8xH100"), fixed_s=5e-6) == 0.0


def test_the_cost_model_takes_the_one_shot_for_small_messages_and_the_ring_for_large_ones():
    fields = {"scaleup_bw_efficiency": 0.7, "collective_latency_scale": 1.5, "allreduce_oneshot_us": 3.0}
    ctx = h100_context(fields)
    group = range(8)
    bw = LINK_BYTES_PER_S * 0.7

    def ring_s(nbytes: float) -> float:  # 14 steps of 1.5 us and an eighth of the buffer
        return 14 * (1.5e-6 + nbytes / 8 / bw)

    def oneshot_s(nbytes: float) -> float:
        return 3e-6 + 7 * nbytes / bw

    small, large = 16 * KIB, 64 * MIB
    assert oneshot_s(small) < ring_s(small) and ring_s(large) < oneshot_s(large)
    assert ctx.collective_s(Collective.ALL_REDUCE, small, group) == pytest.approx(oneshot_s(small))
    assert ctx.collective_s(Collective.ALL_REDUCE, large, group) == pytest.approx(ring_s(large))
    # Without the field the ring prices every size, as before the term.
    ring_only = h100_context({**fields, "allreduce_oneshot_us": None})
    assert ring_only.collective_s(Collective.ALL_REDUCE, small, group) == pytest.approx(ring_s(small))
    # Only all-reduces have a one-shot kernel, and only inside the scale-up domain.
    assert ctx.collective_s(Collective.ALL_GATHER, small, group) == pytest.approx(
        ring_only.collective_s(Collective.ALL_GATHER, small, group))
    two_nodes = h100_context(fields, "2x8xH100")
    across = range(0, 16, 2)
    assert two_nodes.collective_s(Collective.ALL_REDUCE, small, across) == pytest.approx(
        h100_context({**fields, "allreduce_oneshot_us": None}, "2x8xH100").collective_s(
            Collective.ALL_REDUCE, small, across))


def synthetic_points(factors: AllReduceFactors) -> list[AllReducePoint]:
    out = []
    for n in (2, 8):
        for nbytes in (16 * KIB, 256 * KIB, 2 * MIB, 16 * MIB, 64 * MIB):
            point = ("H100-SXM", n, nbytes, 1.0)
            out.append((point[0], n, nbytes, allreduce_seconds(point, factors)))
    return out


def test_the_fit_recovers_the_factors_that_priced_the_points():
    pytest.importorskip("scipy")
    truth = AllReduceFactors(0.8, 1.6, 4.0)
    fitted = allreduce_fit(synthetic_points(truth), oneshot=True)
    assert fitted.scaleup_bw_efficiency == pytest.approx(0.8, rel=1e-3)
    assert fitted.collective_latency_scale == pytest.approx(1.6, rel=1e-3)
    assert fitted.allreduce_oneshot_us == pytest.approx(4.0, rel=1e-3)
    ring = allreduce_fit(synthetic_points(AllReduceFactors(0.8, 1.6, None)), oneshot=False)
    assert ring.allreduce_oneshot_us is None and ring.scaleup_bw_efficiency == pytest.approx(0.8, rel=1e-3)


def measured_custom_allreduces() -> list[AllReducePoint]:
    from benchmarks.accuracy import OPS_CSV

    out = []
    with open(OPS_CSV, newline="", encoding="utf-8") as fh:
        for r in csv.DictReader(fh):
            if r["op"] == "all_reduce" and "custom AR" in r["backend"]:
                n = int(re.search(r"num_gpus=(\d+)", r["shape_params"]).group(1))  # type: ignore[union-attr]
                elements = int(re.search(r"elements=(\d+)", r["shape_params"]).group(1))  # type: ignore[union-attr]
                out.append((get_gpu(r["gpu"]).name, n, elements * 2, float(r["latency_us"]) * 1e-6))
    return out


def test_ring_and_one_shot_follow_the_measured_custom_all_reduce_where_the_ring_alone_cannot():
    pytest.importorskip("scipy")
    from benchmarks.accuracy import OPS_CSV

    points = measured_custom_allreduces()
    assert len(points) == 12  # H100 and H200, 2 and 8 GPUs, 16 KiB / 2 MiB / 64 MiB
    ops = op_factors(OPS_CSV)
    assert ops.oneshot is not None
    both = ops.oneshot
    ring = AllReduceFactors(ops.scaleup_bw_efficiency, ops.collective_latency_scale, None)

    def worst(factors: AllReduceFactors) -> float:
        return max(abs(math.log(allreduce_seconds(p, factors) / p[3])) for p in points)

    # The ring alone misses some point by 2x or more (16 KiB on 8 GPUs); with the one-shot every point is
    # priced within 25 % of what it measured, the 64 MiB prefill-sized message on 8 GPUs included.
    assert worst(ring) > math.log(2.0)
    assert worst(both) < math.log(1.25)
    eight_64mib = next(p for p in points if p[0] == "H100-SXM" and p[1] == 8 and p[2] == 64 * MIB)
    assert allreduce_seconds(eight_64mib, both) / eight_64mib[3] < allreduce_seconds(eight_64mib, ring) / eight_64mib[3]
    # A one-shot kernel of a few microseconds, the ring's steps no slower than a few link latencies.
    assert 1.0 < both.allreduce_oneshot_us < 10.0  # type: ignore[operator]
    assert 0.3 < both.scaleup_bw_efficiency <= 1.75
