"""A plain enumeration of the solver's space on the same integer tables: the test oracle.

Every (shape, batch option, stage count, replicas) the rules allow is visited; for each, the
stage boundaries are optimised exactly by a dynamic programme over layer prefixes that keeps the
Pareto front of (slowest decode stage, slowest prefill stage). No CP-SAT here. It is exact and
simple, and slow on large spaces: that is what the benchmark compares the solver against.
``even_partition_incumbent`` is the quick version (even stages only) that seeds the solver.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from functools import cmp_to_key
from typing import NamedTuple

from shardplan.rules.base import ShapeRule
from shardplan.rules.catalog import rules_for
from shardplan.rules.layout import Layout
from shardplan.rules.problem import Objective
from shardplan.solver.cost.evaluate import ServingStack, UnderLoad, resolve_profile, under_load
from shardplan.solver.space import BatchOption, Shape
from shardplan.solver.tables import Tables, TimeEntry


@dataclass(frozen=True)
class Candidate:
    """A scored layout: ``better_than`` orders candidates exactly as the solver's objective does —
    latency by e2e, throughput by the ratio ``tokens / e2e_ns`` (requests in flight over every
    replica per request lifetime: output tokens/s = tokens x OSL x 1e9 / e2e_ns, Little's law)."""

    layout: Layout
    e2e_ns: int
    tokens: int

    def better_than(self, other: Candidate | None, objective: Objective) -> bool:
        return other is None or _better((self.e2e_ns, self.tokens), (other.e2e_ns, other.tokens), objective)


def _better(a: tuple[int, int], b: tuple[int, int], objective: Objective) -> bool:
    """Whether (e2e ns, tokens) ``a`` beats ``b``: latency by e2e, throughput by tokens / e2e exactly."""
    if objective is Objective.LATENCY:
        return a[0] < b[0]
    return a[1] * b[0] > b[1] * a[0]


# (slowest decode stage ns, slowest prefill stage ns, stage boundaries) of one split of the layers.
SplitPoint = tuple[int, int, tuple[int, ...]]
# ... and the most sequences per GPU every stage of it holds: (decode, prefill, sequences, boundaries).
CapacityPoint = tuple[int, int, int, tuple[int, ...]]
_UNBOUNDED = 2**62  # sequences a stage holds when they cost it no bytes


class Split(NamedTuple):
    """The best split of one (shape, batch option, stage count) combination, scored at one replica."""

    candidate: Candidate
    bounds: tuple[int, ...]
    dmax: int  # slowest decode stage, ns
    pmax: int  # slowest prefill stage, ns
    shape: Shape
    option: BatchOption
    stages: int


# A combination scored by ``_ranked``: its candidate, and (shape, batch option, stages, replicas).
Ranked = tuple[Candidate, tuple[Shape, BatchOption, int, int]]


class Oracle:
    """``excluded``: (shape, stage count) pairs no candidate may use (the runner-up's search)."""

    def __init__(self, tables: Tables, excluded: Collection[tuple[Shape, int]] = ()):
        self.t = tables
        self.excluded = frozenset(excluded)
        self.problem = p = tables.problem
        self.space = tables.space
        in_force = rules_for(p)
        self.shape_rules = [r for r in in_force if isinstance(r, ShapeRule)]
        self.pins = p.pins
        self.osl = p.workload.osl
        self.stack = ServingStack.of(tables.profile or resolve_profile(p))  # TTFT's queue share and fixed cost
        # The last front computed, by (shape, microbatch, sequences per GPU, stages): consecutive batches
        # often share both (the brute force walks every integer batch), and so the same front.
        self._last_front: tuple[tuple[Shape, int, int, int], list[SplitPoint]] | None = None

    # --- the space --------------------------------------------------------------------------
    def shapes(self) -> Iterator[Shape]:
        for o in self.space.shapes:
            if any(rule.forbids(self.problem, o) for rule in self.shape_rules):
                continue
            if any(getattr(self.pins, f) not in (None, getattr(o, f)) for f in ("tp", "sp", "attn_dp", "expert_tp")):
                continue
            ep = o.ep if self.problem.model.is_moe else 1
            if self.pins.ep is not None and ep != self.pins.ep:
                continue
            yield o

    def stage_counts(self, o: Shape) -> Iterator[int]:
        pinned = len(self.pins.stages) if self.pins.stages else self.pins.pp
        for S in self.space.stage_values:
            if (pinned and S != pinned) or (o, S) in self.excluded:
                continue
            if S * o.gpus <= self.space.num_gpus and S <= self.problem.model.num_layers:
                yield S

    def options(self, o: Shape, S: int, exhaustive: bool = True) -> Iterator[BatchOption]:
        """Exactly priced batch options of (o, S). A decided batch: every batch B = 1 .. attn_dp x the
        engine's limit, priced as ``evaluate`` prices B (``exhaustive``, the brute force), or the space's
        priced points B = S x attn_dp x q, the smallest q of each range (a seed)."""
        space = self.space
        if not space.decides_batch:
            yield from (opt for opt in space.batch_options(o) if opt.micro == space.micro_for_stages(S))
            return
        top = space.replica_batch_limit(o.attn_dp)
        if exhaustive:
            batches: Iterable[int] = range(1, top + 1)
        else:
            batches = (S * o.attn_dp * opt.q for opt in space.batch_options(o) if S * o.attn_dp * opt.q <= top)
        for b in batches:
            yield BatchOption.for_batch(S, o.attn_dp, b)

    def replicas(self, o: Shape, S: int) -> list[int]:
        top = self.space.num_gpus // (S * o.gpus)
        if self.pins.dp is not None:
            return [self.pins.dp] if self.pins.dp <= top else []
        return list(range(1, top + 1))

    # --- one combination ----------------------------------------------------------------------
    def batch_of(self, o: Shape, opt: BatchOption, S: int) -> int:
        return opt.batch if self.space.decides_batch else self.space.fixed_batch

    def seqs_per_gpu(self, o: Shape, opt: BatchOption, S: int) -> int:
        """Sequences whose KV cache one GPU holds: its attention group's share of the batch, the fullest."""
        return -(-opt.batch // o.attn_dp) if self.space.decides_batch else self.space.fixed_seqs_per_gpu(o)

    def stage_cost(self, o: Shape, opt: BatchOption, S: int, s: int, i: int, j: int) -> tuple[int, int, int]:
        """(decode ns, prefill ns, bytes per GPU) of slot s holding layers [i, j)."""
        t, e, m = self.t, self.t.price(o, opt), self.t.memory[o]
        counts = {k: t.prefix[k][j] - t.prefix[k][i] for k in t.kinds}
        d_extra, p_extra = _stage_extras(e, s, S)
        d = sum(n * e.decode[k] for k, n in counts.items()) + d_extra
        p = sum(n * e.prefill[k] for k, n in counts.items()) + p_extra
        seqs = self.seqs_per_gpu(o, opt, S)
        mem = sum(n * (m.weights[k] + m.kv_per_seq[k] * seqs) for k, n in counts.items())
        mem += seqs * m.logits_per_seq + t.chunk_activation[(o, opt)] + m.fixed + m.end_bytes(s, S)
        return d, p, mem

    def fronts(self, o: Shape, opt: BatchOption, S: int) -> list[SplitPoint]:
        """Pareto front of (slowest decode stage, slowest prefill stage, boundaries) over every
        memory-feasible split of the layers into S contiguous non-empty stages (``stage_cost`` of
        each stage, read from per-layer prefix sums: the proof calls this many times)."""
        seqs = self.seqs_per_gpu(o, opt, S)
        key = (o, opt.micro, seqs, S)
        if self._last_front is not None and self._last_front[0] == key:
            return self._last_front[1]
        front = self._front(o, opt, S, seqs)
        self._last_front = (key, front)
        return front

    def _front(self, o: Shape, opt: BatchOption, S: int, seqs: int) -> list[SplitPoint]:
        L, limit = self.problem.model.num_layers, self.t.limit_bytes
        dec, pre, wts, kvs = self._layer_prefixes(o, opt)
        mem = [w + seqs * kv for w, kv in zip(wts, kvs, strict=True)]
        e, m = self.t.price(o, opt), self.t.memory[o]
        per_stage_bytes = seqs * m.logits_per_seq + self.t.chunk_activation[(o, opt)] + m.fixed
        # front[j]: splits of layers [0, j) into the stages placed so far.
        front: dict[int, list[SplitPoint]] = {0: [(0, 0, (0,))]}
        for s in range(S):
            d_extra, p_extra = _stage_extras(e, s, S)
            m_extra = per_stage_bytes + m.end_bytes(s, S)
            nxt: dict[int, list[SplitPoint]] = {}
            ends = [L] if s == S - 1 else range(s + 1, L - (S - 1 - s) + 1)
            for j in ends:
                cands: list[SplitPoint] = []
                for i, entries in front.items():
                    if i >= j or mem[j] - mem[i] + m_extra > limit:
                        continue
                    d = dec[j] - dec[i] + d_extra
                    p = pre[j] - pre[i] + p_extra
                    for dmax, pmax, bounds in entries:
                        cands.append((max(dmax, d), max(pmax, p), bounds + (j,)))
                if cands:
                    nxt[j] = _pareto(cands)
            front = nxt
            if not front:
                return []
        return front.get(L, [])

    def capacity_front(self, o: Shape, opt: BatchOption, S: int, seqs: int) -> list[CapacityPoint]:
        """Every split into S stages at ``opt``'s microbatch that holds at least ``seqs`` sequences per GPU,
        as the Pareto front of (slowest decode stage, slowest prefill stage, least) and (most sequences
        per GPU every stage holds: more). One front serves every batch of that microbatch: at a batch
        putting n sequences on a GPU, the splits that fit are those holding n, and each is dominated by a
        point of this front that holds n too, so scoring the points that hold n is exact."""
        L, limit = self.problem.model.num_layers, self.t.limit_bytes
        e, m = self.t.price(o, opt), self.t.memory[o]
        dec, pre, wts, kvs = self._layer_prefixes(o, opt)
        fixed_bytes = self.t.chunk_activation[(o, opt)] + m.fixed
        front: dict[int, list[CapacityPoint]] = {0: [(0, 0, _UNBOUNDED, (0,))]}
        for s in range(S):
            d_extra, p_extra = _stage_extras(e, s, S)
            room = limit - fixed_bytes - m.end_bytes(s, S)
            nxt: dict[int, list[CapacityPoint]] = {}
            for j in [L] if s == S - 1 else range(s + 1, L - (S - 1 - s) + 1):
                cands: list[CapacityPoint] = []
                for i, entries in front.items():
                    if i >= j:
                        continue
                    free, per_seq = room - (wts[j] - wts[i]), kvs[j] - kvs[i] + m.logits_per_seq
                    held = _UNBOUNDED if per_seq == 0 else (free // per_seq if free >= 0 else -1)
                    if held < seqs:
                        continue
                    d, p = dec[j] - dec[i] + d_extra, pre[j] - pre[i] + p_extra
                    for dmax, pmax, cap, bounds in entries:
                        cands.append((max(dmax, d), max(pmax, p), min(cap, held), bounds + (j,)))
                if cands:
                    nxt[j] = _pareto3(cands)
            front = nxt
            if not front:
                return []
        return front.get(L, [])

    def _layer_prefixes(self, o: Shape, opt: BatchOption) -> tuple[list[int], list[int], list[int], list[int]]:
        """Decode ns, prefill ns, weight bytes and KV bytes per sequence per GPU of the first i layers, for
        i = 0 .. L: the prefix sums both split fronts read a stage's cost from."""
        t, e, m = self.t, self.t.price(o, opt), self.t.memory[o]
        dec, pre, wts, kvs = [0], [0], [0], [0]
        for k in t.kind_of_layer:
            dec.append(dec[-1] + e.decode[k])
            pre.append(pre[-1] + e.prefill[k])
            wts.append(wts[-1] + m.weights[k])
            kvs.append(kvs[-1] + m.kv_per_seq[k])
        return dec, pre, wts, kvs

    def _load(self, o: Shape, opt: BatchOption, S: int, dmax: int, pmax: int) -> tuple[UnderLoad, int]:
        """(latencies as users measure them, batch) of a split with these slowest stages, one replica."""
        t, e = self.t, self.t.price(o, opt)
        L_k = {k: t.layers_of(k) for k in t.kinds}
        sends_d = sum(e.send_decode[: S - 1])
        sends_p = sum(e.send_prefill[: S - 1])
        prefill = sum(L_k[k] * e.prefill[k] for k in t.kinds) + e.first_prefill + e.last_prefill + sends_p
        dsum = sum(L_k[k] * e.decode[k] for k in t.kinds) + e.first_decode + e.last_decode + sends_d
        b = self.batch_of(o, opt, S)
        rnd = max(dsum, min(S, b) * dmax)
        return under_load(prefill, rnd, pmax, b, self.osl, e.chunk, e.steps, self.stack), b

    def evaluate_combo(
        self, o: Shape, opt: BatchOption, S: int, dp: int, bounds: tuple[int, ...], dmax: int, pmax: int
    ) -> tuple[Candidate, UnderLoad]:
        """The candidate and its latencies as users measure them (``evaluate``'s ``under_load``)."""
        load, b = self._load(o, opt, S, dmax, pmax)
        layout = Layout(
            dp=dp, tp=o.tp, sp=o.sp, attn_dp=o.attn_dp, expert_tp=o.expert_tp,
            stages=tuple((bounds[i], bounds[i + 1]) for i in range(S)), batch=b,
        )
        return Candidate(layout, load.e2e_ns, dp * b), load

    def within_limits(self, load: UnderLoad) -> bool:
        wl = self.problem.workload
        if wl.ttft_ms is not None and load.ttft_ns > round(wl.ttft_ms * 1e6):
            return False
        return not (wl.tpot_ms is not None and load.tpot_ns > round(wl.tpot_ms * 1e6))

    # --- the search -----------------------------------------------------------------------------
    def feasible(self, exact: bool = True) -> Iterator[Candidate]:
        """Every feasible layout: each (shape, stage count) with its best batch option and
        boundaries, at every replica count that fits."""
        objective = self.problem.objective
        for o in self.shapes():
            for S in self.stage_counts(o):
                best: Split | None = None
                options = self.options(o, S, exhaustive=exact)
                if exact and self.space.decides_batch and self.pins.stages is None:
                    best, options = self._best_batch(o, S), iter(())
                for opt in options:
                    split = self._best_split(o, opt, S, exact)
                    if split is not None and (best is None or split.candidate.better_than(best.candidate, objective)):
                        best = split
                    if split is None and not self._fits_any(o, opt, S, exact):
                        break  # memory only grows with the batch: no larger one fits either
                if best is None:
                    continue
                for dp in self.replicas(o, S):
                    yield from self._with_dp(best, dp)

    def _best_split(self, o: Shape, opt: BatchOption, S: int, exact: bool) -> Split | None:
        """The split of this combination that the objective prefers (dp does not change it)."""
        if exact or self.pins.stages is not None:
            entries = self.splits(o, opt, S)
        else:
            entries = self._score_fixed(o, opt, S, _even_bounds(self.problem.model.num_layers, S))
        # Scored as integers first (e2e depends on the split only through its slowest stages); the
        # candidate, a Layout, is built for the winner alone: the brute force scores every integer batch.
        objective = self.problem.objective
        best: tuple[tuple[int, int], SplitPoint] | None = None
        for dmax, pmax, bounds in entries:
            load, batch = self._load(o, opt, S, dmax, pmax)
            if not self.within_limits(load):
                continue
            score = (load.e2e_ns, batch)
            if best is None or _better(score, best[0], objective) or (
                not _better(best[0], score, objective) and bounds < best[1][2]
            ):
                best = (score, (dmax, pmax, bounds))
        if best is None:
            return None
        dmax, pmax, bounds = best[1]
        cand = self.evaluate_combo(o, opt, S, 1, bounds, dmax, pmax)[0]
        return Split(cand, bounds, dmax, pmax, o, opt, S)

    def _best_batch(self, o: Shape, S: int) -> Split | None:
        """The best (batch, split) of (o, S) over every integer batch (the first of equals): the batches
        of one microbatch share one ``capacity_front``, each scored on the points that hold its share."""
        objective = self.problem.objective
        best: tuple[tuple[int, int], tuple[BatchOption, int, int, tuple[int, ...]]] | None = None
        front: list[CapacityPoint] = []
        micro = 0
        last_chunk = self.space.profile.max_num_tokens // self.problem.workload.isl  # chunk = min(micro, this)
        for opt in self.options(o, S):
            seqs = self.seqs_per_gpu(o, opt, S)
            if opt.micro != micro:
                micro, front = opt.micro, self.capacity_front(o, opt, S, seqs)
            holding = [point for point in front if point[2] >= seqs]
            if not holding:
                break  # memory only grows with the batch: no larger one fits either
            within = False
            for dmax, pmax, _, bounds in holding:
                load, batch = self._load(o, opt, S, dmax, pmax)
                if not self.within_limits(load):
                    continue
                within = True
                score = (load.e2e_ns, batch)
                if best is None or _better(score, best[0], objective) or (
                    not _better(best[0], score, objective) and (batch, bounds) < (best[1][0].batch, best[1][3])
                ):
                    best = (score, (opt, dmax, pmax, bounds))
            if not within and opt.micro >= last_chunk:
                # The chunk no longer grows: every time and the concurrency only grow from here, so a
                # TTFT or TPOT limit no split keeps at this batch stays broken at every larger one.
                break
        if best is None:
            return None
        opt, dmax, pmax, bounds = best[1]
        return Split(self.evaluate_combo(o, opt, S, 1, bounds, dmax, pmax)[0], bounds, dmax, pmax, o, opt, S)

    def _fits_any(self, o: Shape, opt: BatchOption, S: int, exact: bool) -> bool:
        """Whether some split of (o, opt, S) the search would score fits in memory."""
        if exact or self.pins.stages is not None:
            return bool(self.splits(o, opt, S))
        return bool(self._score_fixed(o, opt, S, _even_bounds(self.problem.model.num_layers, S)))

    def splits(self, o: Shape, opt: BatchOption, S: int) -> list[SplitPoint]:
        """Every split of (o, opt, S) worth scoring: the pinned boundaries, or the Pareto front of all."""
        if self.pins.stages is not None:
            bounds = tuple(r[0] for r in self.pins.stages) + (self.pins.stages[-1][1],)
            return self._score_fixed(o, opt, S, bounds)
        return self.fronts(o, opt, S)

    def _with_dp(self, best: Split, dp: int) -> Iterator[Candidate]:
        yield self.evaluate_combo(best.shape, best.option, best.stages, dp, best.bounds, best.dmax, best.pmax)[0]

    def _score_fixed(self, o: Shape, opt: BatchOption, S: int, bounds: tuple[int, ...]) -> list[SplitPoint]:
        if len(bounds) != S + 1 or bounds[0] != 0 or bounds[-1] != self.problem.model.num_layers:
            return []
        dmax = pmax = 0
        for s in range(S):
            i, j = bounds[s], bounds[s + 1]
            if j <= i:
                return []
            d, p, mem = self.stage_cost(o, opt, S, s, i, j)
            if mem > self.t.limit_bytes:
                return []
            dmax, pmax = max(dmax, d), max(pmax, p)
        return [(dmax, pmax, bounds)]

    def optimum(self, exact: bool = True) -> Candidate | None:
        """The best candidate. Replicas only scale throughput (and never change latency), so
        each combination is scored at its most replicas (throughput) or fewest (latency)."""
        ranked = self._ranked(exact)
        return ranked[0][0] if ranked else None

    def incumbent(self, refine: int = 3) -> Candidate | None:
        """A good plan quickly, to seed the solver: every combination with even stages, then the
        ``refine`` best of them with their exact best boundaries."""
        ranked = self._ranked(exact=False, largest_batch_only=True)
        best = ranked[0][0] if ranked else None
        for _, (o, opt, S, dp) in ranked[:refine]:
            split = self._best_split(o, opt, S, True)
            if split is not None:
                for cand in self._with_dp(split, dp):
                    if cand.better_than(best, self.problem.objective):
                        best = cand
        return best

    def _ranked(self, exact: bool, largest_batch_only: bool = False) -> list[Ranked]:
        """(candidate, (shape, option, stages, dp)) for every feasible combination, best first.
        ``largest_batch_only`` (a heuristic for seeding) keeps, per shape and stage count, only
        the largest batch that fits: throughput nearly always grows with the batch."""
        throughput = self.problem.objective is Objective.THROUGHPUT
        found: list[Ranked] = []
        for o in self.shapes():
            for S in self.stage_counts(o):
                dps = self.replicas(o, S)
                if not dps:
                    continue
                dp = dps[-1] if throughput else dps[0]
                options = list(self.options(o, S, exhaustive=exact))
                if largest_batch_only:
                    options.reverse()
                if exact and self.space.decides_batch and self.pins.stages is None:
                    kept_split = self._best_batch(o, S)
                    if kept_split is not None:
                        found.extend((cand, (o, kept_split.option, S, dp)) for cand in self._with_dp(kept_split, dp))
                    continue
                # A decided batch scored exactly: only the pair's best batch can be the optimum (the first of
                # equals, as the stable sort below would keep it), and no batch past one that fits no split.
                per_pair = exact and self.space.decides_batch and not largest_batch_only
                kept: Split | None = None
                for opt in options:
                    split = self._best_split(o, opt, S, exact)
                    if split is None:
                        if per_pair and not self._fits_any(o, opt, S, exact):
                            break
                        continue
                    if per_pair:
                        if kept is None or split.candidate.better_than(kept.candidate, self.problem.objective):
                            kept = split
                        continue
                    found.extend((cand, (o, opt, S, dp)) for cand in self._with_dp(split, dp))
                    if largest_batch_only:
                        break
                if kept is not None:
                    found.extend((cand, (o, kept.option, S, dp)) for cand in self._with_dp(kept, dp))
        objective = self.problem.objective

        def order(x: Ranked, y: Ranked) -> int:  # exact: throughput ratios compared by cross-multiplication
            return -1 if x[0].better_than(y[0], objective) else (1 if y[0].better_than(x[0], objective) else 0)

        found.sort(key=cmp_to_key(order))  # stable: equal plans keep the enumeration's order
        return found


def _pareto(points: list[SplitPoint]) -> list[SplitPoint]:
    """Non-dominated (a, b) points, each kept with its lexicographically smallest boundaries."""
    points.sort(key=lambda x: (x[0], x[1], x[2]))
    out: list[SplitPoint] = []
    best_b: float = math.inf
    for a, b, bounds in points:
        if b < best_b:
            out.append((a, b, bounds))
            best_b = b
    return out


def _stage_extras(e: TimeEntry, s: int, S: int) -> tuple[int, int]:
    """(decode ns, prefill ns) slot s of S carries beyond its layers: the ends it holds, the send after it."""
    first, last = s == 0, s == S - 1
    d = first * e.first_decode + last * e.last_decode + (e.send_decode[s] if not last else 0)
    p = first * e.first_prefill + last * e.last_prefill + (e.send_prefill[s] if not last else 0)
    return d, p


def _pareto3(points: list[CapacityPoint]) -> list[CapacityPoint]:
    """Points no other beats on all three (less decode, less prefill, more sequences held), each kept
    with its lexicographically smallest boundaries."""
    points.sort(key=lambda x: (x[0], x[1], -x[2], x[3]))
    out: list[CapacityPoint] = []
    for point in points:
        if not any(k[1] <= point[1] and k[2] >= point[2] for k in out):
            out.append(point)
    return out


def _even_bounds(layers: int, stages: int) -> tuple[int, ...]:
    base, extra = divmod(layers, stages)
    bounds, start = [0], 0
    for s in range(stages):
        start += base + (1 if s < extra else 0)
        bounds.append(start)
    return tuple(bounds)
