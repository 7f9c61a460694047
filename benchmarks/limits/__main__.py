"""Do the limits of issue 14 hold on large problems: a short ``solve --time-limit`` returns a plan with
its gap in time, a time-limited ``enumerate`` ends in time and marks its output partial, and a long
enumeration stays in bounded memory?

Each run is the command line in a fresh process, as a caller runs it; the wall time includes Python's
start-up, the peak memory is the process's maximum resident set (``os.wait4``).

    python -m benchmarks.limits [--kimi-seconds 600]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

SOLVE = ["solve", "--model", "deepseek-v3", "--cluster", "512x8xH200", "--objective", "throughput",
         "--time-limit", "1", "--json"]
ENUMERATE = ["enumerate", "--model", "deepseek-v3", "--cluster", "512x8xH200", "--time-limit", "5", "--json"]


def kimi(seconds: float) -> list[str]:
    return ["enumerate", "--model", "kimi-k2", "--cluster", "512x8xH200", "--time-limit", f"{seconds:g}", "--jsonl"]


@dataclass
class Run:
    argv: list[str]
    code: int
    wall_s: float
    peak_mib: float
    stdout: str
    stderr: str


def run(argv: list[str]) -> Run:
    with tempfile.TemporaryDirectory() as folder:
        out_path, err_path = Path(folder) / "out", Path(folder) / "err"
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            start = time.monotonic()
            proc = subprocess.Popen([sys.executable, "-m", "shardplan.solver.cli", *argv], stdout=out, stderr=err)
            _, status, rusage = os.wait4(proc.pid, 0)
            wall_s = time.monotonic() - start
            proc.returncode = os.waitstatus_to_exitcode(status)
        return Run(argv, proc.returncode, wall_s, rusage.ru_maxrss / 1024, out_path.read_text(), err_path.read_text())


def summary(r: Run) -> str:
    """The part of the output the question is about."""
    if r.code != 0:
        return r.stderr.strip()[:120]
    if r.argv[0] == "solve":
        d = json.loads(r.stdout)
        return f"status {d['status']}, gap {d.get('gap')}, objective {d['objective_value']:,} tok/s"
    if "--jsonl" in r.argv:
        last = json.loads(r.stdout.splitlines()[-1])
        return f"{last['count']:,} layouts, partial {str(last['partial']).lower()}"
    d = json.loads(r.stdout)
    return f"{d['count']:,} layouts, partial {str(d['partial']).lower()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kimi-seconds", type=float, default=600.0, help="time limit of the Kimi-K2 enumeration")
    args = parser.parse_args()
    print("| command | exit | wall s | peak MiB | result |")
    print("|---|---|---|---|---|")
    for argv in (SOLVE, ENUMERATE, kimi(args.kimi_seconds)):
        r = run(argv)
        print(f"| `{' '.join(argv)}` | {r.code} | {r.wall_s:.2f} | {r.peak_mib:.0f} | {summary(r)} |", flush=True)


if __name__ == "__main__":
    main()
