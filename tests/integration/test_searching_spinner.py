"""The spinner a person at a terminal sees while ``solve`` searches (``solver/cli/working.py``): on a
terminal it draws on stderr and leaves stdout exactly as without it; with ``--json`` or a stderr that is
not a terminal, nothing is drawn at all."""

from __future__ import annotations

import io
import re
import sys

import pytest

from shardplan.solver.cli.working import searching
from tests.integration.test_cli_disagg import run  # main(argv) in-process: (exit code, stdout, stderr)

SOLVE = ["solve", "--model", "llama-3.1-8b", "--cluster", "8xH100", "--no-runner-up"]


class _Terminal(io.StringIO):
    """A stderr that says it is a terminal and keeps what is drawn on it."""

    def isatty(self) -> bool:
        return True


def test_nothing_is_drawn_off_a_terminal_or_for_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    with searching("solving", None, quiet=False):
        pass
    assert sys.stderr.getvalue() == ""
    monkeypatch.setattr(sys, "stderr", _Terminal())
    with searching("solving", 5.0, quiet=True):
        pass
    assert sys.stderr.getvalue() == ""


def test_on_a_terminal_the_spinner_names_the_work_and_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    with searching("solving", 2.5, quiet=False):
        pass
    assert "solving (at most 2.5 s)" in terminal.getvalue()
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    with searching("solving", None, quiet=False):
        pass
    assert "--time-limit" in terminal.getvalue()


@pytest.mark.parametrize("argv", [SOLVE, [*SOLVE, "--serving", "auto", "--tpot-ms", "50"]])
def test_stdout_is_the_same_with_the_spinner(argv: list[str], capsys: pytest.CaptureFixture[str],
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    code, plain, _ = run(argv, capsys)
    assert code == 0
    monkeypatch.setattr(sys, "stderr", _Terminal())
    code, drawn, _ = run(argv, capsys)
    assert code == 0 and "solving" in sys.stderr.getvalue()
    assert _untimed(drawn) == _untimed(plain)


def _untimed(text: str) -> str:
    """The human view without its timing figures ("solved in 0.12 s"), which may differ between runs."""
    return re.sub(r"(solved|found) in [\d.]+ s", "", text)
