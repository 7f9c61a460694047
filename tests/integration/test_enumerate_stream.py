"""``enumerate`` streams (or spools) its layouts, keeps only the frontier, and says when it stopped short (issue 14):
the incremental frontier against the all-points definition, ``partial`` after a limit or a deadline,
Ctrl-C (a real SIGINT to a real process) closing valid output, and pinned stages that used to end in a
tie-break error."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from shardplan.solver.cli.main import main
from shardplan.solver.enumerate import Enumeration, Frontier, pareto_front
from tests.factory import problem


def as_plan(e2e_ms: float, tokens_per_s: float) -> SimpleNamespace:
    """Just what ``pareto_front`` reads of a plan."""
    metrics = SimpleNamespace(e2e_ms=e2e_ms, output_tokens_per_s=tokens_per_s)
    return SimpleNamespace(prediction=SimpleNamespace(metrics=metrics))


@pytest.mark.parametrize("seed", range(40))
def test_incremental_frontier_equals_the_sweep_over_all_points(seed):
    rng = random.Random(seed)
    # few distinct values, so that ties in latency, throughput or both are common
    points = [(rng.choice([1.0, 2.0, 3.0, 5.0, 8.0]), rng.choice([10.0, 20.0, 30.0, 40.0]))
              for _ in range(rng.randint(1, 30))]
    frontier = Frontier()
    for i, (e2e, tokens) in enumerate(points):
        frontier.add(i, e2e, tokens)
    marks = pareto_front([as_plan(*p) for p in points])
    assert frontier.indices == [i for i, on in enumerate(marks) if on]


def run_json(argv: list[str], capsys) -> dict:
    main(argv)
    return json.loads(capsys.readouterr().out)


def test_json_stream_is_one_object_and_partial_only_when_cut_short(capsys):
    args = ["enumerate", "--model", "llama-3.1-8b", "--cluster", "2xH100", "--json"]
    whole = run_json(args, capsys)
    assert whole["partial"] is False and whole["count"] == len(whole["plans"]) > 2
    assert [row["index"] for row in whole["plans"]] == list(range(whole["count"]))
    assert list(whole)[:3] == ["count", "pareto", "plans"]  # the object as before streaming, and partial
    assert whole["pareto"] == [row["index"] for row in whole["plans"] if row["pareto"]]
    marks = pareto_front([as_plan(r["metrics"]["e2e_ms"], r["metrics"]["output_tokens_per_s"]) for r in whole["plans"]])
    assert whole["pareto"] == [i for i, on in enumerate(marks) if on]
    first = run_json([*args, "--limit", "1"], capsys)
    assert first["partial"] is True and first["count"] == 1 and first["pareto"] == [0]
    unmarked = lambda row: {k: v for k, v in row.items() if k != "pareto"}  # noqa: E731
    assert unmarked(first["plans"][0]) == unmarked(whole["plans"][0])  # alone, the first row is its own frontier
    main([*args[:-1], "--jsonl", "--limit", "2"])
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines[-1] == {"type": "frontier", "count": 2, "pareto": lines[-1]["pareto"], "partial": True}
    assert [row["index"] for row in lines[:-1]] == [0, 1]


def test_a_deadline_passing_between_layouts_marks_the_enumeration_partial():
    p = problem(model="llama-3.1-8b", cluster="4xH100")
    every = sum(1 for _ in Enumeration(p))
    run = Enumeration(p, time_limit_s=3600.0)
    found = 0
    for _ in run:
        found += 1
        run.deadline.end = time.perf_counter() - 1.0  # the limit is reached right after the first layout
    assert run.partial and found == 1 < every
    finished = Enumeration(p)
    assert sum(1 for _ in finished) == every and not finished.partial


def test_pinned_stages_enumerate_only_their_stage_count(capsys):
    data = run_json(["enumerate", "--model", "llama-3.1-8b", "--cluster", "4xH100", "--stages", "0:16,16:32",
                     "--json"], capsys)
    assert data["count"] > 0 and data["partial"] is False
    for row in data["plans"]:
        assert [s["layers"] for s in row["stages"]] == [[0, 16], [16, 32]]


# Hours to the end: always cut short, by Ctrl-C, not by the default work limit (5 units 8 s in at load 3).
LARGE = ["enumerate", "--model", "deepseek-v3", "--cluster", "512x8xH200", "--work-limit", "0"]


def interrupted(extra: list[str], ready: bytes) -> tuple[bytes, list[str]]:
    """Start a large enumeration, wait until ``ready`` is on its stdout, send SIGINT; (stdout, stderr lines)."""
    proc = subprocess.Popen([sys.executable, "-m", "shardplan.solver.cli", *LARGE, *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    head = b""
    while ready not in head:
        chunk = os.read(proc.stdout.fileno(), 4096)
        assert chunk, "enumerate ended before it was ready"
        head += chunk
    proc.send_signal(signal.SIGINT)
    rest, err = proc.communicate(timeout=120)
    assert proc.returncode == 130
    return head + rest, err.decode().splitlines()


def test_ctrl_c_closes_the_streamed_lines_as_partial_and_exits_130():
    """A real SIGINT once the first layout is out: exit 130, one stderr line, every row whole and a last
    frontier line marked partial whose count is the rows printed."""
    out, err = interrupted(["--jsonl"], b'{"index"')
    assert err == ["shardplan: interrupted"]
    lines = [json.loads(line) for line in out.decode().splitlines()]
    assert lines[-1]["type"] == "frontier" and lines[-1]["partial"] is True
    assert lines[-1]["count"] == len(lines) - 1 >= 1
    assert [row["index"] for row in lines[:-1]] == list(range(len(lines) - 1))


def test_ctrl_c_closes_the_json_object_as_partial():
    """--json holds its rows until the end: an interruption still prints the one object, marked partial."""
    proc = subprocess.Popen([sys.executable, "-m", "shardplan.solver.cli", *LARGE, "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    time.sleep(8)  # start-up and a few layouts; an interruption earlier than that is the case above
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and err.decode().splitlines() == ["shardplan: interrupted"]
    if out:  # empty only when the signal came during start-up, before the enumeration began
        data = json.loads(out)
        assert data["partial"] is True and data["count"] == len(data["plans"])
        assert data["pareto"] == [row["index"] for row in data["plans"] if row["pareto"]]


@pytest.mark.parametrize("serving", ["colocated", "disagg", "auto"])
def test_json_and_jsonl_together_are_refused_naming_both(tmp_path, capsys, serving):
    # --jsonl silently won: lines of JSON where one object was asked for, exit 0.
    report = tmp_path / "r.html"
    with pytest.raises(SystemExit) as exit_:
        main(["enumerate", "--model", "llama-3.1-8b", "--cluster", "1xH100", "--serving", serving,
              "--json", "--jsonl", "--report", str(report)])
    out, err = capsys.readouterr()
    assert (exit_.value.code, out) == (2, "")
    assert err.splitlines() == ["shardplan: error: json: --json and --jsonl are two output formats; give one"]
    assert not report.exists()
