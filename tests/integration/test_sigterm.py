"""SIGTERM (what ``timeout``, CI runners and service managers send) unwinds a command as Ctrl-C does: one
line, exit 143, and no temporary output left behind. Python's default was to die at once: ``timeout 60
shardplan calibrate ... --out DIR`` left its temporary folder (.shardplan-*) in DIR."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from shardplan.solver.cli import main
from shardplan.solver.cost.calibration import fit


class _DefaultAction(Exception):
    """Stands for SIGTERM's default action (the process dies) while this test runs, so that without the
    command's own handler the test fails rather than killing the test process."""


def test_sigterm_mid_fit_exits_143_and_removes_the_temporary_output(tmp_path, monkeypatch, capsys):
    out = tmp_path / "profiles"
    out.mkdir()
    points = tmp_path / "points.csv"
    points.write_text("id\n")

    def fit_until_terminated(points_csv: str, temp: str, **kw: object) -> None:
        (Path(temp) / "h100-sxm.json").write_text("{")  # half of the output written
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)  # the handler raises at the next bytecode, well before this ends
        raise AssertionError("SIGTERM did not end the command")

    def default_action(signum: int, frame: object) -> None:
        raise _DefaultAction()

    monkeypatch.setattr(fit, "calibrate_to_file", fit_until_terminated)
    previous = signal.signal(signal.SIGTERM, default_action)
    try:
        with pytest.raises(SystemExit) as ended:
            main(["calibrate", str(points), "--out", str(out)])
        assert signal.getsignal(signal.SIGTERM) is default_action  # the command put back what it found
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert ended.value.code == 143
    assert capsys.readouterr().err == "shardplan: terminated\n"
    assert list(out.iterdir()) == []
