"""The FP4 GEMM share (``Profile.fp4_gemm_ratio``): FP4 GEMMs priced at gemm_efficiency x that share of the FP4
peak when a profile carries it, FP8 ones still at low_precision_gemm_ratio; hand-computed against the B200 preset
(dense BF16 2,250, FP8 4,500, FP4 9,000 TFLOPS; 8 TB/s HBM). And the fit: a GPU whose rows are all FP4 takes the
Hopper-measured curve and fits the share, which stays a physical share of peak."""

from __future__ import annotations

import pytest

from shardplan.hardware import parse_cluster
from shardplan.hardware.profile import get_profile
from shardplan.models import get_model
from shardplan.solver.cost.calibration.fit import (
    BOUNDS,
    FITTED,
    all_fp4,
    fp4_share_fields,
    hopper_gemm_terms,
    op_factors,
)
from shardplan.solver.cost.calibration.points import load_points
from shardplan.solver.cost.operators import CostContext
from shardplan.solver.cost.stage import shape_of

OPS_CSV = "benchmarks/accuracy/data/op_points.csv"
PARAMS, TOKENS = 8192 * 8192, 4096  # compute-bound: 2 x 67M x 4,096 FLOPs against 67 MB of weights


def b200_context(update: dict[str, object]) -> CostContext:
    model = get_model("llama-3.1-70b")
    profile = get_profile("b200-sxm").model_copy(update={
        "gemm_efficiency": 0.8, "gemm_half_tokens": 0.0, "low_precision_gemm_ratio": 0.75, **update,
    })
    return CostContext(model, parse_cluster("8xB200"), profile, shape_of(model, 8, 8, 1, 1, 1))


def test_fp4_gemms_take_their_own_share_when_the_profile_has_one():
    ctx = b200_context({"fp4_gemm_ratio": 0.5})
    # 2 x 8192^2 x 4096 FLOPs / (9,000e12 x 0.8 x 0.5) = 76.35 us
    assert ctx.gemm_s(PARAMS, TOKENS, PARAMS * 0.5, "fp4") == pytest.approx(2 * PARAMS * TOKENS / (9000e12 * 0.4))
    # FP8 keeps the FP8 share: / (4,500e12 x 0.8 x 0.75)
    assert ctx.gemm_s(PARAMS, TOKENS, PARAMS, "fp8") == pytest.approx(2 * PARAMS * TOKENS / (4500e12 * 0.6))
    # 16-bit: neither share
    assert ctx.gemm_s(PARAMS, TOKENS, PARAMS * 2, "bf16") == pytest.approx(2 * PARAMS * TOKENS / (2250e12 * 0.8))


def test_without_the_share_fp4_is_priced_at_the_fp8_one_as_before():
    ctx = b200_context({"fp4_gemm_ratio": None})
    assert ctx.gemm_s(PARAMS, TOKENS, PARAMS * 0.5, "fp4") == pytest.approx(2 * PARAMS * TOKENS / (9000e12 * 0.6))


def test_a_gpu_without_fp4_tensor_cores_ignores_the_share():
    model = get_model("llama-3.1-70b")
    profile = get_profile("h100-sxm").model_copy(update={"fp4_gemm_ratio": 0.1})
    ctx = CostContext(model, parse_cluster("8xH100"), profile, shape_of(model, 8, 8, 1, 1, 1))
    plain = CostContext(model, parse_cluster("8xH100"), get_profile("h100-sxm"), shape_of(model, 8, 8, 1, 1, 1))
    assert ctx.gemm_s(PARAMS, TOKENS, PARAMS * 0.5, "fp4") == plain.gemm_s(PARAMS, TOKENS, PARAMS * 0.5, "fp4")


@pytest.mark.parametrize("name", ["b200-sxm", "gb200-nvl72"])
def test_the_stored_blackwell_profiles_fit_a_physical_fp4_share_on_the_hopper_curve(name: str):
    pytest.importorskip("scipy")  # the operator curves are a least-squares fit
    profile = get_profile(name)
    assert profile.fp4_gemm_ratio is not None
    lo, hi = BOUNDS["fp4_gemm_ratio"]
    assert 0 < lo <= profile.fp4_gemm_ratio <= hi <= 1
    assert profile.gemm_efficiency * profile.fp4_gemm_ratio <= 1  # a share of the FP4 peak
    curve = hopper_gemm_terms(op_factors(OPS_CSV))
    assert {f: getattr(profile, f) for f in curve} == curve  # the 16-bit/FP8 curve is the measured one
    assert "fp4_gemm_ratio" in profile.source and "an assumption" in profile.source


def test_the_hopper_curve_is_the_mean_of_the_two_measured_gpus():
    pytest.importorskip("scipy")
    ops = op_factors(OPS_CSV)
    h100, h200 = ops.gemm_by_gpu["H100-SXM"], ops.gemm_by_gpu["H200-SXM"]
    curve = hopper_gemm_terms(ops)
    assert curve["gemm_efficiency"] == pytest.approx((h100.efficiency + h200.efficiency) / 2, rel=1e-3)
    assert curve["low_precision_gemm_ratio"] == pytest.approx(
        (h100.low_precision_ratio + h200.low_precision_ratio) / 2, rel=1e-3)


def test_only_a_gpu_whose_rows_are_all_fp4_fits_the_share():
    points, _ = load_points("benchmarks/accuracy/data/perf_points.csv")
    by_gpu = {gpu: [p for p in points if p.gpu == gpu and p.software == "trtllm"] for gpu in ("B200-SXM", "H100-SXM")}
    assert all_fp4(by_gpu["B200-SXM"]) and not all_fp4(by_gpu["H100-SXM"]) and not all_fp4([])
    fields = fp4_share_fields(FITTED)
    assert "gemm_efficiency" not in fields and fields.index("fp4_gemm_ratio") == FITTED.index("gemm_efficiency")
