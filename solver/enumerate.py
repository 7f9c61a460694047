"""Enumerate every feasible layout: each distinct assignment of degrees, with its best stage
boundaries and batch, and its predicted metrics; then the Pareto frontier of latency against
throughput.

Every candidate (stage shape, stage count) of the search space gets a small CP-SAT model of its
own, every rule on and the pair pinned: infeasible proves the pair has no plan; otherwise the
model's optimum under the problem's objective, with one replica, gives the pair's best
boundaries and batch, found by ``solve``'s own driver (``optimise``). Replicas only multiply
throughput, so every replica count that fits the cluster is a layout of its own, and each is
decoded as ``solve`` decodes its plan: experts placed and priced, every check run. A layout whose
placement's imbalance breaks a TTFT or TPOT limit is not feasible and is left out. (One model
per pair beat "solve, forbid that pair, repeat" on the full model by 10-50x: each small model
presolves in milliseconds. ``enumerate_all_solutions`` would count auxiliary variables too and
cannot take an objective — CPSAT-NOTES.) Stage boundaries themselves are not enumerated: their
count explodes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from shardplan.models.errors import InfeasibleError
from shardplan.rules.layout import Layout
from shardplan.rules.plan import Plan
from shardplan.rules.problem import Pins, Problem
from shardplan.solver.cost.evaluate import resolve_profile
from shardplan.solver.optimise import Deadline, NoPlan, decode, optimise
from shardplan.solver.oracle import Candidate, Oracle
from shardplan.solver.placement.plan import PlanPlacement, place_for_layout
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
        degrees = dict(tp=shape.tp, sp=shape.sp, attn_dp=shape.attn_dp, expert_tp=shape.expert_tp, pp=stages)
        pins = problem.pins.model_copy(update={**degrees, "dp": problem.pins.dp or 1})
        if _conflicts_with_user_pins(problem, pins):
            continue
        layout = _best_of_pair(problem.model_copy(update={"pins": pins}), deadline)
        if progress:
            progress(done, len(pairs))
        if layout is None:
            continue
        top = problem.cluster.num_gpus // (stages * shape.gpus)
        experts = place_for_layout(problem, layout)  # every replica count shares the first replica's placement
        for dp in ([problem.pins.dp] if problem.pins.dp else range(1, top + 1)):
            # Each replica repeats the first one's placement; the record counts the replicas of this plan.
            copies = experts if experts is None else replace(experts, replicas=dp)
            plan = _plan(problem, layout.model_copy(update={"dp": dp}), copies)
            if plan is None:
                continue
            yield plan
            emitted += 1
            if limit is not None and emitted >= limit:
                return


def _conflicts_with_user_pins(problem: Problem, pins: Pins) -> bool:
    user = problem.pins
    return any(getattr(user, f) not in (None, getattr(pins, f)) for f in ("tp", "sp", "attn_dp", "expert_tp", "pp"))


def _best_of_pair(problem: Problem, deadline: Deadline) -> Layout | None:
    """The best layout of a problem whose shape and stage count are pinned, or None."""
    result = optimise(problem, deadline, only_pins=True, seed=_even_stage_optimum)
    return None if isinstance(result, NoPlan) else result.layout


def _even_stage_optimum(oracle: Oracle) -> Candidate | None:
    """The seed of one pair's search: the oracle's best with even stages, every batch option tried
    (one pair has few, so they are all cheap)."""
    return oracle.optimum(exact=False)


def _plan(problem: Problem, layout: Layout, experts: PlanPlacement | None) -> Plan | None:
    """``solve``'s decoding of one layout, or None when its expert placement breaks a limit."""
    try:
        return decode(problem, layout, "feasible", experts=experts)
    except InfeasibleError:
        return None


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
