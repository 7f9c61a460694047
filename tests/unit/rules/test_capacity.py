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


def test_without_a_pinned_batch_a_cache_too_small_to_print_stays_out_of_the_bound():
    # DeepSeek-V3 on 8 H100s: one 1,280-token sequence's MLA cache is 61 layers x 576 values x 2 bytes x 1,280
    # tokens = 0.084 GiB, 0.01 GiB over 8 GPUs, which one decimal would print as "KV cache 0.0".
    assert round(61 * 576 * 2 * 1280 / 2**30 / 8, 3) == 0.01
    message = MemoryFits().conflict_message(problem("deepseek-v3", "8xH100"))
    assert "before any KV cache" in message and "KV cache 0" not in message
    # Llama-3.1-70B on one H100: 80 layers x 2 x 8 KV heads x 128 x 2 bytes x 1,280 tokens = 0.39 GiB, counted.
    message = MemoryFits().conflict_message(problem("llama-3.1-70b", "1xH100"))
    assert "+ KV cache 0.4 for one sequence of 1280 tokens), has 72.0" in message


def test_without_a_pinned_batch_one_sequences_kv_cache_counts_where_it_shows():
    # Llama-3.1-8B, ISL 120,000 + OSL 10,000 under a 25 GiB cap: one sequence keeps 130,000 tokens x 32 layers x
    # 2 (K, V) x 8 KV heads x 128 dims x 2 bytes = 15.87 GiB on the one GPU, beside 14.96 GiB of weights. The
    # message said "needs at least 17.9 GiB ..., before any KV cache), has 25.0", which reads as if it fitted.
    kv = 130_000 * 32 * 2 * 8 * 128 * 2 / 2**30
    assert round(kv, 2) == 15.87
    p = problem("llama-3.1-8b", "1xH100", isl=120_000, osl=10_000, mem_cap_gib=25.0)
    message = MemoryFits().conflict_message(p)
    assert "+ KV cache 15.9 for one sequence of 130000 tokens), has 25.0" in message
    assert MemoryFits().fits_nowhere(p)
    need = float(message.split("needs at least ")[1].split(" GiB")[0])
    assert need == pytest.approx(kv + 14.96 + resolve_profile(p).runtime_overhead_gib, abs=0.06)


def test_redundant_expert_slots_count_in_the_lower_bound():
    # Qwen3-30B-A3B on one H100 with --redundant-slots 64: an expert is 3 x 2048 x 768 bf16 weights = 9 MiB, so
    # 64 more slots in each of the 48 MoE layers add 64 x 48 x 9 MiB = 27.0 GiB to the 56.9 GiB of weights on the
    # one GPU: 56.9 + 27.0 + 2.9 runtime + 0.1 for one 1,280-token sequence's cache (48 layers x 2 x 4 KV heads x
    # 128 x 2 bytes x 1,280 = 0.117 GiB) = 86.9 GiB, 14.9 over the 72.0 usable. The message said "needs at least
    # 59.8 GiB ..., has 72.0": it fitted, by its own numbers, yet the solve was infeasible.
    assert 64 * 48 * 3 * 2048 * 768 * 2 / 2**30 == 27.0
    p = problem("qwen3-30b-a3b", "1xH100", redundant_slots=64)
    assert MemoryFits().conflict_message(p) == (
        "needs at least 86.9 GiB per GPU (weights 56.9 + 27.0 for 64 redundant expert slots per MoE layer spread "
        "over all 1 GPUs + 2.9 runtime and buffers + KV cache 0.1 for one sequence of 1280 tokens), has 72.0, "
        "14.9 GiB short")
    assert MemoryFits().fits_nowhere(p)
    one = MemoryFits().conflict_message(problem("qwen3-30b-a3b", "2xH100", redundant_slots=1))
    assert "+ 0.2 for 1 redundant expert slot per MoE layer spread over all 2 GPUs" in one  # 48 x 9 MiB / 2
    assert "redundant" not in MemoryFits().conflict_message(problem("qwen3-30b-a3b", "1xH100"))


def test_a_cap_above_the_gpus_memory_leaves_the_capacity_as_the_limit():
    # --mem-cap-gib 200 on an H100 (80 GiB in its preset): the limit was the cap, so memory checks passed a
    # plan holding up to 200 GiB per GPU. The GPU's capacity bounds any cap.
    p = problem("llama-3.1-70b", "2xH100", mem_cap_gib=200.0)
    capacity = p.cluster.gpu.hbm_gib
    assert capacity == 80.0
    assert memory_limit_gib(p, resolve_profile(p)) == capacity
    assert f"has {capacity:.1f}" in MemoryFits().conflict_message(p)
    # One H100 cannot hold the 70B model's 131 GiB of BF16 weights, whatever the cap says.
    one_gpu = problem("llama-3.1-70b", "1xH100", mem_cap_gib=200.0)
    assert MemoryFits().fits_nowhere(one_gpu)
