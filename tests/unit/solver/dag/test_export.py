"""Exports: JSON round-trips, GraphML parses, DOT and Mermaid hold every node; the CLI's validate
exits 0 on a valid file, 1 on violations, 2 on an unreadable one."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import networkx as nx
import pytest

from shardplan.models.errors import SpecError
from shardplan.solver.cli import main
from shardplan.solver.dag import build_dag, check_dag, fix_dag
from shardplan.solver.dag.export import read_json, to_dot, to_json_data, to_mermaid, write_dag, write_graph
from tests.unit.rules.dag.mutations import collective_removed, cycle
from tests.unit.solver.dag.plans import small_dense, small_moe


@pytest.fixture(scope="module", params=["logical", "expanded"])
def dag(request) -> nx.DiGraph:
    return build_dag(small_moe(), request.param)


def test_json_round_trip(dag: nx.DiGraph, tmp_path: Path) -> None:
    path = tmp_path / "dag.json"
    write_graph(dag, path)
    data = json.loads(path.read_text())
    assert set(data) >= {"nodes", "edges", "graph", "directed"}
    back = read_json(path)
    assert nx.utils.graphs_equal(back, dag)
    assert back.graph == json.loads(json.dumps(dag.graph))
    assert check_dag(back) == []


def test_node_link_form_is_networkx_own(dag: nx.DiGraph) -> None:
    again = nx.node_link_graph(json.loads(json.dumps(to_json_data(dag))), edges="edges")
    assert again.number_of_nodes() == dag.number_of_nodes() and again.number_of_edges() == dag.number_of_edges()


def test_graphml_parses(dag: nx.DiGraph, tmp_path: Path) -> None:
    path = tmp_path / "dag.graphml"
    write_graph(dag, path)
    back = nx.read_graphml(path)
    assert back.number_of_nodes() == dag.number_of_nodes()
    assert back.number_of_edges() == dag.number_of_edges()
    node = next(iter(dag.nodes))
    assert back.nodes[node]["kind"] == dag.nodes[node]["kind"]
    assert json.loads(back.nodes[node]["ranks"]) == list(dag.nodes[node]["ranks"])


def test_dot_has_every_node_and_edge(dag: nx.DiGraph) -> None:
    text = to_dot(dag)
    assert text.startswith("digraph shardplan {") and text.rstrip().endswith("}")
    assert len(re.findall(r'^\s+"[^"]+" \[label=', text, re.M)) == dag.number_of_nodes()
    assert len(re.findall(r'^\s+"[^"]+" -> "[^"]+"', text, re.M)) == dag.number_of_edges()
    assert text.count("subgraph") >= 4  # replica x phase x stage clusters


def test_mermaid_has_every_node_in_stage_subgraphs(dag: nx.DiGraph) -> None:
    text = to_mermaid(dag)
    assert text.startswith("flowchart TD")
    assert len(re.findall(r'^\s+n\d+\["', text, re.M)) == dag.number_of_nodes()
    assert len(re.findall(r"^\s+n\d+ (-->|==>|-\.->) n\d+$", text, re.M)) == dag.number_of_edges()
    assert 'subgraph r0_decode_s1["stage 1"]' in text


def test_mermaid_can_leave_out_middle_layers() -> None:
    dag = build_dag(small_dense())
    text = to_mermaid(dag, phase="decode", keep_layers=[0, 3])
    assert "... layers 1-1 ..." in text and "prefill" not in text


@pytest.mark.parametrize("ext", ["json", "graphml", "dot", "mmd", "mermaid"])
def test_write_dag_picks_the_format_from_the_extension(ext: str, tmp_path: Path) -> None:
    path = tmp_path / f"plan.{ext}"
    dag = write_dag(small_dense(), path, "expanded")
    assert path.stat().st_size > 1000 and dag.graph["detail"] == "expanded"


def test_write_dag_refuses_an_unknown_extension(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as err:
        write_dag(small_dense(), tmp_path / "plan.png")
    assert err.value.field == "dag"


# --- shardplan validate ----------------------------------------------------------------------------
def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = 0
    try:
        main(list(argv))
    except SystemExit as ended:
        code = ended.code or 0
    out = capsys.readouterr()
    return code, out.out, out.err


def write(tmp_path: Path, name: str, dag: nx.DiGraph) -> str:
    path = tmp_path / name
    write_graph(dag, path)
    return str(path)


def test_validate_exit_0_for_a_valid_file(tmp_path: Path, capsys) -> None:
    path = write(tmp_path, "ok.json", build_dag(small_moe(), "expanded"))
    code, out, err = run(capsys, "validate", path)
    assert code == 0 and "valid" in out and err == ""
    code, out, _ = run(capsys, "validate", path, "--json")
    assert code == 0 and json.loads(out)["valid"] is True


def test_validate_exit_1_names_rules_and_nodes(tmp_path: Path, capsys) -> None:
    g = build_dag(small_dense()).copy()
    cycle(g)
    path = write(tmp_path, "bad.json", g)
    code, out, _ = run(capsys, "validate", path)
    assert code == 1 and "DAG-001" in out and "r0.decode" in out
    code, out, _ = run(capsys, "validate", path, "--json")
    data = json.loads(out)
    assert code == 1 and data["valid"] is False and "DAG-001" in data["rules"]
    assert all({"rule", "node", "message"} <= set(v) for v in data["violations"])


def test_validate_fix_writes_a_repaired_file(tmp_path: Path, capsys) -> None:
    g = build_dag(small_dense(), "expanded").copy()
    collective_removed(g)
    path = write(tmp_path, "broken.json", g)
    fixed = tmp_path / "fixed.json"
    code, out, _ = run(capsys, "validate", path, "--fix", "--out", str(fixed), "--json")
    data = json.loads(out)
    assert code == 0 and data["valid"] and data["changes"][0]["rule"] == "DAG-010"
    assert check_dag(read_json(fixed)) == []
    g = build_dag(small_dense()).copy()
    cycle(g)
    path = write(tmp_path, "cyclic.json", g)
    code, out, _ = run(capsys, "validate", path, "--fix", "--out", str(tmp_path / "still.json"))
    assert code == 1 and "DAG-001" in out


def test_validate_fix_names_out_when_the_output_cannot_be_written(tmp_path: Path, capsys, monkeypatch) -> None:
    """An output error is about --out, the flag the user set (the writers' own name for it is solve's ``dag``)."""
    path = write(tmp_path, "ok.json", build_dag(small_dense()))
    code, out, err = run(capsys, "validate", path, "--fix", "--out", str(tmp_path / "x.png"))
    assert (code, out) == (2, "") and err.startswith("shardplan: error: out: cannot tell the format")
    g = build_dag(small_dense(), "expanded").copy()
    collective_removed(g)
    broken = write(tmp_path, "broken.json", g)
    # The cap at the broken file's size: it is read, and its repair (the collective put back) is larger.
    monkeypatch.setattr("shardplan.solver.dag.export.MAX_DAG_BYTES", Path(broken).stat().st_size)
    fixed = tmp_path / "fixed.json"
    code, out, err = run(capsys, "validate", broken, "--fix", "--out", str(fixed))
    assert (code, out) == (2, "") and err.startswith("shardplan: error: out: the DAG's JSON would be")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.json", "ok.json"]


@pytest.mark.parametrize("content", ["not json", "[1, 2]", '{"nodes": [], "edges": []}',
                                     '{"directed": true, "nodes": [{"id": "a"}], "edges": [], "graph": {}}'])
def test_validate_exit_2_for_a_file_outside_the_schema(content: str, tmp_path: Path, capsys) -> None:
    path = tmp_path / "x.json"
    path.write_text(content)
    code, out, err = run(capsys, "validate", str(path))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "Traceback" not in err


def test_validate_exit_2_for_a_missing_file_or_bad_options(tmp_path: Path, capsys) -> None:
    assert run(capsys, "validate", str(tmp_path / "none.json"))[0] == 2
    path = write(tmp_path, "ok.json", build_dag(small_dense()))
    assert run(capsys, "validate", path, "--fix")[0] == 2
    assert run(capsys, "validate", path, "--fix", "--out", str(tmp_path / "x.png"))[0] == 2


def test_malformed_attributes_are_reported_never_raised() -> None:
    """Attributes of any type in a file (as anyone may write one) give diagnostics, not exceptions."""
    rng = random.Random(7)
    values = [None, "x", -1, 3.5, [], [1, "a"], {"a": 1}, True, 10**9, 0]
    keys = ["kind", "ranks", "est_us", "replica", "phase", "stage", "layer", "tp", "sp", "tp_rank", "group", "experts",
            "ep_rank", "rejoin", "multiplicity", "new_tokens"]
    base = build_dag(small_moe(), "expanded")
    nodes, edges = list(base.nodes), list(base.edges)
    for _ in range(60):
        g = base.copy()
        for _ in range(rng.randint(1, 3)):
            g.nodes[rng.choice(nodes)][rng.choice(keys)] = rng.choice(values)
        u, v = rng.choice(edges)
        g.edges[u, v]["kind"] = rng.choice(values + ["data"])
        if rng.random() < 0.3:
            g.graph[rng.choice(["layout", "num_gpus", "moe_layers", "num_layers", "allow", "num_experts"])] = (
                rng.choice(values)
            )
        found = check_dag(g)
        fix_dag(g)
        assert all(d.rule.startswith("DAG-") for d in found)


@pytest.mark.parametrize(("key", "value", "says"), [
    ("degrees", {"tp": 10**20}, "degrees.tp is 100000000000000000000; the layout's is 2"),
    ("degrees", {"tp": 4}, "degrees.tp is 4; the layout's is 2"),
    ("degrees", {"tp": True}, "degrees.tp is True; the layout's is 2"),
    ("degrees", {"ep": 2}, "degrees.ep is 2; the layout's is 1"),  # small_dense: 2 GPUs a stage, but no experts
    ("degrees", {"pipeline": 2}, "degrees is not an object of the degrees dp, pp, tp, sp, ep, attn_dp, expert_tp"),
    ("degrees", [2, 2], "degrees is not an object"),
    ("cluster_gpus", -3, "cluster_gpus is -3; the layout uses 8 GPUs"),
    ("cluster_gpus", 7, "cluster_gpus is 7; the layout uses 8 GPUs"),
])
def test_degrees_and_cluster_size_must_say_what_the_layout_says(key, value, says, tmp_path: Path, capsys) -> None:
    # Validation reads the layout, but scripts read degrees and cluster_gpus: a file whose degrees.tp was 1e20
    # (small_dense is dp=2, pp=2, tp=2 on 8 GPUs) was reported valid.
    dag = build_dag(small_dense())
    dag.graph[key] = {**dag.graph[key], **value} if isinstance(value, dict) else value
    code, out, err = run(capsys, "validate", write(tmp_path, "d.json", dag))
    assert code == 2 and out == "" and f"is not a shardplan DAG: graph attribute {says}" in err


def test_a_rank_of_true_is_not_gpu_1() -> None:
    dag = build_dag(small_dense())
    node = next(n for n, d in dag.nodes(data=True) if d["kind"] == "Attention" and 1 in d["ranks"])
    assert not [d for d in check_dag(dag) if d.rule == "DAG-021"]
    dag.nodes[node]["ranks"] = [True if r == 1 else r for r in dag.nodes[node]["ranks"]]
    assert [d.rule for d in check_dag(dag) if "True" in d.message] == ["DAG-021"]
