"""Composed profiles: an engine's behaviour on a GPU it has no profile of, and which profile prices a plan."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import shardplan.hardware.profile as store
from shardplan.hardware.compose import BEHAVIOUR_FIELDS, STEP_FIELDS, compose, fitted_engine_profiles
from shardplan.hardware.profile import (
    ENGINES,
    Profile,
    composed_profiles,
    get_profile,
    list_profiles,
    profile_for_gpu,
)
from shardplan.models import SpecError
from shardplan.solver.cost.calibration.engine_fit import ENGINE_FIELDS, ENGINE_LIMITS
from shardplan.solver.cost.calibration.ttft_fit import TTFT_FIELDS

# Fields a composition on another engine's profile keeps from that base: everything but the engine's own and the
# record of what the profile is.
RECORD = {"name", "engine", "software", "source", "default", "engine_default", "fit_rows", "fit_median_abs_error"}


def test_the_behaviour_fields_are_the_engine_limits_and_the_ttft_fields_and_the_step_fields_the_engine_fit():
    limits = {field for fields in ENGINE_LIMITS.values() for field in fields}
    assert set(BEHAVIOUR_FIELDS) == limits | set(TTFT_FIELDS)
    assert set(STEP_FIELDS) == set(ENGINE_FIELDS)


@pytest.mark.parametrize("engine", ENGINES)
def test_each_behaviour_field_is_one_value_across_the_engines_fitted_profiles(engine):
    # The evidence that they describe the engine, not the GPU: every fitted profile of the engine agrees.
    fitted = fitted_engine_profiles(engine, list_profiles())
    assert len(fitted) >= 2
    for field in BEHAVIOUR_FIELDS:
        assert len({getattr(p, field) for p in fitted}) == 1, field


def test_sglang_on_h100_is_the_trtllm_profiles_hardware_with_sglangs_behaviour_and_step_fields():
    composed = profile_for_gpu("H100-SXM", "sglang")
    base, h200, b200 = get_profile("h100-sxm-trtllm"), get_profile("h200-sxm-sglang"), get_profile("b200-sxm-sglang")
    assert composed.name == "h100-sxm+sglang" and composed.engine == "sglang" and composed.gpu == "H100-SXM"
    assert not composed.default and not composed.engine_default and composed.fit_rows is None
    for field in BEHAVIOUR_FIELDS:  # common to both SGLang profiles
        assert getattr(composed, field) == getattr(h200, field) == getattr(b200, field), field
    # Hand-checked against the stored files: SGLang's fixed cost per request and its prefill-first scheduler.
    assert composed.request_overhead_ms == 176.0 and composed.prefill_mixes_with_decode is False
    # Where the two SGLang profiles differ, the median of two: their mean (47.15 and 44.63 us per layer).
    assert composed.layer_overhead_us == pytest.approx((h200.layer_overhead_us + b200.layer_overhead_us) / 2)
    assert composed.layer_overhead_us == pytest.approx(45.89)
    assert composed.hbm_efficiency == h200.hbm_efficiency == b200.hbm_efficiency
    for field in set(Profile.model_fields) - RECORD - set(BEHAVIOUR_FIELDS) - set(STEP_FIELDS):
        assert getattr(composed, field) == getattr(base, field), field
    assert composed.kv_stream_efficiency == 0.7521  # H100's own operator term, not H200's 0.5972
    assert "h100-sxm-trtllm" in composed.source and "h200-sxm-sglang" in composed.source


def test_a_gpu_without_any_engine_profile_takes_its_table_profile_with_the_engines_behaviour_only():
    composed = profile_for_gpu("A100-SXM-80GB", "vllm")
    table, vllm = get_profile("a100-sxm-80gb"), get_profile("h100-sxm-vllm")
    assert composed.name == "a100-sxm-80gb+vllm"
    assert (composed.max_batch, composed.usable_memory_fraction, composed.request_overhead_ms) == (1024, 0.9, 81.0)
    for field in BEHAVIOUR_FIELDS:
        assert getattr(composed, field) == getattr(vllm, field), field
    for field in set(Profile.model_fields) - RECORD - set(BEHAVIOUR_FIELDS):
        assert getattr(composed, field) == getattr(table, field), field


@pytest.mark.parametrize("engine", ENGINES)
def test_a_gpu_without_any_stored_profile_takes_the_generic_profile_with_the_engines_behaviour_only(engine):
    composed = profile_for_gpu("H20", engine)  # a preset GPU nobody measured
    generic, fitted = get_profile("generic"), fitted_engine_profiles(engine, list_profiles())[0]
    assert composed.name == f"generic+{engine}" and composed.engine == engine and composed.gpu == "*"
    assert "GPUs without measurements" in composed.software and "generic" in composed.source
    for field in BEHAVIOUR_FIELDS:
        assert getattr(composed, field) == getattr(fitted, field), field
    for field in set(Profile.model_fields) - RECORD - set(BEHAVIOUR_FIELDS):
        assert getattr(composed, field) == getattr(generic, field), field
    assert get_profile(f"generic+{engine}") == composed
    assert [p.name for p in composed_profiles()][-len(ENGINES):] == [f"generic+{e}" for e in ENGINES]


def _fake(name: str, gpu: str, engine: str, **fields: object) -> Profile:
    """A stored-looking profile: the generic one's numbers under another name (only what a test sets differs)."""
    return get_profile("generic").model_copy(update={"name": name, "gpu": gpu, "engine": engine, **fields})


def test_differing_values_give_their_median_a_whole_number_or_flag_stays_one_the_engine_can_take():
    sources = [_fake(f"g{i}-vllm", f"G{i}", "vllm", default=False, engine_default=True, fit_rows=10,
                     request_overhead_ms=ms, max_batch=batch, reserves_whole_sequence=flag)
               for i, (ms, batch, flag) in enumerate([(10.0, 256, True), (30.0, 1024, False), (20.0, 512, False)])]
    table = _fake("x", "X", "trtllm", default=True, engine_default=False, fit_rows=5)
    composed = compose("X", "vllm", [table, *sources])
    assert composed is not None and composed.name == "x+vllm"
    assert (composed.request_overhead_ms, composed.max_batch, composed.reserves_whole_sequence) == (20.0, 512, False)
    two = compose("X", "vllm", [table, *sources[:2]])
    assert two is not None and (two.request_overhead_ms, two.max_batch) == (20.0, 256)  # float mean, int lower


def test_composition_is_the_same_whatever_order_the_profiles_come_in():
    profiles = list_profiles()
    assert compose("H100-SXM", "sglang", profiles) == compose("H100-SXM", "sglang", profiles[::-1])


def test_nothing_is_composed_where_the_engine_has_a_profile_or_no_fitted_one_anywhere_or_the_gpu_none():
    profiles = list_profiles()
    assert compose("H200-SXM", "sglang", profiles) is None  # its own profile
    assert compose("No-Such-GPU", "sglang", profiles) is None
    copies_only = [p for p in profiles if not (p.engine == "sglang" and p.fit_rows is not None)]
    assert compose("H100-SXM", "sglang", copies_only) is None  # GB200's copy was fitted on nothing


@pytest.fixture
def stored(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Profile]]:
    """A store of four profiles: one GPU with an engine profile, a default one, and the generic one."""
    profiles = {p.name: p for p in (
        _fake("gpu-a", "A", "trtllm", default=True, engine_default=False, fit_rows=5),
        _fake("gpu-a-vllm", "A", "vllm", default=False, engine_default=True, fit_rows=10, max_batch=1024),
        _fake("gpu-b", "B", "trtllm", default=True, engine_default=False, fit_rows=5),
        get_profile("generic"),
    )}
    monkeypatch.setattr(store, "_all_profiles", lambda: profiles)
    store._composed.cache_clear()
    yield profiles
    store._composed.cache_clear()


def test_the_engine_profile_comes_first_then_the_composed_then_the_gpus_default_then_the_generic(stored):
    assert profile_for_gpu("A", "vllm").name == "gpu-a-vllm"
    assert profile_for_gpu("B", "vllm").name == "gpu-b+vllm"  # gpu-a-vllm's behaviour on B's table profile
    assert profile_for_gpu("B", "vllm").max_batch == 1024
    assert profile_for_gpu("B", "sglang").name == "gpu-b"  # no fitted SGLang profile to compose from
    assert profile_for_gpu("C", "vllm").name == "generic+vllm"  # no stored profile: vLLM's behaviour on generic
    assert profile_for_gpu("C", "vllm").max_batch == 1024
    assert profile_for_gpu("C", "sglang").name == "generic"
    assert [p.name for p in composed_profiles()] == ["gpu-b+vllm", "generic+vllm"]


def test_a_composed_profile_is_found_by_name_and_an_unknown_one_is_a_spec_error():
    assert get_profile("h100-sxm+sglang") == profile_for_gpu("H100-SXM", "sglang")
    with pytest.raises(SpecError, match="h100-sxm\\+sglang"):  # the message lists the composed ones
        get_profile("h999+sglang")
