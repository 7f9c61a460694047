"""A CP-SAT solve stops at ``MOST_SOLUTIONS`` solutions and spends their work (``search_base.SOLUTION_WORK``).

CP-SAT's deterministic time hardly counts a search that finds solution after solution without a conflict:
the question below (a disaggregated proposal's shape on 65,536 GPUs, where the rate can rise one unit per
solution) found 38,214 solutions in 15 s of wall clock and 0.05 units of deterministic time, so the default
work limit let `solve --serving disagg` on 8192x8xH100 run 63 s. Counted, not timed, here."""

from __future__ import annotations

from ortools.sat.python import cp_model

from shardplan.solver.cpsat_search import solve_within
from shardplan.solver.encode import new_solver
from shardplan.solver.search_base import MOST_SOLUTIONS, SOLUTION_WORK, Deadline


def _crawl() -> cp_model.CpModel:
    """More rate per GPU, the rate bounded by both pools: each solution raises the rate by one unit."""
    cp = cp_model.CpModel()
    x, y, gpus = (cp.new_int_var(1, 65536, name) for name in ("x", "y", "gpus"))
    rate = cp.new_int_var(0, 2_778_270_203_904, "rate")
    cp.add(gpus == x + y)
    cp.add(rate <= 50_441_717 * x)
    cp.add(rate <= 42_393_039 * y)
    cp.add(300 * rate - 6_910_065_357 * gpus >= 1)
    cp.maximize(300 * rate - 6_910_065_357 * gpus)
    return cp


def test_a_crawling_search_stops_at_the_most_solutions() -> None:
    solver = new_solver(None, work_limit_s=0.05)
    status = solver.solve(_crawl())
    assert status == cp_model.FEASIBLE
    assert (solver.solutions, solver.capped) == (MOST_SOLUTIONS, True)
    assert solver.deterministic_time < 0.05  # what the work limit alone saw


def test_the_capped_solve_spends_its_solutions_work() -> None:
    deadline = Deadline(None, work_limit=15.0)
    solver, _ = solve_within(deadline, _crawl(), None, 0.05)
    assert solver.capped
    assert deadline.work_done >= MOST_SOLUTIONS * SOLUTION_WORK


def test_a_solve_under_the_cap_spends_only_its_deterministic_time() -> None:
    cp = cp_model.CpModel()
    x = cp.new_int_var(0, 10, "x")
    cp.maximize(x)
    deadline = Deadline(None, work_limit=15.0)
    solver, status = solve_within(deadline, cp, None)
    assert status == cp_model.OPTIMAL and not solver.capped and solver.solutions >= 1
    assert deadline.work_done == solver.deterministic_time
