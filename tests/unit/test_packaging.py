"""The four code folders install only as the ``shardplan`` namespace (issue 2, DESIGN.md layout)."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize("name", ["models", "hardware", "rules", "solver"])
def test_no_bare_top_level_module(name, tmp_path):
    # Run outside the checkout, so only what the installation put on the path is importable.
    result = subprocess.run([sys.executable, "-c", f"import {name}"], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode != 0 and "ModuleNotFoundError" in result.stderr


def test_the_namespace_imports(tmp_path):
    code = "import shardplan.models, shardplan.hardware, shardplan.rules, shardplan.solver.cli"
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
