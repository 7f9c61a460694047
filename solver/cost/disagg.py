"""``evaluate_disagg(problem, layout) -> DisaggPlan``: the cost of a disaggregated deployment.

Every step time comes from ``evaluate`` (``solver/cost/evaluate.py``) on one worker of each pool: the
prefill worker's chunk through its stages, the decode worker's round at its batch. Nothing here prices
an operator; this module only joins the two pools (DESIGN.md "Cost model", disaggregated serving):

- **prefill** worker at chunk ``p`` (prompts per step: per attention-DP rank at most the engine's token
  budget over ISL, each rank scheduling its own, and the pool's batch limit):
  a prompt's prefill is the chunk through every stage and send; a new chunk enters every slowest stage,
  so the pool's capacity is ``workers x p / slowest stage`` prompts per second;
- **KV transfer**: each prompt's cache (ISL x KV bytes per token) moves from the prefill worker's GPUs
  to the decode worker's. Every GPU sends its own share over its own link at once, so the time is the
  largest per-GPU share (sent or received) over the link joining the pools (NVLink when both pools sit
  in one scale-up domain, the NICs otherwise), plus the link's latency. When the pools split the cache
  differently (KV heads over tp, sp, stage boundaries) the receiver re-arranges what it got: one read and
  one write of its share in HBM. A worker's links move one prompt at a time: ``min(workers) / transfer``;
- **decode** worker at batch ``b``: TPOT is its round (no prefill shares its steps: that is the point of
  disaggregation); the pool finishes ``workers x b / ((OSL - 1) x round)`` requests per second (the first
  token comes from the prefill worker);
- the **rate** ``X`` at concurrency ``C``: each pool runs at the smallest chunk or batch that sustains
  ``X`` (a pool's occupancy is what Little's law gives it), and ``X`` is the slowest of the prefill pool
  at its largest chunk, the links, the decode pool at ``ceil(C / decode workers)`` (or, if lower, its
  batch limit, the engine's per attention-DP rank, or the most sequences its memory holds: the requests
  beyond wait), unless ``C`` requests in flight cannot carry that: then the highest ``X`` with
  ``X x e2e0(X) <= C``, ``e2e0(X)`` the unloaded request (serving stack + prefill + transfer + ``OSL - 1``
  rounds) at the chunk and batch ``X`` needs (the closed loop's own bound, a fixed point: ``X x e2e0(X)``
  grows with ``X``, and ``most_carried`` finds the largest such float);
- **serving stack**: every request also carries the engine profile's ``request_overhead_ms`` (front end,
  router, KV connector hand-off) and a queue at the prefill pool from the closed loop's clumped arrivals,
  ``ttft_queue_share x (C - 1)`` prompts at the pool's time per prompt (``serving_stack_ns``): the
  colocated model's two TTFT-under-load terms, from the same profile fields; both are part of ``e2e0``;
- **first token through the decode worker**: the client's first token leaves the deployment through the
  decode worker, once that worker's scheduler has taken in the request whose cache arrived (Dynamo's
  disaggregated flow: prefill worker, then the decode worker, which streams every token; SGLang's decode
  server polls the transfer each scheduler iteration, then builds the request into its running batch). Its
  scheduler runs the engine profile's ``ttft_wait_steps`` decode rounds at its batch between the request's
  arrival and its first token, as it does colocated (``evaluate.under_load``; the same integer tenths, 0 at
  one request in flight): ``admission_ns``, part of ``e2e0`` too;
- **latency**: ``e2e = C / X`` (Little's law, exactly), ``TPOT`` the decode round, ``TTFT = e2e - (OSL - 1)
  x TPOT`` = the serving stack + the waiting the bottleneck causes + prefill + KV transfer (+ re-layout) +
  the decode worker's admission;
- **memory**: a prefill worker holds the KV of the prompts in flight through its pipeline (chunk x stages,
  at ISL plus the first token); a decode worker the KV of its whole batch at ISL + OSL.

No CP-SAT here; the solver will read these same functions.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property, lru_cache

from shardplan.hardware import ClusterSpec, Collective, Tier, collective_time_on_tier_s, tier_of
from shardplan.hardware.profile import Profile
from shardplan.models.derived import kv_bytes_per_sequence
from shardplan.rules.capacity import engine_batch_limit
from shardplan.rules.disagg import DisaggLayout, Pool
from shardplan.rules.disagg_plan import DecodeRole, DisaggPlan, DisaggPrediction, KvTransfer, PrefillRole
from shardplan.rules.layout import Layout
from shardplan.rules.plan import Plan
from shardplan.rules.prediction import Metrics, Prediction
from shardplan.rules.problem import Objective, Pins, Problem, resolve_profile
from shardplan.solver.cost.evaluate import (
    NS_PER_S,
    WAIT_DIV,
    ServingStack,
    decode_round_ns,
    evaluate,
    max_batch,
    prediction_of,
)
from shardplan.solver.cost.stage import kv_split

RATE_BISECTIONS = 200  # halvings of the rate interval; it stops far sooner, at float resolution
SUSTAIN_SLACK = 1e-12  # relative: a step sustains a rate within this of its capacity (``smallest_sustaining``)


def role_problem(problem: Problem, role: str, batch: int) -> Problem:
    """The problem one pool answers: its own batch, no SLA (the deployment's metrics are judged, not the
    pool's), no pins, and for prefill a request that ends at its first token (the KV a worker holds)."""
    wl = problem.workload
    workload = wl.model_copy(update={"batch": batch, "ttft_ms": None, "tpot_ms": None,
                                     **({"osl": 1} if role == "prefill" else {})})
    return problem.model_copy(update={"workload": workload, "objective": Objective.THROUGHPUT, "pins": Pins()})


@dataclass(frozen=True)
class PrefillStep:
    chunk: int
    pass_ns: int  # the chunk through every stage and send
    slowest_ns: int  # the slowest stage and its send: how often a chunk enters
    prediction: Prediction

    def capacity_rps(self, workers: int) -> float:
        return workers * self.chunk * NS_PER_S / self.slowest_ns


@dataclass(frozen=True)
class DecodeStep:
    batch: int
    round_ns: int
    priced: tuple[Problem, Layout, Profile] = field(repr=False, compare=False)  # what ``prediction`` prices

    @cached_property
    def prediction(self) -> Prediction:
        """The worker's whole prediction at this batch, priced when first read (the plans checked read it; a
        batch search reads only the round)."""
        return prediction_of(*self.priced)

    def capacity_rps(self, workers: int, osl: int) -> float:
        if osl <= 1:
            return math.inf  # the prefill worker's token is the only one: nothing to decode
        return workers * self.batch * NS_PER_S / ((osl - 1) * self.round_ns)


def _ns(ms: float) -> int:
    return round(ms * 1e6)


# A solver prices the same worker at the same chunk or batch for many pool sizes and concurrencies;
# the prices are pure functions of hashable frozen inputs, so they are memoised (bounded).
def rank_budget(profile: Profile, layout: Layout) -> Profile:
    """The profile a prefill worker is priced with: each attention-DP rank schedules its own prompts
    within its own token budget (TensorRT-LLM's ``max_num_tokens`` and ``max_batch_size`` are per rank
    with attention DP), so the worker's step holds ``attn_dp`` times the profile's budget."""
    if layout.attn_dp == 1:
        return profile
    return profile.model_copy(update={"max_num_tokens": profile.max_num_tokens * layout.attn_dp})


@lru_cache(maxsize=1 << 16)
def prefill_step(problem: Problem, layout: Layout, chunk: int, profile: Profile) -> PrefillStep:
    """One prefill worker at ``chunk`` prompts per attention-DP rank per step: ``evaluate`` at chunk x
    ranks x stages sequences, so each of its microbatches is one chunk on every rank."""
    worker = layout.model_copy(update={"batch": chunk * layout.attn_dp * layout.pp, "dp": 1})
    pred = evaluate(role_problem(problem, "prefill", worker.batch), worker, rank_budget(profile, layout))
    slowest = max(_ns(s.prefill_ms) + _ns(s.send_prefill_ms) for s in pred.stages)
    passed = sum(_ns(s.prefill_ms) + _ns(s.send_prefill_ms) for s in pred.stages)
    return PrefillStep(pred.prefill_chunk, passed, slowest, pred)


@lru_cache(maxsize=1 << 16)
def decode_step(problem: Problem, layout: Layout, batch: int, profile: Profile) -> DecodeStep:
    worker = layout.model_copy(update={"batch": batch, "dp": 1})
    role = role_problem(problem, "decode", batch)
    return DecodeStep(batch, decode_round_ns(role, worker, profile), (role, worker, profile))


def forget_worker_prices() -> None:
    """Empty the memos of ``prefill_step`` and ``decode_step``. A search's work counts the pricings
    (``evaluate`` and ``decode_round_ns`` calls) it makes (search_base.Deadline), which a memo filled by an
    earlier search in the same process spares; so each disaggregated search starts from empty memos, as in a
    fresh process, and a work limit ends it at the same place in a long-lived one (the MCP server, library
    calls) as on the command line."""
    prefill_step.cache_clear()
    decode_step.cache_clear()


def engine_profile(problem: Problem, profile: Profile | None = None) -> Profile:
    """The profile a disaggregated deployment is priced and searched with: the problem's, its engine batch
    limit (sequences one attention-DP rank's scheduler runs at once) replaced by ``--max-batch`` when
    given. So a decode worker's batch stays within ``--max-batch`` x attn_dp and a prefill step's chunk
    within ``--max-batch`` per rank in the search, the pricing and the check alike (BAT-001 judges each
    pool's plan by the same limit); read from the profile only, the search offered batches the check
    then refused one deployment at a time."""
    profile = resolve_profile(problem, profile)
    limit = engine_batch_limit(problem, profile)
    return profile if limit == profile.max_batch else profile.model_copy(update={"max_batch": limit})


def largest_chunk(problem: Problem, profile: Profile) -> int:
    """Prompts one attention-DP rank's prefill step may hold: the engine's token budget over ISL, at
    least one."""
    return max(1, profile.max_num_tokens // problem.workload.isl)


def decode_batch_limit(profile: Profile, layout: Layout) -> int:
    """The most sequences the engine schedules on one decode worker by default: its batch limit per
    attention-DP rank times the ranks. Each rank runs its own scheduler (TensorRT-LLM's ``max_batch_size``
    is per rank with attention DP; SGLang starts one scheduler per DP-attention rank), as the prefill
    worker's token budget is per rank (``rank_budget``)."""
    return profile.max_batch * layout.attn_dp


def worker_memory_limit(problem: Problem, layout: Layout, profile: Profile) -> int:
    """The most sequences one decode worker of ``layout`` holds at ISL + OSL, up to the engine's limit per
    attention-DP rank times the ranks (``evaluate.max_batch``; ``decode_batch_limit`` without --max-batch);
    0 if not even one fits."""
    return max_batch(role_problem(problem, "decode", 1), layout.model_copy(update={"dp": 1}), profile)


def decode_memory_limit(problem: Problem, layout: DisaggLayout, profile: Profile) -> int:
    """The most sequences a decode worker's memory holds at ISL + OSL (an engine admits no more: the rest
    wait for a slot); at least 1, so a worker that holds none is still priced and MEM-001 names it."""
    return max(1, worker_memory_limit(problem, layout.decode.layout, profile))


def smallest_sustaining(top: int, rate_at: Callable[[int], float], rate: float) -> int:
    """The smallest n in 1..top whose rate reaches ``rate`` (``top`` if none does); the rate grows with
    n (a bigger chunk or batch amortises the weights it reads), so a bisection finds it."""
    lo, hi = 1, top
    while lo < hi:
        mid = (lo + hi) // 2
        if rate_at(mid) >= rate * (1 - SUSTAIN_SLACK):
            hi = mid
        else:
            lo = mid + 1
    return lo


def sustained_until(top: int, rate_at: Callable[[int], float], rate: float) -> float:
    """The largest rate at which ``smallest_sustaining(top, rate_at, .)`` answers as it does at ``rate`` (inf: at
    every higher rate). As the rate grows a probe's test only turns from passing to failing, and the answer
    moves exactly when one that passed on its path fails: at the least of their ``last_sustained``."""
    lo, hi, end = 1, top, math.inf
    while lo < hi:
        mid = (lo + hi) // 2
        capacity = rate_at(mid)
        if capacity >= rate * (1 - SUSTAIN_SLACK):
            hi, end = mid, min(end, last_sustained(capacity))
        else:
            lo = mid + 1
    return end


def last_sustained(capacity: float) -> float:
    """The largest float rate a step of ``capacity`` sustains (``smallest_sustaining``'s test)."""
    if math.isinf(capacity):
        return capacity
    r = capacity / (1 - SUSTAIN_SLACK)
    while r > 0 and capacity < r * (1 - SUSTAIN_SLACK):
        r = math.nextafter(r, 0.0)
    while capacity >= (up := math.nextafter(r, math.inf)) * (1 - SUSTAIN_SLACK):
        r = up
    return r


# --- the KV cache's move -------------------------------------------------------------------------
@lru_cache(maxsize=1 << 12)  # a solver asks it of every pair of workers: once per worker layout
def kv_share_bytes(problem: Problem, layout: Layout) -> float:
    """The most bytes of one prompt's cache any GPU of a worker holds: per stage its layers' cache,
    split by KV heads over tp (replicated beyond, MLA's latent everywhere) and by sp."""
    model, isl = problem.model, problem.workload.isl
    split = kv_split(model, layout.tp) * layout.sp
    return max(kv_bytes_per_sequence(model, isl, layout.stage_layers(s)) for s in range(layout.pp)) / split


def same_cache_layout(problem: Problem, a: Layout, b: Layout) -> bool:
    """Whether both workers split the cache the same way: same shards per GPU and same stage boundaries."""
    model = problem.model
    return kv_split(model, a.tp) * a.sp == kv_split(model, b.tp) * b.sp and a.stages == b.stages


def transfer_tier(layout: DisaggLayout, cluster: ClusterSpec) -> Tier:
    """The link a prompt's cache takes. It may go to any decode worker, so the slowest link between the
    pools: NVLink only when both pools sit in one scale-up domain. Pools that run past the cluster
    (DIS-001 and DIS-002 name that) are priced over the NICs rather than refused here."""
    ids = {*layout.prefill.gpus, *layout.decode.gpus}
    if max(ids) >= cluster.num_gpus:
        return Tier.SCALE_OUT
    return tier_of(sorted(ids), cluster)


def transfer_ns(problem: Problem, prefill: Layout, decode: Layout, tier: Tier, profile: Profile) -> tuple[int, int]:
    """(moved, re-layout) integer nanoseconds of one prompt's cache between a prefill worker of
    ``prefill`` and a decode worker of ``decode`` over ``tier``: what a solver prices per pair."""
    cluster = problem.cluster
    send, recv = kv_share_bytes(problem, prefill), kv_share_bytes(problem, decode)
    eff = profile.scaleup_bw_efficiency if tier is Tier.SCALE_UP else profile.scaleout_bw_efficiency
    moved_ns = round(collective_time_on_tier_s(
        Collective.SEND_RECV, max(send, recv), 2, tier, cluster,
        bw_efficiency=eff, latency_scale=profile.collective_latency_scale,
    ) * NS_PER_S)
    relayout_ns = 0
    if not same_cache_layout(problem, prefill, decode):
        relayout_ns = round(2 * recv / (cluster.gpu.hbm_bytes_per_s * profile.hbm_efficiency) * NS_PER_S)
    return moved_ns, relayout_ns


def kv_capacity_rps(workers: int, per_prompt_ns: int) -> float:
    """Prompts per second the links move: each of the fewer workers moves one prompt at a time."""
    return workers * NS_PER_S / per_prompt_ns if per_prompt_ns else math.inf


def kv_transfer(problem: Problem, layout: DisaggLayout, profile: Profile) -> KvTransfer:
    p, d = layout.prefill, layout.decode
    tier = transfer_tier(layout, problem.cluster)
    moved_ns, relayout_ns = transfer_ns(problem, p.layout, d.layout, tier, profile)
    return KvTransfer(
        bytes_per_prompt=kv_bytes_per_sequence(problem.model, problem.workload.isl),
        send_bytes_per_gpu=kv_share_bytes(problem, p.layout),
        recv_bytes_per_gpu=kv_share_bytes(problem, d.layout),
        tier=tier.value,
        transfer_ms=moved_ns / 1e6,
        relayout_ms=relayout_ns / 1e6,
        capacity_rps=kv_capacity_rps(min(p.workers, d.workers), moved_ns + relayout_ns),
    )


# --- the deployment ----------------------------------------------------------------------------
@dataclass(frozen=True)
class SteadyState:
    prefill: PrefillStep
    decode: DecodeStep
    rate_rps: float
    bottleneck: str
    unloaded_e2e_ns: int  # serving stack + clump queue + prefill + transfer + admission + (OSL - 1) rounds
    overhead_ns: int  # the serving stack's fixed cost per request (in the unloaded e2e)
    queue_ns: int  # the clump of arrivals' queue at the prefill pool (in the unloaded e2e)
    admission_ns: int  # the decode worker's scheduler iterations before the first token (in the unloaded e2e)


def request_overhead_ns(profile: Profile) -> int:
    """The serving stack's fixed cost per request, ``request_overhead_ms``, in the integer nanoseconds every
    disaggregated TTFT carries (``serving_stack_ns``); the search's floors and filters read it here too."""
    return _ns(profile.request_overhead_ms)


def serving_stack_ns(layout: DisaggLayout, full: PrefillStep, profile: Profile,
                     queue_share: float | None = None) -> tuple[int, int]:
    """What a request's TTFT carries beyond its own prefill, transfer and the steady state's waiting, in
    integer nanoseconds: (overhead, queue). The same two terms, from the same engine-profile fields, as
    the colocated model's TTFT under load (``evaluate.under_load``), so both serving modes are judged
    alike:

    - the serving stack's fixed cost per request, ``request_overhead_ms`` (front end, tokenisation,
      scheduling; here also the router's hop and the KV connector's hand-off);
    - the queue of clumped arrivals: a closed loop at one ISL and OSL sends its requests in clumps (every
      client starts at once, and with equal outputs they return close together), so a prompt finds a
      share ``k`` = ``ttft_queue_share`` of the other C - 1 prompts queued at the prefill pool even when
      the pool keeps up on average; each costs the pool's time per prompt at its largest chunk (its
      slowest step over workers x chunk). ``queue_share`` replaces ``k`` (the benchmark's refit)."""
    per_prompt_ns = full.slowest_ns / (layout.prefill.workers * full.chunk)
    share = profile.ttft_queue_share if queue_share is None else queue_share
    queue_ns = round(share * max(0, layout.concurrency - 1) * per_prompt_ns)
    return request_overhead_ns(profile), queue_ns


def admission_ns(profile: Profile, round_ns: int, concurrency: int) -> int:
    """Integer nanoseconds between a request's arrival at a decode worker (its cache moved) and its first
    token leaving that worker: the engine profile's ``ttft_wait_steps`` scheduler iterations, each a decode
    round of ``round_ns`` at the worker's batch, in the tenths the colocated model counts them in
    (``evaluate.under_load``: ``ceil(tenths x round / 10)``), and none at one request in flight, as
    colocated. The field is the engine's, fitted on its colocated runs (or the default half a step on
    arrival): nothing is fitted on disaggregated runs.

    >>> from shardplan.hardware.profile import get_profile
    >>> half = get_profile("h100-sxm")  # the hardware profile: ttft_wait_steps 0.5, half a round on arrival
    >>> admission_ns(half, 1_001, 8), admission_ns(half, 1_001, 1)  # ceil(5 x 1001 / 10); one request: none
    (501, 0)
    """
    if concurrency <= 1:
        return 0
    return -(-ServingStack.of(profile).wait_steps_tenths * round_ns // WAIT_DIV)


class _Pools:
    """Memoised step prices of the two workers while the steady state is sought."""

    def __init__(self, problem: Problem, layout: DisaggLayout, profile: Profile):
        self.problem, self.layout, self.profile = problem, layout, profile
        self._prefill: dict[int, PrefillStep] = {}
        self._decode: dict[int, DecodeStep] = {}

    def prefill(self, chunk: int) -> PrefillStep:
        if chunk not in self._prefill:
            self._prefill[chunk] = prefill_step(self.problem, self.layout.prefill.layout, chunk, self.profile)
        return self._prefill[chunk]

    def decode(self, batch: int) -> DecodeStep:
        if batch not in self._decode:
            self._decode[batch] = decode_step(self.problem, self.layout.decode.layout, batch, self.profile)
        return self._decode[batch]


class _SteadyStates:
    """How many times ``steady_state`` ran in this process. Each seeks the rate (``most_carried``), and at every
    rate it tries the chunk and the batch, over memoised prices: 0.2-0.4 ms of CPU that no ``evaluate`` call
    shows, and a disaggregated exact check (``deploy.Pools.served``) solves some 30 of them, so the searches
    count them as work too (``search_base.Deadline.checking``)."""

    count = 0


def steady_states() -> int:
    """``steady_state`` calls so far in this process (a search reads the difference over its own work)."""
    return _SteadyStates.count


def steady_state(problem: Problem, layout: DisaggLayout, kv: KvTransfer, profile: Profile,
                 queue_share: float | None = None) -> SteadyState:
    """The rate and the chunk and batch each pool runs at (module docstring), and what sets the rate: the
    slowest of the prefill pool, the links and the decode pool at their tops when the requests in flight
    carry it, else the concurrency. This is the one place the label is decided (solve's plans and evaluate
    both come here). A pool's top includes its batch limit, so a decode pool given solve's ``max_batch``
    is named where the same pool without it, at the same rate, names the concurrency: one more request in
    flight raises that one's rate and not the limited one's."""
    _SteadyStates.count += 1
    pools = _Pools(problem, layout, profile)
    osl, C = problem.workload.osl, layout.concurrency
    x, y = layout.prefill.workers, layout.decode.workers
    ranks = layout.prefill.layout.attn_dp  # the pool's batch limit is the worker's, the chunk per rank
    top_chunk = min(largest_chunk(problem, profile),
                    max(1, layout.prefill.max_batch // ranks) if layout.prefill.max_batch else profile.max_batch)
    top_batch = min(-(-C // y), layout.decode.max_batch or decode_batch_limit(profile, layout.decode.layout),
                    decode_memory_limit(problem, layout, profile))
    transfer_ns = _ns(kv.transfer_ms) + _ns(kv.relayout_ms)
    overhead_ns, queue_ns = serving_stack_ns(layout, pools.prefill(top_chunk), profile, queue_share)
    stack_ns = overhead_ns + queue_ns

    def settled(rate: float) -> tuple[PrefillStep, DecodeStep, int]:
        """Each pool at the smallest chunk or batch that sustains ``rate``, and the unloaded e2e."""
        pf = pools.prefill(smallest_sustaining(top_chunk, lambda n: pools.prefill(n).capacity_rps(x), rate))
        dc = pools.decode(1 if osl <= 1 else smallest_sustaining(
            top_batch, lambda n: pools.decode(n).capacity_rps(y, osl), rate))
        admit = admission_ns(profile, dc.round_ns, C) if osl > 1 else 0
        return pf, dc, stack_ns + pf.pass_ns + transfer_ns + admit + (osl - 1) * dc.round_ns

    def segment_end(rate: float) -> float:
        """The largest rate at which both pools run the steps they run at ``rate`` (``sustained_until``)."""
        end = sustained_until(top_chunk, lambda n: pools.prefill(n).capacity_rps(x), rate)
        if osl > 1:
            end = min(end, sustained_until(top_batch, lambda n: pools.decode(n).capacity_rps(y, osl), rate))
        return end

    caps = {
        "prefill": pools.prefill(top_chunk).capacity_rps(x),
        "kv_transfer": kv.capacity_rps,
        "decode": pools.decode(top_batch).capacity_rps(y, osl),
    }
    bottleneck = min(caps, key=lambda k: caps[k])
    rate = caps[bottleneck]
    pf, dc, e2e0 = settled(rate)

    def carried(r: float) -> bool:  # C requests in flight carry r at the chunk and batch r needs (Little)
        return r * settled(r)[2] <= C * NS_PER_S

    if not carried(rate):
        # The concurrency binds: the highest rate C requests in flight carry (``most_carried``).
        bottleneck, rate = "concurrency", most_carried(settled, rate, C * NS_PER_S, segment_end)
        pf, dc, e2e0 = settled(rate)
    admit = admission_ns(profile, dc.round_ns, C) if osl > 1 else 0
    return SteadyState(pf, dc, rate, bottleneck, e2e0, overhead_ns, queue_ns, admit)


Settled = tuple[PrefillStep, DecodeStep, int]  # each pool's step at the rate, and the unloaded e2e (ns)


def most_carried(settled: Callable[[float], Settled], top: float, budget: float,
                 segment_end: Callable[[float], float]) -> float:
    """The highest rate ``X`` below ``top`` (which is not carried) that ``budget`` = C x 10^9 requests-ns in
    flight carry: ``X x e2e0(X) <= budget``, ``settled(X)`` giving the steps and ``e2e0``. ``X x e2e0(X)``
    grows with ``X`` (a faster rate needs a bigger chunk and batch, each a longer step), so a bisection finds it,
    as it did alone (about 50 settled rates, to float resolution). Three facts make it a few:

    - the chunk and the batch ``settled`` picks never fall as the rate grows (each a bisection over one array
      against a rising threshold), so the rates at one pair of steps are an interval, at one ``e2e0``: where
      both ends of the bracket run the same steps, the answer is the largest float ``r`` with ``r x e2e0 <=
      budget``;
    - from an end that is not carried, ``budget / e2e0`` there is carried (its own ``e2e0`` is no more), so the
      low end jumps there;
    - the low end's interval ends where its chunk or batch stops sustaining the rate (``segment_end``, checked
      by settling that rate and the next float): if its own ``e2e0`` carries that far, the answer is that end
      or lies past it; if not, it lies within.

    The answer is the bisection's limit itself, where the bisection stopped within 10^-15 below it."""

    def carried(r: float, state: Settled) -> bool:
        return r * state[2] <= budget

    def same(a: Settled, b: Settled) -> bool:
        return a[0] is b[0] and a[1] is b[1]

    lo, hi = 0.0, top
    low, high = settled(lo), settled(hi)
    for _ in range(RATE_BISECTIONS):
        jump = budget / high[2]
        if lo < jump < hi:
            state = settled(jump)
            if carried(jump, state):
                lo, low = jump, state
        if same(low, high):
            return _largest_within(lo, hi, low[2], budget)
        end = segment_end(lo)
        if lo <= end < hi and same(settled(end), low):
            above = math.nextafter(end, math.inf)
            state = settled(above)
            if not same(state, low):  # low's steps run exactly up to ``end``
                if not carried(end, low):
                    return _largest_within(lo, above, low[2], budget)
                if not carried(above, state):
                    return end
                lo, low = above, state
        mid = (lo + hi) / 2
        if hi - lo <= hi * 1e-15 or not lo < mid < hi:
            break
        mid = min(mid, budget / low[2])  # no rate above it is carried: its e2e0 is at least low's
        if mid <= lo:
            break  # lo carries all low's e2e0 allows, and no rate above it is carried
        state = settled(mid)
        if carried(mid, state):
            lo, low = mid, state
        else:
            hi, high = mid, state
    return lo


def _largest_within(lo: float, hi: float, e2e_ns: int, budget: float) -> float:
    """The largest float ``r`` in ``[lo, hi)`` with ``r x e2e_ns <= budget``, ``lo`` being one (the product
    grows with ``r`` in floats too)."""
    r = min(max(budget / e2e_ns, lo), math.nextafter(hi, 0.0))
    while r > lo and r * e2e_ns > budget:
        r = math.nextafter(r, 0.0)
    while (up := math.nextafter(r, math.inf)) < hi and up * e2e_ns <= budget:
        r = up
    return r


def pool_plan(problem: Problem, pool: Pool, prediction: Prediction, batch: int) -> Plan:
    """The pool as a plan of ``workers`` replicas, so the catalog can judge it (memory included)."""
    role = role_problem(problem, pool.role, batch)
    layout = pool.pool_layout().model_copy(update={"batch": batch})
    return Plan(problem=role, layout=layout, prediction=prediction, status="evaluated")


def evaluate_disagg(problem: Problem, layout: DisaggLayout, profile: Profile | None = None,
                    queue_share: float | None = None) -> DisaggPlan:
    """Price ``layout`` for ``problem`` at its concurrency (module docstring); ``queue_share``, if given,
    replaces the profile's ``ttft_queue_share`` (the accuracy benchmark's refit tries others)."""
    profile = engine_profile(problem, profile)
    osl, C = problem.workload.osl, layout.concurrency
    kv = kv_transfer(problem, layout, profile)
    state = steady_state(problem, layout, kv, profile, queue_share)
    pf, dc = state.prefill, state.decode
    e2e_ns = C * NS_PER_S / state.rate_rps  # Little's law: C requests in flight at X per second
    tpot_ns = dc.round_ns if osl > 1 else 0
    ttft_ns = e2e_ns - (osl - 1) * tpot_ns
    waiting_ns = max(0.0, e2e_ns - state.unloaded_e2e_ns) + state.queue_ns  # the bottleneck's and the clump's
    tokens_per_s = state.rate_rps * osl
    metrics = Metrics(
        ttft_ms=ttft_ns / 1e6,
        tpot_ms=tpot_ns / 1e6,
        decode_step_ms=dc.round_ns / 1e6,
        e2e_ms=e2e_ns / 1e6,
        output_tokens_per_s=tokens_per_s,
        output_tokens_per_s_per_gpu=tokens_per_s / layout.num_gpus,
        output_tokens_per_s_per_user=1e9 / tpot_ns if tpot_ns else math.inf,
        batch=C,
    )
    prediction = DisaggPrediction(
        metrics=metrics,
        prefill=PrefillRole(chunk=pf.chunk, prefill_ms=pf.pass_ns / 1e6, slowest_stage_ms=pf.slowest_ns / 1e6,
                            capacity_rps=pf.capacity_rps(layout.prefill.workers)),
        decode=DecodeRole(batch=dc.batch, step_ms=dc.round_ns / 1e6,
                          capacity_rps=dc.capacity_rps(layout.decode.workers, osl)),
        kv=kv,
        waiting_ms=waiting_ns / 1e6,
        request_overhead_ms=state.overhead_ns / 1e6,
        admission_ms=state.admission_ns / 1e6,
        throughput_rps=state.rate_rps,
        bottleneck=state.bottleneck,
        profile=profile.name,
    )
    return DisaggPlan(
        problem=problem,
        layout=layout,
        prediction=prediction,
        prefill_plan=pool_plan(problem, layout.prefill, pf.prediction, pf.chunk * layout.prefill.layout.pp),
        decode_plan=pool_plan(problem, layout.decode, dc.prediction, dc.batch),
    )


__all__ = ["admission_ns", "engine_profile", "evaluate_disagg", "kv_share_bytes", "kv_transfer", "request_overhead_ns",
           "role_problem", "steady_state"]
