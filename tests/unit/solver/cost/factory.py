"""Tiny problems for the cost-model tests: one model, one cluster, one layout per call."""

from __future__ import annotations

from shardplan.hardware import ClusterSpec, GPUSpec, get_gpu, parse_cluster
from shardplan.models import DType, ModelSpec, get_model
from shardplan.rules.layout import Layout
from shardplan.rules.problem import Objective, Problem, Workload

GIB = 2**30


def model(alias: str = "llama-3.1-70b", weights: str | None = None, kv: str | None = None) -> ModelSpec:
    spec = get_model(alias)
    return spec.with_dtypes(DType(weights) if weights else None, DType(kv) if kv else None)


def problem(
    alias: str = "llama-3.1-70b",
    cluster: str | ClusterSpec = "8xH100",
    isl: int = 1024,
    osl: int = 256,
    weights: str | None = None,
    kv: str | None = None,
    mem_cap_gib: float | None = None,
    objective: Objective = Objective.LATENCY,
    profile: str | None = None,
) -> Problem:
    return Problem(
        model=model(alias, weights, kv),
        cluster=parse_cluster(cluster) if isinstance(cluster, str) else cluster,
        workload=Workload(isl=isl, osl=osl),
        objective=objective,
        mem_cap_gib=mem_cap_gib,
        profile=profile,
    )


def layout(p: Problem, tp: int = 1, pp: int = 1, batch: int = 1, **degrees) -> Layout:
    return Layout.even(p.model.num_layers, pp, tp=tp, batch=batch, **degrees)


def h100_with(**update) -> GPUSpec:
    """The H100 preset with some datasheet numbers changed (same name: same profile)."""
    return get_gpu("h100").model_copy(update=update)


def cluster_of(gpu: GPUSpec, nodes: int = 1, per_node: int | None = None, **links: float) -> ClusterSpec:
    return ClusterSpec.from_gpu(gpu, nodes, per_node, **links)
