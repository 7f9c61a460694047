"""The per-GPU search's first pass: the deployments that can beat the seed, listed lazily in order of a
bound on what each carries (below: its full rate per GPU, or its pair's bound if lower; then fewest GPUs,
then ``brute.choices``' order) and judged in that order at what each carries within every rule
(``deploy.Pools.served``; the TTFT floor first, ``ttft_cut.ChoiceFloor``, at the rate it would need; the
exact check only for what it does not refuse), until no deployment left can come before the best found
(what it carries is at most its key): then that one is brute force's answer, proven by those bounds
(``search.max_throughput_from`` returns it). Cut short, it tells the CP-SAT search what it judged.

**Why.** Where TTFT binds for every deployment better per GPU than the answer (SGLang's profile at a
tight limit), the CP-SAT search proposed and refused them one at a time, a CP-SAT solve each (about
0.1 s); the walk judges each in well under a millisecond when the floor refuses it.

**The order, lazily.** Each pair of candidates (prefill i, decode k) enters a heap at a cheap bound on rate
per GPU within every rule (``first_pair_bound``: no deployment of the pair carries more, the TTFT limit
capping what a prefill worker feeds at the decode round of batch one), ahead of any deployment of an equal
rate per GPU; at the top it goes back in at its own bound (``held_pair_bound``, band by band of the decode
batch: no higher, and far lower where a large decode batch makes the TTFT limit bind), at the top again at that
bound over finer bands (the rungs: a round each, so only for the pairs that get there), and when it comes to
the top once more its deployments that can still beat the seed are listed into the heap, each at its full rate per
GPU or the pair's bound if lower. A pair with many deployments is split first by its prefill worker count (1,
2-3, 4-7, ...), each group back in at its bound over every batch for pools of that many workers
(``PairKeys.group_terms``) and listed when that comes to the top: on Mixtral-8x22B over 64x8xH200 under SGLang at
TTFT 2 s the final walk judged 5,539 deployments instead of 148,740, and the search proved its answer within the
default work limit (2026-12-08). So the keys popped never rise, each is at least what every deployment
left carries, deployments of equal keys come off in brute force's order, and a pair whose bound is below
the seed's rate per GPU is never listed (under SGLang's queue share at a tight TTFT limit, most pairs).

**What it leaves the CP-SAT search** (``Walk``): ``frontier``, a rate per GPU that no deployment of an
``expanded`` pair carries more than (the answer's, when the walk is complete), and the deployments judged
at exactly that key with what each carries. Stopped early (``most`` choices listed, or the
deadline) it leaves what it had judged and the best it found, and the CP-SAT search goes on from there.
"""

from __future__ import annotations

import heapq
import itertools
import math
from dataclasses import dataclass, field
from fractions import Fraction

from shardplan.solver.disagg.deploy import Choice, Pools, Served, units_ahead
from shardplan.solver.disagg.ttft_cut import ChoiceFloor
from shardplan.solver.optimise import Deadline
from shardplan.solver.search_base import NODE_WORK

# Deployments the walk may list in all (each costs its rate, a heap entry and, judged, a floor of
# about half a millisecond); past it, CP-SAT searches what is left. 2x8xH200 lists under 3,000. Past 2^15 the
# walk still gains on CP-SAT, whose questions on 512 GPUs take about a second each (0.55 units): on
# Qwen3-235B-A22B, 64x8xH200, SGLang, TTFT 2 s, the default work limit left a gap of 16 % through CP-SAT after
# 2^15 listed, 13 % in the walk (2026-12-07).
WALK_CHOICES = 1 << 18


def fed_per_gpu(pools: Pools, floor: ChoiceFloor, i: int, k: int | None = None) -> Fraction:
    """Rate units per GPU a worker of prefill candidate ``i`` feeds at most within every rule, with decode
    candidate ``k`` (None: any): its capacity, or less where the TTFT limit caps it
    (``ChoiceFloor.worker_cap_units``; 0: no rate keeps the limit)."""
    p = pools.prefill[i]
    return Fraction(_fed_units(p.capacity_units, floor.worker_cap_units(i, k)), p.gpus)


def _fed_units(capacity_units: int, cap: int | None) -> int:
    """A prefill worker's capacity, or less where the TTFT limit caps what it feeds (None: no cap; below 0: none)."""
    return capacity_units if cap is None else min(capacity_units, max(cap, 0))


def first_pair_bound(pools: Pools, floor: ChoiceFloor, i: int, k: int) -> Fraction:
    """``pair_bound`` with the prefill worker's rate at most what it feeds with this decode candidate
    (``fed_per_gpu``, read at the decode round of batch one): no deployment of the pair carries more rate units
    per GPU within every rule, at its full rate or held below it (0: none). Cheap, and at least
    ``held_pair_bound``: the heap's first key for each pair."""
    return PairKeys(pools, floor).first(i, k)


def held_pair_bound(pools: Pools, floor: ChoiceFloor, i: int, k: int, fine: bool = False) -> Fraction:
    """The most rate units per GPU any deployment of the pair carries within every rule, band by band of the
    decode batch it runs at (``ChoiceFloor.decode_bands``): in a band the decode worker sustains at most the
    band's rate and rounds in at least its least round, and the longer the round, the more requests are in
    flight and queued ahead of each prompt, so the less a prefill worker may feed within the TTFT limit
    (``ChoiceFloor.feed_cap_units``); the bound is the best band's ``pair_bound``, at most
    ``first_pair_bound`` (whose band is the whole range at batch one's round). Where the TTFT limit binds on a
    large decode batch this is far lower: Kimi-K2 on 16x8xH100 under TensorRT-LLM at TTFT 1 s, the deployments
    keyed above the best found fell from 255,674 to about 15,000 (2026-12-07).

    ``fine``: the same over bands at every rung (``ChoiceFloor.decode_bands``), a round each, read only where the band
    may beat the best read so far (``PairKeys._fine_terms``): on Qwen3-235B-A22B
    over 64x8xH200 under SGLang at TTFT 2 s, the pairs with a bound above the answer fell from 2,236 to 67, the best
    pair's bound from 18 % above what its deployments carry to 2.8 % (1 % with a band at every batch; 2026-12-07).
    The walk reads it only for the pairs that reach the top of its heap."""
    return PairKeys(pools, floor).held(i, k, fine)


class PairKeys:
    """``first_pair_bound`` and ``held_pair_bound`` for the pairs of one walk, each candidate's capacity and GPUs
    read once (properties, read for every pair, were most of a 200,000-pair walk's time)."""

    def __init__(self, pools: Pools, floor: ChoiceFloor):
        self.floor = floor
        self.prefill = [(p.capacity_units, p.gpus) for p in pools.prefill]
        self.decode = [(d.capacity_units, d.gpus) for d in pools.decode]
        self.banded = floor.active and pools.problem.workload.osl > 1
        self._most: dict[int, list[int]] = {}  # _most_below's memo
        self._group_memo: dict[int, list[tuple[int, int]]] = {}  # _groups' memo

    def first(self, i: int, k: int) -> Fraction:
        return Fraction(*self.first_terms(i, k))

    def held(self, i: int, k: int, fine: bool = False) -> Fraction:
        return Fraction(*self.held_terms(i, k, fine))

    def first_terms(self, i: int, k: int) -> Terms:
        """``first`` as (numerator, denominator), no Fraction made: the walk reads it for every pair."""
        (a, g), (b, h) = self.prefill[i], self.decode[k]
        fed = _fed_units(a, self.floor.worker_cap_units(i, k))
        return _pair_terms(fed, g, b, h) if fed > 0 and b > 0 else (0, 1)

    def held_terms(self, i: int, k: int, fine: bool = False) -> Terms:
        """``held`` as (numerator, denominator)."""
        if not self.banded:
            return self.first_terms(i, k)
        if fine:
            return self._fine_terms(i, k)
        (a, g), h = self.prefill[i], self.decode[k][1]
        bands = self.floor.decode_bands(k)
        most_below = self._most_below(k)
        num, den = 0, 1  # the best band's _pair_terms
        # From the largest batch down, until no band left can beat the best, even with the prefill worker's whole
        # capacity (the TTFT cap falls as the round grows, the rate rises with the batch: the best band is
        # often near the top; on 64x8xH200 under SGLang a third of the bands are read).
        for band in range(len(bands) - 1, -1, -1):
            n, m = _pair_terms(a, g, most_below[band], h)
            if n * den <= num * m:
                break
            n, m = self._band_terms(i, k, *bands[band], in_flight_two=band > 0)
            if n * den > num * m:
                num, den = n, m
        return num, den

    def _fine_terms(self, i: int, k: int) -> Terms:
        """``held_terms`` over the rungs, each band's round (an ``evaluate`` call) read only where a bound on the band,
        read at the round of the power of two under it (priced by the bands over powers of two), may beat the best
        band read so far: a longer round only lowers what the prefill worker feeds and what the decode worker
        sustains, so that bound is at least the band's own. The same value as every band read in turn; on
        64x8xH200 under SGLang reading them all was the walk's most ``evaluate`` calls.

        The bounds are read highest first, lazily: the bands under one power of two are bounded at one round, so
        the prefill worker feeds the same in each and the bound rises with the band's batches; a heap holds each
        such group's highest bound not yet read (on 64x8xH200 under SGLang, the final walk read 53,000 bounds where
        reading every band's read 233,000, of its 360,000 band reads in all)."""
        floor = self.floor
        spans = floor.band_spans(k, fine=True)
        last = floor.pools.decode[k]  # the last band, the candidate's batch alone: exact already
        num, den = self._band_terms(i, k, last.round_ns, last.capacity_units, in_flight_two=bool(spans))
        heap = [top for first, end in self._groups(k) if (top := self._bound_at(i, k, spans, end - 1, first))]
        heapq.heapify(heap)
        while heap:
            key, n, m, band, first = heap[0]
            if -key < num / den:
                break  # this band's bound, and every one left, is below the best
            heapq.heappop(heap)
            if n * den > num * m:  # above the best, though its float may tie it: the band's own
                n, m = self._band_terms(i, k, *floor.band(k, *spans[band]), in_flight_two=band > 0)
                if n * den > num * m:
                    num, den = n, m
            if band > first and (below := self._bound_at(i, k, spans, band - 1, first)):
                heapq.heappush(heap, below)
        return num, den

    def group_terms(self, i: int, k: int, workers: int = 1) -> Terms:
        """``held_terms`` over a band at every batch of the decode candidate, for the deployments of at least
        ``workers`` prefill workers (``ChoiceFloor.feed_cap_units``), to within ``GROUP_SLACK`` above: best first, from
        the bands over powers of two, the best band halved (each half's bound at most its band's: its round is no
        shorter and its batches no more; a round read for each upper half) until it is a single batch, or within
        ``GROUP_SLACK`` of a single batch's bound read (each halved band's least batch is read alone, at the round it
        has already). The KV transfer read is at most that of each deployment of the group: across scale-up domains
        where none fits one (``ChoiceFloor.least_transfer_ns``).

        Where it matters: a pool of many prefill workers has a short queue per prompt, so each worker feeds less
        within the TTFT limit than one alone. On Mixtral-8x22B over 64x8xH200 under SGLang at TTFT 2 s, the
        answer carries 740,098 rate units per GPU. One of the pairs the walk then listed had a bound of 766,178
        over the rungs; this bound is 750,932 for one worker and 739,970 from 4 workers (2026-12-08)."""
        if not self.banded:
            return self.first_terms(i, k)
        floor, last = self.floor, self.floor.pools.decode[k]
        # its deployments span at least this many GPUs (``Pools.end_gpu``), so beyond a scale-up domain, across one
        transfer_ns = floor.least_transfer_ns(i, k, workers * self.prefill[i][1] + self.decode[k][1])
        heap: list[tuple[_Key, int, int, int, int]] = []  # (the bound, its terms, the band's least batch, one past)
        read = (0, 1)  # the highest single batch's bound read: the answer is at least it

        def terms(round_ns: int, most_units: int, lo: int) -> Terms:
            return self._band_terms(i, k, round_ns, most_units, lo > 1, workers, transfer_ns)

        def push(round_ns: int, most_units: int, lo: int, hi: int) -> None:
            nonlocal read
            n, m = terms(round_ns, most_units, lo)
            if n > 0:
                heapq.heappush(heap, (_Key(n, m), n, m, lo, hi))
                if hi - lo == 1 and n * read[1] > read[0] * m:
                    read = (n, m)

        push(last.round_ns, last.capacity_units, last.batch, last.batch + 1)
        for lo, hi in floor.band_spans(k):
            push(*floor.band(k, lo, hi), lo, hi)
        while heap:
            _, n, m, lo, hi = heapq.heappop(heap)
            if hi - lo == 1 or n * read[1] * GROUP_SLACK.denominator <= read[0] * m * (
                    GROUP_SLACK.denominator + GROUP_SLACK.numerator):
                return n, m  # no band left is bounded above it, and it is a batch's bound or within the slack of one
            alone = terms(*floor.band(k, lo, lo + 1), lo)
            if alone[0] * read[1] > read[0] * alone[1]:
                read = alone
            mid = (lo + hi) // 2
            push(*floor.band(k, lo, mid), lo, mid)
            push(*floor.band(k, mid, hi), mid, hi)
        return 0, 1

    def _bound_at(self, i: int, k: int, spans: list[tuple[int, int]], band: int, first: int) -> _Bound | None:
        """The heap entry of rung band ``band``'s bound (its group's first band ``first``), None where it is 0 (then so
        is every lower band's of its group)."""
        lo, hi = spans[band]
        floor = self.floor
        n, m = self._band_terms(i, k, *floor.band(k, lo, hi, floor.round_under(k, lo)), in_flight_two=band > 0)
        return (-(n / m), n, m, band, first) if n > 0 else None

    def _groups(self, k: int) -> list[tuple[int, int]]:
        """Decode candidate ``k``'s rung bands by the power of two under their least batch (the first, at batch one,
        alone: it is read with one request in flight), each as (its first band, one past its last)."""
        if k not in self._group_memo:
            spans = self.floor.band_spans(k, fine=True)
            keys = [(lo.bit_length(), band > 0) for band, (lo, _) in enumerate(spans)]
            starts = [band for band in range(len(spans)) if band == 0 or keys[band] != keys[band - 1]]
            ends = [*starts[1:], len(spans)] if spans else []  # no rung bands: a batch of one
            self._group_memo[k] = list(zip(starts, ends, strict=True))
        return self._group_memo[k]

    def _band_terms(self, i: int, k: int, round_ns: int, most_units: int, in_flight_two: bool,
                    workers: int = 1, transfer_ns: int = 0) -> Terms:
        """The pair's ``_pair_terms`` in one band of the decode batch (its round, the most rate units a decode worker
        sustains in it): the prefill worker's capacity, or what it feeds at that round within the TTFT limit if less
        (``ChoiceFloor.feed_cap_units``, in a pool of at least ``workers``); (0, 1) where it feeds nothing."""
        (a, g), h = self.prefill[i], self.decode[k][1]
        feed = min(a, self.floor.feed_cap_units(i, round_ns, in_flight_two, workers, transfer_ns))
        return _pair_terms(feed, g, most_units, h) if feed > 0 else (0, 1)

    def _most_below(self, k: int) -> list[int]:
        """For each band of decode candidate ``k`` over the powers of two, the most rate units a worker sustains in it
        or any band below."""
        if k not in self._most:
            self._most[k] = list(itertools.accumulate((most for _, most in self.floor.decode_bands(k)), max))
        return self._most[k]


Terms = tuple[int, int]  # a ratio as (numerator, denominator), the denominator above 0
# How far above the most of its batches' bounds a group's bound (``PairKeys.group_terms``) may stop: halving the bands
# to a single batch read 130-280 bands a group on Mixtral-8x22B and Qwen3-30B-A3B over 64-128x8xH200 and Kimi-K2 over
# 14x72xGB200 under SGLang (2026-12-08), where a bound this close orders the walk's heap about as well.
GROUP_SLACK = Fraction(1, 1024)
_Bound = tuple[float, int, int, int, int]  # a rung band's bound: (-its float, its terms, the band, its group's first)


def _pair_terms(a: int, g: int, b: int, h: int) -> Terms:
    """``pair_bound(a / g, b / h)`` as numerator and denominator: ``a b / (g b + h a)``."""
    return a * b, g * b + h * a


def pair_bound(prefill_per_gpu: Fraction, decode_per_gpu: Fraction) -> Fraction:
    """The most rate units per GPU a deployment of workers of these rates per GPU reaches (exact): with
    rate ``R <= min(x a, y b)`` on ``x g + y h`` GPUs, ``x >= R / a`` and ``y >= R / b`` give ``R / G <=
    1 / (g / a + h / b)``."""
    if prefill_per_gpu <= 0 or decode_per_gpu <= 0:
        return Fraction(0)
    return 1 / (1 / prefill_per_gpu + 1 / decode_per_gpu)


@dataclass
class Walk:
    """What the walk found and judged (module docstring)."""

    accepted: tuple[Choice, Served] | None = None  # the best it found
    complete: bool = False  # ``accepted`` is brute force's answer, or nothing can beat the seed
    frontier: Fraction | None = None  # None: nothing judged
    expanded: list[tuple[int, int]] = field(default_factory=list)  # pairs whose deployments were listed
    # Deployments judged at exactly the frontier's key (their full rate per GPU, or their pair's bound), each
    # with the most rate units it may carry (less than it needed; None: nothing keeps every rule).
    capped_at_frontier: list[tuple[Choice, int | None]] = field(default_factory=list)
    checks: int = 0  # deployments the exact check judged


def walk(pools: Pools, floor_per_gpu: Fraction, deadline: Deadline, most: int | None = None,
         floor: ChoiceFloor | None = None, most_gpus: int | None = None) -> Walk:
    """Judge the deployments of at least ``floor_per_gpu`` rate units per GPU at full load (the seed's; 0
    with no seed: every deployment with a rate) in brute force's order, each at the rate it carries within
    every rule (``Pools.served``), until none left can come before the best found, listing at most ``most``
    (``WALK_CHOICES``); ``floor``: the TTFT floor to ask first (these pools' own by default). ``most_gpus``:
    only deployments on at most that many GPUs (a seed's walk, ``prune.walked_seed``); the frontier then
    holds for those only."""
    most = WALK_CHOICES if most is None else most
    judge = floor if floor is not None else ChoiceFloor(pools)
    keys = PairKeys(pools, judge)
    out = Walk()
    # Each entry: the key as a float, then exactly (a float's order never contradicts the exact one, and it is
    # compared far faster), the kind and what it is. Keys are kept as integer terms, a Fraction made only for what
    # the walk reports: it pushes one per pair and per listed deployment (593,160 on 64x8xH200).
    heap: list[tuple[float, _Key, int, tuple[int, ...]]] = []
    floor_n, floor_d = floor_per_gpu.numerator, floor_per_gpu.denominator
    level = FIRST if keys.banded else OWN  # without bands the first key is the pair's own bound
    for i in range(len(pools.prefill)):
        for k in range(len(pools.decode)):
            n, m = keys.first_terms(i, k)
            if n > 0 and n * floor_d >= floor_n * m:
                heap.append(_entry(n, m, 0, (i, k, level)))  # 0: ahead of the deployments of an equal rate per GPU
    heapq.heapify(heap)
    listed = 0
    front: Terms | None = None  # the frontier's terms (``out.frontier`` once the walk returns)
    while heap:
        if deadline.passed():
            return _reported(out, front)
        _, key, kind, entry = heap[0]
        rn, rd = key.num, key.den
        if out.accepted is not None and not _may_beat(pools, out.accepted, (rn, rd), kind, entry):
            break
        heapq.heappop(heap)
        if front is None or rn * front[1] != front[0] * rd:
            front, out.capped_at_frontier = (rn, rd), []
        if kind == 0:
            i, k, at, *group = entry
            if at < OWN:  # at a key it may tighten: back in at the next, never higher than this one
                if at == FIRST:
                    n, m = keys.held_terms(i, k)
                elif _lists_many(pools, i, k, most_gpus):
                    n, m = keys.held_terms(i, k, fine=True)
                    if n * rd > rn * m:
                        n, m = rn, rd
                else:  # the finer bands cost a round each; a pair with few deployments is listed sooner than that
                    n, m = rn, rd
                if n > 0 and n * floor_d >= floor_n * m:
                    heapq.heappush(heap, _entry(n, m, 0, (i, k, at + 1)))
                continue
            if at == OWN and keys.banded and _lists_many(pools, i, k, most_gpus):
                for workers in _worker_groups(pools, i, k, most_gpus):
                    n, m = keys.group_terms(i, k, workers)
                    if n * rd > rn * m:
                        n, m = rn, rd
                    if n > 0 and n * floor_d >= floor_n * m:
                        heapq.heappush(heap, _entry(n, m, 0, (i, k, SPLIT, workers)))
                out.expanded.append((i, k))  # each of its deployments is keyed in the heap, or below the floor
                continue
            xs = (group[0], 2 * group[0] - 1) if group else None
            found = _listed(pools, i, k, floor_per_gpu, most - listed, most_gpus, xs)
            if found is None:  # too many to list: the rest is CP-SAT's
                return _reported(out, front)
            listed += len(found)
            for c in found:  # each at most the pair's bound, so the keys popped never rise (the frontier's premise)
                rate, gpus = pools.rate(c), pools.gpus(c)
                n, m = (rate, gpus) if rate * rd <= rn * gpus else (rn, rd)
                heapq.heappush(heap, _entry(n, m, 1, (gpus, c.prefill, c.decode, c.x, c.y)))
            if not group:
                out.expanded.append((i, k))
            continue
        c = Choice(*entry[1:])
        deadline.spend(NODE_WORK)  # each judged deployment is work, an exact check more (search_base.Deadline)
        need = _need(pools, out.accepted, floor_per_gpu, c)
        if judge.refuses(c, need):  # it carries less than the need
            out.capped_at_frontier.append((c, need - 1))
            continue
        out.checks += 1
        served = pools.checked_served(c, deadline)
        if served is not None and served.units >= need:
            out.accepted = (c, served)
            continue
        out.capped_at_frontier.append((c, None if served is None else served.units))
    out.complete = True  # nothing left can come before the best found, or every deployment was refused
    if out.accepted is not None:
        best, served = out.accepted
        out.frontier, out.capped_at_frontier = Fraction(served.units, pools.gpus(best)), []
        return out
    # every deployment left judged at its key, the last popped: at the floor's, those stay capped there
    _reported(out, front)
    out.capped_at_frontier = out.capped_at_frontier if out.frontier == floor_per_gpu else []
    out.frontier = floor_per_gpu
    return out


def _reported(out: Walk, front: Terms | None) -> Walk:
    """``out`` with its frontier as the Fraction of the walk's terms."""
    out.frontier = None if front is None else Fraction(*front)
    return out


class _Key:
    """A heap key's exact ratio, the highest first, compared only where two keys' floats tie: by integer
    products, with no Fraction made (whose comparisons check abstract number types each time)."""

    __slots__ = ("num", "den")

    def __init__(self, num: int, den: int):
        self.num, self.den = num, den

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Key) and self.num * other.den == other.num * self.den

    def __lt__(self, other: _Key) -> bool:
        return self.num * other.den > other.num * self.den  # the higher ratio first

    __hash__ = None  # type: ignore[assignment]  # equal keys of unequal terms: not for sets


# A pair's keys in the heap, each no higher than the last: ``first_pair_bound``, then ``held_pair_bound`` over the
# powers of two, then over the rungs (``fine``), at which its deployments are listed; or, where it has many, its
# prefill worker counts in groups (SPLIT), each at ``PairKeys.group_terms`` of its least count.
FIRST, HELD, OWN, SPLIT = 0, 1, 2, 3
# Deployments a pair may list past which its bound over the rungs is read: below, listing them costs less than
# the rounds (on 2x8xH200 under SGLang, reading it for every pair cost 629 more ``evaluate`` calls, 3,279 against
# 2,650, for pairs of a deployment or two).
FINE_LISTED = 64


def _lists_many(pools: Pools, i: int, k: int, most_gpus: int | None) -> bool:
    """Whether more than ``FINE_LISTED`` worker counts of the pair fit the GPUs (``x g + y h <= n``, both at least 1;
    alignment aside), counted only that far (a 1-GPU decode worker on 65,536 GPUs has 65,535 values of y)."""
    n = pools.problem.cluster.num_gpus if most_gpus is None else most_gpus
    g, h = pools.prefill[i].gpus, pools.decode[k].gpus
    counted = 0
    for y in range(1, n // h + 1):
        if n - y * h < g:
            return False  # no prefill worker fits beside this many decode workers, nor beside more
        counted += (n - y * h) // g
        if counted > FINE_LISTED:
            return True
    return False


def _worker_groups(pools: Pools, i: int, k: int, most_gpus: int | None) -> list[int]:
    """The least prefill worker count of each group of the pair's deployments, 1, 2, 4, ... (a group runs to one
    below twice its least), up to the most workers that fit beside one decode worker."""
    n = pools.problem.cluster.num_gpus if most_gpus is None else min(pools.problem.cluster.num_gpus, most_gpus)
    most = (n - pools.decode[k].gpus) // pools.prefill[i].gpus
    return [1 << j for j in range(most.bit_length())]


def _entry(num: int, den: int, kind: int, what: tuple[int, ...]) -> tuple[float, _Key, int, tuple[int, ...]]:
    """A heap entry at the key ``num / den``, the highest key first (an integer division is correctly rounded, so
    equal ratios of unequal terms get the same float)."""
    return -(num / den), _Key(num, den), kind, what


def _need(pools: Pools, best: tuple[Choice, Served] | None, floor_per_gpu: Fraction, c: Choice) -> int:
    """The fewest rate units ``c`` must carry to be the walk's best: to come before ``best`` in brute force's
    order, or with nothing found yet to reach ``floor_per_gpu`` (at least one)."""
    gpus = pools.gpus(c)
    if best is None:
        return max(1, math.ceil(floor_per_gpu * gpus))
    b, served = best
    return units_ahead(served.units, pools.gpus(b), b, gpus, c)


def _may_beat(pools: Pools, best: tuple[Choice, Served], ratio: Terms, kind: int, entry: tuple[int, ...]) -> bool:
    """Whether the heap's top (a pair at its bound, or a deployment at its key, ``ratio`` as terms) may still hold a
    deployment that comes before ``best``: what a deployment carries is at most its key, so one at a lower key, or
    at an equal one on as many GPUs or more and later, cannot."""
    b, served = best
    best_gpus = pools.gpus(b)
    above, level = ratio[0] * best_gpus, served.units * ratio[1]  # the key and best's rate per GPU, cross-multiplied
    if above != level or kind == 0:
        return above > level or kind == 0 and above == level
    gpus, *rest = entry
    return (gpus, Choice(*rest)) < (best_gpus, b)


def _listed(pools: Pools, i: int, k: int, floor_per_gpu: Fraction, room: int,
            most_gpus: int | None = None, xs: tuple[int, int] | None = None) -> list[Choice] | None:
    """The pair's deployments that fit the cluster (and ``most_gpus``; ``xs``: of prefill worker counts in that range,
    ends included) with a rate of at least ``floor_per_gpu`` per GPU (and more than 0), or None if there would be
    more than ``room``. For each y
    the pools' own capacities bound x from both sides (``min(x a, y b) >= f (x g + y h)``), and so, for x in
    ``xs``, bound y (each group of a pair of 1-GPU workers on 65,536 GPUs read every y, 65,536 of them, where a few
    hundred can hold one); the links only lower the rate, which the exact ``Pools.rate`` then reads."""
    n = pools.problem.cluster.num_gpus
    top = n if most_gpus is None else min(n, most_gpus)
    p, d = pools.prefill[i], pools.decode[k]
    a, g, b, h = p.capacity_units, p.gpus, d.capacity_units, d.gpus
    f = floor_per_gpu
    if f > 0 and (a <= f * g or b <= f * h):
        return []  # the pair's bound is at most f: no deployment of it beats f
    first_y, last_y = 1, top // h
    if xs is not None:
        last_y = min(last_y, (top - xs[0] * g) // h)  # past it, no deployment of xs[0] workers or more fits
        if f > 0:  # x <= y (b - f h) / (f g) and x >= f y h / (a - f g), for some x in xs
            first_y = max(first_y, math.ceil(f * xs[0] * g / (b - f * h)))
            last_y = min(last_y, math.floor(xs[1] * (a - f * g) / (f * h)))
    spans: list[tuple[int, int, int]] = []  # (y, first x, last x)
    count = 0
    for y in range(first_y, last_y + 1):
        lo, hi = 1, (n // g if most_gpus is None else (top - y * h) // g)
        if xs is not None:
            lo, hi = max(lo, xs[0]), min(hi, xs[1])
        if f > 0:
            lo = max(lo, math.ceil(f * y * h / (a - f * g)))
            hi = min(hi, math.floor(y * (b - f * h) / (f * g)))
        if lo <= hi:
            spans.append((y, lo, hi))
            count += hi - lo + 1
            if count > room:
                return None
    out = []
    for y, lo, hi in spans:
        for x in range(lo, hi + 1):
            c = Choice(i, k, x, y)
            rate = pools.rate(c)
            if rate > 0 and pools.end_gpu(c) <= n and Fraction(rate, pools.gpus(c)) >= f:
                out.append(c)
    return out


__all__ = ["WALK_CHOICES", "Walk", "pair_bound", "walk"]
