"""The slot queue of an engine that reserves KV cache for a request's whole sequence
(``reserves_whole_sequence``, TensorRT-LLM's default GUARANTEED_NO_EVICT policy): above the largest batch
whose whole sequences fit memory, the other closed-loop users wait for a slot. Checked against Little's law
worked by hand, against the engines that do not reserve (unchanged), for monotonicity in load, and through
the TTFT fit's linear reading of it."""

from __future__ import annotations

import math

import pytest

from shardplan.hardware.profile import get_profile
from shardplan.solver.cost.calibration.engine_fit import EngineRun
from shardplan.solver.cost.calibration.ttft_fit import TtftFields, predicted_ms, ttft_run
from shardplan.solver.cost.evaluate import evaluate, fits, max_batch, slot_wait_ns, slots_held
from tests.unit.solver.cost.factory import layout, problem


def _case():
    """Llama-3.1-70B FP8 on one H200 at 1,024 / 8,192: far fewer whole sequences fit than 128 users."""
    p = problem("llama-3.1-70b", "1xH200", isl=1024, osl=8192, weights="fp8", kv="fp8")
    engine = get_profile("h200-sxm-trtllm")  # the policy set explicitly: this checks the pricing, not the file
    reserving = engine.model_copy(update={"reserves_whole_sequence": True})
    paging = engine.model_copy(update={"reserves_whole_sequence": False})
    return p, reserving, paging


def test_slot_wait_is_littles_law_worked_by_hand():
    # 10 users, 4 slots, each held 1,000 ns: the slots serve 4 per 1,000 ns, a user's cycle is 10 / 4 x 1,000
    # = 2,500 ns, of which 1,000 is its own service: it waits 1,500. Rounded up: 3 users, 2 slots of 7 ns: 3.5 -> 4.
    assert slot_wait_ns(10, 4, 1000) == 1500
    assert slot_wait_ns(3, 2, 7) == math.ceil(1 * 7 / 2) == 4
    assert slot_wait_ns(4, 4, 1000) == slot_wait_ns(2, 4, 1000) == 0


def test_a_reserving_engine_prices_the_held_batch_and_the_wait():
    p, reserving, _ = _case()
    users = layout(p, tp=1, batch=128)
    held = max_batch(p, users, reserving)
    assert 1 <= held < 128 and not fits(p, users, reserving)
    assert slots_held(p, users, reserving) == held
    queued = evaluate(p, users, reserving)
    served = evaluate(p, users.model_copy(update={"batch": held}), reserving)
    wait_ms = math.ceil((128 - held) * round(served.metrics.e2e_ms * 1e6) / held) / 1e6
    assert queued.metrics.tpot_ms == served.metrics.tpot_ms  # the steps run the held batch
    assert queued.metrics.ttft_ms == pytest.approx(served.metrics.ttft_ms + wait_ms, abs=1e-6)
    assert queued.metrics.e2e_ms == pytest.approx(served.metrics.e2e_ms + wait_ms, abs=1e-6)
    # Little's law: 128 users cycling through held slots produce what the held batch produces.
    assert queued.metrics.output_tokens_per_s == pytest.approx(served.metrics.output_tokens_per_s, rel=1e-6)
    assert queued.metrics.batch == 128
    assert not queued.fits  # the memory report stays the stated batch's: it does not hold every user


def test_an_engine_that_does_not_reserve_prices_the_stated_batch():
    p, reserving, paging = _case()
    users = layout(p, tp=1, batch=128)
    assert slots_held(p, users, paging) == 128
    stated = evaluate(p, users, paging)
    assert stated.metrics.tpot_ms != evaluate(p, users, reserving).metrics.tpot_ms
    # Below the limit both policies price the same.
    few = layout(p, tp=1, batch=8)
    assert fits(p, few, reserving)
    assert evaluate(p, few, reserving).metrics == evaluate(p, few, paging).metrics


def test_the_slot_queue_grows_with_load_and_starts_at_the_limit():
    p, reserving, _ = _case()
    held = max_batch(p, layout(p, tp=1, batch=1), reserving)
    ttfts = [evaluate(p, layout(p, tp=1, batch=c), reserving).metrics.ttft_ms for c in (held, held + 1, 2 * held)]
    assert ttfts[0] < ttfts[1] < ttfts[2]
    # At twice the slots every user waits one whole held-batch end-to-end (up to its rounding).
    served = evaluate(p, layout(p, tp=1, batch=held), reserving).metrics
    assert ttfts[2] == pytest.approx(served.ttft_ms + served.e2e_ms, abs=1e-6)


def test_the_ttft_fit_reads_the_slot_queue_linearly():
    p, reserving, _ = _case()
    users = layout(p, tp=1, batch=128)
    run = ttft_run(EngineRun(p, users, 30.0, 1000.0, p.model.name, "1.0", "test"), reserving)
    assert run.slot_factor == pytest.approx(128 / slots_held(p, users, reserving))
    fields = TtftFields(reserving.ttft_queue_share, reserving.ttft_wait_steps, reserving.request_overhead_ms)
    # The fields' terms enter C / held times; the fit's sum matches evaluate up to its integer ceilings.
    assert predicted_ms(run, fields) == pytest.approx(evaluate(p, users, reserving).metrics.ttft_ms, rel=1e-6)
