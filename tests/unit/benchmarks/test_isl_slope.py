"""The ISL slope of the serving benchmark: one setup at two prompt lengths, the TTFT difference measured and
predicted, worked by hand on copies of one real run."""

from dataclasses import replace

import pytest

from benchmarks.accuracy.serving import SERVING_CSV, Priced, ServingRun, isl_slopes, load_runs


@pytest.fixture(scope="module")
def run() -> ServingRun:
    if not SERVING_CSV.is_file():  # benchmarks/accuracy/data, or SHARDPLAN_CALIBRATION_DIR
        pytest.skip(f"{SERVING_CSV} is absent")
    runs, _ = load_runs()
    return next(r for r in runs if r.concurrency <= 8 and r.problem.model.moe is not None)


def _at(run: ServingRun, isl: int, measured_ms: float, predicted_ms: float) -> Priced:
    workload = run.problem.workload.model_copy(update={"isl": isl})
    copy = replace(run, problem=run.problem.model_copy(update={"workload": workload}), ttft_ms=measured_ms)
    return Priced(copy, predicted_ms, run.tpot_ms, True)


def test_slope_is_the_difference_between_the_longest_and_shortest_isl(run: ServingRun) -> None:
    # 1,024: measured 100 and 120 (median 110), predicted 150; 4,096 in between is ignored; 8,192: 300 / 450
    priced = [_at(run, 1024, 100, 150), _at(run, 1024, 120, 150), _at(run, 4096, 200, 999), _at(run, 8192, 300, 450)]
    (slope,) = isl_slopes(priced)
    assert slope.moe and slope.isl == (1024, 8192)
    assert slope.measured_ms == pytest.approx(190) and slope.predicted_ms == pytest.approx(300)
    assert slope.ratio == pytest.approx(300 / 190)


def test_no_slope_from_one_isl_noise_or_a_crowd(run: ServingRun) -> None:
    assert isl_slopes([_at(run, 1024, 100, 150), _at(run, 1024, 200, 150)]) == []  # one ISL
    assert isl_slopes([_at(run, 1024, 300, 150), _at(run, 8192, 280, 450)]) == []  # shorter prompt measured slower
    crowd = replace(run, concurrency=64)
    assert isl_slopes([_at(crowd, 1024, 100, 150), _at(crowd, 8192, 300, 450)]) == []  # more than 8 in flight
