"""``enumerate --serving disagg``: one deployment per (prefill candidate, decode candidate), the pair's
best worker counts per GPU (brute force over x and y at what each carries within every rule, the fewest
GPUs on a tie, then the first listed), streamed as found, and the Pareto frontier of tokens/s per GPU
against tokens/s per user.

Decode candidates here include each layout's power-of-two batches below its largest (a smaller batch is
a faster round: more tokens/s per user, fewer per GPU). Where a TTFT limit holds a deployment below the
requests those limits admit, several of them give the same deployment at the same load; it is listed once,
at the first (smallest) limit (``row_key``). A pair's search is small (x and y up to the
cluster over the workers' GPUs), so this is a plain enumeration, bounded like the colocated one
(``limit``, ``time_limit_s``, ``work_limit``: its exact checks, ``Deadline.checking``; ``partial`` after
the iteration says whether it stopped early).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

from shardplan.models.errors import SolverLimitError
from shardplan.rules.disagg_plan import DisaggPlan
from shardplan.rules.problem import Problem
from shardplan.solver.cost.disagg import engine_profile, forget_worker_prices
from shardplan.solver.disagg.deploy import Choice, Pools, Stopped, best_served
from shardplan.solver.disagg.ttft_cut import ChoiceFloor
from shardplan.solver.disagg.workers import decode_workers, prefill_workers
from shardplan.solver.enumerate import Frontier
from shardplan.solver.optimise import Deadline
from shardplan.solver.search_base import CHOICE_WORK

# Worker counts one pair may list in full; past it (x and y each up to the cluster over a worker's GPUs:
# 10^9 on 4096x8xH200 with 1-GPU workers, which filled 12 GB before any time limit was looked at)
# each y keeps the prefill counts from the fewest that keep up with it to twice that, the fewest decode
# workers first (``Pools.keeping_up``, the list the search's seed ranks too), up to this many in all.
PAIR_CHOICES = 1 << 12


def pair_choices(pools: Pools, i: int, k: int) -> list[Choice]:
    """The pair's worker counts that fit the cluster and carry a rate: every (x, y) on a cluster where
    they are at most ``PAIR_CHOICES``, else the bounded list above."""
    n = pools.problem.cluster.num_gpus
    p, d = pools.prefill[i], pools.decode[k]
    if (n // p.gpus) * (n // d.gpus) <= PAIR_CHOICES:
        out = [Choice(i, k, x, y) for x in range(1, n // p.gpus + 1) for y in range(1, n // d.gpus + 1)]
        return [c for c in out if pools.end_gpu(c) <= n and pools.rate(c) > 0]
    return pools.keeping_up(i, k, PAIR_CHOICES)


def row_key(plan: DisaggPlan) -> str:
    """Everything a plan says but its decode pool's batch limit: two pairs' plans equal in it are one deployment
    whose limit changes nothing it predicts (a decode layout listed at several limits, all held to the same
    requests in flight)."""
    layout = plan.layout
    unlimited = layout.model_copy(update={"decode": layout.decode.model_copy(update={"max_batch": None})})
    p = plan.prediction
    return f"{unlimited.model_dump_json()} {p.metrics.model_dump_json()} {p.throughput_rps!r} {p.bottleneck}"


class DisaggEnumeration:
    def __init__(self, problem: Problem, limit: int | None = None, time_limit_s: float | None = None,
                 work_limit: float | None = None):
        forget_worker_prices()  # its work, and so where a work limit ends it, as in a fresh process
        profile = engine_profile(problem)
        self.limit, self.deadline = limit, Deadline(time_limit_s, work_limit)
        check = self.deadline.check  # pricing every layout ran 20 s past --time-limit 0.5 on 1,296 GPUs
        try:
            self.pools = Pools(problem, profile, prefill_workers(problem, profile, check),
                               decode_workers(problem, profile, smaller_batches=True, check=check))
        except SolverLimitError:  # the limit passed while pricing: a partial enumeration of nothing
            self.pools, self.cut_short = Pools(problem, profile, [], []), True
        else:
            self.cut_short = False
        self.floor = ChoiceFloor(self.pools)
        self.partial = True
        self.count = 0
        self.frontier = Frontier()

    def __iter__(self) -> Iterator[DisaggPlan]:
        pools = self.pools
        listed: set[str] = set()
        for i in range(len(pools.prefill)):
            for k in range(len(pools.decode)):
                if self.deadline.passed() or (self.limit is not None and self.count >= self.limit):
                    return
                plan = self._best_of_pair(i, k)
                if plan is None or (key := row_key(plan)) in listed:
                    continue
                listed.add(key)
                m = plan.prediction.metrics
                # Frontier keeps the least first value and the most second: per user negated.
                self.frontier.add(self.count, -m.output_tokens_per_s_per_user, m.output_tokens_per_s_per_gpu)
                self.count += 1
                yield plan
        self.partial = self.cut_short or self.deadline.passed()  # the last pair's search may have been cut

    def _best_of_pair(self, i: int, k: int) -> DisaggPlan | None:
        """The pair's deployment of the most rate per GPU it carries within every rule (``Pools.served``),
        the fewest GPUs on a tie, then the first listed: judged in order of full rate per GPU, the TTFT floor
        first (``ttft_cut.ChoiceFloor``), until none left can come first, as ``brute.best_throughput``. None
        also when the time limit passes first: ``__iter__`` then stops, the enumeration partial. Listing and
        ordering the pair's choices is work too (``CHOICE_WORK`` each)."""
        pools = self.pools
        choices = pair_choices(pools, i, k)
        self.deadline.spend(CHOICE_WORK * len(choices))
        try:
            best = best_served(pools, sorted(choices, key=pools.per_gpu_key),
                               partial(pools.checked_served, deadline=self.deadline), self.floor.refuses,
                               self.deadline.passed)
        except Stopped:
            return None
        return None if best is None else best[1].plan


__all__ = ["PAIR_CHOICES", "DisaggEnumeration", "pair_choices", "row_key"]
