"""Repair an execution DAG where exactly one repair is safe (002, "validation and auto-fix").

Three kinds of damage have one obvious repair, because the graph itself says what is missing:
- a collective after shards (DAG-010): every shard names its collective in ``rejoin`` (and its
  cost key in ``rejoin_op``). A missing edge into an existing collective is restored; a missing
  collective is recreated between the shards and what they fed directly, with its kind, ranks and
  cost from the graph's layout and ``op_us`` table;
- a KV cache edge (DAG-017, DAG-018): a decode attention's cache read, the previous-token
  dependency of a cache, an attention's cache update, or the token's wait for it;
- a pipeline edge (DAG-028, DAG-008): a SendRecv's input from the end of its stage, its output to
  the next Stage node, a missing SendRecv between them, or a SendRecv edge of the wrong kind.
Anything else (a cycle, parallel stages, experts replicated, ranks off the plan...) has no single
safe repair: ``fix_dag`` reports it, unchanged, in ``remaining``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from shardplan.rules.base import Diagnostic
from shardplan.rules.dag.catalog import (
    COLLECTIVE,
    CONTROL,
    STATE,
    DagView,
    NodeKind,
    graph_schema_problems,
    is_sharded,
)
from shardplan.rules.dag.check import check_dag
from shardplan.rules.dag.disagg import is_disagg
from shardplan.rules.operators import Op, Phase

FIXABLE = frozenset({"DAG-008", "DAG-010", "DAG-017", "DAG-018", "DAG-028"})
SCOPE = ("replica", "phase", "stage", "layer", "layer_kind")


@dataclass(frozen=True)
class Change:
    """One repair: the rule it answers, what was done, the nodes it touched."""

    rule: str
    action: str
    nodes: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.rule}: {self.action}"

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "action": self.action, "nodes": list(self.nodes)}


def fix_dag(dag: Any, max_rounds: int = 4) -> tuple[Any, list[Change], list[Diagnostic]]:
    """(repaired copy of ``dag``, the changes made, the violations that remain).

    The input is not modified. A valid DAG comes back equal, with no changes.
    """
    g = dag.copy()
    changes: list[Change] = []
    # A disaggregated DAG has no repairs yet: its violations come back as they are.
    if is_disagg(g) or graph_schema_problems(g):
        return g, changes, check_dag(g)
    for _ in range(max_rounds):
        if not any(d.rule in FIXABLE for d in check_dag(g)):
            break
        made = _fix_collectives(g) + _fix_kv(g) + _fix_pipeline(g)
        if not made:
            break
        changes.extend(made)
    return g, changes, check_dag(g)


# --- collectives after shards (DAG-010) ---------------------------------------------------------
def collective_kind(op: str, phase: str, attn_dp: int) -> NodeKind | None:
    """The collective that prices cost key ``op`` (``rules/operators.py``, priced in solver/cost/operators.py)."""
    if op == Op.ATTN_SP:
        return NodeKind.ALL_REDUCE if phase == Phase.DECODE else NodeKind.ALL_GATHER
    if op in (Op.ATTN_ALLREDUCE, Op.FFN_ALLREDUCE, Op.MOE_EXPERT_ALLREDUCE):
        return NodeKind.ALL_REDUCE
    if op == Op.LM_HEAD_GATHER:
        return NodeKind.ALL_GATHER
    if op == Op.MOE_COMBINE:
        return NodeKind.ALL_REDUCE if attn_dp == 1 else NodeKind.ALL_TO_ALL
    return None


def _fix_collectives(g: Any) -> list[Change]:
    view = DagView(g)
    out: list[Change] = []
    siblings: dict[str, list[Any]] = defaultdict(list)  # siblings[collective id]: shards it rejoins
    for n, d in view.data.items():
        if not isinstance(d.get("rejoin"), str) or d.get("kind") in STATE | CONTROL:
            continue
        if d.get("kind") not in COLLECTIVE and d.get("kind") != NodeKind.EXPERT and not is_sharded(d):
            continue
        siblings[d["rejoin"]].append(n)
    for coll, shards in siblings.items():
        if coll in g:
            for n in shards:
                if coll not in g.succ[n]:
                    stray = _stray(g, n)
                    for v in stray:
                        if v in g.succ[coll]:
                            g.remove_edge(n, v)
                    g.add_edge(n, coll, kind="data")
                    out.append(Change("DAG-010", f"restored the edge {n} -> {coll}", (n, coll)))
            continue
        made = _recreate(g, view, coll, shards)
        if made:
            out.append(made)
    return out


def _stray(g: Any, n: Any) -> list[Any]:
    """Data successors of a node that lost its collective: where its collective's output went
    (anything but its KV cache update and the collective it names)."""
    named = g.nodes[n].get("rejoin")
    return [
        v for v, e in g.succ[n].items()
        if e.get("kind") != "sync" and g.nodes[v].get("kind") != NodeKind.KV_CACHE_UPDATE and v != named
    ]


def _recreate(g: Any, view: DagView, coll: str, shards: list[Any]) -> Change | None:
    first = g.nodes[shards[0]]
    op = first.get("rejoin_op")
    layout = view.layout
    kind = collective_kind(op, first.get("phase"), layout.attn_dp) if isinstance(op, str) and layout else None
    targets = list(dict.fromkeys(v for n in shards for v in _stray(g, n)))
    if kind is None or not targets:
        return None  # nothing says what the collective was or where its result went
    table = (g.graph.get("op_us") or {}).get(first.get("phase"), {})
    if op == Op.LM_HEAD_GATHER:
        est = (table.get("last") or {}).get(op, 0.0)
    else:
        est = ((table.get("layers") or {}).get(first.get("layer_kind")) or {}).get(op, 0.0)
    ranks = tuple(sorted({r for n in shards for r in g.nodes[n].get("ranks", ())}))
    attrs = {k: first[k] for k in SCOPE if k in first}
    groups = {g.nodes[n].get("group") for n in shards}
    if len(groups) == 1 and None not in groups:
        attrs["group"] = groups.pop()
    # The graph holds plain strings, as a file read back does.
    g.add_node(coll, kind=kind.value, ranks=ranks, est_us=est, op=op, group_size=len(ranks), repaired=True, **attrs)
    kinds: dict[Any, str] = {}  # kinds[target]: the edge kind a shard had into it
    for n in shards:
        for v in targets:
            if g.has_edge(n, v):
                kinds.setdefault(v, g.edges[n, v].get("kind", "data"))
                g.remove_edge(n, v)
        g.add_edge(n, coll, kind="data")
    for v in targets:
        g.add_edge(coll, v, kind=kinds.get(v, "data"))
    return Change("DAG-010", f"inserted the missing {kind} {coll} ({op}) after {len(shards)} shards", (coll, *shards))


# --- KV cache edges (DAG-017, DAG-018) ----------------------------------------------------------
def _fix_kv(g: Any) -> list[Change]:
    view = DagView(g)
    out: list[Change] = []
    heads: dict[tuple[Any, ...], dict[str, list[Any]]] = defaultdict(lambda: defaultdict(list))
    for kind in (NodeKind.PREV_TOKEN, NodeKind.TOKEN):
        for n in view.by_kind.get(kind, []):
            heads[view.branch_of(n)][kind].append(n)

    def only(branch: tuple[Any, ...], kind: str) -> str | None:
        found = heads[branch][kind]
        return found[0] if len(found) == 1 else None

    def key(n: Any) -> tuple[Any, ...]:
        d = view.data[n]
        return d.get("replica"), d.get("phase"), d.get("layer"), tuple(sorted(view.ranks(n)))

    caches = defaultdict(list)
    updates = defaultdict(list)
    for n in view.by_kind.get(NodeKind.KV_CACHE, []):
        caches[key(n)].append(n)
    for n in view.by_kind.get(NodeKind.KV_CACHE_UPDATE, []):
        updates[key(n)].append(n)
    for a in view.by_kind.get(NodeKind.ATTENTION, []):
        d = view.data[a]
        branch = view.branch_of(a)
        if d.get("phase") == Phase.DECODE and not any(view.kind(u) == NodeKind.KV_CACHE for u in g.pred[a]):
            free = [k for k in caches[key(a)] if not any(view.kind(v) == NodeKind.ATTENTION for v in g.succ[k])]
            prev = only(branch, NodeKind.PREV_TOKEN)
            if free:
                g.add_edge(free[0], a, kind="data")
                out.append(Change("DAG-017", f"restored the KV cache read {free[0]} -> {a}", (free[0], a)))
            elif prev is not None:
                kv = _new_id(g, _sibling_id(a, ".kv"))
                g.add_node(kv, **_state_attrs(d, NodeKind.KV_CACHE))
                g.add_edge(prev, kv, kind="sync")
                g.add_edge(kv, a, kind="data")
                out.append(Change("DAG-017", f"inserted the KV cache read {kv} before {a}", (kv, a)))
        if not any(view.kind(v) == NodeKind.KV_CACHE_UPDATE for v in g.succ[a]):
            free = [k for k in updates[key(a)] if not any(view.kind(u) == NodeKind.ATTENTION for u in g.pred[k])]
            token = only(branch, NodeKind.TOKEN)
            if free:
                g.add_edge(a, free[0], kind="data")
                out.append(Change("DAG-018", f"restored the KV cache update {a} -> {free[0]}", (a, free[0])))
            elif token is not None:
                kvu = _new_id(g, _sibling_id(a, ".kvu"))
                g.add_node(kvu, **_state_attrs(d, NodeKind.KV_CACHE_UPDATE))
                g.add_edge(a, kvu, kind="data")
                g.add_edge(kvu, token, kind="sync")
                out.append(Change("DAG-018", f"inserted the KV cache update {kvu} after {a}", (a, kvu)))
    for n in view.by_kind.get(NodeKind.KV_CACHE, []):
        prev = only(view.branch_of(n), NodeKind.PREV_TOKEN)
        if prev is not None and not any(view.kind(u) == NodeKind.PREV_TOKEN for u in g.pred[n]):
            g.add_edge(prev, n, kind="sync")
            out.append(Change("DAG-017", f"restored the previous-token dependency {prev} -> {n}", (prev, n)))
    for n in view.by_kind.get(NodeKind.KV_CACHE_UPDATE, []):
        token = only(view.branch_of(n), NodeKind.TOKEN)
        if token is not None and not any(view.kind(v) == NodeKind.TOKEN for v in g.succ[n]):
            g.add_edge(n, token, kind="sync")
            out.append(Change("DAG-018", f"restored the token's wait {n} -> {token}", (n, token)))
    return out


def _sibling_id(attention: str, part: str) -> str:
    return attention.replace(".attn", part, 1) if ".attn" in attention else attention + part


def _new_id(g: Any, nid: str) -> str:
    while nid in g:
        nid += "'"
    return nid


def _state_attrs(d: dict[str, Any], kind: NodeKind) -> dict[str, Any]:
    keep = (*SCOPE, "group", "sp_rank", "tp_rank", "tp", "sp")
    return {
        "kind": kind.value,
        "ranks": tuple(d.get("ranks", ())),
        "est_us": 0.0,
        "repaired": True,
        **{k: d[k] for k in keep if k in d},
    }


# --- pipeline edges (DAG-028, DAG-008) ----------------------------------------------------------
def _fix_pipeline(g: Any) -> list[Change]:
    view = DagView(g)
    out: list[Change] = []
    lay = view.layout
    if lay is None or lay.pp == 1:
        return out
    for (r, phase), nodes in view.branches.items():
        stage_node, sends = view.stages_and_sends(nodes)
        for s in range(lay.pp - 1):
            nxt = stage_node.get(s + 1, [])
            exits = _stage_exits(g, view, nodes, s, lay.stages[s][1] - 1)
            if not sends.get(s):
                if len(nxt) == 1 and not g.pred[nxt[0]] and exits and len(stage_node.get(s, [])) == 1:
                    x = _new_id(g, f"r{r}.{phase}.s{s}.send")
                    ranks = tuple(view.data[stage_node[s][0]]["ranks"]) + tuple(view.data[nxt[0]]["ranks"])
                    send_us = ((g.graph.get("op_us") or {}).get(phase, {}).get("send") or [])
                    est = send_us[s] if s < len(send_us) else 0.0
                    g.add_node(
                        x,
                        kind=NodeKind.SEND_RECV.value,
                        ranks=ranks,
                        est_us=est,
                        replica=r,
                        phase=phase,
                        stage=s,
                        to_stage=s + 1,
                        op=Op.SEND_RECV.value,
                        repaired=True,
                    )
                    for u in exits:
                        g.add_edge(u, x, kind="pipeline")
                    g.add_edge(x, nxt[0], kind="pipeline")
                    out.append(
                        Change("DAG-028", f"inserted the missing SendRecv {x} from stage {s} to {s + 1}", (x, *exits))
                    )
                continue
            for x in sends[s]:
                if not any(view.stage(u) == s for u in g.pred[x]) and exits:
                    for u in exits:
                        g.add_edge(u, x, kind="pipeline")
                    out.append(
                        Change("DAG-028", f"restored the pipeline edges into {x} from " + ", ".join(exits), (x, *exits))
                    )
                if len(nxt) == 1 and not any(v == nxt[0] for v in g.succ[x]) and not g.pred[nxt[0]]:
                    g.add_edge(x, nxt[0], kind="pipeline")
                    out.append(Change("DAG-028", f"restored the pipeline edge {x} -> {nxt[0]}", (x, nxt[0])))
                for u in list(g.pred[x]):
                    if view.stage(u) == s and g.edges[u, x].get("kind") != "pipeline":
                        g.edges[u, x]["kind"] = "pipeline"
                        out.append(Change("DAG-008", f"relabelled {u} -> {x} as a pipeline edge", (u, x)))
                for v in list(g.succ[x]):
                    if (
                        view.kind(v) == NodeKind.STAGE
                        and view.stage(v) == s + 1
                        and g.edges[x, v].get("kind") != "pipeline"
                    ):
                        g.edges[x, v]["kind"] = "pipeline"
                        out.append(Change("DAG-008", f"relabelled {x} -> {v} as a pipeline edge", (x, v)))
    return out


def _stage_exits(g: Any, view: DagView, nodes: list[Any], s: int, last_layer: int) -> list[Any]:
    """Nodes that end stage ``s``'s last layer and feed nothing: what a SendRecv should receive."""
    exits = []
    for n in nodes:
        d = view.data[n]
        if d.get("stage") != s or d.get("kind") in STATE or d.get("kind") in CONTROL:
            continue
        if any(e.get("kind") != "sync" for e in g.succ[n].values()):
            continue
        if d.get("layer") != last_layer:
            return []  # a dead end elsewhere in the stage: not a missing pipeline edge
        exits.append(n)
    return exits


__all__ = ["FIXABLE", "Change", "collective_kind", "fix_dag"]
