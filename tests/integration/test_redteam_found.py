"""Bad inputs a red-team pass (2026-11-29) found answered with a line that named no field, or the wrong one. Each is
now exit 2 with one line naming the field, and nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fuzz.cases import Case
from tests.fuzz.harness import problems, run_in_process


def _run(tmp_path: Path, argv: list[str], files: dict[str, bytes] | None = None) -> tuple[int, str, list[str]]:
    """(exit code, the one stderr line, files written) of an in-process run; the fuzz harness's judgement
    (one line naming a field on exit 2, nothing written on error) must pass."""
    case = Case(argv[0], argv, files or {})
    outcome = run_in_process(case, tmp_path)
    assert problems(outcome, case) == []
    return outcome.code, outcome.stderr.strip(), outcome.written


def _dag(tmp_path: Path) -> dict[str, object]:
    code, _, _ = _run(tmp_path, ["solve", "--model", "llama-3.1-8b", "--cluster", "2xH100", "--tp", "2",
                                 "--no-runner-up", "--dag", "{dir}/plan.json"])
    assert code == 0
    data: dict[str, object] = json.loads((tmp_path / "plan.json").read_text())
    (tmp_path / "plan.json").unlink()
    return data


# An object as a DAG node id or edge end: networkx's TypeError, retried with networkx < 3.4's keyword, said
# "unexpected keyword argument 'link'".
@pytest.mark.parametrize(("where", "value", "named"), [
    ("node", {"a": 1}, "nodes[0].id"),
    ("node", [1, {"a": 1}], "nodes[0].id"),
    ("source", {"a": 1}, "edges[0].source"),
    ("target", [{"a": 1}], "edges[0].target"),
])
def test_an_object_naming_a_dag_node_is_bad_input_naming_where(tmp_path, where, value, named):
    data = _dag(tmp_path)
    nodes, edges = data["nodes"], data["edges"]
    assert isinstance(nodes, list) and isinstance(edges, list)
    if where == "node":
        nodes[0]["id"] = value
    else:
        edges[0][where] = value
    code, line, written = _run(tmp_path, ["validate", "{dir}/d.json", "--fix", "--out", "{dir}/fixed.json"],
                               {"d.json": json.dumps(data).encode()})
    assert code == 2 and written == []
    assert line.startswith(f"shardplan: error: file: {named}: ") and "cannot name a node" in line


def test_a_list_naming_a_dag_node_is_still_read_as_networkx_reads_it(tmp_path):
    data = _dag(tmp_path)
    nodes = data["nodes"]
    assert isinstance(nodes, list)
    nodes[0]["id"] = [1, 2]  # a tuple node to networkx: read, then judged by the DAG rules
    code, _, _ = _run(tmp_path, ["validate", "{dir}/d.json"], {"d.json": json.dumps(data).encode()})
    assert code in (0, 1)


# "--fix needs --out FIXED.json" and "--out needs --fix" named no field.
@pytest.mark.parametrize(("flags", "field"), [(["--fix"], "fix"), (["--out", "{dir}/fixed.json"], "out")])
def test_validate_fix_and_out_each_without_the_other_name_the_flag(tmp_path, flags, field):
    code, line, written = _run(tmp_path, ["validate", "{dir}/d.json", *flags], {"d.json": b"{}"})
    assert code == 2 and written == [] and line.startswith(f"shardplan: error: {field}: ")


# click's "Got unexpected extra argument (x)" named no field.
@pytest.mark.parametrize("argv", [["solve", "--model", "llama-3.1-8b", "stray"], ["rules", "TP-001", "TP-002"],
                                  ["profiles", "x"], ["models", "--json", "x"]])
def test_a_stray_word_after_a_command_names_it_as_an_argument(tmp_path, argv):
    code, line, _ = _run(tmp_path, argv)
    assert code == 2
    assert line.startswith("shardplan: error: argument: unexpected extra argument (")
    assert f"for shardplan {argv[0]} (see shardplan {argv[0]} --help)" in line
