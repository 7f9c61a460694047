"""The throughput plan with a decided batch, exactly over every integer batch: best-first branch and bound.

The batch B is the sequences in flight per replica, any integer from 1 to the engine's limit in each
attention group (attn_dp x the limit). It is priced as ``evaluate`` prices it: S stages run min(S, B)
microbatches of m = ceil(B / min(S, B)) sequences, the largest microbatch priced for every step (so
B need not be a multiple of S x attn_dp), and each GPU holds the KV cache of its attention group's
share, ceil(B / attn_dp). What depends on the microbatch m: every step time, the prefill chunk
(min(m, the token budget's prompts)) and its activations, the chunk steps of a prompt; what depends on
B itself: the tokens, the KV cache and logits held, the microbatches in flight min(S, B), and
``under_load``'s other requests (TPOT's prefill share, TTFT's queue). Enumerating every B of every
layout is the brute force (``Oracle.optimum``); this search visits the same space on the same integer
tables, and skips what provably cannot win.

A node is a (shape, stage count) with a range [a, b] of batches at one prefill chunk. Its upper bound
is the most tokens it can hold (replicas x b) over the least e2e any of its plans can have, from times
priced at some batch B0 <= a (microbatch m0 <= m(a)):
- a decode layer at m is at least its time at m0 plus the KV stream of the further sequences per
  attention group, ceil(m / attn_dp) - ceil(m0 / attn_dp) (tables.py ``kv_slope``, less 1 ns per
  layer for rounding), the ends and sends at least their m0 times; the prefill step is the same for
  every batch of one chunk, and at least m0's for a larger one;
- a round is at least the decode sum, and at least min(S, a) x the slowest stage, which is at least
  the split's (``Oracle.fronts`` at B0: any split that fits memory at B fits it at B0, slowest stages
  only grow) or, before that is computed, the slowest prefill stage at least the prefill sum over S;
  that slowest stage holds at least (its time - both ends - a send) / the longest layer layers, each
  grown by the KV stream of the further sequences;
- ``under_load`` grows with every time, the concurrency and the chunk steps, so its e2e at these
  floors is a floor, and a floor that breaks a TTFT or TPOT limit empties the node;
- at the same floors a batch B above a adds at least (B - a) x the per-request TPOT prefill share and
  queue (less osl ns for the ceilings), so B / e2e is bounded by a line's ratio, largest at a or b;
- memory over the S stages together grows with B: past the B where it passes S x the limit, nothing
  fits (bound.py ``_may_fit``'s necessary condition, solved for B by bisection).
Throughput need not grow with B even inside one microbatch size (the other requests' prefill grows
with B while the step stays), so no batch is assumed best: the node with the highest bound is refined
first, priced at its own a, then its splits computed there, which score exactly every batch from a on
that shares a's microbatch and sequences per GPU (one front serves them all), then the rest of its
range halved (a wide range is halved before its splits are computed; a short one is priced at its own
a first). A node whose bound is below the best plan's ratio (compared exactly, by cross-
multiplication) is dropped; when none is left the best plan is proven optimal. Equal ratios are kept
and tie-broken as the CP-SAT search does: fewest GPUs, fewest stages, smallest shape, then the
smallest batch and boundaries.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from shardplan.rules.problem import Objective
from shardplan.solver.cost.evaluate import PER_MILLE, UnderLoad, microbatching, prefill_chunk, under_load
from shardplan.solver.oracle import Candidate, Oracle, SplitPoint
from shardplan.solver.space import BatchOption, Shape

NARROW = 16  # a range is split before its splits are computed while hi - lo > lo / NARROW
# A range of fewer batches is priced at its own smallest batch before it is halved further: halving it
# under floors from far below would leave every batch near the top to be scored on its own.
SHORT = 16


@dataclass(frozen=True)
class Floors:
    """Lower bounds on one (shape, stage count)'s times at every batch >= ``b0``, priced at ``b0``."""

    b0: int
    group0: int  # sequences per attention group in b0's microbatch, ceil(m0 / attn_dp)
    chunk: int  # prompts per prefill chunk at b0
    steps: int  # chunk steps per prompt at b0 (they only grow with the batch)
    decode_sum_ns: int  # every layer's decode step, both ends and the sends: the round's floor
    slope_ns: int  # ns every further sequence per attention group adds to the decode sum, at least
    layer_slope_ns: int  # ... and to any one layer's decode step (the least over the kinds)
    layer_max_ns: int  # the longest decode step of one layer
    ends_ns: int  # what a stage's decode step carries beyond its layers, at most: both ends and a send
    prefill_ns: int  # the prompt's chunk through every stage (TTFT's bare prefill)
    activation_bytes: int  # the chunk's activations on one GPU
    # (slowest decode stage, slowest prefill stage) floors: the prefill sum's share of one stage, or
    # points a smaller batch of the same chunk proved, or b0's own (``level``).
    points: tuple[tuple[int, int], ...]
    level: int  # 0: nothing of b0's own; 1: b0's least slowest stages; 2: b0's splits, b0 scored exactly


@dataclass(order=True)
class _Node:
    """A (shape, stage count, batch range) in the heap, highest bound first (then a fixed order)."""

    key: tuple[float, tuple[int, int, int, int], int, int]
    shape: Shape = field(compare=False)
    stages: int = field(compare=False)
    lo: int = field(compare=False)
    hi: int = field(compare=False)
    floors: Floors = field(compare=False)
    bound_tokens: int = field(compare=False)  # no plan in the node beats bound_tokens / bound_e2e
    bound_e2e: int = field(compare=False)


@dataclass(frozen=True)
class BatchSearch:
    """The best plan found, and the least upper bound on tokens / e2e when the search was cut short
    (None when it ran to the end: ``best`` is then optimal)."""

    best: Candidate | None
    open_bound: tuple[int, int] | None  # (tokens, e2e ns): no plan beats tokens / e2e


class _Branching:
    def __init__(self, oracle: Oracle, passed: Callable[[], bool], check: Callable[[], None]):
        self.oracle = oracle
        self.check = check
        self.t = oracle.t
        self.space = oracle.space
        self.osl = oracle.osl
        self.passed = passed
        self.best: Candidate | None = None
        self.heap: list[_Node] = []
        self.layers = oracle.problem.model.num_layers
        self.limits = oracle.problem.workload
        self._replica_bytes: dict[tuple[Shape, int], tuple[int, int]] = {}  # replica_bytes, memoised

    # --- floors ------------------------------------------------------------------------------
    def floors_at(self, o: Shape, S: int, b: int, inherit: Floors | None) -> Floors:
        """Level one: the step priced at batch b; the slowest stages bounded by the sums, or by the
        split floors of ``inherit`` (computed at a smaller batch of the same chunk: they still hold)."""
        t = self.t
        opt = BatchOption.for_batch(S, o.attn_dp, b)
        e = t.price(o, opt)
        L = {k: t.layers_of(k) for k in t.kinds}
        decode = sum(L[k] * e.decode[k] for k in t.kinds) + e.first_decode + e.last_decode + sum(e.send_decode[: S - 1])
        prefill = sum(L[k] * e.prefill[k] for k in t.kinds) + e.first_prefill + e.last_prefill
        prefill += sum(e.send_prefill[: S - 1])
        if inherit is not None and inherit.chunk == e.chunk:
            points = inherit.points
        else:
            points = ((0, -(-prefill // S)),)
        return Floors(
            b0=b, group0=opt.q, chunk=e.chunk, steps=e.steps, decode_sum_ns=decode,
            slope_ns=sum(L[k] * e.kv_slope.get(k, 0) for k in t.kinds), prefill_ns=prefill,
            layer_slope_ns=min(e.kv_slope.get(k, 0) for k in t.kinds), layer_max_ns=max(e.decode.values()),
            ends_ns=e.first_decode + e.last_decode + max(e.send_decode[: S - 1], default=0),
            activation_bytes=t.chunk_activation[(o, opt)], points=points, level=0,
        )

    def split_at(self, o: Shape, S: int, floors: Floors, dp: int, hi: int) -> tuple[Floors, int]:
        """Level two: every split at b0 (the oracle's Pareto front, memory at b0), which also scores
        exactly every batch from b0 to ``hi`` with b0's microbatch and sequences per GPU (the same
        steps and bytes, so the same front); the best candidate there may become the incumbent.
        Returns the floors and the last batch scored."""
        b0 = floors.b0
        opt = BatchOption.for_batch(S, o.attn_dp, b0)
        entries: list[SplitPoint] = self.oracle.splits(o, opt, S)
        last = _same_front_until(S, o.attn_dp, b0, hi)
        for b in range(b0, last + 1):
            at_b = BatchOption.for_batch(S, o.attn_dp, b)
            for dmax, pmax, bounds in entries:
                cand, load = self.oracle.evaluate_combo(o, at_b, S, dp, bounds, dmax, pmax)
                if self.oracle.within_limits(load):
                    self.offer(cand)
        points = tuple(sorted({(d, p) for d, p, _ in entries}))
        return replace(floors, points=points, level=2), last

    def least_slowest_at(self, o: Shape, S: int, floors: Floors) -> Floors:
        """Level one, cheaply: the least slowest decode stage and prefill stage any split into S can
        have (each on its own, memory and sends left out: both only relax it), merged into the points."""
        t = self.t
        e = t.price(o, BatchOption.for_batch(S, o.attn_dp, floors.b0))
        dmin = _least_slowest([e.decode[k] for k in t.kind_of_layer], S, e.first_decode, e.last_decode)
        pmin = _least_slowest([e.prefill[k] for k in t.kind_of_layer], S, e.first_prefill, e.last_prefill)
        points = tuple(sorted({(max(d, dmin), max(p, pmin)) for d, p in floors.points}))
        return replace(floors, points=points, level=1)

    def node_bound(self, o: Shape, S: int, f: Floors, lo: int, hi: int, chunk: int, dp: int) -> tuple[int, int] | None:
        """(tokens, e2e ns) whose ratio no plan of (o, S) at a batch in [lo, hi] (lo >= f.b0) with prompts
        ``chunk`` at a time beats, or None when even the floors at lo break memory, a TTFT or a TPOT limit.

        Per point of the floors, e2e at lo is under_load of the floor times at concurrency lo; at any
        batch B above it the same times give at least e2e(lo) - osl + (B - lo) x delta, where delta is
        what each further request adds to (osl - 1) TPOT prefill shares and to the queue (the ceilings
        lose less than 1 ns each, osl in all). B / (e2e(lo) - osl + (B - lo) delta) is monotone in B, so
        its largest value over the range is at lo or hi; and never above hi tokens over e2e(lo)."""
        if not self.may_fit(o, S, f, lo, chunk):
            return None
        group = -(-microbatching(S, lo)[1] // o.attn_dp)
        grown = f.decode_sum_ns - self.layers + f.slope_ns * (group - f.group0)
        round_floor = max(f.decode_sum_ns, grown)
        in_flight = min(S, lo)  # microbatches: a round is at least this many slowest stages
        per_layer = max(0, f.layer_slope_ns * (group - f.group0) - 1)  # growth of each layer's step, at least
        osl, stack = self.osl, self.oracle.stack
        best: tuple[int, int] | None = None
        for dmax, pmax in f.points:
            # Another chunk's slowest prefill stage per prompt may be shorter: its share (TPOT) and queue (TTFT)
            # are then unbounded below. The own-prompt share ceil(prefill / chunk) stays a floor at the node's
            # chunk: a larger chunk's prefill is at least b0's (f.prefill_ns), divided by the same chunk.
            share_stage = pmax if chunk == f.chunk else 0
            load: UnderLoad = under_load(
                f.prefill_ns, max(round_floor, in_flight * self.slowest_floor(f, dmax, per_layer)), share_stage, lo,
                osl, chunk, f.steps, stack,
            )
            if not self.oracle.within_limits(load):
                continue
            e_lo = load.e2e_ns
            bound = (dp * hi, e_lo)
            start = e_lo - osl  # the linear floor at lo
            if hi > lo and start > 0:
                # delta = share_stage x (1000 (osl - 1) + k osl) / (1000 osl chunk), k the queue share per mille
                num = (hi - lo) * share_stage * (PER_MILLE * (osl - 1) + stack.queue_per_mille * osl)
                at_hi = max(e_lo, start + num // (PER_MILLE * osl * chunk))
                ends = max((dp * lo, start), (dp * hi, at_hi), key=_Ratio)
                bound = min(bound, ends, key=_Ratio)
            if best is None or _Ratio(bound) > _Ratio(best):
                best = bound
        return best

    @staticmethod
    def slowest_floor(f: Floors, dmax: int, per_layer: int) -> int:
        """The slowest decode stage at a larger microbatch, of any split whose slowest stage was at least
        ``dmax`` at b0: that stage holds at least (dmax - ends) / the longest layer of them, and each
        layer's step grew by ``per_layer`` at least (the ends and sends only grow)."""
        if per_layer == 0 or f.layer_max_ns == 0:
            return dmax
        layers = max(0, -(-(dmax - f.ends_ns) // f.layer_max_ns))
        return dmax + layers * per_layer

    def may_fit(self, o: Shape, S: int, f: Floors, b: int, chunk: int) -> bool:
        """Every stage's bytes together within S GPUs' limits at batch b (the chunk's activations when known)."""
        return b <= self.most_fitting(o, S, f, chunk)

    def most_fitting(self, o: Shape, S: int, f: Floors, chunk: int) -> int:
        """The largest batch whose bytes over the S stages together fit S GPUs' limits (0: none): the
        bytes are fixed + seqs x per_seq with seqs = ceil(b / attn_dp), solved for seqs."""
        fixed_bytes, per_seq_bytes = self.replica_bytes(o, S)
        activation = f.activation_bytes if chunk == f.chunk else 0
        room = S * (self.t.limit_bytes - activation) - fixed_bytes
        if room < 0:
            return 0
        return o.attn_dp * (room // per_seq_bytes) if per_seq_bytes else self.space.replica_batch_limit(o.attn_dp)

    def replica_bytes(self, o: Shape, S: int) -> tuple[int, int]:
        """(bytes that do not grow with the batch, bytes per sequence of the fullest attention group),
        summed over one GPU of each of the S stages, the chunk's activations left out."""
        key = (o, S)
        found = self._replica_bytes.get(key)
        if found is None:
            t, m = self.t, self.t.memory[o]
            weights = sum(t.layers_of(k) * m.weights[k] for k in t.kinds)
            kv = sum(t.layers_of(k) * m.kv_per_seq[k] for k in t.kinds)
            fixed = weights + m.replica_end_bytes(S) + S * m.fixed
            found = self._replica_bytes[key] = (fixed, kv + S * m.logits_per_seq)
        return found

    # --- the heap -----------------------------------------------------------------------------
    def push(self, o: Shape, S: int, lo: int, hi: int, f: Floors, chunk: int, dp: int) -> None:
        """The node (o, S, [lo, hi]) unless it is empty or provably worse than the best plan."""
        if lo > hi:
            return
        hi = self.largest_fitting(o, S, f, lo, hi, chunk)
        bound = self.node_bound(o, S, f, lo, hi, chunk, dp)
        if bound is None or self.beaten(*bound):
            return
        tokens, e2e = bound
        key = (-tokens / e2e, (o.tp, o.sp, o.attn_dp, o.expert_tp), S, lo)
        heapq.heappush(self.heap, _Node(key, o, S, lo, hi, f, tokens, e2e))

    def largest_fitting(self, o: Shape, S: int, f: Floors, lo: int, hi: int, chunk: int) -> int:
        """The largest batch in [lo, hi] that passes ``may_fit`` (lo does)."""
        return min(hi, self.most_fitting(o, S, f, chunk))

    def beaten(self, tokens: int, e2e: int) -> bool:
        """Whether tokens / e2e is below the best plan's ratio (equal is not: it may win the tie-break)."""
        best = self.best
        return best is not None and tokens * best.e2e_ns < best.tokens * e2e

    def offer(self, cand: Candidate) -> None:
        if self.best is None or cand.better_than(self.best, Objective.THROUGHPUT) or (
            not self.best.better_than(cand, Objective.THROUGHPUT) and _tie_key(cand) < _tie_key(self.best)
        ):
            self.best = cand

    # --- the search ---------------------------------------------------------------------------
    def roots(self) -> None:
        """Per (shape, stage count): one node per prefill chunk the batch can have, priced at batch 1.
        Microbatches m = 1 .. the token budget's prompts each prefill m prompts at once (batches
        S(m - 1) + 1 .. S m); every larger one prefills the budget's prompts."""
        oracle, space = self.oracle, self.space
        budget_prompts = space.profile.max_num_tokens // oracle.problem.workload.isl
        for o in oracle.shapes():
            top = space.replica_batch_limit(o.attn_dp)
            for S in oracle.stage_counts(o):
                # no plan yet: only a deadline long past ends it (a 2-token prompt gives thousands of
                # roots per pair: 174,000 of them took 15 s past --time-limit 0.5 on 1,296 GPUs)
                self.check()
                dps = oracle.replicas(o, S)
                if not dps:
                    continue
                f = self.floors_at(o, S, 1, None)
                done = 0  # the batches covered so far
                for m in range(1, budget_prompts + 1):
                    if done >= top:
                        break
                    lo, hi = done + 1, min(S * m, top)
                    self.push(o, S, lo, hi, f, _chunk(oracle, S, lo), dps[-1])
                    done = hi
                if done < top:
                    self.push(o, S, done + 1, top, f, _chunk(oracle, S, top), dps[-1])

    def run(self) -> BatchSearch:
        self.roots()
        while self.heap:
            if self.best is None:
                self.check()  # no plan yet: only a deadline long past ends the search
            elif self.passed():
                return BatchSearch(self.best, self.open_bound())
            node = heapq.heappop(self.heap)
            if self.beaten(node.bound_tokens, node.bound_e2e):
                continue
            self.refine(node)
        return BatchSearch(self.best, None)

    def refine(self, node: _Node) -> None:
        o, S, lo, hi, f = node.shape, node.stages, node.lo, node.hi, node.floors
        dp = self.oracle.replicas(o, S)[-1]
        chunk = _chunk(self.oracle, S, lo)
        wide = hi - lo > lo // NARROW
        if f.chunk != chunk or (f.b0 < lo and (wide or hi - lo < SHORT or f.level < 2)):
            self.push(o, S, lo, hi, self.floors_at(o, S, lo, f), chunk, dp)
        elif wide or f.b0 < lo:
            # A wide range's bound is loose by its tokens at hi over those at lo: halve it before
            # computing splits, which cost far more than pricing a step. A narrow one under split
            # floors from just below is halved as it is: its points' floors grow with their
            # concurrency, and only those still above the best plan get their own.
            self.halve(o, S, lo, hi, f, chunk, dp)
        elif f.level == 0:
            self.push(o, S, lo, hi, self.least_slowest_at(o, S, f), chunk, dp)
        else:
            last = lo
            if f.level == 1:
                f, last = self.split_at(o, S, f, dp, hi)  # scores lo .. last exactly
            self.halve(o, S, last + 1, hi, f, chunk, dp)

    def halve(self, o: Shape, S: int, lo: int, hi: int, f: Floors, chunk: int, dp: int) -> None:
        if lo > hi:
            return
        mid = (lo + hi) // 2
        self.push(o, S, lo, mid, f, chunk, dp)
        self.push(o, S, mid + 1, hi, f, chunk, dp)

    def open_bound(self) -> tuple[int, int] | None:
        """The highest (tokens, e2e) bound among the nodes left (and the best plan's own ratio)."""
        top: tuple[int, int] | None = None
        for node in self.heap:
            if top is None or node.bound_tokens * top[1] > top[0] * node.bound_e2e:
                top = (node.bound_tokens, node.bound_e2e)
        if self.best is not None and (top is None or self.best.tokens * top[1] > top[0] * self.best.e2e_ns):
            top = (self.best.tokens, self.best.e2e_ns)
        return top


def _least_slowest(layer_ns: list[int], S: int, first_ns: int, last_ns: int) -> int:
    """The least slowest part over splits of the layers, in order, into at most S parts (empty ones
    allowed: a relaxation), the first part also carrying ``first_ns`` and the last ``last_ns``: the
    least T for which filling each part greedily up to T fits every layer (greedy ends every part
    at least as far as any split within T does, so it fails only when none exists)."""

    def fits(T: int) -> bool:
        caps = [T - first_ns - last_ns] if S == 1 else [T - first_ns, *([T] * (S - 2)), T - last_ns]
        if min(caps) < 0:  # the ends sit on the first and last parts even when those hold no layer
            return False
        i, n = 0, len(layer_ns)
        for cap in caps:
            acc = 0
            while i < n and acc + layer_ns[i] <= cap:
                acc += layer_ns[i]
                i += 1
        return i == n

    total = sum(layer_ns) + first_ns + last_ns
    lo, hi = max(-(-total // S), max(layer_ns, default=0), first_ns, last_ns), total
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if fits(mid) else (mid + 1, hi)
    return lo


def _chunk(oracle: Oracle, S: int, batch: int) -> int:
    """Prompts per prefill chunk at ``batch`` sequences over S stages (evaluate's ``prefill_chunk``
    of the microbatch)."""
    return prefill_chunk(oracle.problem, oracle.space.profile, microbatching(S, batch)[1])


def _same_front_until(S: int, attn_dp: int, batch: int, hi: int) -> int:
    """The largest batch in [batch, hi] with ``batch``'s microbatch and sequences per GPU (so its steps,
    chunk and bytes, and its front of splits): both are ceilings of the batch, constant up to the
    first multiple of S (past S) and of attn_dp at or above it."""
    micro_end = S if batch <= S else S * microbatching(S, batch)[1]
    seqs_end = attn_dp * -(-batch // attn_dp)
    return min(hi, micro_end, seqs_end)


class _Ratio:
    """A (tokens, e2e ns) pair ordered by tokens / e2e, exactly (cross-multiplied)."""

    def __init__(self, pair: tuple[int, int]):
        self.tokens, self.e2e = pair

    def __lt__(self, other: _Ratio) -> bool:
        return self.tokens * other.e2e < other.tokens * self.e2e

    def __gt__(self, other: _Ratio) -> bool:
        return other < self


def _tie_key(cand: Candidate) -> tuple[int, int, tuple[int, int, int, int], int, tuple[tuple[int, int], ...]]:
    lay = cand.layout
    return (lay.num_gpus, lay.pp, (lay.tp, lay.sp, lay.attn_dp, lay.expert_tp), lay.batch, lay.stages)


def best_integer_batch(
    oracle: Oracle, passed: Callable[[], bool] = lambda: False, check: Callable[[], None] = lambda: None
) -> BatchSearch:
    """The throughput optimum over every layout and integer batch of ``oracle``'s space (see the module).
    Once a plan is found, ``passed`` ends the search early (a deadline), leaving the best plan so far
    and the open bound; before that, ``check`` may end it (by raising), as it does the cost tables."""
    assert oracle.space.decides_batch and oracle.problem.objective is Objective.THROUGHPUT
    return _Branching(oracle, passed, check).run()


def tokens_per_s(bound: tuple[int, int], osl: int) -> float:
    """A (tokens, e2e ns) bound as output tokens/s (Little's law)."""
    tokens, e2e_ns = bound
    return tokens * osl * 1e9 / e2e_ns if e2e_ns > 0 else math.inf
