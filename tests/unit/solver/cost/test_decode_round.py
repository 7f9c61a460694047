"""``decode_round_ns``, the decode round alone, against ``evaluate``'s whole prediction: the same integer on every
kind of layout (stages and their sends, microbatches, experts, load factors, an engine holding fewer sequences than
asked), each counted as a round priced, not an ``evaluate`` call; and a decode worker's lazy prediction, the same as
``evaluate``'s, read without counting either."""

from __future__ import annotations

import pytest

from shardplan.hardware.profile import get_profile
from shardplan.solver.cost.disagg import decode_step, role_problem
from shardplan.solver.cost.evaluate import (
    decode_round_ns,
    evaluate,
    evaluations,
    max_batch,
    prediction_of,
    round_pricings,
)
from tests.unit.solver.cost.factory import layout, problem

# (model, cluster, profile, layout degrees, batch): one pipeline stage and several, sends across nodes, experts,
# attention DP (experts over its ranks), a batch the pipeline splits unevenly.
CASES = [
    ("llama-3.1-8b", "8xH100", "h100-sxm", {"tp": 1}, 1),
    ("llama-3.1-70b", "8xH100", "h100-sxm-vllm", {"tp": 4, "pp": 2}, 37),
    ("llama-3.1-70b", "2x8xH100", "h100-sxm", {"tp": 8, "pp": 2}, 5),
    ("llama-3.1-70b", "8xH200", "h200-sxm-sglang", {"tp": 2, "pp": 4}, 3),
    ("mixtral-8x7b", "8xH100", "h100-sxm", {"tp": 2, "attn_dp": 2}, 64),
    ("qwen3-235b-a22b", "8xH200", "h200-sxm-sglang", {"attn_dp": 8}, 256),
]


@pytest.mark.parametrize(("alias", "cluster", "profile", "degrees", "batch"), CASES)
def test_the_round_alone_is_evaluates_round(alias: str, cluster: str, profile: str, degrees: dict, batch: int) -> None:
    p = problem(alias, cluster)
    lay = layout(p, batch=batch, **degrees)
    prof = get_profile(profile)
    before = evaluations(), round_pricings()
    round_ns = decode_round_ns(p, lay, prof)
    assert (evaluations(), round_pricings()) == (before[0], before[1] + 1)
    assert round_ns / 1e6 == evaluate(p, lay, prof).metrics.decode_step_ms


def test_an_uneven_expert_load_lengthens_the_round_as_evaluate_prices_it() -> None:
    # Qwen3-30B-A3B at a large decode batch, two stages: a layer of stage 1 at eight times the mean load lengthens
    # the round (at twice it the layer's weights, read whatever the load, still set its time).
    p = problem("qwen3-30b-a3b", "8xH100")
    flat = layout(p, pp=2, attn_dp=4, batch=2048)
    moe_layers = p.model.moe.layers if p.model.moe else ()
    hot = flat.model_copy(update={"moe_load_factor": tuple(8.0 if i == 30 else 1.0 for i in moe_layers)})
    prof = get_profile("h100-sxm")
    assert decode_round_ns(p, hot, prof) > decode_round_ns(p, flat, prof)
    assert decode_round_ns(p, hot, prof) / 1e6 == evaluate(p, hot, prof).metrics.decode_step_ms


def test_an_engine_that_reserves_whole_sequences_is_priced_at_the_batch_it_holds() -> None:
    # TensorRT-LLM's profile admits a request only with room for its whole sequence: asked far more than memory
    # holds, evaluate prices the held batch, and so does the round alone.
    p = problem("llama-3.1-70b", "8xH100", isl=4000, osl=1000)
    prof = get_profile("h100-sxm-trtllm")
    assert prof.reserves_whole_sequence
    lay = layout(p, tp=4, batch=4000)
    held = max_batch(p, lay, prof)
    assert 0 < held < 4000
    assert decode_round_ns(p, lay, prof) == decode_round_ns(p, lay.model_copy(update={"batch": held}), prof)
    assert decode_round_ns(p, lay, prof) / 1e6 == evaluate(p, lay, prof).metrics.decode_step_ms


def test_a_decode_workers_prediction_is_evaluates_and_is_not_counted_again() -> None:
    p = problem("llama-3.1-70b", "2x8xH100", isl=2000, osl=200)
    worker, prof = layout(p, tp=4, pp=2), get_profile("h100-sxm-vllm")
    decode_step.cache_clear()
    before = evaluations(), round_pricings()
    step = decode_step(p, worker, 24, prof)
    assert (evaluations(), round_pricings()) == (before[0], before[1] + 1)
    expected = evaluate(role_problem(p, "decode", 24), worker.model_copy(update={"batch": 24}), prof)
    before = evaluations(), round_pricings()
    assert step.prediction == expected
    assert step.prediction is step.prediction  # priced once
    assert (evaluations(), round_pricings()) == before
    assert step.round_ns / 1e6 == expected.metrics.decode_step_ms
    assert prediction_of(p, worker, prof) == evaluate(p, worker, prof)
