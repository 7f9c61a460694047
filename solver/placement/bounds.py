"""Proven lower bounds on the most-loaded GPU of one MoE layer, for G GPUs of S expert slots.

No CP-SAT here (``cpsat.py`` adds its own bound where it runs). Each bound below holds for every
placement in which an expert's tokens may be split over its copies in any proportion:

- mean: ``W / G``.
- copies (water-filling): a GPU serving at most ``T`` tokens needs ``ceil(w_e / T)`` copies of expert ``e``,
  and all copies fit in ``S * G`` slots. The least such ``T`` is the largest load per copy after handing
  out copies one at a time to the expert with the highest load per copy (``greedy.replica_counts``).
  With ``S = 1`` this is exact.
- no room to split (``E = S * G``): every GPU hosts exactly ``S`` whole experts, so some GPU holds ``k + 1``
  of the ``k G + 1`` hottest experts plus ``S - k - 1`` others.
- covering: a dual certificate for the bin-covering form of the problem (``covering_bound.py``), usually
  far tighter than the component bound when copies are scarce.
- components: an optimal placement can be taken with a forest as its expert-GPU graph (moving tokens
  round a cycle changes no GPU's load), and a tree with ``k`` experts on ``m`` GPUs has ``k + m - 1``
  copies, so ``k <= (S - 1) m + 1`` and ``m >= W_tree / T``. When ``E > (S - 1) G + 1`` the experts must
  form several trees; ``_components_exceed`` shows that no split into trees fits ``G`` GPUs at a given
  ``T``. The condition is also sufficient (``fill.py``), so with ``E <= (S - 1) G + 1`` the mean is
  reached and is the bound.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from shardplan.solver.placement.bisection import highest_proven
from shardplan.solver.placement.covering_bound import covering_bound
from shardplan.solver.placement.fill import fits_in_one_group
from shardplan.solver.placement.greedy import replica_counts

_EPS = 1e-9


def _ceil(x: float) -> int:
    # Rounding errors must only weaken a bound, never strengthen it.
    return math.ceil(x - _EPS)


def copies_bound(loads: Sequence[float], num_gpus: int, slots: int) -> float:
    """Least load per copy when every slot may hold a copy (at most one copy of an expert per GPU)."""
    counts = replica_counts(loads, num_gpus, slots * num_gpus)
    return max((w / c for w, c in zip(loads, counts, strict=True)), default=0.0)


def no_split_bound(loads: Sequence[float], num_gpus: int, slots: int) -> float:
    """The pigeonhole bound when ``len(loads) == slots * num_gpus`` (no copy can be added)."""
    ordered = sorted(loads, reverse=True)
    n = len(ordered)
    best = 0.0
    for k in range(slots):
        top = k * num_gpus + 1
        others = slots - k - 1
        if top > n or n - top < others:
            break
        together = sum(ordered[top - k - 1: top])  # the k + 1 smallest of the top set
        rest = sum(ordered[n - others:]) if others else 0.0
        best = max(best, together + rest)
    return best


def _components_exceed(loads: Sequence[float], num_gpus: int, slots: int, target: float) -> bool:
    """True only if no placement keeps every GPU at or below ``target`` (component relaxation).

    Experts above ``target`` ("hot") sit in trees with some cold "partners"; the other cold experts form
    cold-only trees. For every number ``p`` of partners it lower-bounds the GPUs of both parts:
    hot trees need ``ceil(hot load + p smallest cold loads)`` GPUs and ``p / (S - 1)`` for the partners'
    copies; a cold-only tree saves at most one GPU per tree with S = 2 (pairs must fit ``target``, larger
    trees need three or more experts and a slack of one GPU), and with S > 2 at most what a tree of the
    same size made of the smallest experts would save (a small dynamic programme over tree sizes).
    """
    u = [w / target for w in loads]
    hot = [v for v in u if v > 1 + _EPS]
    cold = sorted(v for v in u if v <= 1 + _EPS)
    n = len(cold)
    prefix = [0.0]
    for v in cold:
        prefix.append(prefix[-1] + v)
    hot_load = sum(hot)
    if slots == 2:
        pairs = _max_pairs(cold)
        q = next((k for k in range(2, n + 1) if k - prefix[k] >= 1 - _EPS), None)
    else:
        cold_gpus = _cold_tree_gpus(prefix, slots)
    for p in range(n + 1) if hot else (0,):
        hot_gpus = max(_ceil(hot_load + prefix[p]), _ceil(p / (slots - 1))) if hot else 0
        rest = n - p
        load_gpus = _ceil(prefix[rest]) if rest else 0
        if slots == 2:
            if q is None:
                trees = 0
            else:
                two = min(pairs, rest // 2)
                trees = min(two + (rest - 2 * two) // max(3, q), rest // q)
            need = hot_gpus + max(rest - trees, load_gpus)
        else:
            need = hot_gpus + max(cold_gpus[rest], load_gpus)
        if need <= num_gpus:
            return False
    return True


def _max_pairs(cold: list[float]) -> int:
    """Most disjoint pairs with loads summing to at most 1 (sorted input; two pointers are exact here)."""
    i, j, pairs = 0, len(cold) - 1, 0
    while i < j:
        if cold[i] + cold[j] <= 1 + _EPS:
            pairs += 1
            i += 1
        j -= 1
    return pairs


def _cold_tree_gpus(prefix: list[float], slots: int) -> list[int]:
    """``gpus[n]``: fewest GPUs any split of ``n`` cold experts into trees can use (a lower bound).

    A tree of ``k`` experts needs ``max(1, ceil((k-1)/(S-1)), ceil(load))`` GPUs and its load is at least
    that of the ``k`` smallest experts.
    """
    n = len(prefix) - 1
    cost = [0] + [max(1, _ceil((k - 1) / (slots - 1)), _ceil(prefix[k])) for k in range(1, n + 1)]
    gpus = [0] * (n + 1)
    for total in range(1, n + 1):
        gpus[total] = min(gpus[total - k] + cost[k] for k in range(1, total + 1))
    return gpus


def components_bound(loads: Sequence[float], num_gpus: int, slots: int, proven: float, feasible: float,
                     steps: int = 40) -> float:
    """The largest load shown infeasible by ``_components_exceed`` between ``proven`` and ``feasible``.

    ``proven`` is an already valid bound, ``feasible`` a load some placement reaches. Bisection keeps the
    invariant "``lo`` is proven infeasible", so the result is valid even though the test is not monotone.
    """
    if slots < 2:
        return proven
    return highest_proven(lambda target: _components_exceed(loads, num_gpus, slots, target), proven, feasible, steps)


def layer_lower_bound(loads: Sequence[float], num_gpus: int, slots: int, feasible: float | None = None) -> float:
    """The best of the bounds above for one layer; ``feasible`` (an achieved max load) enables the
    component bound, which is only needed when ``E > (S - 1) G + 1``.

    >>> layer_lower_bound([4.0, 4.0, 4.0], 2, 2)   # three experts, four slots: the mean 6 is reachable
    6.0
    """
    total = sum(loads)
    if total <= 0:
        return 0.0
    best = max(total / num_gpus, copies_bound(loads, num_gpus, slots))
    if slots >= 2 and not fits_in_one_group(len(loads), num_gpus, slots):
        if len(loads) == slots * num_gpus:
            best = max(best, no_split_bound(loads, num_gpus, slots))
        if feasible is not None:
            best = components_bound(loads, num_gpus, slots, best, feasible)
            best = covering_bound(loads, num_gpus, best, feasible, slots)
    return best
