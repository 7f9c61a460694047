"""Output to a stream whose encoding cannot hold a character the command prints: escaped, never a crash."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from shardplan.models.presets import CONFIG_DIR


@pytest.mark.parametrize(("encoding", "first_line"), [
    # ascii escapes both; latin-1 holds 'è' (as the byte 0xe8) but not the arrow
    ("ascii", b"mod\\xe8le\\u2192x on 1 x 8 H100-SXM"),
    ("latin-1", b"mod\xe8le\\u2192x on 1 x 8 H100-SXM"),
])
def test_a_model_name_the_terminal_cannot_encode_is_escaped(tmp_path, encoding, first_line):
    # The model is named by its file's stem; the human view printed it and raised UnicodeEncodeError
    # (exit 3, "internal error") under PYTHONIOENCODING=ascii.
    config = json.loads((CONFIG_DIR / "llama-3.1-8b.json").read_text())
    del config["_shardplan_id"]
    (tmp_path / "modèle→x.json").write_text(json.dumps(config), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "SHARDPLAN_DEBUG"}
    env["PYTHONIOENCODING"] = encoding
    done = subprocess.run([sys.executable, "-m", "shardplan.solver.cli", "evaluate", "--model", "modèle→x.json",
                           "--cluster", "8xH100", "--tp", "1"], capture_output=True, cwd=tmp_path, env=env,
                          timeout=300)
    assert (done.returncode, done.stderr) == (0, b"")
    assert done.stdout.splitlines()[0].startswith(first_line)
