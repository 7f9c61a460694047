"""Brute-force optimum of one tiny layer: every set of copies, each with its best shares.

For fixed copies, the least max load is ``max over expert sets A of w(A) / |GPUs hosting A|`` (Hall's
condition for the fractional assignment, i.e. max-flow/min-cut), so no LP is needed. GPUs are
interchangeable, so copy sets are enumerated as multisets of per-GPU expert subsets.
"""

from __future__ import annotations

from itertools import combinations, combinations_with_replacement


def optimum(loads: list[float], num_gpus: int, slots: int) -> float:
    n = len(loads)
    subsets = [frozenset(c) for k in range(min(slots, n) + 1) for c in combinations(range(n), k)]
    expert_sets = [(mask, sum(loads[e] for e in range(n) if mask >> e & 1)) for mask in range(1, 1 << n)]
    best = float("inf")
    for gpus in combinations_with_replacement(subsets, num_gpus):
        hosted = [0] * n  # hosted[e]: bitmask of GPUs hosting e
        for g, subset in enumerate(gpus):
            for e in subset:
                hosted[e] |= 1 << g
        if not all(hosted):
            continue
        worst = 0.0
        for mask, weight in expert_sets:
            reach = 0
            for e in range(n):
                if mask >> e & 1:
                    reach |= hosted[e]
            worst = max(worst, weight / bin(reach).count("1"))
            if worst >= best:
                break
        best = min(best, worst)
    return best
