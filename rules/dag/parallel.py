"""DAG rules on the parallelism inside a stage: tensor and sequence shards rejoin at their collectives
within a layer; expert parallelism lives inside MoE layers, decomposed into router, dispatch,
experts and combine."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from shardplan.rules.base import Diagnostic, Kind
from shardplan.rules.dag.view import (
    COLLECTIVE,
    COMPUTE,
    CONTROL,
    LAYERED,
    MOE_KINDS,
    SP_KINDS,
    STATE,
    DagRule,
    DagView,
    NodeKind,
    _int,
    _ranges,
    is_sharded,
)


class TpRejoins(DagRule):
    id = "DAG-010"
    name = "tp-not-rejoined"
    statement = (
        "the shards of a tensor- or sequence-parallel operator rejoin at an explicit collective "
        "before anything else reads them"
    )
    source = "001 §3.3 (TP branches re-converge), 001 §4.4, 000 §7.3"
    example_bad = "attention shards feeding the FFN directly, the all-reduce removed"
    example_good = "attention shards -> all-reduce -> FFN"
    fixable = True  # a missing collective, or a missing edge into it, is restored

    def violations(self, view: DagView) -> Iterator[Diagnostic]:
        for n, d in view.data.items():
            kind = d.get("kind")
            if kind in COLLECTIVE or (kind == NodeKind.EXPERT and not is_sharded(d)):
                # partial joins (sequence exchange, expert all-reduce) and whole experts name the
                # collective that completes them
                if isinstance(d.get("rejoin"), str) and d["rejoin"] not in view.succ(n):
                    yield self.at(n, f"partial result does not reach {d['rejoin']}, the collective that completes it")
                continue
            if kind in STATE or kind in COLLECTIVE or kind in CONTROL or not is_sharded(d):
                continue
            outs = list(view.succ(n))
            joined = [v for v in outs if view.kind(v) in COLLECTIVE]
            stray = [v for v in outs if view.kind(v) not in COLLECTIVE and view.kind(v) != NodeKind.KV_CACHE_UPDATE]
            named = d.get("rejoin")
            if not joined:
                yield self.at(
                    n, "shard output reaches no collective" + (f" (feeds {stray[0]} directly)" if stray else "")
                )
            elif stray:
                yield self.at(n, f"shard output feeds {stray[0]} before its collective")
            elif isinstance(named, str) and named not in joined:
                yield self.at(n, f"shard does not feed {named}, the collective that rejoins it")


class TpWithinLayer(DagRule):
    id = "DAG-011"
    name = "tp-spans-layers"
    statement = "a tensor-parallel operator belongs to one layer: no shard feeds a shard of another layer"
    source = "001 §5 (TP across multiple layers), 001 §3.3"
    example_bad = "the FFN shard of layer 3 on GPU 1 feeding layer 4's attention shard on GPU 1"
    example_good = "each layer's shards rejoin, then the next layer splits again"

    def violations(self, view: DagView) -> Iterator[Diagnostic]:
        for n, d in view.data.items():
            if not is_sharded(d) or d.get("kind") in COLLECTIVE or d.get("kind") in CONTROL:
                continue
            layer = d.get("layer")
            if d.get("kind") in LAYERED and not isinstance(layer, int):
                yield self.at(n, f"sharded {d.get('kind')} spans layers {layer!r}")
                continue
            for v in view.succ(n):
                dv = view.data[v]
                if is_sharded(dv) and dv.get("kind") not in COLLECTIVE and dv.get("layer") != layer:
                    yield self.at(n, f"shard of layer {layer} feeds {v}, a shard of layer {dv.get('layer')}")


class EpInsideMoe(DagRule):
    id = "DAG-012"
    name = "ep-outside-moe"
    statement = "routers, experts, shared experts and all-to-all exchanges appear only inside MoE layers"
    source = "001 §3.4 (EP only inside MoE layers), 001 §6 step 4"
    example_bad = "an Expert node in a dense layer, or in no layer at all"
    example_good = "router -> dispatch -> experts -> combine inside a MoE layer"

    def violations(self, view: DagView) -> Iterator[Diagnostic]:
        for n, d in view.data.items():
            kind = d.get("kind")
            if kind in MOE_KINDS or kind == NodeKind.ALL_TO_ALL or "experts" in d or "ep_rank" in d:
                layer = d.get("layer")
                if layer not in view.moe_layers:
                    yield self.at(n, f"{kind} in layer {layer}, which is not a MoE layer")


class EpNotInsideTp(DagRule):
    id = "DAG-013"
    name = "ep-inside-tp-shard"
    statement = "the expert fan-out hangs off the router (or its dispatch), never off a tensor-parallel shard"
    source = "001 §5 (EP nested inside TP shards), 001 §3.4"
    example_bad = "an Expert node fed by attention TP shard 1"
    example_good = "attention shards -> all-reduce -> router -> experts"

    def violations(self, view: DagView) -> Iterator[Diagnostic]:
        for n in (*view.by_kind.get(NodeKind.EXPERT, []), *view.by_kind.get(NodeKind.ROUTER, [])):
            for u in view.pred(n):
                du = view.data[u]
                if du.get("kind") not in COLLECTIVE and du.get("kind") != NodeKind.ROUTER and is_sharded(du):
                    yield self.at(n, f"{view.kind(n)} fed by the tensor-parallel shard {u}")


class EpPartitions(DagRule):
    id = "DAG-014"
    name = "ep-as-replication"
    statement = (
        "expert parallelism partitions the experts: each MoE layer has one Expert node per EP rank "
        "(ep = the stage's GPUs / expert_tp) on disjoint GPUs, and together they host every expert"
    )
    source = "001 §5 (EP as a replication factor), 001 §3.4 (Expert nodes = GPUs), 003 §3"
    example_bad = "every Expert node hosting all 256 experts, or twice as many Expert nodes as GPUs"
    example_good = "8 Expert nodes on 8 GPUs hosting experts 0-31, 32-63, ..."

    def violations(self, view: DagView) -> Iterator[Diagnostic]:
        if view.layout is None or not view.num_experts:
            return
        ep, etp = view.layout.ep, view.layout.expert_tp
        per_rank = etp if view.graph.get("detail") == "expanded" else 1
        groups: dict[tuple[Any, ...], list[Any]] = defaultdict(list)
        for n in view.by_kind.get(NodeKind.EXPERT, []):
            d = view.data[n]
            groups[(d.get("replica"), d.get("phase"), d.get("layer"))].append(n)
        for (r, phase, layer), nodes in groups.items():
            where = f"replica {r} {phase} layer {layer}"
            by_rank: dict[Any, list[Any]] = defaultdict(list)
            hosted: set[Any] = set()
            owner: dict[int, Any] = {}
            for n in nodes:
                d = view.data[n]
                by_rank[d.get("ep_rank")].append(n)
                experts = d.get("experts") or ()
                hosted.update(experts)
                if ep > 1 and len(set(experts)) >= view.num_experts:
                    yield self.at(n, f"hosts all {view.num_experts} experts: a copy, not a partition")
                for g in view.ranks(n):
                    if owner.setdefault(g, d.get("ep_rank")) != d.get("ep_rank"):
                        yield self.at(n, f"GPU {g} already serves EP rank {owner[g]}")
            bad = [k for k in by_rank if not isinstance(k, int) or not 0 <= k < ep]
            if bad or len(by_rank) != ep:
                yield self.at(
                    None, f"{where}: {len(by_rank)} EP ranks {sorted(map(str, by_rank))[:6]}; the plan has ep={ep}"
                )
            for k, ns in by_rank.items():
                if len(ns) != per_rank:
                    yield self.at(ns[0], f"{where}: EP rank {k} has {len(ns)} Expert nodes, expected {per_rank}")
            missing = [e for e in range(view.num_experts) if e not in hosted]
            if missing:
                yield self.at(None, f"{where}: experts {_ranges(missing)} hosted by no Expert node")


class SpInsideAttention(DagRule):
    id = "DAG-015"
    name = "sp-outside-attention"
    statement = "sequence parallelism splits attention (and its KV cache) only"
    source = "001 §3.5 (SP scoped to attention), 001 §4.4"
    example_bad = "an FFN node with sp_rank 1"
    example_good = "attention shards (sp_rank, tp_rank) -> sequence exchange -> all-reduce -> FFN"

    def violations(self, view: DagView) -> Iterator[Diagnostic]:
        for n, d in view.data.items():
            if ("sp_rank" in d or _int(d.get("sp"), 1) > 1) and d.get("kind") not in SP_KINDS:
                yield self.at(n, f"{d.get('kind')} carries a sequence split")


class NoTpInsideExpertNodes(DagRule):
    id = "DAG-023"
    name = "tp-inside-expert"
    statement = "an Expert node is not tensor-parallel unless the policy allows it (--allow expert-tp)"
    source = "001 §3.4 (TP inside experts disallowed by default), 003 §2.4; 000 §6.2.3 allows it"
    kind = Kind.DEFAULT
    switch = "expert-tp"
    example_bad = "Expert nodes with tp_rank 0 and 1 in a plan without --allow expert-tp"
    example_good = "one Expert node per GPU, each hosting whole experts"

    def violations(self, view: DagView) -> Iterator[Diagnostic]:
        for n in view.by_kind.get(NodeKind.EXPERT, []):
            d = view.data[n]
            if "tp_rank" in d or _int(d.get("tp"), 1) > 1:
                yield self.at(n, "tensor-parallel expert without the expert-tp policy")


class CollectiveSpan(DagRule):
    id = "DAG-025"
    name = "collective-ranks-mismatch"
    statement = "a collective spans every GPU whose data it joins and every GPU it hands the result to"
    source = "000 §3.3-§5.3 (collectives join the shards of a group), 001 §3.3"
    example_bad = "an all-reduce on GPU 0 alone joining shards on GPUs 0-7"
    example_good = "an all-reduce on GPUs 0-7 after shards on GPUs 0-7"

    def violations(self, view: DagView) -> Iterator[Diagnostic]:
        for kind in COLLECTIVE:
            for n in view.by_kind.get(kind, []):
                mine = view.ranks(n)
                for m in (*view.pred(n), *view.succ(n)):
                    km = view.kind(m)
                    if km in COLLECTIVE:
                        if not view.ranks(m) & mine:
                            yield self.at(n, f"hands data to or from collective {m} on disjoint GPUs")
                            break
                    elif km in COMPUTE | STATE and not view.ranks(m) <= mine:
                        yield self.at(n, f"joins {m} on GPUs {sorted(view.ranks(m) - mine)[:8]} outside its ranks")
                        break


class ExpertsRejoinAfterCompute(DagRule):
    id = "DAG-026"
    name = "experts-rejoin-early"
    statement = (
        "expert branches stay apart until their computation ends: an Expert node feeds only the combine collectives"
    )
    source = "001 §3.4 (EP branches do not rejoin until after expert computation)"
    example_bad = "Expert 3 feeding Expert 4"
    example_good = "each Expert -> combine"

    def violations(self, view: DagView) -> Iterator[Diagnostic]:
        single = view.layout is not None and view.layout.gpus_per_stage == 1
        for n in view.by_kind.get(NodeKind.EXPERT, []):
            for v in view.succ(n):
                if view.kind(v) == NodeKind.EXPERT:
                    yield self.at(n, f"feeds Expert {v} before the combine")
                elif view.kind(v) not in COLLECTIVE and not single:
                    yield self.at(n, f"feeds {view.kind(v)} {v} before the combine")


class MoeDecomposed(DagRule):
    id = "DAG-027"
    name = "moe-not-decomposed"
    statement = (
        "a MoE layer is router -> dispatch -> experts -> combine: experts are fed by the router, through an "
        "explicit all-to-all when tokens cross attention groups, and are combined by an explicit collective"
    )
    source = "000 §5.4 (routing, expert compute, combine; explicit dispatch and combine), 001 §4.3"
    example_bad = "a MoE layer whose Expert nodes have no router before them, or no combine after them"
    example_good = "router -> all-to-all -> experts -> all-to-all"

    def violations(self, view: DagView) -> Iterator[Diagnostic]:
        if view.layout is None:
            return
        lay = view.layout
        layers: dict[tuple[Any, ...], dict[Any, Any]] = defaultdict(lambda: defaultdict(list))
        for kind in (NodeKind.ROUTER, NodeKind.EXPERT):
            for n in view.by_kind.get(kind, []):
                d = view.data[n]
                layers[(d.get("replica"), d.get("phase"), d.get("layer"))][kind].append(n)
        for key, nodes in view.branches.items():
            moe = {view.layer(n) for n in nodes if view.kind(n) == NodeKind.LAYER and view.layer(n) in view.moe_layers}
            for layer in moe:
                found = layers.get((key[0], key[1], layer), {})
                if not found.get(NodeKind.ROUTER) or not found.get(NodeKind.EXPERT):
                    yield self.at(None, f"replica {key[0]} {key[1]} MoE layer {layer} lacks a router or its experts")
        dispatch_needed = lay.attn_dp > 1
        routed: dict[Any, bool] = {}  # routed[all-to-all]: whether a router feeds it

        def from_router(u: Any) -> bool:
            if u not in routed:
                routed[u] = any(view.kinds[w] == NodeKind.ROUTER for w in view.pred(u))
            return routed[u]

        for n in view.by_kind.get(NodeKind.ALL_TO_ALL, []):
            if from_router(n):
                for v in view.succ(n):
                    if view.kinds[v] != NodeKind.EXPERT:
                        yield self.at(n, f"the dispatch after the router feeds {view.kinds[v]} {v}, not an expert")
        for n in view.by_kind.get(NodeKind.EXPERT, []):
            preds = list(view.pred(n))
            fed = False
            for u in preds:
                ku = view.kind(u)
                if ku == NodeKind.ROUTER and not dispatch_needed:
                    fed = True
                elif ku == NodeKind.ALL_TO_ALL and from_router(u):
                    fed = True
            if not fed:
                how = "an all-to-all dispatch after the router" if dispatch_needed else "a router"
                yield self.at(n, f"expert not fed by {how}")
            layer = view.layers[n]
            if lay.gpus_per_stage > 1 and not any(
                view.kinds[v] in COLLECTIVE and view.kinds[v] != NodeKind.SEND_RECV and view.layers[v] == layer
                for v in view.succ(n)
            ):
                yield self.at(n, "expert output is combined by no collective of its layer")
