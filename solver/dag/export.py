"""Write an execution DAG as JSON (networkx node-link), GraphML, DOT or Mermaid, and read JSON back.

DOT and Mermaid are written here as text (no pygraphviz or pydot): clusters (DOT) or subgraphs
(Mermaid) per replica, phase and stage. Edge styles: data solid, pipeline bold, sync dashed.
``write_dag(plan, path, detail)`` is what ``shardplan solve --dag FILE`` calls.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import networkx as nx

from shardplan.models.errors import SpecError, quoted
from shardplan.models.files import json_text
from shardplan.models.files import read_json as read_json_file
from shardplan.rules.dag.catalog import graph_schema_problems
from shardplan.rules.dag.disagg import disagg_schema_problems, is_disagg
from shardplan.rules.dag.view import is_int
from shardplan.solver.dag import build_dag

TUPLE_ATTRS = ("ranks", "experts", "layers")  # stored as tuples in memory, lists in JSON
# The largest DAG file ``validate`` reads, and ``write_json`` writes. Measured (2026-11-28, expanded detail): a
# 4,096-GPU disaggregated DeepSeek-V3 plan 62 MB; DeepSeek-V3 on 4,096 GPUs in 16 stages of 256, 97 MB (177,648
# nodes). Validating takes 7-9x the file in memory (1.0 GB for a 146 MB file, 0.56 GB for the 62 MB one), so this
# cap bounds it near 4-5 GB. What shardplan builds is bounded first by ``build.MAX_DAG_NODES`` (200,000 nodes,
# about 1.6 GB to build): Kimi-K2 in one 384-GPU stage (146 MB) and Llama-3.1-405B in one 512-GPU stage (252 MB)
# pass it and are refused before they are built; this cap stays for a DAG whose edges outgrow its nodes, and for
# files made elsewhere.
MAX_DAG_BYTES = 512 << 20


# --- JSON ----------------------------------------------------------------------------------------
def to_json_data(dag: nx.DiGraph) -> dict[str, Any]:
    """The node-link form: ``networkx.node_link_data(G, edges="edges")``."""
    data: dict[str, Any]
    try:
        data = nx.node_link_data(dag, edges="edges")
    except TypeError:  # networkx < 3.4 names the keyword ``link``
        data = nx.node_link_data(dag, link="edges")
    return data


def from_json_data(data: Any) -> nx.DiGraph:
    """The DiGraph of node-link ``data``; ``SpecError("file", ...)`` if it is not one."""
    if not isinstance(data, dict) or not isinstance(data.get("nodes"), list) or not isinstance(data.get("edges"), list):
        raise SpecError("file", "not a node-link graph (expected an object with 'nodes' and 'edges' lists)")
    if data.get("directed") is False or data.get("multigraph") is True:
        raise SpecError("file", "an execution DAG is a directed graph without parallel edges")
    if not isinstance(data.get("graph", {}), dict):
        raise SpecError("file", "graph: expected an object of graph attributes")
    for what in ("nodes", "edges"):
        for i, item in enumerate(data[what]):
            if not isinstance(item, dict):
                raise SpecError("file", f"{what}[{i}]: expected an object of attributes")
    for i, node in enumerate(data["nodes"]):
        _check_node_name(_as_tuples(node.get("id")), f"nodes[{i}].id")
    for i, edge in enumerate(data["edges"]):
        for end in ("source", "target"):
            value = edge.get(end)
            _check_node_name(tuple(value) if isinstance(value, list) else value, f"edges[{i}].{end}")
    try:
        # networkx >= 3.4 (pyproject) takes ``edges=``. A retry with the older ``link=`` on TypeError answered an
        # object as a node id with "unexpected keyword argument 'link'" instead of what was wrong.
        g = nx.node_link_graph(data, directed=True, multigraph=False, edges="edges")
    except (KeyError, TypeError, ValueError, nx.NetworkXError) as exc:
        raise SpecError("file", f"not a node-link graph ({type(exc).__name__}: {exc})") from None
    for _, d in g.nodes(data=True):
        for key in TUPLE_ATTRS:
            if isinstance(d.get(key), list):
                d[key] = tuple(d[key])
    return g


def _as_tuples(value: Any) -> Any:
    """A node id as networkx's node_link_graph reads it: lists, nested ones too, become tuples."""
    return tuple(_as_tuples(v) for v in value) if isinstance(value, list) else value


def _check_node_name(value: Any, where: str) -> None:
    """A node's id, or an edge's end, as networkx reads it (lists become tuples): one a dict can be used as. An
    object (``{"a": 1}``) cannot, and networkx's TypeError said nothing of where it was."""
    try:
        hash(value)
    except TypeError:
        raise SpecError("file", f"{where}: {quoted(value)} cannot name a node; use a string or an integer") from None


def write_json(dag: nx.DiGraph, path: str | Path) -> None:
    """The DAG as node-link JSON; one larger than ``validate`` reads (``MAX_DAG_BYTES``) is refused, not written."""
    data = (json_text(to_json_data(dag), indent=1, sort_keys=True) + "\n").encode("utf-8")
    if len(data) > MAX_DAG_BYTES:
        raise SpecError("dag", f"the DAG's JSON would be {len(data):,} bytes, more than validate reads "
                               f"({MAX_DAG_BYTES:,}): --detail logical writes a smaller one")
    Path(path).write_bytes(data)


def read_json(path: str | Path) -> nx.DiGraph:
    """A DAG file written by ``write_json`` (or anyone else's node-link JSON in the schema).
    Raises ``SpecError("file", ...)`` when it is unreadable, not JSON, not node-link, or lacks the
    graph attributes that validation needs (docs/dag.md)."""
    # A regular file of at most MAX_DAG_BYTES, strict UTF-8, nesting bounded (models.files).
    return dag_from_data(read_json_file(path, "file", MAX_DAG_BYTES), str(path))


def dag_from_data(data: Any, where: str) -> nx.DiGraph:
    """The DAG in parsed node-link ``data`` (a file's, or an object handed over whole), with the graph
    attributes validation needs; ``SpecError("file", ...)`` naming ``where`` otherwise."""
    g = from_json_data(data)
    problems = disagg_schema_problems(g) if is_disagg(g) else graph_schema_problems(g)
    if problems:
        raise SpecError("file", f"{where} is not a shardplan DAG: {problems[0]}")
    return g


# --- GraphML -------------------------------------------------------------------------------------
def _scalar(value: Any) -> Any:
    if isinstance(value, (bool, int, float, str)):
        return value
    return json_text(value, sort_keys=True)


# What XML 1.0 cannot carry at all, not even as a character reference: C0 controls but tab, newline and return;
# surrogates; U+FFFE and U+FFFF. networkx writes them as they are, and no XML parser reads the file back.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _xml_attrs(attrs: dict[Any, Any], where: str) -> dict[Any, Any]:
    """``attrs`` as GraphML scalars (``_scalar``); a key or text XML cannot carry raises ``SpecError`` naming it."""
    out = {k: _scalar(v) for k, v in attrs.items() if v is not None}
    for key, value in out.items():
        for text in (key, value):
            bad = _NOT_XML.search(text) if isinstance(text, str) else None
            if bad:
                raise SpecError("file", f"{where}: attribute {quoted(key, 40)} holds {quoted(bad.group())}, which "
                                        "XML cannot carry; cannot write GraphML (.json can)")
    return out


def to_graphml_graph(dag: nx.DiGraph) -> nx.DiGraph:
    """A copy whose attributes are all GraphML scalars: lists and dicts become JSON strings."""
    h = nx.DiGraph()
    h.graph.update(_xml_attrs(dag.graph, "graph"))
    for n, d in dag.nodes(data=True):
        where = f"node {quoted(n)}"
        if isinstance(n, str) and _NOT_XML.search(n):
            raise SpecError("file", f"{where}: its id holds a character XML cannot carry; cannot write GraphML")
        h.add_node(n, **_xml_attrs(d, where))
    for u, v, d in dag.edges(data=True):
        h.add_edge(u, v, **_xml_attrs(d, f"edge {quoted(u, 40)} -> {quoted(v, 40)}"))
    return h


def write_graphml(dag: nx.DiGraph, path: str | Path) -> None:
    nx.write_graphml(to_graphml_graph(dag), str(path))


# --- DOT -----------------------------------------------------------------------------------------
EDGE_STYLE = {"data": "solid", "pipeline": "bold", "sync": "dashed"}


def _q(text: Any) -> str:
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _gpus(ranks: Iterable[int]) -> str:
    r = sorted(ranks)
    if not r:
        return "-"
    if r == list(range(r[0], r[-1] + 1)):
        return f"GPU {r[0]}" if len(r) == 1 else f"GPUs {r[0]}-{r[-1]}"
    return "GPUs " + ",".join(map(str, r[:6])) + ("..." if len(r) > 6 else "")


def node_label(n: Any, d: dict[Any, Any], sep: str = "\n") -> str:
    """Kind, scope, split and time of a node, on a few short lines."""
    kind = d.get("kind", "?")
    head = kind
    if "layer" in d:
        head += f" L{d['layer']}"
    parts = [head]
    if kind in ("AllReduce", "AllGather", "ReduceScatter", "AllToAll") and isinstance(d.get("op"), str):
        parts[0] += f" {d['op']}"
    split = []
    for key in ("group", "sp_rank", "tp_rank", "ep_rank"):
        if key in d:
            split.append(f"{key.replace('_rank', '')}{d[key]}")
    for key in ("tp", "sp"):
        if isinstance(d.get(key), int) and d[key] > 1:
            split.append(f"{key}={d[key]}")
    if "multiplicity" in d:
        split.append(f"x{d['multiplicity']}")
    if kind == "Expert" and d.get("experts"):
        e = list(d["experts"])
        split.append(f"experts {e[0]}-{e[-1]}" if e == list(range(e[0], e[-1] + 1)) else f"{len(e)} experts")
    if split:
        parts.append(" ".join(split))
    tail = _gpus(d.get("ranks") or ())
    est = d.get("est_us")
    if isinstance(est, (int, float)) and est > 0:
        tail += f" {est:.1f} us"
    parts.append(tail)
    return sep.join(parts)


def _clusters(dag: nx.DiGraph) -> dict[tuple[Any, ...], list[Any]]:
    out: dict[tuple[Any, ...], list[Any]] = {}
    for n, d in dag.nodes(data=True):
        key = (d.get("replica"), d.get("phase"), d.get("stage"))
        out.setdefault(key, []).append(n)
    return out


def to_dot(dag: nx.DiGraph) -> str:
    """Graphviz DOT text: one cluster per (replica, phase, stage)."""
    title = f"{dag.graph.get('model', '')} on {dag.graph.get('cluster', '')} ({dag.graph.get('detail', '')})"
    lines = ["digraph shardplan {", f"  graph [rankdir=TB, fontsize=10, label={_q(title)}];",
             "  node [shape=box, fontsize=9];", "  edge [fontsize=8];"]
    for (r, phase, s), nodes in sorted(_clusters(dag).items(), key=lambda kv: tuple(map(str, kv[0]))):
        indent = "  "
        if phase is not None:
            name = f"cluster_r{r}_{phase}" + (f"_s{s}" if s is not None else "")
            label = f"replica {r} {phase}" + (f" stage {s}" if s is not None else "")
            lines.append(f"  subgraph {_q(name)} {{")
            lines.append(f"    label={_q(label)};")
            indent = "    "
        for n in nodes:
            d = dag.nodes[n]
            lines.append(f"{indent}{_q(n)} [label={_q(node_label(n, d))}, kind={_q(d.get('kind'))}];")
        if phase is not None:
            lines.append("  }")
    for u, v, d in dag.edges(data=True):
        kind = d.get("kind", "data")
        lines.append(f"  {_q(u)} -> {_q(v)} [kind={_q(kind)}, style={EDGE_STYLE.get(kind, 'solid')}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


# --- Mermaid -------------------------------------------------------------------------------------
MERMAID_ARROW = {"data": "-->", "pipeline": "==>", "sync": "-.->"}


def _m(text: str) -> str:
    """Text inside a Mermaid label's quotes: a quote ends the label and a line ends the statement, so text from a DAG
    file (a phase of ``x"]\n  click n0 href "javascript:..."``) wrote statements of its own."""
    return text.replace('"', "#quot;").replace("\r", " ").replace("\n", " ")


_NOT_ID = re.compile(r"[^A-Za-z0-9_]")


def _mid(text: str) -> str:
    """A Mermaid id for a subgraph named by a DAG's values: letters, digits and underscores only, and when the values
    held anything else, a checksum of them, so two phases that differ only there stay two subgraphs."""
    safe = _NOT_ID.sub("_", text)
    return safe if safe == text else f"{safe}_{zlib.crc32(text.encode('utf-8', 'backslashreplace')):08x}"


def _order(value: Any) -> tuple[int, int, str]:
    """A sort key for a node's replica or stage: integers in order, then anything else a file may hold
    (None, text) by its text, so a DAG whose nodes mix them still renders (sorting None with 0 raised)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return (0, value, "")
    return (1, 0, str(value))


def to_mermaid(dag: nx.DiGraph, phase: str | None = None, keep_layers: Iterable[int] | None = None) -> str:
    """A Mermaid flowchart, with a subgraph per replica and phase and one per stage inside it.

    ``phase``: draw only that phase's branches. ``keep_layers``: draw only these layers; the layers
    left out of a stage are drawn as one "..." node that takes their edges (for documentation).
    """
    keep = None if keep_layers is None else set(keep_layers)
    ids: dict[Any, str] = {}  # ids[node]: its Mermaid id (left-out layers share their stage's gap id)
    labels: dict[str, str] = {}
    place: dict[str, tuple[Any, ...]] = {}  # place[Mermaid id]: (replica, phase, stage)
    gap_layers: dict[str, list[Any]] = {}
    for n, d in dag.nodes(data=True):
        if phase is not None and d.get("phase") not in (None, phase):
            continue
        key = (d.get("replica"), d.get("phase"), d.get("stage"))
        if keep is not None and isinstance(d.get("layer"), int) and d["layer"] not in keep:
            gid = ids.setdefault(("gap", key), f"g{len(place)}")
            ids[n] = gid
            place[gid] = key
            gap_layers.setdefault(gid, []).append(d["layer"])
            continue
        nid = ids[n] = f"n{len(place)}"
        labels[nid] = node_label(n, d, sep="<br/>")
        place[nid] = key
    for gid, layers in gap_layers.items():
        labels[gid] = f"... layers {min(layers)}-{max(layers)} ..."
    lines = ["flowchart TD"]
    groups: dict[tuple[Any, ...], list[Any]] = {}
    for nid, key in place.items():
        groups.setdefault(key, []).append(nid)
    top = sorted({(k[0], k[1]) for k in groups if k[1] is not None}, key=lambda k: (_order(k[0]), str(k[1])))
    for nid in groups.get((None, None, None), []) + [
        x for k, v in groups.items() if k[1] is None and k != (None, None, None) for x in v
    ]:
        lines.append(f'  {nid}["{_m(labels[nid])}"]')
    for r, ph in top:
        lines.append(f'  subgraph {_mid(f"r{r}_{ph}")}["{_m(f"replica {r} - {ph}")}"]')
        for nid in groups.get((r, ph, None), []):
            lines.append(f'    {nid}["{_m(labels[nid])}"]')
        stages = sorted((k[2] for k in groups if k[0] == r and k[1] == ph and k[2] is not None), key=_order)
        for s in stages:
            lines.append(f'    subgraph {_mid(f"r{r}_{ph}_s{s}")}["{_m(f"stage {s}")}"]')
            for nid in groups[(r, ph, s)]:
                lines.append(f'      {nid}["{_m(labels[nid])}"]')
            lines.append("    end")
        lines.append("  end")
    seen = set()
    for u, v, d in dag.edges(data=True):
        a, b = ids.get(u), ids.get(v)
        if a is None or b is None or a == b or (a, b) in seen:
            continue
        seen.add((a, b))
        lines.append(f"  {a} {MERMAID_ARROW.get(d.get('kind'), '-->')} {b}")
    return "\n".join(lines) + "\n"


# --- by file extension ---------------------------------------------------------------------------
def _text(render: Callable[[nx.DiGraph], str]) -> Callable[[nx.DiGraph, Any], None]:
    def write(dag: nx.DiGraph, path: Any) -> None:
        Path(path).write_text(render(dag))

    return write


WRITERS: dict[str, Callable[[nx.DiGraph, Any], None]] = {
    ".json": write_json,
    ".graphml": write_graphml,
    ".dot": _text(to_dot),
    ".gv": _text(to_dot),
    ".mmd": _text(to_mermaid),
    ".mermaid": _text(to_mermaid),
}


def writer_for(path: str | Path) -> Callable[[nx.DiGraph, Any], None]:
    ext = Path(path).suffix.lower()
    if ext not in WRITERS:
        raise SpecError("dag", f"cannot tell the format of {str(path)!r}: use .json, .graphml, .dot, .mmd or .mermaid")
    return WRITERS[ext]


def _is_scalar(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float))


# WRITTEN_NODE_ATTRS[attribute]: (a well-formed value, what it is) for what the writers read: the labels,
# clusters and styles of DOT, Mermaid and GraphML. Anything else must be a JSON scalar or a list of them.
WRITTEN_NODE_ATTRS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "kind": (lambda v: isinstance(v, str), "a string"),
    "phase": (lambda v: v is None or isinstance(v, str), "a string"),
    "op": (lambda v: isinstance(v, str), "a string"),
    "est_us": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "a number"),
    **{key: (lambda v: isinstance(v, (list, tuple)) and all(is_int(x) for x in v), "a list of integers")
       for key in ("ranks", "experts", "layers")},
    **{key: (lambda v: v is None or is_int(v), "an integer")
       for key in ("replica", "stage", "layer", "group", "tp_rank", "sp_rank", "ep_rank", "tp", "sp",
                   "multiplicity", "new_tokens", "to_stage", "context", "sequences", "group_size")},
}


def check_writable(dag: nx.DiGraph) -> None:
    """Raise ``SpecError("file", ...)`` naming the node or edge and the attribute when a value is of a
    type the writers cannot render (validation reports such values as DAG-022; writing needs them)."""
    for n, d in dag.nodes(data=True):
        for key, value in d.items():
            well_formed, what = WRITTEN_NODE_ATTRS.get(key, (_is_plain, "a JSON scalar or a list of them"))
            if not well_formed(value):
                raise SpecError("file", f"node {str(n)[:60]!r}: attribute {key} is not {what}; cannot write it")
    for u, v, d in dag.edges(data=True):
        for key, value in d.items():
            ok = isinstance(value, str) if key == "kind" else _is_plain(value)
            if not ok:
                edge = f"{str(u)[:40]!r} -> {str(v)[:40]!r}"
                raise SpecError("file", f"edge {edge}: attribute {key} is not a string; cannot write it")


def _is_plain(value: Any) -> bool:
    return _is_scalar(value) or (isinstance(value, (list, tuple)) and all(_is_scalar(x) for x in value))


def write_graph(dag: nx.DiGraph, path: str | Path) -> None:
    """Write ``dag`` in the format its extension names."""
    writer_for(path)(dag, path)


def write_dag(plan: Any, path: str | Path, detail: str = "logical") -> nx.DiGraph:
    """Build ``plan``'s DAG at ``detail`` and write it to ``path`` (format from the extension:
    .json, .graphml, .dot/.gv, .mmd/.mermaid); raises ``SpecError("dag", ...)`` for another one."""
    write = writer_for(path)
    dag = build_dag(plan, detail)
    write(dag, path)
    return dag


__all__ = [
    "WRITERS", "dag_from_data", "from_json_data", "node_label", "read_json", "to_dot", "to_graphml_graph",
    "to_json_data", "to_mermaid",
    "write_dag", "write_graph", "write_graphml", "write_json",
]
