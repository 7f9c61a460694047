"""Operator-level physics terms read off op_points-style rows: KV stream efficiency and MoE overheads."""

from __future__ import annotations

import pytest

from shardplan.hardware import get_gpu
from shardplan.hardware.profile import get_profile
from shardplan.models import SpecError
from shardplan.solver.cost.calibration.op_terms import _expert_gemm_us, kv_stream_efficiencies, moe_terms


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
