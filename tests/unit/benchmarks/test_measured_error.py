"""The error bars plans quote (``hardware/measured_error.json``): stored as the accuracy benchmark computes them
today, and the benchmark's medians checked on runs whose errors are set by hand."""

from __future__ import annotations

import json
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from benchmarks.accuracy.measured_error import compute, per_engine, serialised
from shardplan.hardware.measured_error import MEASURED_ERROR_FILE, measured_errors


@dataclass(frozen=True)
class _Priced:
    run: Any
    ttft_error: float
    tpot_error: float


def _priced(engine: str, gpu: str, ttft: float, tpot: float, concurrency: int) -> _Priced:
    problem = SimpleNamespace(cluster=SimpleNamespace(gpu=SimpleNamespace(name=gpu)))
    layout = SimpleNamespace(concurrency=concurrency)  # how a disaggregated run counts its requests in flight
    return _Priced(SimpleNamespace(engine=engine, problem=problem, layout=layout), ttft, tpot)


def test_the_medians_are_those_of_the_runs_errors_whole_and_per_band():
    priced = [_priced("sglang", "H200-SXM", 0.10, -0.05, 4), _priced("sglang", "B200-SXM", -0.30, 0.02, 16),
              _priced("sglang", "H200-SXM", 0.20, 0.01, 200), _priced("vllm", "H100-SXM", -0.5, 0.4, 1)]
    table = per_engine(priced)
    assert list(table) == ["vllm", "sglang"]  # the engines' order, only those with runs
    # |TTFT| 0.10, 0.30, 0.20 -> 0.20; signed 0.10, -0.30, 0.20 -> 0.10; |TPOT| 0.05, 0.02, 0.01 -> 0.02.
    # Bands with runs only: 2-16 holds 4 and 16 (|TTFT| 0.10, 0.30 -> 0.20; signed -> -0.10), 129+ holds 200.
    assert table["sglang"] == {
        "runs": 3, "gpus": ["B200-SXM", "H200-SXM"],
        "ttft": {"median_abs": 0.2, "median": 0.1}, "tpot": {"median_abs": 0.02, "median": 0.01},
        "bands": [
            {"low": 2, "high": 16, "runs": 2, "ttft": {"median_abs": 0.2, "median": -0.1},
             "tpot": {"median_abs": 0.035, "median": -0.015}},
            {"low": 129, "high": None, "runs": 1, "ttft": {"median_abs": 0.2, "median": 0.2},
             "tpot": {"median_abs": 0.01, "median": 0.01}},
        ]}
    assert table["vllm"]["ttft"] == {"median_abs": 0.5, "median": -0.5}
    assert [(b["low"], b["high"]) for b in table["vllm"]["bands"]] == [(1, 1)]


def test_the_stored_figures_are_what_the_benchmark_computes_today():
    # A cost-model change that moves them must rewrite the file (python -m benchmarks.accuracy.measured_error
    # --write): plans would otherwise quote error bars nobody measured.
    assert MEASURED_ERROR_FILE.read_text(encoding="utf-8") == serialised(compute())


def test_every_engine_has_figures_in_both_modes_and_they_read_back_as_stored():
    stored = json.loads(MEASURED_ERROR_FILE.read_text(encoding="utf-8"))
    errors = measured_errors()
    for mode in ("colocated", "disagg"):
        for engine in ("vllm", "sglang", "trtllm"):
            found = errors.of(engine, mode)  # type: ignore[arg-type]
            assert found is not None and found.runs == stored[mode][engine]["runs"]
            # Half the runs are at least |median| away on the median's side, so the median of |e| is no smaller.
            assert abs(found.ttft.median) <= found.ttft.median_abs
            assert abs(found.tpot.median) <= found.tpot.median_abs
