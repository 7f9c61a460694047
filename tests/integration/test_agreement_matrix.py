"""Issue 12's agreement matrix (benchmarks/solve_vs_bruteforce/matrix.py), the scenarios that run in seconds.

For each: ``solve`` equals the brute force over every layout and integer batch exactly (or both find the
problem infeasible), and ``solve`` with every degree and boundary of its plan pinned returns the batch and
objective that ``evaluate`` finds best over every batch the engine allows. The whole matrix, 1 to 4,096
GPUs, runs with ``python -m benchmarks.solve_vs_bruteforce --matrix``.
"""

from __future__ import annotations

import pytest

from benchmarks.solve_vs_bruteforce.matrix import MATRIX, PROBES, run_probe, run_scenario, scenario_id

# 1-based rows of MATRIX, each a few seconds at most: 1 to 4,096 GPUs, dense and MoE, both objectives,
# TTFT/TPOT limits, memory caps, a fixed batch and one problem no layout can serve.
FAST = [1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12, 15, 19, 20, 24, 25, 26]
# These also run the pinned check through the console script (`shardplan solve`/`evaluate --json`).
THROUGH_CLI = {3, 8, 26}


@pytest.mark.parametrize("row", FAST, ids=lambda i: f"{i}-{scenario_id(MATRIX[i - 1])}")
def test_solve_equals_brute_force_and_pinned_equals_evaluate(row):
    result = run_scenario(MATRIX[row - 1], cli=row in THROUGH_CLI)
    assert result.agree is True, f"solve {result.status} {result.value} vs brute force {result.brute}"
    if result.status == "infeasible":
        assert result.brute is None
        return
    assert result.status == result.pinned_status == "optimal"
    assert result.pinned_agree is True, (result.layout, result.pinned_batch, result.evaluate_batch)
    if row in THROUGH_CLI:
        assert result.cli_agree is True


def test_the_fast_rows_cover_the_matrix_range():
    rows = [MATRIX[i - 1] for i in FAST]
    gpus = {run_gpus(s["cluster"]) for s in rows}
    assert min(gpus) == 1 and max(gpus) == 4096
    assert {s["objective"] for s in rows} == {"latency", "throughput"}
    assert any("ttft_ms" in s for s in rows) and any("tpot_ms" in s for s in rows)
    assert any("mem_cap_gib" in s for s in rows) and any("batch" in s for s in rows)
    assert any(s["model"].startswith(("mixtral", "qwen3-30b", "gpt-oss")) for s in rows)


def run_gpus(cluster: str) -> int:
    """GPUs of an ``NxG`` or ``MxNxG`` cluster name."""
    count = 1
    for part in cluster.split("x")[:-1]:
        count *= int(part)
    return count


def test_pinned_pipeline_at_the_engine_limit_equals_evaluate():
    # Three stages and a limit of 45 (a multiple of 3): the best batch is the limit, in both.
    probe = run_probe(*PROBES[0])
    assert probe.agree, (probe.layout, probe.evaluated)
    assert probe.layout.batch == 45


@pytest.mark.parametrize("index", [1, 2, 3], ids=["pp2-limit63", "pp2-attn_dp4-tpot40", "attn_dp8-tpot20"])
def test_pinned_uneven_microbatches_equal_evaluate(index):
    # evaluate's best batch is not a multiple of S x attn_dp (63 for pp=2 under a limit of 63; 84 for
    # pp=2 x attn_dp=4 at 21 per group; 322 for attn_dp=8 under TPOT 20 ms, where 320 and 328 are the
    # even neighbours): solve, deciding any integer batch, returns it and its tokens/s exactly.
    probe = run_probe(*PROBES[index])
    assert probe.agree, (probe.layout, probe.tokens_per_s, probe.evaluated)
    assert probe.layout.batch % (probe.layout.pp * probe.layout.attn_dp) != 0
