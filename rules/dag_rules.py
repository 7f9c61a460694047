"""Rules on the shape of an execution DAG (DESIGN.md "Execution DAG"; 001 §3, §5; 000 §4.3, §5.4, §7).

An execution DAG is a networkx ``DiGraph`` built from a plan (``solver/dag.py``) or read from a file.
Its graph attributes carry the plan's layout, so a file is validated on its own, with no plan at hand.
Each rule here is a small object like the plan rules (an ID, a kebab-case name that names the
violation, a statement, its source, a kind) whose ``check_dag(dag)`` returns diagnostics naming the
rule and the offending node ids. The rules read the schema below; they never import the solver and
never touch CP-SAT. ``DAG_RULES`` lists them all; IDs are never reused.

Schema (one line per attribute; "absent" means "does not apply"):
- node ``kind``: one of ``KINDS``; ``ranks``: global GPU ids; ``est_us``: the cost model's time of the
  node on one of its GPUs; below the Request: ``replica``; below a Replica: ``phase``; inside a stage:
  ``stage``; inside a layer: ``layer`` (and ``layer_kind``); sharded operators: ``tp``/``sp`` degrees
  (logical) or ``group``/``sp_rank``/``tp_rank`` (expanded) and ``rejoin``, the id of the collective
  that joins the shards; Expert nodes: ``ep_rank`` and ``experts`` (expert ids hosted).
- edge ``kind``: ``data`` (activations), ``pipeline`` (into or out of a stage-to-stage SendRecv) or
  ``sync`` (ordering without data: the previous token, KV cache writes, the pipeline round).
- graph: ``schema``, ``detail``, ``layout`` {dp, tp, sp, attn_dp, expert_tp, stages, batch},
  ``num_gpus``, ``num_layers``, ``moe_layers``, ``num_experts``, ``allow``, ``folded``.
"""

from __future__ import annotations

from collections import defaultdict, deque
from functools import cached_property
from typing import Any, Iterable, Iterator, Optional

from shardplan.rules.base import Diagnostic, Kind, Rule
from shardplan.rules.layout import Layout

SCHEMA = "shardplan.dag/1"
DETAILS = ("logical", "expanded")
PHASES = ("prefill", "decode")
EDGE_KINDS = ("data", "pipeline", "sync")

# Request-level and bookkeeping nodes: no tensors of their own.
CONTROL = frozenset({"Request", "Replica", "Phase", "Stage", "PrevToken", "Token", "Round"})
COMPUTE = frozenset({"Embedding", "Layer", "Attention", "FFN", "SharedExpert", "Router", "Expert", "LMHead", "Sample"})
STATE = frozenset({"KVCache", "KVCacheUpdate"})
COLLECTIVE = frozenset({"AllReduce", "AllGather", "ReduceScatter", "AllToAll", "SendRecv"})
KINDS = CONTROL | COMPUTE | STATE | COLLECTIVE
# Kinds that live on one stage, and those that live in one layer.
STAGED = (COMPUTE | STATE | COLLECTIVE | {"Stage"})
LAYERED = frozenset({"Layer", "Attention", "FFN", "SharedExpert", "Router", "Expert", "KVCache", "KVCacheUpdate"})
MOE_KINDS = frozenset({"Router", "Expert", "SharedExpert"})
SP_KINDS = frozenset({"Attention", "KVCache", "KVCacheUpdate"})

MAX_PER_RULE = 25  # diagnostics a rule reports before summarising the rest
MAX_EXPERTS = 1_000_000  # a sanity bound on a file's expert count


# --- reading a graph ---------------------------------------------------------------------------
def graph_schema_problems(dag: Any) -> list[str]:
    """What is wrong with the graph-level attributes; empty when the file can be validated."""
    g = getattr(dag, "graph", None)
    if g is None or not hasattr(dag, "is_directed") or not dag.is_directed():
        return ["not a directed graph"]
    out = []
    if g.get("schema") != SCHEMA:
        out.append(f"graph attribute schema is {g.get('schema')!r}, expected {SCHEMA!r}")
    if g.get("detail") not in DETAILS:
        out.append(f"graph attribute detail is {g.get('detail')!r}, expected one of {', '.join(DETAILS)}")
    layout = _layout_from(g)
    if layout is None:
        out.append("graph attribute layout is missing or not a valid layout")
    for key in ("num_gpus", "num_layers", "num_experts"):
        if not _is_int(g.get(key)) or g[key] < 0:
            out.append(f"graph attribute {key} is missing or not an integer >= 0")
    if out:
        return out
    if g["num_layers"] != layout.num_layers:
        out.append(f"graph attribute num_layers is {g['num_layers']}; the layout's stages hold {layout.num_layers}")
    if g["num_gpus"] != layout.num_gpus:
        out.append(f"graph attribute num_gpus is {g['num_gpus']}; the layout uses {layout.num_gpus}")
    if g["num_experts"] > MAX_EXPERTS:
        out.append(f"graph attribute num_experts is {g['num_experts']}, more than {MAX_EXPERTS:,}")
    moe = g.get("moe_layers")
    if not _ints(moe) or any(not 0 <= x < layout.num_layers for x in moe):
        out.append("graph attribute moe_layers is missing or not a list of the model's layer indices")
    if not isinstance(g.get("allow", []), (list, tuple)):
        out.append("graph attribute allow is not a list of policy switches")
    return out


def _layout_from(g: dict) -> Optional[Layout]:
    data = g.get("layout")
    if not isinstance(data, dict):
        return None
    try:
        fields = {k: data[k] for k in ("dp", "tp", "sp", "attn_dp", "expert_tp", "batch") if k in data}
        return Layout(stages=tuple(tuple(s) for s in data["stages"]), **fields)
    except Exception:  # any malformed layout means "not in the schema", reported by the caller
        return None


def is_sharded(d: dict) -> bool:
    """A node that holds one shard of an operator, or a logical operator split into shards."""
    return "tp_rank" in d or "sp_rank" in d or _int(d.get("tp"), 1) > 1 or _int(d.get("sp"), 1) > 1


def _int(value: Any, default: int) -> int:
    return value if _is_int(value) else default


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _ints(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(_is_int(x) for x in value)


# TYPED[attribute]: what a well-formed value is; rules read only well-formed scope attributes.
TYPED = {
    "kind": lambda v: isinstance(v, str),
    "phase": lambda v: isinstance(v, str),
    "rejoin": lambda v: isinstance(v, str),
    "experts": _ints,
    **{k: _is_int for k in ("replica", "stage", "layer", "group", "tp_rank", "sp_rank", "ep_rank", "tp", "sp",
                           "multiplicity", "new_tokens", "to_stage")},
}


def ok_type(key: str, value: Any) -> bool:
    return TYPED[key](value)


class DagView:
    """One pass of indexing over a DAG, shared by every rule of a check."""

    def __init__(self, dag: Any):
        self.dag = dag
        self.graph = dag.graph
        self.problems = graph_schema_problems(dag)
        self.layout = _layout_from(self.graph)
        allow, moe = self.graph.get("allow"), self.graph.get("moe_layers")
        self.allow = frozenset(x for x in allow if isinstance(x, str)) if isinstance(allow, (list, tuple)) else frozenset()
        self.moe_layers = frozenset(x for x in moe if _is_int(x)) if isinstance(moe, (list, tuple)) else frozenset()
        self.num_layers = _int(self.graph.get("num_layers"), 0)
        self.num_experts = _int(self.graph.get("num_experts"), 0)
        self.num_gpus = _int(self.graph.get("num_gpus"), 0)

    @classmethod
    def of(cls, dag: Any) -> "DagView":
        return dag if isinstance(dag, DagView) else cls(dag)

    # --- indexes ---------------------------------------------------------------------------
    @cached_property
    def data(self) -> dict:
        """Node attributes with every scope attribute of the wrong type left out (the schema rule
        reports those from the raw attributes), so that no rule trips over a malformed file."""
        raw = dict(getattr(self.dag, "_node", None) or self.dag.nodes(data=True))
        for n, d in raw.items():
            if any(k in d and not ok(d[k]) for k, ok in TYPED.items()):
                raw[n] = {k: v for k, v in d.items() if k not in TYPED or ok_type(k, v)}
        return raw

    @cached_property
    def kinds(self) -> dict:
        return {n: d.get("kind") for n, d in self.data.items()}

    @cached_property
    def stages(self) -> dict:
        return {n: d.get("stage") for n, d in self.data.items()}

    @cached_property
    def layers(self) -> dict:
        return {n: d.get("layer") for n, d in self.data.items()}

    @cached_property
    def edges(self) -> list[tuple[Any, Any, Any]]:
        """(u, v, edge kind) of every edge; a kind that is not a string reads as None."""
        return [(u, v, e.get("kind") if isinstance(e.get("kind"), str) else None) for u, v, e in self.dag.edges(data=True)]

    def kind(self, n: Any) -> Any:
        return self.kinds[n]

    @cached_property
    def by_kind(self) -> dict[str, list]:
        out: dict[str, list] = defaultdict(list)
        for n, d in self.data.items():
            out[d.get("kind")].append(n)
        return out

    @cached_property
    def branches(self) -> dict[tuple[Any, Any], list]:
        """(replica, phase) -> nodes of that branch."""
        out: dict[tuple, list] = defaultdict(list)
        for n, d in self.data.items():
            if "phase" in d and "replica" in d:
                out[(d["replica"], d["phase"])].append(n)
        return out

    def branch_of(self, n: Any) -> tuple[Any, Any]:
        d = self.data[n]
        return d.get("replica"), d.get("phase")

    @cached_property
    def acyclic(self) -> bool:
        import networkx as nx

        return nx.is_directed_acyclic_graph(self.dag)

    def edge_kind(self, u: Any, v: Any) -> Any:
        return self.dag.succ[u][v].get("kind")

    @cached_property
    def out_adj(self) -> Any:
        """succ[u][v] -> edge attributes; networkx's own dicts when available (its views are slow)."""
        return getattr(self.dag, "_succ", None) or self.dag.succ

    @cached_property
    def in_adj(self) -> Any:
        return getattr(self.dag, "_pred", None) or self.dag.pred

    def succ(self, n: Any, data_only: bool = True) -> list:
        if not data_only:
            return list(self.out_adj[n])
        return [v for v, e in self.out_adj[n].items() if e.get("kind") != "sync"]

    def pred(self, n: Any, data_only: bool = True) -> list:
        if not data_only:
            return list(self.in_adj[n])
        return [u for u, e in self.in_adj[n].items() if e.get("kind") != "sync"]

    def ranks(self, n: Any) -> frozenset:
        found = self._rank_cache.get(n)
        if found is None:
            r = self.data[n].get("ranks")
            # Builders share one ranks tuple between the nodes of a stage: convert each object once.
            key = id(r)
            hit = self._rank_objects.get(key)
            if hit is None or hit[0] is not r:
                value = frozenset(x for x in r if isinstance(x, int)) if isinstance(r, (list, tuple)) else frozenset()
                hit = self._rank_objects[key] = (r, value)
            found = self._rank_cache[n] = hit[1]
        return found

    @cached_property
    def _rank_cache(self) -> dict:
        return {}

    @cached_property
    def _rank_objects(self) -> dict:
        return {}

    @cached_property
    def stage_of_layer(self) -> dict[int, int]:
        if self.layout is None:
            return {}
        return {layer: s for s, (a, b) in enumerate(self.layout.stages) for layer in range(a, b)}

    def stage(self, n: Any) -> Any:
        return self.stages[n]

    def layer(self, n: Any) -> Any:
        return self.layers[n]

    def span(self, n: Any) -> tuple[int, int]:
        """(lowest, highest) GPU id of a node; (0, -1) without ranks."""
        r = self.ranks(n)
        return (min(r), max(r)) if r else (0, -1)

    def forward(self, starts: Iterable, data_only: bool = False, within: Optional[set] = None) -> set:
        seen = set(starts)
        todo = deque(seen)
        while todo:
            n = todo.popleft()
            for v in self.succ(n, data_only):
                if v not in seen and (within is None or v in within):
                    seen.add(v)
                    todo.append(v)
        return seen

    def backward(self, starts: Iterable, within: Optional[set] = None) -> set:
        seen = set(starts)
        todo = deque(seen)
        while todo:
            n = todo.popleft()
            for u in self.dag.pred[n]:
                if u not in seen and (within is None or u in within):
                    seen.add(u)
                    todo.append(u)
        return seen


# --- the rule objects --------------------------------------------------------------------------
class DagRule(Rule):
    """A rule on a DAG's shape. ``fixable``: ``fix_dag`` has one safe repair for it (002)."""

    fixable = False

    def applies(self, problem: Any) -> bool:  # never posted on a CP-SAT model
        return False

    def applies_to(self, view: DagView) -> bool:
        return not (self.switch and self.switch in view.allow)

    def check_dag(self, dag: Any) -> list[Diagnostic]:
        """Violations of the rule by ``dag`` (a networkx DiGraph in the schema above)."""
        view = DagView.of(dag)
        if not self.applies_to(view):
            return []
        if view.problems and self.id != "DAG-022":
            return []  # without the graph attributes only the schema rule can speak
        out: list[Diagnostic] = []
        for diag in self.violations(view):
            out.append(diag)
            if len(out) > MAX_PER_RULE:
                rest = sum(1 for _ in self.violations(view)) - MAX_PER_RULE
                out[-1] = Diagnostic(self.id, out[-1].severity, f"... and {rest} more like these")
                break
        return out

    def violations(self, view: DagView) -> Iterator[Diagnostic]:
        raise NotImplementedError

    def at(self, node: Any, message: str, hint: Optional[str] = None) -> Diagnostic:
        severity = "warning" if self.kind is Kind.ADVISORY else "error"
        return Diagnostic(self.id, severity, f"{node}: {message}" if node is not None else message, node=node, hint=hint)

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "fixable": self.fixable, "scope": "dag"}


class Acyclic(DagRule):
    id = "DAG-001"
    name = "dag-has-cycle"
    statement = "the execution graph is acyclic: nothing depends on its own result"
    source = "000 §4.3 (no backward dependencies), 002 (validation)"
    example_bad = "an edge from layer 5's all-reduce back to layer 4's attention"
    example_good = "every edge points forward in layer and stage order"

    def violations(self, view):
        if view.acyclic:
            return
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

    def violations(self, view):
        dag = view.dag
        roots = [n for n in dag if dag.in_degree(n) == 0]
        requests = view.by_kind.get("Request", [])
        for n in roots:
            if view.kind(n) != "Request":
                yield self.at(n, f"{view.kind(n)} node has no predecessor (only the Request is a root)")
        if len(requests) != 1:
            yield self.at(None, f"{len(requests)} Request nodes; exactly one is the root")
        reached = view.forward(requests)
        root_set = set(roots)
        fed = COMPUTE | COLLECTIVE | {"KVCacheUpdate"}  # nodes that compute on or move data
        for n in dag:
            if n not in reached and n not in root_set:
                yield self.at(n, "not reachable from the Request (an input edge is missing)")
            elif view.kinds[n] in fed and not view.pred(n):
                yield self.at(n, f"{view.kinds[n]} has no data input (only sync edges lead to it)")
        for key, nodes in view.branches.items():
            tokens = [n for n in nodes if view.kind(n) == "Token"]
            if not tokens:
                continue  # DAG-019 reports the missing token
            members = set(nodes)
            alive = view.backward(tokens, within=members)
            for n in nodes:
                if n not in alive and view.kind(n) != "Phase":
                    yield self.at(n, f"does not lead to the {key[1]} branch's token (an output edge is missing)")


class SplitAtRoot(DagRule):
    id = "DAG-003"
    name = "split-at-root"
    statement = "tensor and sequence parallelism live inside operators of a stage, never at the request level"
    source = "001 §5 (TP or SP at the DAG root), 001 §3.3, §3.5"
    example_bad = "TP shard nodes hanging directly off the Request or a Replica"
    example_good = "request -> replica -> phase -> stage -> layer -> attention shards"

    def violations(self, view):
        top = ("Request", "Replica", "Phase", "PrevToken")
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

    def violations(self, view):
        total = 0
        for n in view.by_kind.get("Replica", []):
            preds = list(view.in_adj[n])
            if not preds or any(view.kind(u) != "Request" for u in preds):
                yield self.at(n, "replica fan-out below the root (predecessors: " + ", ".join(map(str, preds)) + ")")
            total += _int(view.data[n].get("multiplicity"), 1)
        for n in view.by_kind.get("Request", []):
            for v in view.out_adj[n]:
                if view.kind(v) != "Replica":
                    yield self.at(v, f"the Request fans out to a {view.kind(v)}, not a Replica")
        for n, d in view.data.items():
            if "multiplicity" in d and d.get("kind") != "Replica":
                yield self.at(n, f"{d.get('kind')} carries a replication multiplicity; only replicas replicate")
        if view.layout is not None and view.by_kind.get("Replica") and total != view.layout.dp:
            yield self.at(None, f"replicas add up to {total}; the plan has dp={view.layout.dp}")


class ReplicasIndependent(DagRule):
    id = "DAG-005"
    name = "replicas-not-independent"
    statement = "replica sub-DAGs are independent: no edge between them and no GPU shared between them"
    source = "001 §3.1 (DP branches are independent sub-DAGs)"
    example_bad = "an edge from replica 0's layer 3 to replica 1's layer 4"
    example_good = "two replicas on disjoint GPUs with no edge between them"

    def violations(self, view):
        for u, v, _ in view.edges:
            ru, rv = view.data[u].get("replica"), view.data[v].get("replica")
            if ru is not None and rv is not None and ru != rv:
                yield self.at(u, f"edge to {v} joins replica {ru} to replica {rv}")
        used: dict[Any, set] = defaultdict(set)
        for n, d in view.data.items():
            if d.get("replica") is not None and d.get("kind") != "Request":
                used[d["replica"]].update(view.ranks(n))
        clash: dict[int, list] = defaultdict(list)
        reps = sorted(used, key=str)
        for i, a in enumerate(reps):
            for b in reps[i + 1:]:
                for g in used[a] & used[b]:
                    clash[g] += [a, b]
        if clash:
            for n, d in view.data.items():
                shared = [g for g in view.ranks(n) if g in clash] if d.get("kind") != "Request" else []
                if shared and d.get("replica") is not None:
                    yield self.at(n, f"GPU {shared[0]} serves replicas {sorted(set(map(str, clash[shared[0]])))}")


class PhasesSeparate(DagRule):
    id = "DAG-006"
    name = "phases-not-separate"
    statement = "each replica has one prefill and one decode branch under it, with no edge between them"
    source = "000 §1 (two phases), DESIGN.md (phases are separate top-level branches)"
    example_bad = "an edge from a prefill layer into the decode branch"
    example_good = "replica -> prefill ...; replica -> decode ..."

    def violations(self, view):
        phases: dict[Any, list] = defaultdict(list)
        for n in view.by_kind.get("Phase", []):
            d = view.data[n]
            phases[d.get("replica")].append(d.get("phase"))
            preds = list(view.in_adj[n])
            if len(preds) != 1 or view.kind(preds[0]) != "Replica":
                yield self.at(n, "a phase branch starts under its Replica and nothing else")
        for n in view.by_kind.get("Replica", []):
            r = view.data[n].get("replica")
            if sorted(phases.get(r, [])) != ["decode", "prefill"]:
                yield self.at(n, f"replica {r} has phase branches {sorted(map(str, phases.get(r, [])))}, expected decode and prefill")
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

    def violations(self, view):
        for key, nodes in view.branches.items():
            count: dict[Any, int] = defaultdict(int)
            for n in nodes:
                if view.kind(n) == "Stage":
                    count[view.stage(n)] += 1
            for s, c in count.items():
                if c > 1:
                    yield self.at(None, f"replica {key[0]} {key[1]}: {c} Stage nodes for stage {s}")
            fan: dict[Any, set] = defaultdict(set)
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
                    yield self.at(None, f"replica {key[0]} {key[1]}: stage {s} feeds stages {sorted(targets)} in parallel")


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

    def violations(self, view):
        last = view.layout.pp - 1 if view.layout else None
        for u, v, kind in view.edges:
            ku, kv = view.kind(u), view.kind(v)
            su, sv = view.stage(u), view.stage(v)
            if kind == "sync":
                continue
            if su is not None and sv is not None and su != sv:
                if sv == su + 1 and ku == "SendRecv" and kv == "Stage":
                    if kind != "pipeline":
                        yield self.at(u, f"edge to {v} crosses stages as {kind!r}, not 'pipeline'")
                elif sv < su:
                    yield self.at(u, f"backward edge from stage {su} to stage {sv} ({v})")
                elif sv > su + 1:
                    yield self.at(u, f"edge to {v} skips from stage {su} to stage {sv}")
                else:
                    yield self.at(u, f"edge to {v} crosses from stage {su} to {sv} without a SendRecv")
                continue
            if (ku == "SendRecv" or kv == "SendRecv") and kind != "pipeline":
                yield self.at(u, f"edge to {v} at a SendRecv is {kind!r}, not 'pipeline'")
            elif kind == "pipeline" and ku != "SendRecv" and kv != "SendRecv":
                yield self.at(u, f"pipeline edge to {v} touches no SendRecv")
            if kv == "Token" and su is not None and last is not None and su != last:
                yield self.at(u, f"stage {su} feeds the token directly, skipping the later stages")


class LayerOrder(DagRule):
    id = "DAG-009"
    name = "layer-order-broken"
    statement = "layers run in strict order inside the stage that owns them; every layer appears in every branch"
    source = "000 §4.3 (strict layer order), 001 §3.2 (contiguous layer blocks)"
    example_bad = "layer 7's attention feeding layer 9, or layer 12 on a stage that does not own it"
    example_good = "layer l's last collective -> layer l+1"

    def violations(self, view):
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
            elif isinstance(lv, int) and lv in owner and view.kind(u) in ("Stage", "Embedding"):
                if lv != stages[owner[lv]][0]:
                    yield self.at(v, f"stage entry {u} leads into layer {lv}, not the stage's first layer")
        for key, nodes in view.branches.items():
            present = {view.layer(n) for n in nodes if view.kind(n) == "Attention"}
            missing = [layer for layer in range(view.num_layers) if layer not in present]
            if missing:
                yield self.at(None, f"replica {key[0]} {key[1]}: no attention for layers {_ranges(missing)}")


class TpRejoins(DagRule):
    id = "DAG-010"
    name = "tp-not-rejoined"
    statement = "the shards of a tensor- or sequence-parallel operator rejoin at an explicit collective before anything else reads them"
    source = "001 §3.3 (TP branches re-converge), 001 §4.4, 000 §7.3"
    example_bad = "attention shards feeding the FFN directly, the all-reduce removed"
    example_good = "attention shards -> all-reduce -> FFN"
    fixable = True  # a missing collective, or a missing edge into it, is restored

    def violations(self, view):
        for n, d in view.data.items():
            kind = d.get("kind")
            if kind in COLLECTIVE or (kind == "Expert" and not is_sharded(d)):
                # partial joins (sequence exchange, expert all-reduce) and whole experts name the
                # collective that completes them
                if isinstance(d.get("rejoin"), str) and d["rejoin"] not in view.succ(n):
                    yield self.at(n, f"partial result does not reach {d['rejoin']}, the collective that completes it")
                continue
            if kind in STATE or kind in COLLECTIVE or kind in CONTROL or not is_sharded(d):
                continue
            outs = list(view.succ(n))
            joined = [v for v in outs if view.kind(v) in COLLECTIVE]
            stray = [v for v in outs if view.kind(v) not in COLLECTIVE and view.kind(v) != "KVCacheUpdate"]
            named = d.get("rejoin")
            if not joined:
                yield self.at(n, "shard output reaches no collective" + (f" (feeds {stray[0]} directly)" if stray else ""))
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

    def violations(self, view):
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

    def violations(self, view):
        for n, d in view.data.items():
            kind = d.get("kind")
            if kind in MOE_KINDS or kind == "AllToAll" or "experts" in d or "ep_rank" in d:
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

    def violations(self, view):
        for n in (*view.by_kind.get("Expert", []), *view.by_kind.get("Router", [])):
            for u in view.pred(n):
                du = view.data[u]
                if du.get("kind") not in COLLECTIVE and du.get("kind") != "Router" and is_sharded(du):
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

    def violations(self, view):
        if view.layout is None or not view.num_experts:
            return
        ep, etp = view.layout.ep, view.layout.expert_tp
        per_rank = etp if view.graph.get("detail") == "expanded" else 1
        groups: dict[tuple, list] = defaultdict(list)
        for n in view.by_kind.get("Expert", []):
            d = view.data[n]
            groups[(d.get("replica"), d.get("phase"), d.get("layer"))].append(n)
        for (r, phase, layer), nodes in groups.items():
            where = f"replica {r} {phase} layer {layer}"
            by_rank: dict[Any, list] = defaultdict(list)
            hosted: set = set()
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
                yield self.at(None, f"{where}: {len(by_rank)} EP ranks {sorted(map(str, by_rank))[:6]}; the plan has ep={ep}")
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

    def violations(self, view):
        for n, d in view.data.items():
            if ("sp_rank" in d or _int(d.get("sp"), 1) > 1) and d.get("kind") not in SP_KINDS:
                yield self.at(n, f"{d.get('kind')} carries a sequence split")


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

    def violations(self, view):
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
    statement = "in decode every attention node reads the KV cache on its GPUs, and that cache depends on the previous token"
    source = "000 §7.2 (explicit KV cache dependencies)"
    example_bad = "a decode attention node with no KVCache predecessor"
    example_good = "previous token -> KV cache -> attention"
    fixable = True

    def violations(self, view):
        for n in view.by_kind.get("Attention", []):
            d = view.data[n]
            if d.get("phase") != "decode":
                continue
            caches = [u for u in view.in_adj[n] if view.kind(u) == "KVCache"]
            if not caches:
                yield self.at(n, "decode attention reads no KV cache")
            elif not any(view.ranks(n) <= view.ranks(u) and view.layer(u) == d.get("layer") for u in caches):
                yield self.at(n, f"KV cache {caches[0]} is not this layer's cache on these GPUs")
        for n in view.by_kind.get("KVCache", []):
            if not any(view.kind(u) == "PrevToken" for u in view.in_adj[n]):
                yield self.at(n, "KV cache does not depend on the previous token")
            if not any(view.kind(v) == "Attention" for v in view.out_adj[n]):
                yield self.at(n, "KV cache read by no attention node")


class KvUpdate(DagRule):
    id = "DAG-018"
    name = "kv-update-missing"
    statement = "every attention node is followed by a KV cache update on its GPUs, which the step's token waits for"
    source = "000 §7.2, 000 §8.1 (KV cache update node), DESIGN.md"
    example_bad = "an attention node with no KVCacheUpdate successor"
    example_good = "attention -> KV cache update -> token"
    fixable = True

    def violations(self, view):
        for n in view.by_kind.get("Attention", []):
            ups = [v for v in view.out_adj[n] if view.kind(v) == "KVCacheUpdate"]
            if not ups:
                yield self.at(n, "attention writes no KV cache update")
            elif not any(view.ranks(n) <= view.ranks(v) and view.layer(v) == view.layer(n) for v in ups):
                yield self.at(n, f"KV cache update {ups[0]} is not this layer's on these GPUs")
        for n in view.by_kind.get("KVCacheUpdate", []):
            if not any(view.kind(v) == "Token" for v in view.out_adj[n]):
                yield self.at(n, "the step's token does not wait for this KV cache update")
            if not any(view.kind(u) == "Attention" for u in view.in_adj[n]):
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

    def violations(self, view):
        for (r, phase), nodes in view.branches.items():
            kinds = defaultdict(list)
            for n in nodes:
                kinds[view.kind(n)].append(n)
            if not kinds["Token"]:
                yield self.at(None, f"replica {r} {phase}: no Token node ends the branch")
            for t in kinds["Token"]:
                if view.dag.out_degree(t):
                    yield self.at(t, "the token feeds " + ", ".join(map(str, list(view.out_adj[t])[:3])) + " in its own step")
            if phase != "decode":
                for n in kinds["PrevToken"]:
                    yield self.at(n, "a previous-token node in a prefill branch")
                continue
            if not kinds["PrevToken"]:
                yield self.at(None, f"replica {r} decode: no PrevToken node (token t+1 must follow token t)")
                continue
            after = view.forward(kinds["PrevToken"], within=set(nodes))
            for n in nodes:
                if n not in after and view.kind(n) != "Phase":
                    yield self.at(n, "does not follow the previous token's completion")


class SingleTokenStep(DagRule):
    id = "DAG-020"
    name = "multi-token-step"
    statement = "a decode branch is one token step: one previous token, one new token, new_tokens = 1"
    source = "000 §7.4 (no cross-token parallelism), 000 §4.2.2"
    example_bad = "a decode phase with new_tokens 4, or two Token nodes in one decode branch"
    example_good = "one PrevToken, one Token, new_tokens 1"

    def violations(self, view):
        for (r, phase), nodes in view.branches.items():
            if phase != "decode":
                continue
            tokens = [n for n in nodes if view.kind(n) == "Token"]
            prevs = [n for n in nodes if view.kind(n) == "PrevToken"]
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

    def violations(self, view):
        lay = view.layout
        n_gpus = view.num_gpus
        if lay is not None and n_gpus != lay.num_gpus:
            yield self.at(None, f"graph says {n_gpus} GPUs; its layout uses {lay.num_gpus}")
        for n, d in view.data.items():
            ranks = d.get("ranks")
            if not isinstance(ranks, (list, tuple)) or not ranks:
                continue  # DAG-022
            bad = [g for g in ranks if not isinstance(g, int) or not 0 <= g < n_gpus]
            if bad or len(set(ranks)) != len(ranks):
                yield self.at(n, f"ranks {list(ranks)[:8]} outside the plan's GPUs 0..{n_gpus - 1} or repeated")
                continue
            if lay is None:
                continue
            yield from self._placed(view, lay, n, d)

    def _placed(self, view, lay, n, d):
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
        if d.get("kind") == "SendRecv" and s + 1 < lay.pp:
            top = lay.stage_gpus(r, s + 1).stop  # stages of a replica are consecutive runs of ids
        if lo < stage.start or hi >= top:
            yield self.at(n, f"ranks {sorted(view.ranks(n))[:8]} outside replica {r} stage {s}'s GPUs {stage.start}-{stage.stop - 1}")
            return
        expected = _expected_ranks(lay, d, stage, r, s)
        if expected is not None and view.ranks(n) != expected:
            yield self.at(n, f"ranks {sorted(view.ranks(n))[:8]}; the layout puts this {d.get('kind')} on {sorted(expected)[:8]}")


def _expected_ranks(lay: Layout, d: dict, stage: range, r: int, s: int) -> Optional[frozenset]:
    """The GPUs the layout's numbering gives a shard or an Expert node; None when it has no fixed place."""
    kind = d.get("kind")
    try:
        if kind == "Expert" and isinstance(d.get("ep_rank"), int):
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
    statement = "nodes and edges carry the schema's attributes: a known kind, ranks, est_us, and the scope their kind needs"
    source = "DESIGN.md (Execution DAG: node and edge attributes), 000 §8"
    example_bad = "a node of kind 'Magic', a node without est_us, an edge of kind 'control'"
    example_good = "kind=Attention ranks=[0, 1] est_us=12.5 replica=0 phase=decode stage=0 layer=3"

    def violations(self, view):
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
            if kind != "Request" and not isinstance(d.get("replica"), int):
                yield self.at(n, "replica missing")
            if kind not in ("Request", "Replica") and d.get("phase") not in PHASES:
                yield self.at(n, f"phase is {d.get('phase')!r}")
            if kind in STAGED and not isinstance(d.get("stage"), int):
                yield self.at(n, f"{kind} without a stage")
            if kind in LAYERED and "layer" not in d:
                yield self.at(n, f"{kind} without a layer")
        for u, v, kind in view.edges:
            if kind not in EDGE_KINDS:
                yield self.at(u, f"edge to {v} has kind {kind!r}, not one of {', '.join(EDGE_KINDS)}")


class NoTpInsideExpertNodes(DagRule):
    id = "DAG-023"
    name = "tp-inside-expert"
    statement = "an Expert node is not tensor-parallel unless the policy allows it (--allow expert-tp)"
    source = "001 §3.4 (TP inside experts disallowed by default), 003 §2.4; 000 §6.2.3 allows it"
    kind = Kind.DEFAULT
    switch = "expert-tp"
    example_bad = "Expert nodes with tp_rank 0 and 1 in a plan without --allow expert-tp"
    example_good = "one Expert node per GPU, each hosting whole experts"

    def violations(self, view):
        for n in view.by_kind.get("Expert", []):
            d = view.data[n]
            if "tp_rank" in d or _int(d.get("tp"), 1) > 1:
                yield self.at(n, "tensor-parallel expert without the expert-tp policy")


class EndsPlaced(DagRule):
    id = "DAG-024"
    name = "embedding-or-head-misplaced"
    statement = "each branch has one embedding, on the first stage, and its LM head and sampling on the last stage"
    source = "DESIGN.md (embedding on the first stage, LM head on the last), 002 (embedding_and_lm_head)"
    example_bad = "the LM head on stage 0 of a two-stage pipeline"
    example_good = "stage 0: embedding, layers; stage 1: layers, LM head, sample"

    def violations(self, view):
        if view.layout is None:
            return
        last = view.layout.pp - 1
        for (r, phase), nodes in view.branches.items():
            found = defaultdict(list)
            for n in nodes:
                if view.kind(n) in ("Embedding", "LMHead", "Sample"):
                    found[view.kind(n)].append(n)
            where = f"replica {r} {phase}"
            if len(found["Embedding"]) != 1:
                yield self.at(None, f"{where}: {len(found['Embedding'])} Embedding nodes, expected 1")
            if len(found["Sample"]) < 1 or not found["LMHead"]:
                yield self.at(None, f"{where}: no LM head or sampling node")
            for n in found["Embedding"]:
                if view.stage(n) != 0:
                    yield self.at(n, f"embedding on stage {view.stage(n)}, not the first")
            for n in (*found["LMHead"], *found["Sample"]):
                if view.stage(n) != last:
                    yield self.at(n, f"{view.kind(n)} on stage {view.stage(n)}, not the last ({last})")


class CollectiveSpan(DagRule):
    id = "DAG-025"
    name = "collective-ranks-mismatch"
    statement = "a collective spans every GPU whose data it joins and every GPU it hands the result to"
    source = "000 §3.3-§5.3 (collectives join the shards of a group), 001 §3.3"
    example_bad = "an all-reduce on GPU 0 alone joining shards on GPUs 0-7"
    example_good = "an all-reduce on GPUs 0-7 after shards on GPUs 0-7"

    def violations(self, view):
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
    statement = "expert branches stay apart until their computation ends: an Expert node feeds only the combine collectives"
    source = "001 §3.4 (EP branches do not rejoin until after expert computation)"
    example_bad = "Expert 3 feeding Expert 4"
    example_good = "each Expert -> combine"

    def violations(self, view):
        single = view.layout is not None and view.layout.gpus_per_stage == 1
        for n in view.by_kind.get("Expert", []):
            for v in view.succ(n):
                if view.kind(v) == "Expert":
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

    def violations(self, view):
        if view.layout is None:
            return
        lay = view.layout
        layers: dict[tuple, dict] = defaultdict(lambda: defaultdict(list))
        for kind in ("Router", "Expert"):
            for n in view.by_kind.get(kind, []):
                d = view.data[n]
                layers[(d.get("replica"), d.get("phase"), d.get("layer"))][kind].append(n)
        for key, nodes in view.branches.items():
            moe = {view.layer(n) for n in nodes if view.kind(n) == "Layer" and view.layer(n) in view.moe_layers}
            for layer in moe:
                found = layers.get((key[0], key[1], layer), {})
                if not found.get("Router") or not found.get("Expert"):
                    yield self.at(None, f"replica {key[0]} {key[1]} MoE layer {layer} lacks a router or its experts")
        dispatch_needed = lay.attn_dp > 1
        routed: dict = {}  # routed[all-to-all]: whether a router feeds it

        def from_router(u: Any) -> bool:
            if u not in routed:
                routed[u] = any(view.kinds[w] == "Router" for w in view.pred(u))
            return routed[u]

        for n in view.by_kind.get("AllToAll", []):
            if from_router(n):
                for v in view.succ(n):
                    if view.kinds[v] != "Expert":
                        yield self.at(n, f"the dispatch after the router feeds {view.kinds[v]} {v}, not an expert")
        for n in view.by_kind.get("Expert", []):
            preds = list(view.pred(n))
            fed = False
            for u in preds:
                ku = view.kind(u)
                if ku == "Router" and not dispatch_needed:
                    fed = True
                elif ku == "AllToAll" and from_router(u):
                    fed = True
            if not fed:
                how = "an all-to-all dispatch after the router" if dispatch_needed else "a router"
                yield self.at(n, f"expert not fed by {how}")
            layer = view.layers[n]
            if lay.gpus_per_stage > 1 and not any(
                view.kinds[v] in COLLECTIVE and view.kinds[v] != "SendRecv" and view.layers[v] == layer for v in view.succ(n)
            ):
                yield self.at(n, "expert output is combined by no collective of its layer")


class PipelineEdges(DagRule):
    id = "DAG-028"
    name = "pipeline-edge-missing"
    statement = "every stage but the last hands its output to the next through a SendRecv: stage s =pipeline=> send =pipeline=> stage s+1"
    source = "001 §3.2 (PP stages sequentially connected), 000 §4.3 (explicit inter-stage edges)"
    example_bad = "stage 1 with no edge from stage 0's send"
    example_good = "stage 0 -> send -> stage 1"
    fixable = True

    def violations(self, view):
        if view.layout is None:
            return
        pp = view.layout.pp
        for (r, phase), nodes in view.branches.items():
            stages: dict[Any, list] = defaultdict(list)
            sends: dict[Any, list] = defaultdict(list)
            for n in nodes:
                if view.kind(n) == "Stage":
                    stages[view.stage(n)].append(n)
                elif view.kind(n) == "SendRecv":
                    sends[view.stage(n)].append(n)
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
                    if not any(view.kind(v) == "Stage" and view.stage(v) == s + 1 for v in view.out_adj[x]):
                        yield self.at(x, f"hands nothing to stage {s + 1}")
                for st in stages.get(s + 1, []):
                    if not any(view.kind(u) == "SendRecv" and view.stage(u) == s for u in view.in_adj[st]):
                        yield self.at(st, f"stage {s + 1} is not fed by stage {s}'s SendRecv")
            for s in sends:
                if isinstance(s, int) and s >= pp - 1:
                    for x in sends[s]:
                        yield self.at(x, f"SendRecv after the last stage {pp - 1}")


class CriticalPath(DagRule):
    id = "DAG-029"
    name = "critical-path-mismatch"
    statement = "the longest path of each branch (sum of est_us) matches the plan's TTFT (prefill) and TPOT (decode) within 1 %"
    source = "004 §6 (critical path), DESIGN.md (Cost model)"
    kind = Kind.ADVISORY
    example_bad = "a decode branch whose longest path is 12 ms for a plan with TPOT 10 ms"
    example_good = "decode longest path = TPOT"

    def violations(self, view):
        if not view.acyclic:
            return
        for (r, phase), nodes in view.branches.items():
            want = view.graph.get("ttft_us" if phase == "prefill" else "tpot_us")
            if not isinstance(want, (int, float)) or want <= 0:
                continue
            got = longest_path_us(view.dag, nodes)[0]
            if abs(got - want) > 0.01 * want:
                yield self.at(None, f"replica {r} {phase}: longest path {got:.1f} us, the plan predicts {want:.1f} us")


def longest_path_us(dag: Any, nodes: Iterable) -> tuple[float, list]:
    """Longest path (sum of est_us of its nodes) through the subgraph on ``nodes``, and the path.
    Assumes that subgraph is acyclic (Kahn's order; nodes on a cycle are left out)."""
    members = set(nodes)
    succ = getattr(dag, "_succ", None) or dag.succ
    pred = getattr(dag, "_pred", None) or dag.pred
    attrs = getattr(dag, "_node", None) or dag.nodes
    indeg = {n: sum(1 for u in pred[n] if u in members) for n in members}
    todo = deque(n for n, k in indeg.items() if k == 0)
    best: dict = {}
    back: dict = {}
    while todo:
        n = todo.popleft()
        est = attrs[n].get("est_us", 0.0)
        est = est if isinstance(est, (int, float)) and not isinstance(est, bool) else 0.0
        top, arg = 0.0, None
        for u in pred[n]:
            if u in best and (arg is None or best[u] > top):
                top, arg = best[u], u
        best[n] = top + est
        back[n] = arg
        for v in succ[n]:
            if v in indeg:
                indeg[v] -= 1
                if indeg[v] == 0:
                    todo.append(v)
    if not best:
        return 0.0, []
    end = max(best, key=best.get)
    path = [end]
    while back.get(path[-1]) is not None:
        path.append(back[path[-1]])
    return best[end], path[::-1]


def _ranges(values: list[int]) -> str:
    """[1, 2, 3, 7] -> '1-3, 7'."""
    out, start = [], None
    for i, v in enumerate(values):
        if start is None:
            start = v
        if i + 1 == len(values) or values[i + 1] != v + 1:
            out.append(f"{start}-{v}" if v != start else f"{v}")
            start = None
    return ", ".join(out[:8]) + (", ..." if len(out) > 8 else "")


DAG_RULES: tuple[DagRule, ...] = (
    Acyclic(),
    SingleRoot(),
    SplitAtRoot(),
    DataParallelAtRoot(),
    ReplicasIndependent(),
    PhasesSeparate(),
    ParallelStages(),
    CrossStage(),
    LayerOrder(),
    TpRejoins(),
    TpWithinLayer(),
    EpInsideMoe(),
    EpNotInsideTp(),
    EpPartitions(),
    SpInsideAttention(),
    NoHiddenCommunication(),
    KvRead(),
    KvUpdate(),
    TokenOrder(),
    SingleTokenStep(),
    RanksInPlan(),
    Schema(),
    NoTpInsideExpertNodes(),
    EndsPlaced(),
    CollectiveSpan(),
    ExpertsRejoinAfterCompute(),
    MoeDecomposed(),
    PipelineEdges(),
    CriticalPath(),
)



__all__ = ["DAG_RULES", "DagRule", "DagView", "graph_schema_problems", "is_sharded", "longest_path_us"]
