"""The execution DAG of a disaggregated deployment and the rules on it (DESIGN.md "Execution DAG").

Schema ``shardplan.dag-disagg/1``: one Request; under it the prefill pool's worker (a Replica node and its
prefill branch, every node with ``pool: "prefill"``) and the decode pool's worker (a Replica and its decode
branch, ``pool: "decode"``), each branch exactly what the colocated builder makes for that worker's layout,
on the pool's global GPU ids. ``KVTransfer`` nodes (``pool: "transfer"``) carry a prompt's cache from the
prefill stage that wrote a layer range to the decode stage holding it: in from that range's last KV cache
updates on the prefill side, out to the decode side's KV cache reads of those layers, with ``layers``
[start, end), ``bytes``, ``link`` (scale_up | scale_out) and ``est_us``.

Graph attributes: ``schema``, ``detail``, ``serving`` ("disagg"), ``num_layers``, ``num_gpus``, and
``pools`` {prefill, decode}: {workers, first_gpu, graph}, where ``graph`` holds the graph attributes the
colocated builder gave that worker's DAG (its layout among them), so each pool's branch is judged, on its
own, by the colocated stage-chain rules.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from shardplan.rules.base import Diagnostic
from shardplan.rules.dag.structure import CrossStage, EndsPlaced, LayerOrder, ParallelStages, PipelineEdges
from shardplan.rules.dag.view import DagRule, DagView, _int

if TYPE_CHECKING:
    import networkx as nx

DISAGG_SCHEMA = "shardplan.dag-disagg/1"
KV_TRANSFER = "KVTransfer"
POOLS = ("prefill", "decode")
KV_READ, KV_WRITE = "KVCache", "KVCacheUpdate"


def is_disagg(dag: Any) -> bool:
    return isinstance(getattr(dag, "graph", None), dict) and dag.graph.get("schema") == DISAGG_SCHEMA


def disagg_schema_problems(dag: Any) -> list[str]:
    g = dag.graph
    out = []
    pools = g.get("pools")
    if not isinstance(pools, dict) or any(not isinstance(pools.get(p), dict) for p in POOLS):
        return ["graph attribute pools is missing or lacks prefill and decode"]
    for role in POOLS:
        pool = pools[role]
        if _int(pool.get("first_gpu"), -1) < 0 or _int(pool.get("workers"), 0) < 1:
            out.append(f"graph attribute pools.{role} needs workers >= 1 and first_gpu >= 0")
        if not isinstance(pool.get("graph"), dict):
            out.append(f"graph attribute pools.{role}.graph is missing")
    return out


def pool_of(d: dict[Any, Any]) -> Any:
    return d.get("pool")


def project(dag: Any, role: str) -> nx.DiGraph:
    """The pool's own branch as a colocated-schema graph: its nodes and edges, its ranks back on the
    worker's own ids (0 ..), its graph attributes those the colocated builder gave it."""
    pool = dag.graph["pools"][role]
    first = _int(pool.get("first_gpu"), 0)
    # Lazily on purpose: networkx costs about 0.2 s of CPU to import, and only DAG work needs it.
    import networkx as nx

    sub = nx.DiGraph()
    sub.graph.update(pool["graph"])
    for n, d in dag.nodes(data=True):
        if pool_of(d) == role or d.get("kind") == "Request":
            ranks = d.get("ranks")
            shifted = tuple(r - first for r in ranks if isinstance(r, int)) if isinstance(ranks, (list, tuple)) else ()
            sub.add_node(n, **{**d, "ranks": shifted if d.get("kind") != "Request" else ()})
    for u, v, e in dag.edges(data=True):
        if u in sub and v in sub:
            sub.add_edge(u, v, **e)
    return sub


class DisaggDagRule(DagRule):
    """A rule on a disaggregated DAG; it says nothing of a colocated one (and the colocated rules
    nothing of this one: ``check_dag`` dispatches on the schema)."""

    def check_dag(self, dag: Any) -> list[Diagnostic]:
        view = DagView.of(dag)
        if not is_disagg(view.dag) or disagg_schema_problems(view.dag):
            return []
        return list(self.violations(view))


class PoolsDisjoint(DisaggDagRule):
    id = "DAG-030"
    name = "pools-share-gpus"
    statement = (
        "the prefill branch runs on the prefill pool's GPUs and the decode branch on the decode pool's: "
        "no GPU serves both"
    )
    source = "DESIGN.md (disaggregated serving: each phase its own GPUs), 000 §1"
    example_bad = "a decode attention node on GPU 0, which runs the prefill worker"
    example_good = "prefill on GPUs 0-3, decode on GPUs 4-7, joined only by KVTransfer nodes"

    def violations(self, view: DagView) -> Iterator[Diagnostic]:
        pools = view.graph["pools"]
        own: dict[str, set[int]] = {}
        for role in POOLS:
            first = _int(pools[role].get("first_gpu"), 0)
            layout_gpus = _int(pools[role]["graph"].get("num_gpus"), 0)
            own[role] = set(range(first, first + layout_gpus))
        for n, d in view.data.items():
            role = pool_of(d)
            if role in own:
                stray = sorted(view.ranks(n) - own[role])
                if stray:
                    other = "decode" if role == "prefill" else "prefill"
                    whose = f"the {other} pool's" if stray[0] in own[other] else "no pool's"
                    yield self.at(n, f"{role} node on GPU {stray[0]}, {whose}")
            elif d.get("kind") not in ("Request", KV_TRANSFER):
                yield self.at(n, f"{d.get('kind')} node belongs to no pool (pool: {role!r})")


class TransferBeforeDecode(DisaggDagRule):
    id = "DAG-031"
    name = "decode-before-kv-transfer"
    statement = (
        "every layer's KV cache reaches the decode pool through a KVTransfer before any decode step reads it: "
        "the transfer follows the prefill's last cache update of its layers and precedes every decode read of them"
    )
    source = "DESIGN.md (a disaggregated plan: no decode step may start before the transfer), 000 §7"
    example_bad = "a decode KV cache read of layer 3 with no KVTransfer of layer 3 before it"
    example_good = "prefill L3 KV update -> KVTransfer [0, 4) -> decode L3 KV cache -> attention"

    def violations(self, view: DagView) -> Iterator[Diagnostic]:
        covered: dict[int, list[Any]] = defaultdict(list)
        for x in view.by_kind.get(KV_TRANSFER, []):
            span = view.data[x].get("layers")
            if not (isinstance(span, (list, tuple)) and len(span) == 2 and all(isinstance(v, int) for v in span)):
                yield self.at(x, "KVTransfer without a [start, end) layer range")
                continue
            for layer in range(*span):
                covered[layer].append(x)
            writes = [u for u in view.in_adj[x] if view.kind(u) == KV_WRITE and pool_of(view.data[u]) == "prefill"]
            if not any(view.layer(u) == span[1] - 1 for u in writes):
                last = span[1] - 1
                yield self.at(x, f"does not follow the prefill's cache update of layer {last}, the last it moves")
        reads = [n for n in view.by_kind.get(KV_READ, []) if pool_of(view.data[n]) == "decode"]
        for n in reads:
            layer = view.layer(n)
            if not covered.get(layer):
                yield self.at(n, f"reads layer {layer}'s cache, which no KVTransfer moves")
            elif not any(x in view.in_adj[n] for x in covered[layer]):
                yield self.at(n, f"reads layer {layer}'s cache before (or without) the KVTransfer that moves it")
        for layer in range(view.num_layers):
            if not covered.get(layer):
                yield self.at(None, f"no KVTransfer moves layer {layer}'s cache to the decode pool")


class PoolStageChain(DisaggDagRule):
    id = "DAG-032"
    name = "pool-stage-chain-broken"
    statement = (
        "each pool's branch is its own chain of stages: judged alone, on its worker's layout, it keeps the "
        "stage rules (DAG-007, DAG-008, DAG-009, DAG-024, DAG-028)"
    )
    source = "001 §3.2 (PP stages sequentially connected), 000 §4.3, DESIGN.md (each pool its own layout)"
    example_bad = "the prefill worker's stage 1 entered without stage 0's SendRecv"
    example_good = "prefill: stage 0 -> send -> stage 1; decode: stage 0 -> send -> stage 1 -> send -> stage 2"

    RULES = (ParallelStages(), CrossStage(), LayerOrder(), EndsPlaced(), PipelineEdges())

    def violations(self, view: DagView) -> Iterator[Diagnostic]:
        for role in POOLS:
            sub = DagView(project(view.dag, role))
            if sub.problems:
                yield self.at(None, f"{role} pool: its graph attributes do not describe a layout "
                                    f"({'; '.join(sub.problems[:2])})")
                continue
            for rule in self.RULES:
                for diag in rule.check_dag(sub):
                    yield self.at(diag.node, f"{role} pool, {rule.id}: {diag.message}")


DISAGG_DAG_RULES: tuple[DagRule, ...] = (PoolsDisjoint(), TransferBeforeDecode(), PoolStageChain())


def check_disagg_dag(dag: Any) -> list[Diagnostic]:
    """The schema, then every disaggregated DAG rule (errors only: none of them is advisory)."""
    problems = disagg_schema_problems(dag)
    if problems:
        return [Diagnostic("DAG-022", "error", p) for p in problems]
    view = DagView(dag)
    return [d for rule in DISAGG_DAG_RULES for d in rule.check_dag(view)]


__all__ = [
    "DISAGG_DAG_RULES", "DISAGG_SCHEMA", "KV_TRANSFER", "PoolStageChain", "PoolsDisjoint", "TransferBeforeDecode",
    "check_disagg_dag", "is_disagg", "project",
]
