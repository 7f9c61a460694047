"""Offline max-throughput rows are priced as the drain of their finite request count (measures._drain_throughput)."""

from __future__ import annotations

import dataclasses

import pytest

from shardplan.hardware.profile import get_profile
from shardplan.solver.cost.calibration.measures import drain_parts, predict
from shardplan.solver.cost.calibration.points import OFFLINE_REQUESTS, points_from_rows
from shardplan.solver.cost.evaluate import evaluate, max_batch

from .test_calibrate import row

PROFILE = get_profile("h100-sxm")


def _point(isl=128, osl=4096, source="TRTLLM-PERF-v0.17", **kw):
    points, skipped = points_from_rows([row(12, "Llama-3.1-8B", "H100-SXM-80GB", 1, isl, osl, 13593.65, source=source,
                                            **kw)])
    assert not skipped
    return points[0]


def _wave_ms(point, batch):
    """One wave by hand: the prompts' chunks one after another (one stage), then OSL decode rounds."""
    bare = PROFILE.model_copy(update={"ttft_queue_share": 0.0, "request_overhead_ms": 0.0})
    pred = evaluate(point.problem, point.layout.model_copy(update={"batch": batch}), bare)
    chunks = -(-batch // pred.prefill_chunk)
    return chunks * pred.prefill_ms + point.problem.workload.osl * pred.metrics.decode_step_ms


def test_offline_rows_carry_the_documented_request_count():
    assert _point(128, 4096).requests == 1500  # perf-overview's $num_requests for 128/4096
    assert _point(128, 128, source="TRTLLM-PERF-v0.14").requests == 30000
    assert _point(1000, 2000, source="TRTLLM-PERF-v1.0").requests == 1500
    assert (300, 300) not in OFFLINE_REQUESTS and _point(300, 300).requests is None  # not in the table: steady state
    static = _point(128, 2048, source="TRTLLM-PERF-v0.9", metric="output_tokens_per_s_per_gpu", batch="64")
    assert static.requests is None  # v0.9 ran static batches


def test_whole_waves_drain_at_one_waves_rate():
    point = _point()
    top = max_batch(point.problem, point.layout, PROFILE)
    assert 1 < top < 1500
    osl = point.problem.workload.osl
    for waves in (1, 2, 3):
        got = predict(dataclasses.replace(point, requests=waves * top), PROFILE)
        assert got.batch == top
        assert got.value == pytest.approx(top * osl / (_wave_ms(point, top) / 1e3), rel=1e-9)


def test_a_partial_last_wave_costs_a_wave_of_its_own():
    point = _point()
    top = max_batch(point.problem, point.layout, PROFILE)
    osl = point.problem.workload.osl
    one_more = predict(dataclasses.replace(point, requests=top + 1), PROFILE)
    expected = (top + 1) * osl / ((_wave_ms(point, top) + _wave_ms(point, 1)) / 1e3)
    assert one_more.value == pytest.approx(expected, rel=1e-9)
    # the one sequence more still takes OSL rounds of its own: below the full waves' rate
    assert one_more.value < predict(dataclasses.replace(point, requests=top), PROFILE).value


def test_fewer_requests_than_fit_are_one_wave_of_them():
    point = _point()
    got = predict(dataclasses.replace(point, requests=100), PROFILE)
    assert got.batch == 100
    assert got.value == pytest.approx(100 * point.problem.workload.osl / (_wave_ms(point, 100) / 1e3), rel=1e-9)


def test_the_drain_splits_into_its_waves_prefill_and_decode():
    point = _point()
    top = max_batch(point.problem, point.layout, PROFILE)
    parts = drain_parts(point, PROFILE, 2 * top + 1)
    assert parts is not None and parts.batch == top
    bare = PROFILE.model_copy(update={"ttft_queue_share": 0.0, "request_overhead_ms": 0.0})
    osl = point.problem.workload.osl
    prefill_ms = decode_ms = 0.0
    for waves, size in ((2, top), (1, 1)):  # two full waves and the one request left over
        pred = evaluate(point.problem, point.layout.model_copy(update={"batch": size}), bare)
        prefill_ms += waves * -(-size // pred.prefill_chunk) * pred.prefill_ms
        decode_ms += waves * osl * pred.metrics.decode_step_ms
    assert parts.prefill_ms == pytest.approx(prefill_ms, rel=1e-12)
    assert parts.decode_ms == pytest.approx(decode_ms, rel=1e-12)
    assert parts.run_ms == pytest.approx(_wave_ms(point, top) * 2 + _wave_ms(point, 1), rel=1e-12)
