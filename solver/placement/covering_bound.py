"""A proof that no placement keeps every GPU at or below a target: a dual certificate.

``covering.py`` turns the question into bin covering: with two slots, at target ``T`` the experts must
form at least ``E - G`` disjoint groups with surplus ``D >= 1`` (a split scores ``sum min(1, floor(D), size - 1)``
over its groups); with ``S`` slots the scores ``min(1, floor(D), size - (S-1))`` must reach ``E - (S-1) G``
(a relaxation there). Any weights ``y`` (one per expert) with ``sum(y over a group) >= score(group)`` for
*every* group bound the best split's score by ``sum(y)`` — the dual of the configuration LP. When that is
below what is needed, ``T`` is out of reach.

The weights follow the shape the LP's optimal duals take on these instances (column generation on the
DeepSeek-V3 cases found them in quarters): with two slots an expert that completes a group with a single
other expert is worth 1/2, one that cannot is worth 1/4 (or 1/2 and 1/3 on a grid of sixths, tried when
quarters fail); with ``S`` slots, 1/S for one that completes a group with the ``S - 1`` coldest others;
a hot expert is worth one minus the cheapest weight of cold experts that cover it, never below its own
score alone. The certificate is then *checked*, not assumed: an exact enumeration over every group
(hot subsets by dynamic programme, cold experts by how many of each weight, taking the coldest ones,
which maximise the surplus for that weight) confirms ``sum(y) >= score`` for all groups, on surpluses
rounded up to a grid of 1/1000 (rounding up only raises scores, so the check stays valid).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator, Sequence
from itertools import accumulate

from shardplan.solver.placement.bisection import highest_proven

Q = 1000  # surplus grid: sizes are surpluses in 1/Q units, rounded up
_MAX_CHECKS = 300_000  # groups checked per certificate; the benchmark's layers need a few thousand


def _grids(spare: int) -> tuple[tuple[int, int, int], ...]:
    """(weight of one covered group, of an expert that completes one with the ``spare`` coldest others,
    of one that cannot): halves and quarters with two slots, then halves and thirds."""
    return (2 * (spare + 1), 2, 1), (3 * (spare + 1), 3, 2)


def _sizes(loads: Sequence[float], target: float, spare: int) -> list[int]:
    return [min(Q, math.ceil((1.0 - spare * w / target) * Q + 1e-7)) for w in loads]


def _score(level: int, count: int, spare: int) -> int:
    """Upper bound on a group's term (``covering.py``); exact with two slots."""
    return min(1, level // Q, count - spare)


def certificate(loads: Sequence[float], target: float, slots: int = 2,
                below: float | None = None) -> tuple[list[int], int] | None:
    """Integer weights per expert and the weight of one covered group (``unit``), checked to satisfy
    ``sum(weights of a group) >= unit * score(group)`` for every group; None when no grid checks out.
    With ``below``, a grid whose weights sum to ``below`` units or more is not checked (it proves nothing)."""
    spare = slots - 1
    sizes = _sizes(loads, target, spare)
    cold = sorted((s for s in sizes if s >= 0), reverse=True)
    if len(cold) < spare + 1:
        return None
    coldest = sum(cold[:spare])  # the spare coldest experts' surplus
    for unit, pairing, small in _grids(spare):
        def cold_weight(s: int, pairing: int = pairing, small: int = small) -> int:
            # with the spare coldest *other* experts: swap s out of that set if it is in it
            others = coldest if s < cold[spare - 1] else coldest - s + cold[spare]
            return pairing if s + others >= Q else small
        cold_weights = [cold_weight(s) for s in cold]
        table = _ColdTable(cold, cold_weights, pairing, small)
        hot = sorted(s for s in sizes if s < 0)
        # cheapest() is an integer weight, or inf when there is none (then the first term wins): int() is exact
        hot_weight = {s: int(max(unit * min(s // Q, 1 - spare), unit - table.cheapest(Q - s, spare))) for s in hot}
        weights = [hot_weight[s] if s < 0 else cold_weight(s) for s in sizes]
        if below is not None and sum(weights) >= below * unit:
            continue
        if _holds(hot, [hot_weight[s] for s in hot], table, unit, spare):
            return weights, unit
    return None


def proves_out_of_reach(loads: Sequence[float], num_gpus: int, target: float, slots: int = 2) -> bool:
    """True only if no placement on ``num_gpus`` GPUs of ``slots`` slots keeps every GPU at or below ``target``."""
    need = len(loads) - (slots - 1) * num_gpus  # the split's total score must reach this
    found = certificate(loads, target, slots, below=need - 1e-9)
    return found is not None and sum(found[0]) < (need - 1e-9) * found[1]


class _ColdTable:
    """Surplus reachable by the coldest ``a`` small-weight and ``b`` pairing-weight experts."""

    def __init__(self, cold: list[int], weights: list[int], pairing: int, small: int):
        self.pairing, self.small = pairing, small
        self.smalls = [0, *accumulate(s for s, w in zip(cold, weights, strict=True) if w == small)]
        self.pairs = [0, *accumulate(s for s, w in zip(cold, weights, strict=True) if w == pairing)]

    def cheapest(self, need: int, at_least: int) -> float:
        """Least weight of ``at_least`` or more cold experts whose surpluses sum to ``need`` or more (inf if
        none)."""
        best = math.inf
        for a, reach in enumerate(self.smalls):
            b = max(bisect.bisect_left(self.pairs, need - reach), at_least - a)
            if b < len(self.pairs):
                best = min(best, a * self.small + b * self.pairing)
        return best

    def combos(self, budget: float) -> Iterator[tuple[int, int, int]]:
        """(weight, count, surplus) for every count of each kind with weight below ``budget``."""
        for a, reach_a in enumerate(self.smalls):
            if a * self.small >= budget:
                break
            for b, reach_b in enumerate(self.pairs):
                weight = a * self.small + b * self.pairing
                if weight >= budget:
                    break
                yield weight, a + b, reach_a + reach_b


def _holds(hot: list[int], hot_weights: list[int], table: _ColdTable, unit: int, spare: int) -> bool:
    """Every group's weight is at least ``unit`` times its score (exact, on the rounded sizes); False also when
    the check would take more than ``_MAX_CHECKS`` steps."""
    # best[(weight, min(count, spare + 1))] = highest surplus of a hot subset with that weight and count
    # (no score grows past spare + 1 members)
    best: dict[tuple[int, int], int] = {(0, 0): 0}
    for size, weight in zip(hot, hot_weights, strict=True):
        for (w, k), level in list(best.items()):
            key = (w + weight, min(k + 1, spare + 1))
            if best.get(key, -math.inf) < level + size:
                best[key] = level + size
    work = 0
    for (w, k), level in best.items():
        # Only groups weighing less than one unit can break the check (no score exceeds 1).
        for weight, count, reach in table.combos(unit - w):
            total = k + count
            if total >= 1 and unit * _score(level + reach, total, spare) > w + weight:
                return False
            work += 1
            if work > _MAX_CHECKS:  # many hot experts: give up (no proof) rather than stall
                return False
    return True


def covering_bound(loads: Sequence[float], num_gpus: int, proven: float, feasible: float, slots: int = 2,
                   steps: int = 40) -> float:
    """The largest target shown out of reach between ``proven`` (a valid bound) and ``feasible`` (a
    reached load)."""
    return highest_proven(lambda target: proves_out_of_reach(loads, num_gpus, target, slots), proven, feasible, steps)
