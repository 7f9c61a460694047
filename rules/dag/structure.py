"""DAG rules on the outer structure: one root, replicas at the root only, separate phases, a chain of
stages joined by pipeline edges, layers in order, the model's two ends on the right stages."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from shardplan.rules.base import Diagnostic
from shardplan.rules.dag.view import (
    COLLECTIVE,
    COMPUTE,
    CONTROL,
    STAGED,
    DagRule,
    DagView,
    NodeKind,
    _int,
    _ranges,
    is_sharded,
)
from shardplan.rules.operators import Phase


class Acyclic(DagRule):
    id = "DAG-001"
    name = "dag-has-cycle"
    statement = "the execution graph is acyclic: nothing depends on its own result"
    source = "000 §4.3 (no backward dependencies), 002 (validation)"
    example_bad = "an edge from layer 5's all-reduce back to layer 4's attention"
    example_good = "every edge points forward in layer and stage order"

    def violations(self, view: DagView) -> Iterator[Diagnostic]:
        if view.acyclic:
            return
        # Lazily on purpose: networkx costs about 0.2 s of CPU to import, and only DAG work needs it.
        import networkx as nx

        cycle = nx.find_cycle(view.dag)
        yield self.at(cycle[0][0], "cycle " + " -> ".join(str(u) for u, _ in cycle) + f" -> {cycle[0][0]}")


class SingleRoot(DagRule):
    id = "DAG-002"
    name = "node-unreachable"
    statement = (
        "one Request node is the only root; every node is reached from it, every operator and collective "
        "through a data edge, and every node of a phase branch reaches that branch's Token"
    )
    source = "001 §2 (request level on top), 000 §7.1"
    example_bad = "an all-reduce whose output feeds nothing"
    example_good = "request -> replica -> phase -> ... -> token"

    def violations(self, view: DagView) -> Iterator[Diagnostic]:
        dag = view.dag
        roots = [n for n in dag if dag.in_degree(n) == 0]
        requests = view.by_kind.get(NodeKind.REQUEST, [])
        for n in roots:
            if view.kind(n) != NodeKind.REQUEST:
                yield self.at(n, f"{view.kind(n)} node has no predecessor (only the Request is a root)")
        if len(requests) != 1:
            yield self.at(None, f"{len(requests)} Request nodes; exactly one is the root")
        reached = view.forward(requests)
        root_set = set(roots)
        fed = COMPUTE | COLLECTIVE | {NodeKind.KV_CACHE_UPDATE}  # nodes that compute on or move data
        for n in dag:
            if n not in reached and n not in root_set:
                yield self.at(n, "not reachable from the Request (an input edge is missing)")
            elif view.kinds[n] in fed and not view.pred(n):
                yield self.at(n, f"{view.kinds[n]} has no data input (only sync edges lead to it)")
        for key, nodes in view.branches.items():
            tokens = [n for n in nodes if view.kind(n) == NodeKind.TOKEN]
            if not tokens:
                continue  # DAG-019 reports the missing token
            members = set(nodes)
            alive = view.backward(tokens, within=members)
            for n in nodes:
                if n not in alive and view.kind(n) != NodeKind.PHASE:
                    yield self.at(n, f"does not lead to the {key[1]} branch's token (an output edge is missing)")


class SplitAtRoot(DagRule):
    id = "DAG-003"
    name = "split-at-root"
    statement = "tensor and sequence parallelism live inside operators of a stage, never at the request level"
    source = "001 §5 (TP or SP at the DAG root), 001 §3.3, §3.5"
    example_bad = "TP shard nodes hanging directly off the Request or a Replica"
    example_good = "request -> replica -> phase -> stage -> layer -> attention shards"

    def violations(self, view: DagView) -> Iterator[Diagnostic]:
        top = (NodeKind.REQUEST, NodeKind.REPLICA, NodeKind.PHASE, NodeKind.PREV_TOKEN)
        for n, d in view.data.items():
            if not is_sharded(d):
                continue
            if d.get("kind") in CONTROL:
                yield self.at(n, f"{d.get('kind')} node carries a tensor/sequence split")
            elif "stage" not in d:
                yield self.at(n, "sharded node outside any stage")
            else:
                for u in view.pred(n):
                    if view.kind(u) in top:
                        yield self.at(n, f"sharded node directly under {view.kind(u)} {u}")


class DataParallelAtRoot(DagRule):
    id = "DAG-004"
    name = "dp-below-root"
    statement = "data parallelism is the fan-out of the Request into Replica nodes and appears nowhere else"
    source = "001 §3.1, 000 §2 (DP outermost)"
    example_bad = "a Replica node under a stage, or replicas that add up to more than the plan's dp"
    example_good = "request -> replica 0 .. replica dp-1"

    def violations(self, view: DagView) -> Iterator[Diagnostic]:
        total = 0
        for n in view.by_kind.get(NodeKind.REPLICA, []):
            preds = list(view.in_adj[n])
            if not preds or any(view.kind(u) != NodeKind.REQUEST for u in preds):
                yield self.at(n, "replica fan-out below the root (predecessors: " + ", ".join(map(str, preds)) + ")")
            total += _int(view.data[n].get("multiplicity"), 1)
        for n in view.by_kind.get(NodeKind.REQUEST, []):
            for v in view.out_adj[n]:
                if view.kind(v) != NodeKind.REPLICA:
                    yield self.at(v, f"the Request fans out to a {view.kind(v)}, not a Replica")
        for n, d in view.data.items():
            if "multiplicity" in d and d.get("kind") != NodeKind.REPLICA:
                yield self.at(n, f"{d.get('kind')} carries a replication multiplicity; only replicas replicate")
        if view.layout is not None and view.by_kind.get(NodeKind.REPLICA) and total != view.layout.dp:
            yield self.at(None, f"replicas add up to {total}; the plan has dp={view.layout.dp}")


class ReplicasIndependent(DagRule):
    id = "DAG-005"
    name = "replicas-not-independent"
    statement = "replica sub-DAGs are independent: no edge between them and no GPU shared between them"
    source = "001 §3.1 (DP branches are independent sub-DAGs)"
    example_bad = "an edge from replica 0's layer 3 to replica 1's layer 4"
    example_good = "two replicas on disjoint GPUs with no edge between them"

    def violations(self, view: DagView) -> Iterator[Diagnostic]:
        for u, v, _ in view.edges:
            ru, rv = view.data[u].get("replica"), view.data[v].get("replica")
            if ru is not None and rv is not None and ru != rv:
                yield self.at(u, f"edge to {v} joins replica {ru} to replica {rv}")
        used: dict[Any, set[Any]] = defaultdict(set)
        for n, d in view.data.items():
            if d.get("replica") is not None and d.get("kind") != NodeKind.REQUEST:
                used[d["replica"]].update(view.ranks(n))
        clash: dict[int, list[Any]] = defaultdict(list)
        reps = sorted(used, key=str)
        for i, a in enumerate(reps):
            for b in reps[i + 1:]:
                for g in used[a] & used[b]:
                    clash[g] += [a, b]
        if clash:
            for n, d in view.data.items():
                shared = [g for g in view.ranks(n) if g in clash] if d.get("kind") != NodeKind.REQUEST else []
                if shared and d.get("replica") is not None:
                    yield self.at(n, f"GPU {shared[0]} serves replicas {sorted(set(map(str, clash[shared[0]])))}")


class PhasesSeparate(DagRule):
    id = "DAG-006"
    name = "phases-not-separate"
    statement = "each replica has one prefill and one decode branch under it, with no edge between them"
    source = "000 §1 (two phases), DESIGN.md (phases are separate top-level branches)"
    example_bad = "an edge from a prefill layer into the decode branch"
    example_good = "replica -> prefill ...; replica -> decode ..."

    def violations(self, view: DagView) -> Iterator[Diagnostic]:
        phases: dict[Any, list[Any]] = defaultdict(list)
        for n in view.by_kind.get(NodeKind.PHASE, []):
            d = view.data[n]
            phases[d.get("replica")].append(d.get("phase"))
            preds = list(view.in_adj[n])
            if len(preds) != 1 or view.kind(preds[0]) != NodeKind.REPLICA:
                yield self.at(n, "a phase branch starts under its Replica and nothing else")
        for n in view.by_kind.get(NodeKind.REPLICA, []):
            r = view.data[n].get("replica")
            if sorted(phases.get(r, [])) != [Phase.DECODE, Phase.PREFILL]:
                yield self.at(
                    n,
                    f"replica {r} has phase branches {sorted(map(str, phases.get(r, [])))}, "
                    "expected decode and prefill",
                )
        for u, v, _ in view.edges:
            pu, pv = view.data[u].get("phase"), view.data[v].get("phase")
            if pu is not None and pv is not None and pu != pv:
                yield self.at(u, f"edge to {v} joins the {pu} branch to the {pv} branch")


class ParallelStages(DagRule):
    id = "DAG-007"
    name = "parallel-pipeline-stages"
    statement = "pipeline stages form one chain: stage 0 follows the branch head, each next stage only its predecessor"
    source = "001 §3.2, 001 §5 (branch PP stages in parallel)"
    example_bad = "the phase node feeding stage 0 and stage 1 side by side"
    example_good = "stage 0 -> send -> stage 1 -> send -> stage 2"

    def violations(self, view: DagView) -> Iterator[Diagnostic]:
        for key, nodes in view.branches.items():
            count: dict[Any, int] = defaultdict(int)
            for n in nodes:
                if view.kind(n) == NodeKind.STAGE:
                    count[view.stage(n)] += 1
            for s, c in count.items():
                if c > 1:
                    yield self.at(None, f"replica {key[0]} {key[1]}: {c} Stage nodes for stage {s}")
            fan: dict[Any, set[Any]] = defaultdict(set)
            for n in nodes:
                s = view.stage(n)
                for v in view.succ(n):
                    t = view.stage(v)
                    if t is None or t == s:
                        continue
                    if s is None and t != 0:
                        yield self.at(v, f"stage {t} is entered from the branch head {n}, in parallel with stage 0")
                    if s is not None:
                        fan[s].add(t)
            for s, targets in fan.items():
                if len(targets) > 1:
                    yield self.at(
                        None, f"replica {key[0]} {key[1]}: stage {s} feeds stages {sorted(targets)} in parallel"
                    )


class CrossStage(DagRule):
    id = "DAG-008"
    name = "cross-stage-dependency"
    statement = (
        "the only edges between stages run from stage s's SendRecv to stage s+1, as pipeline edges; "
        "pipeline edges appear only at a SendRecv"
    )
    source = "000 §4.3 (strict layer order, no backward or cross-stage dependencies), 000 §8.2"
    example_bad = "an edge from stage 1 back into stage 0, or stage 0 feeding stage 1 without a send"
    example_good = "last node of stage 0 =pipeline=> send =pipeline=> stage 1"

    fixable = True  # a SendRecv edge of the wrong kind is relabelled

    def violations(self, view: DagView) -> Iterator[Diagnostic]:
        last = view.layout.pp - 1 if view.layout else None
        for u, v, kind in view.edges:
            ku, kv = view.kind(u), view.kind(v)
            su, sv = view.stage(u), view.stage(v)
            if kind == "sync":
                continue
            if su is not None and sv is not None and su != sv:
                if sv == su + 1 and ku == NodeKind.SEND_RECV and kv == NodeKind.STAGE:
                    if kind != "pipeline":
                        yield self.at(u, f"edge to {v} crosses stages as {kind!r}, not 'pipeline'")
                elif sv < su:
                    yield self.at(u, f"backward edge from stage {su} to stage {sv} ({v})")
                elif sv > su + 1:
                    yield self.at(u, f"edge to {v} skips from stage {su} to stage {sv}")
                else:
                    yield self.at(u, f"edge to {v} crosses from stage {su} to {sv} without a SendRecv")
                continue
            if (ku == NodeKind.SEND_RECV or kv == NodeKind.SEND_RECV) and kind != "pipeline":
                yield self.at(u, f"edge to {v} at a SendRecv is {kind!r}, not 'pipeline'")
            elif kind == "pipeline" and ku != NodeKind.SEND_RECV and kv != NodeKind.SEND_RECV:
                yield self.at(u, f"pipeline edge to {v} touches no SendRecv")
            if kv == NodeKind.TOKEN and su is not None and last is not None and su != last:
                yield self.at(u, f"stage {su} feeds the token directly, skipping the later stages")


class LayerOrder(DagRule):
    id = "DAG-009"
    name = "layer-order-broken"
    statement = "layers run in strict order inside the stage that owns them; every layer appears in every branch"
    source = "000 §4.3 (strict layer order), 001 §3.2 (contiguous layer blocks)"
    example_bad = "layer 7's attention feeding layer 9, or layer 12 on a stage that does not own it"
    example_good = "layer l's last collective -> layer l+1"

    def violations(self, view: DagView) -> Iterator[Diagnostic]:
        owner = view.stage_of_layer
        stages = view.layout.stages if view.layout else ()
        for n, d in view.data.items():
            layer = d.get("layer")
            if layer is None:
                continue
            if layer not in owner:
                yield self.at(n, f"layer {layer} does not exist (the model has {view.num_layers})")
            elif "stage" in d and d["stage"] != owner[layer]:
                yield self.at(n, f"layer {layer} placed on stage {d['stage']}; stage {owner[layer]} owns it")
        for u, v, kind in view.edges:
            if kind == "sync":
                continue
            lu, lv = view.layer(u), view.layer(v)
            if isinstance(lu, int) and isinstance(lv, int):
                if lv - lu not in (0, 1):
                    yield self.at(u, f"edge to {v} goes from layer {lu} to layer {lv}")
            elif isinstance(lu, int) and lu in owner and view.kind(v) in STAGED:
                if lu != stages[owner[lu]][1] - 1:
                    yield self.at(u, f"layer {lu} hands over to {view.kind(v)} {v} before its stage's last layer")
            elif isinstance(lv, int) and lv in owner and view.kind(u) in (NodeKind.STAGE, NodeKind.EMBEDDING):
                if lv != stages[owner[lv]][0]:
                    yield self.at(v, f"stage entry {u} leads into layer {lv}, not the stage's first layer")
        for key, nodes in view.branches.items():
            present = {view.layer(n) for n in nodes if view.kind(n) == NodeKind.ATTENTION}
            missing = [layer for layer in range(view.num_layers) if layer not in present]
            if missing:
                yield self.at(None, f"replica {key[0]} {key[1]}: no attention for layers {_ranges(missing)}")


class EndsPlaced(DagRule):
    id = "DAG-024"
    name = "embedding-or-head-misplaced"
    statement = "each branch has one embedding, on the first stage, and its LM head and sampling on the last stage"
    source = "DESIGN.md (embedding on the first stage, LM head on the last), 002 (embedding_and_lm_head)"
    example_bad = "the LM head on stage 0 of a two-stage pipeline"
    example_good = "stage 0: embedding, layers; stage 1: layers, LM head, sample"

    def violations(self, view: DagView) -> Iterator[Diagnostic]:
        if view.layout is None:
            return
        last = view.layout.pp - 1
        for (r, phase), nodes in view.branches.items():
            found = defaultdict(list)
            for n in nodes:
                if view.kind(n) in (NodeKind.EMBEDDING, NodeKind.LM_HEAD, NodeKind.SAMPLE):
                    found[view.kind(n)].append(n)
            where = f"replica {r} {phase}"
            if len(found[NodeKind.EMBEDDING]) != 1:
                yield self.at(None, f"{where}: {len(found['Embedding'])} Embedding nodes, expected 1")
            if len(found[NodeKind.SAMPLE]) < 1 or not found[NodeKind.LM_HEAD]:
                yield self.at(None, f"{where}: no LM head or sampling node")
            for n in found[NodeKind.EMBEDDING]:
                if view.stage(n) != 0:
                    yield self.at(n, f"embedding on stage {view.stage(n)}, not the first")
            for n in (*found[NodeKind.LM_HEAD], *found[NodeKind.SAMPLE]):
                if view.stage(n) != last:
                    yield self.at(n, f"{view.kind(n)} on stage {view.stage(n)}, not the last ({last})")


class PipelineEdges(DagRule):
    id = "DAG-028"
    name = "pipeline-edge-missing"
    statement = (
        "every stage but the last hands its output to the next through a SendRecv: "
        "stage s =pipeline=> send =pipeline=> stage s+1"
    )
    source = "001 §3.2 (PP stages sequentially connected), 000 §4.3 (explicit inter-stage edges)"
    example_bad = "stage 1 with no edge from stage 0's send"
    example_good = "stage 0 -> send -> stage 1"
    fixable = True

    def violations(self, view: DagView) -> Iterator[Diagnostic]:
        if view.layout is None:
            return
        pp = view.layout.pp
        for (r, phase), nodes in view.branches.items():
            stages, sends = view.stages_and_sends(nodes)
            where = f"replica {r} {phase}"
            for s in range(pp):
                if not stages.get(s):
                    yield self.at(None, f"{where}: stage {s} has no Stage node")
            for s in range(pp - 1):
                if not sends.get(s):
                    yield self.at(None, f"{where}: no SendRecv from stage {s} to stage {s + 1}")
                for x in sends.get(s, []):
                    if not any(view.stage(u) == s for u in view.in_adj[x]):
                        yield self.at(x, f"receives nothing from stage {s}")
                    if not any(view.kind(v) == NodeKind.STAGE and view.stage(v) == s + 1 for v in view.out_adj[x]):
                        yield self.at(x, f"hands nothing to stage {s + 1}")
                for st in stages.get(s + 1, []):
                    if not any(view.kind(u) == NodeKind.SEND_RECV and view.stage(u) == s for u in view.in_adj[st]):
                        yield self.at(st, f"stage {s + 1} is not fed by stage {s}'s SendRecv")
            for s in sends:
                if isinstance(s, int) and s >= pp - 1:
                    for x in sends[s]:
                        yield self.at(x, f"SendRecv after the last stage {pp - 1}")
