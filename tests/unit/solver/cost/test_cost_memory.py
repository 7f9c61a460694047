"""Memory per GPU: linear KV, a breakdown that adds up, memory-starved and non-fitting layouts."""

from __future__ import annotations

import pytest

from shardplan.models.derived import weight_bytes_total
from shardplan.rules.layout import Layout
from shardplan.rules.problem import Objective, Problem, resolve_profile
from shardplan.solver.cost.evaluate import best_throughput, evaluate, max_batch, memory_reports
from tests.unit.solver.cost.factory import GIB, layout, problem


def test_kv_grows_linearly_with_batch_and_context():
    short = problem("llama-3.1-70b", "8xH100", isl=1024, osl=1024)
    long = problem("llama-3.1-70b", "8xH100", isl=3072, osl=1024)  # twice the context

    def kv(p: Problem, b: int) -> float:
        return memory_reports(p, layout(p, tp=4, batch=b))[0].kv_cache_gib

    assert kv(short, 16) == pytest.approx(2 * kv(short, 8))
    assert kv(short, 64) == pytest.approx(8 * kv(short, 8))
    assert kv(long, 8) == pytest.approx(2 * kv(short, 8))


@pytest.mark.parametrize("alias,tp,pp", [("llama-3.1-70b", 4, 2), ("mixtral-8x7b", 2, 1), ("qwen3-30b-a3b", 1, 2)])
def test_breakdown_sums_to_total(alias, tp, pp):
    p = problem(alias, "8xH100")
    for m in evaluate(p, layout(p, tp=tp, pp=pp, batch=32)).memory:
        parts = m.weights_gib + m.kv_cache_gib + m.activations_gib + m.comm_buffers_gib + m.runtime_gib
        assert m.total_gib == pytest.approx(parts, rel=1e-12)


def test_16_bit_70b_on_tp2_is_memory_starved():
    # Llama-3.1-70B in fp16 on two 80 GB H100s: 141.1 GB / 2 = 65.7 GiB of weights per GPU leaves
    # at most 80 - 65.7 = 14.3 GiB; a 2,000-token sequence holds 2000 x 327,680 / 2 B = 0.31 GiB
    # per GPU, so no more than ~46 sequences fit (fewer after runtime and activations) - against
    # hundreds at TP4. The published table (TensorRT-LLM v0.14, 1000/1000) measured 785 tok/s at
    # TP2 against 3,775 at TP4: per GPU, TP2 is less than half of TP4. The model agrees.
    p = problem(
        "llama-3.1-70b", "8xH100", isl=1000, osl=1000, weights="fp16", kv="fp16", objective=Objective.THROUGHPUT
    )
    per_seq = 2000 * 327_680 / 2 / GIB
    assert per_seq == pytest.approx(0.305, abs=0.001)
    tp2, tp4 = layout(p, tp=2), layout(p, tp=4)
    assert 1 <= max_batch(p, tp2) <= int((80 - weight_bytes_total(p.model) / 2 / GIB) / per_seq)
    assert max_batch(p, tp4) > 5 * max_batch(p, tp2)

    def per_gpu(lay: Layout) -> float:
        best = best_throughput(p, lay)
        assert best is not None
        return best.metrics.output_tokens_per_s_per_gpu

    assert per_gpu(tp2) < 0.5 * per_gpu(tp4)


def test_layout_that_does_not_fit_reports_what_it_lacks():
    # TP1 on one 80 GB GPU: 141.1e9 B = 131.4 GiB of weights alone; the report says it does not fit
    # and by how much (at least 131.4 - 80 = 51.4 GiB), and the throughput search finds no batch.
    p = problem(
        "llama-3.1-70b", "1xH100", isl=1000, osl=1000, weights="fp16", kv="fp16", objective=Objective.THROUGHPUT
    )
    pred = evaluate(p, layout(p, batch=1))
    worst = pred.worst_memory
    weights_gib = weight_bytes_total(p.model) / GIB
    assert weights_gib == pytest.approx(131.4, abs=0.1)
    assert not pred.fits
    assert worst.short_gib == pytest.approx(worst.total_gib - worst.limit_gib)
    assert worst.short_gib >= weights_gib - 80
    assert max_batch(p, layout(p)) == 0
    assert best_throughput(p, layout(p)) is None


def test_max_batch_stops_at_the_engine_limit_of_each_attention_group():
    # Llama-3.1-8B on H100s holds thousands of 1,280-token sequences per GPU, far above a limit of 16: the
    # limit binds. BAT-001 counts it per attention group, as the search and the decode pools do, so a
    # replica of 4 attention-DP ranks holds 4 x 16; --max-batch replaces the profile's limit the same way.
    p = problem("llama-3.1-8b", "8xH100")
    small = resolve_profile(p).model_copy(update={"max_batch": 16})
    assert max_batch(p, layout(p, tp=4), small) == 16
    assert max_batch(p, layout(p, tp=1, attn_dp=4), small) == 4 * 16
    capped = p.model_copy(update={"max_batch": 8})
    assert max_batch(capped, layout(capped, tp=1, attn_dp=4), small) == 4 * 8
