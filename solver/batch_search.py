"""The throughput plan with a decided batch, exactly over every integer batch: best-first branch and bound.

The batch is q sequences per attention group per microbatch (batch = S x attn_dp x q), any integer up
to the engine's limit. Enumerating every q of every layout is the brute force (``Oracle.optimum``);
this search visits the same space on the same integer tables, and skips what provably cannot win.

A node is a (shape, stage count) with a range [a, b] of q at one prefill chunk (space.py: a range's
chunk is one value). Its upper bound is the most tokens it can hold (replicas x S x attn_dp x b) over
the least e2e any of its plans can have, from times priced at some q0 <= a:
- a decode layer at q is at least its time at q0 plus the KV stream of the further sequences
  (tables.py ``kv_slope``, less 1 ns per layer for rounding), the ends and sends at least their q0
  times; the prefill step is the same for every q of one chunk, and at least q0's for a larger one;
- a round is at least the decode sum, and at least S x the slowest stage, which is at least the
  split's (``Oracle.fronts`` at q0: any split that fits memory at q fits it at q0, slowest stages
  only grow) or, before that is computed, the slowest prefill stage at least the prefill sum over S;
- ``under_load`` grows with every time, the concurrency and the chunk steps, so its e2e at these
  floors is a floor, and a floor that breaks a TTFT or TPOT limit empties the node;
- memory over the S stages together grows with q: past the q where it passes S x the limit, nothing
  fits (bound.py ``_may_fit``'s necessary condition, solved for q).
The node with the highest bound is refined first: priced at its own a, then its splits computed there
(which scores q = a exactly, as the oracle does), then the rest of its range halved. A node whose bound
is below the best plan's ratio (compared exactly, by cross-multiplication) is dropped; when none is
left the best plan is proven optimal. Equal ratios are kept and tie-broken as the CP-SAT search does:
fewest GPUs, fewest stages, smallest shape, then the smallest batch and boundaries.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from shardplan.rules.problem import Objective
from shardplan.solver.cost.evaluate import UnderLoad, prefill_chunk, under_load
from shardplan.solver.oracle import Candidate, Oracle, SplitPoint
from shardplan.solver.space import BatchOption, Shape

NARROW = 16  # a range is split before its splits are computed while hi - lo > lo / NARROW


@dataclass(frozen=True)
class Floors:
    """Lower bounds on one (shape, stage count)'s times at every q >= ``q0``, priced at ``q0``."""

    q0: int
    chunk: int  # prompts per prefill chunk at q0
    steps: int  # chunk steps per prompt at q0 (they only grow with q)
    decode_sum_ns: int  # every layer's decode step, both ends and the sends: the round's floor
    slope_ns: int  # ns every further sequence per attention group adds to the decode sum, at least
    prefill_ns: int  # the prompt's chunk through every stage (TTFT's bare prefill)
    activation_bytes: int  # the chunk's activations on one GPU
    # (slowest decode stage, slowest prefill stage) floors: the prefill sum's share of one stage, or
    # points a smaller q of the same chunk proved, or q0's own (``level``).
    points: tuple[tuple[int, int], ...]
    level: int  # 0: nothing of q0's own; 1: q0's least slowest stages; 2: q0's splits, q0 scored exactly


@dataclass(order=True)
class _Node:
    """A (shape, stage count, q range) in the heap, highest bound first (then a fixed order)."""

    key: tuple[float, tuple[int, int, int, int], int, int]
    shape: Shape = field(compare=False)
    stages: int = field(compare=False)
    lo: int = field(compare=False)
    hi: int = field(compare=False)
    floors: Floors = field(compare=False)
    tokens_hi: int = field(compare=False)  # tokens at hi, every replica
    e2e_lo: int = field(compare=False)  # the least e2e of any plan in the node


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

    # --- floors ------------------------------------------------------------------------------
    def floors_at(self, o: Shape, S: int, q: int, inherit: Floors | None) -> Floors:
        """Level one: the step priced at q; the slowest stages bounded by the sums, or by the split
        floors of ``inherit`` (computed at a smaller q of the same chunk: they still hold)."""
        t = self.t
        opt = BatchOption.at(o.attn_dp, q)
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
            q0=q, chunk=e.chunk, steps=e.steps, decode_sum_ns=decode,
            slope_ns=sum(L[k] * e.kv_slope.get(k, 0) for k in t.kinds), prefill_ns=prefill,
            activation_bytes=t.chunk_activation[(o, opt)], points=points, level=0,
        )

    def split_at(self, o: Shape, S: int, floors: Floors, dp: int) -> Floors:
        """Level two: every split at q0 (the oracle's Pareto front, memory at q0), which also scores
        q0 exactly; the best candidate there may become the incumbent."""
        opt = BatchOption.at(o.attn_dp, floors.q0)
        entries: list[SplitPoint] = self.oracle.splits(o, opt, S)
        for dmax, pmax, bounds in entries:
            cand, load = self.oracle.evaluate_combo(o, opt, S, dp, bounds, dmax, pmax)
            if self.oracle.within_limits(load):
                self.offer(cand)
        points = tuple(sorted({(d, p) for d, p, _ in entries}))
        return replace(floors, points=points, level=2)

    def least_slowest_at(self, o: Shape, S: int, floors: Floors) -> Floors:
        """Level one, cheaply: the least slowest decode stage and prefill stage any split into S can
        have (each on its own, memory and sends left out: both only relax it), merged into the points."""
        t = self.t
        e = t.price(o, BatchOption.at(o.attn_dp, floors.q0))
        dmin = _least_slowest([e.decode[k] for k in t.kind_of_layer], S, e.first_decode, e.last_decode)
        pmin = _least_slowest([e.prefill[k] for k in t.kind_of_layer], S, e.first_prefill, e.last_prefill)
        points = tuple(sorted({(max(d, dmin), max(p, pmin)) for d, p in floors.points}))
        return replace(floors, points=points, level=1)

    def e2e_floor(self, o: Shape, S: int, f: Floors, q: int, chunk: int) -> int | None:
        """The least e2e of any plan of (o, S) at q (>= f.q0) with prompts ``chunk`` at a time, or
        None when even the floors break memory, a TTFT or a TPOT limit."""
        if not self.may_fit(o, S, f, q, chunk):
            return None
        grown = f.decode_sum_ns - self.layers + f.slope_ns * (q - f.q0)
        round_floor = max(f.decode_sum_ns, grown)
        batch = S * o.attn_dp * q
        best: int | None = None
        for dmax, pmax in f.points:
            # Another chunk's slowest prefill stage per prompt may be shorter: its share (TPOT) and queue (TTFT)
            # are then unbounded below. The own-prompt share ceil(prefill / chunk) stays a floor at the node's
            # chunk: a larger chunk's prefill is at least q0's (f.prefill_ns), divided by the same chunk.
            share_stage = pmax if chunk == f.chunk else 0
            load: UnderLoad = under_load(
                f.prefill_ns, max(round_floor, S * dmax), share_stage, batch, self.osl, chunk, f.steps,
                self.oracle.stack,
            )
            if self.oracle.within_limits(load) and (best is None or load.e2e_ns < best):
                best = load.e2e_ns
        return best

    def may_fit(self, o: Shape, S: int, f: Floors, q: int, chunk: int) -> bool:
        """Every stage's bytes together within S GPUs' limits at q (the chunk's activations when known)."""
        t, m = self.t, self.t.memory[o]
        seqs = S * q
        weights = sum(t.layers_of(k) * m.weights[k] for k in t.kinds)
        kv = sum(t.layers_of(k) * m.kv_per_seq[k] for k in t.kinds)
        activation = f.activation_bytes if chunk == f.chunk else 0
        total = weights + kv * seqs + m.first + (m.last_with_first if S == 1 else m.last)
        total += S * (seqs * m.logits_per_seq + activation + m.fixed)
        return total <= S * t.limit_bytes

    # --- the heap -----------------------------------------------------------------------------
    def push(self, o: Shape, S: int, lo: int, hi: int, f: Floors, chunk: int, dp: int) -> None:
        """The node (o, S, [lo, hi]) unless it is empty or provably worse than the best plan."""
        if lo > hi:
            return
        e2e = self.e2e_floor(o, S, f, lo, chunk)
        if e2e is None:
            return
        hi = self.largest_fitting(o, S, f, lo, hi, chunk)
        tokens = dp * S * o.attn_dp * hi
        if self.beaten(tokens, e2e):
            return
        key = (-tokens / e2e, (o.tp, o.sp, o.attn_dp, o.expert_tp), S, lo)
        heapq.heappush(self.heap, _Node(key, o, S, lo, hi, f, tokens, e2e))

    def largest_fitting(self, o: Shape, S: int, f: Floors, lo: int, hi: int, chunk: int) -> int:
        """The largest q in [lo, hi] that passes ``may_fit`` (lo does): a bisection, memory grows with q."""
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if self.may_fit(o, S, f, mid, chunk) else (lo, mid - 1)
        return lo

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
        """Per (shape, stage count): one node per chunk the batch can have, priced at q = 1."""
        oracle, space = self.oracle, self.space
        wl_isl, budget = oracle.problem.workload.isl, space.profile.max_num_tokens
        for o in oracle.shapes():
            chunk_grows = budget // wl_isl // o.attn_dp
            for S in oracle.stage_counts(o):
                dps = oracle.replicas(o, S)
                top = space.batch_limit // S
                if not dps or top < 1:
                    continue
                f = self.floors_at(o, S, 1, None)
                # q <= chunk_grows each have their own chunk; every larger q prefills the budget's prompts.
                for q in range(1, min(chunk_grows, top) + 1):
                    self.push(o, S, q, q, f, _chunk(oracle, o, q), dps[-1])
                if chunk_grows < top:
                    self.push(o, S, max(1, chunk_grows + 1), top, f, _chunk(oracle, o, top), dps[-1])

    def run(self) -> BatchSearch:
        self.roots()
        while self.heap:
            if self.best is None:
                self.check()  # no plan yet: only a deadline long past ends the search
            elif self.passed():
                return BatchSearch(self.best, self.open_bound())
            node = heapq.heappop(self.heap)
            if self.beaten(node.tokens_hi, node.e2e_lo):
                continue
            self.refine(node)
        return BatchSearch(self.best, None)

    def refine(self, node: _Node) -> None:
        o, S, lo, hi, f = node.shape, node.stages, node.lo, node.hi, node.floors
        dp = self.oracle.replicas(o, S)[-1]
        chunk = _chunk(self.oracle, o, lo)
        wide = hi - lo > lo // NARROW
        if f.chunk != chunk or (f.q0 < lo and (wide or hi == lo or f.level < 2)):
            self.push(o, S, lo, hi, self.floors_at(o, S, lo, f), chunk, dp)
        elif wide or f.q0 < lo:
            # A wide range's bound is loose by its tokens at hi over those at lo: halve it before
            # computing splits, which cost far more than pricing a step. A narrow one under split
            # floors from just below is halved as it is: its points' floors grow with their
            # concurrency, and only those still above the best plan get their own.
            self.halve(o, S, lo, hi, f, chunk, dp)
        elif f.level == 0:
            self.push(o, S, lo, hi, self.least_slowest_at(o, S, f), chunk, dp)
        else:
            if f.level == 1:
                f = self.split_at(o, S, f, dp)  # scores q = lo exactly
            self.halve(o, S, lo + 1, hi, f, chunk, dp)

    def halve(self, o: Shape, S: int, lo: int, hi: int, f: Floors, chunk: int, dp: int) -> None:
        mid = (lo + hi) // 2
        self.push(o, S, lo, mid, f, chunk, dp)
        self.push(o, S, mid + 1, hi, f, chunk, dp)

    def open_bound(self) -> tuple[int, int] | None:
        """The highest (tokens, e2e) bound among the nodes left (and the best plan's own ratio)."""
        top: tuple[int, int] | None = None
        for node in self.heap:
            if top is None or node.tokens_hi * top[1] > top[0] * node.e2e_lo:
                top = (node.tokens_hi, node.e2e_lo)
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


def _chunk(oracle: Oracle, o: Shape, q: int) -> int:
    """Prompts per prefill chunk at q sequences per attention group (evaluate's ``prefill_chunk``)."""
    return prefill_chunk(oracle.problem, oracle.space.profile, o.attn_dp * q)


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
