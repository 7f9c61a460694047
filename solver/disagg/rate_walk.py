"""The ``--rate`` search's first pass: the deployments that reach the target rate, listed lazily in brute force's
order (``Pools.fewest_gpus_key``: fewest GPUs, then the most capacity, then the most in both pools together, then
``Choice``'s order) and judged in that order at the target (the TTFT floor first, ``ttft_cut.ChoiceFloor``; the
exact check only for what it does not refuse) until one is accepted: that one is brute force's answer.

**Why.** Where the TTFT limit binds, the CP-SAT search proposed the deployments it refuses one at a time, a
CP-SAT solve each (about 0.14 s). Llama-3.1-70B for 20 requests/s on 8x8xH200 (vLLM) at a 1,154 ms TTFT limit:
243 proposals, 35 s; the walk judges 276 deployments at the floor and one exactly, 0.3 s.

**The order, lazily.** A deployment reaching the target ``T`` has ``x >= ceil(T / a)``, ``y >= ceil(T / b)``
(``a``, ``b``: one worker's capacity of each role) and ``min(x, y)`` at least ``T`` over the faster link of the
tiers the cluster has (``Pools.rate``). Each pair of candidates enters a heap at the least such ``(x, y)``, keyed
by brute force's sort key; popping ``(x, y)`` pushes ``(x, y + 1)``, and ``(x + 1, y)`` while ``y`` is the pair's
least, so every ``(x, y)`` of the pair is pushed once, by one of fewer GPUs. GPUs grow strictly along each push,
so when the heap's top is on ``G`` GPUs every deployment on ``G`` is in the heap and every one on fewer has come
off: they come off in brute force's order. A deployment past the cluster (``Pools.end_gpu``) is not pushed, nor
anything after it (the end only grows with x and y). What comes off below the target (a link across scale-up
domains slower than within) is skipped, as brute force lists only what reaches it.

**Cut short** (``most`` deployments judged, ``POPS_PER_JUDGED`` times that popped, or the deadline), it leaves
the GPUs every deployment on fewer of was refused at, and those on exactly that many it refused: the CP-SAT search
goes on from there.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from shardplan.hardware import Tier
from shardplan.rules.disagg_plan import DisaggPlan
from shardplan.solver.disagg.deploy import Choice, FewestKey, Pools
from shardplan.solver.disagg.ttft_cut import ChoiceFloor
from shardplan.solver.optimise import Deadline
from shardplan.solver.search_base import NODE_WORK

# Deployments the walk may judge (each a floor of about 0.1 ms, or an exact check), about 25 s of floors; past
# it, the CP-SAT search takes what is left. The default work limit (NODE_WORK each) stops it at about 150,000.
# Llama-3.1-8B for 300 requests/s on 64x8xH200 under SGLang at a 300 ms TTFT limit judges 37,403 (3.2 s) to
# its answer on 56 GPUs, where the CP-SAT search had found none within the default work limit.
RATE_WALK_CHOICES = 1 << 18
# Deployments popped per one judged, at most: those below the target (a pair whose link across scale-up domains
# cannot carry it) are popped and skipped, and on thousands of 1-GPU workers there could be millions of them.
POPS_PER_JUDGED = 8


@dataclass
class RateWalk:
    """What the walk found and judged (module docstring)."""

    accepted: tuple[Choice, DisaggPlan] | None = None  # brute force's answer when ``complete``
    complete: bool = False  # ``accepted`` is brute force's answer, or (None) no deployment reaches the target
    fewest_gpus: int = 1  # every deployment on fewer GPUs was judged and refused
    refused_at_fewest: list[Choice] = field(default_factory=list)  # judged and refused on exactly that many
    checks: int = 0  # deployments the exact check judged


def least_workers(pools: Pools, i: int, k: int, target_units: int) -> tuple[int, int] | None:
    """The least (x, y) of the pair that can reach ``target_units`` (module docstring), None if none can."""
    a, b = pools.prefill[i].capacity_units, pools.decode[k].capacity_units
    if a <= 0 or b <= 0:
        return None
    cluster = pools.problem.cluster
    tiers = [Tier.SCALE_UP] + ([Tier.SCALE_OUT] if cluster.num_gpus > cluster.scaleup_domain_gpus else [])
    link = max(pools.kv_units(i, k, tier) for tier in tiers)
    pairs = -(-target_units // link)
    return max(1, -(-target_units // a), pairs), max(1, -(-target_units // b), pairs)  # a target of 0: any rate


def rate_walk(pools: Pools, target_units: int, deadline: Deadline, floor: ChoiceFloor,
              most: int = RATE_WALK_CHOICES) -> RateWalk:
    """Judge the deployments reaching ``target_units`` in brute force's order at that target until one is
    accepted, at most ``most`` of them (module docstring)."""
    n = pools.problem.cluster.num_gpus
    out = RateWalk()
    heap: list[tuple[FewestKey, int]] = []  # each with its pair's least y (which of its pushes it makes)
    for i in range(len(pools.prefill)):
        for k in range(len(pools.decode)):
            least = least_workers(pools, i, k, target_units)
            if least is not None and pools.end_gpu(c := Choice(i, k, *least)) <= n:
                heap.append((pools.fewest_gpus_key(c), least[1]))
    heapq.heapify(heap)
    judged = popped = 0
    while heap:
        if popped >= POPS_PER_JUDGED * most or deadline.passed():
            return out  # nothing on fewer GPUs than the top is left (every one came off before it)
        popped += 1
        (gpus, minus_rate, _, c), least_y = heapq.heappop(heap)
        if gpus > out.fewest_gpus:
            out.fewest_gpus, out.refused_at_fewest = gpus, []
        after = [Choice(c.prefill, c.decode, c.x, c.y + 1)]
        if c.y == least_y:
            after.append(Choice(c.prefill, c.decode, c.x + 1, c.y))
        for c2 in after:
            if pools.end_gpu(c2) <= n:
                heapq.heappush(heap, (pools.fewest_gpus_key(c2), least_y))
        if -minus_rate < target_units:
            continue  # below the target (brute force does not list it)
        if judged >= most:
            return out
        judged += 1
        deadline.spend(NODE_WORK)  # each judged deployment is work, an exact check more (search_base.Deadline)
        if not floor.refuses(c, target_units):
            out.checks += 1
            plan = pools.checked_plan(c, deadline, target_units)
            if plan is not None:
                out.accepted, out.complete = (c, plan), True
                return out
        out.refused_at_fewest.append(c)
    out.complete = True  # every deployment reaching the target was refused
    return out


__all__ = ["POPS_PER_JUDGED", "RATE_WALK_CHOICES", "RateWalk", "least_workers", "rate_walk"]
