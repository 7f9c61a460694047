"""A seed grown across the cluster: where TTFT refuses every deployment ``search.seed`` tries on the best
pairs (SGLang's queue at a tight limit), ``prune.walked_seed`` finds one on a single scale-up domain,
often far below the cluster's optimum (on 64x8xH200 5 GPUs at 217.3 tokens/s per GPU, where 43 prefill and
5 decode workers keep every rule at 264.2). This grows it: on each of a few pairs of candidates, for each
decode worker count y, it asks for the fewest prefill workers that keep every rule and beat the incumbent.

**What is read, and why so few.** With y decode workers, prefill workers past those that keep up (``x >=
y b / a``) add no rate (the decode pool or the link binds), so each one more lowers the rate per GPU; but
they lower the prefill pool's utilisation, so its chunk and the clump queue shrink and TTFT falls. So the
best of a y is its fewest prefill workers that keep TTFT, and the most that still beat the incumbent
(``_most_beating``) is the one most likely to: it is judged first (the TTFT floor, then exactly), and if it
is refused the y is passed over (one exact check). If accepted, a bisection between the keeping-up count
and it finds the fewest accepted (each probe the floor first, then exactly), which becomes the incumbent.

TTFT falling as x grows is what makes that one check speak for the y's smaller counts; it held on every
count read by hand on the 512-GPU case, but it is a premise of the seed's quality, never of its soundness:
every deployment returned was accepted by the exact check, and any such is a sound seed (``prune.py``
needs only that). Counts below keeping up (the prefill pool saturated, its queue unbounded) are not read.
"""

from __future__ import annotations

from shardplan.rules.disagg_plan import DisaggPlan
from shardplan.solver.disagg.deploy import Choice, Pools
from shardplan.solver.disagg.search import SEED_CHECKS, Accepted
from shardplan.solver.disagg.ttft_cut import ChoiceFloor
from shardplan.solver.disagg.walk import PairKeys, Terms
from shardplan.solver.optimise import Deadline
from shardplan.solver.search_base import NODE_WORK

GROW_CHECKS = SEED_CHECKS  # exact checks the growing may spend in all: the budget of the seed it grows


class Grower:
    """The incumbent, raised by each pair ``grow`` is given, within ``GROW_CHECKS`` exact checks."""

    def __init__(self, best: Accepted, deadline: Deadline, most_checks: int = GROW_CHECKS):
        self.best = best
        self.deadline = deadline
        self.checks_left = most_checks

    def grow(self, pair: Pools) -> Accepted | None:
        """The best deployment this pair's pools (one candidate of each role) gave that beats the incumbent
        (its choice indexing ``pair``), or None; the incumbent is raised to it."""
        n = pair.problem.cluster.num_gpus
        p, d = pair.prefill[0], pair.decode[0]
        floor = ChoiceFloor(pair)
        bound = self._pair_bound(PairKeys(pair, floor))
        found = None
        for y in range(1, n // d.gpus + 1):
            if self.checks_left <= 0 or self.deadline.passed() or not self._below(bound):
                break
            keep_up = max(1, -(-y * d.capacity_units // p.capacity_units))
            if keep_up * p.gpus + y * d.gpus > n:
                break  # no more decode workers fit beside the prefill pool that keeps up with them
            top = self._most_beating(pair, y, keep_up)
            plan = None if top is None else self._accepted(pair, floor, top)
            if top is None or plan is None:
                continue
            best, lo = (top, plan), keep_up - 1  # best accepted; every count in (lo, best's) still to judge
            while best[0].x - lo > 1 and self.checks_left > 0:
                mid = Choice(0, 0, (lo + best[0].x) // 2, y)
                plan = self._accepted(pair, floor, mid)
                if plan is not None:
                    best = (mid, plan)
                else:
                    lo = mid.x
            c, plan = best
            found = self.best = Accepted(c, plan, pair.rate(c), pair.gpus(c))
        return found

    def _pair_bound(self, keys: PairKeys) -> Terms:
        """The pair's ``walk.held_pair_bound`` (over the powers of two, then, if the incumbent is below that, over the
        rungs: a round each): no deployment of the pair carries more within every rule, so where the incumbent is
        not below it no y is read. On 8192x8xH100 under SGLang (Llama-3.1-8B, TTFT 300 ms) the pairs' floors
        refused 111,247 deployments in turn, 11 of the 15 units of the default work limit, and the search was left
        none; 8 of its 10 pairs are bounded below the walked seed."""
        coarse = keys.held_terms(0, 0)
        return keys.held_terms(0, 0, fine=True) if self._below(coarse) else coarse

    def _below(self, bound: Terms) -> bool:
        """Whether the incumbent's rate per GPU is below ``bound`` (exact integers)."""
        return self.best.rate_units * bound[1] < bound[0] * self.best.gpus

    def _beats(self, pair: Pools, c: Choice) -> bool:
        """Strictly more rate per GPU than the incumbent (exact integers)."""
        return pair.rate(c) * self.best.gpus > self.best.rate_units * pair.gpus(c)

    def _most_beating(self, pair: Pools, y: int, keep_up: int) -> Choice | None:
        """The most prefill workers, from ``keep_up``, that fit the cluster and beat the incumbent with y
        decode workers (None if even ``keep_up`` does not): at most the count where y decode workers'
        capacity ``y b`` over the GPUs equals the incumbent's ratio (the rate is at most ``y b``), then
        fewer while the exact rate (the link may bind) or the placement says no."""
        n = pair.problem.cluster.num_gpus
        p, d = pair.prefill[0], pair.decode[0]
        r0, g0 = self.best.rate_units, self.best.gpus
        by_ratio = (y * d.capacity_units * g0 - r0 * y * d.gpus - 1) // (r0 * p.gpus)
        if not self._beats(pair, Choice(0, 0, keep_up, y)):
            return None
        x = min(by_ratio, (n - y * d.gpus) // p.gpus)
        while x >= keep_up:
            c = Choice(0, 0, x, y)
            if pair.end_gpu(c) <= n and self._beats(pair, c):
                return c
            x -= 1
        return None

    def _accepted(self, pair: Pools, floor: ChoiceFloor, c: Choice) -> DisaggPlan | None:
        """The plan if the TTFT floor does not refuse ``c`` and the exact check accepts it (counted against the
        budget), else None."""
        self.deadline.spend(NODE_WORK)  # a verdict is work, as the walk's (not free where the floor refuses each y)
        if floor.refuses(c, pair.rate(c)):
            return None
        self.checks_left -= 1
        return pair.checked_plan(c, self.deadline)  # work, as the seed's checks


__all__ = ["GROW_CHECKS", "Grower"]
