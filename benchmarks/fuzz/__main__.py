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

    python -m benchmarks.fuzz [--cases 20000] [--seed 0] [--jobs 2] [--timeout 60] [--failures F] [--record R]
                              [--serving | --extremes | --no-limit]

``--serving`` draws only the cases of the serving flags (issue 15: ``solve --serving/--rate``, ``evaluate
--serving disagg --prefill/--decode``, ``enumerate --serving disagg``), spread over those three commands.
``--no-limit`` draws valid, realistic ``solve`` and ``enumerate`` requests with no ``--time-limit`` (and no
``--work-limit``: what a user gets with no flags, so the default work limit applies since 2026-11-27)
(``tests/fuzz/cases.py`` ``no_limit_case``; two solves to one enumeration) and prints the wall times per
command and mode (median, p90, max) and every case past ``SLOW_S``. ``--record R`` writes every case (argv,
exit code, seconds, last stderr line) as JSON lines.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
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
from tests.fuzz.cases import Case, draw, draw_serving, extreme_case, no_limit_case
from tests.fuzz.harness import Outcome, materialise, problems

COMMANDS = ("solve", "evaluate", "enumerate", "validate", "calibrate")
SERVING_COMMANDS = COMMANDS[:3]
OUT, ERR = ".stdout", ".stderr"  # the child's streams, in its folder (left out of "files written")
CHILD_UNCAUGHT = 4  # a child whose main() raised instead of exiting: counted as a problem
NO_LIMIT_COMMANDS = ("solve", "solve", "enumerate")  # users mostly solve
SLOW_S = 30.0  # --no-limit lists every case slower than this


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
    message: str = ""  # the last line of stderr (the error line of a non-zero exit)


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
    message = stderr.strip().splitlines()[-1][:300] if stderr.strip() else ""
    return Result(case.command, case.kind, case.argv, code, sig, peak, seconds, found, message)


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
        if not running:  # the last case just ended (with --jobs 1, wait4 would find no child)
            break
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


def _quantile(sorted_values: list[float], q: float) -> float:
    """The nearest-rank quantile of values in ascending order."""
    return sorted_values[max(0, math.ceil(len(sorted_values) * q) - 1)]


def timing_table(results: list[Result], timeout_s: float) -> str:
    """Wall times per command and mode (``Result.kind``): a case killed at the timeout counts at it."""
    groups: dict[tuple[str, str], list[Result]] = defaultdict(list)
    for r in results:
        groups[(r.command, r.kind)].append(r)
    lines = [f"| command | mode | cases | exit 0 | exit 1 | exit 2 | exit 3 | past {timeout_s:g} s | median s "
             f"| p90 s | max s | over {SLOW_S:g} s |", "|" + "---|" * 12]
    for (command, kind), rs in sorted(groups.items()):
        codes = Counter(r.code for r in rs)
        times = sorted(r.seconds for r in rs)
        lines.append(f"| {command} | {kind} | {len(rs)} | {codes[0]} | {codes[1]} | {codes[2]} | {codes[3]} | "
                     f"{codes[None]} | {_quantile(times, 0.5):.1f} | {_quantile(times, 0.9):.1f} | {times[-1]:.1f} | "
                     f"{sum(t > SLOW_S for t in times)} |")
    return "\n".join(lines)


def slow_cases(results: list[Result]) -> str:
    slow = sorted((r for r in results if r.seconds > SLOW_S), key=lambda r: -r.seconds)
    return "\n".join(f"- {r.seconds:.1f} s, exit {'killed' if r.code is None else r.code}: shardplan "
                     f"{' '.join(r.argv)}{f'  [{r.message}]' if r.code not in (0, None) else ''}" for r in slow)


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


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
    parser.add_argument("--no-limit", action="store_true",
                        help="valid, realistic solve and enumerate requests with no --time-limit (the default "
                             "work limit applies, as for a user with no flags): wall times")
    parser.add_argument("--record", type=Path, default=None, help="write every case here (JSON lines)")
    args = parser.parse_args()
    print(f"load average at start: {load_average()}", file=sys.stderr, flush=True)
    if args.no_limit:
        cases = (no_limit_case(random.Random(args.seed + i), NO_LIMIT_COMMANDS[i % 3]) for i in range(args.cases))
    elif args.extremes:
        cases = (extreme_case(random.Random(args.seed + i), SERVING_COMMANDS[i % 3]) for i in range(args.cases))
    elif args.serving:
        cases = (draw_serving(SERVING_COMMANDS[i % 3], random.Random(args.seed + i)) for i in range(args.cases))
    else:
        base = dag_base()
        cases = (draw(COMMANDS[i % len(COMMANDS)], random.Random(args.seed + i), base) for i in range(args.cases))
    began = time.monotonic()
    results: list[Result] = []

    record = open(args.record, "w") if args.record is not None else None  # noqa: SIM115 (closed below)

    def on_result(result: Result) -> None:
        results.append(result)
        done = len(results)
        if record is not None:
            record.write(json.dumps({"command": result.command, "kind": result.kind, "argv": result.argv,
                                     "code": result.code, "seconds": round(result.seconds, 2),
                                     "peak_mib": round(result.peak_rss_kib / 1024), "message": result.message}) + "\n")
            record.flush()
        if args.no_limit and result.seconds > SLOW_S:
            print(f"SLOW {result.seconds:.1f} s exit {result.code}: {' '.join(result.argv)}", file=sys.stderr,
                  flush=True)
        if result.problems:  # at once, so a long run's log shows them before its end
            print(f"FAILING {result.command} ({result.kind}) {json.dumps(result.argv)}: {result.problems[0][:300]}",
                  file=sys.stderr, flush=True)
        if done % 100 == 0:
            print(f"{done}/{args.cases} cases, {time.monotonic() - began:.0f} s", file=sys.stderr, flush=True)
        if done % 1000 == 0:  # a long run shows its table as it goes
            print(table(results), file=sys.stderr, flush=True)

    run_all(cases, args.jobs, args.timeout, on_result)
    if record is not None:
        record.close()
    failing = [r for r in results if r.problems]
    if args.failures is not None:
        with open(args.failures, "w") as fh:
            for r in failing:
                record = {"command": r.command, "kind": r.kind, "argv": r.argv, "problems": r.problems}
                fh.write(json.dumps(record) + "\n")
    print(table(results))
    if args.no_limit:
        print("\n" + timing_table(results, args.timeout))
        print(f"\ncases over {SLOW_S:g} s:\n" + (slow_cases(results) or "none"))
    print(f"\n{len(results)} cases in {time.monotonic() - began:.0f} s with {args.jobs} jobs; {len(failing)} failing; "
          f"load average at the end {load_average()}")
    for r in failing[:20]:
        print(f"- {r.command} ({r.kind}) {r.argv[:8]}: {r.problems[0][:200]}")
    sys.exit(1 if failing else 0)


if __name__ == "__main__":
    main()
