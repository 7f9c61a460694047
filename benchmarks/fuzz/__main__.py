"""Long fuzz runs of the command line (issue 14): every case in a process of its own.

The cases are those of ``tests/fuzz`` (config.json mutations, cluster strings, numeric flags, stage strings,
load profiles, DAG files, calibration CSVs), drawn from ``random.Random(seed + i)``. This process imports
shardplan once; each case then runs in a child forked from it (``main(argv)`` in-process in the child, in
a fresh folder, stdout and stderr to files), so a case costs its own work and not a Python start-up, and
still has its own exit status, signal and memory: a crash kills only the child, a child past the time
limit is killed (a hang), and its peak memory is its maximum resident set (``os.wait4``'s rusage; it
includes the ~200 MB of imported modules it shares with this process, as a fresh process would hold
too). No solver runs in this process, so no thread is alive at a fork. The table counts, per command:
cases, exit codes, signals, hangs, internal errors (exit 3), exit-2 messages that name no field, files
written on error, and the peak memory of any case.

    python -m benchmarks.fuzz [--cases 20000] [--seed 0] [--jobs 2] [--timeout 60] [--failures F] [--serving]

``--serving`` draws only the cases of the serving flags (issue 15: ``solve --serving/--rate``, ``evaluate
--serving disagg --prefill/--decode``, ``enumerate --serving disagg``), spread over those three commands.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from shardplan.solver.cli.main import main as shardplan_main
from tests.fuzz.cases import Case, draw, draw_serving, extreme_case
from tests.fuzz.harness import Outcome, materialise, problems

COMMANDS = ("solve", "evaluate", "enumerate", "validate", "calibrate")
SERVING_COMMANDS = COMMANDS[:3]
OUT, ERR = ".stdout", ".stderr"  # the child's streams, in its folder (left out of "files written")
CHILD_UNCAUGHT = 4  # a child whose main() raised instead of exiting: counted as a problem


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


@dataclass
class Running:
    """A forked case: its folder, what the folder held before, and when it started."""

    pid: int
    case: Case
    folder: Path
    before: set[str]
    start: float


def run_child(argv: list[str], folder: Path) -> None:
    """In the forked child: run the command line in ``folder`` and leave with its exit code."""
    code = CHILD_UNCAUGHT
    try:
        os.chdir(folder)
        for fd, name in ((1, OUT), (2, ERR)):
            target = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(target, fd)
            os.close(target)
        os.environ.pop("SHARDPLAN_DEBUG", None)
        try:
            shardplan_main(argv)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        finally:
            with contextlib.suppress(Exception):
                sys.stdout.flush()
                sys.stderr.flush()
    finally:
        os._exit(code)


def start(case: Case) -> Running:
    folder = Path(tempfile.mkdtemp(prefix="fuzz-"))
    # A command line cannot carry a NUL byte (execve ends the argument there): drop it as the shell would.
    argv = [arg.replace("\0", "") for arg in materialise(case, folder)]
    before = set(os.listdir(folder)) | {OUT, ERR}
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        run_child(argv, folder)
    return Running(pid, case, folder, before, time.monotonic())


def finish(run: Running, status: int, rusage: object | None, hung: bool, timeout_s: float) -> Result:
    seconds = time.monotonic() - run.start
    stderr_path = run.folder / ERR
    stderr = stderr_path.read_bytes().decode(errors="replace") if stderr_path.exists() else ""
    written = sorted(set(os.listdir(run.folder)) - run.before)
    shutil.rmtree(run.folder, ignore_errors=True)
    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) and not hung else None
    code = None if hung else (os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1)
    case = run.case
    found = problems(Outcome(code if code is not None else -1, "", stderr, written), case) if code is not None else []
    if code == CHILD_UNCAUGHT:
        found = [f"main() raised instead of exiting: {stderr.strip()[-300:]}"]
    if hung:
        found = [f"hung past {timeout_s:g} s"]
    elif sig is not None:
        found = [f"signal {sig}"]
    peak = getattr(rusage, "ru_maxrss", 0)
    return Result(case.command, case.kind, case.argv, code, sig, peak, seconds, found)


def run_all(cases: Iterator[Case], jobs: int, timeout_s: float, on_result: Callable[[Result], None]) -> None:
    """Fork up to ``jobs`` cases at a time; reap them, killing any past ``timeout_s``. ``cases`` is drawn
    as it goes: held all at once, their files (DAGs, configs) grew this process past a gigabyte, and every
    child's resident set with it."""
    running: dict[int, Running] = {}
    exhausted = False
    while not exhausted or running:
        while not exhausted and len(running) < jobs:
            case = next(cases, None)
            if case is None:
                exhausted = True
                break
            run = start(case)
            running[run.pid] = run
        pid, status, rusage = os.wait4(-1, os.WNOHANG)
        if pid:
            on_result(finish(running.pop(pid), status, rusage, False, timeout_s))
            continue
        now = time.monotonic()
        for pid, run in list(running.items()):
            if now - run.start > timeout_s:
                os.kill(pid, signal.SIGKILL)
                _, status, rusage = os.wait4(pid, 0)
                on_result(finish(running.pop(pid), status, rusage, True, timeout_s))
        time.sleep(0.005)


def dag_base() -> dict[str, object]:
    """A real DAG file to mutate (Qwen3-30B-A3B on 4xH100), made in a forked child so that no solver
    (and none of its threads) ever runs in this process."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "dag.json"
        pid = os.fork()
        if pid == 0:
            with contextlib.redirect_stdout(io.StringIO()):  # the plan's human view is not part of the table
                run_child(["solve", "--model", "qwen3-30b-a3b", "--cluster", "4xH100", "--no-runner-up",
                           "--dag", str(path)], Path(folder))
        _, status = os.waitpid(pid, 0)
        if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
            raise SystemExit(f"could not make the DAG to mutate: status {status}")
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
    parser.add_argument("--serving", action="store_true", help="only the serving flags' cases (issue 15)")
    parser.add_argument("--extremes", action="store_true",
                        help="only valid inputs at the edges of their ranges on huge clusters (robust16)")
    args = parser.parse_args()
    if args.extremes:
        cases = (extreme_case(random.Random(args.seed + i), SERVING_COMMANDS[i % 3]) for i in range(args.cases))
    elif args.serving:
        cases = (draw_serving(SERVING_COMMANDS[i % 3], random.Random(args.seed + i)) for i in range(args.cases))
    else:
        base = dag_base()
        cases = (draw(COMMANDS[i % len(COMMANDS)], random.Random(args.seed + i), base) for i in range(args.cases))
    began = time.monotonic()
    results: list[Result] = []

    def on_result(result: Result) -> None:
        results.append(result)
        done = len(results)
        if result.problems:  # at once, so a long run's log shows them before its end
            print(f"FAILING {result.command} ({result.kind}) {json.dumps(result.argv)}: {result.problems[0][:300]}",
                  file=sys.stderr, flush=True)
        if done % 100 == 0:
            print(f"{done}/{args.cases} cases, {time.monotonic() - began:.0f} s", file=sys.stderr, flush=True)
        if done % 1000 == 0:  # a long run shows its table as it goes
            print(table(results), file=sys.stderr, flush=True)

    run_all(cases, args.jobs, args.timeout, on_result)
    failing = [r for r in results if r.problems]
    if args.failures is not None:
        with open(args.failures, "w") as fh:
            for r in failing:
                record = {"command": r.command, "kind": r.kind, "argv": r.argv, "problems": r.problems}
                fh.write(json.dumps(record) + "\n")
    print(table(results))
    print(f"\n{len(results)} cases in {time.monotonic() - began:.0f} s with {args.jobs} jobs; {len(failing)} failing")
    for r in failing[:20]:
        print(f"- {r.command} ({r.kind}) {r.argv[:8]}: {r.problems[0][:200]}")
    sys.exit(1 if failing else 0)


if __name__ == "__main__":
    main()
