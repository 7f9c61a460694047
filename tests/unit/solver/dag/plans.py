"""Plans for the DAG tests: solved presets, and small layouts priced with ``evaluate`` on shortened
models (4 layers) so that exhaustive edge and mutation loops stay fast."""

from __future__ import annotations

from functools import cache

from shardplan.models import ModelSpec, get_model
from shardplan.rules.layout import Layout
from shardplan.rules.plan import Plan
from shardplan.solver.cli.inputs import ProblemArgs, build_problem
from shardplan.solver.cost.evaluate import evaluate
from shardplan.solver.optimise import solve


def short_model(name: str, layers: int, moe_layers: tuple[int, ...] | None = None) -> ModelSpec:
    """``name`` cut to ``layers`` layers; ``moe_layers`` picks which of them are MoE."""
    data = get_model(name).model_dump()
    data["num_layers"] = layers
    data["name"] = f"{data['name']}-{layers}L"
    if data.get("moe"):
        data["moe"]["layers"] = moe_layers if moe_layers is not None else tuple(range(layers))
    return ModelSpec.model_validate(data)


@cache
def evaluated(model: str, cluster: str, layers: int = 0, moe_layers: tuple[int, ...] | None = None,
              allow: tuple[str, ...] = (), pp: int = 1, **degrees) -> Plan:
    """A plan for a given layout, priced by the cost model (no solving)."""
    problem = build_problem(ProblemArgs(model=model, cluster=cluster, allow=allow))
    if layers:
        problem = problem.model_copy(update={"model": short_model(model, layers, moe_layers)})
    layout = Layout.even(problem.model.num_layers, pp, **degrees)
    return Plan(problem=problem, layout=layout, prediction=evaluate(problem, layout), status="evaluated")


@cache
def solved(model: str, cluster: str, objective: str = "latency") -> Plan:
    return solve(build_problem(ProblemArgs(model=model, cluster=cluster, objective=objective)))


def small_dense() -> Plan:
    """Llama-3.1-8B cut to 4 layers: 2 replicas x 2 stages x tp 2, batch 4 (2 microbatches)."""
    return evaluated("llama-3.1-8b", "8xH100", layers=4, dp=2, pp=2, tp=2, batch=4)


def small_moe() -> Plan:
    """DeepSeek-V3 cut to 4 layers (1 and 3 MoE): 2 replicas x 2 stages x (tp 2, 2 attention groups)."""
    return evaluated("deepseek-v3", "2x8xH200", layers=4, moe_layers=(1, 3), dp=2, pp=2, tp=2, attn_dp=2, batch=4)


SMALL = {"dense": small_dense, "moe": small_moe}
