"""The greedy baseline: replicas for hot experts, then hottest copy to the least-loaded GPU, equal shares.

1. Replica counts: every expert gets one copy; each further copy goes to the expert with the highest load
   per copy (D'Hondt apportionment), until every slot is used or every expert is on every GPU.
2. Assignment: copies, hottest first (load / copies), each to the least-loaded GPU that has a free slot
   and does not host that expert yet.
3. Shares: a copy serves 1 / copies of its expert's tokens.

It is the yardstick of the benchmark and the floor of ``place_experts``, which never returns worse.
No CP-SAT here.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from shardplan.solver.placement.fill import Pieces


def replica_counts(loads: Sequence[float], num_gpus: int, total: int) -> list[int]:
    """Copies per expert, ``total`` in all (at most ``num_gpus`` each): each next copy to the expert with the
    highest load per copy; ties to the lower expert id.

    >>> replica_counts([6.0, 3.0, 1.0], 4, 5)
    [3, 1, 1]
    """
    num_experts = len(loads)
    total = min(total, num_experts * num_gpus)
    counts = [1] * num_experts
    heap = [(-w, e) for e, w in enumerate(loads)]
    heapq.heapify(heap)
    for _ in range(total - num_experts):
        while True:
            _, e = heapq.heappop(heap)
            if counts[e] < num_gpus:
                break
        counts[e] += 1
        if counts[e] < num_gpus:
            heapq.heappush(heap, (-loads[e] / counts[e], e))
    return counts


def greedy_layer(loads: Sequence[float], num_gpus: int, slots: int) -> Pieces:
    """Per GPU, the (expert, tokens) pieces of the greedy baseline for one layer."""
    counts = replica_counts(loads, num_gpus, slots * num_gpus)
    copies = sorted(((loads[e] / counts[e], e) for e in range(len(loads)) for _ in range(counts[e])),
                    key=lambda c: (-c[0], c[1]))
    gpu_load = [0.0] * num_gpus
    hosts: list[set[int]] = [set() for _ in range(num_gpus)]
    free = [(0.0, g) for g in range(num_gpus)]  # (load, gpu) of GPUs with a free slot
    hosted_copies = [0] * len(loads)
    for _, e in copies:
        skipped = []
        while free and e in hosts[free[0][1]]:
            skipped.append(heapq.heappop(free))
        if free:
            _, g = heapq.heappop(free)
            hosts[g].add(e)
            hosted_copies[e] += 1
            gpu_load[g] += loads[e] / counts[e]
            if len(hosts[g]) < slots:
                heapq.heappush(free, (gpu_load[g], g))
        for item in skipped:
            heapq.heappush(free, item)
    # A copy that found no GPU (only possible when few experts fill many slots) is dropped; the
    # expert's tokens are then split over the copies it has.
    return [[(e, loads[e] / hosted_copies[e]) for e in sorted(hosts[g])] for g in range(num_gpus)]
