"""Solve a planning problem: the one search driver, and the decoding of its layout into a Plan.

``optimise`` picks the search: a decided batch (throughput without --batch, an integer per attention
group) is found by the branch and bound of ``batch_search.py`` on the oracle's integer tables, exact
and proven, without OR-Tools; everything else by CP-SAT on the encoding with every rule posted
(``cpsat_search.py``: the objective as users measure it, improvement steps from an oracle incumbent
until none is better, then the tie-break: fewer GPUs, fewer stages, the smallest shape).

``solve`` runs it on the problem, ``enumerate`` on each pinned (shape, stage count) pair, the
report's runner-up with the winner's pair excluded. ``decode`` turns its layout into a priced,
checked Plan, the experts placed, for all three.
"""

from __future__ import annotations

import time
from collections.abc import Collection

from shardplan.models.errors import InfeasibleError
from shardplan.rules.base import Diagnostic
from shardplan.rules.catalog import check_plan, errors_of
from shardplan.rules.layout import Layout
from shardplan.rules.plan import Plan
from shardplan.rules.problem import Objective, Problem
from shardplan.solver.batch_search import best_integer_batch, tokens_per_s
from shardplan.solver.bound import relative_gap
from shardplan.solver.cost.evaluate import evaluate, resolve_profile
from shardplan.solver.oracle import Oracle
from shardplan.solver.placement.plan import PlanPlacement, place_for_layout, priced
from shardplan.solver.search_base import NODE_WORK, Deadline, NoPlan, Optimum, Seed, check_switches
from shardplan.solver.space import SearchSpace, Shape
from shardplan.solver.tables import build_tables

__all__ = ["Deadline", "NoPlan", "Optimum", "decode", "optimise", "solve"]


def optimise(
    problem: Problem,
    deadline: Deadline,
    *,
    only_pins: bool = False,
    excluded: Collection[tuple[Shape, int]] = (),
    seed: Seed = Oracle.incumbent,
) -> Optimum | NoPlan:
    """The best layout of ``problem`` under its objective, tie-broken; ``NoPlan`` if none keeps every rule.

    ``only_pins`` narrows the search space to the pinned values (enumeration pins each pair);
    ``excluded`` lists (stage shape, stage count) pairs no plan may use, in the model and in the
    oracle that seeds it; ``seed`` picks the oracle's incumbent. Raises SolverLimitError when the
    deadline passes before any plan is found; a plan found by then comes back unproven, with a bound.
    The tables and the incumbent come before the model, so that a deadline passing while the model is
    built still leaves a plan (cpsat_search.py ``_settle``).

    A decided batch (throughput without --batch) is an integer per attention group: the layout and
    the batch are found together by branch and bound on the oracle's tables (batch_search.py), exact
    over every integer batch and proven unless the deadline ends it first; ``seed`` is not used then.
    """
    check_switches(problem)
    if SearchSpace(problem, resolve_profile(problem)).decides_batch:
        return _integer_batch(problem, deadline, only_pins, excluded)
    # Lazily on purpose: OR-Tools (it imports pandas and numpy) is a large share of a short command's
    # start-up, and the integer-batch search above does not use it. Loading it is not search time.
    with deadline.paused():
        from shardplan.solver.cpsat_search import run_search

    return run_search(problem, deadline, only_pins, excluded, seed)


def _integer_batch(
    problem: Problem, deadline: Deadline, only_pins: bool, excluded: Collection[tuple[Shape, int]]
) -> Optimum | NoPlan:
    """A decided batch: the best layout and integer batch by branch and bound on the oracle's tables
    (batch_search.py), proven optimal unless the deadline ends it first."""
    space = SearchSpace(problem, resolve_profile(problem), only_pins=only_pins, ranges=False)
    tables = build_tables(problem, space, deadline.check, lazy=True)

    def passed() -> bool:  # asked once per node after the first plan: a node is work (Deadline)
        deadline.spend(NODE_WORK)
        return deadline.passed()

    found = best_integer_batch(Oracle(tables, excluded), passed, deadline.check)
    if found.best is None:  # the search ran to the end: no plan exists
        if deadline.passed():  # explain() then names every rule without a model: no more pricing
            return NoPlan(tables)
        # explain() builds its encoding from these tables: every pair of the space priced.
        return NoPlan(build_tables(problem, space, reuse=tables))
    best = found.best
    exact = best.tokens * problem.workload.osl * 1e9 / best.e2e_ns
    if found.open_bound is None:
        return Optimum(best.layout, True, round(exact))
    bound = tokens_per_s(found.open_bound, problem.workload.osl)
    gap = relative_gap(exact, bound, Objective.THROUGHPUT)
    return Optimum(best.layout, gap == 0.0, round(exact), None if gap == 0.0 else bound, gap or None)


def solve(problem: Problem, time_limit_s: float | None = None, deadline: Deadline | None = None) -> Plan:
    """The optimal plan, or raises ``InfeasibleError`` naming the conflicting rules. ``deadline``, when
    given, replaces ``time_limit_s``'s (the caller then reads the work the search did from it)."""
    started = time.perf_counter()
    deadline = deadline or Deadline(time_limit_s)
    result = optimise(problem, deadline)
    if isinstance(result, NoPlan):
        # Lazily on purpose: explaining builds CP-SAT models (OR-Tools, see optimise), rarely needed.
        with deadline.paused():
            from shardplan.solver.explain import explain

        raise InfeasibleError(explain(problem, result.tables, deadline))
    status = "optimal" if result.proven else "feasible"
    plan = decode(problem, result.layout, status, result.objective_value, time.perf_counter() - started)
    if result.proven:
        return plan
    return plan.model_copy(update={"bound": result.bound, "gap": result.gap})


def decode(
    problem: Problem,
    layout: Layout,
    status: str,
    value: int | None = None,
    elapsed_s: float | None = None,
    experts: PlanPlacement | None = None,
) -> Plan:
    """The plan with the cost model's prediction; every rule's check must pass.

    For a MoE model the experts are placed for the chosen layout (``solver/placement/plan.py``) and
    the prediction prices each MoE layer at its placement's max/mean load: the search priced them all
    at the layers' mean, so ``metrics`` may differ from ``objective_value`` when the routing is skewed.
    ``experts``: the layout's placement when the caller has it already (it is the same for every
    replica count, so enumeration places once per layout and decodes each replica count with it).
    """
    if experts is None:
        experts = place_for_layout(problem, layout)
    placed, prediction = priced(problem, layout, experts)
    plan = Plan(
        problem=problem,
        layout=placed,
        prediction=prediction,
        status=status,
        objective_value=value,
        solve_time_s=elapsed_s,
        experts=experts,
    )
    violations = errors_of(check_plan(plan))
    if violations:
        _reject(problem, layout, violations, experts is not None)
    return plan


def _reject(problem: Problem, layout: Layout, violations: list[Diagnostic], placed: bool) -> None:
    """A plan that breaks a check: a bug, unless only the placement's per-layer imbalance, priced in after
    the search's per-EP mean, broke a limit the search kept (a TPOT or TTFT limit) — then the user hears so."""
    bare = Plan(problem=problem, layout=layout, prediction=evaluate(problem, layout), status="evaluated")
    if not placed or any(d.rule.startswith("EXP-") for d in violations) or errors_of(check_plan(bare)):
        # the encoding and the checks disagree: a bug, never a user error
        raise AssertionError("solver returned a plan that breaks " + "; ".join(map(str, violations)))
    note = (
        "once the expert placement's imbalance is priced layer by layer (the layout search plans at the "
        "layers' mean imbalance, "
        "so another layout may still hold: pin one with --dp/--pp/--tp/--attn-dp, or relax the limit)"
    )
    raise InfeasibleError([(d.rule, f"{d.message} {note}") for d in violations])
