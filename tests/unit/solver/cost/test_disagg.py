"""The disaggregated cost against hand-computed values on Llama-3.1-8B (32 layers, 8 KV heads of 128,
bf16: 32 x 2 x 8 x 128 x 2 = 131,072 KV bytes per token) and against the invariants it must keep."""

from __future__ import annotations

import math

import pytest

from shardplan.hardware.profile import profile_for_gpu
from shardplan.rules.disagg import DisaggLayout
from shardplan.rules.disagg_plan import check_disagg
from shardplan.rules.layout import Layout
from shardplan.solver.cost.disagg import (
    admission_ns,
    evaluate_disagg,
    largest_chunk,
    prefill_step,
    worker_memory_limit,
)
from shardplan.solver.cost.evaluate import evaluate
from tests.unit.solver.cost.factory import GIB, problem

KV_PER_TOKEN = 32 * 2 * 8 * 128 * 2
ISL, OSL = 1000, 100
PROFILE = profile_for_gpu("H100-SXM")


def deployment(prefill_workers: int, prefill_tp: int, decode_workers: int, decode_tp: int, concurrency: int,
               cluster: str = "2x8xH100", **limits: float):
    p = problem("llama-3.1-8b", cluster, isl=ISL, osl=OSL)
    if limits:
        p = p.model_copy(update={"workload": p.workload.model_copy(update=limits)})
    layout = DisaggLayout.place(Layout.even(32, 1, tp=prefill_tp), prefill_workers,
                                Layout.even(32, 1, tp=decode_tp), decode_workers, concurrency, p.cluster)
    return p, layout, evaluate_disagg(p, layout)


def test_kv_bytes_and_transfer_time_across_the_nics_by_hand() -> None:
    # 4 prefill workers of tp=2 fill node 0; the tp=4 decode worker sits on node 1: the NICs join them.
    _, layout, plan = deployment(4, 2, 1, 4, 1)
    kv = plan.prediction.kv
    assert layout.decode.gpus == range(8, 12)
    assert kv.bytes_per_prompt == ISL * KV_PER_TOKEN == 131_072_000
    assert kv.send_bytes_per_gpu == 131_072_000 / 2  # 8 KV heads split over tp=2
    assert kv.recv_bytes_per_gpu == 131_072_000 / 4
    assert kv.tier == "scale_out"
    # One step of the larger share over one GPU's NIC (50 GB/s x the profile's efficiency), plus 5 us x scale.
    expected_s = 5e-6 * PROFILE.collective_latency_scale + 65_536_000 / (50e9 * PROFILE.scaleout_bw_efficiency)
    assert kv.transfer_ms == pytest.approx(expected_s * 1e3, abs=1e-6)
    # tp=2 and tp=4 split the heads differently: the receiver reads and writes its 32.8 MB once more.
    relayout_s = 2 * 32_768_000 / (3.35e12 * PROFILE.hbm_efficiency)
    assert kv.relayout_ms == pytest.approx(relayout_s * 1e3, abs=1e-6)
    # One transfer at a time per worker's links: min(4, 1) workers / the time of one.
    assert kv.capacity_rps == pytest.approx(1 / ((kv.transfer_ms + kv.relayout_ms) / 1e3), rel=1e-9)


def test_inside_one_node_the_transfer_takes_nvlink_and_equal_splits_need_no_relayout() -> None:
    _, layout, plan = deployment(1, 4, 1, 4, 1)
    kv = plan.prediction.kv
    assert layout.decode.gpus == range(4, 8) and kv.tier == "scale_up"
    expected_s = 1e-6 * PROFILE.collective_latency_scale + 32_768_000 / (450e9 * PROFILE.scaleup_bw_efficiency)
    assert kv.transfer_ms == pytest.approx(expected_s * 1e3, abs=1e-6)
    assert kv.relayout_ms == 0


def test_one_request_sees_bare_prefill_plus_transfer_then_bare_rounds() -> None:
    p, layout, plan = deployment(1, 2, 1, 4, 1)
    pred, m = plan.prediction, plan.prediction.metrics
    one = problem("llama-3.1-8b", "2x8xH100", isl=ISL, osl=OSL)
    prefill_alone = evaluate(one, Layout.even(32, 1, tp=2))  # colocated at batch 1: its TTFT is the bare prefill
    decode_alone = evaluate(one, Layout.even(32, 1, tp=4))
    assert pred.prefill.chunk == 1 and pred.decode.batch == 1
    assert pred.prefill.prefill_ms == pytest.approx(prefill_alone.prefill_ms, abs=1e-6)
    assert m.tpot_ms == pytest.approx(decode_alone.metrics.decode_step_ms, abs=1e-6)
    # One request queues behind nobody: the serving stack's fixed cost, its prefill, its cache's move.
    bare_ms = pred.prefill.prefill_ms + pred.kv.transfer_ms + pred.kv.relayout_ms
    assert m.ttft_ms == pytest.approx(PROFILE.request_overhead_ms + bare_ms, abs=1e-5)
    assert pred.waiting_ms == pytest.approx(0, abs=1e-5)
    assert pred.admission_ms == 0  # one request in flight: the decode worker's scheduler has nothing to finish
    assert m.e2e_ms == pytest.approx(m.ttft_ms + (OSL - 1) * m.tpot_ms, rel=1e-9)
    assert pred.bottleneck == "concurrency"


@pytest.mark.parametrize("concurrency", [1, 7, 64, 300, 2000])
def test_littles_law_and_each_pool_holds_what_its_rate_puts_in_it(concurrency: int) -> None:
    _, layout, plan = deployment(2, 2, 2, 4, concurrency)
    pred, m = plan.prediction, plan.prediction.metrics
    assert m.output_tokens_per_s == pytest.approx(concurrency * OSL / (m.e2e_ms / 1e3), rel=0.01)
    assert m.e2e_ms == pytest.approx(m.ttft_ms + (OSL - 1) * m.tpot_ms, rel=1e-9)
    rate = pred.throughput_rps
    # The rate is the slowest bound, and no pool is asked for more than it sustains.
    assert rate <= pred.prefill.capacity_rps * (1 + 1e-9)
    assert rate <= pred.decode.capacity_rps * (1 + 1e-9)
    assert rate <= pred.kv.capacity_rps * (1 + 1e-9)
    # Decode occupancy by Little's law, X x (OSL - 1) x TPOT, fills the batch it was priced at to within
    # one sequence per worker (the batch is the smallest that keeps up), and never exceeds C.
    in_decode = rate * (OSL - 1) * m.tpot_ms / 1e3
    b, y = pred.decode.batch, layout.decode.workers
    assert in_decode <= y * b * (1 + 1e-9)
    assert b == 1 or b == math.ceil(concurrency / y) or in_decode > y * (b - 1) * 0.98
    assert in_decode <= concurrency * (1 + 1e-9)
    assert pred.waiting_ms >= -1e-6


def test_capacities_from_the_workers_steps_by_hand() -> None:
    p, layout, plan = deployment(2, 2, 2, 4, 2000)
    pred = plan.prediction
    chunk, batch = pred.prefill.chunk, pred.decode.batch
    # The prefill pool: 2 workers x chunk / the one stage's chunk time (pp = 1: pass = slowest stage).
    assert pred.prefill.capacity_rps == pytest.approx(2 * chunk / (pred.prefill.slowest_stage_ms / 1e3), rel=1e-9)
    assert pred.prefill.slowest_stage_ms == pred.prefill.prefill_ms
    # The decode pool: 2 workers x batch sequences, each needing OSL - 1 rounds.
    assert pred.decode.capacity_rps == pytest.approx(2 * batch / ((OSL - 1) * pred.decode.step_ms / 1e3), rel=1e-9)
    # 2,000 requests in flight saturate a pool: the rate is that pool's, and the waiting is C / X - unloaded
    # e2e, less the serving stack's fixed cost (the clump's queue is waiting too).
    assert pred.bottleneck in ("prefill", "decode", "kv_transfer")
    unloaded = (PROFILE.request_overhead_ms + pred.prefill.prefill_ms + pred.kv.transfer_ms + pred.kv.relayout_ms
                + pred.admission_ms + (OSL - 1) * pred.decode.step_ms)
    assert pred.waiting_ms == pytest.approx(2000 / pred.throughput_rps * 1e3 - unloaded, rel=1e-6)
    # A chunk within the engine's token budget.
    assert 1 <= chunk <= PROFILE.max_num_tokens // ISL


def test_memory_per_role_by_hand() -> None:
    _, layout, plan = deployment(2, 2, 2, 4, 64)
    pred = plan.prediction
    decode_kv = plan.decode_plan.prediction.memory[0].kv_cache_gib
    # A decode GPU: its whole batch at ISL + OSL, 8 KV heads over tp=4.
    assert decode_kv == pytest.approx(pred.decode.batch * (ISL + OSL) * KV_PER_TOKEN / 4 / GIB, rel=1e-12)
    # A prefill GPU: the chunk in flight at ISL and its first token, over tp=2.
    prefill_kv = plan.prefill_plan.prediction.memory[0].kv_cache_gib
    assert prefill_kv == pytest.approx(pred.prefill.chunk * (ISL + 1) * KV_PER_TOKEN / 2 / GIB, rel=1e-12)
    assert plan.prefill_plan.layout.dp == 2 and plan.decode_plan.layout.dp == 2
    assert check_disagg(plan) == []


def test_more_prefill_workers_lift_a_prefill_bound_rate() -> None:
    one = deployment(1, 1, 1, 8, 2000, cluster="2x8xH100")[2].prediction
    four = deployment(4, 1, 1, 8, 2000, cluster="2x8xH100")[2].prediction
    assert one.bottleneck == "prefill"
    assert four.throughput_rps > one.throughput_rps


def test_sla_and_pool_rules_are_judged_on_the_deployment() -> None:
    _, _, plan = deployment(1, 2, 1, 4, 64, tpot_ms=0.5, ttft_ms=1.0)
    rules = {d.rule for d in check_disagg(plan)}
    assert {"SLA-001", "SLA-002"} <= rules
    # tp=3 does not divide 32 query heads: the prefill pool's own catalog rule, named for its pool.
    p = problem("llama-3.1-8b", "2x8xH100", isl=ISL, osl=OSL)
    layout = DisaggLayout.place(Layout.even(32, 1, tp=3), 1, Layout.even(32, 1, tp=4), 1, 4, p.cluster)
    found = check_disagg(evaluate_disagg(p, layout))
    assert any(d.rule == "TP-001" and d.message.startswith("prefill: ") for d in found)


def test_a_decode_batch_limit_makes_the_rest_wait_in_ttft() -> None:
    p = problem("llama-3.1-8b", "2x8xH100", isl=ISL, osl=OSL)
    layout = DisaggLayout.place(Layout.even(32, 1, tp=2), 2, Layout.even(32, 1, tp=4), 1, 64, p.cluster,
                                max_batch=(None, 4))
    pred = evaluate_disagg(p, layout).prediction
    m = pred.metrics
    assert pred.decode.batch == 4 and pred.bottleneck == "decode"
    # the rate is the decode pool's at 4 sequences: 4 / ((OSL - 1) x round)
    assert pred.throughput_rps == pytest.approx(4 / ((OSL - 1) * pred.decode.step_ms / 1e3), rel=1e-9)
    # 64 requests, 4 decoding: the other 60 wait, and the wait is in TTFT (Little's law closes the loop)
    assert pred.waiting_ms > 10 * pred.prefill.prefill_ms
    assert m.ttft_ms == pytest.approx(PROFILE.request_overhead_ms + pred.waiting_ms + pred.prefill.prefill_ms
                                      + pred.kv.transfer_ms + pred.kv.relayout_ms + pred.admission_ms, rel=1e-9)
    assert m.output_tokens_per_s == pytest.approx(64 * OSL / (m.e2e_ms / 1e3), rel=1e-9)


def test_a_decode_worker_holds_no_more_than_its_memory() -> None:
    # A 20 GiB cap on tp=1: 16 GB of weights leave room for a few sequences of 1,100 tokens only.
    p = problem("llama-3.1-8b", "8xH100", isl=ISL, osl=OSL, mem_cap_gib=20)
    layout = DisaggLayout.place(Layout.even(32, 1, tp=2), 1, Layout.even(32, 1, tp=1), 1, 256, p.cluster)
    plan = evaluate_disagg(p, layout)
    held = plan.prediction.decode.batch
    worker = Layout.even(32, 1, tp=1, batch=held)
    assert 1 <= held < 256
    assert check_disagg(plan) == []  # the batch priced fits memory ...
    one_more = evaluate(p, worker.model_copy(update={"batch": held + 1}))
    assert not one_more.fits  # ... and one more sequence would not


def test_clumped_arrivals_queue_a_share_of_the_others_prompts_at_the_prefill_pool() -> None:
    # Two tp=4 prefill workers far from saturation: C = 9 requests add k x 8 prompts' worth of
    # the pool's time per prompt (one worker's step at its largest chunk over 2 workers x that chunk) to
    # TTFT, beside the fixed cost (k the profile's ttft_queue_share, as colocated); Little's law still holds.
    p, layout, plan = deployment(2, 4, 1, 8, 9)
    pred, m = plan.prediction, plan.prediction.metrics
    assert pred.bottleneck == "concurrency"
    full = prefill_step(p, layout.prefill.layout, largest_chunk(p, PROFILE), PROFILE)
    assert PROFILE.ttft_queue_share > 0
    queue_ms = PROFILE.ttft_queue_share * 8 * full.slowest_ns / 1e6 / (2 * full.chunk)
    bare_ms = pred.prefill.prefill_ms + pred.kv.transfer_ms + pred.kv.relayout_ms
    # No pool is saturated, but the concurrency settles between two decode batches: what C requests take
    # beyond the unloaded e2e (serving stack, clump queue, prefill, transfer, OSL - 1 rounds) is waiting too.
    unloaded_ms = PROFILE.request_overhead_ms + queue_ms + bare_ms + pred.admission_ms + (OSL - 1) * m.tpot_ms
    slack_ms = m.e2e_ms - unloaded_ms
    assert 0 <= slack_ms < m.tpot_ms  # less than one round: the batch's granularity, not a saturated pool
    assert pred.waiting_ms == pytest.approx(queue_ms + slack_ms, abs=1e-5)
    assert m.ttft_ms == pytest.approx(PROFILE.request_overhead_ms + queue_ms + bare_ms + pred.admission_ms + slack_ms,
                                      abs=1e-5)
    assert pred.throughput_rps == pytest.approx(9 / (m.e2e_ms / 1e3), rel=1e-9)


@pytest.mark.parametrize("wait_steps", [0.0, 0.5, 2.3, 6.8])
def test_the_first_token_leaves_through_the_decode_workers_scheduler(wait_steps: float) -> None:
    # 9 requests on 2 tp=4 prefill workers and one tp=8 decode worker: the first token reaches the client
    # through the decode worker, whose scheduler runs the profile's ttft_wait_steps rounds at its batch
    # first, as colocated (in tenths of a round, rounded up to the nanosecond): ceil(w x 10 x round / 10).
    p = problem("llama-3.1-8b", "2x8xH100", isl=ISL, osl=OSL)
    layout = DisaggLayout.place(Layout.even(32, 1, tp=4), 2, Layout.even(32, 1, tp=8), 1, 9, p.cluster)
    profile = PROFILE.model_copy(update={"ttft_wait_steps": wait_steps})
    pred = evaluate_disagg(p, layout, profile).prediction
    m = pred.metrics
    round_ns = round(pred.decode.step_ms * 1e6)
    tenths = round(wait_steps * 10)
    assert pred.admission_ms * 1e6 == pytest.approx(-(-tenths * round_ns // 10), abs=1e-3)
    assert pred.admission_ms == pytest.approx(wait_steps * pred.decode.step_ms, abs=1e-6)
    # TTFT = serving stack + clump queue + prefill + transfer + admission + the batch's slack (< one round)
    full = prefill_step(p, layout.prefill.layout, largest_chunk(p, profile), profile)
    queue_ms = profile.ttft_queue_share * 8 * full.slowest_ns / 1e6 / (2 * full.chunk)
    parts_ms = (profile.request_overhead_ms + queue_ms + pred.prefill.prefill_ms + pred.kv.transfer_ms
                + pred.kv.relayout_ms + pred.admission_ms)
    assert 0 <= m.ttft_ms - parts_ms < m.tpot_ms
    # part of the unloaded request, so Little's law still holds with it
    assert pred.throughput_rps == pytest.approx(9 / (m.e2e_ms / 1e3), rel=1e-9)
    assert m.e2e_ms == pytest.approx(m.ttft_ms + (OSL - 1) * m.tpot_ms, rel=1e-9)


def test_one_request_in_flight_waits_for_no_decode_round() -> None:
    p = problem("llama-3.1-8b", "2x8xH100", isl=ISL, osl=OSL)
    layout = DisaggLayout.place(Layout.even(32, 1, tp=4), 1, Layout.even(32, 1, tp=8), 1, 1, p.cluster)
    pred = evaluate_disagg(p, layout, PROFILE.model_copy(update={"ttft_wait_steps": 6.8})).prediction
    assert pred.admission_ms == 0
    assert admission_ns(PROFILE.model_copy(update={"ttft_wait_steps": 6.8}), 1_000_001, 2) == 6_800_007


def test_each_attention_dp_rank_prefills_its_own_chunk() -> None:
    # A prefill worker of attn_dp = 4 (tp 1 per rank) schedules a token budget per rank: its largest step
    # holds 4 x (8192 // ISL) prompts, one rank's share on each, as fast as one rank's alone.
    p = problem("llama-3.1-8b", "2x8xH100", isl=ISL, osl=OSL)
    wide = Layout.even(32, 1, tp=1, attn_dp=4)
    per_rank = largest_chunk(p, PROFILE)
    step = prefill_step(p, wide, per_rank, PROFILE)
    assert step.chunk == 4 * per_rank == 4 * (PROFILE.max_num_tokens // ISL)


def test_each_attention_dp_rank_schedules_its_own_decode_batch() -> None:
    # The engine's batch limit is per attention-DP rank (16 here, far below what memory holds): a decode
    # worker of 4 ranks decodes up to 4 x 16 sequences, one of tp 4 up to 16; 256 in flight saturate both.
    p = problem("llama-3.1-8b", "2x8xH100", isl=ISL, osl=OSL)
    small = PROFILE.model_copy(update={"max_batch": 16})
    for decode, top in ((Layout.even(32, 1, tp=1, attn_dp=4), 64), (Layout.even(32, 1, tp=4), 16)):
        assert worker_memory_limit(p, decode, small) == top
        layout = DisaggLayout.place(Layout.even(32, 1, tp=4), 2, decode, 1, 256, p.cluster)
        pred = evaluate_disagg(p, layout, small).prediction
        assert pred.decode.batch == top and pred.bottleneck == "decode"
