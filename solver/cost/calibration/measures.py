"""What the cost model predicts for a measured point: each CSV metric mapped onto ``evaluate``.

One function per kind of measurement, each a plain reading of what the source measured:

- offline maximum throughput (TensorRT-LLM perf overview): the run's ``Point.requests`` uniform requests
  queued at once, drained in waves of the largest batch that fits (``_drain_throughput``); a row without
  a request count, ``best_throughput`` - the steady state at the batch with the most output tokens/s among
  those that fit in memory, prefill interleaved (in-flight batching);
- static batching at a stated batch (v0.9, per GPU): ``batch x OSL / e2e / GPUs``, e2e being the
  batch's prefill plus OSL decode steps at the mean context;
- TTFT at batch 1: ``ttft_ms``; Splitwise's prefill time of a batch: the iteration that prefills its
  chunk (``_prefill_iteration_ms``, the whole chunk, not one prompt's share of it); Splitwise's
  mean decode time per token: ``tpot_ms`` at the stated batch (mean context ISL + OSL/2);
- online serving at an offered rate (Little's law): the concurrency N solves
  ``N = rate x e2e(N)``, with ``ITL = one steady-state cycle at N`` (decode plus the prefill it
  carries) and ``TTFT = front-end time + half a cycle + the iteration that runs the prompt``
  (``_serving_state``); past the largest batch that fits the queue of the benchmark's 500
  requests is replayed; request and token throughputs are ``min(rate, capacity)`` times the
  request's tokens, the capacity being that of draining the benchmark's 500 requests sent at
  once (``_burst_capacity_rps``): too few for a steady state at the largest batch.

No fitting here and nothing row-specific: every number comes from ``evaluate`` with one profile.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from shardplan.hardware.profile import Profile
from shardplan.rules.layout import Layout
from shardplan.rules.problem import Problem
from shardplan.solver.cost.calibration.points import Point
from shardplan.solver.cost.evaluate import best_throughput, evaluate, max_batch, resolve_profile

SERVING_REQUESTS = 500  # requests per serving run (the source's notes)


@dataclass(frozen=True)
class Measure:
    """A prediction of one point's metric, with what it rests on."""

    value: float  # 0.0 when the layout does not fit in memory
    profile: str
    batch: int  # batch (or serving concurrency) the prediction was made at
    fits: bool = True


def predict(point: Point, profile: Profile | None = None) -> Measure:
    """Predict ``point.metric`` for the point's problem and layout."""
    profile = resolve_profile(point.problem, profile)
    metric = point.metric
    if point.rate_qps is not None:
        return _serving(point, profile)
    if metric == "output_tokens_per_s_total":
        return _max_throughput(point, profile)
    if metric == "output_tokens_per_s_per_gpu":
        return _static_throughput(point, profile)
    if metric == "ttft_ms":
        pred = evaluate(point.problem, point.layout, profile)
        return Measure(pred.metrics.ttft_ms, profile.name, point.layout.batch)
    if metric == "prefill_time_ms":
        return Measure(_prefill_iteration_ms(point.problem, point.layout, profile), profile.name, point.layout.batch)
    if metric == "decode_time_per_token_ms":
        pred = evaluate(point.problem, point.layout, profile)
        return Measure(pred.metrics.tpot_ms, profile.name, point.layout.batch)
    raise ValueError(f"no prediction for metric {metric!r}")


def _prefill_iteration_ms(problem: Problem, layout: Layout, profile: Profile) -> float:
    """An iteration that prefills the batch's chunk, as a table times it: the whole chunk through
    every stage plus the decode rounds its steps carry. Not the TTFT a user measures, which is the
    prompt's share of the chunk, its queue and the serving stack's fixed cost (``under_load``)."""
    bare = evaluate(problem, layout, profile.model_copy(update={"ttft_queue_share": 0.0, "request_overhead_ms": 0.0}))
    prefill_ns = round(bare.prefill_ms * 1e6)
    own_ms = -(-prefill_ns // bare.prefill_chunk) / 1e6
    return bare.prefill_ms + bare.metrics.ttft_ms - own_ms


def _max_throughput(point: Point, profile: Profile) -> Measure:
    if point.requests is not None:
        return _drain_throughput(point, profile, point.requests)
    best = best_throughput(point.problem, point.layout, profile)
    if best is None:
        return Measure(0.0, profile.name, 0, fits=False)
    return Measure(best.metrics.output_tokens_per_s, profile.name, best.metrics.batch)


def _drain_throughput(point: Point, profile: Profile, requests: int) -> Measure:
    """Output tokens/s of an offline run: ``requests`` requests of one length, all queued at once, per replica
    their share. The scheduler admits as many as fit (``max_batch``: memory and the batch limit), and as every
    request is as long as the others they finish together, so the run is ``k`` full waves of that batch and a
    last one of the remainder, each wave its prompts' prefill then OSL decode rounds (``_wave_ms``). A steady
    state at the largest batch would price the partial last wave as a full one: too fast where the run holds
    only one or two waves (1,500 requests of 128/4096 at a batch of 1,058)."""
    parts = drain_parts(point, profile, requests)
    if parts is None:
        return Measure(0.0, profile.name, 0, fits=False)
    layout, osl = point.layout, point.problem.workload.osl
    per_replica = math.ceil(requests / layout.dp)
    return Measure(layout.dp * per_replica * osl / (parts.run_ms / 1e3), profile.name, parts.batch)


@dataclass(frozen=True)
class DrainParts:
    """One replica's offline run as ``_drain_throughput`` prices it: the batch its waves run at, and the run's time
    split into its waves' prefill chunks and their decode rounds."""

    batch: int
    prefill_ms: float
    decode_ms: float

    @property
    def run_ms(self) -> float:
        return self.prefill_ms + self.decode_ms


def drain_parts(point: Point, profile: Profile, requests: int) -> DrainParts | None:
    """The drain of ``requests`` requests (``_drain_throughput``) per replica: ``k`` full waves at the largest batch
    that fits and one of the remainder, each its prefill then its decode rounds (``_wave_ms``); None when not one
    sequence fits."""
    top = max_batch(point.problem, point.layout, profile)
    if top == 0:
        return None
    per_replica = math.ceil(requests / point.layout.dp)
    batch = min(per_replica, top)
    full, rest = divmod(per_replica, batch)
    prefill_ms = decode_ms = 0.0
    for waves, size in ((full, batch), (1 if rest else 0, rest)):
        if waves:
            wave_prefill_ms, wave_decode_ms = _wave_ms(point, profile, size)
            prefill_ms += waves * wave_prefill_ms
            decode_ms += waves * wave_decode_ms
    return DrainParts(batch, prefill_ms, decode_ms)


def _wave_ms(point: Point, profile: Profile, batch: int) -> tuple[float, float]:
    """One wave of ``batch`` sequences admitted together, (prefill, decode) in ms: their prompts in chunks of ``p``
    through the stages (pipelined: the first chunk through every stage, each further one a slowest stage later),
    then OSL decode rounds at the whole batch. No serving-stack terms: the offline benchmark feeds token ids in
    process, and its queue is the waves themselves."""
    bare = profile.model_copy(update={"ttft_queue_share": 0.0, "request_overhead_ms": 0.0})
    pred = evaluate(point.problem, point.layout.model_copy(update={"batch": batch}), bare)
    chunks = math.ceil(batch / pred.prefill_chunk)
    slowest_ms = max(s.prefill_ms + s.send_prefill_ms for s in pred.stages)
    prefill_ms = pred.prefill_ms + (chunks - 1) * slowest_ms
    return prefill_ms, point.problem.workload.osl * pred.metrics.decode_step_ms


def _static_throughput(point: Point, profile: Profile) -> Measure:
    pred = evaluate(point.problem, point.layout, profile)
    m, osl = pred.metrics, point.problem.workload.osl
    # A static batch prefills all its prompts first: the whole chunk, not one prompt's share of it.
    e2e_ms = _prefill_iteration_ms(point.problem, point.layout, profile) + (osl - 1) * m.tpot_ms
    per_gpu = point.layout.dp * m.batch * osl / (e2e_ms / 1e3) / point.num_gpus
    return Measure(per_gpu, profile.name, m.batch, fits=pred.fits)


@dataclass(frozen=True)
class _ServingState:
    concurrency: int
    cycle_ms: float  # one steady-state iteration: the inter-token latency
    ttft_ms: float
    capacity_rps: float  # requests/s the benchmark's run can reach (``_burst_capacity_rps``)
    fits: bool


@dataclass(frozen=True)
class _Iteration:
    cycle_ms: float  # decode round plus its share of prefill: the inter-token latency
    round_ms: float  # the decode round alone


def _iteration(point: Point, profile: Profile, batch: int) -> _Iteration:
    """Steady state at ``batch`` sequences per replica: every cycle each of them gains a token."""
    at = point.layout.model_copy(update={"batch": batch})
    pred = evaluate(point.problem, at, profile)
    # The steps a sequence lives through, per token: its chunk's iteration, then OSL - 1 decode steps
    # (the queue and fixed cost of a user's TTFT are this function's caller's to add, at the offered rate).
    osl = point.problem.workload.osl
    cycle = (_prefill_iteration_ms(point.problem, at, profile) + (osl - 1) * pred.metrics.tpot_ms) / osl
    return _Iteration(cycle, pred.metrics.tpot_ms)


def _serving_state(point: Point, profile: Profile) -> _ServingState:
    """Little's law on one replica: ``n = rate_per_replica x e2e(n)``.

    A request arrives during an iteration (on average half a cycle left), then its prompt runs in
    the next iteration beside the decode round and the prompts of the others that arrived in the
    same cycle (Poisson arrivals: ``rate x cycle`` of them), plus the front end's fixed time per
    request (``profile.request_overhead_ms``). Past the largest batch that fits, the benchmark's
    requests queue for a slot (``_mean_queue_wait_ms``).
    """
    wl, layout, rate = point.problem.workload, point.layout, _offered_rate(point)
    top = max_batch(point.problem, layout, profile)
    if top == 0:
        return _ServingState(0, 0.0, 0.0, 0.0, fits=False)
    # The bare prefill: evaluate's TTFT at one request carries the fixed cost per request, added below.
    prompt = evaluate(point.problem, layout.model_copy(update={"batch": 1}), profile).metrics.ttft_ms
    prompt -= profile.request_overhead_ms
    per_replica = rate / layout.dp

    def ttft(it: _Iteration) -> float:
        batched = 0.0 if math.isinf(per_replica) else per_replica * it.cycle_ms / 1e3
        return profile.request_overhead_ms + 0.5 * it.cycle_ms + it.round_ms + (1.0 + batched) * prompt

    def e2e(it: _Iteration) -> float:
        return ttft(it) + wl.osl * it.cycle_ms

    at_top = _iteration(point, profile, top)
    capacity = _burst_capacity_rps(point, profile, top)
    if math.isinf(rate) or per_replica * e2e(at_top) / 1e3 > top:
        wait = _mean_queue_wait_ms(rate, layout.dp * top, e2e(at_top))
        return _ServingState(top, at_top.cycle_ms, ttft(at_top) + wait, capacity, True)
    # Smallest concurrency the offered rate sustains: n >= rate x e2e(n) (e2e grows with n).
    lo, hi = 1, top
    while lo < hi:
        mid = (lo + hi) // 2
        if per_replica * e2e(_iteration(point, profile, mid)) / 1e3 <= mid:
            hi = mid
        else:
            lo = mid + 1
    it = _iteration(point, profile, lo)
    return _ServingState(lo, it.cycle_ms, ttft(it), capacity, True)


def _burst_capacity_rps(point: Point, profile: Profile, top: int) -> float:
    """Requests/s of draining the benchmark's requests sent at once: too few for a steady state at
    the largest batch, so the run is prompts first (``max_num_tokens`` of them per iteration, with
    the admitted sequences decoding alongside), then the last prompts' outputs.

    Per replica and wave of ``b = min(requests, top)`` sequences: ``n`` = ceil(b x ISL / chunk
    tokens) prefill iterations, each a prompt chunk through the stages plus a decode round, then
    ``OSL`` more rounds for the last admitted prompts.
    """
    wl, layout = point.problem.workload, point.layout
    requests = math.ceil(SERVING_REQUESTS / layout.dp)
    b = min(requests, top)
    wave = layout.model_copy(update={"batch": b})
    pred = evaluate(point.problem, wave, profile)
    chunk_tokens = pred.prefill_chunk * wl.isl
    prefill_iterations = math.ceil(b * wl.isl / chunk_tokens)
    iteration_ms = _prefill_iteration_ms(point.problem, wave, profile)
    wave_ms = prefill_iterations * iteration_ms + (prefill_iterations + wl.osl) * pred.metrics.tpot_ms
    waves = math.ceil(requests / b)
    return layout.dp * requests / (waves * wave_ms / 1e3)


def _mean_queue_wait_ms(rate: float, slots: int, service_ms: float) -> float:
    """Mean wait of ``SERVING_REQUESTS`` requests arriving at ``rate`` for one of ``slots``
    sequences, each held ``service_ms``: request i starts when it arrives or when request
    i - slots finishes, whichever is later (every request at once for an infinite rate)."""
    gap_ms = 0.0 if math.isinf(rate) else 1e3 / rate
    start: list[float] = []
    total = 0.0
    for i in range(SERVING_REQUESTS):
        arrive = i * gap_ms
        begin = arrive if i < slots else max(arrive, start[i - slots] + service_ms)
        start.append(begin)
        total += begin - arrive
    return total / SERVING_REQUESTS


def _offered_rate(point: Point) -> float:
    """Requests/s a serving point offers (inf: all at once); only serving points have one."""
    if point.rate_qps is None:
        raise ValueError(f"row {point.row_id} is not a serving measurement: it offers no request rate")
    return point.rate_qps


def _serving(point: Point, profile: Profile) -> Measure:
    wl = point.problem.workload
    state = _serving_state(point, profile)
    if not state.fits:
        return Measure(0.0, profile.name, 0, fits=False)
    rps = min(_offered_rate(point), state.capacity_rps)
    value = {
        "ttft_mean_ms": state.ttft_ms,
        "itl_mean_ms": state.cycle_ms,
        "request_throughput_req_per_s": rps,
        "output_tokens_per_s_total": rps * wl.osl,
        "total_tokens_per_s_total": rps * (wl.isl + wl.osl),
    }.get(point.metric)
    if value is None:
        raise ValueError(f"no serving prediction for metric {point.metric!r}")
    return Measure(value, profile.name, state.concurrency)
