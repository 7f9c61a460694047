"""validate reads a DAG file of at most 512 MiB (``MAX_DAG_BYTES``, about 4-5 GB in memory while it checks), over
5x the largest DAG measured on up to 4,096 GPUs (solver/dag/export.py has the measurements); and shardplan writes no
DAG JSON its own validate would refuse."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardplan.solver.dag import export
from tests.fuzz.cases import Case
from tests.fuzz.harness import run_in_process


def test_validate_refuses_a_file_past_512_mib_without_reading_it(tmp_path: Path) -> None:
    # It read up to 1 GiB, which checking takes 7-9 GB to hold.
    big = tmp_path / "big.json"
    with big.open("wb") as fh:
        fh.truncate(512 * 2**20 + 1)  # sparse: no disk, and nothing to read
    outcome = run_in_process(Case("validate", ["validate", str(big)], {}), tmp_path)
    assert (outcome.code, outcome.stdout, outcome.written) == (2, "", [])
    assert outcome.stderr == f"shardplan: error: file: {big} is 536,870,913 bytes; at most 536,870,912 are read\n"


def test_a_dag_larger_than_validate_reads_is_not_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(export, "MAX_DAG_BYTES", 10_000)  # the 8B plan's logical DAG is some 700 kB
    argv = ["solve", "--model", "llama-3.1-8b", "--cluster", "1xH100", "--no-runner-up", "--dag", "{dir}/d.json"]
    outcome = run_in_process(Case("solve", argv, {}), tmp_path)
    assert (outcome.code, outcome.stdout, outcome.written) == (2, "", [])
    assert outcome.stderr.startswith("shardplan: error: dag: the DAG's JSON would be ")
    assert outcome.stderr.endswith(" bytes, more than validate reads (10,000): --detail logical writes a smaller one\n")
