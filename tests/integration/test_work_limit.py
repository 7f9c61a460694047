"""Without --time-limit, ``solve`` and ``enumerate`` end within a work budget (``search_base.Deadline``):
CP-SAT's deterministic time, branch-and-bound nodes and the pure-Python loops' exact checks, the same on
every machine and at any load. ``--work-limit`` sets it (0: search to the end); the default is above what
every search that proves today needs, so those print what they printed before, and a budget that ends a
search returns its best plan as ``feasible`` (every rule kept) or marks an enumeration partial, with the
same bytes on every run."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from shardplan.rules.catalog import check_plan, errors_of
from shardplan.solver.cli.results import without_timing
from shardplan.solver.optimise import solve
from shardplan.solver.outputs import report
from shardplan.solver.search_base import Deadline
from tests.factory import problem
from tests.integration.test_cli_disagg import run
from tests.integration.test_cli_serving import pool_text

LLAMA_THROUGHPUT = ["--model", "llama-3.1-70b", "--cluster", "2x8xH100", "--objective", "throughput"]
ASKED = ["--isl", "4000", "--osl", "500", "--ttft-ms", "2000", "--tpot-ms", "50"]
LLAMA_DISAGG = ["--model", "llama-3.1-70b", "--weights-dtype", "fp8", "--cluster", "8xH200", *ASKED,
                "--serving", "disagg"]
# Measured (2026-11-27): LLAMA_DISAGG's enumeration 7.2 units (809 deployments), LLAMA's colocated one 0.53 (105
# layouts). Its search proves within 0.02 units since a decode round priced alone counts ROUND_WORK (2026-12-08;
# 0.27 before), and 0.01 ends it at its seed: the same deployment, unproven (gap 13 %).
DISAGG_WORK = 0.01
ENUMERATE_WORK = "0.05"


def json_of(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code, out, err = run([*argv, "--json"], capsys)
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("argv", [LLAMA_THROUGHPUT, LLAMA_DISAGG], ids=["colocated", "disagg"])
def test_a_search_that_proves_under_the_default_prints_what_a_search_to_the_end_prints(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    default = json_of(["solve", *argv], capsys)
    assert default["status"] == "optimal"
    assert without_timing(default) == without_timing(json_of(["solve", *argv, "--work-limit", "0"], capsys))


def test_a_small_budget_returns_the_best_plan_so_far_with_its_bound(capsys: pytest.CaptureFixture[str]) -> None:
    plan = solve(problem("llama-3.1-70b", "2x8xH100", objective="throughput"), deadline=Deadline(None, 0.002))
    assert plan.status == "feasible" and plan.gap is not None and plan.gap > 0
    assert errors_of(check_plan(plan)) == []
    argv = ["solve", *LLAMA_THROUGHPUT, "--work-limit", "0.002"]
    first = json_of(argv, capsys)
    assert first["status"] == "feasible" and first["gap"] == pytest.approx(plan.gap, abs=1e-6)
    assert without_timing(first) == without_timing(json_of(argv, capsys))
    code, out, _ = run([*argv, "--no-runner-up"], capsys)  # the human view says what ended it
    assert code == 0 and "--work-limit 0.002 ended the search before it proved this plan the best" in out


def test_a_small_budget_ends_the_disaggregated_search_the_same_way_every_time(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Fresh processes, as a user runs it: the cost model's caches start empty, so the work counted is the same
    # (in one process a second search may find its pricing cached, and count less).
    cmd = [sys.executable, "-m", "shardplan.solver.cli", "solve", *LLAMA_DISAGG, "--work-limit", str(DISAGG_WORK),
           "--json"]
    first, second = (json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
                     for _ in range(2))
    assert first["status"] == "feasible" and without_timing(first) == without_timing(second)
    # How far from optimal, as colocated says it: the bound is above the deployment's tokens/s per GPU.
    assert first["gap"] > 0 and first["bound"] > first["metrics"]["output_tokens_per_s_per_gpu"]
    # The deployment keeps every rule: evaluate judges its pools as given and exits 0 with no violation.
    code, out, err = run(["evaluate", *LLAMA_DISAGG, "--prefill", pool_text(first["prefill"]),
                          "--decode", pool_text(first["decode"]), "--json"], capsys)
    assert code == 0 and json.loads(out)["violations"] == [], err


@pytest.mark.parametrize("argv", [["--model", "llama-3.1-70b", "--cluster", "2x8xH100"],
                                  [*LLAMA_DISAGG]], ids=["colocated", "disagg"])
def test_a_tiny_budget_marks_the_enumeration_partial(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    cut = json_of(["enumerate", *argv, "--work-limit", ENUMERATE_WORK], capsys)
    assert cut["partial"] is True and cut["count"] > 0
    # What it found is the enumeration's first rows: the same as --limit of that many gives.
    first = json_of(["enumerate", *argv, "--limit", str(cut["count"])], capsys)
    assert without_timing(cut["plans"]) == without_timing(first["plans"])


def test_the_runner_up_gets_at_most_the_plan_s_work_limit(monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Without --time-limit the human view's runner-up gets three times the plan's work (at least 5 units),
    but never more than the plan's own limit: a plan the default limit cut short would otherwise wait three
    times as long again for its runner-up."""
    budgets: list[float | None] = []
    search = report.runner_up

    def spy(plan: Any, time_limit_s: float | None = 10.0, work_limit: float | None = None) -> Any:
        budgets.append(work_limit)
        return search(plan, time_limit_s=time_limit_s, work_limit=work_limit)

    monkeypatch.setattr(report, "runner_up", spy)
    assert run(["solve", *LLAMA_THROUGHPUT, "--work-limit", "0.002"], capsys)[0] == 0
    assert run(["solve", *LLAMA_THROUGHPUT], capsys)[0] == 0  # proves in well under 5 / 3 units: 5 units
    assert run(["solve", *LLAMA_THROUGHPUT, "--work-limit", "0"], capsys)[0] == 0  # no limit: as before
    assert budgets == [0.002, 5.0, 5.0]
