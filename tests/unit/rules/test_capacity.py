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


def test_a_pinned_batch_that_cannot_fit_is_explained_by_its_kv_cache():
    # Llama-3.1-8B on one H100, --batch 5000 at ISL 1024 + OSL 256: every sequence keeps 1,280 tokens x
    # 32 layers x 2 (K, V) x 8 KV heads x 128 dims x 2 bytes = 160 MiB, so 5000 need 781.25 GiB on the
    # one GPU, far past its 72 GiB. The message named only the weights and runtime (17.9 GiB, "has 72.0"),
    # which reads as if it fitted.
    p = problem("llama-3.1-8b", "1xH100", batch=5000)
    message = MemoryFits().conflict_message(p)
    assert "KV cache 781.2 for batch 5000 x 1280 tokens" in message
    need = float(message.split("needs at least ")[1].split(" GiB")[0])
    assert need > 781.2 and "GiB short" in message


def test_without_a_pinned_batch_the_bound_stays_before_any_kv_cache():
    message = MemoryFits().conflict_message(problem("llama-3.1-70b", "1xH100"))
    assert "before any KV cache" in message and "KV cache 0" not in message
