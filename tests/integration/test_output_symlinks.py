"""An output named through a symlink (--dag, --report, --out, --experts-out) is written through it, as most Unix
tools write: the link stays a link, its target gets the content (atomically: a temporary in the target's folder
renamed onto it), a dangling link's target is created, and bad input writes nothing there. An existing output
keeps its permission bits: a report kept private (0600) became 0644, readable by everyone."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tests.fuzz.cases import Case
from tests.fuzz.harness import run_in_process

SMALL = ["--model", "llama-3.1-8b", "--cluster", "1xH100", "--no-runner-up"]


def _solve(tmp_path: Path, *extra: str) -> int:
    outcome = run_in_process(Case("solve", ["solve", *SMALL, *extra], {}), tmp_path / "cwd")
    return outcome.code


def test_outputs_are_written_through_symlinks_and_the_links_stay(tmp_path: Path) -> None:
    (tmp_path / "cwd").mkdir()
    real = tmp_path / "real"
    real.mkdir()
    (real / "dag.json").write_text("old")
    (tmp_path / "dag.json").symlink_to(real / "dag.json")
    (tmp_path / "report.html").symlink_to("real/report.html")  # relative, and dangling: its target is made
    code = _solve(tmp_path, "--dag", str(tmp_path / "dag.json"), "--report", str(tmp_path / "report.html"))
    assert code == 0
    assert (tmp_path / "dag.json").is_symlink() and (tmp_path / "report.html").is_symlink()
    assert (real / "dag.json").read_text().startswith("{") and (real / "report.html").read_text().startswith("<!")
    assert sorted(p.name for p in real.iterdir()) == ["dag.json", "report.html"]  # no temporary left


def test_bad_input_writes_nothing_through_a_symlink(tmp_path: Path) -> None:
    (tmp_path / "cwd").mkdir()
    (tmp_path / "target.json").write_text("KEEP")
    (tmp_path / "dag.json").symlink_to(tmp_path / "target.json")
    assert _solve(tmp_path, "--dag", str(tmp_path / "dag.json"), "--batch", "0") == 2
    assert (tmp_path / "target.json").read_text() == "KEEP" and (tmp_path / "dag.json").is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cwd", "dag.json", "target.json"]


def test_an_existing_output_keeps_its_permission_bits(tmp_path: Path) -> None:
    (tmp_path / "cwd").mkdir()
    private = tmp_path / "report.html"
    private.write_text("old")
    os.chmod(private, 0o600)
    fresh = tmp_path / "dag.json"  # a new file gets what open() would give it
    assert _solve(tmp_path, "--report", str(private), "--dag", str(fresh)) == 0
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(private.stat().st_mode) == 0o600 and private.read_text() != "old"
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o666 & ~umask
