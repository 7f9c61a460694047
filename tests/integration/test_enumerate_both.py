"""``enumerate --serving auto`` (``solver/cli/enumerate_both.py``) against the two single-mode enumerations
it joins and a frontier computed here by brute force: the colocated rows are ``enumerate --objective
throughput``'s, each followed by its layout at smaller power-of-two batches that ``evaluate`` prices the
same and finds keeping every rule; the deployments are ``enumerate --serving disagg``'s; the frontier is
the Pareto set of tokens/s per GPU against tokens/s per user over all of them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shardplan.solver.cli.enumerate_both import smaller_batches
from shardplan.solver.cost.evaluate import evaluations
from shardplan.solver.disagg.serving import throughput_problem
from shardplan.solver.enumerate import Enumeration
from shardplan.solver.optimise import Deadline
from tests.factory import problem
from tests.integration.test_cli_disagg import run  # main(argv) in-process: (exit code, stdout, stderr)

CASE = ["--model", "llama-3.1-8b", "--cluster", "2xH100", "--tpot-ms", "50"]


def _jsonl(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    code, out, err = run(["enumerate", *argv, "--jsonl"], capsys)
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    return lines[:-1], lines[-1]


def _bare(row: dict[str, Any]) -> dict[str, Any]:
    """A row without what numbers or times it in its own enumeration."""
    return {k: v for k, v in row.items() if k not in ("index", "serving", "solve_time_s")}


def test_both_modes_are_the_single_mode_enumerations(capsys: pytest.CaptureFixture[str]) -> None:
    rows, end = _jsonl([*CASE, "--serving", "auto"], capsys)
    colocated, _ = _jsonl([*CASE, "--objective", "throughput"], capsys)
    disagg, _ = _jsonl([*CASE, "--serving", "disagg"], capsys)
    assert [r["index"] for r in rows] == list(range(len(rows))) and end["count"] == len(rows)
    assert end["partial"] is False
    mine = {"colocated": [r for r in rows if r["serving"] == "colocated"],
            "disagg": [r for r in rows if r["serving"] == "disagg"]}
    assert rows == mine["colocated"] + mine["disagg"]  # colocated first, then the deployments
    assert [_bare(r) for r in mine["disagg"]] == [_bare(r) for r in disagg]
    # Each layout of the colocated enumeration at its own batch, in order, then its smaller batches.
    own = [r for r in mine["colocated"] if _bare(r) in [_bare(c) for c in colocated]]
    assert [_bare(r) for r in own] == [_bare(c) for c in colocated]
    for r in mine["colocated"]:
        if r not in own:
            parent = max((o for o in own if o["index"] < r["index"]), key=lambda o: o["index"])
            assert r["degrees"] == parent["degrees"] and r["stages"] == parent["stages"]
            batch = r["metrics"]["batch"]
            assert batch < parent["metrics"]["batch"] and batch & (batch - 1) == 0


def test_the_frontier_is_the_pareto_set_over_both_modes(capsys: pytest.CaptureFixture[str]) -> None:
    rows, end = _jsonl([*CASE, "--serving", "auto"], capsys)

    def point(r: dict[str, Any]) -> tuple[float, float]:
        return r["metrics"]["output_tokens_per_s_per_gpu"], r["metrics"]["output_tokens_per_s_per_user"]

    def beaten(i: int) -> bool:  # by an earlier row at least as good on both axes, or any row better on one
        gpu, user = point(rows[i])
        return any((g >= gpu and u >= user) and (j < i or (g, u) != (gpu, user))
                   for j, (g, u) in enumerate(map(point, rows)) if j != i)

    assert end["pareto"] == [i for i in range(len(rows)) if not beaten(i)]
    assert {rows[i]["serving"] for i in end["pareto"]} == {"colocated", "disagg"}  # each mode wins somewhere


def test_a_smaller_batch_row_is_what_evaluate_says_of_that_layout(capsys: pytest.CaptureFixture[str]) -> None:
    rows, _ = _jsonl([*CASE, "--serving", "auto"], capsys)
    colocated = [r for r in rows if r["serving"] == "colocated"]
    smaller = [r for r in colocated if r["metrics"]["batch"] & (r["metrics"]["batch"] - 1) == 0][:3]
    assert smaller
    for r in smaller:
        d = r["degrees"]
        stages = ",".join(f"{s['layers'][0]}:{s['layers'][1]}" for s in r["stages"])
        code, out, err = run(["evaluate", *CASE, "--dp", str(d["dp"]), "--tp", str(d["tp"]), "--pp", str(d["pp"]),
                              "--stages", stages, "--batch", str(r["metrics"]["batch"]), "--json"], capsys)
        assert code == 0, err
        judged = json.loads(out)
        assert judged["violations"] == [] and judged["metrics"] == r["metrics"]


def test_the_limit_counts_rows_of_both_modes(capsys: pytest.CaptureFixture[str]) -> None:
    everything, _ = _jsonl([*CASE, "--serving", "auto"], capsys)
    first_disagg = next(r["index"] for r in everything if r["serving"] == "disagg")
    for limit in (1, first_disagg, first_disagg + 2):
        rows, end = _jsonl([*CASE, "--serving", "auto", "--limit", str(limit)], capsys)
        assert len(rows) == end["count"] == limit and end["partial"] is True
        assert [_bare(r) for r in rows] == [_bare(r) for r in everything[:limit]]


def test_json_marks_the_frontier_and_the_table_names_each_mode(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["enumerate", *CASE, "--serving", "auto", "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    assert [p["index"] for p in data["plans"] if p["pareto"]] == data["pareto"]
    code, out, _ = run(["enumerate", *CASE, "--serving", "auto"], capsys)
    assert code == 0
    assert f"{data['count']} plans; frontier of tokens/s/GPU against tokens/s/user: " in out
    assert "(colocated)" in out and "(disagg)" in out


def test_a_latency_objective_is_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["enumerate", *CASE, "--serving", "auto", "--objective", "latency"], capsys)
    assert code == 2 and out == "" and err.startswith("shardplan: error: objective: ")


def test_no_plan_in_either_mode_names_both(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["enumerate", *CASE[:4], "--tpot-ms", "0.01", "--serving", "auto"], capsys)
    assert code == 1
    assert "colocated: " in err and "disagg: " in err


def test_the_report_draws_both_modes(capsys: pytest.CaptureFixture[str], tmp_path: Any) -> None:
    page = tmp_path / "both.html"
    code, out, _ = run(["enumerate", *CASE, "--serving", "auto", "--report", str(page)], capsys)
    assert code == 0 and out.rstrip().endswith(f"wrote {page}")
    html = page.read_text(encoding="utf-8")
    count = int(out.split(" plans")[0].rsplit("\n", 1)[-1])
    assert "colocated layouts and disaggregated deployments" in html
    assert f'id="plan-count">{count}<' in html and '"colocated, dominated"' in html


def test_a_spent_colocated_share_moves_on_to_the_deployments(capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The colocated half of --time-limit spent (here: at once) ends the colocated rows, not the enumeration:
    the deployments follow, every one of them, and the output is partial."""
    from shardplan.solver.cli import enumerate_both

    class Spent(enumerate_both.Deadline):
        def passed(self) -> bool:
            return True

    monkeypatch.setattr(enumerate_both, "Deadline", Spent)
    rows, end = _jsonl([*CASE, "--serving", "auto", "--time-limit", "600"], capsys)
    disagg, _ = _jsonl([*CASE, "--serving", "disagg"], capsys)
    assert {r["serving"] for r in rows} == {"disagg"} and end["partial"] is True
    assert [_bare(r) for r in rows] == [_bare(r) for r in disagg]


def test_the_smaller_batches_count_their_work_and_stop_at_its_limit() -> None:
    """Each smaller batch is placed, priced and checked as work of the colocated enumeration: uncounted,
    `enumerate --serving auto` on 8192x8xH200 (DeepSeek-V3) ran past 200 s under the default work limit
    (51 s after). None is priced once the limit has passed."""
    plan = next(iter(Enumeration(throughput_problem(problem("llama-3.1-8b", "4xH100")), limit=1)))
    assert plan.layout.batch > 2
    live = Deadline(None, 100.0)
    assert list(smaller_batches(plan, live)) and live.work_done > 0
    spent = Deadline(None, 1.0)
    spent.spend(1.0)
    before = evaluations()
    assert list(smaller_batches(plan, spent)) == [] and evaluations() == before
