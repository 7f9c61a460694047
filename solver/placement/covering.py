"""Two slots per GPU as bin covering: the reformulation, and a split heuristic built on it.

With ``S = 2`` a group of ``k`` experts with load ``W`` needs ``max(1, k - 1, ceil(W / T))`` GPUs to stay at or
below a target ``T`` (``groups.py``: a tree of ``k`` experts on ``m`` GPUs needs ``k <= m + 1``). Give every
expert its *surplus* ``d = 1 - w / T`` (negative for an expert hotter than ``T``) and a group the sum ``D``
of its members' surpluses. Then ``k - 1 - W/T = D - 1`` and ``ceil(W/T) - W/T = D - floor(D)``, so the
group needs ``W/T + D - min(1, floor(D), k - 1)`` GPUs and a split needs, in all,

    E - sum over groups of min(1, floor(D), k - 1)      GPUs.

So ``T`` is reachable on ``G`` GPUs exactly when the experts split into groups whose scores
``min(1, floor(D), k - 1)`` add up to at least ``E - G``. A group with ``D >= 1`` scores 1 ("covered"); a
group that is not covered is worth merging into a covered one (the merge never lowers the total), so
the question is how many disjoint covered groups the experts can form with every hot expert inside
one: bin covering, with the hot experts as items of negative size. ``covering_bound.py`` proves upper
bounds on that count; the heuristic below builds splits:

1. each hot expert, hottest first, takes the coldest free experts until one more free expert would
   complete its group, then the *least* cold expert that does (least surplus wasted);
2. of the free experts left, the "small" ones (too hot to complete a group with any single other
   expert) go in pairs, each pair completed by the least cold expert that suffices — two smalls and
   one cold expert make a covered group, where the smalls alone would be wasted;
3. the others pair up, the coldest with the least cold one that completes it;
4. whatever is left joins the last group (a covered group stays covered).

With ``S`` slots (``s = S - 1`` spare per GPU beyond one) a group needs ``max(1, ceil((k-1)/s), ceil(W/T))``
GPUs. With ``d = 1 - s w / T`` the same algebra gives ``E - s G <= sum over groups of (k - s m)``, and a group's
term ``k - s m`` is at most ``min(1, floor(D), k - s)``: 1 exactly for a group of ``s m + 1`` experts with load
at most ``m T`` (one expert split across GPU boundaries, every slot used). This is a relaxation for
``s > 1`` (group sizes must also fit the slots), which is all ``covering_bound.py`` needs; the heuristic
for ``S > 2`` builds such groups directly: the hottest expert left seeds a group, the coldest fill it, and
the least cold expert that reaches ``D >= 1`` at a size ``s m + 1`` completes it; what is left forms one
last group. GPU counts are then computed from the formula, not assumed.

A target is tried by bisection; each success is a valid split whatever the bisection does next.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence

from shardplan.solver.placement.bisection import lowest_reached
from shardplan.solver.placement.groups import Group, reallocate

_EPS = 1e-12


def surpluses(loads: Sequence[float], target: float, slots: int = 2) -> list[float]:
    return [1.0 - (slots - 1) * w / target for w in loads]


def split_at(loads: Sequence[float], num_gpus: int, target: float, slots: int = 2) -> list[Group] | None:
    """Groups keeping every GPU at or below ``target`` with ``slots`` slots per GPU, or None if the heuristic
    finds none; spare GPUs are handed out after."""
    return _split_two(loads, num_gpus, target) if slots == 2 else _split_wide(loads, num_gpus, target, slots)


def _split_two(loads: Sequence[float], num_gpus: int, target: float) -> list[Group] | None:
    """Two slots: every group is covered, so it needs ``size - 1`` GPUs."""
    d = surpluses(loads, target)
    experts = range(len(loads))
    hot = sorted((e for e in experts if d[e] < 0), key=lambda e: (d[e], e))
    free = sorted((e for e in experts if d[e] >= 0), key=lambda e: (d[e], e))
    keys = [d[e] for e in free]
    covered = []
    for h in hot:
        group = _cover(h, d, free, keys, 1)
        if group is None:
            return None
        covered.append(group)
    covered += _cover_free(d, free, keys)
    if not covered:
        return None
    covered[-1] += free  # leftovers keep the last group covered
    groups = [Group(sorted(g), len(g) - 1) for g in covered]
    if sum(g.gpus for g in groups) > num_gpus:
        return None
    reallocate(groups, loads, num_gpus, 2)
    return groups


def _cover_free(d: list[float], free: list[int], keys: list[float]) -> list[list[int]]:
    """Covered groups of free (non-hot) experts; ``free``/``keys`` keep what is left (ascending)."""
    if len(free) < 2:
        return []
    coldest = keys[-1]
    smalls = [e for e in free if d[e] + coldest < 1.0 - _EPS]
    others = [e for e in free if d[e] + coldest >= 1.0 - _EPS]
    other_keys = [d[e] for e in others]
    groups, left = [], []
    i, j = 0, len(smalls) - 1
    while i < j:  # the hottest small with the coldest small, plus the least cold expert completing them
        k = bisect.bisect_left(other_keys, 1.0 - d[smalls[i]] - d[smalls[j]] - _EPS)
        if k < len(others):
            other_keys.pop(k)
            groups.append([smalls[i], smalls[j], others.pop(k)])
            j -= 1
        else:
            left.append(smalls[i])
        i += 1
    if i == j:
        left.append(smalls[i])
    while len(others) >= 2:  # the coldest with the least cold expert that completes it
        top = others.pop()
        other_keys.pop()
        k = bisect.bisect_left(other_keys, 1.0 - d[top] - _EPS)
        if k < len(others):
            other_keys.pop(k)
            groups.append([top, others.pop(k)])
        else:
            left.append(top)
    left = sorted(left + others, key=lambda e: (d[e], e))
    while left:  # the rest, coldest first, while they still cover groups
        group, level = [], 0.0
        while left and level < 1.0 - _EPS:
            group.append(left.pop())
            level += d[group[-1]]
        if level >= 1.0 - _EPS and len(group) >= 2:
            groups.append(group)
        else:
            left = sorted(left + group, key=lambda e: (d[e], e))
            break
    free[:] = left
    keys[:] = [d[e] for e in left]
    return groups


def _split_wide(loads: Sequence[float], num_gpus: int, target: float, slots: int) -> list[Group] | None:
    spare = slots - 1
    d = surpluses(loads, target, slots)
    free = sorted(range(len(loads)), key=lambda e: (d[e], e))  # hottest first
    keys = [d[e] for e in free]
    groups = []
    while free:
        seed = free.pop(0)
        keys.pop(0)
        group = _cover(seed, d, free, keys, spare)
        if group is None:
            break
        groups.append(group)
    else:
        seed = None
    rest = ([seed] if seed is not None else []) + free
    if rest:
        groups.append(rest)  # one last group; its GPU count comes from the formula like any other
    out = [Group(sorted(g), gpus_needed(loads, g, target, slots)) for g in groups]
    if sum(g.gpus for g in out) > num_gpus:
        return None
    reallocate(out, loads, num_gpus, slots)
    return out


def _cover(seed: int, d: list[float], free: list[int], keys: list[float], spare: int) -> list[int] | None:
    """The seed and free experts up to a size ``spare * m + 1`` with surplus 1 or more; the experts taken are
    removed from ``free``. None (and ``free`` untouched) if the free experts cannot complete it."""
    group, level = [seed], d[seed]
    taken: list[tuple[int, int, float]] = []
    while free:
        if (len(group) - 1) % spare == spare - 1:  # one more expert reaches an admissible size
            i = bisect.bisect_left(keys, 1.0 - level - _EPS)
            if i < len(free):  # the least cold that completes it
                group.append(free.pop(i))
                keys.pop(i)
                return group
        taken.append((len(free) - 1, free[-1], keys[-1]))
        group.append(free.pop())
        level += keys.pop()
    for index, e, key in reversed(taken):  # put them back where they were
        free.insert(index, e)
        keys.insert(index, key)
    return None


def gpus_needed(loads: Sequence[float], group: Sequence[int], target: float, slots: int) -> int:
    """Fewest GPUs that keep ``group`` at or below ``target``: ``max(1, ceil((k-1)/(S-1)), ceil(W/T))``."""
    load = sum(loads[e] for e in group) / target
    return max(1, math.ceil((len(group) - 1) / (slots - 1)), math.ceil(load - 1e-12))


def cover_split(loads: Sequence[float], num_gpus: int, lo: float, hi: float, slots: int = 2,
                steps: int = 40) -> list[Group] | None:
    """The split found at the lowest target in ``[lo, hi]`` that ``split_at`` reaches (``lo`` a proven bound,
    ``hi`` a reached load); None if it reaches none."""
    return lowest_reached(lambda target: split_at(loads, num_gpus, target, slots), lo, hi, steps, 1e-7)


def least_gpus_needed(loads: Sequence[float], groups: Sequence[Sequence[int]], target: float) -> int:
    """GPUs a two-slot split needs at ``target`` by the formula above (tests hold it to ``gpus_needed``)."""
    d = surpluses(loads, target)
    return len(loads) - sum(min(1, math.floor(sum(d[e] for e in g) + 1e-9), len(g) - 1) for g in groups)
