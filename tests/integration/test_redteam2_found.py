"""What a second red-team pass (2026-12-07) found: lone UTF-16 surrogates (``"\\ud800"`` in a JSON file or an MCP
message, or in an argument of ``main(argv)`` in-process) raised UnicodeEncodeError (exit 3, or an MCP server that
ended on the reply it could not write); and text from a DAG file written into Mermaid and GraphML unescaped."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import anyio
import networkx as nx
import pytest

from shardplan.models import SpecError
from shardplan.models.files import parse_json
from shardplan.solver.dag import build_dag
from shardplan.solver.dag.export import to_graphml_graph, to_mermaid
from shardplan.solver.mcp.safety import Root
from tests.fuzz.harness import run_judged
from tests.unit.solver.dag.plans import small_dense

SMALL = ["--model", "llama-3.1-8b", "--cluster", "2xH100"]


def _dag(tmp_path: Path) -> dict[str, object]:
    code, _, _ = run_judged(tmp_path, ["solve", *SMALL, "--tp", "2", "--no-runner-up", "--dag", "{dir}/plan.json"])
    assert code == 0
    data: dict[str, object] = json.loads((tmp_path / "plan.json").read_text())
    (tmp_path / "plan.json").unlink()
    return data


def _nodes(data: dict[str, object]) -> list[dict[str, object]]:
    nodes = data["nodes"]
    assert isinstance(nodes, list)
    return nodes


# --- DAG text in Mermaid and GraphML --------------------------------------------------------------
INJECTED = 'x["a"]\n  click n0 href "javascript:alert(1)"\n  subgraph y'


def test_a_dag_files_phase_cannot_write_mermaid_statements(tmp_path):
    # The phase went into a subgraph's id and title as it was: its quote and lines became statements of their own.
    data = _dag(tmp_path)
    for node in _nodes(data):
        if node.get("phase") == "prefill":
            node["phase"] = INJECTED
    code, _, written = run_judged(tmp_path, ["validate", "{dir}/d.json", "--fix", "--out", "{dir}/fixed.mmd"],
                                  {"d.json": json.dumps(data).encode()})
    assert code == 1 and written == ["fixed.mmd"]  # the DAG rules flag the phase; the repaired file is written
    lines = (tmp_path / "fixed.mmd").read_text().splitlines()
    assert not any(line.strip().startswith(("click", "subgraph y")) for line in lines)
    titled = [line for line in lines if "click" in line]
    assert titled and all(re.fullmatch(r'\s*subgraph \w+\["[^"]*"\]', line) for line in titled)


def test_mermaid_subgraph_ids_stay_apart_when_phases_differ_only_in_what_an_id_cannot_hold():
    dag = nx.DiGraph()
    dag.add_node("a", replica=0, phase="a b", stage=0, kind="compute")
    dag.add_node("b", replica=0, phase="a_b", stage=0, kind="compute")
    ids = [line.split("[")[0].split()[-1] for line in to_mermaid(dag).splitlines() if "subgraph" in line]
    assert len(ids) == len(set(ids)) == 4 and "r0_a_b" in ids


@pytest.mark.parametrize(("where", "value"), [("key", "note\x01"), ("value", "a\x0bb"), ("kind", "Attn\x1b")])
def test_text_xml_cannot_carry_is_refused_for_graphml_and_nothing_written(tmp_path, where, value):
    # networkx wrote the control character as it was: no XML parser read the file back.
    data = _dag(tmp_path)
    node = _nodes(data)[1]
    if where == "key":
        node[value] = "x"
    else:
        node["note" if where == "value" else "kind"] = value
    code, line, written = run_judged(tmp_path, ["validate", "{dir}/d.json", "--fix", "--out", "{dir}/fixed.graphml"],
                                     {"d.json": json.dumps(data).encode()})
    assert (code, written) == (2, [])
    assert line.startswith(f"shardplan: error: file: node {node['id']!r}: attribute ") and "XML cannot carry" in line


def test_a_graphml_dag_is_read_back():
    dag = build_dag(small_dense())
    with io.BytesIO() as out:
        nx.write_graphml(to_graphml_graph(dag), out)
        back = nx.read_graphml(io.BytesIO(out.getvalue()))
    assert back.number_of_nodes() == dag.number_of_nodes()


# --- lone surrogates ------------------------------------------------------------------------------
@pytest.mark.parametrize("out", ["fixed.dot", "fixed.mmd", "fixed.graphml", "fixed.json"])
def test_a_dag_file_holding_a_lone_surrogate_is_bad_input(tmp_path, out):
    # A phase of "de\ud800code" reached the DOT and Mermaid writers, whose UTF-8 encoding raised (exit 3).
    data = _dag(tmp_path)
    for node in _nodes(data):
        if node.get("phase") == "decode":
            node["phase"] = "de\ud800code"
    code, line, written = run_judged(tmp_path, ["validate", "{dir}/d.json", "--fix", "--out", f"{{dir}}/{out}"],
                               {"d.json": json.dumps(data).encode()})
    assert (code, written) == (2, [])
    assert line.startswith("shardplan: error: file: ") and "holds \\ud800, half of a UTF-16 surrogate pair" in line


@pytest.mark.parametrize("text", ['{"a": "\\ud800"}', '{"\\udfff": 1}', '["x", ["\\uDBFFz"]]'])
def test_json_with_a_lone_surrogate_is_refused_naming_the_field(text):
    with pytest.raises(SpecError) as err:
        parse_json(text, "model", "c.json")
    assert err.value.field == "model" and "half of a UTF-16 surrogate pair" in err.value.reason


@pytest.mark.parametrize(("text", "value"), [
    ('{"a": "\\ud83d\\ude00"}', {"a": "\U0001f600"}),  # a pair is one character
    ('{"a": "\\\\ud800"}', {"a": "\\ud800"}),  # an escaped backslash, then text
])
def test_json_with_a_surrogate_pair_or_the_text_of_an_escape_is_read(text, value):
    assert parse_json(text, "model", "c.json") == value


@pytest.mark.parametrize(("argv", "field"), [
    (["solve", *SMALL, "--dag", "{dir}/a\ud800.json"], "dag"),
    (["solve", *SMALL, "--report", "{dir}/a\ud800.html"], "report"),
    (["solve", *SMALL, "--experts-out", "{dir}/\ud800.json"], "experts-out"),
    (["validate", "a\udfff.json"], "argument"),
    (["calibrate", "p.csv", "--out", "{dir}/\ud800.json"], "out"),
    (["mcp", "--root", "\ud800"], "root"),
])
def test_an_argument_with_a_lone_surrogate_is_bad_input(tmp_path, argv, field):
    # No command line can carry one (an undecodable byte arrives as \udc80-\udcff, which encodes back); main(argv)
    # in-process can, and os.stat and realpath raised UnicodeEncodeError (exit 3).
    code, line, written = run_judged(tmp_path, argv)
    assert (code, written) == (2, [])
    assert line.startswith(f"shardplan: error: {field}: holds \\u") and "a lone surrogate" in line


def test_an_argument_with_an_undecodable_byte_is_still_a_file_name(tmp_path):
    # What a command line gives for the byte 0xff in a file name: it names the file as any other name does.
    code, line, _ = run_judged(tmp_path, ["validate", "{dir}/\udcff.json"])
    assert code == 2 and line.startswith("shardplan: error: ") and "surrogate" not in line


def test_an_mcp_path_with_a_lone_surrogate_is_not_a_path(tmp_path):
    with pytest.raises(SpecError) as err:
        Root(str(tmp_path)).resolve("a\ud800.json", "model")
    assert err.value.field == "model" and "is not a path" in err.value.reason


@pytest.mark.parametrize(("arguments", "where"), [
    ('{"model": "a\\ud800.json"}', "params.arguments.model"),
    ('{"dag": {"nodes": [{"id": "a", "phase": "\\udc00"}], "edges": []}}', "params.arguments.dag.nodes[0].phase"),
    ('{"config": {"\\ud800": 1}}', "params.arguments.config"),
])
def test_an_mcp_message_holding_a_lone_surrogate_is_invalid_params_naming_where(arguments, where):
    pytest.importorskip("mcp")  # the SDK is an optional extra
    from shardplan.solver.mcp.transport import parse_line

    line = '{"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "fix_dag", "arguments": %s}}'
    reply = parse_line((line % arguments).encode())
    data = json.loads(reply.model_dump_json())
    assert data["id"] == 3 and data["error"]["code"] == -32602
    assert data["error"]["message"].startswith(f"shardplan: error: {where}: holds \\u")


def test_an_answer_that_cannot_be_written_is_an_error_for_its_id_and_the_server_writes_on():
    # fix_dag's inline DAG holding "\ud800" could not be serialised: the writer raised, which ended the server.
    pytest.importorskip("mcp")
    from mcp.shared.message import SessionMessage
    from mcp_types import JSONRPCResponse

    from shardplan.solver.mcp.transport import StdioTransport

    out = io.BytesIO()

    async def serve() -> None:
        with anyio.CancelScope() as scope:
            transport = StdioTransport(io.BytesIO(), out, scope)
            async with anyio.create_task_group() as tg:
                tg.start_soon(transport.write)
                async with transport.to_client:
                    for request_id, value in ((1, "\ud800"), (2, "ok")):
                        result = {"dag": value}
                        await transport.to_client.send(SessionMessage(JSONRPCResponse(jsonrpc="2.0", id=request_id,
                                                                                      result=result)))

    anyio.run(serve)
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["id"] == 1 and first["error"]["code"] == -32603
    assert first["error"]["message"].startswith("shardplan: error: result: cannot be written as JSON")
    assert second == {"jsonrpc": "2.0", "id": 2, "result": {"dag": "ok"}}
