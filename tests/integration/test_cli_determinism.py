"""Five runs of the same ``solve --json`` print identical bytes apart from the timing field."""

from __future__ import annotations

import json
import re
import subprocess
import sys


def test_solve_json_is_byte_identical_across_runs():
    cmd = [sys.executable, "-m", "shardplan.solver.cli", "solve", "--model", "mixtral-8x7b", "--cluster", "8xH100",
           "--objective", "throughput", "--json"]
    outputs = set()
    for _ in range(5):
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        outputs.add(re.sub(r'"solve_time_s": [0-9.]+', '"solve_time_s": T', out))
    assert len(outputs) == 1


def test_infeasible_json_carries_the_conflict():
    cmd = [sys.executable, "-m", "shardplan.solver.cli", "solve", "--model", "deepseek-v3", "--cluster", "8xH100",
           "--json"]
    result = subprocess.run(cmd, capture_output=True, text=True)
    assert result.returncode == 1
    data = json.loads(result.stdout)
    assert data["status"] == "infeasible"
    assert "MEM-001" in [c["rule"] for c in data["conflict"]]
    assert len(result.stderr.strip().splitlines()) == 1


def test_solve_held_at_the_median_error_is_byte_identical_across_runs():
    # Rounds of tightening (here one in the colocated mode) run the same searches, so print the same bytes.
    cmd = [sys.executable, "-m", "shardplan.solver.cli", "solve", "--model", "llama-3.1-8b", "--cluster", "2x4xH100",
           "--engine", "trtllm", "--objective", "throughput", "--isl", "1000", "--osl", "200", "--ttft-ms", "1000",
           "--tpot-ms", "50", "--serving", "auto", "--limits-at", "median-error", "--json"]
    outputs = set()
    for _ in range(3):
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        outputs.add(re.sub(r'"solve_time_s": [0-9.]+', '"solve_time_s": T', out))
    assert len(outputs) == 1 and '"rounds": 1' in next(iter(outputs))
