"""A proven bound on the objective from the integer tables alone: what a time-limited plan's gap is
measured against when CP-SAT had too little time (or none) to prove its own.

For every (shape, stage count, batch option) the oracle would visit, a relaxation of the plan's cost:
- memory: a stage's bytes summed over the stages do not depend on where the boundaries fall, so a
  combination whose total passes stages x the per-GPU limit has no split that fits (a necessary
  condition only);
- time: a decode round is at least the decode sum over the stages (``round = max(sum, micro-
  batches x slowest stage)``) and the slowest prefill stage at least the prefill sum over the stage
  count; ``under_load`` grows with both, so it gives a lower bound on TTFT, TPOT and e2e.
A combination whose lower bounds already break a TTFT or TPOT limit is dropped too. The bound is the
best objective over what is left: the least e2e for latency, the most output tokens/s for throughput
(every replica the cluster holds). No CP-SAT here; ``optimise.py`` also merges in CP-SAT's own bound
when a search step ran out of time. ``pair_rates`` gives the same best per (shape, stage count) for the
colocated ``--rate`` search without pricing every integer batch of a decided batch.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from functools import partial
from itertools import accumulate

from shardplan.rules.problem import Objective
from shardplan.solver.cost.evaluate import (
    NS_PER_S,
    PER_MILLE,
    UnderLoad,
    microbatching,
    prefill_chunk,
    resolve_profile,
    under_load,
)
from shardplan.solver.oracle import Oracle
from shardplan.solver.space import BatchOption, Shape
from shardplan.solver.tables import TimeEntry


@dataclass(frozen=True)
class TableBound:
    """``objective``: the best objective any plan can reach, in the units of ``Optimum.objective_value``
    (e2e ns for latency, output tokens/s for throughput); ``e2e_floor_ns``: no plan's e2e is lower.
    ``objective`` is None when no combination passes the relaxation (then no plan exists)."""

    objective: float | None
    e2e_floor_ns: int | None


def relative_gap(value: float, bound: float, objective: Objective) -> float:
    """How far the proven bound lies from the plan's objective, relative to the plan's objective:
    (value - bound) / value for latency's lower bound on e2e, (bound - value) / value for throughput's
    upper bound on tokens/s. ``value`` unrounded: a bound may equal it, and then the gap is 0."""
    if value <= 0:
        return 0.0
    gap = (value - bound) / value if objective is Objective.LATENCY else (bound - value) / value
    return max(0.0, gap)  # floating-point noise of a bound that equals the value


def table_bound(oracle: Oracle) -> TableBound:
    """The relaxation's best objective over every combination the oracle would visit (see the module)."""
    bounds = pair_bounds(oracle).values()
    values = [b.objective for b in bounds if b.objective is not None]
    floors = [b.e2e_floor_ns for b in bounds if b.e2e_floor_ns is not None]
    throughput = oracle.problem.objective is Objective.THROUGHPUT
    best = (max(values) if throughput else min(values)) if values else None
    return TableBound(best, min(floors) if floors else None)


def pair_bounds(oracle: Oracle, check: Callable[[], None] | None = None) -> dict[tuple[Shape, int], TableBound]:
    """``table_bound`` of each (shape, stage count) the oracle visits, in one pass: what an oracle that
    excludes every other pair would bound (one oracle per pair, each excluding the other thousand, took
    minutes on 512 GPUs). ``check`` is called before each pair (a deadline's, which raises when it has
    passed): a decided batch prices every integer batch of every pair (``pair_rates`` does not)."""
    throughput = oracle.problem.objective is Objective.THROUGHPUT
    out: dict[tuple[Shape, int], TableBound] = {}
    for o, S, replicas, sums in _pairs(oracle, check):
        weights_bytes, kv_bytes_per_seq = _whole_model_bytes(oracle, o)
        best: float | None = None
        floor: int | None = None
        # A decided batch: every integer batch exactly (the CP-SAT search, the only caller, runs
        # this for a fixed batch; a decided one is the branch and bound's, which bounds itself).
        for opt in oracle.options(o, S):
            if not _may_fit(oracle, o, opt, S, weights_bytes, kv_bytes_per_seq):
                if oracle.space.decides_batch:
                    # The options come in increasing batch, and the bytes never fall as it grows (more
                    # sequences per GPU, a prefill chunk no smaller): no larger batch fits either, and
                    # pricing each of them (every integer up to the engine's limit) was most of the time.
                    break
                continue
            if opt.micro not in sums:
                sums[opt.micro] = _Sums.of(oracle, o, opt)
            batch = oracle.batch_of(o, opt, S)
            e2e_ns = sums[opt.micro].e2e_floor_ns(oracle, S, batch)
            if e2e_ns is None:
                continue
            floor = e2e_ns if floor is None else min(floor, e2e_ns)
            if throughput:
                value = _rate(replicas, batch, oracle.osl, e2e_ns)
                best = value if best is None else max(best, value)
            else:
                best = e2e_ns if best is None else min(best, e2e_ns)
        if best is not None or floor is not None:
            out[(o, S)] = TableBound(best, floor)
    return out


# What a pair's bound is used for: (shape, stages, tokens/s) -> the GPUs it needs, None past the cluster's.
# Nonincreasing in the tokens/s (more per replica, no more replicas).
Outcome = Callable[[Shape, int, float], int | None]


def pair_rates(oracle: Oracle, check: Callable[[], None] | None = None, outcome: Outcome | None = None,
               ) -> dict[tuple[Shape, int], float]:
    """``pair_bounds(oracle)[pair].objective`` of every pair that has one, the same floats, at the
    throughput objective (``--rate``'s colocated search). A decided batch is not priced at every
    integer batch (``pair_bounds``' 447,772 batches and 24,253 steps took 55 s on 256 GPUs): each pair's
    best is found by ``_PairRate``'s branch and bound, exactly. With ``outcome``, a pair's search stops
    as soon as the best found and every range's bound have one outcome (the maximum, between them, has it
    too, ``outcome`` being monotone): the float returned is then one of that outcome, and a pair whose
    every bound is past the cluster is left out (as its maximum would be)."""
    if not oracle.space.decides_batch or oracle.problem.objective is not Objective.THROUGHPUT:
        return {pair: b.objective for pair, b in pair_bounds(oracle, check).items() if b.objective is not None}
    out: dict[tuple[Shape, int], float] = {}
    for o, S, replicas, sums in _pairs(oracle, check):
        settle = None if outcome is None else partial(outcome, o, S)
        best = _PairRate(oracle, o, S, replicas, sums, settle).best()
        if best is not None:
            out[(o, S)] = best
    return out


def _pairs(oracle: Oracle, check: Callable[[], None] | None) -> Iterator[tuple[Shape, int, int, dict[int, _Sums]]]:
    """(shape, stage count, most replicas, the shape's sums per microbatch) of every pair the oracle visits
    with a replica that fits, ``check`` called before each: the sums are shared by a shape's stage counts
    (every option of one microbatch prices the same step)."""
    for o in oracle.shapes():
        sums: dict[int, _Sums] = {}
        for S in oracle.stage_counts(o):
            if check is not None:
                check()
            replicas = oracle.replicas(o, S)
            if replicas:
                yield o, S, replicas[-1], sums


def _rate(replicas: int, batch: int, osl: int, e2e_ns: int) -> float:
    """Output tokens/s of ``replicas`` replicas of ``batch`` sequences each, at this e2e: one expression,
    so that a bound (a larger batch, a smaller e2e) is never below a value in floating point (each of its
    operations is correctly rounded, hence monotone)."""
    return replicas * batch * osl * NS_PER_S / e2e_ns


class _PairRate:
    """The best ``pair_bounds`` value of one (shape, stage count) at a decided batch: the most tokens/s over
    every integer batch B = 1 .. the engine's limit that passes ``_may_fit`` (a prefix of them, see
    there) and whose ``_Sums.e2e_floor_ns`` keeps the TTFT and TPOT limits; the same float as the scan.

    B runs min(S, B) microbatches of m(B) = ceil(B / min(S, B)) sequences (nondecreasing in B; the
    batches of one m are S(m - 1) + 1 .. S m, or 1 .. S for m = 1), and everything the relaxation prices
    is that step's (``Tables.step(o, m)``) but for B itself. The prefill chunk is min(m, the token
    budget's prompts) (at least 1), so from the microbatch ``cap`` = that largest chunk on, the chunk, the
    prefill step (``Step(PREFILL, chunk, isl, isl)``: its layers, ends and sends) and the chunk's
    activation bytes are one value. Batches below ``cap``'s microbatch are scored one by one (the chunk
    grows there and a prompt's prefill need not); from it on, by branch and bound over ranges [lo, hi]:

    - memory: ``_may_fit``'s bytes at B depend on B only through ceil(B / attn_dp) sequences (the
      activation is one value here) and grow with it, so the batches that fit are lo .. a largest one,
      found by bisection;
    - time, for every B in [lo, hi] from a step priced at some m0 <= m(lo): a step's time only grows with
      its sequences (the premise of the search's batch ranges, ``space.BatchOption``, and of
      ``batch_search``), so the decode sum and sends at m(B) are at least m0's; the chunk steps a prompt
      needs (``prefill_steps``) only grow with m; the prefill sum is the same. ``under_load`` is
      nondecreasing in the round, the concurrency B and the chunk steps at a fixed prefill and chunk
      (each of its ceilings is; ``batch_per_mille`` grows with B), so ``under_load`` at (m0's step, lo)
      is a floor of every B in the range on e2e, TTFT and TPOT: if it breaks a limit, so does every
      B >= lo; else every B's tokens/s is at most ``_rate(hi, that e2e)``;
    - and along the range: at that step, B above lo adds (B - lo) x sc / (osl x chunk) to TPOT's prefill
      share and (B - lo) x queue share x sc / chunk to TTFT's queue, sc the slowest prefill stage (less
      1 ns for each ceiling), and no other term falls, so e2e(B) >= E + D (B - lo) with E = that e2e -
      osl and D = (osl - 1) x sc / (osl x chunk) + queue share x sc / chunk. B / (E + D (B - lo)) is
      monotone in B, so (E > 0) every B's tokens/s is at most ``replicas x osl x 1e9`` times the larger of
      lo / E and hi / (E + D (hi - lo)), computed in fractions and raised by 1e-9 for the two roundings
      of ``_rate``'s floats (at most 2.3e-16 relative).
    Best first: the range of highest bound is priced at m(lo), the batches of m(lo) in it scored exactly
    (one step, ``under_load`` per batch), the rest halved and bounded from that step. A range whose bound
    is at most the best value found cannot raise it; none left, the best is the scan's maximum.
    """

    def __init__(self, oracle: Oracle, o: Shape, S: int, replicas: int, sums: dict[int, _Sums],
                 outcome: Callable[[float], int | None] | None = None):
        self.oracle, self.o, self.S, self.replicas, self.sums = oracle, o, S, replicas, sums
        self.outcome = outcome  # pair_rates' outcome of this pair, or None for the exact maximum
        self.past_cluster = False  # the outcome of every bound left was None: so is the maximum's
        t = oracle.t
        self.top = oracle.space.replica_batch_limit(o.attn_dp)
        p = oracle.problem
        self.cap = prefill_chunk(p, t.profile or resolve_profile(p), self.top)  # the largest chunk of any B
        self.step(1)  # prices the shape's memory entry on first use
        self.weights_bytes, self.kv_bytes_per_seq = _whole_model_bytes(oracle, o)
        self.best_value: float | None = None

    def micro(self, batch: int) -> int:
        return microbatching(self.S, batch)[1]

    def step(self, micro: int) -> tuple[_Sums, int]:
        """The relaxation's sums of the step at ``micro`` and its chunk's activation bytes."""
        entry, activation = self.oracle.t.step(self.o, micro)
        if micro not in self.sums:
            self.sums[micro] = _Sums.of_entry(self.oracle, entry)
        return self.sums[micro], activation

    def fits(self, batch: int, activation: int) -> bool:
        """``_may_fit`` of ``batch`` (its step's chunk activation given)."""
        o, S, t = self.o, self.S, self.oracle.t
        m, seqs = t.memory[o], -(-batch // o.attn_dp)
        total = self.weights_bytes + self.kv_bytes_per_seq * seqs + m.replica_end_bytes(S)
        total += S * (seqs * m.logits_per_seq + activation + m.fixed)
        return total <= S * t.limit_bytes

    def score(self, sums: _Sums, batch: int) -> bool:
        """Scores ``batch`` exactly on its own step's ``sums``; False when it breaks a limit."""
        load = sums.load(self.oracle, self.S, batch)
        if not self.oracle.within_limits(load):
            return False
        value = _rate(self.replicas, batch, self.oracle.osl, load.e2e_ns)
        if self.best_value is None or value > self.best_value:
            self.best_value = value
        return True

    def best(self) -> float | None:
        first = 1
        while first <= self.top and self.micro(first) < self.cap:  # the chunk still grows: every batch
            sums, activation = self.step(self.micro(first))
            if not self.fits(first, activation):
                return self.best_value  # no larger batch fits either
            self.score(sums, first)
            first += 1
        if first > self.top:
            return self.best_value
        sums, activation = self.step(self.micro(first))
        if not self.fits(first, activation):
            return self.best_value
        lo, hi = first, self.top  # the largest batch that fits: fits(lo), and hi + 1 does not (or is past top)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if self.fits(mid, activation) else (lo, mid - 1)
        self.search(first, hi, sums)
        return None if self.past_cluster else self.best_value

    def search(self, first: int, last: int, sums: _Sums) -> None:
        """The branch and bound over [first, last], every batch there fitting memory (class docstring)."""
        heap: list[tuple[float, int, int]] = []  # (-bound, lo, hi)
        self.push(heap, first, last, sums)
        stop = last + 1  # every batch from ``stop`` on breaks a limit
        while heap:
            neg, lo, hi = heapq.heappop(heap)
            if lo >= stop:
                continue
            if self.best_value is not None and -neg <= self.best_value:
                break  # best first: no range left can raise the best
            if self.outcome is not None:  # the maximum lies in [best, -neg]: settled once both agree
                at_most = self.outcome(-neg)
                if at_most is None:
                    self.past_cluster = True
                    break
                if self.best_value is not None and self.outcome(self.best_value) == at_most:
                    break
            hi = min(hi, stop - 1)
            m = self.micro(lo)
            sums = self.step(m)[0]
            end = min(hi, self.S * m)  # the last batch of microbatch m in the range
            for batch in range(lo, end + 1):
                if not self.score(sums, batch):
                    stop = batch  # its load is a floor of every larger batch's: they break the limit too
                    break
            if end + 1 > min(hi, stop - 1):
                continue
            rest_lo, rest_hi = end + 1, min(hi, stop - 1)
            mid = (rest_lo + rest_hi) // 2
            for a, b in ((rest_lo, mid), (mid + 1, rest_hi)):
                if a <= b < stop and not self.push(heap, a, b, sums):
                    stop = a

    def push(self, heap: list[tuple[float, int, int]], lo: int, hi: int, sums: _Sums) -> bool:
        """Bounds [lo, hi] from ``sums``, a step at most m(lo)'s, and queues it; False when that floor breaks
        a limit (then every batch from lo on does)."""
        oracle, osl = self.oracle, self.oracle.osl
        load = sums.load(oracle, self.S, lo)
        if not oracle.within_limits(load):
            return False
        bound = _rate(self.replicas, hi, osl, load.e2e_ns)
        e = load.e2e_ns - osl
        if e > 0 and hi > lo:  # the line along the range (class docstring)
            slowest = -(-(sums.prefill + sums.sends_prefill[self.S - 1]) // self.S)
            d = Fraction((osl - 1) * slowest, osl * sums.chunk) + Fraction(
                oracle.stack.queue_per_mille * slowest, PER_MILLE * sums.chunk)
            ratio = max(Fraction(lo, e), hi / (e + d * (hi - lo)))
            bound = min(bound, float(self.replicas * osl * 10**9 * ratio) * (1 + 1e-9))
        heapq.heappush(heap, (-bound, lo, hi))
        return True


def _whole_model_bytes(oracle: Oracle, o: Shape) -> tuple[int, int]:
    """(weight bytes, KV bytes per sequence held) of every layer on one GPU of a stage of shape ``o``."""
    t, m = oracle.t, oracle.t.memory[o]
    return (sum(t.layers_of(k) * m.weights[k] for k in t.kinds),
            sum(t.layers_of(k) * m.kv_per_seq[k] for k in t.kinds))


def _may_fit(oracle: Oracle, o: Shape, opt: BatchOption, S: int, weights_bytes: int, kv_bytes_per_seq: int) -> bool:
    """Whether the bytes of every stage together fit S GPUs' limits (the oracle's ``stage_cost``
    memory, summed over the stages: the same for every split)."""
    oracle.t.price(o, opt)  # an option the search's own space may not have priced
    t, m = oracle.t, oracle.t.memory[o]
    seqs = oracle.seqs_per_gpu(o, opt, S)
    total = weights_bytes + kv_bytes_per_seq * seqs + m.replica_end_bytes(S)
    total += S * (seqs * m.logits_per_seq + t.chunk_activation[(o, opt)] + m.fixed)
    return total <= S * t.limit_bytes


@dataclass(frozen=True)
class _Sums:
    """One (shape, batch option)'s step through every layer and both ends, and the sends after the
    first s stages (``sends_*[s]``), in ns."""

    prefill: int
    decode: int
    sends_prefill: list[int]
    sends_decode: list[int]
    chunk: int
    steps: int

    @classmethod
    def of(cls, oracle: Oracle, o: Shape, opt: BatchOption) -> _Sums:
        return cls.of_entry(oracle, oracle.t.price(o, opt))

    @classmethod
    def of_entry(cls, oracle: Oracle, e: TimeEntry) -> _Sums:
        t = oracle.t
        return cls(
            prefill=sum(t.layers_of(k) * e.prefill[k] for k in t.kinds) + e.first_prefill + e.last_prefill,
            decode=sum(t.layers_of(k) * e.decode[k] for k in t.kinds) + e.first_decode + e.last_decode,
            sends_prefill=[0, *accumulate(e.send_prefill)],
            sends_decode=[0, *accumulate(e.send_decode)],
            chunk=e.chunk,
            steps=e.steps,
        )

    def e2e_floor_ns(self, oracle: Oracle, S: int, batch: int) -> int | None:
        """A lower bound on e2e of any split into S stages, or None when even it breaks a TTFT or TPOT limit."""
        load = self.load(oracle, S, batch)
        return load.e2e_ns if oracle.within_limits(load) else None

    def load(self, oracle: Oracle, S: int, batch: int) -> UnderLoad:
        """``under_load`` at a round of the decode sum and a slowest prefill stage of the sum over S."""
        prefill = self.prefill + self.sends_prefill[S - 1]
        decode = self.decode + self.sends_decode[S - 1]
        return under_load(prefill, decode, -(-prefill // S), batch, oracle.osl, self.chunk, self.steps, oracle.stack)
