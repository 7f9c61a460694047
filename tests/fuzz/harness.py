"""Run one fuzz case in-process and judge it: exit 0, 1 or 2 (never 3, a signal or an exception); on
exit 2 exactly one stderr line that names a field; on any error, no file written."""

from __future__ import annotations

import contextlib
import io
import os
import re
from dataclasses import dataclass
from pathlib import Path

from shardplan.solver.cli.main import main
from tests.fuzz.cases import Case

# "shardplan: error: FIELD: reason", or click's "Invalid value for '--isl'", "Missing argument 'FILE'", ...
# A field may carry a place: "load-profile load.csv:12: ...", "points row 7: ...".
NAMES_A_FIELD = re.compile(r"^shardplan: (error: (\S.{0,120}?: |.*'-{0,2}[\w-]+')|interrupted)")


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str
    written: list[str]  # files that appeared in the case's folder


def materialise(case: Case, folder: Path) -> list[str]:
    for name, data in case.files.items():
        (folder / name).write_bytes(data)
    return [arg.replace("{dir}", str(folder)) for arg in case.argv]


def run_in_process(case: Case, folder: Path) -> Outcome:
    argv = materialise(case, folder)
    before = set(os.listdir(folder))
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 3)
    written = sorted(set(os.listdir(folder)) - before)
    return Outcome(code, out.getvalue(), err.getvalue(), written)


def problems(outcome: Outcome, case: Case | None = None) -> list[str]:
    """What is wrong with an outcome; empty when it is fine."""
    found = []
    if outcome.code not in (0, 1, 2):
        found.append(f"exit {outcome.code}: {outcome.stderr.strip()[:300]}")
    if outcome.code == 2:
        lines = outcome.stderr.strip().splitlines()
        if len(lines) != 1:
            found.append(f"{len(lines)} stderr lines: {outcome.stderr[:300]!r}")
        elif not NAMES_A_FIELD.match(lines[0]):
            found.append(f"message names no field: {lines[0][:200]!r}")
    # validate --fix writes the repaired DAG and exits 1 when violations remain: that file is its result.
    # evaluate's exit 1 is its verdict on a layout it priced whole (the violations are listed): the DAG or
    # placement it was asked for describes that layout, colocated or disaggregated alike.
    verdict = case is not None and outcome.code == 1 and (
        case.command == "evaluate" or (case.command == "validate" and "--fix" in case.argv))
    if outcome.code != 0 and outcome.written and not verdict:
        found.append(f"exit {outcome.code} but wrote {outcome.written}")
    return found


def run_judged(folder: Path, argv: list[str], files: dict[str, bytes] | None = None) -> tuple[int, str, list[str]]:
    """(exit code, stderr stripped, files written) of an in-process run of ``argv`` (``{dir}`` is ``folder``),
    after asserting that the harness finds nothing wrong with it (``problems``): for the tests of found cases."""
    case = Case(argv[0], argv, files or {})
    outcome = run_in_process(case, folder)
    assert problems(outcome, case) == []
    return outcome.code, outcome.stderr.strip(), outcome.written
