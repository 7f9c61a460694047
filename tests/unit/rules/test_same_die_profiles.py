"""A preset without profiles of its own is priced with those of a GPU of the same die (``GPUSpec.profiles_from``),
applied to its own peaks and links, and the plan says so."""

from __future__ import annotations

import pytest

from shardplan.hardware import get_gpu
from shardplan.hardware.profile import ENGINES, profile_for_gpu
from shardplan.rules.layout import Layout
from shardplan.rules.problem import profile_notes, resolve_profile
from shardplan.solver.cost.evaluate import evaluate
from tests.factory import problem


@pytest.mark.parametrize("engine", ENGINES)
def test_h800_is_priced_with_h100s_profile_of_each_engine_and_the_plan_notes_it(engine):
    p = problem("llama-3.1-8b", "1xH800", engine=engine)
    assert resolve_profile(p) == profile_for_gpu("H100-SXM", engine)
    assert profile_notes(p) and "not on this cluster's H800-SXM" in profile_notes(p)[0]
    assert not profile_notes(problem("llama-3.1-8b", "1xH100", engine=engine))


def test_the_same_die_prices_one_gpu_alike_and_the_slower_nvlink_slows_tensor_parallel_prefill():
    # H800 is H100 SXM's die, HBM and clocks with NVLink at 200 GB/s per direction instead of 450: one GPU runs
    # alike, and TP 8's all-reduces of a 1,024-token prefill take longer.
    h100, h800 = get_gpu("H100-SXM"), get_gpu("H800-SXM")
    assert (h800.hbm_tb_per_s, h800.bf16_tflops, h800.hbm_gib) == (h100.hbm_tb_per_s, h100.bf16_tflops, h100.hbm_gib)
    assert h800.scaleup_gb_per_s < h100.scaleup_gb_per_s
    one = [evaluate(problem("llama-3.1-8b", f"1x{g}"), Layout.even(32)).metrics for g in ("H100", "H800")]
    assert one[0] == one[1]
    tp8 = [evaluate(problem("llama-3.1-70b", f"1x8x{g}"), Layout.even(80, tp=8)).metrics for g in ("H100", "H800")]
    assert tp8[1].ttft_ms > tp8[0].ttft_ms and tp8[1].tpot_ms >= tp8[0].tpot_ms
