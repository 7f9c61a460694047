"""Engines whose prefill does not mix with decode (SGLang's default scheduler): a prompt pays its whole
prefill batch and no decode round rides on its steps. Worked by hand on ``under_load``, read from the
engine profiles, and through ``solve``: it equals the brute force, and with the layout pinned it equals
``evaluate``'s best batch (the encoding mirrors ``under_load`` exactly)."""

from __future__ import annotations

import math

import pytest

from benchmarks.solve_vs_bruteforce.matrix import run_scenario
from shardplan.hardware.profile import get_profile, list_profiles
from shardplan.solver.cli.inputs import ProblemArgs, build_problem
from shardplan.solver.cost.calibration.ttft_fit import TtftFields, TtftRun, fit_ttft
from shardplan.solver.cost.evaluate import ServingStack, evaluate, resolve_profile, under_load
from shardplan.solver.optimise import solve
from shardplan.solver.outputs.launch import emit_sglang
from tests.unit.solver.cost.factory import layout, problem


def test_a_prompt_pays_its_whole_batch_and_no_decode_rounds_worked_by_hand():
    # C = 9, chunks of 4 prompts, 2 chunk steps, share 0.2 (200 per mille), 20 ns per request:
    #   batch  = min(4, 1 + 0.2 x 8) = 2.6 prompts              (mixing: 1, its own share)
    #   own    = ceil(2.6 x 1000 / 4)                 = 650      (mixing: 250)
    #   wait   = ceil(30 / 2)                         = 15       (mixing: ceil(5 x 30 / 2) = 75)
    #   queue  = ceil(0.2 x 8 x 400 / 4)              = 160      (the same)
    #   ttft   = 650 + 15 + 160 + 20                  = 845
    #   tpot   = 30 + ceil(8 x 400 / (100 x 4))       = 38       (the same: the steps cost the same time)
    apart = under_load(1000, 30, 400, 9, 100, 4, 2, ServingStack(200, 20, mixes=False))
    mixed = under_load(1000, 30, 400, 9, 100, 4, 2, ServingStack(200, 20, mixes=True))
    assert (apart.own_prefill_ns, apart.wait_ns, apart.queue_ns, apart.ttft_ns) == (650, 15, 160, 845)
    assert (mixed.own_prefill_ns, mixed.wait_ns, mixed.queue_ns, mixed.ttft_ns) == (250, 75, 160, 505)
    assert apart.tpot_ns == mixed.tpot_ns == 38


def test_the_batch_is_at_most_the_chunk_and_one_request_is_the_bare_prefill():
    # 1 + 0.5 x 99 others = 50.5 prompts waiting, but a batch holds the chunk's 4: the whole chunk.
    assert under_load(1000, 30, 400, 100, 100, 4, 1, ServingStack(500, 0, mixes=False)).own_prefill_ns == 1000
    one = under_load(1000, 30, 400, 1, 100, 1, 1, ServingStack(500, 7, mixes=False))
    assert (one.own_prefill_ns, one.wait_ns, one.queue_ns, one.ttft_ns) == (1000, 0, 0, 1007)


def test_engine_profiles_say_which_scheduler_mixes():
    engine_profiles = [p for p in list_profiles() if p.engine_default]
    assert {p.engine for p in engine_profiles} == {"vllm", "sglang", "trtllm"}
    for p in engine_profiles:
        assert p.prefill_mixes_with_decode is (p.engine != "sglang"), p.name


def test_evaluate_prices_an_sglang_profile_as_batches_of_their_own():
    p = problem("llama-3.1-8b", "1xH200", isl=1024, osl=256)
    lay = layout(p, tp=1, batch=32)
    sglang = get_profile("h200-sxm-sglang")
    mixing = sglang.model_copy(update={"prefill_mixes_with_decode": True})
    a, b = evaluate(p, lay, sglang), evaluate(p, lay, mixing)
    prefill_ns = sum(round(s.prefill_ms * 1e6) + round(s.send_prefill_ms * 1e6) for s in a.stages)
    chunk, share_pm = a.prefill_chunk, round(sglang.ttft_queue_share * 1000)
    batch_pm = min(1000 * chunk, 1000 + share_pm * 31)
    own_apart, own_mixed = math.ceil(batch_pm * prefill_ns / (1000 * chunk)), math.ceil(prefill_ns / chunk)
    round_ns = round(a.metrics.decode_step_ms * 1e6)
    # one chunk step: w tenths apart, 10 + w mixing (w = the profile's wait steps, half a step for SGLang)
    w = round(sglang.ttft_wait_steps * 10)
    wait_apart, wait_mixed = math.ceil(w * round_ns / 10), math.ceil((10 + w) * round_ns / 10)
    assert round((a.metrics.ttft_ms - b.metrics.ttft_ms) * 1e6) == (own_apart + wait_apart) - (own_mixed + wait_mixed)
    assert a.metrics.tpot_ms == b.metrics.tpot_ms


def test_the_ttft_fit_recovers_the_fields_of_runs_priced_in_batches_of_their_own():
    # Runs made by the non-mixing formula: base + k x unit + own x (min(p, 1 + k (C - 1)) - 1) + overhead.
    share, overhead = 0.12, 200.0
    runs = []
    for i, model in enumerate(("a", "b", "c")):
        for c in (2, 4, 16, 64, 256):
            own, chunk = 20.0 + 10 * i, 8
            batch = min(chunk, 1 + share * (c - 1))
            base, unit = own + 5.0, (c - 1) * own
            measured = base + share * unit + own * (batch - 1) + overhead
            runs.append(TtftRun(base, unit, measured, model, c, own, chunk, mixes=False))
    assert fit_ttft(runs) == TtftFields(share, 0.5, overhead)
    assert runs[3].core_ms(share, 0.0) == pytest.approx(runs[3].measured_ms - overhead)


SGLANG_SCENARIOS = [
    dict(model="llama-3.1-8b", cluster="2xH200", objective="throughput", engine="sglang", max_batch=96),
    dict(model="llama-3.1-8b", cluster="4xH200", objective="throughput", engine="sglang", ttft_ms=400.0,
         isl=2048, max_batch=64),
    dict(model="mistral-7b", cluster="2xB200", objective="latency", engine="sglang", batch=24),
]


@pytest.mark.parametrize("scenario", SGLANG_SCENARIOS, ids=lambda s: f"{s['model']}-{s['cluster']}-{s['objective']}")
def test_solve_with_a_non_mixing_engine_equals_brute_force_and_pinned_equals_evaluate(scenario):
    result = run_scenario(scenario, cli=False)
    assert result.agree is True, f"solve {result.status} {result.value} vs brute force {result.brute}"
    assert result.status == result.pinned_status == "optimal"
    assert result.pinned_agree is True, (result.layout, result.pinned_batch, result.evaluate_batch)


@pytest.mark.parametrize("cluster, profile, mixes", [("2xH200", None, False), ("2xH100", None, False),
                                                     ("2xH100", "h100-sxm", True)])
def test_the_sglang_command_enables_mixed_chunks_exactly_when_the_plan_was_priced_with_them(cluster, profile, mixes):
    # H200 has an SGLang engine profile (no mixing, SGLang's default); H100 has none, so its plan is priced with the
    # composed h100-sxm+sglang, SGLang's behaviour too. A profile the user names that mixes (the H100's hardware
    # profile) prices mixed chunks: the command must then ask SGLang for them.
    problem = build_problem(ProblemArgs(model="llama-3.1-8b", cluster=cluster, objective="throughput",
                                        engine="sglang", max_batch=32, profile=profile))
    assert resolve_profile(problem).prefill_mixes_with_decode is mixes
    argv = emit_sglang(solve(problem)).launches[0].argv
    assert ("--enable-mixed-chunk" in argv) is mixes
    assert argv[argv.index("--chunked-prefill-size") + 1] == str(resolve_profile(problem).max_num_tokens)


# Engines whose prefill mixes with decode, priced with their fitted wait steps (not the half step of the
# default): a latency plan at a fixed batch and a throughput plan held by a TTFT limit.
MIXING_SCENARIOS = [
    dict(model="llama-3.1-8b", cluster="2xH200", objective="latency", engine="trtllm", batch=16),
    dict(model="llama-3.1-8b", cluster="4xH100", objective="throughput", engine="vllm", ttft_ms=150.0, isl=2048,
         max_batch=64),  # the TTFT limit binds: 149.5 ms, 28 sequences on 2 x TP2 (279 ms and 64 without it)
]


@pytest.mark.parametrize("scenario", MIXING_SCENARIOS, ids=lambda s: f"{s['engine']}-{s['cluster']}-{s['objective']}")
def test_solve_with_fitted_wait_steps_equals_brute_force_and_pinned_equals_evaluate(scenario):
    args = {k: v for k, v in scenario.items() if k in ProblemArgs.__dataclass_fields__}
    assert resolve_profile(build_problem(ProblemArgs(**args))).ttft_wait_steps != 0.5  # the field is exercised
    result = run_scenario(scenario, cli=False)
    assert result.agree is True, f"solve {result.status} {result.value} vs brute force {result.brute}"
    assert result.status == result.pinned_status == "optimal"
    assert result.pinned_agree is True, (result.layout, result.pinned_batch, result.evaluate_batch)
