"""A proof that no two-slot placement keeps every GPU at or below a target: a dual certificate.

``covering.py`` turns the question into bin covering: at target ``T`` the experts must form at least
``E - G`` disjoint groups with surplus ``D >= 1`` (a split scores ``sum min(1, floor(D), size - 1)`` over its
groups). Any weights ``y`` (one per expert) with ``sum(y over a group) >= score(group)`` for *every* group
bound the best split's score by ``sum(y)`` — the dual of the configuration LP. When ``sum(y) < E - G``,
``T`` is out of reach.

The weights follow the shape the LP's optimal duals take on these instances (column generation on the
DeepSeek-V3 cases found them in quarters): an expert that completes a group with a single other expert
is worth 1/2, one that cannot is worth 1/4 (or 1/2 and 1/3 on a grid of sixths, tried when quarters fail);
a hot expert is worth one minus the cheapest weight of cold experts that cover it, never below its own
score alone. The certificate is then *checked*, not assumed: an exact enumeration over every group
(hot subsets by dynamic programme, cold experts by how many of each weight, taking the coldest ones,
which maximise the surplus for that weight) confirms ``sum(y) >= score`` for all groups, on surpluses
rounded up to a grid of 1/1000 (rounding up only raises scores, so the check stays valid).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from itertools import accumulate

Q = 1000  # surplus grid: sizes are surpluses in 1/Q units, rounded up
_GRIDS = ((4, 2, 1), (6, 3, 2))
_MAX_CHECKS = 300_000  # groups checked per certificate; the benchmark's layers need a few thousand  # (weight of one group, weight of a pairing expert, weight of a small one)


def _sizes(loads: Sequence[float], target: float) -> list[int]:
    return [min(Q, math.ceil((1.0 - w / target) * Q + 1e-7)) for w in loads]


def _score(level: int, count: int) -> int:
    return min(1, level // Q, count - 1)


def certificate(loads: Sequence[float], target: float) -> tuple[list[int], int] | None:
    """Integer weights per expert and the weight of one covered group (``unit``), checked to satisfy
    ``sum(weights of a group) >= unit * score(group)`` for every group; None when no grid checks out."""
    sizes = _sizes(loads, target)
    cold = sorted((s for s in sizes if s >= 0), reverse=True)
    if len(cold) < 2:
        return None
    for unit, pairing, small in _GRIDS:
        def cold_weight(s: int) -> int:
            partner = cold[1] if s == cold[0] else cold[0]  # the coldest other expert
            return pairing if s + partner >= Q else small
        cold_weights = [cold_weight(s) for s in cold]
        table = _ColdTable(cold, cold_weights, pairing, small)
        hot = sorted(s for s in sizes if s < 0)
        hot_weight = {s: max(unit * (s // Q), unit - table.cheapest(Q - s)) for s in hot}
        if _holds(hot, [hot_weight[s] for s in hot], table, unit):
            return [hot_weight[s] if s < 0 else cold_weight(s) for s in sizes], unit
    return None


def certified_score_bound(loads: Sequence[float], target: float) -> float | None:
    """An upper bound on the best split's score at ``target``, or None when no certificate checks out."""
    found = certificate(loads, target)
    return None if found is None else sum(found[0]) / found[1]


def proves_out_of_reach(loads: Sequence[float], num_gpus: int, target: float) -> bool:
    """True only if no two-slot placement on ``num_gpus`` GPUs keeps every GPU at or below ``target``."""
    bound = certified_score_bound(loads, target)
    return bound is not None and bound < len(loads) - num_gpus - 1e-9


class _ColdTable:
    """Surplus reachable by the coldest ``a`` small-weight and ``b`` pairing-weight experts."""

    def __init__(self, cold: list[int], weights: list[int], pairing: int, small: int):
        self.pairing, self.small = pairing, small
        self.smalls = [0, *accumulate(s for s, w in zip(cold, weights) if w == small)]
        self.pairs = [0, *accumulate(s for s, w in zip(cold, weights) if w == pairing)]

    def cheapest(self, need: int) -> float:
        """Least weight of cold experts whose surpluses sum to ``need`` or more (inf if none)."""
        best = math.inf
        for a, reach in enumerate(self.smalls):
            b = bisect.bisect_left(self.pairs, need - reach)
            if b < len(self.pairs):
                best = min(best, a * self.small + b * self.pairing)
        return best

    def combos(self, budget: int):
        """(weight, count, surplus) for every count of each kind with weight below ``budget``."""
        for a, reach_a in enumerate(self.smalls):
            if a * self.small >= budget:
                break
            for b, reach_b in enumerate(self.pairs):
                weight = a * self.small + b * self.pairing
                if weight >= budget:
                    break
                yield weight, a + b, reach_a + reach_b


def _holds(hot: list[int], hot_weights: list[int], table: _ColdTable, unit: int) -> bool:
    """Every group's weight is at least ``unit`` times its score (exact, on the rounded sizes); False also when
    the check would take more than ``_MAX_CHECKS`` steps."""
    # best[(weight, min(count, 2))] = highest surplus of a hot subset with that weight and count
    best: dict[tuple[int, int], int] = {(0, 0): 0}
    for size, weight in zip(hot, hot_weights):
        for (w, k), level in list(best.items()):
            key = (w + weight, min(k + 1, 2))
            if best.get(key, -math.inf) < level + size:
                best[key] = level + size
    work = 0
    for (w, k), level in best.items():
        # Only groups weighing less than one unit can break the check (no score exceeds 1).
        for weight, count, reach in table.combos(unit - w):
            total = k + count
            if total >= 1 and unit * _score(level + reach, total) > w + weight:
                return False
            work += 1
            if work > _MAX_CHECKS:  # many hot experts: give up (no proof) rather than stall
                return False
    return True


def covering_bound(loads: Sequence[float], num_gpus: int, proven: float, feasible: float, steps: int = 40) -> float:
    """The largest target shown out of reach between ``proven`` (a valid bound) and ``feasible`` (a
    reached load); bisection keeps "``lo`` is proven", so the result is valid though the test is not
    monotone."""
    if feasible <= proven or not proves_out_of_reach(loads, num_gpus, proven):
        return proven
    lo, hi = proven, feasible
    for _ in range(steps):
        mid = (lo + hi) / 2
        if proves_out_of_reach(loads, num_gpus, mid):
            lo = mid
        else:
            hi = mid
        if hi - lo <= 1e-8 * hi:
            break
    return lo
