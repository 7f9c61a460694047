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
from dataclasses import replace

from shardplan.models.errors import InfeasibleError, SolverLimitError
from shardplan.rules.layout import Layout
from shardplan.rules.plan import Plan
from shardplan.rules.problem import Pins, Problem
from shardplan.solver.cost.evaluate import resolve_profile
from shardplan.solver.optimise import Deadline, NoPlan, decode, optimise
from shardplan.solver.oracle import Candidate, Oracle
from shardplan.solver.placement.plan import PlanPlacement, place_for_layout
from shardplan.solver.space import SearchSpace, Shape


def candidate_pairs(problem: Problem) -> list[tuple[Shape, int]]:
    """Every (shape, stage count) of the search space whose GPUs fit the cluster once."""
    space = SearchSpace(problem, resolve_profile(problem))
    return [(o, S) for o in space.shapes for S in space.stage_values if S * o.gpus <= space.num_gpus]


class Enumeration:
    """Every feasible layout's plan (all replica counts), yielded one at a time as it is found, at most
    ``limit`` of them, within ``time_limit_s`` (the clock) and ``work_limit`` (``search_base.Deadline``:
    the pairs' searches, and each plan priced and checked, ``Deadline.checking``). Nothing is kept between
    pairs but the running count, so the memory is one pair's. After the iteration ``partial`` says whether
    it stopped before visiting every pair and replica count (the limit, the count or an interruption); a
    pair whose search the deadline cut short is left out, as its boundaries and batch are not proven its best."""

    def __init__(
        self,
        problem: Problem,
        limit: int | None = None,
        progress: Callable[[int, int], None] | None = None,
        time_limit_s: float | None = None,
        work_limit: float | None = None,
    ):
        self.problem = problem
        self.limit = limit
        self.progress = progress
        self.deadline = Deadline(time_limit_s, work_limit)
        self.partial = True  # until the last pair is done
        self.count = 0

    def __iter__(self) -> Iterator[Plan]:
        problem = self.problem
        pairs = candidate_pairs(problem)
        for done, (shape, stages) in enumerate(pairs, 1):
            if self.deadline.passed():
                return
            degrees = dict(tp=shape.tp, sp=shape.sp, attn_dp=shape.attn_dp, expert_tp=shape.expert_tp, pp=stages)
            pins = problem.pins.model_copy(update={**degrees, "dp": problem.pins.dp or 1})
            if _conflicts_with_user_pins(problem, pins):
                continue
            try:
                best = _best_of_pair(problem.model_copy(update={"pins": pins}), self.deadline)
            except SolverLimitError:
                return
            if self.progress:
                self.progress(done, len(pairs))
            if best is None:
                continue
            yield from self._replicas(best)
            if self.limit is not None and self.count >= self.limit:
                return
        self.partial = False

    def _replicas(self, layout: Layout) -> Iterator[Plan]:
        """The pair's layout at every replica count the cluster holds (or the pinned one)."""
        problem = self.problem
        top = problem.cluster.num_gpus // layout.gpus_per_replica
        experts = place_for_layout(problem, layout)  # every replica count shares the first replica's placement
        for dp in ([problem.pins.dp] if problem.pins.dp else range(1, top + 1)):
            if self.deadline.passed() or (self.limit is not None and self.count >= self.limit):
                return
            # Each replica repeats the first one's placement; the record counts the replicas of this plan.
            copies = experts if experts is None else replace(experts, replicas=dp)
            with self.deadline.checking():  # each plan priced and checked is work (search_base.Deadline)
                plan = _plan(problem, layout.model_copy(update={"dp": dp}), copies)
            if plan is not None:
                self.count += 1
                yield plan


def enumerate_plans(
    problem: Problem,
    limit: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    time_limit_s: float | None = None,
) -> Iterator[Plan]:
    """Yield every feasible layout's plan (all replica counts), at most ``limit`` of them
    (``Enumeration`` when the caller needs to know whether it was cut short)."""
    return iter(Enumeration(problem, limit, progress, time_limit_s))


class Frontier:
    """The Pareto frontier of end-to-end latency against cluster throughput, kept as points arrive:
    only the points no earlier-or-better point beats, so its size is the frontier's, not the count's.
    The same marks as ``pareto_front`` over all the points (a point ties with an earlier equal one and
    loses)."""

    def __init__(self) -> None:
        self.points: list[tuple[float, float, int]] = []  # (e2e ms, tokens/s, index), by e2e ms

    def add(self, index: int, e2e_ms: float, tokens_per_s: float) -> tuple[bool, list[int]]:
        """(whether the point joins the frontier, the indices it pushes off it)."""
        if any(e <= e2e_ms and t >= tokens_per_s for e, t, _ in self.points):
            return False, []
        beaten = [i for e, t, i in self.points if e2e_ms <= e and tokens_per_s >= t]
        self.points = sorted([p for p in self.points if p[2] not in beaten] + [(e2e_ms, tokens_per_s, index)])
        return True, beaten

    @property
    def indices(self) -> list[int]:
        return sorted(i for _, _, i in self.points)


def _conflicts_with_user_pins(problem: Problem, pins: Pins) -> bool:
    """Whether a pair's pins contradict the user's. ``--stages`` pins the stage count too: a pair with
    another count would pin pp against its ranges (a pair the command line itself would reject)."""
    user = problem.pins
    if user.stages is not None and pins.pp != len(user.stages):
        return True
    return any(getattr(user, f) not in (None, getattr(pins, f)) for f in ("tp", "sp", "attn_dp", "expert_tp", "pp"))


def _best_of_pair(problem: Problem, deadline: Deadline) -> Layout | None:
    """The best layout of a problem whose shape and stage count are pinned, or None when it has none.
    Raises SolverLimitError when the deadline ended the pair's search before it proved its best."""
    result = optimise(problem, deadline, only_pins=True, seed=_even_stage_optimum)
    if isinstance(result, NoPlan):
        return None
    if not result.proven and deadline.passed():
        raise SolverLimitError(deadline.no_plan())
    return result.layout


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
