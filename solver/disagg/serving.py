"""Both serving modes for one problem: the colocated plan (``solve``'s, or the fewest replicas for a
rate), the disaggregated one (``search.py``), and which is better by the objective.

- **throughput**: tokens/s per GPU; the colocated plan is ``solve``'s at the throughput objective;
- **rate** (requests/s): the fewest GPUs that sustain it within the limits. Colocated: replicas of one
  layout; a layout's GPUs per replica are fixed by its shape and stage count, so for each (shape, stage
  count) the layout of most requests/s at one replica (``optimise`` with that pair pinned) needs the
  fewest replicas, ``ceil(rate / its rate)``; the pair of fewest GPUs wins (more tokens/s per GPU on a
  tie). Disaggregated: ``search.fewest_gpus``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from shardplan.hardware.profile import Profile
from shardplan.models.errors import InfeasibleError, SolverLimitError
from shardplan.rules.disagg_plan import DisaggPlan
from shardplan.rules.plan import Plan
from shardplan.rules.problem import Objective, Problem, held_for_given, resolve_profile
from shardplan.solver.bound import pair_rates
from shardplan.solver.cost.disagg import engine_profile, forget_worker_prices
from shardplan.solver.disagg.deploy import Pools
from shardplan.solver.disagg.prune import pruned_pools
from shardplan.solver.disagg.search import DisaggResult, build_pools, fewest_gpus, max_throughput_from
from shardplan.solver.disagg.workers import prefill_priced
from shardplan.solver.enumerate import candidate_pairs
from shardplan.solver.optimise import Deadline, NoPlan, decode, optimise, solve
from shardplan.solver.oracle import Oracle
from shardplan.solver.space import SearchSpace, Shape
from shardplan.solver.tables import build_tables


@dataclass(frozen=True)
class ColocatedRate:
    plan: Plan  # dp replicas of the pair's best layout
    replica_rps: float


def throughput_problem(problem: Problem) -> Problem:
    return problem.model_copy(update={"objective": Objective.THROUGHPUT})


def requests_per_s(plan: Plan) -> float:
    return plan.prediction.metrics.output_tokens_per_s / plan.problem.workload.osl


def colocated_throughput(problem: Problem, time_limit_s: float | None = None, deadline: Deadline | None = None) -> Plan:
    """``solve`` at the throughput objective (raises InfeasibleError); ``deadline`` replaces ``time_limit_s``'s."""
    return solve(throughput_problem(problem), time_limit_s, deadline)


def one_replica_of(problem: Problem, shape: Shape, stages: int) -> Problem:
    """``problem`` at the throughput objective with one replica of (shape, stages) pinned."""
    pins = problem.pins.model_copy(update=dict(tp=shape.tp, sp=shape.sp, attn_dp=shape.attn_dp,
                                               expert_tp=shape.expert_tp, pp=stages, dp=1))
    return throughput_problem(problem).model_copy(update={"pins": pins})


def replicas_for(rate_rps: float, replica_rps: float) -> int:
    """Replicas that sustain ``rate_rps``: at least one, however small the rate (``--rate 1e-300`` made the
    quotient round to zero replicas, a plan of no GPUs)."""
    return max(1, math.ceil(rate_rps / replica_rps - 1e-12))


def fewest_gpus_bounds(problem: Problem, rate_rps: float, deadline: Deadline | None = None,
                       ) -> list[tuple[int, Shape, int]]:
    """(a lower bound on the GPUs, shape, stages) of every pair that might sustain the rate in the
    cluster, fewest first: the bound's relaxation of one replica (``bound.pair_rates``) is at least
    its requests/s, so at least ``ceil(rate / that)`` replicas are needed. Raises SolverLimitError
    when ``deadline`` passes (its grace included) before every pair is bounded."""
    check = None if deadline is None else deadline.check
    base = throughput_problem(problem)
    single = base.model_copy(update={"pins": base.pins.model_copy(update={"dp": 1})})
    tables = build_tables(single, SearchSpace(single, resolve_profile(single)), check)

    def gpus(shape: Shape, stages: int, top: float) -> int | None:
        """The GPUs of the replicas ``top`` tokens/s each would need, None past the cluster's."""
        n = replicas_for(rate_rps, top / problem.workload.osl) * stages * shape.gpus
        return n if n <= problem.cluster.num_gpus else None

    # Each pair's bound is searched only until its GPUs are known (``pair_rates``' outcome).
    bounds = pair_rates(Oracle(tables), check, gpus)
    out = []
    for shape, stages in candidate_pairs(base):
        top = bounds.get((shape, stages))
        if top is None or top <= 0:
            continue
        n = gpus(shape, stages, top)
        if n is not None:
            out.append((n, shape, stages))
    return sorted(out)


def colocated_rate(problem: Problem, rate_rps: float, deadline: Deadline) -> ColocatedRate | None:
    """The fewest GPUs of colocated replicas that sustain ``rate_rps`` (module docstring). Pairs are
    searched in the order of their bound on the GPUs, and the search stops at the first pair whose
    bound exceeds the best found: none after it can need fewer. When the deadline passes with a plan found,
    that plan is returned as ``feasible`` (not proven the fewest GPUs); before any, SolverLimitError."""
    best: tuple[tuple[int, float], ColocatedRate] | None = None
    cut = False
    for bound_gpus, shape, stages in fewest_gpus_bounds(problem, rate_rps, deadline):
        if best is not None and bound_gpus > best[0][0]:
            break
        if best is not None and deadline.passed():
            cut = True
            break
        pinned = one_replica_of(problem, shape, stages)
        try:
            found = optimise(pinned, deadline, only_pins=True)
        except SolverLimitError:
            if best is None:
                raise
            cut = True
            break
        if isinstance(found, NoPlan):
            continue
        one = decode(pinned, found.layout, "optimal" if found.proven else "feasible")
        rps = requests_per_s(one)
        gpus = replicas_for(rate_rps, rps) * one.layout.gpus_per_replica
        if gpus > problem.cluster.num_gpus:
            continue
        key = (gpus, -rps / one.layout.gpus_per_replica)
        if best is None or key < best[0]:
            best = (key, ColocatedRate(one, rps))
    if best is None:
        return None
    chosen = best[1]
    layout = chosen.plan.layout.model_copy(update={"dp": replicas_for(rate_rps, chosen.replica_rps)})
    plan = decode(throughput_problem(problem), layout, "feasible" if cut else chosen.plan.status)
    return ColocatedRate(plan, chosen.replica_rps)


@dataclass(frozen=True)
class DisaggOutcome:
    result: DisaggResult
    pools: Pools
    solve_time_s: float


def solve_disagg(problem: Problem, rate_rps: float | None, deadline: Deadline,
                 profile: Profile | None = None) -> DisaggOutcome:
    started = time.perf_counter()
    forget_worker_prices()  # its work, and so where a work limit ends it, as in a fresh process
    profile = engine_profile(problem, profile)
    if rate_rps is None:  # only the candidates that can beat the seed per GPU (prune.py), same optimum
        pools, first = pruned_pools(problem, profile, deadline)
        result = max_throughput_from(pools, first, deadline)
    else:
        # without the batch caps: for a rate they change nothing (workers.capped_workers), and cost work
        pools = build_pools(problem, profile, deadline.check, caps=False)
        result = fewest_gpus(pools, rate_rps, deadline)
    return DisaggOutcome(result, pools, time.perf_counter() - started)


def why_no_deployment(outcome: DisaggOutcome, rate_rps: float | None = None) -> InfeasibleError:
    """The rules that refused every deployment the search proposed, or why no worker qualified."""
    pools = outcome.pools
    wl = pools.problem.workload
    if not pools.prefill:
        return InfeasibleError([("MEM-001", "no prefill worker layout holds its largest chunk"),
                                ("SLA-001", f"or its {_stack_exceeds(pools)}")]
                               if wl.ttft_ms is not None else
                               [("MEM-001", "no prefill worker layout holds its largest chunk")])
    if not pools.decode:
        reasons = [("MEM-001", "no decode worker layout holds one sequence at ISL + OSL")]
        if wl.tpot_ms is not None:
            reasons.append(("SLA-002", f"or keeps --tpot-ms {wl.tpot_ms} at batch 1"))
        return InfeasibleError(reasons)
    # Nothing proposed was refused: no pair of pools fits the cluster (a single GPU holds no two pools), or
    # none reaches the rate asked.
    n = pools.problem.cluster.num_gpus
    at_rate = "" if rate_rps is None else f" and sustain {rate_rps:g} requests/s"
    fits = f"no prefill pool and decode pool fit the cluster's {n:,} GPU{'s' * (n != 1)} together{at_rate}"
    refused = sorted(pools.refused.items()) or [("DIS-001", fits), *_left_out_by_ttft(pools)]
    return InfeasibleError(refused)


def _left_out_by_ttft(pools: Pools) -> list[tuple[str, str]]:
    """SLA-001 when the TTFT limit left prefill layouts out (``workers.PrefillPriced.worker``): on a small
    cluster the narrow ones go first (their lone prompt is the slowest), and the wide ones left may not fit
    beside a decode pool, which "no pools fit the cluster" alone hides."""
    wl = pools.problem.workload
    if wl.ttft_ms is None:
        return []
    priced = prefill_priced(pools.problem, pools.profile)
    left_out = sum(1 for w in priced if w.worker(pools.problem, pools.profile) is None)
    if not left_out:
        return []
    return [("SLA-001", f"{left_out} of {len(priced)} prefill layouts are no candidates: their "
                        f"{_stack_exceeds(pools)}")]


def _stack_exceeds(pools: Pools) -> str:
    """Why a prefill layout is no candidate under the TTFT limit (``workers.PrefillPriced.worker``), in words."""
    return (f"lone prompt's prefill and the serving stack's {pools.profile.request_overhead_ms:g} ms per request "
            f"exceed --ttft-ms {pools.problem.workload.ttft_ms}{held_for_given(pools.problem, 'ttft_ms')}")


def rate_order(plan: Plan | DisaggPlan) -> tuple[int, float]:
    """``--rate``'s order of plans, the best first: fewer GPUs, then more tokens/s per GPU."""
    return plan.layout.num_gpus, -plan.prediction.metrics.output_tokens_per_s_per_gpu


def better_mode(colocated: Plan | None, disagg: DisaggPlan | None, rate_rps: float | None) -> str | None:
    """'colocated' or 'disagg': more tokens/s per GPU, or for a rate the fewer GPUs (then more tokens/s
    per GPU, ``rate_order``); colocated on a tie (one layout is the simpler deployment)."""
    if colocated is None or disagg is None:
        return "colocated" if colocated is not None else ("disagg" if disagg is not None else None)
    if rate_rps is not None:
        return "disagg" if rate_order(disagg) < rate_order(colocated) else "colocated"
    c, d = colocated.prediction.metrics, disagg.prediction.metrics
    return "disagg" if d.output_tokens_per_s_per_gpu > c.output_tokens_per_s_per_gpu else "colocated"


__all__ = [
    "ColocatedRate", "DisaggOutcome", "better_mode", "colocated_rate", "colocated_throughput", "rate_order",
    "solve_disagg", "throughput_problem", "why_no_deployment",
]
