"""Brute force over every (prefill candidate, decode candidate, x, y) that fits the cluster: the tests'
reference for the CP-SAT search, on the same candidates and the same exact judgement. Slow by design.
"""

from __future__ import annotations

from collections.abc import Iterator

from shardplan.rules.disagg_plan import DisaggPlan
from shardplan.solver.disagg.deploy import Choice, Pools, best_served


def choices(pools: Pools) -> Iterator[Choice]:
    n = pools.problem.cluster.num_gpus
    for i, p in enumerate(pools.prefill):
        for k, d in enumerate(pools.decode):
            for x in range(1, n // p.gpus + 1):
                for y in range(1, n // d.gpus + 1):
                    c = Choice(i, k, x, y)
                    if pools.end_gpu(c) <= n:
                        yield c


def best_throughput(pools: Pools, most_gpus: int | None = None) -> tuple[Choice, DisaggPlan] | None:
    """The deployment of the most rate units per GPU it carries within every rule (``Pools.served``), the
    fewest GPUs on a tie, then the first listed; ``most_gpus``: among those on at most that many GPUs. Judged
    in order of full rate per GPU, until no deployment left can carry enough to come first (a served rate is
    at most the full one)."""
    listed = (c for c in choices(pools) if pools.rate(c) > 0 and (most_gpus is None or pools.gpus(c) <= most_gpus))
    best = best_served(pools, sorted(listed, key=pools.per_gpu_key))
    return None if best is None else (best[0], best[1].plan)


def fewest_gpus(pools: Pools, target_units: int) -> tuple[Choice, DisaggPlan] | None:
    """The feasible deployment on the fewest GPUs whose rate reaches ``target_units``; on a tie the
    most capacity (``Pools.rate``, headroom over the target), then the most in both pools together
    (``pools_capacity``), then the first listed (``choices``' order, which ``Choice``'s own order is)."""
    for c in sorted((c for c in choices(pools) if pools.rate(c) >= target_units), key=pools.fewest_gpus_key):
        plan = pools.feasible_plan(c, target_units)
        if plan is not None:
            return c, plan
    return None


__all__ = ["best_throughput", "choices", "fewest_gpus"]
