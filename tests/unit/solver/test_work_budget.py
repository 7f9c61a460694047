"""A search bounded by work, not the clock (``search_base.Deadline``): the runner-up without --time-limit.

A wall-clock budget made the human view's runner-up line ("optimal", "feasible" or "no runner-up found")
depend on the machine's load. Work is CP-SAT's deterministic time plus the branch and bound's nodes, so
a search cut short by it ends at the same place on every run."""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from click.testing import CliRunner
from ortools.sat.python import cp_model

from shardplan.rules.layout import Layout
from shardplan.solver.cost.disagg import resolve_profile, steady_states
from shardplan.solver.cost.evaluate import decode_round_ns, evaluate, evaluations
from shardplan.solver.cpsat_search import solve_within
from shardplan.solver.disagg import brute
from shardplan.solver.disagg.deploy import Pools
from shardplan.solver.disagg.search import build_pools
from shardplan.solver.optimise import solve
from shardplan.solver.outputs import report
from shardplan.solver.outputs.report import runner_up
from shardplan.solver.search_base import (
    CHECK_WORK,
    EVALUATE_WORK,
    NODE_WORK,
    ROUND_WORK,
    STEADY_WORK,
    STEP_LIMIT_S,
    STEP_WORK,
    WORK_FLOOR,
    Deadline,
)
from tests.factory import problem

cli_main = importlib.import_module("shardplan.solver.cli.main")  # the package's ``main`` is the entry point


def _without_seconds(found: report.RunnerUp) -> dict[str, Any]:
    out = found.to_dict()
    out.pop("seconds")
    return out


def test_work_is_counted_and_ends_the_search() -> None:
    deadline = Deadline(None, work_limit=1.0)
    assert not deadline.passed() and deadline.step() is None  # no clock: a step is bounded by work
    assert deadline.step_work() == STEP_WORK and deadline.work_left() == 1.0
    deadline.spend(1.0 - STEP_WORK / 2)
    assert deadline.step_work() == pytest.approx(STEP_WORK / 2) and not deadline.passed()  # what is left
    deadline.spend(STEP_WORK / 2)
    assert deadline.passed() and deadline.work_left() == WORK_FLOOR
    assert deadline.no_plan().startswith("work-limit: no plan found within 1 unit of work (")


def test_an_exact_check_counts_itself_and_each_evaluation_it_makes() -> None:
    p = problem("llama-3.1-8b", "2xH100")
    deadline = Deadline(None, work_limit=CHECK_WORK + EVALUATE_WORK + CHECK_WORK / 2)
    with deadline.checking():
        evaluate(p, Layout(tp=2, stages=((0, p.model.num_layers),)))
    assert deadline.work_done == pytest.approx(CHECK_WORK + EVALUATE_WORK) and not deadline.passed()
    with deadline.checking():
        pass  # a check that priced nothing (its pricing cached) is still one check
    assert deadline.passed() and deadline.by_work()
    assert deadline.no_plan() == ("work-limit: no plan found within 0.0055 units of work (--work-limit 0 "
                                  "searches to the end)")


def test_a_decode_round_priced_alone_counts_its_own_work_not_an_evaluate_call_s() -> None:
    """A disaggregated check's steady states price the decode round alone at each batch they try
    (``decode_round_ns``): each is ``ROUND_WORK``, its measured cost, not a whole ``evaluate``'s."""
    p = problem("llama-3.1-8b", "2xH100")
    deadline = Deadline(None)
    with deadline.checking():
        decode_round_ns(p, Layout(tp=2, stages=((0, p.model.num_layers),)))
        decode_round_ns(p, Layout(tp=2, stages=((0, p.model.num_layers),), batch=8))
    assert deadline.work_done == pytest.approx(CHECK_WORK + 2 * ROUND_WORK)
    assert ROUND_WORK < EVALUATE_WORK


def test_a_disaggregated_check_counts_each_steady_state_it_solves() -> None:
    """A deployment's exact check (``Pools.served``) bisects the requests in flight, a steady state each: with
    its prices memoised (judged twice) the second check is one check and its steady states, nothing else."""
    p = problem("llama-3.1-8b", "4xH100", isl=2000, osl=200, ttft_ms=2000, tpot_ms=30, objective="throughput")
    pools = build_pools(p, resolve_profile(p))
    c = next(c for c in brute.choices(pools) if pools.rate(c) > 0)
    pools.served(c)  # every price it needs, memoised
    again = Pools(pools.problem, pools.profile, pools.prefill, pools.decode)  # its own memo of judgements
    deadline = Deadline(None)
    evaluated, states = evaluations(), steady_states()
    again.checked_served(c, deadline)
    solved = steady_states() - states
    assert evaluations() == evaluated and solved > 1
    assert deadline.work_done == pytest.approx(CHECK_WORK + STEADY_WORK * solved)


def test_with_both_limits_the_message_names_the_one_that_ran_out() -> None:
    deadline = Deadline(3600.0, work_limit=1.0)
    assert deadline.no_plan() == "time-limit: no plan found within 3600 s"  # neither ran out: the clock's
    deadline.spend(1.0)  # the work limit runs out long before the hour
    assert deadline.within() == "1 unit of work"
    assert deadline.no_plan("layout").startswith("work-limit: no layout found within 1 unit of work (")


@pytest.mark.parametrize(("limit", "said"), [(1.0, "1 unit of work"), (2.0, "2 units of work"),
                                             (0.5, "0.5 units of work"), (15.0, "15 units of work")])
def test_a_work_limit_is_named_in_the_singular_only_for_one(limit: float, said: str) -> None:
    deadline = Deadline(None, work_limit=limit)
    assert deadline.within() == said


def test_without_a_limit_steps_are_bounded_by_work_and_work_ends_nothing() -> None:
    deadline = Deadline(None)
    assert deadline.step() is None and deadline.step_work() == STEP_WORK and deadline.work_left() is None
    deadline.spend(10**6)
    assert not deadline.passed()


def test_a_clock_limit_bounds_steps_by_the_clock() -> None:
    deadline = Deadline(60.0)
    assert deadline.step() == STEP_LIMIT_S and deadline.step_work() is None
    assert Deadline(0.2).step() is not None and Deadline(0.2).step() <= 0.2  # type: ignore[operator]


def test_a_cpsat_solve_spends_its_deterministic_time() -> None:
    model = cp_model.CpModel()
    xs = [model.new_int_var(0, 10, f"x{i}") for i in range(6)]
    model.add(sum(xs) == 31)
    model.maximize(sum((i + 1) * x for i, x in enumerate(xs)))
    deadline = Deadline(None)
    solver, status = solve_within(deadline, model, None)
    assert status == cp_model.OPTIMAL
    assert deadline.work_done == solver.deterministic_time > 0


def test_the_branch_and_bound_counts_a_node_as_work() -> None:
    deadline = Deadline(None)
    solve(problem("llama-3.1-70b", "2x8xH100", objective="throughput"), deadline=deadline)
    nodes = deadline.work_done / NODE_WORK
    assert nodes >= 1 and abs(nodes - round(nodes)) < 1e-6  # only nodes: this search has no CP-SAT


@pytest.mark.parametrize("kw", [dict(objective="throughput"), dict(batch=64)])
def test_a_runner_up_cut_short_by_work_is_the_same_every_time(kw: dict[str, Any]) -> None:
    plan = solve(problem("llama-3.1-70b", "2x8xH100", **kw))
    ample = runner_up(plan, time_limit_s=None, work_limit=5.0)
    assert ample.proven and ample.plan is not None
    for work in (WORK_FLOOR, 0.003):
        first = runner_up(plan, time_limit_s=None, work_limit=work)
        assert _without_seconds(first) == _without_seconds(runner_up(plan, time_limit_s=None, work_limit=work))
        if first.plan is not None:  # what a cut search reached is never better than the proven runner-up
            got, best = first.plan.prediction.metrics, ample.plan.prediction.metrics
            if plan.problem.objective.value == "throughput":
                assert got.output_tokens_per_s <= best.output_tokens_per_s + 1e-6
            else:
                assert got.e2e_ms >= best.e2e_ms - 1e-6
    # The integer-batch search stops within its first node's work: unproven there (measured), proven given more.
    if kw.get("objective") == "throughput":
        assert not runner_up(plan, time_limit_s=None, work_limit=WORK_FLOOR).proven


def test_without_a_time_limit_the_cli_bounds_the_runner_up_by_work(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[float | None, float | None]] = []
    real = report.runner_up

    def spy(plan: Any, time_limit_s: float | None = 10.0, work_limit: float | None = None) -> report.RunnerUp:
        asked.append((time_limit_s, work_limit))
        return real(plan, time_limit_s, work_limit)

    monkeypatch.setattr(report, "runner_up", spy)
    args = ["solve", "--model", "llama-3.1-8b", "--cluster", "2xH100", "--runner-up"]
    assert CliRunner().invoke(cli_main.cli, args).exit_code == 0
    assert asked == [(None, cli_main.RUNNER_UP_MIN_WORK)]  # this plan's search did less than a third of it
    assert CliRunner().invoke(cli_main.cli, [*args, "--time-limit", "30"]).exit_code == 0
    wall, work = asked[1]
    assert work is None and wall is not None and 0 < wall <= 30  # a limit given: the clock, what it leaves
