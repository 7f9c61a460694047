"""Operator-level physics terms read off op_points-style rows: the attention kernel's fixed time and KV stream,
the FP8 weight-stream ratio, MoE overheads; and how the cost model prices each term."""

from __future__ import annotations

import pytest

from benchmarks.accuracy import OPS_CSV
from shardplan.hardware import get_gpu, parse_cluster
from shardplan.hardware.profile import get_profile
from shardplan.models import DType, SpecError, get_model
from shardplan.solver.cost.calibration.op_terms import (
    MoeTerms,
    OpTerms,
    _expert_gemm_us,
    fit_moe,
    kv_stream_terms,
    low_precision_stream_ratios,
    moe_held_out_errors,
    moe_points,
    moe_terms,
    moe_terms_per_gpu,
    read_op_points,
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


HOPPER = {"H100-SXM": "h100-sxm", "H200-SXM": "h200-sxm"}
HOPPER_ROWS = {"H100-SXM": "H100-SXM-80GB", "H200-SXM": "H200-SXM-141GB"}


def test_moe_terms_recover_the_fixed_and_per_assignment_costs_added_to_the_modelled_gemms():
    profile = get_profile("h100-sxm")
    fixed_us, per_ns = 20.0, 50.0
    rows = []
    for tokens in (1, 128, 4096):
        assignments = tokens * 8 / 8
        gemm = _expert_gemm_us("H100-SXM", tokens, 8, profile)
        rows.append(moe_row("H100-SXM-80GB", tokens, gemm + fixed_us + per_ns * 1e-3 * assignments))
    terms = moe_terms(rows, {"H100-SXM": profile}, at_bandwidth=False)
    assert terms.points == 3 and not terms.at_bandwidth
    assert terms.fixed_us == pytest.approx(fixed_us, rel=1e-6)
    assert terms.per_assignment == pytest.approx(per_ns, rel=1e-6)
    assert terms.routed_token_ns("B200-SXM") == terms.routed_token_ns("H100-SXM")  # one figure on every GPU


def test_moe_terms_at_bandwidth_recover_the_bytes_per_assignment_each_gpu_moves_at_its_own_peak():
    # Points made as gemm + 20 us + assignments x 7,168 x 25 bytes / HBM peak on H100 and H200: one fit of both
    # GPUs returns the 20 us and the 25 bytes.
    fixed_us, bytes_per_element = 20.0, 25.0
    profiles = {gpu: get_profile(name) for gpu, name in HOPPER.items()}
    rows = []
    for gpu, profile in profiles.items():
        for tokens in (1, 128, 4096):
            assignments = tokens * 8 / 8
            routed_us = assignments * 7168 * bytes_per_element / get_gpu(gpu).hbm_bytes_per_s * 1e6
            gemm = _expert_gemm_us(gpu, tokens, 8, profile)
            rows.append(moe_row(HOPPER_ROWS[gpu], tokens, gemm + fixed_us + routed_us))
    terms = moe_terms(rows, profiles, at_bandwidth=True)
    assert terms.points == 6 and terms.at_bandwidth
    assert terms.fixed_us == pytest.approx(fixed_us, rel=1e-6)
    assert terms.per_assignment == pytest.approx(bytes_per_element, rel=1e-6)
    # Each GPU alone, as a fixed time per assignment: 25 x 7,168 bytes at 3.35 and 4.8 TB/s.
    per_gpu = moe_terms_per_gpu(rows, profiles)
    assert per_gpu["H100-SXM"][1] == pytest.approx(25 * 7168 / 3.35e12 * 1e9, rel=1e-6)  # 53.5 ns
    assert per_gpu["H200-SXM"][1] == pytest.approx(25 * 7168 / 4.8e12 * 1e9, rel=1e-6)  # 37.3 ns
    assert per_gpu["H100-SXM"][0] == pytest.approx(fixed_us, rel=1e-6)


def test_at_bandwidth_a_gpu_without_points_takes_the_same_bytes_at_its_own_peak():
    moe = MoeTerms(fixed_us=28.0, per_assignment=20.0, at_bandwidth=True, points=6)
    assert moe.routed_token_ns("H100-SXM") == pytest.approx(20 * 7168 / 3.35e12 * 1e9)  # 42.8 ns
    # B200 and GB200: 8 TB/s (datasheets, gpus.json), so H100's figure x 3.35 / 8.
    assert moe.routed_token_ns("B200-SXM") == pytest.approx(moe.routed_token_ns("H100-SXM") * 3.35 / 8)
    assert moe.routed_token_ns("GB200-NVL72") == moe.routed_token_ns("B200-SXM")
    fields, measured = OpTerms({"H100-SXM": 0.7}, {"H100-SXM": 16.0}, {"H100-SXM": 0.6}, moe).for_gpu("B200-SXM")
    assert not measured and fields["moe_fixed_us"] == 28.0
    assert fields["moe_routed_token_ns"] == round(20 * 7168 / 8e12 * 1e9, 2)  # 17.92 ns


def hopper_profiles():
    return {gpu: get_profile(name) for gpu, name in HOPPER.items()}


def test_the_measured_moe_points_per_gpu_say_the_fixed_part_is_a_launch_cost_and_the_rest_is_not_a_fixed_time():
    # op_points.csv, three balanced DeepSeek-V3 points per GPU. Same die, HBM 3.35 vs 4.8 TB/s: the fixed
    # part comes out within 10 % on both GPUs, the per-assignment part at most the bandwidth ratio (0.70) of
    # H100's on H200, not the 1.0 a fixed time on every GPU would give.
    per_gpu = moe_terms_per_gpu(read_op_points(OPS_CSV), hopper_profiles())
    (h100_fixed, h100_ns), (h200_fixed, h200_ns) = per_gpu["H100-SXM"], per_gpu["H200-SXM"]
    assert h200_fixed / h100_fixed == pytest.approx(1.0, abs=0.1)
    assert 0 < h200_ns / h100_ns <= 3.35 / 4.8


def test_bytes_at_bandwidth_reproduce_the_measured_points_and_carry_from_one_hopper_to_the_other_better():
    rows = read_op_points(OPS_CSV)
    points = moe_points(rows, hopper_profiles())
    terms = moe_terms(rows, hopper_profiles(), at_bandwidth=True)
    # In sample: each of the six points within 15 % (the 128-token points, weight-read bound, are the worst).
    for p in points:
        predicted = p.gemm_us + terms.fixed_us + terms.routed_token_ns(p.gpu) * 1e-3 * p.assignments
        assert abs(predicted / p.measured_us - 1) < 0.15
    as_bytes, as_time = moe_held_out_errors(points, True), moe_held_out_errors(points, False)
    # The held-out H200 by hand: fit H100's points alone, one figure, and price H200's 4,096-token point.
    fixed, per_us = fit_moe([p for p in points if p.gpu == "H100-SXM"], {"H100-SXM": 1.0})
    big = next(p for p in points if p.gpu == "H200-SXM" and p.assignments == 4096)
    assert dict(as_time["H200-SXM"])[4096] == pytest.approx((big.gemm_us + fixed + per_us * 4096) / big.measured_us - 1)
    # Fitted on the other GPU alone, each GPU's 4,096-token point, where the per-assignment part is largest,
    # comes out closer as bytes at its own bandwidth than as the other GPU's time per assignment.
    for gpu in HOPPER:
        assert abs(dict(as_bytes[gpu])[4096]) < abs(dict(as_time[gpu])[4096])


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
