"""Operator-level physics terms read off op_points-style rows: KV stream efficiency and MoE overheads."""

from __future__ import annotations

import pytest

from shardplan.hardware import get_gpu, parse_cluster
from shardplan.hardware.profile import get_profile
from shardplan.models import SpecError, get_model
from shardplan.solver.cost.calibration.op_terms import _expert_gemm_us, kv_stream_efficiencies, moe_terms
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


def test_kv_stream_is_bytes_over_time_over_peak_and_skips_launch_bound_points():
    rows = [attention_row("H100-SXM-80GB", 64, 4096, 70.0), attention_row("H100-SXM-80GB", 1, 4096, 16.5)]
    kv_bytes = 64 * 4096 * 1 * 128 * 2 * 2  # K and V, 2 bytes each
    expected = kv_bytes / 70e-6 / get_gpu("H100").hbm_bytes_per_s
    assert kv_stream_efficiencies(rows) == {"H100-SXM": pytest.approx(expected)}


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
