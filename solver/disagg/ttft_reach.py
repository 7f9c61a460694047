"""How far the TTFT floor (``ttft_cut.ChoiceFloor``) lets a pair of candidates go: a bound on the rate per
GPU of every deployment of the pair the floor lets through (``Reach.pair_bound``: ``walk.pair_bound`` with
each role's rate per worker held to what TTFT allows), the candidates with no such deployment at a given
rate per GPU (``Reach.kept``, what ``prune.pruned_pools`` keeps) and the worker counts of a pair that may
have one (``Reach.spans``, what ``walk`` lists). No CP-SAT here, and no exact check: everything left out
is refused by the floor, which refuses only what the exact check refuses, so a search that skips it
returns the same deployment.

**What the floor reads.** ``ChoiceFloor.refuses`` judges x prefill and y decode workers at a rate r
(requests/s, shaved by ``FLOAT_SLACK``) through ``u = r / x``, ``w = r / y`` and the prefill pool's time per
prompt ``s1 / x`` alone: the least chunk climbs with u, the least batch with w, and as ``E + L' = limit +
D`` (``D = (OSL - 1) round``; ``L' = limit - overhead - pass - transfer``) it lets the deployment through
exactly when ``L' >= 0`` and

    u <= A + c / x,    A = (1 + eps) NS (L' + NS_SLACK) / (s1 share (limit + D)),    c = (1 + eps) NS / (limit + D).

**Levels.** The climb stops at the first chunk n with ``ceil(u slowest(n) (1 - eps) / (ranks NS)) <= n``
and ``slowest`` grows with n, so the least chunk is at least ``c_m`` exactly when u passes ``t_m``, the
largest ``n ranks NS / (slowest(n) (1 - eps))`` over ``n < c_m`` (over a ladder of chunks, ``(c_{m+1} - 1)
/ slowest(c_m)`` bounds every n between two; ``capacity_below`` does the same). Likewise the least batch
reaches rung ``r_j`` exactly when w passes ``T_j``, the largest ``(r_{i+1} - 1) NS / ((OSL - 1) round(r_i)
(1 - eps))`` over rungs ``i < j`` (the floor reads ``round(r_i)`` on ``[r_i, r_{i+1})``). So a deployment
the floor lets through with w in ``(T_j, T_{j+1}]`` (decode level j, the round at least ``round(r_j)``)
and u in ``(t_m, t_{m+1}]`` (the pass at least ``pass(c_m)``) has ``r <= x min(a, t_{m+1}, A_mj) + c_j``:
``r <= x U_j + c_j`` with ``U_j`` the largest over the chunk pieces whose ``L' >= 0``, and ``r <= y W_j``,
``W_j = min(b, T_{j+1})`` (a, b: one worker's capacity).

**Why the pair bound holds.** With ``x >= max(1, (r - c_j) / U_j, r / a)`` and ``y >= r / W_j``, ``r / (x g
+ y h) <= 1 / (g / min(a, U_j + c_j) + h / W_j)``: as a function of r the prefill term ``max(1/r, (1 - c/r)
/ U, 1/a)`` is least at ``r = U + c``. The pair's bound is the largest over its decode levels; a
candidate's over every level of every candidate of the other role, with no transfer (the spare only
grows). Thresholds, A and c are widened by ``BOUND_SLACK``, far beyond any float rounding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from shardplan.solver.cost.evaluate import NS_PER_S
from shardplan.solver.disagg.ttft_cut import FLOAT_SLACK, MAX_CHUNK_LEVELS, NS_SLACK, ChoiceFloor
from shardplan.solver.disagg.workers import RATE_UNITS_PER_RPS

BOUND_SLACK = 1e-6  # relative widening of every threshold and bound (float rounding is ~1e-15)
WIDE = 1 + BOUND_SLACK


@dataclass(frozen=True)
class Level:
    """A decode level of a pair: deployments whose rate per decode worker is at most ``w`` (requests/s)
    and whose prefill pool of x workers carries at most ``x u + c`` requests/s under the floor."""

    u: float
    c: float
    w: float

    def per_gpu(self, a: float, g: int, h: int) -> float:
        """The bound on requests/s per GPU at this level (``a``: one prefill worker's capacity)."""
        return 1 / (g / min(a, self.u + self.c) + h / self.w)


class Reach:
    """The floor's reach over the candidates of ``floor.pools`` (module docstring), memoised per index."""

    def __init__(self, floor: ChoiceFloor):
        self.floor = floor
        self.pools = floor.pools
        self.active = floor.active
        self._chunks: dict[int, list[tuple[float, int]]] = {}  # _chunks[i]: (t_m, pass at c_m) per piece
        self._batches: dict[int, list[tuple[float, int]]] = {}  # _batches[k]: (T_j, D_j) per decode level
        self._levels: dict[tuple[int, int], list[Level]] = {}  # _levels[(i, k)]: the pair's levels
        # _reaching[(i, k, f)]: the pair's levels whose bound reaches f rate units per GPU
        self._reaching: dict[tuple[int, int, Fraction], list[Level]] = {}

    def prefill_rps(self, i: int) -> float:
        return self.pools.prefill[i].capacity_units / RATE_UNITS_PER_RPS * WIDE

    def decode_rps(self, k: int) -> float:
        return self.pools.decode[k].capacity_units / RATE_UNITS_PER_RPS * WIDE

    def chunk_pieces(self, i: int) -> list[tuple[float, int]]:
        """(t_m, pass(c_m)) for each chunk level ``c_m`` of prefill candidate i (``t_0`` = 0)."""
        if i not in self._chunks:
            floor = self.floor
            top = floor.top_chunk
            ladder = list(range(1, top + 1)) if top <= MAX_CHUNK_LEVELS else sorted({top, *_powers_of_two(top)})
            ranks = self.pools.prefill[i].layout.attn_dp
            pieces, above = [], 0.0
            for m, n in enumerate(ladder):
                if m > 0:
                    lo = ladder[m - 1]
                    above = max(above, (n - 1) * ranks * NS_PER_S / (floor.step(i, lo).slowest_ns * (1 - FLOAT_SLACK)))
                pieces.append((above * WIDE, floor.step(i, n).pass_ns))
            self._chunks[i] = pieces
        return self._chunks[i]

    def decode_levels(self, k: int) -> list[tuple[float, int]]:
        """(T_j, D_j) for each rung ``r_j`` of decode candidate k's ladder (``T_0`` = 0), D_j = (OSL - 1)
        round(r_j); one level (0, 0) when there is no decode round (OSL 1)."""
        if k not in self._batches:
            floor = self.floor
            osl = self.pools.problem.workload.osl
            if osl <= 1:
                self._batches[k] = [(0.0, 0)]
                return self._batches[k]
            ladder = floor.ladder(k)
            levels, above = [], 0.0
            for j, r in enumerate(ladder):
                if j > 0:
                    lo = ladder[j - 1]
                    above = max(above, (r - 1) * NS_PER_S / ((osl - 1) * floor.round_at(k, lo) * (1 - FLOAT_SLACK)))
                levels.append((above * WIDE, (osl - 1) * floor.round_at(k, r)))
            self._batches[k] = levels
        return self._batches[k]

    def prefill_most(self, i: int, e2e_ns: int, transfer_ns: int) -> tuple[float, float] | None:
        """(U, c) of prefill candidate i against a decode round of ``e2e_ns`` (``D``) and this transfer:
        the floor lets x workers carry at most ``x U + c`` requests/s; None if it lets none through."""
        floor = self.floor
        total = floor.limit_ns + e2e_ns
        full = floor.step(i, floor.top_chunk)
        s1 = full.slowest_ns / full.chunk
        c = (1 + FLOAT_SLACK) * NS_PER_S / total * WIDE
        a = self.prefill_rps(i)
        pieces = self.chunk_pieces(i)
        most = None
        for m, (above, pass_ns) in enumerate(pieces):
            spare = floor.limit_ns - floor.overhead_ns - pass_ns - transfer_ns
            if spare < 0 or above >= a:
                break  # the pass only grows with the chunk, and no worker runs above its capacity
            big_a = (1 + FLOAT_SLACK) * NS_PER_S * (spare + NS_SLACK) / (s1 * floor.share * total) * WIDE
            if big_a + c <= above:
                break  # A falls as the chunk grows: no later piece is reached either
            cap = pieces[m + 1][0] if m + 1 < len(pieces) else math.inf
            u = min(a, cap, big_a)
            most = u if most is None else max(most, u)
        return None if most is None else (most, c)

    def levels(self, i: int, k: int, transfer_ns: int | None = None) -> list[Level]:
        """The pair's decode levels the floor lets some deployment through (``transfer_ns``: the pair's
        least transfer by default, memoised; a given one, e.g. 0, is not)."""
        key = (i, k)
        if transfer_ns is None and key in self._levels:
            return self._levels[key]
        transfer = self.floor.transfer_ns(i, k) if transfer_ns is None else transfer_ns
        b = self.decode_rps(k)
        out = []
        steps = self.decode_levels(k)
        for j, (above, e2e_ns) in enumerate(steps):
            if above >= b:
                break
            most = self.prefill_most(i, e2e_ns, transfer)
            if most is None:
                continue
            w = min(b, steps[j + 1][0]) if j + 1 < len(steps) else b
            if w > 0:
                out.append(Level(most[0], most[1], w))
        if transfer_ns is None:
            self._levels[key] = out
        return out

    def pair_bound(self, i: int, k: int) -> float:
        """At least the rate units per GPU of every deployment of the pair the floor lets through (0 if
        it lets none; infinite when the floor is off)."""
        if not self.active:
            return math.inf
        p, d = self.pools.prefill[i], self.pools.decode[k]
        a = self.prefill_rps(i)
        best = max((lv.per_gpu(a, p.gpus, d.gpus) for lv in self.levels(i, k)), default=0.0)
        return _units(best)

    def kept(self, floor_per_gpu: Fraction) -> tuple[list[int], list[int]]:
        """The prefill and the decode candidates (indices, in order) in some pair that may reach
        ``floor_per_gpu`` rate units per GPU through the floor: each bounded against every level of
        every candidate of the other role, with no transfer (module docstring). Every candidate when
        the floor is off."""
        pools = self.pools
        every_p, every_d = list(range(len(pools.prefill))), list(range(len(pools.decode)))
        if not self.active:
            return every_p, every_d
        f = float(floor_per_gpu)
        # The decode levels as (D, best rate per GPU at that D or less): a prefill candidate's U only
        # falls as D grows, so a level with a larger D and no more rate per GPU bounds nothing more.
        points = sorted((e2e_ns, -min(self.decode_rps(k), w) / pools.decode[k].gpus)
                        for k in every_d for e2e_ns, w in self._level_rates(k))
        front: list[tuple[int, float]] = []
        for e2e_ns, neg_q in points:
            if not front or -neg_q > front[-1][1]:
                front.append((e2e_ns, -neg_q))
        kept_p = [i for i in every_p if self._prefill_bound(i, front) >= f]
        best_prefill: dict[int, float] = {}  # best_prefill[D]: the most prefill rate per GPU at that D

        def prefill_per_gpu(e2e_ns: int) -> float:
            if e2e_ns not in best_prefill:
                best_prefill[e2e_ns] = max((self._prefill_per_gpu(i, e2e_ns) for i in kept_p), default=0.0)
            return best_prefill[e2e_ns]

        kept_d = []
        for k in every_d:
            h = pools.decode[k].gpus
            bound = 0.0
            for e2e_ns, w in self._level_rates(k):
                q = prefill_per_gpu(e2e_ns)
                if q > 0 and w > 0:
                    bound = max(bound, 1 / (1 / q + h / w))
            if _units(bound) >= f:
                kept_d.append(k)
        return kept_p, kept_d

    def spans(self, i: int, k: int, floor_per_gpu: Fraction, y: int) -> list[tuple[int, int]]:
        """For y decode workers of the pair, intervals of x (merged, ascending) holding every deployment
        the floor may let through at ``floor_per_gpu`` rate units per GPU or more: at a level, ``r >=
        f (x g + y h)`` with ``r <= x U + c`` and ``r <= y W`` (f in requests/s, shaved as the floor's r is)."""
        p, d = self.pools.prefill[i], self.pools.decode[k]
        g, h = p.gpus, d.gpus
        f = float(floor_per_gpu) * (1 - FLOAT_SLACK) / RATE_UNITS_PER_RPS / WIDE
        key = (i, k, floor_per_gpu)
        if key not in self._reaching:  # the levels whose own bound reaches f: no other has a span
            a = self.prefill_rps(i)
            self._reaching[key] = [lv for lv in self.levels(i, k) if _units(lv.per_gpu(a, g, h)) >= floor_per_gpu]
        out: list[tuple[int, int]] = []
        for lv in self._reaching[key]:
            if f <= 0 or lv.w <= f * h:
                continue
            hi = math.ceil(y * (lv.w - f * h) / (f * g))
            need = f * y * h - lv.c  # x (U - f g) >= need
            if lv.u > f * g:
                lo = max(1, math.floor(need / (lv.u - f * g)))
            elif need <= 0:
                lo = 1
                if lv.u < f * g:
                    hi = min(hi, math.ceil(-need / (f * g - lv.u)))
            else:
                continue
            if lo <= hi:
                out.append((lo, hi))
        return _merged(out)

    def _level_rates(self, k: int) -> list[tuple[int, float]]:
        """(D_j, W_j) of decode candidate k's reachable levels."""
        b = self.decode_rps(k)
        steps = self.decode_levels(k)
        return [(e2e_ns, min(b, steps[j + 1][0]) if j + 1 < len(steps) else b)
                for j, (above, e2e_ns) in enumerate(steps) if above < b]

    def _prefill_per_gpu(self, i: int, e2e_ns: int) -> float:
        most = self.prefill_most(i, e2e_ns, 0)
        if most is None:
            return 0.0
        return min(self.prefill_rps(i), most[0] + most[1]) / self.pools.prefill[i].gpus

    def _prefill_bound(self, i: int, front: list[tuple[int, float]]) -> float:
        best = 0.0
        for e2e_ns, q in front:
            pq = self._prefill_per_gpu(i, e2e_ns)
            if pq > 0:
                best = max(best, 1 / (1 / pq + 1 / q))
        return _units(best)


def _units(rps_per_gpu: float) -> float:
    """Requests/s per GPU of the floor's shaved rate as rate units per GPU, widened."""
    return rps_per_gpu * RATE_UNITS_PER_RPS / (1 - FLOAT_SLACK) * WIDE


def _powers_of_two(top: int) -> list[int]:
    return [1 << e for e in range(top.bit_length()) if 1 << e <= top]


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(spans):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


__all__ = ["BOUND_SLACK", "Level", "Reach"]
