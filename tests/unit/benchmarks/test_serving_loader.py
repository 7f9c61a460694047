"""The serving benchmark's loader: every run it keeps is a layout that can be priced, and every row it
sets aside carries one of the documented reasons."""

import csv

import pytest

from benchmarks.accuracy.serving import ENGINES, SERVING_CSV, SKIP_REASONS, SOURCE, ServingRun, load_runs


@pytest.fixture(scope="module")
def loaded() -> tuple[list[ServingRun], dict[str, int]]:
    if not SERVING_CSV.is_file():  # benchmarks/accuracy/data, or SHARDPLAN_CALIBRATION_DIR
        pytest.skip(f"{SERVING_CSV} is absent")
    runs, skipped = load_runs()
    return runs, dict(skipped)


def test_runs_are_priceable_layouts(loaded: tuple[list[ServingRun], dict[str, int]]) -> None:
    runs, _ = loaded
    assert runs
    for run in runs:
        assert run.concurrency > 0, run.label
        assert run.layout.num_gpus == run.problem.cluster.num_gpus, run.label
        assert run.layout.dp * run.layout.batch == run.concurrency, run.label
        assert run.ttft_ms > 0 and run.tpot_ms > 0, run.label
        assert run.engine in ENGINES, run.label


def test_layout_gpus_match_the_rows(loaded: tuple[list[ServingRun], dict[str, int]]) -> None:
    """The row's num_gpus, read back from the CSV by the run's key."""
    runs, _ = loaded
    with open(SERVING_CSV, newline="", encoding="utf-8") as f:
        num_gpus = {row["source"]: int(row["num_gpus"]) for row in csv.DictReader(f)
                    if row["source_id"] == SOURCE}
    for run in runs:
        assert run.layout.num_gpus == num_gpus[run.key], run.label


def test_skip_reasons_are_documented(loaded: tuple[list[ServingRun], dict[str, int]]) -> None:
    _, skipped = loaded
    assert set(skipped) <= set(SKIP_REASONS)
    assert all(count > 0 for count in skipped.values())


def test_runs_are_priced_for_their_own_engine(loaded: tuple[list[ServingRun], dict[str, int]]) -> None:
    """Each run's problem names the engine that measured it, so evaluate picks that engine's profile."""
    runs, _ = loaded
    for run in runs:
        assert run.problem.engine == run.engine, run.label
