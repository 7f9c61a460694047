"""The explanation keeps to the command's deadline (robust16: on 4096x8xH200 it ran 42 s past a
--time-limit of 0.5). A solve the deadline leaves undecided stops the narrowing; what comes back still
conflicts. The undecided solves are simulated, so nothing here depends on the machine's speed."""

from __future__ import annotations

import pytest
from ortools.sat.python import cp_model

from shardplan.solver import explain as explain_module
from shardplan.solver.encode import build_model
from shardplan.solver.explain import UNNARROWED, explain
from shardplan.solver.search_base import Deadline
from tests.factory import problem


def _infeasible():
    return problem("deepseek-v3", "8xH100")  # the README's infeasible example: the weights do not fit


def _undecided_after(monkeypatch: pytest.MonkeyPatch, decided: int) -> list[tuple[float | None, float | None]]:
    """Solves past the first ``decided`` come back UNKNOWN, as at a deadline; returns their (time, work)
    limits."""
    real = explain_module.new_solver
    limits: list[tuple[float | None, float | None]] = []

    def new_solver(time_limit_s: float | None, presolve: bool = True, work_limit_s: float | None = None):
        solver = real(time_limit_s, presolve, work_limit_s)
        limits.append((time_limit_s, work_limit_s))
        if len(limits) > decided:
            solver.solve = lambda model, *a, **k: cp_model.UNKNOWN  # type: ignore[method-assign]
        return solver

    monkeypatch.setattr(explain_module, "new_solver", new_solver)
    return limits


def test_undecided_first_core_names_every_rule_in_force(monkeypatch: pytest.MonkeyPatch) -> None:
    p = _infeasible()
    _undecided_after(monkeypatch, 0)
    got = explain(p, deadline=Deadline(60.0))
    assert [rule for rule, _ in got] == [rule.id for rule in build_model(p).rules]
    assert got[-1][1].endswith(UNNARROWED)


def test_undecided_narrowing_keeps_the_first_core(monkeypatch: pytest.MonkeyPatch) -> None:
    p = _infeasible()
    full = explain(p)  # minimal, no deadline
    _undecided_after(monkeypatch, 1)
    cut = explain(p, deadline=Deadline(60.0))
    assert {rule for rule, _ in full} <= {rule for rule, _ in cut}  # a superset of the minimal set: it conflicts
    assert all(UNNARROWED not in message for _, message in cut)


def test_no_deadline_undecided_first_solve_names_every_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not an error (it was exit 2, "bad input", for a valid request: fuzz --no-limit run G, Llama-4-Scout on
    7x72xGB200, 40 s): the search proved there is no plan, so every rule in force conflicts."""
    p = _infeasible()
    _undecided_after(monkeypatch, 0)
    got = explain(p)
    assert [rule for rule, _ in got] == [rule.id for rule in build_model(p).rules]
    assert got[-1][1].endswith(explain_module.UNNARROWED_PER_SOLVE)


def test_no_deadline_undecided_narrowing_keeps_the_first_core(monkeypatch: pytest.MonkeyPatch) -> None:
    p = _infeasible()
    full = explain(p)
    _undecided_after(monkeypatch, 1)
    cut = explain(p)
    assert {rule for rule, _ in full} <= {rule for rule, _ in cut}


def test_the_solves_are_bounded_by_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    limits = _undecided_after(monkeypatch, 10**6)  # all decided: only their limits are looked at
    explain(_infeasible(), deadline=Deadline(2.0))
    assert limits and all(
        wall is not None and wall <= 2.0 + explain_module.EXPLAIN_GRACE_S and work == explain_module.SOLVE_WORK
        for wall, work in limits
    )


def test_without_a_deadline_the_solves_are_bounded_by_work_not_the_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """A wall-clock limit per solve made whether the set was narrowed depend on the machine's load; CP-SAT's
    deterministic time does not (the same set at any load)."""
    unbounded = _undecided_after(monkeypatch, 10**6)
    explain(_infeasible())
    assert unbounded and all(limit == (None, explain_module.SOLVE_WORK) for limit in unbounded)


def test_a_deadline_already_past_names_every_rule_without_a_model(monkeypatch: pytest.MonkeyPatch) -> None:
    """The search itself spent --time-limit proving there is no plan (4096x8xH200: 6.2 s of a 0.5 s limit,
    3 s of them pricing every pair and building the explanation's model): every rule in force, at once."""
    p = _infeasible()
    rules = [rule.id for rule in build_model(p).rules]

    def no_model(*args: object, **kw: object) -> None:
        raise AssertionError("built a model past the deadline")

    monkeypatch.setattr(explain_module, "build_model", no_model)
    got = explain(p, deadline=Deadline(-1.0))
    assert [rule for rule, _ in got] == rules
    assert got[-1][1].endswith(UNNARROWED)
