"""The TTFT floor's reach (``solver/disagg/ttft_reach.py``) held to the floor by brute force: no deployment
the floor lets through beats its pair's bound or lies outside the worker counts ``Reach.spans`` lists, and
``Reach.kept`` keeps the candidates of every one at or above a rate per GPU; the prefill side's reach
falls as the decode round grows (what the Pareto front of ``kept`` takes)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from shardplan.solver.disagg import brute
from shardplan.solver.disagg.ttft_cut import ChoiceFloor
from shardplan.solver.disagg.ttft_reach import Level, Reach, _merged
from tests.unit.solver.disagg.test_search import SGL_TIGHT, SMALL, case_id, pools_for

CASES = [c for c in SMALL if c.get("ttft_ms") is not None] + SGL_TIGHT


def let_through(pools, floor):
    """Every deployment with a rate that the floor does not refuse at its own rate."""
    return [c for c in brute.choices(pools) if pools.rate(c) > 0 and not floor.refuses(c, pools.rate(c))]


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_no_deployment_the_floor_lets_through_beats_its_pair_bound_or_leaves_its_spans(case) -> None:
    pools = pools_for(case)
    floor = ChoiceFloor(pools)
    reach = Reach(floor)
    through = let_through(pools, floor)  # none on the last SGLang case: it has no deployment
    for c in through:
        ratio = Fraction(pools.rate(c), pools.gpus(c))
        if not reach.active:
            continue
        assert ratio <= reach.pair_bound(c.prefill, c.decode), c
        for f in (ratio, ratio * Fraction(9, 10)):
            assert any(lo <= c.x <= hi for lo, hi in reach.spans(c.prefill, c.decode, f, c.y)), (c, f)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_kept_keeps_the_candidates_of_every_deployment_the_floor_lets_through_at_the_rate(case) -> None:
    pools = pools_for(case)
    floor = ChoiceFloor(pools)
    reach = Reach(floor)
    through = let_through(pools, floor)
    ratios = sorted({Fraction(pools.rate(c), pools.gpus(c)) for c in through}, reverse=True)
    for f in ratios[:: max(1, len(ratios) // 5)]:
        kept_p, kept_d = reach.kept(f)
        for c in through:
            if Fraction(pools.rate(c), pools.gpus(c)) >= f:
                assert c.prefill in kept_p and c.decode in kept_d, (c, f)


@pytest.mark.parametrize("case", SGL_TIGHT[:2], ids=case_id)
def test_the_prefill_reach_falls_as_the_decode_round_grows(case) -> None:
    pools = pools_for(case)
    reach = Reach(ChoiceFloor(pools))
    for i in range(len(pools.prefill)):
        most = [reach.prefill_most(i, d_ns, 0) for d_ns in (0, 10**8, 10**9, 10**10, 10**11)]
        values = [m[0] + m[1] if m is not None else 0.0 for m in most]
        assert values == sorted(values, reverse=True)


def test_a_level_s_bound_is_the_pair_bound_at_its_corner() -> None:
    """By hand: a prefill worker of 2 GPUs carrying at most 3 + 1 requests/s (its capacity 10), a decode
    worker of 1 GPU at most 2: 1 / (2 / 4 + 1 / 2) = 1 per GPU; with the capacity below the corner, 3."""
    assert Level(3.0, 1.0, 2.0).per_gpu(10.0, 2, 1) == pytest.approx(1.0)
    assert Level(3.0, 1.0, 2.0).per_gpu(3.0, 2, 1) == pytest.approx(1 / (2 / 3 + 1 / 2))
    assert _merged([(5, 9), (1, 3), (4, 4), (12, 13)]) == [(1, 9), (12, 13)]
