"""``--engine``: the plan names the engine and the profile it was priced with, ``--emit X`` prices with
engine X, and ``shardplan profiles`` lists every profile."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from shardplan.hardware.profile import DEFAULT_ENGINE, ENGINES, composed_profiles, list_profiles, profile_for_gpu

LLAMA_8B_H100 = ["--model", "llama-3.1-8b", "--cluster", "1xH100", "--tp", "1"]


def run(*args: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "shardplan.solver.cli", *args, "--json"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.parametrize("engine", ENGINES)
def test_evaluate_names_the_engine_and_its_profile(engine):
    data = run("evaluate", *LLAMA_8B_H100, "--engine", engine)
    assert data["engine"] == engine
    assert data["profile"] == profile_for_gpu("H100-SXM", engine).name


def test_without_engine_the_default_engine_prices_the_plan():
    data = run("evaluate", *LLAMA_8B_H100)
    assert data["engine"] == DEFAULT_ENGINE
    assert data["profile"] == profile_for_gpu("H100-SXM", DEFAULT_ENGINE).name


def test_emit_prices_with_the_emitted_engine():
    data = run("solve", *LLAMA_8B_H100, "--emit", "sglang")
    assert data["engine"] == "sglang" and data["launch"]["engine"] == "sglang"
    assert data["profile"] == profile_for_gpu("H100-SXM", "sglang").name


def test_profiles_lists_every_profile_with_engine_gpu_and_fit_then_the_composed_ones():
    rows = run("profiles")
    every = [*list_profiles(), *composed_profiles()]
    assert [r["name"] for r in rows] == [p.name for p in every]
    for row, p in zip(rows, every, strict=True):
        assert (row["engine"], row["gpu"], row["software"]) == (p.engine, p.gpu, p.software)
        assert (row["rows_fitted"], row["median_abs_error"]) == (p.fit_rows, p.fit_median_abs_error)
        assert row["composed"] == (p.source if "+" in p.name else None)
    assert "h100-sxm+sglang" in [r["name"] for r in rows]
