"""The execution DAG's schema and a read-only view of a graph that the DAG rules share.

See ``rules/dag/catalog.py`` for the schema; this module holds its constants, the typed readers of node and
graph attributes, ``DagView`` (indexes built once per check) and ``DagRule``, the rules' base class.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Iterable, Iterator
from functools import cached_property
from typing import Any

from shardplan.rules.base import Diagnostic, Kind, Rule
from shardplan.rules.layout import Layout
from shardplan.rules.operators import Phase, StrEnum

SCHEMA = "shardplan.dag/1"
DETAILS = ("logical", "expanded")
PHASES = tuple(Phase)
EDGE_KINDS = ("data", "pipeline", "sync")


class NodeKind(StrEnum):
    """A node's ``kind``: what it stands for in the step (docs/dag.md)."""

    REQUEST = "Request"
    REPLICA = "Replica"
    PHASE = "Phase"
    STAGE = "Stage"
    PREV_TOKEN = "PrevToken"  # completion of the previous token (decode)
    TOKEN = "Token"
    ROUND = "Round"  # a decode round with several microbatches in flight
    EMBEDDING = "Embedding"
    LAYER = "Layer"  # the layer's fixed overhead
    ATTENTION = "Attention"
    FFN = "FFN"
    SHARED_EXPERT = "SharedExpert"
    ROUTER = "Router"
    EXPERT = "Expert"
    LM_HEAD = "LMHead"
    SAMPLE = "Sample"
    KV_CACHE = "KVCache"
    KV_CACHE_UPDATE = "KVCacheUpdate"
    ALL_REDUCE = "AllReduce"
    ALL_GATHER = "AllGather"
    REDUCE_SCATTER = "ReduceScatter"
    ALL_TO_ALL = "AllToAll"
    SEND_RECV = "SendRecv"


# Request-level and bookkeeping nodes: no tensors of their own.
CONTROL = frozenset({
    NodeKind.REQUEST, NodeKind.REPLICA, NodeKind.PHASE, NodeKind.STAGE, NodeKind.PREV_TOKEN, NodeKind.TOKEN,
    NodeKind.ROUND,
})
COMPUTE = frozenset({
    NodeKind.EMBEDDING, NodeKind.LAYER, NodeKind.ATTENTION, NodeKind.FFN, NodeKind.SHARED_EXPERT, NodeKind.ROUTER,
    NodeKind.EXPERT, NodeKind.LM_HEAD, NodeKind.SAMPLE,
})
STATE = frozenset({NodeKind.KV_CACHE, NodeKind.KV_CACHE_UPDATE})
COLLECTIVE = frozenset({
    NodeKind.ALL_REDUCE, NodeKind.ALL_GATHER, NodeKind.REDUCE_SCATTER, NodeKind.ALL_TO_ALL, NodeKind.SEND_RECV,
})
KINDS = frozenset(NodeKind)
# Kinds that live on one stage, and those that live in one layer.
STAGED = COMPUTE | STATE | COLLECTIVE | {NodeKind.STAGE}
LAYERED = frozenset({
    NodeKind.LAYER, NodeKind.ATTENTION, NodeKind.FFN, NodeKind.SHARED_EXPERT, NodeKind.ROUTER, NodeKind.EXPERT,
    NodeKind.KV_CACHE, NodeKind.KV_CACHE_UPDATE,
})
MOE_KINDS = frozenset({NodeKind.ROUTER, NodeKind.EXPERT, NodeKind.SHARED_EXPERT})
SP_KINDS = frozenset({NodeKind.ATTENTION, NodeKind.KV_CACHE, NodeKind.KV_CACHE_UPDATE})

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
        if not is_int(g.get(key)) or g[key] < 0:
            out.append(f"graph attribute {key} is missing or not an integer >= 0")
    if out or layout is None:  # layout is None only when out already says so
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
    out.extend(_stated_problems(g, layout))
    return out


def _stated_problems(g: dict[Any, Any], layout: Layout) -> list[str]:
    """``degrees`` and ``cluster_gpus`` are optional (validation reads the layout), but scripts read them: where
    given they must say what the layout says (a dense model's ep is 1) and the cluster must hold the layout."""
    out = []
    degrees = g.get("degrees")
    if degrees is not None:
        expected = {**layout.degrees(), **({"ep": 1} if g["num_experts"] == 0 else {})}
        if not isinstance(degrees, dict) or set(degrees) - set(expected):
            out.append(f"graph attribute degrees is not an object of the degrees {', '.join(expected)}")
        else:
            wrong = [k for k, v in degrees.items() if not is_int(v) or v != expected[k]]
            if wrong:
                k = wrong[0]
                out.append(f"graph attribute degrees.{k} is {degrees[k]!r}; the layout's is {expected[k]}")
    gpus = g.get("cluster_gpus")
    if gpus is not None and (not is_int(gpus) or gpus < layout.num_gpus):
        out.append(f"graph attribute cluster_gpus is {gpus!r}; the layout uses {layout.num_gpus} GPUs")
    return out


def _layout_from(g: dict[Any, Any]) -> Layout | None:
    data = g.get("layout")
    if not isinstance(data, dict):
        return None
    try:
        fields = {k: data[k] for k in ("dp", "tp", "sp", "attn_dp", "expert_tp", "batch") if k in data}
        return Layout(stages=tuple(tuple(s) for s in data["stages"]), **fields)
    except Exception:  # any malformed layout means "not in the schema", reported by the caller
        return None


def is_sharded(d: dict[Any, Any]) -> bool:
    """A node that holds one shard of an operator, or a logical operator split into shards."""
    return "tp_rank" in d or "sp_rank" in d or _int(d.get("tp"), 1) > 1 or _int(d.get("sp"), 1) > 1


def _int(value: Any, default: int) -> int:
    return value if is_int(value) else default


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _ints(value: Any) -> bool:
    return isinstance(value, (list, tuple)) and all(is_int(x) for x in value)


# TYPED[attribute]: what a well-formed value is; rules read only well-formed scope attributes.
TYPED = {
    "kind": lambda v: isinstance(v, str),
    "phase": lambda v: isinstance(v, str),
    "rejoin": lambda v: isinstance(v, str),
    "experts": _ints,
    **{k: is_int for k in ("replica", "stage", "layer", "group", "tp_rank", "sp_rank", "ep_rank", "tp", "sp",
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
        self.allow = (
            frozenset(x for x in allow if isinstance(x, str)) if isinstance(allow, (list, tuple)) else frozenset()
        )
        self.moe_layers = frozenset(x for x in moe if is_int(x)) if isinstance(moe, (list, tuple)) else frozenset()
        self.num_layers = _int(self.graph.get("num_layers"), 0)
        self.num_experts = _int(self.graph.get("num_experts"), 0)
        self.num_gpus = _int(self.graph.get("num_gpus"), 0)

    @classmethod
    def of(cls, dag: Any) -> DagView:
        return dag if isinstance(dag, DagView) else cls(dag)

    # --- indexes ---------------------------------------------------------------------------
    @cached_property
    def data(self) -> dict[Any, Any]:
        """Node attributes with every scope attribute of the wrong type left out (the schema rule
        reports those from the raw attributes), so that no rule trips over a malformed file."""
        raw = dict(getattr(self.dag, "_node", None) or self.dag.nodes(data=True))
        for n, d in raw.items():
            if any(k in d and not ok(d[k]) for k, ok in TYPED.items()):
                raw[n] = {k: v for k, v in d.items() if k not in TYPED or ok_type(k, v)}
        return raw

    @cached_property
    def kinds(self) -> dict[Any, Any]:
        return {n: d.get("kind") for n, d in self.data.items()}

    @cached_property
    def stages(self) -> dict[Any, Any]:
        return {n: d.get("stage") for n, d in self.data.items()}

    @cached_property
    def layers(self) -> dict[Any, Any]:
        return {n: d.get("layer") for n, d in self.data.items()}

    @cached_property
    def edges(self) -> list[tuple[Any, Any, Any]]:
        """(u, v, edge kind) of every edge; a kind that is not a string reads as None."""
        return [
            (u, v, e.get("kind") if isinstance(e.get("kind"), str) else None) for u, v, e in self.dag.edges(data=True)
        ]

    def stages_and_sends(self, nodes: Iterable[Any]) -> tuple[dict[Any, Any], dict[Any, Any]]:
        """A branch's Stage nodes and its stage-to-stage SendRecv nodes, each by stage index."""
        stages: dict[Any, list[Any]] = defaultdict(list)
        sends: dict[Any, list[Any]] = defaultdict(list)
        for n in nodes:
            if self.kind(n) == NodeKind.STAGE:
                stages[self.stage(n)].append(n)
            elif self.kind(n) == NodeKind.SEND_RECV:
                sends[self.stage(n)].append(n)
        return stages, sends

    def kind(self, n: Any) -> Any:
        return self.kinds[n]

    @cached_property
    def by_kind(self) -> dict[str, list[Any]]:
        out: dict[str, list[Any]] = defaultdict(list)
        for n, d in self.data.items():
            out[d.get("kind")].append(n)
        return out

    @cached_property
    def branches(self) -> dict[tuple[Any, Any], list[Any]]:
        """(replica, phase) -> nodes of that branch."""
        out: dict[tuple[Any, ...], list[Any]] = defaultdict(list)
        for n, d in self.data.items():
            if "phase" in d and "replica" in d:
                out[(d["replica"], d["phase"])].append(n)
        return out

    def branch_of(self, n: Any) -> tuple[Any, Any]:
        d = self.data[n]
        return d.get("replica"), d.get("phase")

    @cached_property
    def acyclic(self) -> bool:
        # Lazily on purpose: networkx costs about 0.2 s of CPU to import, and only DAG work needs it.
        import networkx as nx

        return bool(nx.is_directed_acyclic_graph(self.dag))

    def edge_kind(self, u: Any, v: Any) -> Any:
        return self.dag.succ[u][v].get("kind")

    @cached_property
    def out_adj(self) -> Any:
        """succ[u][v] -> edge attributes; networkx's own dicts when available (its views are slow)."""
        return getattr(self.dag, "_succ", None) or self.dag.succ

    @cached_property
    def in_adj(self) -> Any:
        return getattr(self.dag, "_pred", None) or self.dag.pred

    def succ(self, n: Any, data_only: bool = True) -> list[Any]:
        if not data_only:
            return list(self.out_adj[n])
        return [v for v, e in self.out_adj[n].items() if e.get("kind") != "sync"]

    def pred(self, n: Any, data_only: bool = True) -> list[Any]:
        if not data_only:
            return list(self.in_adj[n])
        return [u for u, e in self.in_adj[n].items() if e.get("kind") != "sync"]

    def ranks(self, n: Any) -> frozenset[Any]:
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
    def _rank_cache(self) -> dict[Any, Any]:
        return {}

    @cached_property
    def _rank_objects(self) -> dict[Any, Any]:
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

    def forward(self, starts: Iterable[Any], data_only: bool = False, within: set[Any] | None = None) -> set[Any]:
        seen = set(starts)
        todo = deque(seen)
        while todo:
            n = todo.popleft()
            for v in self.succ(n, data_only):
                if v not in seen and (within is None or v in within):
                    seen.add(v)
                    todo.append(v)
        return seen

    def backward(self, starts: Iterable[Any], within: set[Any] | None = None) -> set[Any]:
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

    def at(self, node: Any, message: str, hint: str | None = None) -> Diagnostic:
        severity = "warning" if self.kind is Kind.ADVISORY else "error"
        return Diagnostic(
            self.id, severity, f"{node}: {message}" if node is not None else message, node=node, hint=hint
        )

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "fixable": self.fixable, "scope": "dag"}



def longest_path_us(dag: Any, nodes: Iterable[Any]) -> tuple[float, list[Any]]:
    """Longest path (sum of est_us of its nodes) through the subgraph on ``nodes``, and the path.
    Assumes that subgraph is acyclic (Kahn's order; nodes on a cycle are left out)."""
    members = set(nodes)
    succ = getattr(dag, "_succ", None) or dag.succ
    pred = getattr(dag, "_pred", None) or dag.pred
    attrs = getattr(dag, "_node", None) or dag.nodes
    indeg = {n: sum(1 for u in pred[n] if u in members) for n in members}
    todo = deque(n for n, k in indeg.items() if k == 0)
    best: dict[Any, Any] = {}
    back: dict[Any, Any] = {}
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
    end = max(best, key=lambda n: best[n])
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
