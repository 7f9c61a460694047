"""The JSON shape of a disaggregated plan (DESIGN.md "Command line": ``prefill`` and ``decode`` objects,
each with its workers, degrees, stages and memory, the deployment's metrics at its concurrency, and the
``engine`` and ``profile`` that priced it).

Values are rounded as in ``plan_json`` so output bytes are stable.
"""

from __future__ import annotations

from typing import Any

from shardplan.rules.disagg import Pool
from shardplan.rules.disagg_plan import DisaggPlan
from shardplan.rules.plan import Plan
from shardplan.rules.problem import measured_error
from shardplan.solver.outputs.plan_json import (
    _num,
    degrees,
    limits_at_dict,
    memory_dict,
    metrics_dict,
    notes_dict,
)


def pool_dict(plan: DisaggPlan, pool: Pool, pool_plan: Plan, role: dict[str, Any]) -> dict[str, Any]:
    lay, pred = pool.layout, pool_plan.prediction
    return {
        "workers": pool.workers,
        "gpus_per_worker": pool.gpus_per_worker,
        "max_batch": pool.max_batch,
        "gpus": [pool.gpus.start, pool.gpus.stop - 1],
        "degrees": {**degrees(plan.problem, lay), "dp": 1},
        "stages": [
            {"index": s, "layers": list(lay.stages[s]), "gpus": [g + pool.first_gpu for g in lay.stage_gpus(0, s)]}
            for s in range(lay.pp)
        ],
        **{k: _num(v) for k, v in role.items()},
        "memory": memory_dict(pred.worst_memory),
        "memory_per_stage": [memory_dict(m) for m in pred.memory],
        "fits": pred.fits,
    }


def disagg_dict(plan: DisaggPlan, *, status: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    problem, layout, pred = plan.problem, plan.layout, plan.prediction
    m = pred.metrics
    out: dict[str, Any] = {
        "status": status,
        "serving": "disagg",
        "objective": problem.objective.value,
        "model": problem.model.name,
        "cluster": problem.cluster.describe(),
        "workload": problem.workload.model_dump(),
        "num_gpus": layout.num_gpus,
        "prefill": pool_dict(plan, layout.prefill, plan.prefill_plan, pred.prefill.model_dump()),
        "decode": pool_dict(plan, layout.decode, plan.decode_plan, pred.decode.model_dump()),
        "kv_transfer": {k: _num(v) for k, v in pred.kv.model_dump().items()},
        "metrics": {
            **metrics_dict(m),
            "requests_per_s": _num(pred.throughput_rps),
            "request_overhead_ms": _num(pred.request_overhead_ms),
            "waiting_ms": _num(pred.waiting_ms),
            "admission_ms": _num(pred.admission_ms),
            "bottleneck": pred.bottleneck,
        },
        "fits": plan.prefill_plan.prediction.fits and plan.decode_plan.prediction.fits,
        "engine": problem.engine,
        "profile": pred.profile,
        "measured_error": measured_error(problem, "disagg", layout.concurrency, pred.metrics.ttft_ms,
                                         pred.metrics.tpot_ms),
        "solve_time_s": None,  # what a search sets through ``extra``; evaluate's and enumerate's rows solve nothing
        **limits_at_dict(problem),
        **notes_dict(problem),
    }
    if extra:
        out.update(extra)
    return out


__all__ = ["disagg_dict", "pool_dict"]
