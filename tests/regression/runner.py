"""Run one stored problem through the command line and strip the fields that vary between runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from shardplan.solver.cli.results import without_timing

EXPECTED_DIR = Path(__file__).parent / "expected"


def run_solve(args: list[str]) -> tuple[int, str]:
    """Exit code and the ``solve --json`` output with its timing fields removed."""
    cmd = [sys.executable, "-m", "shardplan.solver.cli", "solve", *args, "--json"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    data = without_timing(json.loads(result.stdout))
    return result.returncode, json.dumps({"exit_code": result.returncode, "output": data}, indent=1) + "\n"

