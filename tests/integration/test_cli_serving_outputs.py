"""What ``solve --serving disagg|auto`` (and ``--rate``) and ``enumerate --serving disagg`` write besides
the plan: the chosen plan's DAG (it validates, and is the disaggregated one exactly when a disaggregated
plan was chosen), its launch commands (the same as ``evaluate --serving disagg --emit`` of the printed
pools, every option one the engine has, valid shell), the HTML report with both modes, and nothing
written on bad input or when no mode has a plan."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from shardplan.solver.outputs.launch.common import Launch
from shardplan.solver.outputs.report import metric_text
from tests.integration.test_cli_disagg import run
from tests.integration.test_cli_serving import pool_text
from tests.unit.solver.outputs.test_emit_disagg import allowed

# Disaggregated wins here (2 GPUs of 4 against 4 colocated), colocated wins on the second (no limits).
DISAGG_WINS = ["--model", "llama-3.1-8b", "--cluster", "4xH100", "--isl", "2000", "--osl", "200",
               "--ttft-ms", "2000", "--tpot-ms", "30"]
COLOCATED_WINS = ["--model", "llama-3.1-8b", "--cluster", "2xH100", "--isl", "1000", "--osl", "100"]
ENGINES = ("vllm", "sglang", "trtllm")
DISAGG_MARK = {"vllm": "--kv-transfer-config", "sglang": "--disaggregation-mode",
               "trtllm": "trtllm-serve disaggregated"}


def solve(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code, out, err = run(["solve", *argv, "--json"], capsys)
    assert code == 0, err
    return json.loads(out)


def validate(path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code, out, _ = run(["validate", str(path), "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and data["valid"] is True and data["violations"] == []
    return data


def dag_graph(path: Path) -> dict[str, Any]:
    graph: dict[str, Any] = json.loads(path.read_text())["graph"]
    return graph


@pytest.mark.parametrize(("argv", "chosen"), [
    (["--serving", "disagg", *DISAGG_WINS], "disagg"),
    (["--serving", "auto", *DISAGG_WINS], "disagg"),
    (["--serving", "auto", *COLOCATED_WINS], "colocated"),
    (["--serving", "colocated", "--rate", "6", *DISAGG_WINS], "colocated"),
], ids=["disagg", "auto-disagg", "auto-colocated", "colocated-rate"])
def test_the_dag_is_the_chosen_plans_and_validates(argv, chosen, tmp_path, capsys) -> None:
    path = tmp_path / "plan.json"
    data = solve([*argv, "--dag", str(path)], capsys)
    assert data.get("chosen", chosen) == chosen
    validate(path, capsys)
    graph = dag_graph(path)
    assert graph["num_gpus"] == data["num_gpus"]
    if chosen == "disagg":
        assert graph["serving"] == "disagg" and graph["schema"] == "shardplan.dag-disagg/1"
        kinds = {n["kind"] for n in json.loads(path.read_text())["nodes"]}
        assert "KVTransfer" in kinds
    else:
        assert "serving" not in graph and graph["schema"] == "shardplan.dag/1"


def test_the_text_output_says_what_it_wrote(tmp_path, capsys) -> None:
    dag, page = tmp_path / "plan.mmd", tmp_path / "both.html"
    code, out, _ = run(["solve", "--serving", "auto", *DISAGG_WINS, "--dag", str(dag), "--report", str(page)], capsys)
    assert code == 0 and f"wrote {dag}\n" in out and f"wrote {page}\n" in out
    assert dag.read_text().startswith("flowchart") and "both modes:" in out


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("argv", [["--serving", "disagg", *DISAGG_WINS], ["--serving", "auto", *COLOCATED_WINS]],
                         ids=["disagg", "auto-colocated"])
def test_emit_is_the_chosen_plans_launch_with_the_engines_own_options(argv, engine, tmp_path, capsys) -> None:
    data = solve([*argv, "--emit", engine], capsys)
    launch = data["launch"]
    assert launch["engine"] == engine and launch["commands"]
    for command in launch["commands"]:
        one = Launch(command["label"], tuple(command["argv"]), tuple(command["env"].items()))
        unknown = [o for o in one.options() if o not in allowed(engine, one.argv)]
        assert not unknown, unknown
    bash = shutil.which("bash")
    if bash is not None:
        script = tmp_path / "launch.sh"
        script.write_text(launch["script"])
        assert subprocess.run([bash, "-n", str(script)], capture_output=True).returncode == 0
    code, out, _ = run(["solve", *argv, "--emit", engine], capsys)  # the text is the script itself
    assert code == 0 and out == launch["script"]
    # Each engine's disaggregated form is there exactly when the disaggregated plan was chosen.
    assert (DISAGG_MARK[engine] in launch["script"]) == (data.get("chosen", "disagg") == "disagg")


@pytest.mark.parametrize("engine", ENGINES)
def test_emit_of_the_solved_pools_is_evaluates_emit_of_the_same_pools(engine, capsys) -> None:
    solved = solve(["--serving", "disagg", *DISAGG_WINS, "--emit", engine], capsys)
    code, out, _ = run(["evaluate", *DISAGG_WINS, "--serving", "disagg", "--prefill", pool_text(solved["prefill"]),
                        "--decode", pool_text(solved["decode"]), "--batch", str(solved["metrics"]["batch"]),
                        "--emit", engine, "--json"], capsys)
    assert code == 0 and json.loads(out)["launch"] == solved["launch"]


def test_the_report_shows_both_modes_with_the_printed_numbers(tmp_path, capsys) -> None:
    page = tmp_path / "both.html"
    data = solve(["--serving", "auto", *DISAGG_WINS, "--report", str(page)], capsys)
    text = page.read_text()
    assert 'id="mode-colocated"' in text and 'id="mode-disagg"' in text and 'id="fig-modes"' in text
    assert '<b id="chosen">disaggregated</b>' in text and data["chosen"] == "disagg"
    for mode in data["modes"].values():
        shown = metric_text(mode["metrics"])
        for key in ("tokens_per_s_per_gpu", "tokens_per_s_per_user", "ttft", "tpot"):
            assert shown[key] in text
    # the axes (plotly writes "/" as \u002f inside its JSON)
    assert r"output tokens\u002fs per user" in text and r"output tokens\u002fs per GPU" in text


def test_the_report_names_an_infeasible_mode_beside_the_feasible_one(tmp_path, capsys) -> None:
    page = tmp_path / "both.html"
    # One GPU cannot hold two pools: disaggregated is infeasible (DIS-001), colocated runs on it.
    data = solve(["--serving", "auto", "--model", "llama-3.1-8b", "--cluster", "1xH100", "--report", str(page)],
                 capsys)
    assert data["chosen"] == "colocated" and data["modes"]["disagg"]["status"] == "infeasible"
    text = page.read_text()
    assert 'id="mode-disagg"' in text and "infeasible: DIS-001" in text and 'id="mode-colocated"' in text


def test_nothing_is_written_when_no_mode_has_a_plan(tmp_path, capsys) -> None:
    paths = [tmp_path / "plan.json", tmp_path / "both.html"]
    code, out, err = run(["solve", "--serving", "auto", "--model", "llama-3.1-70b", "--cluster", "1xH100",
                          "--dag", str(paths[0]), "--report", str(paths[1]), "--emit", "vllm", "--json"], capsys)
    assert code == 1 and "MEM-001" in err and json.loads(out)["chosen"] is None
    assert "launch" not in json.loads(out)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("extra", "field"), [
    (["--dag", "{d}/plan.png"], "dag"),
    (["--report", "{d}/missing/both.html"], "report"),
    (["--experts-out", "{d}/experts.json"], "experts-out"),
    (["--rate", "0"], "rate"),
    (["--tp", "2"], "tp"),
    (["--emit", "vllm", "--engine", "trtllm"], "emit"),
    (["--report", "{d}/same.html", "--dag", "{d}/same.html"], "report"),
])
def test_bad_input_writes_nothing_and_exits_2(extra, field, tmp_path, capsys) -> None:
    good = ["--dag", str(tmp_path / "ok.json")] if "--dag" not in extra else ["--report", str(tmp_path / "ok.html")]
    argv = ["solve", "--serving", "auto", *DISAGG_WINS, *good, *(x.format(d=tmp_path) for x in extra)]
    code, out, err = run(argv, capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and f"error: {field}" in err
    assert list(tmp_path.iterdir()) == []


# --- enumerate --serving disagg --report ------------------------------------------------------------
def test_enumerate_report_draws_every_deployment_and_the_frontier(tmp_path, capsys) -> None:
    page = tmp_path / "frontier.html"
    code, out, _ = run(["enumerate", "--serving", "disagg", *DISAGG_WINS, "--limit", "12", "--json",
                        "--report", str(page)], capsys)
    data = json.loads(out)
    assert code == 0 and data["count"] == 12
    text = page.read_text()
    assert f'<b id="plan-count">{data["count"]}</b>' in text
    assert f'<b id="pareto-count">{len(data["pareto"])}</b>' in text and 'id="fig-pareto"' in text
    frontier = [p for p in data["plans"] if p["pareto"]]
    for plan in frontier:  # each frontier row's numbers, as printed
        assert metric_text(plan["metrics"])["tokens_per_s_per_gpu"] in text
    assert "(partial:" in text  # --limit stopped it


def test_enumerate_report_bad_input_and_nothing_feasible_write_nothing(tmp_path, capsys) -> None:
    page = tmp_path / "frontier.html"
    code, out, err = run(["enumerate", "--serving", "disagg", *DISAGG_WINS, "--limit", "0", "--report", str(page)],
                         capsys)
    assert code == 2 and out == "" and "limit" in err
    code, _, err = run(["enumerate", "--serving", "disagg", "--model", "llama-3.1-70b", "--cluster", "1xH100",
                        "--report", str(page)], capsys)
    assert code == 1 and "MEM-001" in err
    code, _, err = run(["enumerate", "--serving", "disagg", *DISAGG_WINS, "--report", str(tmp_path / "no" / "x.html")],
                       capsys)
    assert code == 2 and "error: report" in err
    assert list(tmp_path.iterdir()) == []


def test_experts_out_of_a_dense_model_is_refused_before_solving(tmp_path, capsys) -> None:
    code, out, err = run(["solve", "--serving", "colocated", "--rate", "6", *DISAGG_WINS, "--experts-out",
                          str(tmp_path / "experts.json")], capsys)
    assert code == 2 and out == "" and "error: experts-out: the model has no MoE layers" in err
    assert list(tmp_path.iterdir()) == []


def test_experts_out_with_a_rate_is_the_colocated_plans_placement(tmp_path, capsys) -> None:
    path = tmp_path / "experts.json"
    data = solve(["--serving", "colocated", "--rate", "10", "--model", "qwen3-30b-a3b", "--cluster", "4xH100",
                  "--isl", "2000", "--osl", "200", "--tpot-ms", "30", "--experts-out", str(path)], capsys)
    placed = json.loads(path.read_text())
    replica_gpus = data["num_gpus"] // data["degrees"]["dp"]
    assert placed["gpus_per_replica"] == replica_gpus and placed["replicas"] == data["degrees"]["dp"]
    assert len(placed["layers"]) == 48  # Qwen3-30B-A3B: every layer is MoE
    for layer_map in placed["physical_to_logical_map"]:  # 128 experts, each placed once, 128 / ep per GPU
        assert sorted(layer_map) == list(range(128))
        assert placed["slots_per_gpu"] * data["degrees"]["ep"] == 128


def test_same_input_same_bytes_in_every_file(tmp_path, capsys) -> None:
    written = []
    for run_dir in ("a", "b"):
        folder = tmp_path / run_dir
        folder.mkdir()
        code, _, err = run(["solve", "--serving", "auto", *DISAGG_WINS, "--dag", str(folder / "plan.json"),
                            "--report", str(folder / "both.html")], capsys)
        assert code == 0, err
        written.append({p.name: p.read_bytes() for p in folder.iterdir()})
    assert written[0] == written[1] and set(written[0]) == {"plan.json", "both.html"}


@pytest.mark.parametrize(("command", "serving"), [("solve", "disagg"), ("solve", "auto"), ("enumerate", "disagg"),
                                                  ("enumerate", "auto")])
@pytest.mark.parametrize("routing", [["--zipf", "1.2"], ["--load-profile", "{d}/routing.json"]])
def test_a_routing_profile_is_refused_where_the_pools_would_drop_it(command, serving, routing, tmp_path,
                                                                    capsys) -> None:
    # The pools price uniform routing (no expert placement per pool): solve --serving disagg --zipf 1.2 printed
    # the very plan it prints without --zipf, 6,556.7 tokens/s/GPU for Qwen3-30B-A3B on 8xH100 either way.
    option = routing[0].lstrip("-")
    argv = [command, "--serving", serving, "--model", "qwen3-30b-a3b", "--cluster", "8xH100", "--tpot-ms", "50",
            "--report", str(tmp_path / "r.html"), *(x.format(d=tmp_path) for x in routing)]
    code, out, err = run(argv, capsys)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert f"error: {option}: expert placement per pool is not supported with --serving {serving}" in err
    assert list(tmp_path.iterdir()) == []
