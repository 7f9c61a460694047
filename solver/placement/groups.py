"""Heuristics that split one layer's experts into groups, each spread over its own GPUs by ``fill.py``.

A group of ``k`` experts on ``m`` GPUs is balanced exactly (every GPU at ``W / m``) when
``k <= (S - 1) m + 1``, and an optimal placement is always such a split (see ``bounds.py``). So a
placement is chosen here as: which experts share a group, and how many GPUs each group gets; its max
load is ``max(W_j / m_j)``. One group is optimal when ``E <= (S - 1) G + 1``; otherwise at least
``E - (S - 1) G`` groups are needed, and these heuristics look for a good split:

- ``lpt_groups``: the hottest experts seed groups sized by their load, the other groups are single GPUs;
  the remaining experts go, hottest first, to the group whose load per GPU stays lowest (LPT). With
  ``E = S G`` this is LPT with a cardinality limit.
- ``pair_cover``: for two slots per GPU, hot experts with cold "partners" that fill their GPUs' spare
  capacity, and the other cold experts in pairs that fit one GPU.
- ``improve``: moves and swaps between the most-loaded group and the others.

No CP-SAT here; everything is deterministic (ties go to the lower index).
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

from shardplan.solver.placement.bisection import lowest_reached
from shardplan.solver.placement.fill import Pieces, fill_group

_EPS = 1e-9


@dataclass
class Group:
    """Experts that share a set of ``gpus`` GPUs and are balanced among them."""

    experts: list[int]
    gpus: int


def capacity(gpus: int, slots: int) -> int:
    """Most experts a group on ``gpus`` GPUs can balance exactly."""
    return (slots - 1) * gpus + 1 if slots > 1 else (1 if gpus else 0)


def least_gpus(size: int, slots: int) -> int:
    """Fewest GPUs a group of ``size`` experts needs for its copies."""
    return max(1, math.ceil((size - 1) / (slots - 1))) if slots > 1 else 1


def group_loads(groups: Sequence[Group], loads: Sequence[float]) -> list[float]:
    return [sum(loads[e] for e in g.experts) for g in groups]


def max_load(groups: Sequence[Group], loads: Sequence[float]) -> float:
    return max((w / g.gpus for w, g in zip(group_loads(groups, loads), groups, strict=True)), default=0.0)


def allocate(weights: Sequence[float], least: Sequence[int], total: int) -> list[int] | None:
    """GPUs per group: at least ``least``, ``total`` in all, each next GPU to the highest load per GPU
    (D'Hondt; minimises the largest ``weight / gpus``). None if ``least`` already exceeds ``total``."""
    gpus = list(least)
    spare = total - sum(gpus)
    if spare < 0:
        return None
    heap = [(-w / m, j) for j, (w, m) in enumerate(zip(weights, gpus, strict=True))]
    heapq.heapify(heap)
    for _ in range(spare if heap else 0):
        _, j = heapq.heappop(heap)
        gpus[j] += 1
        heapq.heappush(heap, (-weights[j] / gpus[j], j))
    return gpus


def reallocate(groups: list[Group], loads: Sequence[float], num_gpus: int, slots: int) -> None:
    """Give every group the GPU count that minimises the max load for its members (in place)."""
    gpus = allocate(group_loads(groups, loads), [least_gpus(len(g.experts), slots) for g in groups], num_gpus)
    if gpus is not None:
        for g, m in zip(groups, gpus, strict=True):
            g.gpus = m


def realize(groups: Sequence[Group], loads: Sequence[float], slots: int) -> Pieces:
    """Pieces per GPU: each group filled onto its own consecutive GPUs."""
    out: Pieces = []
    for g in groups:
        out.extend(fill_group([(e, loads[e]) for e in g.experts], g.gpus, slots))
    return out


def lpt_groups(loads: Sequence[float], num_gpus: int, slots: int, seeds: int, rounds: int = 3) -> list[Group] | None:
    """The fewest groups that can hold all experts; the ``seeds`` hottest start groups sized by load,
    the others are single GPUs; the rest are placed hottest first where the load per GPU stays lowest.
    Group sizes are then re-fitted to the loads they received, ``rounds`` times; the best round wins."""
    num_experts = len(loads)
    order = sorted(range(num_experts), key=lambda e: (-loads[e], e))
    count = max(1, num_experts - (slots - 1) * num_gpus)
    seeds = max(1, min(seeds, count, num_experts))
    singles = count - seeds
    shared = num_gpus - singles  # GPUs of the seeded groups
    if shared < seeds:
        return None
    sizes = allocate([loads[e] for e in order[:seeds]], [1] * seeds, shared)
    if sizes is None:  # not with shared >= seeds, checked above
        return None
    best: list[Group] | None = None
    best_max = math.inf
    for _ in range(rounds):
        groups = _lpt_fill(loads, order, seeds, sizes + [1] * singles, slots)
        if groups is None:
            break
        reallocate(groups, loads, num_gpus, slots)
        value = max_load(groups, loads)
        if value < best_max - _EPS * value:
            best, best_max = groups, value
        sized = allocate(group_loads(groups[:seeds], loads),
                         [least_gpus(len(g.experts), slots) for g in groups[:seeds]], shared)
        if sized is None or sized == sizes:
            break
        sizes = sized
    return best


def _lpt_fill(
    loads: Sequence[float], order: Sequence[int], seeds: int, sizes: Sequence[int], slots: int
) -> list[Group] | None:
    # sizes: the seeded groups' GPUs first, then the single groups'
    seeded = [Group([e], m) for e, m in zip(order[:seeds], sizes[:seeds], strict=True)]
    groups = seeded + [Group([], m) for m in sizes[seeds:]]
    weight = [loads[g.experts[0]] if g.experts else 0.0 for g in groups]
    # open[(load per GPU, index)]: groups that can still take an expert
    open_ = [(weight[j] / g.gpus, j) for j, g in enumerate(groups) if len(g.experts) < capacity(g.gpus, slots)]
    heapq.heapify(open_)
    for e in order[seeds:]:
        # The lowest load per GPU after adding e is among the few lowest now (group sizes differ).
        tried = [heapq.heappop(open_) for _ in range(min(6, len(open_)))]
        if not tried:
            return None
        j = min(tried, key=lambda t: ((weight[t[1]] + loads[e]) / groups[t[1]].gpus, t[1]))[1]
        for t in tried:
            if t[1] != j:
                heapq.heappush(open_, t)
        groups[j].experts.append(e)
        weight[j] += loads[e]
        if len(groups[j].experts) < capacity(groups[j].gpus, slots):
            heapq.heappush(open_, (weight[j] / groups[j].gpus, j))
    return [g for g in groups if g.experts]


def best_lpt_groups(loads: Sequence[float], num_gpus: int, slots: int, reference: float) -> list[Group] | None:
    """``lpt_groups`` for a few seed counts around the number of experts hotter than ``reference``."""
    hot = sum(1 for w in loads if w > reference)
    count = max(1, len(loads) - (slots - 1) * num_gpus)
    candidates = sorted({1, count, *(max(1, hot + d) for d in (-2, -1, 0, 1, 2)), max(1, 2 * hot)})
    best, best_max = None, math.inf
    for seeds in candidates:
        groups = lpt_groups(loads, num_gpus, slots, seeds)
        if groups is not None:
            value = max_load(groups, loads)
            if value < best_max - _EPS * value:
                best, best_max = groups, value
    return best


def improve(groups: list[Group], loads: Sequence[float], slots: int) -> None:
    """Lower the max load by moving or swapping one expert between the most-loaded group and another
    (first improvement, groups keep their GPU counts; in place; at most 4 moves per expert)."""
    weight = group_loads(groups, loads)
    for _ in range(4 * len(loads)):
        top = max(range(len(groups)), key=lambda j: (weight[j] / groups[j].gpus, -j))
        if not _improve_once(groups, weight, top, loads, slots):
            return


def _improve_once(groups: list[Group], weight: list[float], top: int, loads: Sequence[float], slots: int) -> bool:
    high = groups[top]
    goal = weight[top] / high.gpus * (1 - _EPS)  # both groups must end below this load per GPU
    order = sorted(range(len(groups)), key=lambda j: (weight[j] / groups[j].gpus, j))
    for j in order:
        if j == top:
            continue
        other = groups[j]
        # A move of `delta` tokens from `high` to `other` helps iff low < delta < up.
        low, up = weight[top] - goal * high.gpus, goal * other.gpus - weight[j]
        if up <= max(low, 0.0):
            continue
        room = len(other.experts) < capacity(other.gpus, slots) and len(high.experts) > 1
        # Swaps: the other group's expert whose load leaves the two groups closest to level.
        level = (weight[top] * other.gpus - weight[j] * high.gpus) / (high.gpus + other.gpus)
        ranked = sorted((loads[f], b) for b, f in enumerate(other.experts))
        keys = [w for w, _ in ranked]
        for a, e in enumerate(high.experts):
            if room and low < loads[e] < up:
                high.experts.pop(a)
                other.experts.append(e)
                weight[top] -= loads[e]
                weight[j] += loads[e]
                return True
            first = bisect.bisect_right(keys, loads[e] - up)  # f with loads[e] - f < up
            last = bisect.bisect_left(keys, loads[e] - max(low, 0.0))  # and loads[e] - f > max(low, 0)
            if first < last:
                near = bisect.bisect_left(keys, loads[e] - level, first, last)
                best = min({max(first, near - 1), min(last - 1, near)},
                           key=lambda i: (abs(loads[e] - keys[i] - level), ranked[i][1]))
                b = ranked[best][1]
                delta = loads[e] - loads[other.experts[b]]
                high.experts[a], other.experts[b] = other.experts[b], e
                weight[top] -= delta
                weight[j] += delta
                return True
    return False


def pair_cover(loads: Sequence[float], num_gpus: int, lo: float, hi: float, steps: int = 24) -> list[Group] | None:
    """Two slots per GPU: the lowest target (bisection in ``[lo, hi]``) for which hot experts with cold
    partners plus cold pairs fit ``num_gpus`` GPUs. Returns the groups found, sized to all GPUs."""
    found = lowest_reached(lambda target: _pair_cover_at(loads, num_gpus, target), lo, hi, steps, 1e-5)
    if found is not None:
        reallocate(found, loads, num_gpus, 2)
    return found


def _pair_cover_at(loads: Sequence[float], num_gpus: int, target: float) -> list[Group] | None:
    u = [w / target for w in loads]
    cold = sorted((e for e in range(len(loads)) if u[e] <= 1 + _EPS), key=lambda e: (u[e], e))
    # Partners only matter with hot experts; then try sending the 0, 1, ... largest cold ones (those
    # above half a GPU, which pair badly) to the hot experts.
    hot = len(cold) < len(loads)
    halves = sum(1 for e in cold if u[e] > 0.5) if hot else 0
    for big in range(halves + 1):
        groups, used = _pair_cover_try(u, cold, big)
        if used <= num_gpus:
            return groups
    return None


def _pair_cover_try(u: list[float], cold: list[int], big: int) -> tuple[list[Group], int]:
    """Groups and GPUs used when the ``big`` largest cold experts become partners of hot experts."""
    hot = sorted((e for e in range(len(u)) if u[e] > 1 + _EPS), key=lambda e: (-u[e], e))
    n = len(cold)
    if not hot:
        big = 0
    free = cold[: n - big]  # ascending; partners are taken from the small end
    need = {h: u[h] for h in hot}  # slack still needed: partners' sum of (1 - u) must reach u_h
    partners: dict[int, list[int]] = {h: [] for h in hot}
    if hot:
        heap = [(-need[h], h) for h in hot]
        heapq.heapify(heap)
        for c in reversed(cold[n - big:]):
            _, h = heapq.heappop(heap)
            partners[h].append(c)
            need[h] -= 1 - u[c]
            heapq.heappush(heap, (-need[h], h))
    taken = [False] * len(free)
    lo = 0
    for h in hot:
        while need[h] > _EPS and lo < len(free):
            pick = lo
            if 1 - u[free[lo]] >= need[h]:
                # best fit: the item with the least slack that still covers the need
                k = _last_at_most(u, free, 1 - need[h], lo)
                while k > lo and taken[k]:
                    k -= 1
                pick = k
            taken[pick] = True
            partners[h].append(free[pick])
            need[h] -= 1 - u[free[pick]]
            while lo < len(free) and taken[lo]:
                lo += 1
    groups: list[Group] = []
    used = 0
    for h in hot:
        members = [h] + partners[h]
        gpus = max(len(partners[h]), math.ceil(sum(u[e] for e in members) - _EPS), 1)
        groups.append(Group(members, gpus))
        used += gpus
    rest = [c for c, t in zip(free, taken, strict=True) if not t]
    i, j, single = 0, len(rest) - 1, []
    while i < j:
        if u[rest[i]] + u[rest[j]] <= 1 + _EPS:
            groups.append(Group([rest[i], rest[j]], 1))
            used += 1
            i += 1
        else:
            single.append(rest[j])
        j -= 1
    if i == j:
        single.append(rest[i])
    if single:  # one tree saves a GPU when its load allows
        gpus = max(1, len(single) - 1, math.ceil(sum(u[e] for e in single) - _EPS))
        groups.append(Group(single, gpus))
        used += gpus
    return groups, used


def _last_at_most(u: list[float], items: list[int], limit: float, start: int) -> int:
    lo, hi = start, len(items) - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if u[items[mid]] <= limit + _EPS:
            lo = mid
        else:
            hi = mid - 1
    return lo
