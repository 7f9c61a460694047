"""Each GPU's GEMM curve read off its own GEMM points (fit.gemm_curves) and laid on the engine profiles
(fit.gemm_terms): synthetic points made from a known curve give it back."""

from __future__ import annotations

import pytest

from shardplan.hardware import get_gpu
from shardplan.solver.cost.calibration.fit import GemmCurve, OpFactors, gemm_curves, gemm_terms


def gemm_rows(gpu: str, curve: GemmCurve) -> list[dict[str, str]]:
    """GEMMs of an N = K = 8,192 weight timed as ``curve`` says, at M = 1,024 / 4,096 / 8,192 (and a weight-bound
    M = 128 the fit must ignore)."""
    spec, n = get_gpu(gpu), 8192
    rows = []
    for dtype, ratio, cls in (("bfloat16", 1.0, "bf16"), ("fp8", curve.low_precision_ratio, "fp8")):
        for m in (128, 1024, 4096, 8192):
            eff = curve.efficiency * ratio * m / (m + curve.half_tokens)
            seconds = 2.0 * m * n * n / (spec.flops_per_s(cls) * eff) * (3.0 if m == 128 else 1.0)
            rows.append({"gpu": gpu, "op": "gemm", "dtype": dtype, "shape_params": f"M={m} N={n} K={n}",
                         "latency_us": repr(seconds * 1e6)})
    return rows


def test_each_gpu_gets_back_the_curve_its_own_points_were_made_from():
    pytest.importorskip("scipy")
    truth = {"H100-SXM": GemmCurve(0.80, 100.0, 0.79), "H200-SXM": GemmCurve(0.815, 20.0, 0.78)}
    fitted = gemm_curves([r for gpu, c in truth.items() for r in gemm_rows(gpu, c)])
    assert set(fitted) == set(truth)
    for gpu, curve in truth.items():
        assert fitted[gpu].efficiency == pytest.approx(curve.efficiency, rel=1e-4)
        assert fitted[gpu].half_tokens == pytest.approx(curve.half_tokens, rel=1e-3)
        assert fitted[gpu].low_precision_ratio == pytest.approx(curve.low_precision_ratio, rel=1e-4)


def test_the_terms_are_the_measured_curve_and_nothing_where_nothing_was_measured():
    measured = {"H200-SXM": GemmCurve(0.81492, 0.4354, 0.77898)}
    ops = OpFactors(0.8, 50.0, 0.78, 0.8, 0.6, 0.6, "test", gemm_by_gpu=measured)
    assert gemm_terms(ops, "H200-SXM") == {
        "gemm_efficiency": 0.8149, "gemm_half_tokens": 0.4354, "low_precision_gemm_ratio": 0.779}
    assert gemm_terms(ops, "B200-SXM") == {}
