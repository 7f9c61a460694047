"""DAG rules on one decode step and on the file as a whole: explicit communication, KV cache reads and
updates, token order, a single-token step, ranks inside the plan, the schema, the critical path."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from shardplan.rules.base import Diagnostic, Kind
from shardplan.rules.dag.view import (
    COMPUTE,
    EDGE_KINDS,
    KINDS,
    LAYERED,
    PHASES,
    SP_KINDS,
    STAGED,
    STATE,
    TYPED,
    DagRule,
    DagView,
    NodeKind,
    is_int,
    longest_path_us,
)
from shardplan.rules.layout import Layout
from shardplan.rules.operators import Phase


class NoHiddenCommunication(DagRule):
    id = "DAG-016"
    name = "hidden-communication"
    statement = (
        "data moves between GPUs only at explicit collective or SendRecv nodes: an edge between two "
        "compute or state nodes stays on the GPUs of its source"
    )
    source = "000 §7.3 (no hidden communication), 000 §5.4 (dispatch and combine explicit)"
    example_bad = "attention shard on GPU 0 feeding the FFN shard on GPU 1"
    example_good = "attention shards -> all-reduce -> FFN shards"

    def violations(self, view: DagView) -> Iterator[Diagnostic]:
        local = COMPUTE | STATE
        for u, v, kind in view.edges:
            if kind == "sync" or view.kind(u) not in local or view.kind(v) not in local:
                continue
            extra = view.ranks(v) - view.ranks(u)
            if extra:
                yield self.at(u, f"edge to {v} moves data to GPUs {sorted(extra)[:8]} with no communication node")


class KvRead(DagRule):
    id = "DAG-017"
    name = "kv-read-missing"
    statement = (
        "in decode every attention node reads the KV cache on its GPUs, and that cache depends on the previous token"
    )
    source = "000 §7.2 (explicit KV cache dependencies)"
    example_bad = "a decode attention node with no KVCache predecessor"
    example_good = "previous token -> KV cache -> attention"
    fixable = True

    def violations(self, view: DagView) -> Iterator[Diagnostic]:
        for n in view.by_kind.get(NodeKind.ATTENTION, []):
            d = view.data[n]
            if d.get("phase") != Phase.DECODE:
                continue
            caches = [u for u in view.in_adj[n] if view.kind(u) == NodeKind.KV_CACHE]
            if not caches:
                yield self.at(n, "decode attention reads no KV cache")
            elif not any(view.ranks(n) <= view.ranks(u) and view.layer(u) == d.get("layer") for u in caches):
                yield self.at(n, f"KV cache {caches[0]} is not this layer's cache on these GPUs")
        for n in view.by_kind.get(NodeKind.KV_CACHE, []):
            if not any(view.kind(u) == NodeKind.PREV_TOKEN for u in view.in_adj[n]):
                yield self.at(n, "KV cache does not depend on the previous token")
            if not any(view.kind(v) == NodeKind.ATTENTION for v in view.out_adj[n]):
                yield self.at(n, "KV cache read by no attention node")


class KvUpdate(DagRule):
    id = "DAG-018"
    name = "kv-update-missing"
    statement = "every attention node is followed by a KV cache update on its GPUs, which the step's token waits for"
    source = "000 §7.2, 000 §8.1 (KV cache update node), DESIGN.md"
    example_bad = "an attention node with no KVCacheUpdate successor"
    example_good = "attention -> KV cache update -> token"
    fixable = True

    def violations(self, view: DagView) -> Iterator[Diagnostic]:
        for n in view.by_kind.get(NodeKind.ATTENTION, []):
            ups = [v for v in view.out_adj[n] if view.kind(v) == NodeKind.KV_CACHE_UPDATE]
            if not ups:
                yield self.at(n, "attention writes no KV cache update")
            elif not any(view.ranks(n) <= view.ranks(v) and view.layer(v) == view.layer(n) for v in ups):
                yield self.at(n, f"KV cache update {ups[0]} is not this layer's on these GPUs")
        for n in view.by_kind.get(NodeKind.KV_CACHE_UPDATE, []):
            if not any(view.kind(v) == NodeKind.TOKEN for v in view.out_adj[n]):
                yield self.at(n, "the step's token does not wait for this KV cache update")
            if not any(view.kind(u) == NodeKind.ATTENTION for u in view.in_adj[n]):
                yield self.at(n, "KV cache update written by no attention node")


class TokenOrder(DagRule):
    id = "DAG-019"
    name = "token-order-broken"
    statement = (
        "a decode branch starts from the previous token's completion and everything in it follows that "
        "node; every branch ends in its one Token, which feeds nothing"
    )
    source = "000 §7.1 (token t+1 after token t)"
    example_bad = "a decode branch with no PrevToken node, or a stage that does not wait for it"
    example_good = "decode -> previous token -> stage 0 -> ... -> token"

    def violations(self, view: DagView) -> Iterator[Diagnostic]:
        for (r, phase), nodes in view.branches.items():
            kinds = defaultdict(list)
            for n in nodes:
                kinds[view.kind(n)].append(n)
            if not kinds[NodeKind.TOKEN]:
                yield self.at(None, f"replica {r} {phase}: no Token node ends the branch")
            for t in kinds[NodeKind.TOKEN]:
                if view.dag.out_degree(t):
                    yield self.at(
                        t, "the token feeds " + ", ".join(map(str, list(view.out_adj[t])[:3])) + " in its own step"
                    )
            if phase != Phase.DECODE:
                for n in kinds[NodeKind.PREV_TOKEN]:
                    yield self.at(n, "a previous-token node in a prefill branch")
                continue
            if not kinds[NodeKind.PREV_TOKEN]:
                yield self.at(None, f"replica {r} decode: no PrevToken node (token t+1 must follow token t)")
                continue
            after = view.forward(kinds[NodeKind.PREV_TOKEN], within=set(nodes))
            for n in nodes:
                if n not in after and view.kind(n) != NodeKind.PHASE:
                    yield self.at(n, "does not follow the previous token's completion")


class SingleTokenStep(DagRule):
    id = "DAG-020"
    name = "multi-token-step"
    statement = "a decode branch is one token step: one previous token, one new token, new_tokens = 1"
    source = "000 §7.4 (no cross-token parallelism), 000 §4.2.2"
    example_bad = "a decode phase with new_tokens 4, or two Token nodes in one decode branch"
    example_good = "one PrevToken, one Token, new_tokens 1"

    def violations(self, view: DagView) -> Iterator[Diagnostic]:
        for (r, phase), nodes in view.branches.items():
            if phase != Phase.DECODE:
                continue
            tokens = [n for n in nodes if view.kind(n) == NodeKind.TOKEN]
            prevs = [n for n in nodes if view.kind(n) == NodeKind.PREV_TOKEN]
            if len(tokens) > 1:
                yield self.at(tokens[1], f"replica {r} decode has {len(tokens)} Token nodes in one step")
            if len(prevs) > 1:
                yield self.at(prevs[1], f"replica {r} decode has {len(prevs)} previous-token nodes")
            for n in nodes:
                new = view.data[n].get("new_tokens")
                if new is not None and new != 1:
                    yield self.at(n, f"decode step adds {new} tokens per sequence")


class RanksInPlan(DagRule):
    id = "DAG-021"
    name = "ranks-outside-plan"
    statement = (
        "every node runs on GPUs of the plan: inside its replica and stage, a shard on the GPU the layout "
        "numbering gives it, an Expert node on its EP rank's GPUs"
    )
    source = "DESIGN.md (ranks are global GPU ids; GPUs used = R x S x G), 003 §1"
    example_bad = "an attention shard on GPU 40 of a 32-GPU plan, or on another stage's GPU"
    example_good = "stage 1 of a tp=8 plan on GPUs 8-15"

    def violations(self, view: DagView) -> Iterator[Diagnostic]:
        lay = view.layout
        n_gpus = view.num_gpus
        if lay is not None and n_gpus != lay.num_gpus:
            yield self.at(None, f"graph says {n_gpus} GPUs; its layout uses {lay.num_gpus}")
        for n, d in view.data.items():
            ranks = d.get("ranks")
            if not isinstance(ranks, (list, tuple)) or not ranks:
                continue  # DAG-022
            bad = [g for g in ranks if not is_int(g) or not 0 <= g < n_gpus]  # JSON's true is not GPU 1
            if bad or len(set(ranks)) != len(ranks):
                yield self.at(n, f"ranks {list(ranks)[:8]} outside the plan's GPUs 0..{n_gpus - 1} or repeated")
                continue
            if lay is None:
                continue
            yield from self._placed(view, lay, n, d)

    def _placed(self, view: DagView, lay: Layout, n: Any, d: dict[str, Any]) -> Iterator[Diagnostic]:
        r, s = d.get("replica"), d.get("stage")
        if not isinstance(r, int):
            return
        if not 0 <= r < lay.dp:
            yield self.at(n, f"replica {r} beyond the plan's dp={lay.dp}")
            return
        lo, hi = view.span(n)
        if not isinstance(s, int):
            rep = lay.gpus_per_replica
            if lo < r * rep or hi >= (r + 1) * rep:
                yield self.at(n, f"ranks {sorted(view.ranks(n))[:8]} outside replica {r}'s GPUs")
            return
        if not 0 <= s < lay.pp:
            yield self.at(n, f"stage {s} beyond the plan's {lay.pp} stages")
            return
        stage = lay.stage_gpus(r, s)
        top = stage.stop
        if d.get("kind") == NodeKind.SEND_RECV and s + 1 < lay.pp:
            top = lay.stage_gpus(r, s + 1).stop  # stages of a replica are consecutive runs of ids
        if lo < stage.start or hi >= top:
            yield self.at(
                n,
                f"ranks {sorted(view.ranks(n))[:8]} outside replica {r} stage {s}'s GPUs "
                f"{stage.start}-{stage.stop - 1}",
            )
            return
        expected = _expected_ranks(lay, d, stage, r, s)
        if expected is not None and view.ranks(n) != expected:
            yield self.at(
                n, f"ranks {sorted(view.ranks(n))[:8]}; the layout puts this {d.get('kind')} on {sorted(expected)[:8]}"
            )


def _expected_ranks(lay: Layout, d: dict[Any, Any], stage: range, r: int, s: int) -> frozenset[Any] | None:
    """The GPUs the layout's numbering gives a shard or an Expert node; None when it has no fixed place."""
    kind = d.get("kind")
    try:
        if kind == NodeKind.EXPERT and isinstance(d.get("ep_rank"), int):
            first = stage.start + d["ep_rank"] * lay.expert_tp
            if "tp_rank" in d:
                return frozenset({first + d["tp_rank"]})
            return frozenset(range(first, first + lay.expert_tp))
        g = d.get("group")
        if not isinstance(g, int) or ("tp_rank" not in d and "sp_rank" not in d):
            return None
        if kind in SP_KINDS:
            return frozenset({lay.tp_group(r, s, g, d.get("sp_rank", 0))[d.get("tp_rank", 0)]})
        return frozenset({lay.attention_group_gpus(r, s, g)[d["tp_rank"]]})
    except (IndexError, TypeError):
        return frozenset()


class Schema(DagRule):
    id = "DAG-022"
    name = "dag-schema"
    statement = (
        "nodes and edges carry the schema's attributes: a known kind, ranks, est_us, and the scope their kind needs"
    )
    source = "DESIGN.md (Execution DAG: node and edge attributes), 000 §8"
    example_bad = "a node of kind 'Magic', a node without est_us, an edge of kind 'control'"
    example_good = "kind=Attention ranks=[0, 1] est_us=12.5 replica=0 phase=decode stage=0 layer=3"

    def violations(self, view: DagView) -> Iterator[Diagnostic]:
        for problem in view.problems:
            yield self.at(None, problem)
        for n, d in view.dag.nodes(data=True):
            for key, ok in TYPED.items():
                if key in d and not ok(d[key]):
                    yield self.at(n, f"{key} is {d[key]!r}, not a well-formed value")
        for n, d in view.data.items():
            kind = d.get("kind")
            if kind not in KINDS:
                yield self.at(n, f"unknown kind {kind!r}")
                continue
            est = d.get("est_us")
            if not isinstance(est, (int, float)) or isinstance(est, bool) or not est >= 0:
                yield self.at(n, f"est_us is {est!r}, not a time >= 0")
            ranks = d.get("ranks")
            if not isinstance(ranks, (list, tuple)) or not ranks:
                yield self.at(n, "ranks missing or empty")
            if kind != NodeKind.REQUEST and not isinstance(d.get("replica"), int):
                yield self.at(n, "replica missing")
            if kind not in (NodeKind.REQUEST, NodeKind.REPLICA) and d.get("phase") not in PHASES:
                yield self.at(n, f"phase is {d.get('phase')!r}")
            if kind in STAGED and not isinstance(d.get("stage"), int):
                yield self.at(n, f"{kind} without a stage")
            if kind in LAYERED and "layer" not in d:
                yield self.at(n, f"{kind} without a layer")
        for u, v, kind in view.edges:
            if kind not in EDGE_KINDS:
                yield self.at(u, f"edge to {v} has kind {kind!r}, not one of {', '.join(EDGE_KINDS)}")


class CriticalPath(DagRule):
    id = "DAG-029"
    name = "critical-path-mismatch"
    statement = (
        "the longest path of each branch (sum of est_us) matches the plan's prefill (TTFT at concurrency 1 less the "
        "serving stack's fixed cost per request) and "
        "decode step (TPOT less the prefill sharing its steps) within 1 %"
    )
    source = "004 §6 (critical path), DESIGN.md (Cost model)"
    kind = Kind.ADVISORY
    example_bad = "a decode branch whose longest path is 12 ms for a plan whose decode step is 10 ms"
    example_good = "decode longest path = the decode step"

    def violations(self, view: DagView) -> Iterator[Diagnostic]:
        if not view.acyclic:
            return
        for (r, phase), nodes in view.branches.items():
            want = view.graph.get("prefill_us" if phase == Phase.PREFILL else "decode_step_us")
            if not isinstance(want, (int, float)) or want <= 0:
                continue
            got = longest_path_us(view.dag, nodes)[0]
            if abs(got - want) > 0.01 * want:
                yield self.at(None, f"replica {r} {phase}: longest path {got:.1f} us, the plan predicts {want:.1f} us")
