"""Build the execution DAG of a disaggregated plan (schema in ``rules/dag/disagg.py``).

Each pool's branch is the colocated builder's (``build.py``) for one worker of that pool, priced at the
chunk or batch the pool runs at (the pool's own plan), and moved onto the pool's global GPU ids: the
prefill branch of the prefill worker, the decode branch of the decode worker. One worker per pool is drawn
(``pools.ROLE.workers`` says how many there are; they are identical). ``KVTransfer`` nodes join them: one
per overlap of a prefill stage's layers with a decode stage's, after the prefill's last cache update of
those layers (and, by a sync edge, after the prefill's token: engines send a prompt's cache once its
prefill is done) and before every decode read of them. Each carries the bytes of one prompt's cache of its
layers, the link the cost model chose, and the transfer time the cost model priced (every GPU moves its
own share at once, so each range's node takes the whole transfer's time, the slowest share's).
No CP-SAT and no checking here.
"""

from __future__ import annotations

from typing import Any

import networkx as nx

from shardplan.models.derived import kv_bytes_per_sequence
from shardplan.rules.dag.disagg import DISAGG_SCHEMA, KV_TRANSFER
from shardplan.rules.disagg import Pool
from shardplan.rules.disagg_plan import DisaggPlan
from shardplan.rules.operators import Phase
from shardplan.rules.plan import Plan
from shardplan.solver.dag import build_dag
from shardplan.solver.dag.build import build

PREFIX = {"prefill": "P.", "decode": "D."}


def worker_dag(pool_plan: Plan, detail: str) -> nx.DiGraph:
    """The colocated DAG of one worker of a pool (its plan's layout at dp = 1)."""
    worker = pool_plan.model_copy(update={"layout": pool_plan.layout.model_copy(update={"dp": 1})})
    return build(worker, detail, fold=False)


def _shift(ranks: Any, first: int) -> tuple[int, ...]:
    return tuple(r + first for r in ranks)


def add_branch(g: nx.DiGraph, sub: nx.DiGraph, pool: Pool) -> None:
    """The worker's Replica node and its branch of the pool's phase, renamed and moved onto the pool's GPUs."""
    role, prefix = pool.role, PREFIX[pool.role]
    phase = Phase.PREFILL.value if role == "prefill" else Phase.DECODE.value
    keep = [n for n, d in sub.nodes(data=True) if d.get("phase") == phase or d.get("kind") == "Replica"]
    for n in keep:
        d = sub.nodes[n]
        g.add_node(prefix + n, **{**d, "ranks": _shift(d["ranks"], pool.first_gpu), "pool": role})
    for u, v, e in sub.subgraph(keep).edges(data=True):
        g.add_edge(prefix + u, prefix + v, **e)
    for n in keep:
        if sub.nodes[n].get("kind") == "Replica":
            g.add_edge("request", prefix + n, kind="data")


def add_transfers(g: nx.DiGraph, plan: DisaggPlan) -> None:
    lay, model = plan.layout, plan.problem.model
    p, d = lay.prefill, lay.decode
    kv = plan.prediction.kv
    est_us = (kv.transfer_ms + kv.relayout_ms) * 1e3
    prefill_token = next(n for n, data in g.nodes(data=True)
                         if data.get("kind") == "Token" and data.get("pool") == "prefill")
    writes: dict[int, list[str]] = {}
    reads: dict[int, list[str]] = {}
    for n, data in g.nodes(data=True):
        if data.get("kind") == "KVCacheUpdate" and data.get("pool") == "prefill":
            writes.setdefault(data["layer"], []).append(n)
        elif data.get("kind") == "KVCache" and data.get("pool") == "decode":
            reads.setdefault(data["layer"], []).append(n)
    for sd, (da, db) in enumerate(d.layout.stages):
        for sp, (pa, pb) in enumerate(p.layout.stages):
            lo, hi = max(da, pa), min(db, pb)
            if lo >= hi:
                continue
            ranks = _shift(p.layout.stage_gpus(0, sp), p.first_gpu) + _shift(d.layout.stage_gpus(0, sd), d.first_gpu)
            x = f"kv.p{sp}.d{sd}"
            g.add_node(x, kind=KV_TRANSFER, ranks=ranks, est_us=est_us, pool="transfer", layers=(lo, hi),
                       bytes=kv_bytes_per_sequence(model, plan.problem.workload.isl, range(lo, hi)), link=kv.tier,
                       from_stage=sp, to_stage=sd)
            for u in writes.get(hi - 1, []):
                g.add_edge(u, x, kind="data")
            # Engines send a prompt's cache once its prefill has finished (the cost model adds the two).
            g.add_edge(prefill_token, x, kind="sync")
            for layer in range(lo, hi):
                for v in reads.get(layer, []):
                    g.add_edge(x, v, kind="data")


def build_disagg_dag(plan: DisaggPlan, detail: str = "logical") -> nx.DiGraph:
    """The execution DAG of a disaggregated plan at ``detail`` (logical or expanded)."""
    lay = plan.layout
    g = nx.DiGraph()
    first_workers = [r for pool in lay.pools for r in pool.worker_gpus(0)]
    g.add_node("request", kind="Request", ranks=tuple(first_workers), est_us=0.0)
    pools: dict[str, Any] = {}
    for pool, pool_plan in ((lay.prefill, plan.prefill_plan), (lay.decode, plan.decode_plan)):
        sub = worker_dag(pool_plan, detail)
        add_branch(g, sub, pool)
        pools[pool.role] = {"workers": pool.workers, "first_gpu": pool.first_gpu, "graph": dict(sub.graph)}
    add_transfers(g, plan)
    model, m = plan.problem.model, plan.prediction.metrics
    g.graph.update({
        "schema": DISAGG_SCHEMA,
        "detail": detail,
        "serving": "disagg",
        "model": model.name,
        "cluster": plan.problem.cluster.describe(),
        "num_gpus": lay.num_gpus,
        "num_layers": model.num_layers,
        "pools": pools,
        "kv_tier": plan.prediction.kv.tier,
        "ttft_us": m.ttft_ms * 1e3,
        "tpot_us": m.tpot_ms * 1e3,
    })
    return g


def serving_dag(plan: Plan | DisaggPlan, detail: str = "logical") -> nx.DiGraph:
    """The DAG of a plan of either serving mode: a disaggregated plan's, or a colocated plan's own."""
    return build_disagg_dag(plan, detail) if isinstance(plan, DisaggPlan) else build_dag(plan, detail)


__all__ = ["build_disagg_dag", "serving_dag"]
