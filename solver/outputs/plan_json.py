"""The JSON shape of a plan (DESIGN.md "Command line"): one dict, the same for solve and evaluate.

Keys are fixed by the contract scripts rely on; values are rounded so output bytes are stable.
"""

from __future__ import annotations

import math
from typing import Any

from shardplan.rules.layout import Layout
from shardplan.rules.prediction import MemoryReport, Metrics, Prediction
from shardplan.rules.problem import Problem, measured_error, problem_notes
from shardplan.solver.placement.plan import PlanPlacement


def degrees(problem: Problem, layout: Layout) -> dict[str, int]:
    """dp, pp, tp, sp, ep (1 for a dense model), and the inner attn_dp and expert_tp."""
    d = layout.degrees()
    if not problem.model.is_moe:
        d["ep"] = 1
    return d


def memory_dict(m: MemoryReport) -> dict[str, float]:
    """One GPU's memory in GiB; ``overhead`` is runtime plus communication buffers."""
    return {
        "stage": m.stage,
        "weights": _r(m.weights_gib),
        "kv_cache": _r(m.kv_cache_gib),
        "activations": _r(m.activations_gib),
        "overhead": _r(m.runtime_gib + m.comm_buffers_gib),
        "total": _r(m.total_gib),
        "capacity": _r(m.capacity_gib),
        "limit": _r(m.limit_gib),
        "free": _r(m.limit_gib - m.total_gib),
    }


def metrics_dict(m: Metrics) -> dict[str, Any]:
    """The contract's metrics; an unbounded rate (no decode step to divide by) as null."""
    return {
        "ttft_ms": _r(m.ttft_ms),
        "tpot_ms": _r(m.tpot_ms),
        "decode_step_ms": _r(m.decode_step_ms),
        "e2e_ms": _r(m.e2e_ms),
        "output_tokens_per_s": _r(m.output_tokens_per_s),
        "output_tokens_per_s_per_gpu": _r(m.output_tokens_per_s_per_gpu),
        "output_tokens_per_s_per_user": _num(m.output_tokens_per_s_per_user),
        "batch": m.batch,
    }


def experts_dict(experts: PlanPlacement | dict[str, Any] | None) -> dict[str, Any] | None:
    """The plan's expert placement in compact form (``PlanPlacement.summary``): per stage its MoE
    layers, slots per GPU, max/mean load and lower bound per layer, status. None without one."""
    if experts is None or isinstance(experts, dict):
        return experts
    return experts.summary()


def plan_dict(
    problem: Problem,
    layout: Layout,
    prediction: Prediction,
    *,
    status: str,
    solve_time_s: float | None = None,
    experts: PlanPlacement | dict[str, Any] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    worst = prediction.worst_memory
    out: dict[str, Any] = {
        "status": status,
        "objective": problem.objective.value,
        "model": problem.model.name,
        "cluster": problem.cluster.describe(),
        "workload": problem.workload.model_dump(),
        "degrees": degrees(problem, layout),
        "num_gpus": layout.num_gpus,
        "stages": [
            {"index": s, "layers": list(layout.stages[s]), "gpus": list(layout.stage_gpus(0, s))}
            for s in range(layout.pp)
        ],
        "experts": experts_dict(experts),
        "metrics": metrics_dict(prediction.metrics),
        "memory": memory_dict(worst),
        "memory_per_stage": [memory_dict(r) for r in prediction.memory],
        "fits": prediction.fits,
        "short_gib": _r(max(r.short_gib for r in prediction.memory)),
        "breakdown": [s.model_dump() for s in prediction.stages],
        "engine": problem.engine,
        "profile": prediction.profile,
        "measured_error": measured_error(problem, "colocated", layout.batch, prediction.metrics.ttft_ms,
                                         prediction.metrics.tpot_ms),
        "microbatches": prediction.microbatches,
        "solve_time_s": None if solve_time_s is None else round(solve_time_s, 3),
        **limits_at_dict(problem),
        **notes_dict(problem),
    }
    if extra:
        out.update(extra)
    return out


def limits_at_dict(problem: Problem) -> dict[str, Any]:
    """``limits_at``, where the plan was held to tighter limits than the user's so that it meets theirs at its
    engine's median measured error (``solve --limits-at median-error``, ``solver/limits_at.py``): the limits given,
    those held (the plan's ``workload`` carries the same), the rounds that tightened them and, where the time or
    work limit stopped the rounds before the plan met the limits given, why (``stopped``), and where a band's plan
    beat the rounds', the engine batch per attention group it is capped at (``batch_cap``). The key only then,
    so a plan held at the user's limits reads as before."""
    given = problem.limits_given
    if given is None:
        return {}
    wl = problem.workload
    return {"limits_at": {"basis": "median-error", "given": {"ttft_ms": given.ttft_ms, "tpot_ms": given.tpot_ms},
                          "held": {"ttft_ms": wl.ttft_ms, "tpot_ms": wl.tpot_ms}, "rounds": given.rounds,
                          "stopped": given.stopped, "batch_cap": given.batch_cap}}


def notes_dict(problem: Problem) -> dict[str, list[str]]:
    """``notes``: what the plan's reader should know of how it was priced (``rules.problem.problem_notes``);
    the key only when there is one, so a plan without any reads as before."""
    notes = problem_notes(problem)
    return {"notes": notes} if notes else {}


def _r(x: float) -> float:
    return round(float(x), 4)


def _num(value: Any) -> Any:
    """A float rounded as ``_r``; an unbounded one as null, which JSON can carry (a finite one is
    printed exactly as ``_r`` prints it, so colocated plans read as before)."""
    if not isinstance(value, float):
        return value
    return _r(value) if math.isfinite(value) else None
