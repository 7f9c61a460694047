"""The leave-one-GPU-out check of composed profiles: its rule, and what each candidate is built from."""

from __future__ import annotations

from benchmarks.accuracy.compose import CANDIDATES, Cell, candidates, chosen, generic_pair, generic_taken
from shardplan.hardware.compose import BEHAVIOUR_FIELDS, STEP_FIELDS, fitted_engine_profiles
from shardplan.hardware.profile import get_profile, list_profiles


def _results(**columns: tuple[float, float]) -> dict[tuple[str, str], dict[str, Cell]]:
    """One held-out group whose every run has the given |TTFT| and |TPOT| error per column."""
    return {("vllm", "X"): {name: Cell([ttft] * 3, [tpot] * 3) for name, (ttft, tpot) in columns.items()}}


def test_the_least_sum_of_the_candidates_beating_the_fallback_on_both_is_taken():
    ok = dict(own=(0.1, 0.1), fallback=(0.5, 0.2))
    results = _results(**ok, table=(0.3, 0.19), **{"table+steps": (0.2, 0.3), "sibling": (0.25, 0.15),
                                                  "sibling+steps": (0.2, 0.15)})
    assert chosen(results) == ("sibling+steps", True)  # table+steps has the least TTFT but a worse TPOT


def test_no_candidate_is_taken_when_none_beats_the_fallback_on_both():
    results = _results(own=(0.1, 0.1), fallback=(0.2, 0.1), **{c: (0.1, 0.2) for c in CANDIDATES})
    assert chosen(results) == (None, False)


def test_a_held_out_gpus_candidates_take_nothing_from_its_own_engine_profile():
    rest = [p for p in list_profiles() if p.name != "h200-sxm-sglang"]
    sources = fitted_engine_profiles("sglang", rest, without_gpu="H200-SXM")
    assert [p.name for p in sources] == ["b200-sxm-sglang"]  # GB200's copy of it is fitted on nothing
    built = candidates("sglang", "H200-SXM", rest, sources)
    b200, table, sibling = sources[0], get_profile("h200-sxm"), get_profile("h200-sxm-trtllm")
    for field in (*BEHAVIOUR_FIELDS, *STEP_FIELDS):
        assert getattr(built["sibling+steps"], field) == getattr(b200, field), field
    assert built["sibling"].layer_overhead_us == sibling.layer_overhead_us
    assert built["table"].kv_stream_efficiency == table.kv_stream_efficiency is None
    assert built["sibling"].kv_stream_efficiency == sibling.kv_stream_efficiency


def test_the_engines_behaviour_on_the_generic_profile_is_taken_only_if_it_beats_it_on_both():
    assert generic_taken(_results(generic=(0.8, 0.2), **{"generic+behaviour": (0.3, 0.19)}))
    assert not generic_taken(_results(generic=(0.8, 0.2), **{"generic+behaviour": (0.3, 0.21)}))


def test_the_generic_pair_is_the_generic_profile_and_it_with_the_behaviour_fields_only():
    sources = fitted_engine_profiles("sglang", list_profiles(), without_gpu="H200-SXM")
    pair, generic = generic_pair("sglang", sources), get_profile("generic")
    assert pair["generic"] == generic
    for field in BEHAVIOUR_FIELDS:
        assert getattr(pair["generic+behaviour"], field) == getattr(sources[0], field), field
    for field in STEP_FIELDS:
        assert getattr(pair["generic+behaviour"], field) == getattr(generic, field), field
