"""Brute force over every (prefill candidate, decode candidate, x, y) that fits the cluster: the tests'
reference for the CP-SAT search, on the same candidates and the same exact judgement. Slow by design.
"""

from __future__ import annotations

from collections.abc import Iterator

from shardplan.rules.disagg_plan import DisaggPlan
from shardplan.solver.disagg.deploy import Choice, Pools, pools_capacity


def choices(pools: Pools) -> Iterator[Choice]:
    n = pools.problem.cluster.num_gpus
    for i, p in enumerate(pools.prefill):
        for k, d in enumerate(pools.decode):
            for x in range(1, n // p.gpus + 1):
                for y in range(1, n // d.gpus + 1):
                    c = Choice(i, k, x, y)
                    if pools.end_gpu(c) <= n:
                        yield c


def best_throughput(pools: Pools) -> tuple[Choice, DisaggPlan] | None:
    """The feasible deployment of the most rate units per GPU (fewest GPUs on a tie)."""
    for c in sorted((c for c in choices(pools) if pools.rate(c) > 0), key=pools.per_gpu_key):
        plan = pools.feasible_plan(c)
        if plan is not None:
            return c, plan
    return None


def fewest_gpus(pools: Pools, target_units: int) -> tuple[Choice, DisaggPlan] | None:
    """The feasible deployment on the fewest GPUs whose rate reaches ``target_units``; on a tie the
    most capacity (``Pools.rate``, headroom over the target), then the most in both pools together
    (``pools_capacity``), then the first listed (``choices``' order, which ``Choice``'s own order is)."""
    for c in sorted((c for c in choices(pools) if pools.rate(c) >= target_units),
                    key=lambda c: (pools.gpus(c), -pools.rate(c), -pools_capacity(pools, c), c)):
        plan = pools.feasible_plan(c, target_units)
        if plan is not None:
            return c, plan
    return None


__all__ = ["best_throughput", "choices", "fewest_gpus"]
