"""``shardplan solve --serving colocated|disagg|auto`` and ``--rate``: issue 15's acceptance 2 (both
modes printed with tokens/s per GPU and per user; every disaggregated plan keeps Little's law), the
solved deployment priced exactly as ``evaluate --serving disagg`` prices it, and the CLI contract
(bad input one line and exit 2, infeasible exit 1 naming rules)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from shardplan.models import SolverLimitError
from shardplan.solver.cli import serving as cli_serving
from shardplan.solver.cli.results import without_timing
from tests.integration.test_cli_disagg import run

ASKED = ["--isl", "4000", "--osl", "500", "--ttft-ms", "2000", "--tpot-ms", "50"]
QWEN = ["--model", "qwen3-235b-a22b", "--cluster", "2x8xH200", *ASKED]
LLAMA_FP8 = ["--model", "llama-3.1-70b", "--weights-dtype", "fp8", "--cluster", "8xH200", *ASKED]


def solve_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code, out, err = run(["solve", *argv, "--json"], capsys)
    assert code == 0, err
    return json.loads(out)


def pool_text(pool: dict[str, Any]) -> str:
    """A pool as ``--prefill`` / ``--decode`` take it: its degrees, stages, workers and batch limit."""
    deg = pool["degrees"]
    stages = ",".join(f"{s['layers'][0]}:{s['layers'][1]}" for s in pool["stages"])
    text = (f"workers={pool['workers']},tp={deg['tp']},sp={deg['sp']},attn_dp={deg['attn_dp']},"
            f"expert_tp={deg['expert_tp']},stages={stages}")
    return text + (f",batch={pool['max_batch']}" if pool["max_batch"] else "")


def check_littles_law(plan: dict[str, Any]) -> None:
    m = plan["metrics"]
    assert m["batch"] == pytest.approx(m["requests_per_s"] * m["e2e_ms"] / 1e3, rel=1e-4)
    assert m["ttft_ms"] + (plan["workload"]["osl"] - 1) * m["tpot_ms"] == pytest.approx(m["e2e_ms"], rel=1e-4)


@pytest.mark.parametrize("argv", [QWEN, LLAMA_FP8], ids=["qwen3-235b-2x8xH200", "llama-70b-fp8-8xH200"])
def test_auto_shows_both_modes_and_the_disaggregated_plan_keeps_littles_law(argv, capsys) -> None:
    data = solve_json(["--serving", "auto", *argv], capsys)
    modes = data["modes"]
    assert set(modes) == {"colocated", "disagg"} and data["chosen"] in modes
    per_gpu = {k: v["metrics"]["output_tokens_per_s_per_gpu"] for k, v in modes.items()}
    assert data["chosen"] == max(per_gpu, key=lambda k: (per_gpu[k], k == "colocated"))
    for plan in modes.values():
        assert plan["metrics"]["tpot_ms"] <= 50 and plan["metrics"]["ttft_ms"] <= 2000
    check_littles_law(modes["disagg"])
    assert modes["disagg"]["num_gpus"] <= 16
    rate = modes["disagg"]["metrics"]["requests_per_s"]
    for role in ("prefill", "decode"):  # within one worker of the rate: a worker fewer could not keep up
        pool = modes["disagg"][role]
        assert pool["capacity_rps"] >= rate * (1 - 1e-4)
        assert pool["capacity_rps"] * (pool["workers"] - 1) / pool["workers"] < rate


def test_the_text_prints_both_modes_per_gpu_and_per_user(capsys) -> None:
    code, out, _ = run(["solve", "--serving", "auto", *LLAMA_FP8], capsys)
    assert code == 0
    rows = [line for line in out.splitlines() if "tokens/s/GPU" in line]
    assert [r.split()[0] for r in rows] == ["colocated", "disagg"]
    assert all("tokens/s/user" in r for r in rows) and sum("<- chosen" in r for r in rows) == 1


def test_the_solved_deployment_is_what_evaluate_serving_disagg_says(capsys) -> None:
    solved = solve_json(["--serving", "disagg", *LLAMA_FP8], capsys)
    argv = ["evaluate", *LLAMA_FP8, "--serving", "disagg", "--prefill", pool_text(solved["prefill"]),
            "--decode", pool_text(solved["decode"]), "--batch", str(solved["metrics"]["batch"]), "--json"]
    code, out, _ = run(argv, capsys)
    evaluated = json.loads(out)
    assert code == 0 and evaluated["violations"] == []
    for key in ("metrics", "prefill", "decode", "kv_transfer", "num_gpus"):
        assert evaluated[key] == solved[key]


def test_a_rate_is_sustained_on_the_fewest_gpus_in_both_modes(capsys) -> None:
    data = solve_json(["--serving", "auto", "--rate", "6", "--model", "llama-3.1-8b", "--cluster", "4xH100",
                       "--isl", "2000", "--osl", "200", "--ttft-ms", "2000", "--tpot-ms", "30"], capsys)
    for mode in ("colocated", "disagg"):
        plan = data["modes"][mode]
        assert plan["rate_rps"] == 6
        assert plan["metrics"]["output_tokens_per_s"] / 200 >= 6 * (1 - 1e-9)
        assert isinstance(plan["solve_time_s"], float) and plan["solve_time_s"] >= 0  # colocated's was null
    gpus = {k: v["num_gpus"] for k, v in data["modes"].items()}
    assert data["num_gpus"] == min(gpus.values())


@pytest.mark.parametrize(("argv", "field"), [
    (["--serving", "disagg", "--rate", "-1"], "rate"),
    (["--serving", "disagg", "--tp", "4"], "tp"),
    (["--serving", "auto", "--objective", "latency"], "objective"),
    (["--serving", "disagg", "--dag", "x.png"], "dag"),
    (["--serving", "auto", "--experts-out", "x.json"], "experts-out"),
    (["--serving", "auto", "--emit", "vllm", "--engine", "sglang"], "emit"),
    (["--serving", "auto", "--runner-up"], "runner-up"),
    (["--serving", "disagg", "--osl", "1"], "osl"),
    # the disaggregated search decides the requests in flight: a --batch it would ignore is refused
    (["--serving", "disagg", "--batch", "64"], "batch"),
    (["--serving", "auto", "--batch", "64"], "batch"),
])
def test_bad_input_is_one_line_naming_the_field(argv, field, capsys) -> None:
    code, out, err = run(["solve", "--model", "llama-3.1-8b", "--cluster", "2xH100", *argv], capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and field in err


def test_a_rate_where_ttft_binds_is_walked_to_the_same_bytes_in_two_processes() -> None:
    """``--rate`` where the TTFT limit refuses most small deployments (``rate_walk.py``: 243 CP-SAT proposals before,
    one exact check now): two fresh processes, as users run it, print the same bytes, the search time aside, and the
    deployment on 34 GPUs that brute force's order accepts first."""
    cmd = [sys.executable, "-m", "shardplan.solver.cli", "solve", "--serving", "disagg", "--rate", "20",
           "--model", "llama-3.1-70b", "--cluster", "8x8xH200", "--isl", "4000", "--osl", "500",
           "--ttft-ms", "1154", "--tpot-ms", "50", "--json"]
    first, second = (json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
                     for _ in range(2))
    assert without_timing(first) == without_timing(second)
    assert first["status"] == "optimal" and first["num_gpus"] == 34 and first["proposals"] == 1


def test_rate_with_a_latency_objective_blames_the_rate(capsys) -> None:
    # --rate alone keeps --serving at its default, colocated: the refusal named "--serving colocated" as
    # what cannot plan latency and then said latency is "only planned colocated", contradicting itself.
    code, out, err = run(["solve", "--model", "llama-3.1-8b", "--cluster", "2xH100", "--rate", "5",
                          "--objective", "latency"], capsys)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "objective" in err and "--rate plans" in err and "--serving colocated plans" not in err


def test_nothing_feasible_exits_1_naming_the_rules(capsys) -> None:
    code, out, err = run(["solve", "--serving", "disagg", "--model", "llama-3.1-70b", "--cluster", "1xH100",
                          "--json"], capsys)
    assert code == 1 and "MEM-001" in err
    assert json.loads(out)["status"] == "infeasible"


def test_a_search_cut_short_before_any_plan_says_so_rather_than_infeasible(capsys) -> None:
    # TTFT 110 ms: the prefill layouts whose lone prompt (from 20.4 ms) with the serving stack (81 ms) keeps
    # it are candidates, so the search runs. At their full rates every deployment breaks the limit (queue,
    # transfer and admission); run to its end, the search finds one held to a single request in flight
    # (TTFT 109.6 ms, ``Pools.served``). A limit far below the candidates' pricing stops it before its first
    # question: nothing is proven either way, so it says so as colocated does, not "infeasible".
    argv = ["solve", "--serving", "disagg", "--model", "llama-3.1-8b", "--cluster", "4xH100", "--isl", "2000",
            "--osl", "200", "--ttft-ms", "110", "--tpot-ms", "30"]
    code, out, err = run([*argv, "--json"], capsys)
    plan = json.loads(out)
    assert code == 0 and plan["status"] == "optimal" and plan["metrics"]["batch"] == 1
    code, out, err = run([*argv, "--time-limit", "0.001"], capsys)
    assert code != 1 and "infeasible" not in err and "no plan found within 0.001 s" in err and out == ""


def test_no_pair_fits_names_the_ttft_that_left_the_narrow_prefill_layouts_out(capsys) -> None:
    # TTFT 102 ms on 4xH100: with the serving stack's 81 ms, only the 3 prefill layouts whose lone prompt of
    # 2,000 tokens takes at most 21 ms (20.4-20.9 ms, the widest) are candidates, and none leaves a GPU for a
    # decode pool. "No pools fit the cluster" alone blamed the cluster; the TTFT is named beside it.
    argv = ["solve", "--serving", "disagg", "--model", "llama-3.1-8b", "--cluster", "4xH100", "--isl", "2000",
            "--osl", "200", "--ttft-ms", "102", "--tpot-ms", "30"]
    code, out, err = run([*argv, "--json"], capsys)
    assert code == 1
    rules = [(c["rule"], c["message"]) for c in json.loads(out)["conflict"]]
    assert [r for r, _ in rules] == ["DIS-001", "SLA-001"]
    assert rules[1][1].startswith("8 of 11 prefill layouts are no candidates") and "81 ms" in rules[1][1]


SMALL_8B = ["--model", "llama-3.1-8b", "--cluster", "4xH100", "--isl", "2000", "--osl", "200",
            "--ttft-ms", "2000", "--tpot-ms", "30"]


def _cut_short_after(seconds: float):
    def planner(problem: Any, rate_rps: Any, deadline: Any) -> dict[str, Any]:
        raise SolverLimitError(f"time-limit: no plan found within {seconds:g} s")
    return planner


def test_auto_with_one_mode_cut_short_still_plans_the_other(capsys, monkeypatch) -> None:
    """The time limit stopping one mode before any plan (stood in for by a planner that says so) no
    longer ends the command: the other mode is planned and chosen, the cut one says ``time-limit``."""
    monkeypatch.setattr(cli_serving, "_disagg", _cut_short_after(5))
    code, out, err = run(["solve", "--serving", "auto", *SMALL_8B, "--time-limit", "5", "--json"], capsys)
    data = json.loads(out)
    assert code == 0 and err == ""
    assert data["chosen"] == "colocated" and data["modes"]["colocated"]["status"] in ("optimal", "feasible")
    assert data["modes"]["disagg"] == {"serving": "disagg", "status": "time-limit",
                                       "message": "time-limit: no plan found within 5 s"}
    code, out, _ = run(["solve", "--serving", "auto", *SMALL_8B, "--time-limit", "5"], capsys)
    assert code == 0 and "disagg     time-limit: no plan found within 5 s" in out
    assert "colocated" in out and "<- chosen" in out


def test_auto_with_every_mode_cut_short_is_the_time_limit_not_infeasible(capsys, monkeypatch) -> None:
    monkeypatch.setattr(cli_serving, "_disagg", _cut_short_after(5))
    monkeypatch.setattr(cli_serving, "_colocated", _cut_short_after(5))
    code, out, err = run(["solve", "--serving", "auto", *SMALL_8B, "--time-limit", "5", "--json"], capsys)
    assert code not in (0, 1) and out == "" and "infeasible" not in err
    assert "colocated: time-limit" in err and "disagg: time-limit" in err


def test_auto_keeps_to_one_time_limit_for_both_modes(capsys, monkeypatch) -> None:
    """--time-limit bounds auto as a whole: colocated gets half, disagg what colocated left (each used to get
    the whole limit). A clock the stand-in planners move: colocated spends 3 of its 5 s, disagg gets 7."""
    clock = [100.0]
    given: dict[str, Any] = {}

    def planner(mode: str, spends_s: float):
        def plan(problem: Any, rate_rps: Any, deadline: Any) -> dict[str, Any]:
            time_limit_s = given[mode] = deadline.limit_s
            clock[0] += spends_s
            raise SolverLimitError(f"time-limit: no plan found within {time_limit_s:g} s")
        return plan

    monkeypatch.setattr(cli_serving.time, "monotonic", lambda: clock[0])
    monkeypatch.setattr(cli_serving, "_colocated", planner("colocated", 3.0))
    monkeypatch.setattr(cli_serving, "_disagg", planner("disagg", 7.0))
    code, _, err = run(["solve", "--serving", "auto", *SMALL_8B, "--time-limit", "10", "--json"], capsys)
    assert given == {"colocated": pytest.approx(5.0), "disagg": pytest.approx(7.0)}
    assert code == 2 and "colocated: time-limit: no plan found within 5 s" in err
    # A first mode that spent the whole limit leaves the next a token share, not a negative or zero limit.
    assert cli_serving.mode_budget_s(10.0, 12.0, 1) == cli_serving.MIN_MODE_S
    assert cli_serving.mode_budget_s(None, 12.0, 1) is None
    # One mode asked for (not auto) gets the whole limit, as before.
    given.clear()
    run(["solve", "--serving", "disagg", *SMALL_8B, "--time-limit", "10", "--json"], capsys)
    assert given == {"disagg": pytest.approx(10.0)}


def test_enumerate_disagg_streams_rows_then_the_frontier_per_gpu_against_per_user(capsys) -> None:
    code, out, _ = run(["enumerate", "--serving", "disagg", *SMALL_8B, "--limit", "12", "--jsonl"], capsys)
    lines = [json.loads(line) for line in out.splitlines()]
    rows, last = lines[:-1], lines[-1]
    assert code == 0 and len(rows) == 12 and last["type"] == "frontier" and last["partial"] is True
    points = {r["index"]: (r["metrics"]["output_tokens_per_s_per_gpu"], r["metrics"]["output_tokens_per_s_per_user"])
              for r in rows}
    # The frontier: exactly the rows no other row beats on both axes (or equals, earlier).
    def beaten(i: int) -> bool:
        g, u = points[i]
        return any((g2 >= g and u2 >= u) and ((g2, u2) != (g, u) or j < i) for j, (g2, u2) in points.items() if j != i)
    assert last["pareto"] == sorted(i for i in points if not beaten(i))
    for r in rows:
        check_littles_law(r)
        assert r["metrics"]["tpot_ms"] <= 30 and r["metrics"]["ttft_ms"] <= 2000


def test_auto_names_the_work_limit_when_it_is_what_cut_a_mode_short(capsys, monkeypatch) -> None:
    """Without --time-limit the default work limit bounds each mode; a mode it stops before any plan says
    ``work-limit`` (raise --work-limit), not ``time-limit`` (there was none). The stand-in planner spends
    its deadline's whole work budget, then gives up as the real searches do."""
    def spent(problem: Any, rate_rps: Any, deadline: Any) -> dict[str, Any]:
        deadline.spend(deadline.work_limit)
        raise SolverLimitError(deadline.no_plan())

    monkeypatch.setattr(cli_serving, "_disagg", spent)
    code, out, err = run(["solve", "--serving", "auto", *SMALL_8B, "--work-limit", "3", "--json"], capsys)
    disagg = json.loads(out)["modes"]["disagg"]
    assert code == 0 and err == ""
    assert disagg["status"] == "work-limit" and disagg["message"].startswith("work-limit: no plan found within 3 ")
    code, out, _ = run(["solve", "--serving", "auto", *SMALL_8B, "--work-limit", "3"], capsys)
    assert code == 0 and "disagg     work-limit: no plan found within 3 units" in out


ONE_TOKEN = "shardplan: error: osl: a disaggregated deployment decodes after the first token: give --osl >= 2"


@pytest.mark.parametrize("argv", [
    ["solve", "--serving", "disagg"],
    ["enumerate", "--serving", "disagg"],
    ["evaluate", "--serving", "disagg", "--prefill", "workers=1", "--decode", "workers=1", "--dag", "{dir}/d.json"],
], ids=["solve", "enumerate", "evaluate"])
def test_one_output_token_is_refused_alike_by_every_disaggregated_command(argv, tmp_path, capsys) -> None:
    # evaluate priced it: a decode pool that never runs, "TPOT 0.00 ms" and decode capacity "unbounded".
    argv = [a.replace("{dir}", str(tmp_path)) for a in argv]
    code, out, err = run([*argv, "--model", "llama-3.1-8b", "--cluster", "2xH100", "--osl", "1"], capsys)
    assert (code, out, err.strip()) == (2, "", ONE_TOKEN) and list(tmp_path.iterdir()) == []
