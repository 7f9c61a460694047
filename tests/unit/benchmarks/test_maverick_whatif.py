"""The Llama-4-Maverick what-ifs (benchmarks/accuracy/maverick.py): the weights per GPU each implies, the bytes a
decode step must read and the step time a measurement allows, against arithmetic done here from the published
config.json (hidden 5,120; 48 layers, MoE on the odd ones; 40 query and 8 KV heads of 128; dense FFN 16,384;
128 routed experts and one shared expert of 8,192; vocabulary 202,048, untied)."""

from __future__ import annotations

from functools import cache

import pytest

from benchmarks.accuracy import POINTS_CSV
from benchmarks.accuracy.maverick import (
    VARIANTS,
    Variant,
    apply,
    replay,
    resident_weights_bytes,
    step_allowance_ms,
    streamed_bytes_per_step,
    user_profile,
)
from shardplan.models import DType
from shardplan.solver.cost.calibration.points import Point, load_points
from shardplan.solver.cost.evaluate import max_batch

HIDDEN, LAYERS, MOE_LAYERS, DENSE_LAYERS = 5120, 48, 24, 24
Q_WIDTH, KV_WIDTH = 40 * 128, 8 * 128
DENSE_FFN, EXPERT_FFN, EXPERTS, VOCAB = 16384, 8192, 128, 202048
GPUS = 8
ATTENTION = HIDDEN * (Q_WIDTH + 2 * KV_WIDTH) + Q_WIDTH * HIDDEN  # q, k, v and o projections
DENSE = 3 * HIDDEN * DENSE_FFN  # gate, up, down
EXPERT = 3 * HIDDEN * EXPERT_FFN  # one routed expert; the shared expert is the same size
ROUTER, NORMS, END = HIDDEN * EXPERTS, 2 * HIDDEN, VOCAB * HIDDEN  # END: the embedding, and the LM head
SMALL_BYTES = 2  # routers, norms, embedding and LM head stay 16-bit in every checkpoint
LOCAL_EXPERTS = EXPERTS // GPUS


@cache
def h100_row() -> Point:
    """Row 1771 of perf_points.csv: Maverick FP8 on 8 x H100, TP8, 128/4096, 6,744 tok/s, 1,500 requests."""
    return next(p for p in load_points(POINTS_CSV)[0] if p.row_id == "1771")


def variant(name: str) -> Variant:
    return next(v for v in VARIANTS if v.name.strip() == name)


def _always_small() -> float:
    return MOE_LAYERS * ROUTER * SMALL_BYTES + LAYERS * NORMS * SMALL_BYTES


def test_todays_convention_holds_every_linear_weight_in_fp8_split_eight_ways():
    per_gpu_bytes = (LAYERS * ATTENTION / GPUS + DENSE_LAYERS * DENSE / GPUS
                     + MOE_LAYERS * (LOCAL_EXPERTS * EXPERT + EXPERT / GPUS)  # FP8: one byte each
                     + _always_small() + 2 * END * SMALL_BYTES / GPUS)
    point = h100_row()
    v, profile = replay(point, user_profile(point), VARIANTS[0])
    assert VARIANTS[0].sixteen_bit_rest == frozenset() and not VARIANTS[0].attention_dp
    assert resident_weights_bytes(v, profile, VARIANTS[0]) == pytest.approx(per_gpu_bytes, rel=1e-6)
    assert per_gpu_bytes / 2**30 == pytest.approx(46.92, abs=0.01)


@pytest.mark.parametrize(("name", "ends_whole"), [
    ("attention DP + 16-bit non-expert (FP8 checkpoint)", 2),
    ("+ embedding split", 1),
    ("+ embedding and LM head split", 0),
])
def test_attention_dp_with_16_bit_non_expert_weights_replicates_them_on_every_gpu(name, ends_whole):
    whole = variant(name)
    replicated_bytes = 2 * (LAYERS * ATTENTION + DENSE_LAYERS * DENSE + MOE_LAYERS * EXPERT)  # 16-bit, whole
    ends_bytes = END * SMALL_BYTES * (ends_whole + (2 - ends_whole) / GPUS)
    per_gpu_bytes = replicated_bytes + MOE_LAYERS * LOCAL_EXPERTS * EXPERT + _always_small() + ends_bytes
    point = h100_row()
    v, profile = replay(point, user_profile(point), whole)
    assert v.problem.model.weights_dtype is DType.BF16 and v.problem.model.expert_dtype is DType.FP8
    assert (v.layout.tp, v.layout.attn_dp, v.layout.expert_tp) == (1, GPUS, 1)
    assert resident_weights_bytes(v, profile, whole) == pytest.approx(per_gpu_bytes, rel=1e-6)


def test_the_memory_a_split_end_frees_is_given_back_to_the_kv_cache():
    # The batch grows with the freed bytes: a cap raised by what splitting frees, not a different model.
    point = h100_row()
    batches = []
    for name in ("attention DP + 16-bit non-expert (FP8 checkpoint)", "+ embedding split",
                 "+ embedding and LM head split"):
        v, profile = replay(point, user_profile(point), variant(name))
        batches.append(max_batch(v.problem, v.layout, profile))
    assert batches[0] < batches[1] < batches[2]


def test_a_16_bit_rest_applies_only_to_the_checkpoints_it_names():
    fp4 = next(p for p in load_points(POINTS_CSV)[0] if p.row_id == "1769")  # B200 FP4
    assert apply(fp4, variant("attention DP + 16-bit non-expert (FP8 checkpoint)")).problem.model.weights_dtype \
        is DType.FP4
    assert apply(fp4, variant("attention DP + 16-bit non-expert (FP8 and FP4)")).problem.model.weights_dtype \
        is DType.BF16


def test_a_one_sequence_step_reads_every_non_expert_weight_and_one_expert_in_128_of_each_layer():
    point = h100_row()
    today = VARIANTS[0]
    v, profile = replay(point, user_profile(point), today)
    unread_bytes = MOE_LAYERS * LOCAL_EXPERTS * (1 - 1 / EXPERTS) * EXPERT  # FP8 experts no token picked
    kv_bytes = (128 + 4096 // 2) * LAYERS * 2 * KV_WIDTH / GPUS  # FP8 K and V at the mean context, heads split
    expected = resident_weights_bytes(v, profile, today) - unread_bytes + kv_bytes
    assert streamed_bytes_per_step(v, profile, today, 1) == pytest.approx(expected, rel=1e-9)


def test_the_step_a_measurement_allows_is_its_run_time_over_its_decode_steps():
    # 1,500 requests of 4,096 output tokens at 6,744 tok/s, in waves of 104: 15 waves of 4,096 steps.
    point = h100_row()
    run_s = 1500 * 4096 / 6744
    assert step_allowance_ms(point, 104) == pytest.approx(run_s / (15 * 4096) * 1e3, rel=1e-12)
    assert step_allowance_ms(point, 1500) == pytest.approx(run_s / 4096 * 1e3, rel=1e-12)


def test_the_batch_limit_per_rank_multiplies_the_engines_limit_by_the_ranks():
    point = h100_row()
    base = user_profile(point)
    _, per_rank = replay(point, base, variant("+ batch limit per attention-DP rank"))
    assert per_rank.max_batch == base.max_batch * GPUS
