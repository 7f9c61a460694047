"""An output option naming an open stream (``--dag /dev/stdout``) is refused before any work: it is not a file."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SMALL = ["--model", "llama-3.1-8b", "--cluster", "1xH100", "--no-runner-up"]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "SHARDPLAN_DEBUG"}


def _line(option: str, path: str) -> str:
    return f"shardplan: error: {option}: {path} is an open stream (such as standard output), not a file; " \
           "name a file to write"


@pytest.mark.parametrize("path", ["/dev/stdout", "/dev/stderr", "/dev/fd/1", "/proc/self/fd/1"])
@pytest.mark.parametrize("option", ["dag", "report"])
def test_a_stream_as_an_output_into_a_pipe_is_refused(tmp_path, option, path):
    # Resolved, /dev/stdout on a pipe is /proc/PID/fd/pipe:[N]: 'cannot write to /proc/PID/fd: No such file
    # or directory', which does not say what is wrong.
    done = subprocess.run([sys.executable, "-m", "shardplan.solver.cli", "solve", *SMALL, f"--{option}", path],
                          capture_output=True, text=True, cwd=tmp_path, env=_env(), timeout=300)
    assert (done.returncode, done.stdout, done.stderr.splitlines()) == (2, "", [_line(option, path)])
    assert list(tmp_path.iterdir()) == []


def test_a_stream_as_an_output_redirected_to_a_file_leaves_the_file_alone(tmp_path):
    # Resolved, /dev/stdout is then the file the shell opened: the DAG's temporary was renamed onto it,
    # replacing the file under the redirection (the plan's own lines went to the unlinked one), exit 0.
    redirected = tmp_path / "out.txt"
    with redirected.open("w") as out:
        done = subprocess.run([sys.executable, "-m", "shardplan.solver.cli", "solve", *SMALL, "--dag", "/dev/stdout"],
                              stdout=out, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=_env(), timeout=300)
    assert (done.returncode, done.stderr.splitlines()) == (2, [_line("dag", "/dev/stdout")])
    assert redirected.read_text() == ""


def test_a_link_to_a_stream_is_refused(tmp_path):
    (tmp_path / "report.html").symlink_to("/dev/stdout")
    done = subprocess.run([sys.executable, "-m", "shardplan.solver.cli", "solve", *SMALL, "--report", "report.html"],
                          capture_output=True, text=True, cwd=tmp_path, env=_env(), timeout=300)
    assert (done.returncode, done.stdout, done.stderr.splitlines()) == (2, "", [_line("report", "report.html")])


def test_an_ordinary_file_is_still_written(tmp_path: Path):
    done = subprocess.run([sys.executable, "-m", "shardplan.solver.cli", "solve", *SMALL, "--dag", "d.json"],
                          capture_output=True, text=True, cwd=tmp_path, env=_env(), timeout=300)
    assert done.returncode == 0 and (tmp_path / "d.json").stat().st_size > 0
