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
