"""Run one stored problem through the command line and strip the fields that vary between runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

EXPECTED_DIR = Path(__file__).parent / "expected"
TIMING_FIELDS = {"solve_time_s", "runner_up_solve_time_s"}


def run_solve(args: list[str]) -> tuple[int, str]:
    """Exit code and the ``solve --json`` output with its timing fields removed."""
    cmd = [sys.executable, "-m", "shardplan.solver.cli", "solve", *args, "--json"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    data = _without_timing(json.loads(result.stdout))
    return result.returncode, json.dumps({"exit_code": result.returncode, "output": data}, indent=1) + "\n"


def _without_timing(value: object) -> object:
    if isinstance(value, dict):
        return {k: _without_timing(v) for k, v in value.items() if k not in TIMING_FIELDS}
    if isinstance(value, list):
        return [_without_timing(v) for v in value]
    return value
