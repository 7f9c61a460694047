"""Invalid changes to a valid execution DAG, each with the rule ID that must name it.

Every mutation edits the graph in place and works on the small dense and MoE plans of ``plans.py``
(2 replicas x 2 stages of 2 layers each) at both detail levels; ``moe_only`` ones need experts.
``fixable`` ones must be repaired by ``fix_dag`` into a DAG that validates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shardplan.rules.dag.catalog import is_sharded


def find(g: Any, kind: str | None = None, phase: str = "decode", replica: int = 0, **attrs: Any) -> list:
    out = []
    for n, d in g.nodes(data=True):
        if kind is not None and d.get("kind") != kind:
            continue
        if d.get("phase") != phase or d.get("replica") != replica:
            continue
        if all(d.get(k) == v for k, v in attrs.items()):
            out.append(n)
    return out


def one(g: Any, kind: str, **attrs: Any) -> Any:
    return find(g, kind, **attrs)[0]


def shard(g: Any, layer: int = 0) -> Any:
    """The first sharded attention node of a layer (its shards rejoin at an all-reduce)."""
    return next(n for n in find(g, "Attention", layer=layer) if is_sharded(g.nodes[n]))


def send(g: Any) -> Any:
    return one(g, "SendRecv", stage=0)


def stage1(g: Any) -> Any:
    return one(g, "Stage", stage=1)


def bypass(g: Any, n: Any) -> None:
    """Remove ``n`` and wire its data predecessors straight to its data successors."""
    preds = [u for u, e in g.pred[n].items() if e["kind"] != "sync"]
    succs = [v for v, e in g.succ[n].items() if e["kind"] != "sync"]
    g.remove_node(n)
    for u in preds:
        for v in succs:
            g.add_edge(u, v, kind="data")


def add_like(g: Any, nid: str, like: Any, **update: Any) -> str:
    g.add_node(nid, **{**g.nodes[like], **update})
    return nid


# --- the mutations -------------------------------------------------------------------------------
def cycle(g):
    g.add_edge(one(g, "Sample"), one(g, "Stage", stage=0), kind="data")


def second_root(g):
    add_like(g, "stray", one(g, "Layer", layer=0))
    g.add_edge("stray", one(g, "Token"), kind="sync")


def tp_at_root(g):
    a = shard(g)
    add_like(g, "r0.tp-shard", a)
    g.remove_edge("request", "r0")
    g.add_edge("request", "r0.tp-shard", kind="data")
    g.add_edge("r0.tp-shard", "r0", kind="data")


def replica_below_root(g):
    s0 = one(g, "Stage", stage=0)
    g.add_node("r0.decode.again", kind="Replica", ranks=g.nodes[s0]["ranks"], est_us=0.0, replica=0)
    g.add_edge(s0, "r0.decode.again", kind="data")
    g.add_edge("r0.decode.again", one(g, "Token"), kind="sync")


def replicas_joined(g):
    g.add_edge(one(g, "Layer", layer=0), find(g, "Layer", replica=1, layer=1)[0], kind="data")


def phases_joined(g):
    g.add_edge(one(g, "Layer", phase="prefill", layer=0), one(g, "Layer", layer=1), kind="data")


def parallel_stages(g):
    g.remove_edge(send(g), stage1(g))
    g.add_edge(one(g, "PrevToken"), stage1(g), kind="pipeline")


def backward_stage_edge(g):
    g.add_edge(one(g, "Layer", layer=2), one(g, "KVCacheUpdate", layer=0), kind="data")


def send_bypassed(g):
    u = next(iter(g.pred[send(g)]))
    g.add_edge(u, stage1(g), kind="data")


def layer_relabelled(g):
    g.nodes[one(g, "Layer", layer=1)]["layer"] = 3


def backward_layer_edge(g):
    g.add_edge(one(g, "Layer", layer=1), one(g, "KVCacheUpdate", layer=0), kind="data")


def collective_removed(g):
    bypass(g, g.nodes[shard(g)]["rejoin"])


def shard_to_next_layer(g):
    a0 = shard(g, 0)
    a1 = next(n for n in find(g, "Attention", layer=1) if g.nodes[n]["ranks"] == g.nodes[a0]["ranks"])
    g.add_edge(a0, a1, kind="data")


def expert_in_dense_layer(g):
    c = g.nodes[shard(g, 0)]["rejoin"]
    e = add_like(g, "r0.decode.L0.expert.bad", c, kind="Expert", ep_rank=0, experts=(0,), ranks=g.nodes[c]["ranks"][:1])
    g.add_edge(c, e, kind="data")
    g.add_edge(e, one(g, "Token"), kind="sync")


def expert_under_tp_shard(g):
    a = shard(g, 1)
    experts = find(g, "Expert", layer=1)
    if experts:
        g.add_edge(a, experts[0], kind="data")
    else:  # a dense model: hang an expert off the shard
        e = add_like(g, "r0.decode.L1.expert.bad", a, kind="Expert", ep_rank=0, experts=(0,))
        g.add_edge(a, e, kind="data")


def sp_on_ffn(g):
    n = one(g, "FFN", layer=0)
    g.nodes[n]["sp"] = 2
    g.nodes[n]["sp_rank"] = 1


def narrowed_node(g):
    n = one(g, "Layer", layer=0)
    g.nodes[n]["ranks"] = g.nodes[n]["ranks"][:1]


def kv_read_removed(g):
    a = shard(g)
    kv = next(u for u in g.pred[a] if g.nodes[u]["kind"] == "KVCache")
    g.remove_edge(kv, a)


def kv_node_removed(g):
    a = shard(g)
    g.remove_node(next(u for u in g.pred[a] if g.nodes[u]["kind"] == "KVCache"))


def kv_update_removed(g):
    g.remove_node(one(g, "KVCacheUpdate", layer=1))


def prev_token_removed(g):
    g.remove_node(one(g, "PrevToken"))
    g.add_edge(one(g, "Phase"), one(g, "Stage", stage=0), kind="data")


def second_token(g):
    add_like(g, "r0.decode.token2", one(g, "Token"))
    g.add_edge(one(g, "Sample"), "r0.decode.token2", kind="data")


def multi_token_step(g):
    g.nodes[one(g, "Phase")]["new_tokens"] = 4


def rank_off_plan(g):
    g.nodes[shard(g)]["ranks"] = (g.graph["num_gpus"] + 3,)


def rank_other_stage(g):
    g.nodes[shard(g)]["ranks"] = (g.nodes[stage1(g)]["ranks"][0],)


def unknown_kind(g):
    g.nodes[one(g, "Layer", layer=0)]["kind"] = "Magic"


def missing_est(g):
    del g.nodes[shard(g)]["est_us"]


def bad_edge_kind(g):
    layer = one(g, "Layer", layer=0)
    g.edges[layer, next(iter(g.succ[layer]))]["kind"] = "control"


def lm_head_on_first_stage(g):
    for n in find(g, "LMHead"):
        g.nodes[n]["stage"] = 0


def embedding_on_last_stage(g):
    g.nodes[one(g, "Embedding")]["stage"] = 1


def collective_narrowed(g):
    c = g.nodes[shard(g)]["rejoin"]
    g.nodes[c]["ranks"] = g.nodes[c]["ranks"][:1]


def send_input_removed(g):
    x = send(g)
    for u in list(g.pred[x]):
        g.remove_edge(u, x)


def send_output_removed(g):
    g.remove_edge(send(g), stage1(g))


def send_removed(g):
    g.remove_node(send(g))


def pipeline_edge_as_data(g):
    g.edges[send(g), stage1(g)]["kind"] = "data"


def shard_edge_removed(g):
    a = shard(g)
    g.remove_edge(a, g.nodes[a]["rejoin"])


def experts_replicated(g):
    for n in find(g, "Expert", layer=1):
        g.nodes[n]["experts"] = tuple(range(g.graph["num_experts"]))


def expert_count_doubled(g):
    for n in find(g, "Expert", layer=1):
        copy = add_like(g, n + ".copy", n)
        for u, e in g.pred[n].items():
            g.add_edge(u, copy, **e)
        for v, e in g.succ[n].items():
            g.add_edge(copy, v, **e)


def tp_inside_expert(g):
    n = one(g, "Expert", layer=1)
    g.nodes[n]["tp"] = 2


def experts_rejoin_early(g):
    a, b = find(g, "Expert", layer=1)[:2]
    g.add_edge(a, b, kind="data")


def dispatch_removed(g):
    bypass(g, next(n for n in find(g, "AllToAll", layer=1) if g.nodes[n]["op"] == "moe.dispatch"))


def combine_removed(g):
    bypass(g, next(n for n in find(g, layer=1) if g.nodes[n].get("op") == "moe.combine"))


@dataclass(frozen=True)
class Mutation:
    name: str
    rule: str
    apply: Callable[[Any], None]
    fixable: bool = False
    moe_only: bool = False


MUTATIONS = [
    Mutation("cycle", "DAG-001", cycle),
    Mutation("second-root", "DAG-002", second_root),
    Mutation("tp-at-root", "DAG-003", tp_at_root),
    Mutation("replica-below-root", "DAG-004", replica_below_root),
    Mutation("replicas-joined", "DAG-005", replicas_joined),
    Mutation("phases-joined", "DAG-006", phases_joined),
    Mutation("parallel-stages", "DAG-007", parallel_stages),
    Mutation("backward-stage-edge", "DAG-008", backward_stage_edge),
    Mutation("send-bypassed", "DAG-008", send_bypassed),
    Mutation("pipeline-edge-as-data", "DAG-008", pipeline_edge_as_data, fixable=True),
    Mutation("layer-relabelled", "DAG-009", layer_relabelled),
    Mutation("backward-layer-edge", "DAG-009", backward_layer_edge),
    Mutation("collective-removed", "DAG-010", collective_removed, fixable=True),
    Mutation("shard-edge-removed", "DAG-010", shard_edge_removed, fixable=True),
    Mutation("shard-to-next-layer", "DAG-011", shard_to_next_layer),
    Mutation("expert-in-dense-layer", "DAG-012", expert_in_dense_layer),
    Mutation("expert-under-tp-shard", "DAG-013", expert_under_tp_shard),
    Mutation("sp-on-ffn", "DAG-015", sp_on_ffn),
    Mutation("narrowed-node", "DAG-016", narrowed_node),
    Mutation("kv-read-removed", "DAG-017", kv_read_removed, fixable=True),
    Mutation("kv-node-removed", "DAG-017", kv_node_removed, fixable=True),
    Mutation("kv-update-removed", "DAG-018", kv_update_removed, fixable=True),
    Mutation("prev-token-removed", "DAG-019", prev_token_removed),
    Mutation("second-token", "DAG-020", second_token),
    Mutation("multi-token-step", "DAG-020", multi_token_step),
    Mutation("rank-off-plan", "DAG-021", rank_off_plan),
    Mutation("rank-other-stage", "DAG-021", rank_other_stage),
    Mutation("unknown-kind", "DAG-022", unknown_kind),
    Mutation("missing-est", "DAG-022", missing_est),
    Mutation("bad-edge-kind", "DAG-022", bad_edge_kind),
    Mutation("lm-head-on-first-stage", "DAG-024", lm_head_on_first_stage),
    Mutation("embedding-on-last-stage", "DAG-024", embedding_on_last_stage),
    Mutation("collective-narrowed", "DAG-025", collective_narrowed),
    Mutation("send-input-removed", "DAG-028", send_input_removed, fixable=True),
    Mutation("send-output-removed", "DAG-028", send_output_removed, fixable=True),
    Mutation("send-removed", "DAG-028", send_removed, fixable=True),
    Mutation("experts-replicated", "DAG-014", experts_replicated, moe_only=True),
    Mutation("expert-count-doubled", "DAG-014", expert_count_doubled, moe_only=True),
    Mutation("tp-inside-expert", "DAG-023", tp_inside_expert, moe_only=True),
    Mutation("experts-rejoin-early", "DAG-026", experts_rejoin_early, moe_only=True),
    Mutation("dispatch-removed", "DAG-027", dispatch_removed, moe_only=True),
    Mutation("combine-removed", "DAG-027", combine_removed, fixable=True, moe_only=True),
]
