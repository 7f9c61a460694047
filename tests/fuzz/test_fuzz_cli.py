"""Fuzzing every command in-process (issue 14): config.json mutations, cluster strings, numeric flags, stage
strings, load profiles, DAG files and calibration CSVs; and the serving flags (issue 15: --serving, --rate,
--prefill/--decode pool specs, --max-batch, --engine, --emit, enumerate --serving disagg) on small clusters
with short time limits. Fixed seed (``derandomize``), so a run is repeatable; long runs with fresh seeds
and big clusters are ``python -m benchmarks.fuzz [--serving]``."""

from __future__ import annotations

import json
import random
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardplan.solver.cli.main import main
from tests.fuzz.cases import FOUND_EXTREMES, Case, draw, draw_serving
from tests.fuzz.harness import problems, run_in_process

CASES_PER_COMMAND = 1000
# A serving solve or enumeration may run for its --time-limit 0.3; a pool spec mostly ends in parsing.
SERVING_CASES = {"solve": 60, "evaluate": 400, "enumerate": 60}
FUZZ = settings(max_examples=CASES_PER_COMMAND, derandomize=True, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def dag_base(tmp_path_factory) -> dict[str, object]:
    """A real DAG file (Qwen3-30B-A3B, two stages): what the validate cases mutate."""
    path = tmp_path_factory.mktemp("dag") / "dag.json"
    main(["evaluate", "--model", "qwen3-30b-a3b", "--cluster", "4xH100", "--pp", "2", "--tp", "2"])  # warm caches
    main(["solve", "--model", "qwen3-30b-a3b", "--cluster", "4xH100", "--no-runner-up", "--dag", str(path)])
    return json.loads(path.read_text())


def check(command: str, seed: int, dag_base: dict[str, object] | None = None, serving: bool = False) -> None:
    case = draw_serving(command, random.Random(seed), quick=True) if serving else draw(command, random.Random(seed),
                                                                                       dag_base)
    with tempfile.TemporaryDirectory() as folder:
        outcome = run_in_process(case, Path(folder))
    found = problems(outcome, case)
    assert not found, (case.kind, case.argv, found)


SEEDS = st.integers(min_value=0, max_value=2**32 - 1)


@pytest.mark.parametrize("command", ["solve", "evaluate", "enumerate"])
def test_problem_commands(command: str, capsys) -> None:
    @FUZZ
    @given(seed=SEEDS)
    def one(seed: int) -> None:
        check(command, seed)

    one()


@pytest.mark.parametrize("command", ["solve", "evaluate", "enumerate"])
def test_serving_flags(command: str) -> None:
    @settings(FUZZ, max_examples=SERVING_CASES[command])
    @given(seed=SEEDS)
    def one(seed: int) -> None:
        check(command, seed, serving=True)

    one()


def test_validate(dag_base) -> None:
    @FUZZ
    @given(seed=SEEDS)
    def one(seed: int) -> None:
        check("validate", seed, dag_base)

    one()


def test_calibrate() -> None:
    pytest.importorskip("scipy")

    @FUZZ
    @given(seed=SEEDS)
    def one(seed: int) -> None:
        check("calibrate", seed)

    one()


@pytest.mark.parametrize("argv", FOUND_EXTREMES, ids=range(len(FOUND_EXTREMES)))
def test_extreme_cases_found(argv: list[str]) -> None:
    """The extremes campaign's failing inputs (each ran past 20 s under --time-limit 0.5-5): now an answer or
    one line of bad input, as every case must be."""
    case = Case(argv[0], list(argv), kind="extreme")
    with tempfile.TemporaryDirectory() as folder:
        outcome = run_in_process(case, Path(folder))
    assert not problems(outcome, case), (argv, problems(outcome, case))
