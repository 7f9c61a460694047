"""Every default profile (each GPU's, each engine's, generic): no fitted field outside its physical range or
at an end of it (issue 13, acceptance 2). The fields the stored fits leave at a bound are listed with the term
each is missing (benchmarks/accuracy/README.md): the set must match exactly, so a new bound fails and so does a
listed one leaving its bound unnoticed."""

from __future__ import annotations

import pytest

from benchmarks.accuracy import OPS_CSV
from shardplan.hardware.profile import Profile, get_profile, list_profiles
from shardplan.solver.cost.calibration.fit import BOUNDS, FITTED, OpFactors, field_bounds, fp4_share_fields, op_factors
from shardplan.solver.cost.calibration.ranges import default_profiles, fitted_fields, generation
from tests.unit.solver.cost.calibration.known_misses import KNOWN_MISSES

pytest.importorskip("scipy")  # the operator factors that narrow the ranges are a least-squares fit

DEFAULTS = default_profiles(list_profiles())


@pytest.fixture(scope="module")
def ops() -> OpFactors:
    return op_factors(OPS_CSV)


def test_the_defaults_are_every_gpu_and_engine_profile_and_generic():
    names = {p.name for p in DEFAULTS}
    assert "generic" in names and {"h100-sxm", "h200-sxm", "b200-sxm", "h100-sxm-vllm", "h200-sxm-trtllm"} <= names
    assert not names & {"h100-sxm-trtllm-0.14", "h100-sxm-splitwise", "h200-sxm-trtllm-0.9"}  # replay profiles


@pytest.mark.parametrize("profile", DEFAULTS, ids=lambda p: p.name)
def test_no_fitted_field_at_a_bound_or_outside_its_range(profile: Profile, ops: OpFactors):
    fields = fitted_fields(profile, ops)
    assert len(fields) >= 6  # every default profile was fitted: the check reads something
    bad = {(profile.name, f.field) for f in fields if not f.ok}
    assert all(f.inside for f in fields), [(f.field, f.value) for f in fields if not f.inside]
    assert bad == {key for key in KNOWN_MISSES if key[0] == profile.name}, bad


def test_a_field_at_an_end_or_outside_fails(ops: OpFactors):
    h100 = get_profile("h100-sxm")
    lo, hi = field_bounds("hbm_efficiency", ops, "H100-SXM")
    for value, ok in ((hi, False), (lo, False), (hi + 0.01, False), ((lo + hi) / 2, True)):
        field = next(f for f in fitted_fields(h100.model_copy(update={"hbm_efficiency": value}), ops)
                     if f.field == "hbm_efficiency")
        assert field.ok is ok, value


def test_ranges_are_narrowed_by_the_measured_kernels_and_the_fabric(ops: OpFactors):
    # op_points.csv: the bare M = 1 weight stream reaches ~0.8 of HBM peak and bounds hbm_efficiency on H100/H200
    assert 0.75 < field_bounds("hbm_efficiency", ops, "H100-SXM")[1] < 0.85
    assert field_bounds("hbm_efficiency", ops, "L40S")[1] == BOUNDS["hbm_efficiency"][1]
    # a PCIe card's ring cannot beat its link; an in-switch reduction sends each byte once: 2 x 7 / 8 at n = 8
    assert field_bounds("scaleup_bw_efficiency", ops, "RTX-PRO-6000-Server")[1] == 1.0
    assert field_bounds("scaleup_bw_efficiency", ops, "B200-SXM")[1] == pytest.approx(1.75)


def test_engine_profiles_are_checked_on_their_own_fields_too(ops: OpFactors):
    engine = next(p for p in DEFAULTS if p.engine_default)
    names = {f.field for f in fitted_fields(engine, ops)}
    assert {"hbm_efficiency", "layer_overhead_us", "ttft_queue_share", "request_overhead_ms"} <= names
    # the hardware fields it inherits; a GPU whose table rows are all FP4 (B200) fits the FP4 share in place of the
    # GEMM efficiency, which is then the Hopper-measured curve, not a fit
    hardware = set(fp4_share_fields(FITTED)) if engine.fp4_gemm_ratio is not None else set(FITTED)
    assert hardware <= names and (engine.fp4_gemm_ratio is None or "gemm_efficiency" not in names)
    assert generation(get_profile("a100-pcie-80gb-trtllm-0.14")) == "trtllm-0.14"
    assert generation(get_profile("generic")) == "trtllm"
