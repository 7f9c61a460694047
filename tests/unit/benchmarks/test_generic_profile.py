"""``generic.json``, the profile of a GPU without measurements, takes each fitted field's median over the default
profiles that fitted it. A field only some GPUs fit (``fp4_gemm_ratio``, on Blackwell's FP4 rows) is None in the
others: the median over all of them raised a TypeError, and ``python -m benchmarks.accuracy --refit`` crashed
there after writing every other profile."""

from __future__ import annotations

import pytest

from benchmarks.accuracy import generic_profile
from shardplan.hardware.profile import get_profile
from shardplan.solver.cost.calibration.fit import FitResult


def _fitted(name: str, fields: tuple[str, ...], **values: float) -> FitResult:
    base = get_profile("generic")
    profile = base.model_copy(update={"name": name, "default": True, "fp4_gemm_ratio": None, **values})
    return FitResult(profile, rows=10, median_abs_error=0.05, fields=fields)


def test_each_field_is_the_median_of_the_profiles_that_fitted_it() -> None:
    results = [
        _fitted("a", ("hbm_efficiency", "gemm_efficiency"), hbm_efficiency=0.6, gemm_efficiency=0.70),
        _fitted("b", ("hbm_efficiency", "gemm_efficiency"), hbm_efficiency=0.8, gemm_efficiency=0.74),
        _fitted("c", ("hbm_efficiency", "fp4_gemm_ratio"), hbm_efficiency=0.9, fp4_gemm_ratio=0.42),
        _fitted("d", ("hbm_efficiency", "fp4_gemm_ratio"), hbm_efficiency=0.7, fp4_gemm_ratio=0.54),
    ]
    generic = generic_profile(results)
    assert generic.hbm_efficiency == pytest.approx(0.75)  # (0.7 + 0.8) / 2, all four fitted it
    assert generic.gemm_efficiency == pytest.approx(0.72)  # a and b only
    assert generic.fp4_gemm_ratio == pytest.approx(0.48)  # c and d only; a's and b's None left out
    assert generic.name == "generic" and generic.default
