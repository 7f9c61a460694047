"""MEM-001 quotes the one per-GPU memory limit (``rules.problem.memory_limit_gib``) the cost model reports."""

from __future__ import annotations

import pytest

from shardplan.rules.capacity import MemoryFits
from shardplan.rules.layout import Layout
from shardplan.rules.problem import memory_limit_gib, resolve_profile
from shardplan.solver.cost.evaluate import evaluate
from tests.factory import problem


@pytest.mark.parametrize("cap", [None, 30.0])
def test_mem_001_and_the_cost_model_share_the_limit(cap):
    p = problem("llama-3.1-70b", "2xH100", mem_cap_gib=cap)
    limit = memory_limit_gib(p, resolve_profile(p))
    expected = cap if cap is not None else p.cluster.gpu.hbm_gib * resolve_profile(p).usable_memory_fraction
    assert limit == expected
    assert f"has {limit:.1f}" in MemoryFits().conflict_message(p)
    prediction = evaluate(p, Layout.even(p.model.num_layers, tp=2))
    assert {m.limit_gib for m in prediction.memory} == {limit}
