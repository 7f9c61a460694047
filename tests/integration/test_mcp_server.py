"""``shardplan mcp`` driven over stdio by the MCP SDK's own client, no mocks (issue 16, acceptance 1-2).

One server process serves every call of this module (``exchange`` below records them); each answer
is held to what the CLI prints with ``--json`` for the same inputs, run in-process here: the same
dict apart from timing (``solve_time_s``), and for bad input the same one line the CLI prints on
stderr. Tools and results are checked against independent facts where there is no CLI twin
(the profile files on disk, the root's contents).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import networkx as nx
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from shardplan.hardware.profile import PROFILE_DIR, composed_profiles
from shardplan.solver.cli import main
from shardplan.solver.cli.results import without_timing
from shardplan.solver.dag.export import from_json_data, to_json_data, write_json
from tests.unit.rules.dag.mutations import collective_removed

TOOLS = {"plan", "enumerate", "evaluate", "validate_dag", "fix_dag", "explain_rule", "list_models",
         "list_hardware", "list_profiles"}
SMALL = {"model": "llama-3.1-8b", "cluster": "2xH100"}  # solves in well under a second: tp 2
# A config.json of a small dense model (Llama-3.1-8B's shape, 4 layers), for the custom-model path.
CONFIG = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
          "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 4, "vocab_size": 128256,
          "max_position_embeddings": 131072, "torch_dtype": "bfloat16"}


# --- the CLI, in-process --------------------------------------------------------------------------
def cli(*argv: str) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``shardplan ARGV``."""
    out, err, code = io.StringIO(), io.StringIO(), 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(argv))
        except SystemExit as ended:
            code = ended.code if isinstance(ended.code, int) else 0
    return code, out.getvalue(), err.getvalue()


def cli_json(*argv: str) -> Any:
    return json.loads(cli(*argv, "--json")[1])


# --- the server, driven by the SDK's client -------------------------------------------------------
def run_session(root: Path, script: Callable[[ClientSession], Awaitable[None]]) -> None:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "shardplan.solver.cli", "mcp", "--root", str(root)],
        env={k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "PYTHONPATH", "VIRTUAL_ENV")},
    )

    async def drive() -> None:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await script(session)

    anyio.run(drive)


class Answer:
    """One tool call's answer: error flag, text and structured content."""

    def __init__(self, result: Any):
        self.is_error = bool(result.is_error)
        self.text = result.content[0].text if result.content else ""
        self.data = result.structured_content


def bad_calls(outside: str) -> list[tuple[str, dict[str, Any]]]:
    """Fifty calls that must each fail as bad input, of every kind."""
    kinds: list[tuple[str, dict[str, Any]]] = [
        ("plan", {"model": "no-such-model"}),
        ("plan", {"config": {"architectures": ["NoSuchForCausalLM"]}}),
        ("plan", {"config": {"hidden_size": 4096}}),
        ("plan", {"isl": -5}),
        ("plan", {"osl": 0}),
        ("plan", {"isl": "1024"}),
        ("plan", {"model": os.path.join(outside, "config.json")}),
        ("plan", {"load_profile": "../outside.json"}),
        ("plan", {"cluster": "8xNoSuchGPU"}),
        ("plan", {"time_limit": -1.0}),
        ("plan", {"time_limit": 1e9}),
        ("plan", {"no_such_option": 1}),
        ("plan", {"model": "llama-3.1-8b", "config": CONFIG}),
        ("evaluate", {"tp": 0}),
        ("evaluate", {"stages": "0:1,x"}),
        ("enumerate", {"limit": 5}),
        ("enumerate", {"limit": 0, "time_limit": 5.0}),
        ("validate_dag", {}),
        ("validate_dag", {"dag": {"nodes": "x"}}),
        ("validate_dag", {"path": "/etc/passwd"}),
        ("fix_dag", {"dag": {"nodes": [], "edges": []}}),
        ("explain_rule", {"rule_id": "XX-999"}),
        ("list_models", {"extra": True}),
        ("no_such_tool", {}),
        ("plan", {"dag_path": "plan.png", **SMALL}),
    ]
    return (kinds * 2)[:50]


# Small serving cases (Llama-3.1-8B on 4xH100): each a fraction of a second in either mode.
SERVING = {"model": "llama-3.1-8b", "cluster": "4xH100", "isl": 2000, "osl": 200, "ttft_ms": 2000.0, "tpot_ms": 30.0}
SERVING_ARGV = ["--model", "llama-3.1-8b", "--cluster", "4xH100", "--isl", "2000", "--osl", "200", "--ttft-ms", "2000",
                "--tpot-ms", "30"]
EVALUATE_DISAGG = {"model": "llama-3.1-8b", "cluster": "2x8xH100", "isl": 1000, "osl": 100, "batch": 32,
                   "serving": "disagg", "prefill": "workers=2,tp=2", "decode": "workers=1,tp=4"}
# (tool, arguments, the CLI command that must print the same one line)
SERVING_BAD: list[tuple[str, dict[str, Any], tuple[str, ...]]] = [
    ("plan", {"serving": "disagg", "tp": 4}, ("solve", "--serving", "disagg", "--tp", "4")),
    ("plan", {"serving": "auto", "rate": -1.0}, ("solve", "--serving", "auto", "--rate", "-1")),
    ("plan", {"serving": "auto", "objective": "latency"}, ("solve", "--serving", "auto", "--objective", "latency")),
    ("enumerate", {"serving": "auto", "objective": "latency", "limit": 5, "time_limit": 5.0},
     ("enumerate", "--serving", "auto", "--objective", "latency")),
    ("plan", {"serving": "disagg", "osl": 1}, ("solve", "--serving", "disagg", "--osl", "1")),
    ("plan", {"serving": "auto", "experts_out": "experts.json"},
     ("solve", "--serving", "auto", "--experts-out", "experts.json")),
    ("plan", {"serving": "disagg", "dag_path": "plan.png"}, ("solve", "--serving", "disagg", "--dag", "plan.png")),
    ("evaluate", {"serving": "disagg", "prefill": "tp=two", "decode": "tp=4"},
     ("evaluate", "--serving", "disagg", "--prefill", "tp=two", "--decode", "tp=4")),
    ("evaluate", {"serving": "disagg", "prefill": "tp=2"}, ("evaluate", "--serving", "disagg", "--prefill", "tp=2")),
    ("evaluate", {"prefill": "tp=2"}, ("evaluate", "--prefill", "tp=2")),
    ("plan", {"serving": "disagg", "zipf": 1.2}, ("solve", "--serving", "disagg", "--zipf", "1.2")),
    ("enumerate", {"serving": "auto", "zipf": 1.2, "limit": 5, "time_limit": 5.0},
     ("enumerate", "--serving", "auto", "--zipf", "1.2")),
]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("root")


@pytest.fixture(scope="module")
def exchange(root: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every call this module checks, made in one server session, in order."""
    outside = tmp_path_factory.mktemp("outside")
    (outside / "config.json").write_text(json.dumps(CONFIG))
    got: dict[str, Any] = {}

    async def script(session: ClientSession) -> None:
        got["tools"] = (await session.list_tools()).tools
        got["resources"] = (await session.list_resources()).resources
        for uri in ("shardplan://rules", "shardplan://dag-schema"):
            got[uri] = json.loads((await session.read_resource(uri)).contents[0].text)

        async def call(key: str, tool: str, args: dict[str, Any]) -> None:
            got[key] = Answer(await session.call_tool(tool, args))

        await call("default", "plan", {})
        await call("infeasible", "plan", {"model": "llama-3.1-70b", "cluster": "1xH100"})
        await call("evaluate", "evaluate", {"model": "llama-3.1-70b", "cluster": "8xH100", "tp": 3})
        await call("small", "plan", {**SMALL, "detail": "expanded", "include_dag": True,
                                     "dag_path": str(root / "small.json")})
        await call("validate_inline", "validate_dag", {"dag": got["small"].data["dag"]})
        await call("validate_file", "validate_dag", {"path": str(root / "small.json")})
        broken = from_json_data(got["small"].data["dag"])
        collective_removed(broken)
        write_json(broken, root / "broken.json")
        await call("fix_inline", "fix_dag", {"dag": to_json_data(broken)})
        await call("fix_file", "fix_dag", {"path": str(root / "broken.json"), "out": str(root / "fixed.json")})
        await call("custom", "plan", {"config": CONFIG, "cluster": "2xH100"})
        await call("enumerate", "enumerate", {**SMALL, "limit": 4, "time_limit": 20.0})
        await call("rule", "explain_rule", {"rule_id": "TP-001"})
        for tool in ("list_models", "list_hardware", "list_profiles"):
            await call(tool, tool, {})
        await call("auto", "plan", {**SERVING, "serving": "auto"})
        await call("rate", "plan", {**SERVING, "serving": "auto", "rate": 6.0})
        await call("auto_median", "plan", {**SERVING, "serving": "auto", "limits_at": "median-error"})
        await call("colocated_median", "plan", {**SERVING, "objective": "throughput", "limits_at": "median-error"})
        await call("disagg", "plan", {**SERVING, "serving": "disagg", "emit": "sglang", "include_dag": True,
                                      "dag_path": str(root / "disagg.json")})
        await call("validate_disagg", "validate_dag", {"dag": got["disagg"].data["dag"]})
        await call("auto_infeasible", "plan", {"model": "llama-3.1-70b", "cluster": "1xH100", "serving": "auto"})
        await call("evaluate_disagg", "evaluate", EVALUATE_DISAGG)
        await call("enumerate_disagg", "enumerate", {**SERVING, "serving": "disagg", "limit": 6, "time_limit": 20.0})
        await call("enumerate_disagg_infeasible", "enumerate", {"model": "llama-3.1-70b", "cluster": "1xH100",
                                                                "serving": "disagg", "limit": 5, "time_limit": 20.0})
        await call("enumerate_auto", "enumerate", {**SERVING, "serving": "auto", "limit": 8, "time_limit": 20.0})
        got["serving_bad"] = [Answer(await session.call_tool(tool, args)) for tool, args, _ in SERVING_BAD]
        got["bad"] = [Answer(await session.call_tool(tool, args)) for tool, args in bad_calls(str(outside))]
        await call("after_bad", "plan", SMALL)

    run_session(root, script)
    return got


# --- acceptance 1: the tools and their results, against the CLI -------------------------------------
def test_lists_the_nine_tools_each_with_an_object_schema(exchange: dict[str, Any]) -> None:
    tools = {t.name: t for t in exchange["tools"]}
    assert set(tools) == TOOLS
    assert all(t.input_schema["type"] == "object" and t.description for t in tools.values())
    assert {"limit", "time_limit"} <= set(tools["enumerate"].input_schema["required"])
    assert "tp" in tools["evaluate"].input_schema["properties"]


def test_plan_of_the_default_is_the_cli_default(exchange: dict[str, Any]) -> None:
    answer = exchange["default"]
    assert not answer.is_error and answer.data["status"] == "optimal"
    assert without_timing(answer.data) == without_timing(cli_json("solve"))
    assert json.loads(answer.text) == answer.data  # the text block carries the same JSON


def test_infeasible_plan_is_a_result_naming_the_rules_as_the_cli_does(exchange: dict[str, Any]) -> None:
    answer = exchange["infeasible"]
    assert not answer.is_error and answer.data["status"] == "infeasible"
    assert [c["rule"] for c in answer.data["conflict"]] == ["MEM-001"]
    code, out, _ = cli("solve", "--model", "llama-3.1-70b", "--cluster", "1xH100", "--json")
    assert code == 1 and answer.data == json.loads(out)


def test_evaluate_of_tp_3_lists_the_violations_the_cli_lists(exchange: dict[str, Any]) -> None:
    answer = exchange["evaluate"]
    assert not answer.is_error
    rules = {v["rule"] for v in answer.data["violations"]}
    assert {"TP-001", "TP-002"} <= rules  # 64 heads and 8 KV heads: neither is divisible by 3
    code, out, _ = cli("evaluate", "--model", "llama-3.1-70b", "--cluster", "8xH100", "--tp", "3", "--json")
    assert code == 1 and answer.data == json.loads(out)


def test_validate_dag_of_a_plans_dag_inline_and_from_the_file_it_wrote(exchange: dict[str, Any], root: Path) -> None:
    small = exchange["small"]
    dag = small.data.pop("dag")  # the one key the CLI's solve --json has no twin for
    expected = cli_json("solve", "--model", "llama-3.1-8b", "--cluster", "2xH100")
    assert without_timing(small.data) == without_timing(expected)
    assert from_json_data(dag).number_of_nodes() > 0 and (root / "small.json").is_file()
    inline, from_file = exchange["validate_inline"].data, exchange["validate_file"].data
    assert inline["valid"] and inline["violations"] == [] and inline["file"] is None
    assert from_file == cli_json("validate", str(root / "small.json"))
    assert {k: v for k, v in inline.items() if k != "file"} == {k: v for k, v in from_file.items() if k != "file"}


def test_fix_dag_repairs_a_removed_collective_as_validate_fix_does(exchange: dict[str, Any], root: Path) -> None:
    inline, from_file = exchange["fix_inline"].data, exchange["fix_file"].data
    assert inline["valid"] and [c["rule"] for c in inline["changes"]] == ["DAG-010"]
    repaired = from_json_data(inline.pop("dag"))
    assert nx.is_directed_acyclic_graph(repaired)
    out = root / "fixed-by-cli.json"
    code, text, _ = cli("validate", str(root / "broken.json"), "--fix", "--out", str(out), "--json")
    expected = json.loads(text)
    assert code == 0 and {**from_file, "fixed": None} == {**expected, "fixed": None}
    assert (root / "fixed.json").read_text() == out.read_text()


def test_a_config_object_plans_as_the_same_config_file(exchange: dict[str, Any], root: Path) -> None:
    path = root / "custom.json"  # the stem names the model as the object's default name does
    path.write_text(json.dumps(CONFIG))
    answer = exchange["custom"]
    assert not answer.is_error and answer.data["model"] == "custom"
    assert without_timing(answer.data) == without_timing(cli_json("solve", "--model", str(path), "--cluster", "2xH100"))


def test_enumerate_is_bounded_and_puts_the_pareto_frontier_first(exchange: dict[str, Any]) -> None:
    data = exchange["enumerate"].data
    assert 1 <= data["count"] <= 4 and list(data)[:2] == ["count", "pareto"]
    assert data["pareto"] == [p["index"] for p in data["plans"] if p["pareto"]]
    expected = cli_json("enumerate", "--model", "llama-3.1-8b", "--cluster", "2xH100", "--limit", "4",
                        "--time-limit", "20")
    assert without_timing(data) == without_timing(expected)


def test_the_catalogs_are_the_clis(exchange: dict[str, Any]) -> None:
    assert exchange["rule"].data == cli_json("rules", "TP-001")
    assert exchange["list_models"].data == {"models": cli_json("models")}
    assert exchange["list_hardware"].data == {"gpus": cli_json("hardware")}
    assert json.loads(exchange["list_models"].text) == cli_json("models")  # the text is the CLI's list itself
    names = {json.loads(p.read_text())["name"] for p in PROFILE_DIR.glob("*.json")}
    composed = {p.name for p in composed_profiles()}
    assert {p["name"] for p in exchange["list_profiles"].data["profiles"]} == names | composed
    assert "h100-sxm+sglang" in composed


def test_the_rule_catalog_and_dag_schema_are_resources(exchange: dict[str, Any]) -> None:
    assert {str(r.uri) for r in exchange["resources"]} == {"shardplan://rules", "shardplan://dag-schema"}
    assert exchange["shardplan://rules"] == cli_json("rules")
    schema = exchange["shardplan://dag-schema"]
    assert schema["schema"] == "shardplan.dag/1" and "AllReduce" in schema["node_kinds"]["collective"]
    listed = set(schema["rules"]) | set(schema["disaggregated"]["rules"])
    assert listed == {r["id"] for r in cli_json("rules") if r["id"].startswith("DAG-")}
    assert schema["disaggregated"]["schema"] == "shardplan.dag-disagg/1"


# --- serving modes: plan with serving and rate, evaluate with pools, as the CLI ----------------------
def test_plan_with_serving_auto_is_solve_serving_auto(exchange: dict[str, Any]) -> None:
    answer = exchange["auto"]
    assert not answer.is_error and set(answer.data["modes"]) == {"colocated", "disagg"}
    assert without_timing(answer.data) == without_timing(cli_json("solve", "--serving", "auto", *SERVING_ARGV))


def test_plan_with_a_rate_is_solve_with_the_rate(exchange: dict[str, Any]) -> None:
    answer = exchange["rate"]
    assert not answer.is_error and answer.data["rate_rps"] == 6
    expected = cli_json("solve", "--serving", "auto", "--rate", "6", *SERVING_ARGV)
    assert without_timing(answer.data) == without_timing(expected)


@pytest.mark.parametrize(("key", "argv"), [
    ("auto_median", ("--serving", "auto")),
    ("colocated_median", ("--objective", "throughput", "--no-runner-up")),
])
def test_plan_with_limits_at_median_error_is_solve_with_it(exchange: dict[str, Any], key: str,
                                                           argv: tuple[str, ...]) -> None:
    answer = exchange[key]
    assert not answer.is_error
    held = [answer.data] if key == "colocated_median" else list(answer.data["modes"].values())
    assert all(data["limits_at"]["given"] == {"ttft_ms": 2000.0, "tpot_ms": 30.0} for data in held)
    expected = cli_json("solve", *argv, *SERVING_ARGV, "--limits-at", "median-error")
    assert without_timing(answer.data) == without_timing(expected)


def test_plan_disagg_with_launch_and_dag_is_the_clis_and_the_dag_validates(exchange: dict[str, Any],
                                                                           root: Path) -> None:
    answer = exchange["disagg"]
    dag = answer.data.pop("dag")
    expected = cli_json("solve", "--serving", "disagg", "--emit", "sglang", *SERVING_ARGV)
    assert without_timing(answer.data) == without_timing(expected)
    assert "--disaggregation-mode" in answer.data["launch"]["script"]
    assert dag["graph"]["serving"] == "disagg" and exchange["validate_disagg"].data["valid"] is True
    assert cli_json("validate", str(root / "disagg.json"))["valid"] is True


def test_plan_auto_with_no_mode_feasible_is_a_result_as_the_cli_prints(exchange: dict[str, Any]) -> None:
    answer = exchange["auto_infeasible"]
    assert not answer.is_error and answer.data["chosen"] is None and answer.data["status"] == "infeasible"
    code, out, _ = cli("solve", "--serving", "auto", "--model", "llama-3.1-70b", "--cluster", "1xH100", "--json")
    assert code == 1 and without_timing(answer.data) == without_timing(json.loads(out))


def test_evaluate_with_pools_is_evaluate_serving_disagg(exchange: dict[str, Any]) -> None:
    answer = exchange["evaluate_disagg"]
    assert not answer.is_error and answer.data["prefill"]["workers"] == 2 and answer.data["violations"] == []
    argv = ["evaluate", "--model", "llama-3.1-8b", "--cluster", "2x8xH100", "--isl", "1000", "--osl", "100",
            "--batch", "32", "--serving", "disagg", "--prefill", "workers=2,tp=2", "--decode", "workers=1,tp=4"]
    assert answer.data == cli_json(*argv)


def test_enumerate_disagg_is_the_clis_frontier_and_its_infeasible_object(exchange: dict[str, Any]) -> None:
    data = exchange["enumerate_disagg"].data
    assert data["count"] == 6 and data["pareto"] == [p["index"] for p in data["plans"] if p["pareto"]]
    expected = cli_json("enumerate", "--serving", "disagg", *SERVING_ARGV, "--limit", "6", "--time-limit", "20")
    assert data == expected
    infeasible = exchange["enumerate_disagg_infeasible"]
    code, out, _ = cli("enumerate", "--serving", "disagg", "--model", "llama-3.1-70b", "--cluster", "1xH100",
                       "--limit", "5", "--time-limit", "20", "--json")
    assert code == 1 and not infeasible.is_error and infeasible.data == json.loads(out)
    assert infeasible.data["status"] == "infeasible" and infeasible.data["conflict"]


def test_enumerate_auto_is_the_clis_frontier_of_both_modes(exchange: dict[str, Any]) -> None:
    data = exchange["enumerate_auto"].data
    assert data["count"] == 8 and data["partial"] is True
    assert data == cli_json("enumerate", "--serving", "auto", *SERVING_ARGV, "--limit", "8", "--time-limit", "20")


def test_bad_serving_calls_are_the_clis_one_line(exchange: dict[str, Any], root: Path) -> None:
    for answer, (tool, args, argv) in zip(exchange["serving_bad"], SERVING_BAD, strict=True):
        code, _, err = cli(*argv)
        assert code == 2 and answer.is_error and answer.text == err.strip(), (tool, args)
    assert not (root / "experts.json").exists() and not (root / "plan.png").exists()


# --- acceptance 2: bad input is one line, and the server goes on -----------------------------------
def test_bad_inputs_are_one_line_errors_the_cli_would_print(exchange: dict[str, Any]) -> None:
    bad = exchange["bad"]
    assert len(bad) == 50 and all(a.is_error and a.data is None for a in bad)
    assert all(a.text.startswith("shardplan: ") and "\n" not in a.text for a in bad)
    same_as_cli = {0: ("solve", "--model", "no-such-model"), 3: ("solve", "--isl", "-5"),
                   4: ("solve", "--osl", "0"), 8: ("solve", "--cluster", "8xNoSuchGPU"),
                   9: ("solve", "--time-limit", "-1"), 14: ("evaluate", "--stages", "0:1,x"),
                   21: ("rules", "XX-999"), 24: ("solve", "--dag", "plan.png")}
    for index, argv in same_as_cli.items():
        code, _, err = cli(*argv)
        assert code == 2 and bad[index].text == err.strip(), argv
    assert bad[1].text.startswith("shardplan: error: architectures: unsupported")
    assert bad[2].text.startswith("shardplan: error: architectures: missing")
    for index, field in ((6, "model"), (7, "load-profile"), (19, "path")):
        assert f"error: {field}: " in bad[index].text and "is outside --root" in bad[index].text
    assert "error: isl: " in bad[5].text and "error: no_such_option: " in bad[11].text
    assert "error: time-limit: must be at most" in bad[10].text


def test_the_server_serves_after_fifty_bad_calls(exchange: dict[str, Any], root: Path) -> None:
    after = exchange["after_bad"]
    assert not after.is_error and after.data["status"] == "optimal"
    assert not (root / "plan.png").exists()  # a refused output is never written
    assert not any(name.startswith(".") for name in os.listdir(root))  # nor a temporary left behind
