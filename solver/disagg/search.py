"""The disaggregated search: the CP-SAT pool model (``model.py``) asked for better deployments until
none exists, each proposal judged exactly (``deploy.Pools.served`` for tokens/s per GPU: what it carries
within every rule, below its full rate where only TTFT or TPOT broke there; ``feasible_plan`` at the rate
asked for ``--rate``).

- **throughput** (tokens/s per GPU; OSL is fixed, so requests/s per GPU): first the walk
  (``walk.py``): the deployments that can beat the seed, in order of a bound on what each carries within
  every rule (a pair's bound caps what a prefill worker feeds within the TTFT limit), each refused by the
  TTFT floor (``ttft_cut.ChoiceFloor``) or judged exactly, until none left can come before the best found:
  brute force's answer, proven by those bounds, and returned. Cut short, what it judged and the bounds it
  rests on (``PoolModel.cap_feed``) are posted in the model, and the search below goes on from there.
  The ratio is maximised as ``optimise`` maximises its own (Dinkelbach's parametric form): with the
  incumbent's rate ``R0`` on ``G0`` GPUs, ask for ``R x G0 - R0 x G >= 1`` (strictly better per GPU, exact
  integer arithmetic), maximising that difference; a proposal that carries less than that is capped at what
  it carries (forbidden if nothing) and the model solved again; when the model has no better deployment the
  incumbent is optimal. The model carries
  each pair's TTFT cuts (``ttft_cut.py``: only deployments the exact check refuses), and each question
  is screened without its objective first (``_screened``), which settles the last one, the proof. Ties (an equal
  ratio) are then broken toward fewer GPUs, then the first in brute force's order of choices (so the
  answer does not depend on which of equally good deployments CP-SAT met first, nor on pruning).
- **rate** (``--rate R``): the fewest GPUs whose pools sustain R. First the walk (``rate_walk.py``): the
  deployments reaching R in brute force's order, each refused by the TTFT floor at R or judged exactly at R,
  until one is accepted: brute force's answer. Cut short, the model is told that every deployment on fewer
  GPUs than where it stopped was refused, and those it refused there are forbidden; then: minimise G subject
  to the rate, a refused proposal (the TTFT floor at R first, then the exact check) forbidden (and its pair's TTFT cuts
  posted), until a proposal is accepted (then no
  deployment with fewer GPUs keeps the rules: every one the model could still propose was refused or
  costs more). Ties on those GPUs are then broken toward the most capacity (the rate the pools carry
  at full load: headroom over R), then the most capacity in both pools together, then the first in
  brute force's order, by asking for one ahead of the incumbent until none is (one proof when there
  is no tie).

A time limit that stops the search returns the incumbent as ``feasible``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from functools import partial

from ortools.sat.python import cp_model

from shardplan.hardware.profile import Profile
from shardplan.rules.disagg_plan import DisaggPlan
from shardplan.rules.problem import Problem
from shardplan.solver.cpsat_search import solve_within
from shardplan.solver.disagg.deploy import Choice, Pools, pools_capacity, units_ahead
from shardplan.solver.disagg.model import PoolModel
from shardplan.solver.disagg.rate_walk import RATE_WALK_CHOICES, rate_walk
from shardplan.solver.disagg.ttft_cut import ChoiceFloor
from shardplan.solver.disagg.walk import Walk, fed_per_gpu, pair_bound, walk
from shardplan.solver.disagg.workers import (
    RATE_UNITS_PER_RPS,
    Check,
    decode_workers,
    offers_batch_caps,
    prefill_workers,
)
from shardplan.solver.optimise import Deadline

MAX_PROPOSALS = 10_000  # a bound on the loop; each proposal is new (a refused one is forbidden)


@dataclass(frozen=True)
class DisaggResult:
    plan: DisaggPlan | None
    choice: Choice | None
    proven: bool
    proposals: int  # deployments the walk judged exactly, and those the model proposed (accepted or refused)
    # An unproven throughput answer's bound: no deployment reaches more rate units per GPU (``per_gpu_bound``);
    # None when proven, for --rate, or without a plan.
    bound_per_gpu: Fraction | None = None


def build_pools(problem: Problem, profile: Profile, check: Check = None, caps: bool | None = None) -> Pools:
    """Every prefill and decode candidate; ``check``, a deadline's, between layouts. ``caps``: the decode
    layouts also at smaller batch limits (``workers.capped_workers``); by default where a TTFT limit is
    given, the only place one can be better."""
    with_caps = offers_batch_caps(problem) if caps is None else caps
    return Pools(problem, profile, prefill_workers(problem, profile, check),
                 decode_workers(problem, profile, check=check, caps=with_caps))


def target_units(rate_rps: float) -> int:
    """``--rate`` in rate units, rounded up: a deployment must reach at least the rate asked."""
    return math.ceil(rate_rps * RATE_UNITS_PER_RPS - 1e-6)


@dataclass(frozen=True)
class Accepted:
    choice: Choice
    plan: DisaggPlan
    rate_units: int
    gpus: int


@dataclass(frozen=True)
class Asked:
    """What one question to the model ended with: the first proposal the exact check accepted (None if
    the model ran out of deployments or time), whether running out was proven, the proposals made."""

    accepted: Accepted | None
    complete: bool
    proposals: int


def _first_accepted(m: PoolModel, pools: Pools, question: Callable[[], cp_model.CpModel], deadline: Deadline,
                    target: int | None = None, screen: Callable[[], cp_model.CpModel] | None = None,
                    cut_ttft: bool = False, floor: ChoiceFloor | None = None, most: int = MAX_PROPOSALS,
                    need: Callable[[Choice], int] | None = None) -> Asked:
    """Solve ``question()`` (the model with the question's constraints and objective), judge its
    deployment (``floor``'s TTFT floor first, if given, then exactly), forbid it if refused and ask
    again, until one is accepted or none is left. ``screen()``, if given, is the question without its
    objective, asked first each time: CP-SAT proves it has no solution far sooner than it proves an
    objective has none (on 512 GPUs 13 ms against 1.2 s), and the last question of a search is that
    proof. ``cut_ttft``: a refused deployment also posts its pair's TTFT cuts (``PoolModel.cut_ttft``).
    ``most``: the proposals after which it stops, not proven.

    The judgement: at ``target`` rate units (``--rate``) or, without one, at the choice's full rate; with
    ``need`` (the per-GPU search), at the rate it carries within every rule (``Pools.served``), accepted when
    that is at least ``need(choice)``, else capped there (``PoolModel.cap_choice``; below ``need`` where the
    floor refused it at ``need``)."""
    for proposals in range(1, most + 1):
        if deadline.passed():
            return Asked(None, False, proposals - 1)
        if screen is None:
            solver, status = solve_within(deadline, question(), deadline.remaining())
        else:
            solver, status = _screened(deadline, screen(), question())
            if status == cp_model.INFEASIBLE:
                return Asked(None, True, proposals - 1)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            return Asked(None, status in (cp_model.OPTIMAL, cp_model.INFEASIBLE), proposals)
        c = m.read(solver)
        if need is not None:
            accepted = _served_enough(m, pools, c, need(c), deadline, floor)
        else:
            accepted = _at_rate(m, pools, c, target, deadline, floor)
        if accepted is not None:
            return Asked(accepted, True, proposals)
        if cut_ttft:
            m.cut_ttft(c.prefill, c.decode)
    return Asked(None, False, most)


def _at_rate(m: PoolModel, pools: Pools, c: Choice, target: int | None, deadline: Deadline,
             floor: ChoiceFloor | None) -> Accepted | None:
    """``c`` accepted at ``target`` (its full rate if None), or forbidden."""
    refused = floor is not None and floor.refuses(c, pools.rate(c) if target is None else target)
    plan = None
    if not refused:  # an exact check is work, a floor's verdict is not
        plan = pools.checked_plan(c, deadline, target)
    if plan is not None:
        return Accepted(c, plan, pools.rate(c), pools.gpus(c))
    m.forbid(c)
    return None


def _served_enough(m: PoolModel, pools: Pools, c: Choice, need: int, deadline: Deadline,
                   floor: ChoiceFloor | None) -> Accepted | None:
    """``c`` accepted at the rate it carries within every rule when that is at least ``need`` rate units;
    else its rate capped at what it carries (forbidden if nothing), or below ``need`` where the TTFT floor
    refuses it at ``need`` (then it carries less)."""
    if floor is not None and floor.refuses(c, need):
        m.cap_choice(c, need - 1)
        return None
    served = pools.checked_served(c, deadline)
    if served is None:
        m.forbid(c)
        return None
    if served.units >= need:
        return Accepted(c, served.plan, served.units, pools.gpus(c))
    m.cap_choice(c, served.units)
    return None


# Pairs of candidates up to which every pair's TTFT cuts are posted at once; beyond, a pair's cuts
# come with its first refused deployment (the model stays small when pruning left many candidates).
EAGER_CUT_PAIRS = 64
QUESTION_WORK_S = 0.05  # CP-SAT's deterministic time for a screened question's objective (reproducible)


def _screened(deadline: Deadline, screen: cp_model.CpModel, question: cp_model.CpModel,
              ) -> tuple[cp_model.CpSolver, cp_model.CpSolverStatus]:
    """``screen`` solved; if it has a solution, ``question`` within ``QUESTION_WORK_S`` of work, and
    its best solution (or the screen's if it found none in that work). Any deployment the model
    allows is a sound proposal (a refused one is forbidden, an accepted one is better than the
    incumbent); the objective only orders them, best first, and on 512 GPUs a question whose
    optimum the exact check refuses took CP-SAT 1.6 s to prove optimal."""
    solver, status = solve_within(deadline, screen, deadline.remaining())
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return solver, status
    bounded, best = solve_within(deadline, question, deadline.remaining(), QUESTION_WORK_S)
    return (bounded, best) if best in (cp_model.OPTIMAL, cp_model.FEASIBLE) else (solver, status)


# Rows of the per-GPU questions stay within this (CP-SAT refuses a row whose terms could pass 2^63).
ROW_LIMIT = 1 << 61


def per_gpu_terms(m: PoolModel, r0: int, g0: int) -> tuple[int, int, bool]:
    """(r0', g0', exact) for comparing a deployment's rate per GPU with r0 / g0 in the row ``rate x g0' -
    r0' x gpus``. Where rate's bound x g0 passes ``ROW_LIMIT`` (a --rate of 10^6 requests/s on 524,288
    GPUs), both are halved until it fits, with r0' / g0' >= r0 / g0: a deployment that beats r0' / g0'
    beats r0 / g0, so every proposal is still sound, but one between the two is missed and the search is
    not proven (``exact`` False). The cpsat_search ``Ratio.target`` of the colocated search does the same."""
    n, scale = m.pools.problem.cluster.num_gpus, 1
    while (g0 // scale) * m.top_rate + -(-r0 // scale) * n > ROW_LIMIT and g0 // scale > 1:
        scale *= 2
    if scale == 1:
        return r0, g0, True
    return -(-r0 // scale), max(1, g0 // scale), False


def _any_better(m: PoolModel, r0: int, g0: int) -> cp_model.CpModel:
    """The model asked for any deployment strictly better per GPU than ``r0`` rate units on ``g0`` GPUs
    (``per_gpu_terms``' r0', g0' where those pass 64 bits)."""
    r0, g0, _ = per_gpu_terms(m, r0, g0)
    cp = m.cp.clone()
    cp.add(m.rate * g0 - r0 * m.gpus >= 1)
    return cp


def _better_than(m: PoolModel, r0: int, g0: int) -> cp_model.CpModel:
    """The model asked for the deployment of the most gain over ``r0`` rate units on ``g0`` GPUs."""
    cp = _any_better(m, r0, g0)
    r0, g0, _ = per_gpu_terms(m, r0, g0)
    cp.maximize(m.rate * g0 - r0 * m.gpus)
    return cp


def _as_good_and_earlier(m: PoolModel, best: Accepted) -> cp_model.CpModel:
    """The model asked for a deployment as good per GPU as ``best`` on fewer GPUs, or on as many and
    earlier in brute force's order of choices: the first of the fewest GPUs (brute force's answer).
    rank = gpus x order_span + order orders them; where it passes 64 bits (524,288 GPUs: ~10^21) the same
    order is posted as 'fewer GPUs, or as many and earlier' and the fewest GPUs are asked first."""
    r0, g0, _ = per_gpu_terms(m, best.rate_units, best.gpus)
    cp = m.cp.clone()
    cp.add(m.rate * g0 - r0 * m.gpus >= 0)
    n = m.pools.problem.cluster.num_gpus
    if (n + 1) * m.order_span <= ROW_LIMIT:
        rank = m.gpus * m.order_span + m.order
        cp.add(rank <= best.gpus * m.order_span + m.order_of(best.choice) - 1)
        cp.minimize(rank)
        return cp
    fewer = cp.new_bool_var("fewer_gpus")
    cp.add(m.gpus <= best.gpus - 1).only_enforce_if(fewer)
    cp.add(m.gpus == best.gpus).only_enforce_if(~fewer)
    cp.add(m.order <= m.order_of(best.choice) - 1).only_enforce_if(~fewer)
    cp.minimize(m.gpus)
    return cp


SEED_CHECKS = 256  # exact checks the seed may spend before the search starts without one
# Worker counts the seed ranks at most, the fewest decode workers first: on 4096x8xH200 with 1-GPU
# workers every y and its x made ~10^8 choices, minutes before any time limit was looked at. Any
# deployment that keeps every rule is a sound seed, so a bounded list changes speed, never the answer.
SEED_CHOICES = 1 << 14


def seed(pools: Pools, deadline: Deadline | None = None) -> Accepted | None:
    """A first incumbent, so the model's first question is already a hard one: the prefill and the
    decode candidate of the most rate per GPU each, at the first worker counts in order of rate per GPU
    (the fewest GPUs on a tie) that keep every rule; None if none of the first ``SEED_CHECKS`` does.

    The counts tried: every y, and x from the fewest prefill workers that keep up with the y decode
    workers (or the cluster's rest) to twice that. More prefill workers than keeping up needs are the
    headroom a TTFT limit asks for: the clump of arrivals queues at the prefill pool for its time per
    prompt (``cost.disagg.serving_stack_ns``), and a pool with spare rate runs a smaller chunk. Any
    deployment that keeps every rule is a sound seed (``prune.py`` needs only that); the best of this
    pair is a high floor."""
    i = max(range(len(pools.prefill)), key=lambda j: (pools.prefill[j].capacity_units / pools.prefill[j].gpus, -j))
    k = max(range(len(pools.decode)), key=lambda j: (pools.decode[j].capacity_units / pools.decode[j].gpus, -j))
    floor = ChoiceFloor(pools)
    deadline = deadline or Deadline(None)
    for c in sorted(pools.keeping_up(i, k, SEED_CHOICES), key=pools.per_gpu_key)[:SEED_CHECKS]:
        if deadline.passed():  # no seed: the search then stops at the limit too
            return None
        plan = None
        if not floor.refuses(c, pools.rate(c)):
            plan = pools.checked_plan(c, deadline)
        if plan is not None:
            return Accepted(c, plan, pools.rate(c), pools.gpus(c))
    return None


def max_throughput(pools: Pools, deadline: Deadline) -> DisaggResult:
    """The deployment of the most tokens/s per GPU (the fewest GPUs on a tie), from the seed."""
    if not pools.prefill or not pools.decode:
        return DisaggResult(None, None, True, 0)
    return max_throughput_from(pools, seed(pools), deadline)


def max_throughput_from(pools: Pools, best: Accepted | None, deadline: Deadline) -> DisaggResult:
    """``max_throughput`` from a given incumbent (``seed(pools)``'s, or None), e.g. on the candidates
    ``prune.pruned_pools`` left, which computed it."""
    if not pools.prefill or not pools.decode:
        return DisaggResult(None, None, True, 0)
    if best is not None and deadline.passed():  # the seed is what the limit leaves: no model to build
        # (5 s on 8,192 GPUs, past --time-limit 5)
        return DisaggResult(best.plan, best.choice, False, 0, per_gpu_bound(pools, best))
    floor = ChoiceFloor(pools)
    walked = walk(pools, Fraction(best.rate_units, best.gpus) if best else Fraction(0), deadline, floor=floor)
    if walked.complete and walked.accepted is not None:
        # It judged, at what each carries, every deployment whose bound could come first: brute force's answer,
        # proven by the bounds the walk rests on. (The model, asked after it, had to rediscover pair by pair
        # what the TTFT limit leaves a prefill worker: on Llama-3.1-405B, 8x8xB200, SGLang, TTFT 500 ms, it had
        # not proven the walk's answer after 5 minutes.)
        c, served = walked.accepted
        return DisaggResult(served.plan, c, True, walked.checks)
    m = PoolModel(pools)
    if len(pools.prefill) * len(pools.decode) <= EAGER_CUT_PAIRS:
        m.cut_ttft_all()  # few pairs (a pruned search): every pair's TTFT cuts before the first question
    m.cap_feed(floor)
    best = _told(m, pools, walked) or best
    proposals = walked.checks
    while True:
        r0, g0 = (best.rate_units, best.gpus) if best else (0, 1)
        asked = _first_accepted(m, pools, partial(_better_than, m, r0, g0), deadline,
                                screen=partial(_any_better, m, r0, g0), cut_ttft=True, floor=floor,
                                need=_ahead_of(pools, best))
        proposals += asked.proposals
        if asked.accepted is None:
            break
        best = asked.accepted
    # a per-GPU question scaled to fit 64 bits may have missed a deployment between the two ratios
    proven = asked.complete and (best is None or per_gpu_terms(m, best.rate_units, best.gpus)[2])
    while proven and best is not None:  # ties toward fewer GPUs, then brute force's order
        fewer = _first_accepted(m, pools, partial(_as_good_and_earlier, m, best), deadline, cut_ttft=True,
                                floor=floor, need=_ahead_of(pools, best))
        proposals += fewer.proposals
        if fewer.accepted is None:
            break
        best = fewer.accepted
    if best is None:
        floor.explain()
        return DisaggResult(None, None, proven, proposals)
    bound = None if proven else per_gpu_bound(pools, best, floor, walked.frontier)
    return DisaggResult(best.plan, best.choice, proven, proposals, bound)


def _ahead_of(pools: Pools, best: Accepted | None) -> Callable[[Choice], int]:
    """The rate units a choice must carry to come before ``best`` in brute force's order (any, with none)."""
    if best is None:
        return lambda c: 1
    return lambda c: units_ahead(best.rate_units, best.gpus, best.choice, pools.gpus(c), c)


def per_gpu_bound(pools: Pools, best: Accepted, floor: ChoiceFloor | None = None,
                  frontier: Fraction | None = None) -> Fraction:
    """The most rate units per GPU any deployment of these pools reaches, and at least ``best``'s: the pair
    bound (``walk.pair_bound``, the other rules aside) of the prefill and the decode candidate of the most
    per GPU each, as the bound grows with both; with ``floor``, a prefill worker's rate is at most what it
    feeds within the TTFT limit (``walk.fed_per_gpu``; one evaluate per decode candidate if not yet read).
    With ``frontier`` (a walk's, cut short: every deployment it left unjudged is keyed at or below it, and each
    it judged carries no more than ``best`` or the seed), at most the greater of it and ``best``'s. On Kimi-K2,
    16x8xH100, TensorRT-LLM, TTFT 1 s, 239 tokens/s per GPU where the pair bound alone says 642.
    On pools ``prune.pruned_pools`` left it bounds every deployment of the cluster too: a candidate it dropped
    has a pair bound below its seed, at most ``best``."""
    if floor is None:
        prefill = max(Fraction(p.capacity_units, p.gpus) for p in pools.prefill)
    else:
        prefill = max(fed_per_gpu(pools, floor, i) for i in range(len(pools.prefill)))
    decode = max(Fraction(d.capacity_units, d.gpus) for d in pools.decode)
    own = Fraction(best.rate_units, best.gpus)
    bound = max(pair_bound(prefill, decode), own)
    return bound if frontier is None else min(bound, max(frontier, own))


def _told(m: PoolModel, pools: Pools, walked: Walk) -> Accepted | None:
    """Post what the walk judged into the model (each listed pair capped at the frontier's rate per GPU,
    the deployments judged at exactly that rate capped one by one at what they carry, for the tie
    question), and return the best deployment it found, if any (the walk was cut short: the CP-SAT search
    goes on from it)."""
    if walked.frontier is not None:
        # Where the row rate x den - num x gpus could pass 64 bits, the cap is posted at a ratio no lower
        # (``per_gpu_terms``): it then forbids fewer deployments, each of those left judged when proposed.
        num, den, _ = per_gpu_terms(m, walked.frontier.numerator, walked.frontier.denominator)
        for i, k in walked.expanded:
            m.cap_pair(i, k, Fraction(num, den))
        for c, cap in walked.capped_at_frontier:
            if cap is None:
                m.forbid(c)
            else:
                m.cap_choice(c, cap)
    if walked.accepted is None:
        return None
    c, served = walked.accepted
    return Accepted(c, served.plan, served.units, pools.gpus(c))


def _fewest(m: PoolModel) -> cp_model.CpModel:
    """The model (its rate at least the target) asked for the deployment on the fewest GPUs."""
    cp = m.cp.clone()
    cp.minimize(m.gpus)
    return cp


def _tie_ahead(m: PoolModel, capacity: cp_model.IntVar, best: Accepted) -> cp_model.CpModel:
    """The model asked for a deployment on as many GPUs as ``best`` that comes before it in
    ``fewest_gpus``'s order (more capacity; or as much and more in both pools together; or as much of
    both and earlier in brute force's order of choices), the most capacity first. (``capacity``,
    ``PoolModel.new_capacity``, is at most the choice's ``Pools.rate``, so any answer is truly ahead.)"""
    cp = m.cp.clone()
    cp.add(m.gpus == best.gpus)
    pools_sum = m.prefill_capacity + m.decode_capacity
    more = cp.new_bool_var("more_capacity")
    more_pools = cp.new_bool_var("more_in_both_pools")
    cp.add(capacity >= best.rate_units + more)
    cp.add(pools_sum >= pools_capacity(m.pools, best.choice) + more_pools).only_enforce_if(~more)
    cp.add(m.order <= m.order_of(best.choice) - 1).only_enforce_if([~more, ~more_pools])
    cp.maximize(capacity)
    return cp


def fewest_gpus(pools: Pools, rate_rps: float, deadline: Deadline, cut_ttft: bool = True,
                most_walked: int = RATE_WALK_CHOICES) -> DisaggResult:
    """The deployment on the fewest GPUs that sustains ``rate_rps`` within every limit. Among equally
    few GPUs: the most capacity (``Pools.rate``, the rate its pools and link carry at full load: the
    most headroom over ``rate_rps``, the most tokens/s per GPU at full load), then the most capacity in
    both pools together (``pools_capacity``: the headroom of the pool that does not bind, which runs
    lighter at the target, e.g. a decode pool at a smaller batch and so a shorter TPOT), then the first
    in brute force's order of choices (``brute.fewest_gpus`` sorts the same way). First the walk in that
    order (``rate_walk.py``), whose first accepted deployment is the answer; cut short (``most_walked``
    deployments judged, or the deadline), the CP-SAT search goes on from where it stopped. So the answer
    does not depend on which of equally few GPUs CP-SAT met first, nor on the TTFT cuts: ``cut_ttft`` posts
    a refused pair's cuts (``ttft_cut.py``: sound here too, as a deployment the exact check accepts at the
    target passes every cut at the target's rate, which the model's rate may take); it only saves proposals."""
    if not pools.prefill or not pools.decode:
        return DisaggResult(None, None, True, 0)
    target = target_units(rate_rps)
    floor = ChoiceFloor(pools)  # sound at the target too (a deployment accepted there passes it there)
    if floor.refuses_every(target):
        # No deployment keeps the TTFT limit at the target (one floor per prefill candidate, its pair terms
        # at their least): each proposal would be refused by the floor, one pair at a time (on 8x72xGB200
        # 122,436 pairs, ~0.6 s a question). The first proposal is still asked, so the rules the answer
        # names are the same deployment's as when every proposal was refused in turn.
        m, _ = _rate_model(pools, target, cut_ttft)
        first = _first_accepted(m, pools, partial(_fewest, m), deadline, target, cut_ttft=cut_ttft, floor=floor,
                                most=1)
        floor.explain()
        return DisaggResult(None, None, first.complete or floor.has_refused, first.proposals)
    walked = rate_walk(pools, target, deadline, floor, most_walked)
    if walked.complete:
        if walked.accepted is None:
            floor.explain()
            return DisaggResult(None, None, True, walked.checks)
        c, plan = walked.accepted
        return DisaggResult(plan, c, True, walked.checks)
    m, capacity = _rate_model(pools, target, cut_ttft)
    m.cp.add(m.gpus >= walked.fewest_gpus)  # every deployment on fewer was refused (rate_walk.RateWalk)
    for c in walked.refused_at_fewest:
        m.forbid(c)
    asked = _first_accepted(m, pools, partial(_fewest, m), deadline, target, cut_ttft=cut_ttft, floor=floor)
    proposals = walked.checks + asked.proposals
    best = asked.accepted
    if best is None:
        floor.explain()
        return DisaggResult(None, None, asked.complete, proposals)
    while True:  # ties on the fewest GPUs: most capacity, then brute force's order
        ahead = _first_accepted(m, pools, partial(_tie_ahead, m, capacity, best), deadline, target,
                                cut_ttft=cut_ttft, floor=floor)
        proposals += ahead.proposals
        if ahead.accepted is None:
            break
        best = ahead.accepted
    return DisaggResult(best.plan, best.choice, ahead.complete, proposals)


def _rate_model(pools: Pools, target: int, cut_ttft: bool) -> tuple[PoolModel, cp_model.IntVar]:
    """The pool model with its rate at least ``target`` and every pair's TTFT cuts where there are few pairs, and
    its full-rate capacity (``PoolModel.new_capacity``: the tie-break's)."""
    m = PoolModel(pools)
    capacity = m.new_capacity()
    if cut_ttft and len(pools.prefill) * len(pools.decode) <= EAGER_CUT_PAIRS:
        m.cut_ttft_all()  # few pairs: every pair's cuts before the first question, as max_throughput
    m.cp.add(m.rate >= target)
    return m, capacity


__all__ = [
    "Accepted", "DisaggResult", "build_pools", "fewest_gpus", "max_throughput", "max_throughput_from", "seed",
    "target_units",
]
