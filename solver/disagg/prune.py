"""The candidates that can be in the best deployment per GPU, priced no further than it takes to know:
what the CP-SAT search of tokens/s per GPU (``search.max_throughput``) needs, for a fraction of the
work of pricing every candidate (``search.build_pools``).

**Why a candidate can be left out.** A deployment of prefill candidate i (``a_i`` rate units per
worker, ``g_i`` GPUs each) and decode candidate k (``b_k``, ``h_k``) with x and y workers has the rate
``R <= min(x a_i, y b_k)`` (the links only lower it) on ``G = x g_i + y h_k`` GPUs. As ``x >= R / a_i``
and ``y >= R / b_k``, ``G >= R (g_i / a_i + h_k / b_k)``, so

    R / G <= 1 / (g_i / a_i + h_k / b_k)            (``pair_bound``)

which grows with either role's rate per GPU. The seed (``search.seed`` on the pair of the best
candidates, or when that pair has none on the next pairs of the best few, ``first_seed``) is a
deployment that keeps every rule, of ``R0 / G0``; everything the search may return (the optimum per
GPU, then among equal ratios the fewest GPUs) is at least as good per GPU. So a prefill candidate whose bound with the
decode candidate of the most rate per GPU is below ``R0 / G0`` is in none of those deployments, nor in
any the search proposes (each strictly better than an incumbent at least as good as the seed); likewise
a decode candidate with the best prefill one. Without a seed nothing is left out.

**Decode candidates priced lazily.** A decode candidate's capacity needs its largest batch that keeps
TPOT (a search of several ``evaluate`` calls, ``workers.DecodeSearch``); while it runs, its bracket
bounds the capacity from above. The decode candidate of the most rate per GPU is found best-first
(the layout of the highest bound searched a probe further until the highest bound is an exact one), and
a layout whose bound already fails the seed is not searched further.

Both lists keep ``build_pools``' order, so ties (by index) fall the same way. tests/unit/solver/disagg
hold the search on these candidates to brute force over all of them.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from fractions import Fraction
from itertools import islice

from shardplan.hardware.profile import Profile
from shardplan.rules.problem import Problem
from shardplan.solver.disagg.deploy import Choice, Pools
from shardplan.solver.disagg.grow import Grower
from shardplan.solver.disagg.search import Accepted, seed
from shardplan.solver.disagg.walk import pair_bound, walk
from shardplan.solver.disagg.workers import (
    Check,
    DecodeSearch,
    DecodeWorker,
    PrefillPriced,
    PrefillWorker,
    capped_reaching,
    decode_searches,
    offers_batch_caps,
    prefill_priced,
    with_batch_caps,
)
from shardplan.solver.optimise import Deadline


def per_gpu(w: PrefillPriced | PrefillWorker) -> Fraction:
    return Fraction(w.capacity_units, w.gpus)


def decode_bound_per_gpu(s: DecodeSearch) -> Fraction:
    """At least the decode candidate's rate units per GPU (exactly it once its search is done)."""
    return Fraction(s.bound_units(), s.gpus)


def decode_by_rate(searches: list[DecodeSearch]) -> Iterator[DecodeSearch]:
    """The decode candidates in order of rate per GPU (the first on a tie), each searched to its end
    when it comes; the others searched only while their bound could still reach it."""
    # Max-heap on the bound, then the first in order: an exact entry on top is at least every bound
    # below it, and any entry of an equal bound below it comes later in order.
    heap = [(-decode_bound_per_gpu(s), n, s) for n, s in enumerate(searches)]
    heapq.heapify(heap)
    while heap:
        _, n, s = heap[0]
        if s.done:
            heapq.heappop(heap)
            yield s
            continue
        s.step()
        heapq.heapreplace(heap, (-decode_bound_per_gpu(s), n, s))


def best_decode(searches: list[DecodeSearch]) -> DecodeSearch:
    """The decode candidate of the most rate per GPU (the first on a tie), searched to its end."""
    return next(decode_by_rate(searches))


SEED_RANKS = 3  # the seed is sought among pairs of the first few candidates of each role by rate per GPU
SEED_WALK_DOMAINS = 3  # then by the walk on 1, 2 and 4 scale-up domains (``walked_seed``)


Seed = tuple[int, DecodeWorker, Accepted]  # (prefill index, decode candidate, the deployment of the two)


def first_seed(problem: Problem, profile: Profile, prefill: PrefillJudged, searches: list[DecodeSearch],
               refused: dict[str, str], deadline: Deadline | None = None) -> Seed | None:
    """(prefill index, decode candidate, seed) of the first pair whose ``search.seed`` keeps every rule:
    the best candidates of each role first, then the other pairs of the ``SEED_RANKS`` best of each by
    ``pair_bound``; then the best deployment on a few scale-up domains (``walked_seed``), grown across the
    cluster on those pairs (``grown_seed``); None if none does. The best pair alone may have none: on
    2x8xH200 its one deployment that fits the cluster breaks TTFT. ``refused`` gets why the best pair's were
    refused."""
    ranked_p = prefill.ranked(SEED_RANKS)
    ranked_d = [searches.index(s) for s in islice(decode_by_rate(searches), SEED_RANKS)]
    others = sorted(((i, k) for i in ranked_p for k in ranked_d if (i, k) != (ranked_p[0], ranked_d[0])),
                    key=lambda ik: -pair_bound(per_gpu(prefill.priced[ik[0]]), decode_bound_per_gpu(searches[ik[1]])))
    pairs = [(ranked_p[0], ranked_d[0]), *others]
    for n, (i, k) in enumerate(pairs):
        if deadline is not None and deadline.passed():
            return None
        pair = Pools(problem, profile, [prefill.worker(i)], [searches[k].worker()])
        found = seed(pair, deadline)
        if n == 0:
            refused.update(pair.refused)
        if found is not None:
            return i, searches[k].worker(), found
    walked = walked_seed(problem, profile, prefill, searches, deadline)
    return None if walked is None else grown_seed(problem, profile, prefill, searches, walked, pairs, deadline)


def walked_seed(problem: Problem, profile: Profile, prefill: PrefillJudged, searches: list[DecodeSearch],
                deadline: Deadline | None = None) -> Seed | None:
    """When the best pairs have no seed (every deployment ``search.seed`` tries breaks TTFT: SGLang's
    queue at a tight limit), the best deployment on at most one scale-up domain of GPUs, then two, four
    (up to ``SEED_WALK_DOMAINS``; each walk asked only for one better per GPU than the last found), of the
    candidates that fit in it: the walk in brute force's order (``walk.py``) over those few candidates (cheap
    to price: the 1-8 GPU layouts of 512 H200s) and few worker counts. Any deployment that keeps every rule is
    a sound seed; this one is the small clusters' optimum, often the large one's too (an SGLang queue grows
    with the pool). The larger budgets are walked even when a smaller one found a deployment: on Llama-3.1-405B,
    8x8xB200, SGLang, TTFT 500 ms, two domains give 51.9 tokens/s/GPU and four 72.5 (3 prefill workers of
    tp=2, sp=4 and a decode worker of tp=8, held below their full rate), which the search then did not better.
    Under a TTFT limit the decode layouts' capped workers are walked too (``workers.capped_workers``), as
    ``search.build_pools`` offers them. A budget of the whole cluster is walked only when no smaller one found
    a deployment: past that, it is the search's own walk over every candidate, which the search then repeats
    over the pools this seed prunes (on 2x8xH200 under SGLang, 0.8 s of a 2.1 s solve)."""
    n = problem.cluster.num_gpus
    budget = min(n, problem.cluster.scaleup_domain_gpus)
    best: Seed | None = None
    for _ in range(SEED_WALK_DOMAINS):
        if deadline is not None and deadline.passed():
            return best
        if budget >= n and best is not None:
            return best  # every GPU: the search's own walk, over pools pruned by this seed
        floor = Fraction(0) if best is None else Fraction(best[2].rate_units, best[2].gpus)
        kept_p = [j for j, w in enumerate(prefill.priced) if w.gpus <= budget and prefill.admitted(j) is not None]
        kept_d = [s for s in searches if s.gpus <= budget]
        kept_p, decode = _may_pass(problem, prefill, kept_p, kept_d, floor) if kept_p and kept_d else ([], [])
        if kept_p and decode:
            pools = Pools(problem, profile, [prefill.worker(j) for j in kept_p], decode)
            walked = walk(pools, floor, deadline or Deadline(None), most_gpus=budget)
            if walked.accepted is not None:
                c, served = walked.accepted
                if Fraction(served.units, pools.gpus(c)) > floor:
                    best = kept_p[c.prefill], decode[c.decode], Accepted(c, served.plan, served.units, pools.gpus(c))
        if budget >= n:
            break
        budget = min(n, 2 * budget)
    return best


def _may_pass(problem: Problem, prefill: PrefillJudged, kept_p: list[int], searches: list[DecodeSearch],
              floor: Fraction) -> tuple[list[int], list[DecodeWorker]]:
    """The candidates of a seed's walk (``walked_seed``) that may pair into a deployment above ``floor`` per GPU:
    prefill indices and decode workers (``with_batch_caps``), every one when ``floor`` is 0. A pair's bound is at
    most ``pair_bound`` of its two rates per GPU, so a candidate whose bound with the other role's best is below
    the floor is in no pair the walk would list. A decode layout is judged on its largest batch before its capped
    workers are priced (they carry at most that, up to the parts per million ``ttft_cut.capacity_below`` names, as
    ``pruned_pools`` reads them: a seed may only be a little weaker for it, never unsound). On 64x8xH200 the seed's
    walk on four scale-up domains had 187 x 1,779 pairs."""
    if floor == 0:
        return kept_p, with_batch_caps(problem, searches)
    best_p = max(per_gpu(prefill.worker(j)) for j in kept_p)
    reaching = [s for s in searches if pair_bound(best_p, decode_bound_per_gpu(s)) >= floor]
    reaches = _pairs_to(best_p, floor)
    decode = [w for w in (s.worker() for s in reaching) if reaches(w)]
    decode += capped_reaching(reaching, reaches) if offers_batch_caps(problem) else []
    if not decode:
        return [], []
    best_d = max(Fraction(w.capacity_units, w.gpus) for w in decode)
    return [j for j in kept_p if pair_bound(per_gpu(prefill.worker(j)), best_d) >= floor], decode


def _pairs_to(best_prefill: Fraction, floor: Fraction) -> Callable[[DecodeWorker], bool]:
    """Whether a decode worker paired with the best prefill rate per GPU can reach ``floor`` per GPU."""
    return lambda w: pair_bound(best_prefill, Fraction(w.capacity_units, w.gpus)) >= floor


def grown_seed(problem: Problem, profile: Profile, prefill: PrefillJudged, searches: list[DecodeSearch],
               walked: Seed, pairs: list[tuple[int, int]], deadline: Deadline | None = None) -> Seed:
    """The walked seed grown across the cluster (``grow.py``) on the pairs ``first_seed`` tried, in their order
    (the highest pair bound first), then on the walked seed's own pair: (prefill index, decode candidate, seed)
    of the best deployment found, the walked one if none beats it. Only where the walk was needed: where
    the best pairs have a seed, it is already near their best per GPU."""
    i, d, best = walked
    grower = Grower(best, deadline or Deadline(None))
    for a, w in dict.fromkeys([*((a, searches[b].worker()) for a, b in pairs), (i, d)]):
        grown = grower.grow(Pools(problem, profile, [prefill.worker(a)], [w]))
        if grown is not None:
            i, d, best = a, w, grown
    return i, d, best


def pruned_pools(problem: Problem, profile: Profile, deadline: Deadline | None = None,
                 ) -> tuple[Pools, Accepted | None]:
    """The pools of every candidate that may be in a deployment at least as good per GPU as the seed,
    and the seed (its choice indexing these pools); every candidate when there is no seed (also when
    ``deadline`` passes while the seed is sought: its exact checks ran past --time-limit on 1,296 GPUs)."""
    check = None if deadline is None else deadline.check
    prefill = PrefillJudged(problem, profile, check)
    searches = decode_searches(problem, profile, check)
    caps = offers_batch_caps(problem)
    i = prefill.best()
    if i is None or not searches:
        return Pools(problem, profile, prefill.all(), with_batch_caps(problem, searches)), None
    k = searches.index(best_decode(searches))
    refused: dict[str, str] = {}
    found = first_seed(problem, profile, prefill, searches, refused, deadline)
    if found is None:  # every candidate, and why the best pair's seed was refused (as seed(pools) records it)
        pools = Pools(problem, profile, prefill.all(), with_batch_caps(problem, searches))
        pools.refused.update(refused)
        return pools, None
    seed_p, seed_w, first = found
    floor = Fraction(first.rate_units, first.gpus)
    best_p = per_gpu(prefill.priced[i])
    kept_d = [j for j, s in enumerate(searches) if _reaches(s, best_p, floor)]
    # A layout's capped workers carry at most what it carries at its largest batch (a worker's capacity grows
    # with its batch, up to the parts-per-million dips ``ttft_cut.capacity_below`` names), so only the kept
    # layouts' are read; each is kept on its own pair bound.
    capped = capped_reaching([searches[j] for j in kept_d], _pairs_to(best_p, floor)) if caps else []
    best_d = max([decode_bound_per_gpu(searches[k]), *(Fraction(w.capacity_units, w.gpus) for w in capped)])
    kept_p = [j for j, w in enumerate(prefill.priced) if pair_bound(per_gpu(w), best_d) >= floor
              and prefill.admitted(j) is not None]
    decode = [searches[j].worker() for j in kept_d] + capped
    if seed_w not in decode:  # only where a capped seed's layout was not kept: a dip as above
        decode.append(seed_w)
    pools = Pools(problem, profile, [prefill.worker(j) for j in kept_p], decode)
    choice = Choice(kept_p.index(seed_p), decode.index(seed_w), first.choice.x, first.choice.y)
    return pools, Accepted(choice, first.plan, first.rate_units, first.gpus)


class PrefillJudged:
    """The prefill layouts priced at their largest chunk, each judged against the TTFT limit (one
    ``evaluate`` more) only when asked: the candidates are those it admits."""

    def __init__(self, problem: Problem, profile: Profile, check: Check = None):
        self.problem, self.profile = problem, profile
        self.priced = prefill_priced(problem, profile, check)
        self._workers: dict[int, PrefillWorker | None] = {}  # _workers[j]: priced[j]'s candidate, if admitted

    def admitted(self, j: int) -> PrefillWorker | None:
        if j not in self._workers:
            self._workers[j] = self.priced[j].worker(self.problem, self.profile)
        return self._workers[j]

    def worker(self, j: int) -> PrefillWorker:
        w = self.admitted(j)
        assert w is not None, "asked for a prefill layout the TTFT limit refused"
        return w

    def all(self) -> list[PrefillWorker]:
        """Every candidate (``prefill_workers``)."""
        return [w for j in range(len(self.priced)) if (w := self.admitted(j)) is not None]

    def ranked(self, count: int) -> list[int]:
        """The indices of the first ``count`` admitted candidates by rate per GPU (the first on a tie);
        the TTFT limit judges no more of them than that takes."""
        ranked = sorted(range(len(self.priced)), key=lambda j: (-per_gpu(self.priced[j]), j))
        return list(islice((j for j in ranked if self.admitted(j) is not None), count))

    def best(self) -> int | None:
        """The index of the first candidate of the most rate per GPU (None if none is admitted)."""
        ranked = self.ranked(1)
        return ranked[0] if ranked else None


def _reaches(s: DecodeSearch, best_prefill: Fraction, floor: Fraction) -> bool:
    """Whether the decode candidate with the best prefill one can reach ``floor`` per GPU; its search
    runs only while its bound says it might."""
    while not s.done and pair_bound(best_prefill, decode_bound_per_gpu(s)) >= floor:
        s.step()
    return s.done and pair_bound(best_prefill, decode_bound_per_gpu(s)) >= floor


__all__ = [
    "best_decode", "decode_by_rate", "first_seed", "grown_seed", "pair_bound", "pruned_pools", "walked_seed",
]
