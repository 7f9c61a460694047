"""A dense model priced with an engine profile whose weight stream is far below its GPU's table-fitted one is told
so (the plan's ``notes``): h200-sxm-vllm's 0.475 of HBM peak against h200-sxm's 0.773 prices Llama-3.1-70B's decode
on 8 x H200 slower than on 8 x H100 (0.90 of a slower HBM), which no measurement says."""

from __future__ import annotations

from shardplan.hardware.profile import get_profile
from shardplan.rules.problem import STREAM_SHARE_NOTED, _slow_stream_notes, profile_notes
from tests.factory import problem


def test_the_stored_profiles_that_get_the_note_are_those_below_the_share() -> None:
    vllm, table = get_profile("h200-sxm-vllm"), get_profile("h200-sxm")
    assert vllm.hbm_efficiency < STREAM_SHARE_NOTED * table.hbm_efficiency  # 0.475 < 0.75 x 0.773 = 0.580
    [note] = _slow_stream_notes(vllm)
    assert "0.475" in note and "0.773 of h200-sxm" in note
    for name in ("h200-sxm-trtllm", "h200-sxm-sglang", "h100-sxm-vllm", "b200-sxm-vllm", "h200-sxm"):
        assert _slow_stream_notes(get_profile(name)) == [], name


def test_a_profile_just_above_the_share_gets_none() -> None:
    table = get_profile("h200-sxm")
    at = get_profile("h200-sxm-vllm").model_copy(update={"hbm_efficiency": STREAM_SHARE_NOTED * table.hbm_efficiency})
    assert _slow_stream_notes(at) == []
    below = at.model_copy(update={"hbm_efficiency": 0.99 * at.hbm_efficiency})
    assert len(_slow_stream_notes(below)) == 1


def test_dense_models_get_the_note_and_moe_models_do_not() -> None:
    assert len(profile_notes(problem("llama-3.1-70b", "8xH200", engine="vllm"))) == 1
    assert profile_notes(problem("qwen3-235b-a22b", "8xH200", engine="vllm")) == []  # its runs set the stream
    assert profile_notes(problem("llama-3.1-70b", "8xH200", engine="trtllm")) == []
    assert profile_notes(problem("llama-3.1-70b", "8xH100", engine="vllm")) == []
