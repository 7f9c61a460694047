"""The TTFT shape report's arithmetic (benchmarks/accuracy/ttft_shape.py) against values worked by hand."""

from __future__ import annotations

import math

import pytest

from benchmarks.accuracy.ttft_shape import by_slice, repeat_spread, summarise


def test_summary_splits_bias_from_scatter_worked_by_hand():
    # Ratios 1.2, 0.8, 1.5, 1.0: median ratio 1.1 (bias +10 %); |error| 0.2, 0.2, 0.5, 0 (median 0.2); about the
    # median ratio the runs sit 1/11, 3/11, 4/11, 1/11 off, whose median is (1/11 + 3/11) / 2 = 2/11.
    s = summarise([0.2, -0.2, 0.5, 0.0])
    assert s.runs == 4
    assert s.median_abs == pytest.approx(0.2)
    assert s.bias == pytest.approx(0.1)
    assert s.scatter == pytest.approx(2 / 11)


def test_a_slice_off_by_one_factor_is_all_bias():
    s = summarise([-0.5, -0.5, -0.5])
    assert (s.bias, s.scatter) == (-0.5, 0.0)


def test_slices_are_grouped_and_ordered_by_their_numbers():
    rows = by_slice([("8192", 0.1), ("1024", -0.1), ("c 17-128", 0.0), ("c 2-16", 0.3), ("1024", 0.3)])
    assert list(rows) == ["c 2-16", "c 17-128", "1024", "8192"]
    assert rows["1024"].runs == 2 and rows["1024"].median_abs == pytest.approx(0.2)


def test_repeats_bound_what_any_model_reaches():
    # "a" measured 100 and 400 ms: they disagree by 300 %; priced at their geometric mean, 200 ms, one run is
    # 100 % off and the other 50 %: a floor of 75 %. "b" measured once and "c" twice alike are no evidence.
    count, spread, floor = repeat_spread([("a", 100.0), ("a", 400.0), ("b", 50.0), ("c", 7.0), ("c", 7.0)])
    assert count == 1
    assert spread == pytest.approx(3.0)
    assert floor == pytest.approx(0.75)
    none = repeat_spread([("b", 50.0)])
    assert none[0] == 0 and math.isnan(none[1])
