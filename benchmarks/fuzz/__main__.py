"""Long fuzz runs of the command line (issue 14): every case in its own process, as a caller would run it.

The cases are those of ``tests/fuzz`` (config.json mutations, cluster strings, numeric flags, stage strings,
load profiles, DAG files, calibration CSVs), drawn from ``random.Random(seed + i)``. Each case runs as
``python -m shardplan.solver.cli ...`` in a fresh folder with a 60 s limit; its peak memory is the
child's maximum resident set (``os.wait4``'s rusage). The table counts, per command: cases, exit codes,
signals, hangs (killed at the limit), internal errors (exit 3), exit-2 messages that name no field,
files written on error, and the peak memory of any case.

    python -m benchmarks.fuzz [--cases 20000] [--seed 0] [--jobs 2] [--timeout 60]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from shardplan.solver.cli.main import main as shardplan_main
from tests.fuzz.cases import Case, draw
from tests.fuzz.harness import Outcome, materialise, problems

COMMANDS = ("solve", "evaluate", "enumerate", "validate", "calibrate")


@dataclass
class Result:
    command: str
    kind: str
    argv: list[str]
    code: int | None  # None: killed at the time limit
    signal: int | None
    peak_rss_kib: int
    seconds: float
    problems: list[str]


def run_case(case: Case, timeout_s: float) -> Result:
    with tempfile.TemporaryDirectory() as folder:
        # A command line cannot carry a NUL byte (execve ends the argument there): drop it as the shell would.
        argv = [arg.replace("\0", "") for arg in materialise(case, Path(folder))]
        before = set(os.listdir(folder))
        env = {k: v for k, v in os.environ.items() if k != "SHARDPLAN_DEBUG"}
        start = time.monotonic()
        with open(Path(folder) / ".stdout", "wb") as out, open(Path(folder) / ".stderr", "wb") as err:
            before |= {".stdout", ".stderr"}
            proc = subprocess.Popen([sys.executable, "-m", "shardplan.solver.cli", *argv], stdout=out, stderr=err,
                                    cwd=folder, env=env, start_new_session=True)
            status, rusage, hung = 0, None, False
            while True:
                pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    break
                if time.monotonic() - start > timeout_s:
                    hung = True
                    os.killpg(proc.pid, signal.SIGKILL)
                    _, status, rusage = os.wait4(proc.pid, 0)
                    break
                time.sleep(0.02)
            proc.returncode = 0  # reaped by wait4 above: keep Popen from waiting again
        seconds = time.monotonic() - start
        stderr = (Path(folder) / ".stderr").read_bytes().decode(errors="replace")
        written = sorted(set(os.listdir(folder)) - before)
    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) and not hung else None
    code = None if hung else (os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1)
    found = problems(Outcome(code if code is not None else -1, "", stderr, written), case) if code is not None else []
    if hung:
        found = [f"hung past {timeout_s:g} s"]
    elif sig is not None:
        found = [f"signal {sig}"]
    return Result(case.command, case.kind, case.argv, code, sig, rusage.ru_maxrss if rusage else 0, seconds, found)


def dag_base() -> dict[str, object]:
    """A real DAG file to mutate (Qwen3-30B-A3B on 4xH100), made in-process once."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "dag.json"
        with contextlib.redirect_stdout(io.StringIO()):  # the plan's human view is not part of the table
            shardplan_main(["solve", "--model", "qwen3-30b-a3b", "--cluster", "4xH100", "--no-runner-up",
                            "--dag", str(path)])
        return json.loads(path.read_text())


def table(results: list[Result]) -> str:
    by_command: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        by_command[r.command].append(r)
    head = ("| command | cases | exit 0 | exit 1 | exit 2 | exit 3 | signals | hangs | unnamed exit-2 "
            "| written on error | peak MiB | slowest s |")
    lines = [head, "|" + "---|" * 12]
    for command in COMMANDS:
        rs = by_command.get(command, [])
        if not rs:
            continue
        codes = Counter(r.code for r in rs)
        unnamed = sum(any("names no field" in p or "stderr lines" in p for p in r.problems) for r in rs)
        written = sum(any("wrote" in p for p in r.problems) for r in rs)
        lines.append(
            f"| {command} | {len(rs)} | {codes[0]} | {codes[1]} | {codes[2]} | {codes[3]} | "
            f"{sum(r.signal is not None for r in rs)} | {codes[None]} | {unnamed} | {written} | "
            f"{max(r.peak_rss_kib for r in rs) / 1024:.0f} | {max(r.seconds for r in rs):.1f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=2000, help="cases in all, spread evenly over the commands")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2, help="cases run at once")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds before a case counts as hung")
    parser.add_argument("--failures", type=Path, default=None, help="write every failing case here (JSON lines)")
    args = parser.parse_args()
    base = dag_base()
    cases = [draw(COMMANDS[i % len(COMMANDS)], random.Random(args.seed + i), base) for i in range(args.cases)]
    start = time.monotonic()
    results: list[Result] = []
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for i, result in enumerate(pool.map(lambda c: run_case(c, args.timeout), cases), start=1):
            results.append(result)
            if i % 100 == 0:
                print(f"{i}/{len(cases)} cases, {time.monotonic() - start:.0f} s", file=sys.stderr, flush=True)
            if i % 500 == 0:  # a long run shows its table as it goes
                print(table(results), file=sys.stderr, flush=True)
    failing = [r for r in results if r.problems]
    if args.failures is not None:
        with open(args.failures, "w") as fh:
            for r in failing:
                record = {"command": r.command, "kind": r.kind, "argv": r.argv, "problems": r.problems}
                fh.write(json.dumps(record) + "\n")
    print(table(results))
    print(f"\n{len(results)} cases in {time.monotonic() - start:.0f} s with {args.jobs} jobs; {len(failing)} failing")
    for r in failing[:20]:
        print(f"- {r.command} ({r.kind}) {r.argv[:8]}: {r.problems[0][:200]}")
    sys.exit(1 if failing else 0)


if __name__ == "__main__":
    main()
