"""Operator-level physics terms read off op_points-style rows: the attention kernel's fixed time and KV stream,
the FP8 weight-stream ratio, MoE overheads; and how the cost model prices each term."""

from __future__ import annotations

import pytest

from shardplan.hardware import get_gpu, parse_cluster
from shardplan.hardware.profile import get_profile
from shardplan.models import DType, SpecError, get_model
from shardplan.solver.cost.calibration.op_terms import (
    _expert_gemm_us,
    kv_stream_terms,
    low_precision_stream_ratios,
    moe_terms,
)
from shardplan.solver.cost.operators import CostContext, LayerKind, Phase, Step
from shardplan.solver.cost.stage import shape_of


def attention_row(gpu: str, batch: int, kv_len: int, latency_us: float) -> dict[str, str]:
    return {"gpu": gpu, "op": "generation_attention", "dtype": "bfloat16 (kv bf16)", "latency_us": str(latency_us),
            "shape_params": f"batch={batch} kv_len={kv_len} (step={kv_len - 1}) q_heads=8 kv_heads=1 head_dim=128, "
                            "1 new token"}


def moe_row(gpu: str, tokens: int, latency_us: float) -> dict[str, str]:
    return {"gpu": gpu, "op": "moe (grouped expert FFN, 1 rank)", "dtype": "fp8_block", "latency_us": str(latency_us),
            "shape_params": f"tokens={tokens} hidden=7168 moe_inter=2048 experts=256 topk=8 moe_tp=1 moe_ep=8 "
                            "routing=balanced"}


def gemm_row(gpu: str, n: int, k: int, dtype: str, latency_us: float) -> dict[str, str]:
    return {"gpu": gpu, "op": "gemm", "dtype": dtype, "latency_us": str(latency_us), "shape_params": f"M=1 N={n} K={k}"}


def test_kv_stream_splits_a_fixed_time_per_kernel_from_a_stream_of_bytes():
    # Two kernels of one GPU: 16 us for 2 MB and 66 us for 134 MB; the line through them is the answer.
    small, large = 1 * 4096 * 1 * 128 * 2 * 2, 64 * 4096 * 1 * 128 * 2 * 2  # K and V, 2 bytes each
    rows = [attention_row("H100-SXM-80GB", 64, 4096, 66.0), attention_row("H100-SXM-80GB", 1, 4096, 16.0)]
    us_per_byte = (66.0 - 16.0) / (large - small)
    fixed_us, efficiency = kv_stream_terms(rows)["H100-SXM"]
    assert fixed_us == pytest.approx(16.0 - us_per_byte * small)
    assert efficiency == pytest.approx(1e6 / us_per_byte / get_gpu("H100").hbm_bytes_per_s)


def test_kv_stream_needs_two_sizes():
    rows = [attention_row("H100-SXM-80GB", 64, 4096, 66.0), attention_row("H100-SXM-80GB", 256, 1024, 65.0)]
    with pytest.raises(SpecError, match="one size"):
        kv_stream_terms(rows)


def test_the_fp8_stream_ratio_compares_bytes_per_second_of_the_same_shape():
    rows = [
        gemm_row("H200-SXM-141GB", 8192, 8192, "bfloat16", 36.0),
        gemm_row("H200-SXM-141GB", 8192, 8192, "fp8", 30.0),
        gemm_row("H200-SXM-141GB", 4096, 4096, "fp8", 9.0),  # no 16-bit partner: not used
    ]
    # 16-bit: 2 x N x K bytes in 36 us; FP8: N x K bytes in 30 us.
    assert low_precision_stream_ratios(rows) == {"H200-SXM": pytest.approx((1 / 30.0) / (2 / 36.0))}


def test_moe_terms_recover_the_fixed_and_per_assignment_costs_added_to_the_modelled_gemms():
    profile = get_profile("h100-sxm")
    fixed_us, per_ns = 20.0, 50.0
    rows = []
    for tokens in (1, 128, 4096):
        assignments = tokens * 8 / 8
        gemm = _expert_gemm_us("H100-SXM", tokens, 8, profile)
        rows.append(moe_row("H100-SXM-80GB", tokens, gemm + fixed_us + per_ns * 1e-3 * assignments))
    fitted_fixed, fitted_per, used = moe_terms(rows, {"H100-SXM": profile})
    assert used == 3
    assert fitted_fixed == pytest.approx(fixed_us, rel=1e-6)
    assert fitted_per == pytest.approx(per_ns, rel=1e-6)


def test_moe_terms_need_two_points():
    with pytest.raises(SpecError, match="fewer than two"):
        moe_terms([moe_row("H100-SXM-80GB", 1, 40.0)], {"H100-SXM": get_profile("h100-sxm")})


def test_the_moe_overhead_adds_a_fixed_part_and_a_part_per_assignment_to_the_expert_block():
    model, cluster = get_model("deepseek-v3"), parse_cluster("8xH200")
    shape = shape_of(model, 8, 1, 1, 8, 1)  # 8 attention groups of one GPU, experts over the 8
    step = Step(Phase.DECODE, 64, 1, 2048)
    moe = LayerKind(moe=True, windowed=False)
    bare = get_profile("h200-sxm").model_copy(update={"moe_fixed_us": 0.0, "moe_routed_token_ns": 0.0})
    loaded = bare.model_copy(update={"moe_fixed_us": 10.0, "moe_routed_token_ns": 100.0})
    before = CostContext(model, cluster, bare, shape).layer_ops_s(moe, step)
    after = CostContext(model, cluster, loaded, shape).layer_ops_s(moe, step)
    assignments = 64 * 8 / 8  # tokens x experts per token / ep
    assert after["moe.experts"] - before["moe.experts"] == pytest.approx(10e-6 + 100e-9 * assignments)
    assert {k: v for k, v in after.items() if k != "moe.experts"} == {
        k: v for k, v in before.items() if k != "moe.experts"
    }


def test_the_per_assignment_cost_scales_with_the_hidden_size_it_moves():
    # Qwen3-30B-A3B's rows are 2,048 wide, DeepSeek-V3's (where the term was measured) 7,168: 2/7 of the cost
    model, cluster = get_model("qwen3-30b-a3b"), parse_cluster("1xH200")
    shape = shape_of(model, 1, 1, 1, 1, 1)
    step = Step(Phase.DECODE, 16, 1, 2048)
    moe = LayerKind(moe=True, windowed=False)
    bare = get_profile("h200-sxm").model_copy(update={"moe_fixed_us": 0.0, "moe_routed_token_ns": 0.0})
    loaded = bare.model_copy(update={"moe_routed_token_ns": 70.0})
    before = CostContext(model, cluster, bare, shape).layer_ops_s(moe, step)["moe.experts"]
    after = CostContext(model, cluster, loaded, shape).layer_ops_s(moe, step)["moe.experts"]
    assert model.hidden_size == 2048
    assert after - before == pytest.approx(70e-9 * 16 * 8 * 2048 / 7168)  # 16 tokens x top-8 on one GPU


def dense_context(update: dict[str, object], weights: str = "bf16") -> CostContext:
    model = get_model("llama-3.1-70b")
    if weights != "bf16":
        model = model.with_dtypes(DType.parse(weights, "weights"), DType.BF16)
    profile = get_profile("h100-sxm").model_copy(update=update)
    return CostContext(model, parse_cluster("8xH100"), profile, shape_of(model, 8, 8, 1, 1, 1))


DENSE = LayerKind(moe=False, windowed=False)


def test_the_attention_fixed_time_adds_to_each_decode_layer_only_and_leaves_the_core_per_sequence():
    step = Step(Phase.DECODE, 16, 1, 2048)
    before = dense_context({}).layer_ops_s(DENSE, step)
    after = dense_context({"attention_fixed_us": 15.0}).layer_ops_s(DENSE, step)
    assert after["overhead"] - before["overhead"] == pytest.approx(15e-6)
    assert after["attn.core"] == before["attn.core"]  # the solver's KV slope takes the core per sequence
    prefill = Step(Phase.PREFILL, 1, 1024, 1024)
    assert dense_context({"attention_fixed_us": 15.0}).layer_ops_s(DENSE, prefill) == dense_context(
        {}).layer_ops_s(DENSE, prefill)


def test_full_width_work_is_the_same_on_every_tp_rank():
    # 8 passes over 4 x 2,048 tokens' 8,192-wide 16-bit vectors, at the weight stream: whatever tp is.
    tokens, hidden = 4 * 2048, 8192
    profile = get_profile("h100-sxm")
    expected_s = 8 * tokens * hidden * 2 / (get_gpu("H100").hbm_bytes_per_s * profile.hbm_efficiency)
    step = Step(Phase.PREFILL, 4, 2048, 2048)
    bare = dense_context({}).layer_ops_s(DENSE, step)["overhead"]
    assert dense_context({"full_width_passes": 8.0}).layer_ops_s(DENSE, step)["overhead"] - bare == pytest.approx(
        expected_s)
    model = get_model("llama-3.1-70b")
    for tp in (2, 4):
        ctx = CostContext(model, parse_cluster("8xH100"), profile.model_copy(update={"full_width_passes": 8.0}),
                          shape_of(model, tp, tp, 1, 1, 1))
        assert ctx.layer_ops_s(DENSE, step)["overhead"] - bare == pytest.approx(expected_s)


def test_the_low_precision_stream_ratio_slows_only_8_and_4_bit_weight_reads():
    step = Step(Phase.DECODE, 1, 1, 128)  # one token: every GEMM reads its weights
    for weights, slower in (("fp8", True), ("bf16", False)):
        before = dense_context({}, weights).layer_ops_s(DENSE, step)["ffn"]
        after = dense_context({"low_precision_stream_ratio": 0.5}, weights).layer_ops_s(DENSE, step)["ffn"]
        assert after == pytest.approx(2 * before if slower else before)
