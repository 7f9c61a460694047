"""MLA's latent cache streams at its own efficiency in decode (``Profile.mla_stream_efficiency``), against
hand-computed byte counts; other attention kinds and prefill keep ``kv_stream_efficiency``."""

from __future__ import annotations

import pytest

from shardplan.hardware.profile import get_profile
from shardplan.solver.cost.calibration.fit import FLASHMLA_H800_SHARE, mla_stream_efficiency
from shardplan.solver.cost.calibration.op_terms import MoeTerms, OpTerms
from shardplan.solver.cost.evaluate import evaluate
from tests.unit.solver.cost.factory import layout, problem

H100_BYTES_PER_S = 3.35e12
BASE = get_profile("h100-sxm").model_copy(update={"kv_stream_efficiency": 0.6, "attention_fixed_us": 0.0})


def _decode_core_us(alias: str, **update: float | None) -> float:
    p = problem(alias, "8xH100", isl=1024, osl=256)
    pred = evaluate(p, layout(p, tp=8, batch=8), BASE.model_copy(update=update))
    return pred.stages[0].decode_ops_us["attn.core"]


def test_mla_decode_reads_its_latent_cache_at_the_mla_stream():
    # DeepSeek-V3: 61 layers, a bf16 latent of 512 + 64 values = 1,152 bytes per token and layer, which every
    # tensor-parallel rank reads whole for each of its 8 sequences at the mean decode context 1024 + 256 / 2 =
    # 1,152 tokens: 8 x 1152 x 1152 x 61 = 647.6 MB per GPU and step. The kernel is memory-bound (16 query
    # heads per GPU do ~30 FLOP per byte read).
    nbytes = 8 * 1152 * 1152 * 61
    assert _decode_core_us("deepseek-v3", mla_stream_efficiency=0.9) == pytest.approx(
        nbytes / (H100_BYTES_PER_S * 0.9) * 1e6, rel=1e-3)
    # Without the field, the GQA kernels' stream prices it, as before the term.
    assert _decode_core_us("deepseek-v3", mla_stream_efficiency=None) == pytest.approx(
        nbytes / (H100_BYTES_PER_S * 0.6) * 1e6, rel=1e-3)


def test_other_attention_kinds_ignore_the_mla_stream():
    assert _decode_core_us("llama-3.1-70b", mla_stream_efficiency=0.9) == _decode_core_us(
        "llama-3.1-70b", mla_stream_efficiency=None)


def test_prefill_of_an_mla_model_is_unchanged():
    p = problem("deepseek-v3", "8xH100", isl=1024, osl=256)
    with_mla = evaluate(p, layout(p, tp=8, batch=8), BASE.model_copy(update={"mla_stream_efficiency": 0.9}))
    without = evaluate(p, layout(p, tp=8, batch=8), BASE.model_copy(update={"mla_stream_efficiency": None}))
    assert with_mla.stages[0].prefill_ops_us == without.stages[0].prefill_ops_us


def test_the_mla_stream_is_flashmla_on_h100_memory_and_scales_with_each_gpu_kv_stream():
    # FlashMLA's 3,000 GB/s of H800's 3.35 TB/s on the reference GPU (the same HBM3); half its KV stream
    # elsewhere gives half of that; never above HBM peak.
    terms = OpTerms(kv_stream_efficiency={"H100-SXM": 0.75, "H200-SXM": 0.375, "B200-SXM": 1.0},
                    attention_fixed_us={"H100-SXM": 16.0, "H200-SXM": 16.0, "B200-SXM": 16.0},
                    low_precision_stream_ratio={"H100-SXM": 0.6, "H200-SXM": 0.6, "B200-SXM": 0.6},
                    moe=MoeTerms(fixed_us=0.0, per_assignment=0.0, at_bandwidth=False, points=0))
    assert FLASHMLA_H800_SHARE == pytest.approx(0.8955, abs=1e-4)
    assert mla_stream_efficiency(terms, "H100-SXM") == pytest.approx(0.8955, abs=1e-4)
    assert mla_stream_efficiency(terms, "H200-SXM") == pytest.approx(0.8955 / 2, abs=1e-4)
    assert mla_stream_efficiency(terms, "B200-SXM") == 1.0
