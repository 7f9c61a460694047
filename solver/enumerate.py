"""Enumerate every feasible layout: each distinct assignment of degrees, with its best stage
boundaries and batch, and its predicted metrics; then the Pareto frontier of latency against
throughput.

Every candidate (stage shape, stage count) of the search space gets a small CP-SAT model of its
own, every rule on and the pair pinned: infeasible proves the pair has no plan; otherwise the
model's optimum under the problem's objective, with one replica, gives the pair's best
boundaries and batch, found the way ``solve`` finds an optimum. Replicas only multiply
throughput, so every replica count that fits the cluster is a layout of its own. (One model
per pair beat "solve, forbid that pair, repeat" on the full model by 10-50x: each small model
presolves in milliseconds. ``enumerate_all_solutions`` would count auxiliary variables too and
cannot take an objective — CPSAT-NOTES.) Stage boundaries themselves are not enumerated: their
count explodes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ortools.sat.python import cp_model

from shardplan.rules.catalog import check_plan, errors_of
from shardplan.rules.layout import Layout
from shardplan.rules.plan import Plan
from shardplan.rules.problem import Objective, Problem
from shardplan.solver.cost.evaluate import evaluate, resolve_profile
from shardplan.solver.optimise import (
    Deadline,
    build_model,
    e2e_expr,
    enforce_all,
    maximise_throughput,
    minimise_latency,
    parameters,
    read_layout,
    throughput_terms,
)
from shardplan.solver.oracle import Oracle
from shardplan.solver.space import SearchSpace, Shape


@dataclass(frozen=True)
class Enumerated:
    index: int
    plan: Plan
    pareto: bool = False


def candidate_pairs(problem: Problem) -> list[tuple[Shape, int]]:
    """Every (shape, stage count) of the search space whose GPUs fit the cluster once."""
    space = SearchSpace(problem, resolve_profile(problem))
    return [(o, S) for o in space.shapes for S in space.stage_values if S * o.gpus <= space.num_gpus]


def enumerate_plans(
    problem: Problem,
    limit: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    time_limit_s: float | None = None,
) -> Iterator[Plan]:
    """Yield every feasible layout's plan (all replica counts), at most ``limit`` of them."""
    deadline = Deadline(time_limit_s)
    pairs = candidate_pairs(problem)
    emitted = 0
    for done, (shape, stages) in enumerate(pairs, 1):
        pins = problem.pins.model_copy(
            update=dict(tp=shape.tp, sp=shape.sp, attn_dp=shape.attn_dp, expert_tp=shape.expert_tp, pp=stages, dp=problem.pins.dp or 1)
        )
        if _conflicts_with_user_pins(problem, pins):
            continue
        layout = _best_of_pair(problem.model_copy(update={"pins": pins}), deadline)
        if progress:
            progress(done, len(pairs))
        if layout is None:
            continue
        top = problem.cluster.num_gpus // (stages * shape.gpus)
        for dp in ([problem.pins.dp] if problem.pins.dp else range(1, top + 1)):
            yield _plan(problem, layout.model_copy(update={"dp": dp}))
            emitted += 1
            if limit is not None and emitted >= limit:
                return


def _conflicts_with_user_pins(problem: Problem, pins) -> bool:
    user = problem.pins
    return any(getattr(user, f) not in (None, getattr(pins, f)) for f in ("tp", "sp", "attn_dp", "expert_tp", "pp"))


def _best_of_pair(problem: Problem, deadline: Deadline) -> Layout | None:
    """The best plan of a problem whose shape and stage count are pinned, or None."""
    model = build_model(problem, only_pins=True)
    enc, cp = model.enc, model.enc.cp
    enforce_all(model)
    incumbent = Oracle(enc.tables).optimum(exact=False)
    if problem.objective is Objective.LATENCY:
        out = minimise_latency(enc, cp, deadline, incumbent.e2e_ns if incumbent else None)
        if out.e2e is None:
            return None
        final = e2e_expr(enc) == out.e2e
    else:
        terms = throughput_terms(enc)
        a, c = (incumbent.tokens, incumbent.cycle_ns) if incumbent else (0, 1)
        out = maximise_throughput(enc, cp, terms, deadline, a, c)
        if out.tokens is None:
            return None
        final = terms.gain(cp, out.tokens, out.cycle) >= 0
    step = cp.clone()
    step.add(final)
    solver = parameters(deadline.remaining())
    if solver.solve(step) not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    return read_layout(enc, solver)


def _plan(problem: Problem, layout: Layout) -> Plan:
    plan = Plan(problem=problem, layout=layout, prediction=evaluate(problem, layout), status="feasible")
    violations = errors_of(check_plan(plan))
    if violations:
        raise AssertionError("enumeration produced a plan that breaks " + "; ".join(map(str, violations)))
    return plan


def pareto_front(plans: list[Plan]) -> list[bool]:
    """Which plans no other plan beats on both end-to-end latency and cluster throughput:
    sweep by latency, keeping the best throughput seen so far."""
    order = sorted(
        range(len(plans)),
        key=lambda i: (plans[i].prediction.metrics.e2e_ms, -plans[i].prediction.metrics.output_tokens_per_s),
    )
    marks = [False] * len(plans)
    best = float("-inf")
    for i in order:
        throughput = plans[i].prediction.metrics.output_tokens_per_s
        if throughput > best:
            marks[i] = True
            best = throughput
    return marks
