"""TTFT under load: the prompt's own share of its chunk, the queue behind the other prompts in flight
(``ttft_queue_share``), the scheduler's iterations before the first token (``ttft_wait_steps``) and the
serving stack's fixed cost per request (``request_overhead_ms``), checked against values worked out by
hand; the fit of an engine's two free fields recovers them from runs they made."""

from __future__ import annotations

import math

import pytest

from shardplan.hardware.profile import get_profile
from shardplan.solver.cost.calibration.ttft_fit import (
    BURST_QUEUE_SHARE,
    TtftFields,
    TtftRun,
    fit_ttft,
    leave_one_band_out,
    leave_one_model_out,
    leave_one_source_out,
)
from shardplan.solver.cost.evaluate import NO_STACK, ServingStack, evaluate, under_load
from tests.unit.solver.cost.factory import layout, problem


def test_under_load_adds_the_queue_and_the_fixed_cost_worked_by_hand():
    # C = 9 requests, chunks of 4 prompts, 2 chunk steps per prompt, a share of 0.05 (50 per mille)
    # and 20 ns per request:
    #   own   = ceil(1000 / 4)                        = 250
    #   wait  = ceil((2 x 2 + 1) x 30 / 2)            = 75
    #   queue = ceil(0.05 x 8 others x 400 / 4)       = 40
    #   ttft  = 250 + 75 + 40 + 20                    = 385
    #   tpot  = 30 + ceil(8 x 400 / (100 x 4))        = 38
    #   e2e   = 385 + 99 x 38                         = 4,147
    load = under_load(1000, 30, 400, 9, 100, 4, 2, ServingStack(50, 20))
    assert (load.own_prefill_ns, load.wait_ns, load.queue_ns, load.overhead_ns) == (250, 75, 40, 20)
    assert (load.ttft_ns, load.tpot_ns, load.e2e_ns) == (385, 38, 4147)


def test_the_queue_rounds_up_and_vanishes_with_one_request():
    # ceil(0.333 x 2 x 7 / 3) = ceil(4.662 / 3) = 2 (exact integers: 333 x 14 = 4,662 over 3,000)
    assert under_load(30, 5, 7, 3, 10, 3, 1, ServingStack(333, 0)).queue_ns == 2
    one = under_load(100, 10, 40, 1, 5, 1, 1, ServingStack(500, 7))
    assert (one.queue_ns, one.wait_ns, one.ttft_ns) == (0, 0, 107)  # the bare prefill and the fixed cost


def test_evaluate_prices_the_profile_fields_exactly():
    p = problem("llama-3.1-70b", "8xH100", isl=1024, osl=256)
    lay = layout(p, tp=8, batch=32)
    bare = get_profile("h100-sxm").model_copy(update={"ttft_queue_share": 0.0, "request_overhead_ms": 0.0})
    loaded = bare.model_copy(update={"ttft_queue_share": 0.1, "request_overhead_ms": 150.0})
    a, b = evaluate(p, lay, bare), evaluate(p, lay, loaded)
    slowest_ns = max(round(s.prefill_ms * 1e6) + round(s.send_prefill_ms * 1e6) for s in a.stages)
    queue_ns = math.ceil(100 * 31 * slowest_ns / (1000 * a.prefill_chunk))  # 0.1 of the 31 others
    assert round((b.metrics.ttft_ms - a.metrics.ttft_ms) * 1e6) == queue_ns + 150_000_000
    assert b.metrics.tpot_ms == a.metrics.tpot_ms  # the steps are the same; only the wait for the first token grows
    assert b.metrics.e2e_ms - a.metrics.e2e_ms == pytest.approx(b.metrics.ttft_ms - a.metrics.ttft_ms, abs=1e-6)
    # Little's law on the loaded plan: C x OSL / e2e.
    assert b.metrics.output_tokens_per_s == pytest.approx(32 * 256 / (b.metrics.e2e_ms / 1e3), rel=1e-9)


def test_own_prefill_is_the_prompts_share_of_its_chunk():
    p = problem("llama-3.1-70b", "8xH100", isl=1024, osl=256)
    profile = get_profile("h100-sxm")
    pred = evaluate(p, layout(p, tp=8, batch=4), profile)
    assert pred.prefill_chunk == 4  # four prompts fit the 8,192-token budget together
    load = under_load(round(pred.prefill_ms * 1e6), round(pred.metrics.decode_step_ms * 1e6), 0, 4, 256, 4, 1, NO_STACK)
    assert load.own_prefill_ns == math.ceil(round(pred.prefill_ms * 1e6) / 4)


def test_the_wait_steps_price_decode_rounds_in_tenths_worked_by_hand():
    # The same plan as above with 2.3 wait steps (23 tenths) instead of half a step:
    #   wait  = ceil((10 x 2 + 23) x 30 / 10)         = 129      (half a step: ceil(45 x 30 / 10) = 135 / ... 75)
    #   ttft  = 250 + 129 + 40 + 20                   = 439
    # and where prefill does not mix: only the wait steps, ceil(23 x 30 / 10) = 69.
    load = under_load(1000, 30, 400, 9, 100, 4, 2, ServingStack(50, 20, wait_steps_tenths=23))
    assert (load.wait_ns, load.ttft_ns, load.tpot_ns) == (129, 439, 38)
    apart = under_load(1000, 30, 400, 9, 100, 4, 2, ServingStack(50, 20, mixes=False, wait_steps_tenths=23))
    assert apart.wait_ns == 69
    # The default, half a step, is the (2 steps + 1) / 2 rounds priced before the field existed.
    assert ServingStack(50, 20).wait_tenths(2) == 25 and ServingStack(50, 20, mixes=False).wait_tenths(2) == 5


def test_evaluate_prices_the_wait_steps_exactly():
    p = problem("llama-3.1-70b", "8xH100", isl=1024, osl=256)
    lay = layout(p, tp=8, batch=32)
    base = get_profile("h100-sxm")
    a, b = evaluate(p, lay, base), evaluate(p, lay, base.model_copy(update={"ttft_wait_steps": 3.7}))
    round_ns = round(a.metrics.decode_step_ms * 1e6)
    # one chunk step (1,024 tokens within the budget): 10 + 37 tenths against 10 + 5
    delta_ns = math.ceil(47 * round_ns / 10) - math.ceil(15 * round_ns / 10)
    assert round((b.metrics.ttft_ms - a.metrics.ttft_ms) * 1e6) == delta_ns
    assert b.metrics.tpot_ms == a.metrics.tpot_ms


def _runs(share: float, overhead_ms: float, wait_steps: float = 0.0, mixes: bool = True) -> list[TtftRun]:
    runs = []
    for i, model in enumerate(("a", "b", "c")):
        for c in (2, 4, 16, 64, 256):
            base, unit, round_ms = 40.0 + 30 * i, (c - 1) * (5.0 + 2 * i), 8.0 + 3 * i + c / 16
            measured = base + share * unit + wait_steps * round_ms + overhead_ms
            runs.append(TtftRun(base, unit, measured, model, c, mixes=mixes, round_ms=round_ms, source=f"s{c % 3}"))
    return runs


def test_the_fit_recovers_the_fields_that_made_the_runs():
    # Not mixing: the queue share and the fixed cost are free, the wait is half a step.
    runs = _runs(0.07, 120.0, 0.5, mixes=False)
    assert fit_ttft(runs) == TtftFields(0.07, 0.5, 120.0)
    # Every held-out model, source and band is priced exactly by fields fitted on the rest.
    assert max(abs(e) for e in leave_one_model_out(runs)) < 1e-9
    assert max(abs(e) for e in leave_one_source_out(runs)) < 1e-9
    assert all(max(abs(e) for e in errs) < 1e-9 for errs in leave_one_band_out(runs).values())


def test_the_fit_of_a_mixing_engine_recovers_its_wait_steps_with_the_burst_share():
    runs = _runs(BURST_QUEUE_SHARE, 65.0, 4.2)
    assert fit_ttft(runs) == TtftFields(BURST_QUEUE_SHARE, 4.2, 65.0)


def test_the_fit_stays_inside_the_physical_ranges():
    # Runs that would want a share above 0.5 (every prompt behind all the others and more) get 0.5.
    fields = fit_ttft(_runs(0.9, 0.0, 0.5, mixes=False))
    assert fields.share == 0.5 and 0 <= fields.overhead_ms <= 500
    # Runs that would want more than 16 steps of waiting get 16.
    assert fit_ttft(_runs(BURST_QUEUE_SHARE, 0.0, 30.0)).wait_steps == 16.0
