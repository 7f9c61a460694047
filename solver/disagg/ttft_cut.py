"""A floor under a deployment's TTFT in terms the CP-SAT pool model can read: for one prefill and one
decode candidate, the rate per prefill worker above which no deployment keeps the TTFT limit, given
the chunk and batch its pools must at least run at. Each cut only removes deployments the exact check
(``deploy.Pools.feasible_plan``) would refuse, so the search returns the same deployment; it makes far
fewer proposals where most deployments better per GPU than the incumbent break TTFT (on 512 GPUs
every one of the 278 better than the seed does).

**Why the floor holds.** The exact check prices a choice at the fewest requests in flight ``C`` whose
steady state (``cost.disagg.steady_state``) reaches the choice's rate; ``X`` is that state's rate,
``X >= R`` for the rate ``R`` the model gives the choice (the model's ``R`` is at most the choice's
rate, ``Pools.rate``, which is the target). Each pool runs at a chunk or batch that sustains ``X``
(the bisection's answer sustains it, or is the largest, which does); so if ``R`` is above ``x`` times
every smaller chunk's capacity per worker than ``h`` (``R > x a(<h)``), the chunk is at least ``h``,
and if ``R > y b(<j)``, the batch is at least ``j``. The pass and the round grow with the chunk and
the batch (the premise ``workers.DecodeSearch`` takes too; tests check it on every candidate), so the
pass is at least ``pass(h)`` and TPOT at least ``round(j)``. A worker's capacity need not grow with
the batch (it dips by parts per million where the round grows in proportion), so the floors are
maxima over every smaller chunk or batch (``capacity_below``). The state is carried, ``X e2e0 <=
C``, where ``e2e0`` = overhead + queue + pass + transfer + admission + (OSL - 1) rounds, so Little's
law gives ``TTFT = C / X - (OSL - 1) round >= overhead + queue + pass + transfer + admission``; the
queue is ``share (C - 1) s`` rounded, ``s`` the pool's time per prompt at its largest chunk over x
workers (``cost.disagg.serving_stack_ns``); the decode worker's admission is none at one request in flight, so
``ChoiceFloor`` counts it where more than one must be in flight, and ``PairCuts`` where their cap on the rate is
above what one request in flight can carry (``_with_admission``). With
``v = X s`` (the prefill pool's utilisation, at most 1) and ``C >= X (queue + E)``, ``E`` = overhead +
pass(h) + transfer + (OSL - 1) round(j):

    queue (1 - share v) >= share v E - share s - 1/2

and TTFT <= limit means queue <= L' = limit - overhead - pass(h) - transfer, hence

    v <= (L' + share s + 1/2) / (share (E + L'))      with s <= s1 (one worker's time per prompt)

and, as ``v = X s1 / x`` and ``X >= R``: ``R <= x T`` with ``T = v_max / s1`` (rounded up, with slack
for floating point). ``L' < 0`` leaves no rate at all. The transfer is the faster link's (either tier).
tests/unit/solver/disagg hold every deployment the exact check accepts to every cut, and the search
with the cuts to brute force.

Levels: every chunk when there are at most ``MAX_CHUNK_LEVELS`` (else only the lone prompt's), and
decode batches from the candidate's own down, denser near it, where the pools better per GPU run;
fewer levels only loosen the floor, never break it.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from dataclasses import dataclass

from shardplan.hardware import Tier
from shardplan.hardware.profile import Profile
from shardplan.rules.layout import Layout
from shardplan.rules.problem import Problem
from shardplan.solver.cost.disagg import (
    PrefillStep,
    admission_ns,
    decode_step,
    largest_chunk,
    prefill_step,
    request_overhead_ns,
    transfer_ns,
)
from shardplan.solver.cost.evaluate import NS_PER_S
from shardplan.solver.disagg.deploy import Choice, Pools
from shardplan.solver.disagg.workers import RATE_UNITS_PER_RPS, DecodeWorker, PrefillWorker

FLOAT_SLACK = 1e-9  # relative: every rounding of the exact check's floats is far below it
NS_SLACK = 2.0  # absolute: integer rounding of the queue (1/2 ns) and of the TTFT limit's comparison
MAX_CHUNK_LEVELS = 8
DECODE_LEVEL_STEPS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256)  # batches below the candidate's own


@dataclass(frozen=True)
class PairCuts:
    """``R <= x caps[h][j]`` whenever ``R > x chunk_floor[h]`` and ``R > y batch_floor[j]`` (rate units;
    a floor of 0 is no condition; a cap of None is no cut)."""

    chunk_floor: list[int]
    batch_floor: list[int]
    caps: list[list[int | None]]

    def allows(self, x: int, y: int, rate_units: int) -> bool:
        """Whether a deployment of these workers at ``rate_units`` passes every cut (what the model
        enforces; tests hold accepted deployments to it)."""
        for h, pf in enumerate(self.chunk_floor):
            for j, df in enumerate(self.batch_floor):
                cap = self.caps[h][j]
                if cap is not None and rate_units > x * pf and rate_units > y * df and rate_units > x * cap:
                    return False
        return True


def _units_above(rps: float) -> int:
    """Rate units at or above ``rps`` with slack: ``R`` above this many units means the rate is above
    ``rps`` whatever the exact check's floating point does."""
    return math.ceil(rps * RATE_UNITS_PER_RPS * (1 + FLOAT_SLACK))


def chunk_levels(top: int) -> list[int]:
    """Every chunk when there are few; else the chunk of one prompt alone (no chunk condition): the
    floor needs every smaller chunk's capacity, one ``evaluate`` each."""
    return list(range(1, top + 1)) if top <= MAX_CHUNK_LEVELS else [1]


def batch_levels(top: int) -> list[int]:
    return sorted({1, *(top - n for n in DECODE_LEVEL_STEPS if top - n >= 1)})


def capacity_below(levels: list[int], rounds_ns: list[int], osl: int) -> list[float]:
    """For each decode level, at least every smaller batch's requests per second per worker (0 for the
    first): a batch b between two levels ``lo <= b < hi`` has its round at least ``round(lo)``, so its
    capacity ``b / ((OSL - 1) round(b))`` is at most ``(hi - 1) / ((OSL - 1) round(lo))``. The capacity
    itself need not grow with the batch (it dips where the round grows in proportion)."""
    out, top = [0.0], 0.0
    for m in range(1, len(levels)):
        top = max(top, (levels[m] - 1) * NS_PER_S / (max(osl - 1, 1) * rounds_ns[m - 1]))
        out.append(top)
    return out


def least_transfer_ns(problem: Problem, profile: Profile, prefill: Layout, decode: Layout) -> int:
    """One prompt's KV transfer (moved and re-laid out) over the faster tier: at most the placement's."""
    return min(sum(transfer_ns(problem, prefill, decode, tier, profile)) for tier in (Tier.SCALE_UP, Tier.SCALE_OUT))


def most_utilisation(spare_ns: float, e2e_floor_ns: float, share: float, per_prompt_ns: float) -> float:
    """The most the prefill pool's utilisation ``v`` may be and keep TTFT within the limit: ``v <= (L' +
    share s + 1/2) / (share (E + L'))`` (module docstring), ``spare_ns`` = L', ``e2e_floor_ns`` = E,
    ``per_prompt_ns`` at least the pool's time per prompt ``s``; ``NS_SLACK`` covers the 1/2 and the
    rounding of the limit's comparison."""
    return (spare_ns + share * per_prompt_ns + NS_SLACK) / (share * (e2e_floor_ns + spare_ns))


def pair_cuts(problem: Problem, profile: Profile, p: PrefillWorker, d: DecodeWorker) -> PairCuts | None:
    """The cuts of one pair (module docstring); None when the problem has no TTFT limit or no queue."""
    wl = problem.workload
    share = profile.ttft_queue_share
    if wl.ttft_ms is None or not 0 < share < 1:
        return None
    limit_ns = wl.ttft_ms * 1e6 + NS_SLACK
    overhead_ns = request_overhead_ns(profile)
    transfer = least_transfer_ns(problem, profile, p.layout, d.layout)
    top_chunk = min(largest_chunk(problem, profile), profile.max_batch)
    full = prefill_step(problem, p.layout, top_chunk, profile)
    s1_ns = full.slowest_ns / full.chunk  # one worker's time per prompt at its largest chunk
    chunks = chunk_levels(top_chunk)
    batches = batch_levels(d.batch) if wl.osl > 1 else [1]  # one token: no decode round in the e2e
    prefill_caps = [prefill_step(problem, p.layout, h, profile).capacity_rps(1) for h in chunks]
    chunk_floor = [0 if n == 0 else _units_above(max(prefill_caps[:n])) for n in range(len(chunks))]
    rounds_ns = [decode_step(problem, d.layout, j, profile).round_ns for j in batches]
    batch_floor = [0 if n == 0 else _units_above(rps) for n, rps in enumerate(capacity_below(batches, rounds_ns,
                                                                                             wl.osl))]
    caps: list[list[int | None]] = []
    for h in chunks:
        pass_ns = prefill_step(problem, p.layout, h, profile).pass_ns
        caps.append([cut_units(profile, wl.osl, limit_ns - overhead_ns - pass_ns - transfer,
                               overhead_ns + pass_ns + transfer, round_ns, s1_ns) for round_ns in rounds_ns])
    return PairCuts(chunk_floor, batch_floor, caps)


def cut_units(profile: Profile, osl: int, spare_ns: float, before_decode_ns: float, round_ns: int,
              s1_ns: float, in_flight_two: bool = False) -> int:
    """One cell of ``pair_cuts``: the most rate units per prefill worker (``x T``'s ``T``, module docstring) at
    ``L'`` = ``spare_ns`` and the e2e floor's part before the decode rounds (overhead, pass and transfer), the
    round and one worker's time per prompt at its largest chunk given; -1 when no rate keeps the limit.

    ``in_flight_two``: only for steady states of at least two requests in flight (a decode batch of two or more
    needs them), where the decode worker's admission is in every TTFT: the tighter cap then holds outright, and
    an admission past ``L'`` leaves no rate. This cap falls as the round grows; without it, it need not
    (``_with_admission`` falls back to the cap without the admission)."""
    if spare_ns < 0:
        return -1
    e2e_floor_ns = before_decode_ns + (osl - 1) * round_ns
    share = profile.ttft_queue_share
    if osl > 1 and in_flight_two:
        admitted_ns = admission_ns(profile, round_ns, 2)
        if spare_ns - admitted_ns < 0:
            return -1
        v_max = most_utilisation(spare_ns - admitted_ns, e2e_floor_ns + admitted_ns, share, s1_ns)
    else:
        v_max = most_utilisation(spare_ns, e2e_floor_ns, share, s1_ns)
        if osl > 1:
            v_max = _with_admission(v_max, admission_ns(profile, round_ns, 2), spare_ns, e2e_floor_ns, share, s1_ns)
    return _units_above(v_max * NS_PER_S / s1_ns) + 1


ADMISSION_SLACK = 1e-6  # relative: the rates compared are floats from integer nanoseconds


def _with_admission(v_max: float, admitted_ns: int, spare_ns: float, e2e_floor_ns: float, share: float,
                    per_prompt_ns: float) -> float:
    """The cap on the prefill pool's utilisation with the decode worker's admission (``admitted_ns``, read at
    the level's round: at most the exact one) in TTFT and in the e2e, where it is sound for every deployment.

    The admission is in TTFT only when more than one request is in flight; with one, ``X e2e0 <= 1`` bounds the
    rate by ``1 / E``. So the tighter cap ``v'`` (``most_utilisation`` with ``L' - A`` and ``E + A``) holds
    for every rate above ``1 / E``, and the cut ``R <= x v' / s1`` for every rate as soon as one worker's
    ``v' / s1`` is at least ``1 / E`` (``v' E >= s1``, with slack for the floats): then ``x v' / s1 >= 1 / E``
    on any ``x >= 1``. Otherwise the cap without it stands (``ChoiceFloor`` counts the admission per
    deployment, where it knows the rate)."""
    if admitted_ns <= 0 or spare_ns - admitted_ns < 0:
        return v_max
    tighter = most_utilisation(spare_ns - admitted_ns, e2e_floor_ns + admitted_ns, share, per_prompt_ns)
    return tighter if tighter * e2e_floor_ns >= per_prompt_ns * (1 + ADMISSION_SLACK) else v_max


class ChoiceFloor:
    """The same floor for one deployment at one rate (``refuses``), its chunk and batch bounded from that
    rate itself rather than from levels: what the search asks before the exact check, which it spares
    for every deployment the floor refuses (on SGLang's profile at a tight TTFT limit nearly all: its
    queue share, 0.148, makes TTFT bind for every deployment better per GPU than the answer).

    **The least chunk and batch.** The exact check's steady state runs at a rate ``X >= r`` (``r`` the
    rate asked, ``target_units``) and each pool at the chunk or batch ``smallest_sustaining`` picks,
    whose capacity reaches ``X`` (its answer's capacity does: it is either a probe that did or the top,
    which bounds ``X``). A prefill worker of ``ranks`` attention-DP ranks at ``n`` prompts per rank has
    the capacity ``x ranks n / slowest(n)`` (``PrefillStep``: chunk ``n ranks``), so its ``n`` satisfies
    ``n >= r slowest(n) / (x ranks)``; as ``slowest`` grows with ``n``, any ``m <= n`` gives ``n >= r
    slowest(m) / (x ranks)``, and from ``m = 1`` that step repeated climbs to a fixed point, never past
    ``n``. Likewise the batch, ``b >= r (OSL - 1) round(b) / y``, the round read first at the highest rung at
    or under the batch (``rungs``: still at most ``round(b)``, and never falling; their rounds are shared by
    every worker count, so this costs few ``evaluate`` calls). The pass and the round grow with the chunk and
    the batch, so the pass is at least ``pass(m)`` and the round ``round(m')`` at those fixed points, and the
    floor is ``pair_cuts``' at exactly them, with the pool's own time per prompt (its largest chunk's over x
    workers) and the transfer over the deployment's own link (``Pools.tier``, its placement's), so it is close
    to the exact TTFT wherever the requests in flight bind. Where it does not refuse at the rungs it is asked
    again at the exact rounds, climbing on from the rungs' fixed point (at most the exact one: its rounds are no
    longer): a rung may read a round 2-3 % short, which let through deployments held just below the best found
    (Qwen3-235B-A22B on 64x8xH200, TensorRT-LLM, TTFT 2 s: 462 exact checks and proposals before, 22 after, and
    the walk then ends with a proven answer). tests/unit/solver/disagg hold every deployment the exact check
    accepts to it (brute force), at its own rate and at target rates, and what each deployment held below its
    full rate carries, and check its premises (the step's chunk is ``n ranks``; the slowest stage, the pass and
    the round grow with the chunk or batch) on every candidate."""

    def __init__(self, pools: Pools):
        self.pools = pools
        problem, profile = pools.problem, pools.profile
        wl = problem.workload
        self.share = profile.ttft_queue_share
        self.active = wl.ttft_ms is not None and 0 < self.share < 1
        self.limit_ns = (wl.ttft_ms or 0) * 1e6 + NS_SLACK
        self.overhead_ns = request_overhead_ns(profile)
        self.top_chunk = min(largest_chunk(problem, profile), profile.max_batch)
        self._first_refused: tuple[Choice, int] | None = None  # for ``explain``
        # memos by candidate index: the same few prices are read for every worker count
        self._prefill: dict[tuple[int, int], PrefillStep] = {}  # _prefill[(i, n)]: candidate i at n per rank
        self._round: dict[tuple[int, int], int] = {}  # _round[(k, b)]: candidate k's round at batch b
        self._transfer: dict[tuple[int, int, Tier], int] = {}  # _transfer[(i, k, tier)]: the pair's over that tier
        self._rungs: dict[int, list[int]] = {}  # _rungs[k]: rungs(candidate k's batch)
        self._least_round: int | None = None  # _least_round_ns()'s memo
        # feed_cap_units' memo: _feed[(i, workers, transfer)][2 round + two]
        self._feed: dict[tuple[int, int, int], dict[int, int]] = {}
        self._bands: dict[tuple[int, bool], list[tuple[int, int]]] = {}  # _bands[(k, fine)]: decode_bands' memo

    def refuses(self, c: Choice, target_units: int) -> bool:
        """Whether no steady state of ``c`` reaching ``target_units`` keeps the TTFT limit (so the exact
        check at that target refuses it); False when the problem has no limit or no queue."""
        if not self.active or target_units <= 0:
            return False
        osl = self.pools.problem.workload.osl
        rps = target_units / RATE_UNITS_PER_RPS * (1 - FLOAT_SLACK)  # at most the steady state's X
        transfer = self._transfer_ns(c.prefill, c.decode, self.pools.tier(c))
        if osl <= 1:
            refused = self._refused_at(c.prefill, c.x, rps, transfer, 0, FLOAT_SLACK)
        else:
            batch = self._least_batch(c.decode, c.y, rps, self._round_below)
            refused = self._refused_at(c.prefill, c.x, rps, transfer, self._round_below(c.decode, batch), FLOAT_SLACK)
            if not refused:  # the rungs' rounds only loosen it: again at the exact rounds (class docstring)
                batch = self._least_batch(c.decode, c.y, rps, self._round_at, batch)
                refused = self._refused_at(c.prefill, c.x, rps, transfer, self._round_at(c.decode, batch), FLOAT_SLACK)
        if refused and self._first_refused is None:
            self._first_refused = (c, target_units)
        return refused

    def refuses_every(self, target_units: int) -> bool:
        """Whether ``refuses(c, target_units)`` holds for every choice that fits the cluster (then the exact
        check refuses every deployment at that target): checked per prefill candidate and worker count,
        with the pair's terms at their least (no transfer, the least decode time of any decode candidate).
        Cheap: one ``evaluate`` per decode candidate (its round at batch 1), none per pair.

        **Why it holds.** In ``refuses`` the chunk, the pass and the pool's time per prompt ``p`` depend
        on (prefill candidate, x) only; the pair enters through the transfer ``t`` and the decode time
        ``D = (OSL - 1) round``, where the round is read at a rung at or above batch 1, so ``D >= D1``,
        the least ``(OSL - 1) round(1)`` over the decode candidates (the round grows with the batch, the
        premise ``refuses`` rests on), and ``t >= 0``. ``L' = A - t`` and
        ``E + L' = limit + D``, so ``v_max = (A - t + share p + slack) / (share (limit + D))`` falls as
        ``t`` or ``D`` grows: at ``(0, D1)`` the spare and ``v_max`` are at least every pair's, and a
        refusal there (with twice ``FLOAT_SLACK`` for the floats) is a refusal for every decode candidate
        and y. The worker counts x run over every count that leaves room for one smallest decode
        worker (y >= 1); when at least one request arrives within ``limit + D1`` (``rps (limit + D1) >=
        1``, every realistic case), the refusal at x implies it at every smaller x: fewer workers run
        at least as large a chunk (the climb's step grows as x falls), so the pass is no shorter and
        the spare no larger, and ``share p (rps (limit + D1) - 1)`` only grows as ``p`` does; then only
        the largest x is read."""
        pools = self.pools
        if not self.active or target_units <= 0 or not pools.prefill or not pools.decode:
            return False
        osl, n = pools.problem.workload.osl, pools.problem.cluster.num_gpus
        rps = target_units / RATE_UNITS_PER_RPS * (1 - FLOAT_SLACK)
        least_round_ns = self._least_round_ns() if osl > 1 else 0
        least_decode_gpus = min(d.gpus for d in pools.decode)
        monotone = rps * (self.limit_ns + (osl - 1) * least_round_ns) / NS_PER_S >= 1 + 2 * FLOAT_SLACK
        for i, p in enumerate(pools.prefill):
            most = (n - least_decode_gpus) // p.gpus
            counts = range(most, most + 1) if monotone else range(1, most + 1)
            if any(not self._refused_at(i, x, rps, 0, least_round_ns, 2 * FLOAT_SLACK) for x in counts if x >= 1):
                return False
        return True

    def _refused_at(self, i: int, x: int, rps: float, transfer_ns: int, round_ns: int, slack: float) -> bool:
        """The floor's test for prefill candidate ``i`` on ``x`` workers at ``rps``, the transfer and the decode
        round given (``refuses``: the pair's; ``refuses_every``: their least), ``slack`` for the floats.

        The decode worker's admission (``cost.disagg.admission_ns``: the engine's wait steps, each a round) is
        part of the e2e, and so of the floor, once more than one request is in flight: it is, when the floor's
        e2e without it already holds one request at ``rps`` (``C >= X e2e0 >= rps E > 1``). Read at the floor's
        round, it is at most the exact one (it grows with the round); in ``refuses_every`` it falls as the
        transfer does, so the argument there holds with it."""
        pass_ns = self._step(i, self._least_chunk(i, x, rps)).pass_ns
        decode_ns = (self.pools.problem.workload.osl - 1) * round_ns
        e2e_floor_ns = self.overhead_ns + pass_ns + transfer_ns + decode_ns
        if round_ns and rps * e2e_floor_ns / NS_PER_S > 1 + slack:
            e2e_floor_ns += admission_ns(self.pools.profile, round_ns, 2)
        spare_ns = self.limit_ns - (e2e_floor_ns - decode_ns)  # L' < 0: no rate keeps the limit
        full = self._step(i, self.top_chunk)
        per_prompt_ns = full.slowest_ns / (x * full.chunk)  # the pool's, as serving_stack_ns prices it
        v_max = most_utilisation(spare_ns, e2e_floor_ns, self.share, per_prompt_ns)
        return spare_ns < 0 or rps * per_prompt_ns / NS_PER_S > v_max * (1 + slack)

    def worker_cap_units(self, i: int, k: int | None = None) -> int | None:
        """The most rate units one worker of prefill candidate ``i`` feeds in any steady state that keeps the
        TTFT limit with decode candidate ``k`` (None: any), at its full rate or held below it: ``pair_cuts``'
        cell of one prompt per step and batch one, the cut whose conditions every rate meets, read with no
        transfer and the round at batch one of ``k`` (None: the least of any decode candidate, as
        ``refuses_every`` reads it); each only loosens it. None when the problem has no limit or no queue; -1
        when no rate keeps it."""
        if not self.active:
            return None
        osl = self.pools.problem.workload.osl
        if osl == 1:
            round_ns = 0
        elif k is not None:
            round_ns = self._round_at(k, 1)
        else:
            round_ns = self._least_round_ns()
        return self.feed_cap_units(i, round_ns)

    def feed_cap_units(self, i: int, round_ns: int, in_flight_two: bool = False, workers: int = 1,
                       transfer_ns: int = 0) -> int:
        """``worker_cap_units`` where the decode round is at least ``round_ns`` (and, with ``in_flight_two``, at
        least two requests are in flight: ``cut_units``), memoised: the same few rounds are read for every
        pair. Call only when ``active``.

        ``workers``: what each worker feeds in a pool of at least that many (rounded up). The pool's time per prompt
        is one worker's over its workers, so its queue is shorter and ``most_utilisation`` lower: ``cut_units`` at
        that time per prompt is the cap of ``workers`` workers together, and the cap per worker only falls as the
        pool grows (``v_max`` falls with the time per prompt, and where the admission's tighter cap holds for a
        pool it holds for a larger one: ``_with_admission``'s test only gains as the time per prompt falls).
        ``transfer_ns``: with at least that KV transfer (``least_transfer_ns``: a longer one only lowers the cap).
        Both for ``walk.PairKeys.group_terms``."""
        memo = self._feed.setdefault((i, workers, transfer_ns), {})
        key = 2 * round_ns + in_flight_two
        if key not in memo:
            full = self._step(i, self.top_chunk)
            pass_ns = self._step(i, 1).pass_ns
            before_ns = self.overhead_ns + pass_ns + transfer_ns
            pool_units = cut_units(self.pools.profile, self.pools.problem.workload.osl,
                                   self.limit_ns - before_ns, before_ns,
                                   round_ns, full.slowest_ns / (workers * full.chunk), in_flight_two)
            memo[key] = pool_units if pool_units < 0 else -(-pool_units // workers)
        return memo[key]

    def decode_bands(self, k: int, fine: bool = False) -> list[tuple[int, int]]:
        """Decode candidate ``k``'s batches in bands, each as (its least round, the most rate units one worker
        sustains at a batch in it): from batch 1, each power of two, and the candidate's batch alone (its
        capacity). A worker sustaining its share of a rate runs a batch whose capacity reaches it (the steady
        state's bisection); a batch ``b`` in ``[lo, hi)`` rounds in at least ``round(lo)`` (the round grows with
        the batch) and so reaches at most ``(hi - 1) / ((OSL - 1) round(lo))``; and no deployment's rate passes its
        workers' capacity at the candidate's batch (``Pools.rate``), though a smaller batch may sustain a hair more
        (parts per million, ``capacity_below``), so each band's rate is at most that capacity. The rounds read are those
        ``workers.capped_workers`` priced (its caps are the powers of two), so under a TTFT limit they cost no
        ``evaluate``. ``fine``: the bands start at every rung instead (``rungs``: 1 to 16, then a sixteenth apart), a
        round each, some shared with the floor's climbs; each band's round is then closer to its batches'. Call only
        with OSL above 1."""
        if (k, fine) not in self._bands:
            d = self.pools.decode[k]
            bands = [self.band(k, lo, hi) for lo, hi in self.band_spans(k, fine)]
            self._bands[(k, fine)] = bands + [(d.round_ns, d.capacity_units)]
        return self._bands[(k, fine)]

    def band_spans(self, k: int, fine: bool = False) -> list[tuple[int, int]]:
        """``decode_bands``' bands but the last (the candidate's batch alone), each as (its least batch, one past its
        last)."""
        d = self.pools.decode[k]
        if fine:
            starts = self._ladder(k)
        else:
            starts = [1 << n for n in range(d.batch.bit_length()) if 1 << n < d.batch] + [d.batch]
        return list(zip(starts, starts[1:], strict=False))

    def band(self, k: int, lo: int, hi: int, round_ns: int | None = None) -> tuple[int, int]:
        """The band of decode candidate ``k``'s batches ``lo`` to ``hi - 1`` (``decode_bands``): (its least round, the
        most rate units one worker sustains in it). ``round_ns``: read at that round instead, at most ``lo``'s (the
        round at a power of two under it, which the bands over powers of two priced): no evaluate, and at least the
        band's rate."""
        d, osl = self.pools.decode[k], self.pools.problem.workload.osl
        round_ns = self._round_at(k, lo) if round_ns is None else round_ns
        return round_ns, min(d.capacity_units, _units_above((hi - 1) * NS_PER_S / ((osl - 1) * round_ns)))

    def round_under(self, k: int, b: int) -> int:
        """The round of decode candidate ``k`` at the highest power of two at or under batch ``b`` (at most the round
        at ``b``: the round grows with the batch)."""
        return self._round_at(k, 1 << (b.bit_length() - 1))

    @property
    def has_refused(self) -> bool:
        """Whether ``refuses`` has refused any deployment."""
        return self._first_refused is not None

    def explain(self) -> None:
        """Judge exactly the first deployment this floor refused, so that the pools' ``refused`` (the
        rules an infeasible answer names, ``serving.why_no_deployment``) holds TTFT's own message, as if
        the floor had not spared that check; nothing if TTFT's is there already."""
        if self._first_refused is not None and "SLA-001" not in self.pools.refused:
            self.pools.feasible_plan(*self._first_refused)

    def _least_chunk(self, i: int, x: int, rps: float) -> int:
        ranks = self.pools.prefill[i].layout.attn_dp
        return _climb(self.top_chunk, lambda n: rps * self._step(i, n).slowest_ns / (x * ranks * NS_PER_S))

    def _least_batch(self, k: int, y: int, rps: float, round_at: Callable[[int, int], int], start: int = 1) -> int:
        """The least batch the decode pool runs at (the class docstring's climb), its round read by ``round_at``
        (at most the round at that batch, never falling as it grows), climbing from ``start`` (at most the
        answer: the climb's own answer with rounds no longer)."""
        osl = self.pools.problem.workload.osl
        return _climb(self.pools.decode[k].batch,
                      lambda b: rps * (osl - 1) * round_at(k, b) / (y * NS_PER_S), start)

    def _round_below(self, k: int, b: int) -> int:
        """At most the round at batch ``b`` and never falling as ``b`` grows (what the climb needs): the
        round at the highest rung of ``rungs`` at or under ``b``. Rungs rather than every batch: each
        round is an ``evaluate`` call, and exact batches cost 3,000 of them on 2x8xH200 (1.5 s)."""
        ladder = self._ladder(k)
        return self._round_at(k, ladder[bisect.bisect_right(ladder, b) - 1])

    def _ladder(self, k: int) -> list[int]:
        """``rungs`` of decode candidate ``k``'s batch, memoised."""
        if k not in self._rungs:
            self._rungs[k] = rungs(self.pools.decode[k].batch)
        return self._rungs[k]

    def _least_round_ns(self) -> int:
        """The least round at batch 1 of any decode candidate (``refuses_every`` and ``worker_cap_units``)."""
        if self._least_round is None:
            self._least_round = min(self._round_at(k, 1) for k in range(len(self.pools.decode)))
        return self._least_round

    def _step(self, i: int, n: int) -> PrefillStep:
        if (i, n) not in self._prefill:
            pools = self.pools
            self._prefill[(i, n)] = prefill_step(pools.problem, pools.prefill[i].layout, n, pools.profile)
        return self._prefill[(i, n)]

    def _round_at(self, k: int, b: int) -> int:
        if (k, b) not in self._round:
            pools = self.pools
            self._round[(k, b)] = decode_step(pools.problem, pools.decode[k].layout, b, pools.profile).round_ns
        return self._round[(k, b)]

    def least_transfer_ns(self, i: int, k: int, least_gpus: int = 0) -> int:
        """At most the KV transfer of any deployment of the pair on at least ``least_gpus`` GPUs: over the faster tier,
        or across scale-up domains where that many cannot fit one (``Pools.tier``)."""
        if least_gpus > self.pools.problem.cluster.scaleup_domain_gpus:
            return self._transfer_ns(i, k, Tier.SCALE_OUT)
        return min(self._transfer_ns(i, k, tier) for tier in (Tier.SCALE_UP, Tier.SCALE_OUT))

    def _transfer_ns(self, i: int, k: int, tier: Tier) -> int:
        """One prompt's KV transfer between the pair's workers over ``tier`` (moved and re-laid out): the exact
        check's own, as a deployment's tier is its placement's (``Pools.tier``)."""
        if (i, k, tier) not in self._transfer:
            pools = self.pools
            self._transfer[(i, k, tier)] = sum(transfer_ns(pools.problem, pools.prefill[i].layout,
                                                           pools.decode[k].layout, tier, pools.profile))
        return self._transfer[(i, k, tier)]


RUNG_STEP = 1 / 16  # rungs above 16 grow by a sixteenth: a round between two is at most ~6% more KV read


def rungs(top: int) -> list[int]:
    """Batches 1 to 16, then each a sixteenth more than the last, and ``top`` itself (a pool whose decode
    binds runs there), all within ``top``."""
    out = list(range(1, min(top, 16) + 1))
    while out[-1] < top:
        out.append(min(top, max(out[-1] + 1, math.floor(out[-1] * (1 + RUNG_STEP)))))
    return out


def _climb(top: int, least_after: Callable[[int], float], start: int = 1) -> int:
    """The fixed point of ``n -> ceil(least_after(n))`` from ``start`` (1, or any point at most the answer),
    within ``top``: with ``least_after`` nondecreasing and the answer ``n*`` (in 1..``top``) at least
    ``least_after(n*)``, every step stays at or under ``n*`` (``ChoiceFloor``); the float is shaved by
    ``FLOAT_SLACK`` before rounding up."""
    n = start
    while n < top:
        need = math.ceil(least_after(n) * (1 - FLOAT_SLACK))
        if need <= n:
            break
        n = min(need, top)
    return n


__all__ = [
    "ChoiceFloor", "PairCuts", "batch_levels", "capacity_below", "chunk_levels", "cut_units", "least_transfer_ns",
    "most_utilisation", "pair_cuts", "rungs",
]
