"""The closed-loop checks (benchmarks/accuracy/closed_loop.py): the cycle's prefill share is the stored one when
TTFT is nil, the least integer that keeps Little's law with TTFT in the cycle, and leaves evaluate as it was
once the block ends."""

from __future__ import annotations

import itertools

import pytest

import shardplan.solver.cost.evaluate as evaluate_module
from benchmarks.accuracy.closed_loop import cycle_in_evaluate, cycle_share
from shardplan.solver.cost.evaluate import NO_STACK, under_load

GRID = list(itertools.product((0, 7, 5_000, 10**9), (10, 3_000, 40_000_000), (40, 9_999, 300_000_000),
                              (2, 3, 64, 512), (1, 5, 100, 8192), (1, 8)))


@pytest.mark.parametrize(("round_ns", "slowest", "batch", "osl", "chunk"),
                         [g[1:] for g in GRID if g[0] == 0][:120])
def test_no_ttft_gives_the_stored_share(round_ns, slowest, batch, osl, chunk):
    assert cycle_share(0, round_ns, slowest, batch, osl, chunk) == -(-(batch - 1) * slowest // (osl * chunk))


@pytest.mark.parametrize(("ttft", "round_ns", "slowest", "batch", "osl", "chunk"), GRID[::7])
def test_least_share_keeping_littles_law(ttft, round_ns, slowest, batch, osl, chunk):
    """s x chunk x cycle >= the others' prefill x TPOT at s and not at s - 1 (cycle = TTFT + OSL x TPOT)."""
    s = cycle_share(ttft, round_ns, slowest, batch, osl, chunk)

    def holds(x: int) -> bool:
        return chunk * x * (ttft + osl * (round_ns + x)) >= (batch - 1) * slowest * (round_ns + x)

    assert holds(s)
    assert s == 0 or not holds(s - 1)
    assert s <= -(-(batch - 1) * slowest // (osl * chunk))  # TTFT in the cycle never adds prefill per token


def test_the_patch_ends_with_its_block():
    stored = evaluate_module.under_load
    with cycle_in_evaluate():
        assert evaluate_module.under_load is not stored
        patched = evaluate_module.under_load(100, 10, 40, 3, 5, 1, 1, NO_STACK)
    assert evaluate_module.under_load is stored
    assert under_load(100, 10, 40, 3, 5, 1, 1, NO_STACK).tpot_ns == 26  # 10 + ceil(2 x 40 / 5)
    assert patched.tpot_ns == 10 + cycle_share(115, 10, 40, 3, 5, 1)  # TTFT 100 + ceil((10 + 5) x 10 / 10)
    assert patched.e2e_ns == patched.ttft_ns + 4 * patched.tpot_ns
