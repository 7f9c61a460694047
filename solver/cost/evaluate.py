"""``evaluate(problem, layout) -> Prediction``: the cost model end to end, in pure Python.

Layer times are rounded to integer nanoseconds per layer kind and summed per stage, exactly as
the solver's tables do, so the solver's objective for a plan equals what ``evaluate`` says of it.
A MoE layer whose experts are unevenly loaded (``Layout.moe_load_factor``: per MoE layer, the
most-loaded GPU over the mean, set from an expert placement) is priced at its own factor, so a
stage's time is the sum of its layers' integer times; with no factors, or all of them 1, this is
the per-kind sum above. The solver's tables price every MoE layer of a shape at one factor
(``tables.search_load_factor``), so they agree with this exactly whenever all layers share it.

Definitions (DESIGN.md "Cost model", 004 §2-§8), at concurrency C = the batch (sequences in flight
per replica, closed loop, steady state):
- a decode **round** (``decode_step``) moves every sequence of the replica one token: with S stages
  and ``mu`` = min(S, C) microbatches of ``m`` = ceil(C / mu) sequences, round = max(sum of stage
  times + sends, mu x the slowest stage) — one microbatch's critical path, or the busiest stage,
  whichever is longer;
- prompts are prefilled in **chunks** of ``p`` = min(m, max_num_tokens // ISL) prompts (at least 1);
- **TPOT** as users measure it: while a request decodes, the other C - 1 requests finish and are
  replaced at one per OSL rounds each, and their prompts are prefilled chunk after chunk in the same
  steps, so a token costs ``tpot = round + ceil((C - 1) x slowest chunk stage / (OSL x p))``;
- **TTFT** as users measure it: the prompt's own share of its chunk through every stage
  (``ceil(prefill / p)``: in closed-loop steady state arrivals are staggered, so a prompt is not
  prefilled with ``p`` others that arrived with it); under load (C > 1) its ``n`` = ceil(ISL / the
  token budget the decode tokens leave) chunk steps each also carry a decode round, and the scheduler
  runs ``w`` more iterations between its arrival and its first token (``w`` = the profile's
  ``ttft_wait_steps``: half a step on arrival, 0.5, plus what the engine adds, e.g. an overlapped
  scheduler's step), so it waits ``ceil((n + w) x round)``; it queues behind the prefill of a share ``k``
  of the other C - 1 prompts in flight, one slowest chunk stage per ``p`` of them
  (``ceil(k x (C - 1) x slowest chunk stage / p)``, ``k`` = the profile's ``ttft_queue_share``: the
  clump of arrivals a closed loop's burst start leaves, not a steady-state queue, which at the
  measured runs' prefill utilisation would be a few milliseconds, benchmarks/accuracy/README.md); and
  the serving stack adds its fixed cost per request (``request_overhead_ms``: front end, tokenisation,
  scheduling). At C = 1 it is the bare prefill plus that fixed cost, and TPOT the bare round;
- an engine whose prefill does **not mix with decode** (``prefill_mixes_with_decode`` false: SGLang's
  default scheduler runs a batch of the waiting prompts as a step of its own, before any decode step)
  returns every first token of a prefill batch at the batch's end, and pauses decode meanwhile. So under
  load the prompt pays its whole batch: itself and the ``k`` x (C - 1) prompts gathered while it waits,
  at most ``p`` (``own = ceil(min(p, 1 + k x (C - 1)) x prefill / p)``), and no decode round rides on its
  steps (``wait = ceil(w x round)``, only the iterations before its batch); the queue, the fixed cost and
  TPOT are as above (decode paused for a batch or sharing a step with it costs the same time in this model);
- an engine that **reserves a request's whole sequence** (``reserves_whole_sequence``: TensorRT-LLM's default
  GUARANTEED_NO_EVICT capacity policy starts a request only with KV cache free for its prompt and every
  output token) runs at most H = the largest batch whose whole sequences fit memory; at C > H the steps
  above are priced at H and the other users wait for a slot: C users cycling through H slots held e2e_H
  each wait ``ceil((C - H) x e2e_H / H)`` (Little's law), added to TTFT and e2e, so throughput is the held
  batch's. The solver's plans fit memory (C <= H), so for them this adds nothing;
- **e2e** = TTFT + (OSL - 1) x TPOT; **throughput** = dp x C x OSL / e2e (Little's law, exactly).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from shardplan.hardware.profile import Profile
from shardplan.models import ModelSpec
from shardplan.models.errors import SpecError
from shardplan.rules.capacity import engine_batch_limit
from shardplan.rules.layout import Layout
from shardplan.rules.operators import Op, Phase
from shardplan.rules.prediction import MemoryReport, Metrics, Prediction, StageTiming, within_limit
from shardplan.rules.problem import Problem
from shardplan.rules.problem import memory_limit_gib as memory_limit_gib  # re-exported; MEM-001 quotes it too
from shardplan.rules.problem import resolve_profile as resolve_profile
from shardplan.solver.cost.memory import GIB, StageMemory, stage_memory
from shardplan.solver.cost.operators import CostContext, LayerKind, Step, layer_kind
from shardplan.solver.cost.stage import stage_shape

NS_PER_S = 1e9


def kind_counts(model: ModelSpec, layers: range) -> Counter[LayerKind]:
    return Counter(dict(_kind_counts(model, layers.start, layers.stop)))


@lru_cache(maxsize=4096)
def _kind_counts(model: ModelSpec, start: int, stop: int) -> tuple[tuple[LayerKind, int], ...]:
    return tuple(Counter(layer_kind(model, i) for i in range(start, stop)).items())


def decode_context(problem: Problem) -> int:
    """Keys an average decode step attends to: the prompt and half the output."""
    return problem.workload.isl + problem.workload.osl // 2


def microbatching(stages: int, batch: int) -> tuple[int, int]:
    """(microbatches in flight, sequences per microbatch) of a pipeline of ``stages``."""
    mu = min(stages, batch)
    return mu, math.ceil(batch / mu)


def prefill_chunk(problem: Problem, profile: Profile, micro: int) -> int:
    """Prompts prefilled together: a microbatch's worth, within the engine's token budget."""
    return max(1, min(micro, profile.max_num_tokens // problem.workload.isl))


def prefill_steps(problem: Problem, profile: Profile, micro: int, attn_dp: int) -> int:
    """Chunk steps one prompt needs under load: its ISL tokens at the token budget each step leaves
    after an attention group's decode tokens (ceil(micro / attn_dp)); engines keep at least half the
    budget for prefill (the profiles' batch limits sit far below their token budgets)."""
    budget = profile.max_num_tokens
    left = max(budget - -(-micro // attn_dp), -(-budget // 2))
    return -(-problem.workload.isl // left)


PER_MILLE = 1000  # ttft_queue_share enters the integer model in thousandths
WAIT_DIV = 10  # ttft_wait_steps enters the integer model in tenths of a decode round


@dataclass(frozen=True)
class ServingStack:
    """What a request's TTFT carries beyond the engine's steps, in the integers the solver uses: the
    profile's ``ttft_queue_share`` in thousandths, ``request_overhead_ms`` in nanoseconds, whether
    its scheduler mixes prefill chunks into decode steps (``prefill_mixes_with_decode``) and its
    ``ttft_wait_steps`` in tenths of a decode round (5: half a step on arrival)."""

    queue_per_mille: int
    overhead_ns: int
    mixes: bool = True
    wait_steps_tenths: int = WAIT_DIV // 2

    @classmethod
    def of(cls, profile: Profile) -> ServingStack:
        return _serving_stack(profile)

    @classmethod
    def _read(cls, profile: Profile) -> ServingStack:
        return cls(
            round(profile.ttft_queue_share * PER_MILLE), round(profile.request_overhead_ms * 1e6),
            profile.prefill_mixes_with_decode, round(profile.ttft_wait_steps * WAIT_DIV),
        )

    def batch_per_mille(self, batch: int, chunk: int) -> int:
        """Thousandths of a prompt in the prefill batch a prompt pays for: its own share of the chunk
        (1000) when prefill mixes with decode; else itself and the queued share of the other C - 1,
        at most the chunk's ``chunk`` prompts."""
        if self.mixes:
            return PER_MILLE
        return min(PER_MILLE * chunk, PER_MILLE + self.queue_per_mille * (batch - 1))

    def wait_tenths(self, steps: int) -> int:
        """Tenths of a decode round a prompt waits under load: its ``steps`` chunk steps' rounds and the
        scheduler's ``ttft_wait_steps`` when prefill mixes with decode; only the latter when it does not."""
        return WAIT_DIV * steps + self.wait_steps_tenths if self.mixes else self.wait_steps_tenths


NO_STACK = ServingStack(0, 0)  # the bare engine: no queue share, no fixed cost per request


@lru_cache(maxsize=64)
def _serving_stack(profile: Profile) -> ServingStack:
    """``ServingStack.of``, once per profile (a profile's hash is computed once): read for every ``evaluate`` and
    every decode admission a disaggregated walk prices (600,000 on DeepSeek-V3 over 64 GPUs)."""
    return ServingStack._read(profile)


@dataclass(frozen=True)
class UnderLoad:
    """Latency as users measure it at concurrency C, in integer nanoseconds (DESIGN.md)."""

    decode_step_ns: int  # one decode round, no prefill
    prefill_share_ns: int  # the other requests' prefill each token shares a step with
    own_prefill_ns: int  # the prompt's share of its chunk through every stage (its batch's, not mixing)
    wait_ns: int  # the chunk steps' decode rounds (none, not mixing) and the scheduler's wait steps (0 at C = 1)
    queue_ns: int  # the other prompts' prefill it waits behind (0 at C = 1)
    overhead_ns: int  # the serving stack's fixed cost per request
    ttft_ns: int
    tpot_ns: int
    e2e_ns: int


def under_load(
    prefill_ns: int, round_ns: int, slowest_chunk_ns: int, batch: int, osl: int, chunk: int, steps: int,
    stack: ServingStack,
) -> UnderLoad:
    """The user-measured latencies from one plan's integer times (the solver encodes exactly this):
    ``prefill_ns`` the prompt's chunk through every stage, ``round_ns`` a decode round, the slowest
    stage's chunk, C = ``batch``, ``chunk`` prompts per chunk, ``steps`` chunk steps per prompt,
    ``stack`` the profile's queue share, fixed cost per request and wait steps.

    >>> under_load(100, 10, 40, 1, 5, 1, 1, NO_STACK)  # one request: bare prefill and rounds
    UnderLoad(decode_step_ns=10, prefill_share_ns=0, own_prefill_ns=100, wait_ns=0, queue_ns=0, overhead_ns=0, \
ttft_ns=100, tpot_ns=10, e2e_ns=140)
    >>> under_load(100, 10, 40, 3, 5, 1, 1, NO_STACK).tpot_ns  # 10 + ceil(2 x 40 / 5)
    26
    >>> load = under_load(100, 10, 40, 3, 5, 2, 1, ServingStack(250, 7))  # C = 3, chunks of 2 prompts
    >>> load.own_prefill_ns, load.wait_ns, load.queue_ns  # ceil(100 / 2), ceil(3 x 10 / 2), ceil(0.25 x 2 x 40 / 2)
    (50, 15, 10)
    >>> load.ttft_ns  # 50 + 15 + 10 + 7
    82
    >>> apart = under_load(100, 10, 40, 3, 5, 2, 1, ServingStack(250, 7, mixes=False))  # prefill in batches of its own
    >>> apart.own_prefill_ns, apart.wait_ns, apart.ttft_ns  # ceil(1.5 x 100 / 2), ceil(10 / 2), 75 + 5 + 10 + 7
    (75, 5, 97)
    >>> slow = under_load(100, 10, 40, 3, 5, 2, 1, ServingStack(250, 7, wait_steps_tenths=23))  # 2.3 steps waited
    >>> slow.wait_ns, slow.ttft_ns  # ceil((1 + 2.3) x 10), 50 + 33 + 10 + 7
    (33, 100)
    """
    share = -(-(batch - 1) * slowest_chunk_ns // (osl * chunk))
    own = -(-stack.batch_per_mille(batch, chunk) * prefill_ns // (PER_MILLE * chunk))
    wait = 0 if batch <= 1 else -(-stack.wait_tenths(steps) * round_ns // WAIT_DIV)
    queue = -(-stack.queue_per_mille * (batch - 1) * slowest_chunk_ns // (PER_MILLE * chunk))
    ttft, tpot = own + wait + queue + stack.overhead_ns, round_ns + share
    return UnderLoad(round_ns, share, own, wait, queue, stack.overhead_ns, ttft, tpot, ttft + (osl - 1) * tpot)


def slots_held(problem: Problem, layout: Layout, profile: Profile) -> int:
    """Sequences per replica the engine runs at once: the layout's batch, unless the profile's engine admits a
    request only with KV cache for its whole sequence (``reserves_whole_sequence``) and that batch does not fit
    memory; then the largest batch that does (at least one: a layout holding no sequence is priced as stated,
    and its memory report says it does not fit). The solver's plans always fit, so for them this is the batch."""
    if not profile.reserves_whole_sequence or fits(problem, layout, profile):
        return layout.batch
    return max(1, max_batch(problem, layout, profile))


def slot_wait_ns(concurrency: int, held: int, e2e_held_ns: int) -> int:
    """The wait for a slot of C = ``concurrency`` closed-loop users sharing ``held`` slots, each held for
    ``e2e_held_ns`` (a request's end-to-end at the held batch). By Little's law the slots serve held /
    e2e requests per unit time, so a user's cycle is C x e2e / held, of which it waits the rest:
    ceil((C - held) x e2e / held); 0 when every user has a slot.

    >>> slot_wait_ns(4, 4, 1000), slot_wait_ns(6, 4, 1000), slot_wait_ns(8, 4, 1000)
    (0, 500, 1000)
    """
    return -(-(concurrency - held) * e2e_held_ns // held) if concurrency > held else 0


@dataclass(frozen=True)
class PhaseTable:
    """Integer nanoseconds of one step of each layer kind, and of the model's two ends."""

    layer_ns: dict[LayerKind, int]
    layer_ops_s: dict[LayerKind, dict[Op, float]]
    first_ns: int
    first_ops_s: dict[Op, float]
    last_ns: int
    last_ops_s: dict[Op, float]
    # _ops_us[(counts' items in order, first, last)]: what stage_ops_us summed (phase_table shares a table
    # among evaluate calls, and their stages repeat).
    _ops_us: dict[tuple[Any, ...], dict[str, float]] = field(default_factory=dict, compare=False, repr=False)

    def stage_ns(self, counts: Counter[LayerKind], first: bool, last: bool) -> int:
        total = sum(n * self.layer_ns[k] for k, n in counts.items())
        return total + (self.first_ns if first else 0) + (self.last_ns if last else 0)

    def stage_ops_us(self, counts: Counter[LayerKind], first: bool, last: bool) -> dict[str, float]:
        """``_stage_ops_us`` of a stage whose layers are all priced by kind, summed once per table (the
        order of ``counts`` is part of the key: it is the order the floats are added in); a copy, so a
        caller may keep or change it."""
        key = (tuple(counts.items()), first, last)
        found = self._ops_us.get(key)
        if found is None:
            found = self._ops_us[key] = _stage_ops_us(self, counts, first, last)
        return dict(found)


def phase_table(ctx: CostContext, step: Step, kinds: list[LayerKind], load_factor: float = 1.0) -> PhaseTable:
    """The step's table for the kinds, memoised: ``evaluate`` prices the same step again for each batch
    of a decode worker's search (its prefill chunk) and each bisection probe that lands on the same
    microbatch, half of its tables in the speed case. Readers never change a table."""
    key = (ctx.model, ctx.cluster, ctx.profile, ctx.shape, ctx.extra_slots, step, tuple(kinds), load_factor)
    table = _PHASE_TABLES.get(key)
    if table is None:
        if len(_PHASE_TABLES) >= PHASE_TABLES_KEPT:
            _PHASE_TABLES.clear()
        table = _PHASE_TABLES[key] = _priced_table(ctx, step, kinds, load_factor)
    return table


# _PHASE_TABLES[(model, cluster, profile, shape, extra slots, step, kinds, load factor)]: what phase_table
# priced: everything CostContext reads, so an equal key prices to an equal table.
_PHASE_TABLES: dict[tuple[Any, ...], PhaseTable] = {}
PHASE_TABLES_KEPT = 8192  # a few KB each; the fitter's candidate profiles would grow it without bound


def _priced_table(ctx: CostContext, step: Step, kinds: list[LayerKind], load_factor: float) -> PhaseTable:
    layer_ops_s = {k: ctx.layer_ops_s(k, step, load_factor if k.moe else 1.0) for k in kinds}
    first_ops_s, last_ops_s = ctx.embedding_ops_s(step), ctx.lm_head_ops_s(step)
    return PhaseTable(
        layer_ns={k: round(sum(ops.values()) * NS_PER_S) for k, ops in layer_ops_s.items()},
        layer_ops_s=layer_ops_s,
        first_ns=round(sum(first_ops_s.values()) * NS_PER_S),
        first_ops_s=first_ops_s,
        # At least 1 ns: every step ends at the last stage (logits, sampling), so no step is priced at zero time. A
        # config of hidden size 1 with a profile file of no fixed costs priced every step at 0 ns, and each rate
        # (tokens/s, requests/s) divided by it: ZeroDivisionError, exit 3. Any real step takes microseconds.
        last_ns=max(1, round(sum(last_ops_s.values()) * NS_PER_S)),
        last_ops_s=last_ops_s,
    )


def _stage_ops_us(
    table: PhaseTable, counts: Counter[LayerKind], first: bool, last: bool, layers: tuple[dict[Op, float], ...] = ()
) -> dict[str, float]:
    """Microseconds per operator over a stage: ``counts`` layers priced by kind, plus ``layers``
    priced one by one (seconds per operator each)."""
    ops: defaultdict[Op, float] = defaultdict(float)
    for kind, n in counts.items():
        for name, seconds in table.layer_ops_s[kind].items():
            ops[name] += n * seconds * 1e6
    for layer_ops_s in layers:
        for name, seconds in layer_ops_s.items():
            ops[name] += seconds * 1e6
    for flag, extra in ((first, table.first_ops_s), (last, table.last_ops_s)):
        if flag:
            for name, seconds in extra.items():
                ops[name] += seconds * 1e6
    return {name.value: round(us, 3) for name, us in sorted(ops.items()) if us > 0}


def layer_load_factors(model: ModelSpec, layout: Layout) -> dict[int, float]:
    """``factors[layer]``: the layout's max/mean load of MoE ``layer`` (global index), for the layers
    whose factor is not 1; empty under uniform routing (``moe_load_factor`` None)."""
    factors = layout.moe_load_factor
    if not factors:
        return {}
    moe_layers = model.moe.layers if model.moe else ()
    if len(factors) != len(moe_layers):
        raise SpecError("moe_load_factor", f"{len(factors)} factors for {len(moe_layers)} MoE layers")
    for layer, f in zip(moe_layers, factors, strict=True):
        if not (math.isfinite(f) and f >= 1 - 1e-9):
            raise SpecError("moe_load_factor", f"layer {layer}: max/mean load {f} is not a finite number >= 1")
    return {layer: f for layer, f in zip(moe_layers, factors, strict=True) if f != 1.0}


class LoadedLayers:
    """A ``PhaseTable`` (priced at load factor 1) with the MoE layers that carry their own factor
    priced one by one: per stage, the sum of every layer's integer nanoseconds.

    ``layer_ops_s(layer)`` is what a per-layer consumer (the DAG builder) should read instead of
    ``table.layer_ops_s[kind]``; it is the kind's entry for a layer without a factor.
    """

    def __init__(self, ctx: CostContext, step: Step, table: PhaseTable, factors: Mapping[int, float]):
        self.ctx, self.step, self.table, self.factors = ctx, step, table, factors
        # _priced[(kind, factor)]: (ns, ops) of one layer; zipf-like profiles repeat factors.
        self._priced: dict[tuple[LayerKind, float], tuple[int, dict[Op, float]]] = {}

    def _at(self, layer: int) -> tuple[LayerKind, float | None]:
        kind = layer_kind(self.ctx.model, layer)
        return kind, self.factors.get(layer) if kind.moe else None

    def _price(self, kind: LayerKind, factor: float) -> tuple[int, dict[Op, float]]:
        key = (kind, factor)
        if key not in self._priced:
            ops = self.ctx.layer_ops_s(kind, self.step, factor)
            self._priced[key] = (round(sum(ops.values()) * NS_PER_S), ops)
        return self._priced[key]

    def layer_ops_s(self, layer: int) -> dict[Op, float]:
        kind, factor = self._at(layer)
        return self.table.layer_ops_s[kind] if factor is None else self._price(kind, factor)[1]

    def layer_ns(self, layer: int) -> int:
        kind, factor = self._at(layer)
        return self.table.layer_ns[kind] if factor is None else self._price(kind, factor)[0]

    def stage_ns(self, layers: range, counts: Counter[LayerKind], first: bool, last: bool) -> int:
        """The table's per-kind sum, corrected layer by layer where a factor applies (exact)."""
        total = self.table.stage_ns(counts, first, last)
        for layer in self._loaded(layers):
            kind = layer_kind(self.ctx.model, layer)
            total += self.layer_ns(layer) - self.table.layer_ns[kind]
        return total

    def stage_ops_us(self, layers: range, counts: Counter[LayerKind], first: bool, last: bool) -> dict[str, float]:
        """Microseconds per operator summed over the stage, as ``_stage_ops_us``."""
        loaded = self._loaded(layers)
        if not loaded:
            return self.table.stage_ops_us(counts, first, last)
        plain = Counter(counts)
        for layer in loaded:
            plain[layer_kind(self.ctx.model, layer)] -= 1
        return _stage_ops_us(self.table, +plain, first, last, tuple(self.layer_ops_s(layer) for layer in loaded))

    def _loaded(self, layers: range) -> list[int]:
        if not self.factors:
            return []  # uniform routing, the usual case: no need to look at each layer
        return [layer for layer in layers if layer in self.factors]


class _Evaluations:
    """How many times ``evaluate`` and ``decode_round_ns`` ran in this process: the same for the same input on any
    machine and at any load, so the pure-Python searches count their pricing as work by them
    (``search_base.Deadline``)."""

    count = 0
    rounds = 0


def evaluations() -> int:
    """``evaluate`` calls so far in this process (a search reads the difference over its own work)."""
    return _Evaluations.count


def round_pricings() -> int:
    """``decode_round_ns`` calls so far in this process (as ``evaluations``)."""
    return _Evaluations.rounds


def evaluate(problem: Problem, layout: Layout, profile: Profile | None = None) -> Prediction:
    """Predict TTFT, TPOT, throughput and per-GPU memory of ``layout`` for ``problem``
    (priced with ``profile`` if given, else the problem's or the GPU's default profile)."""
    _Evaluations.count += 1
    return prediction_of(problem, layout, profile)


def decode_round_ns(problem: Problem, layout: Layout, profile: Profile | None = None) -> int:
    """``evaluate``'s decode round (``metrics.decode_step_ms``) in integer nanoseconds, the same integer, without
    pricing the prefill, the memory or the operators' breakdown: a disaggregated decode worker's batch search asks
    only this, about ten times per layout (over half of a 512-GPU solve's ``evaluate`` time went to the rest).
    Counted apart (``round_pricings``): a search charges it its own cost, a fraction of a whole ``evaluate``'s."""
    _Evaluations.rounds += 1
    priced = _Priced.of(problem, layout, resolve_profile(problem, profile))
    return priced.round_ns(priced.decode_stages(problem))


def prediction_of(problem: Problem, layout: Layout, profile: Profile | None = None) -> Prediction:
    """``evaluate``, not counted: for a price whose pricing was counted already (a decode worker's prediction, read
    only for the plans checked, after ``decode_round_ns`` counted its round)."""
    wl = problem.workload
    profile = resolve_profile(problem, profile)
    memory = memory_reports(problem, layout, profile)  # at the stated batch: whether it holds every sequence
    concurrency = layout.batch
    priced = _Priced.of(problem, layout, profile)
    layout, ctx, factors, counts = priced.layout, priced.ctx, priced.factors, priced.counts
    batch, S, mu, micro = layout.batch, layout.pp, priced.mu, priced.micro
    chunk = prefill_chunk(problem, profile, micro)
    chunk_step = Step(Phase.PREFILL, chunk, wl.isl, wl.isl)
    chunk_table = LoadedLayers(ctx, chunk_step, phase_table(ctx, chunk_step, priced.kinds), factors)
    decode = priced.decode_stages(problem)

    timings, chunk_ns, send_chunk = [], [], []
    for s in range(S):
        first, last = s == 0, s == S - 1
        gpus = layout.stage_gpus(0, s)
        layers = layout.stage_layers(s)
        chunk_ns.append(chunk_table.stage_ns(layers, counts[s], first, last))
        if last:
            send_chunk.append(0)
        else:
            nxt = layout.stage_gpus(0, s + 1).start
            send_chunk.append(round(ctx.send_recv_s(chunk_step, gpus.start, nxt) * NS_PER_S))
        timings.append(
            StageTiming(
                index=s,
                layers=layout.stages[s],
                gpus=tuple(gpus),
                prefill_ms=chunk_ns[s] / 1e6,
                decode_ms=decode.stage_ns[s] / 1e6,
                send_prefill_ms=send_chunk[s] / 1e6,
                send_decode_ms=decode.send_ns[s] / 1e6,
                prefill_ops_us=chunk_table.stage_ops_us(layers, counts[s], first, last),
                decode_ops_us=decode.table.stage_ops_us(layers, counts[s], first, last),
            )
        )

    round_ns = priced.round_ns(decode)
    slowest_chunk_ns = max(c + x for c, x in zip(chunk_ns, send_chunk, strict=True))
    steps = prefill_steps(problem, profile, micro, layout.attn_dp)
    prefill_ns = sum(chunk_ns) + sum(send_chunk)
    load = under_load(prefill_ns, round_ns, slowest_chunk_ns, batch, wl.osl, chunk, steps, ServingStack.of(profile))
    slot_ns = slot_wait_ns(concurrency, batch, load.e2e_ns)
    ttft_ns, e2e_ns = load.ttft_ns + slot_ns, load.e2e_ns + slot_ns
    tokens_per_s = layout.dp * concurrency * wl.osl * NS_PER_S / e2e_ns
    metrics = Metrics(
        ttft_ms=ttft_ns / 1e6,
        tpot_ms=load.tpot_ns / 1e6,
        decode_step_ms=load.decode_step_ns / 1e6,
        e2e_ms=e2e_ns / 1e6,
        output_tokens_per_s=tokens_per_s,
        output_tokens_per_s_per_gpu=tokens_per_s / layout.num_gpus,
        output_tokens_per_s_per_user=1e9 / load.tpot_ns,
        batch=concurrency,
    )
    return Prediction(
        metrics=metrics,
        stages=tuple(timings),
        memory=memory,
        profile=profile.name,
        microbatches=mu,
        prefill_chunk=chunk,
    )


@dataclass(frozen=True)
class _DecodeStages:
    """One decode round's pieces: its step's table (the operators' breakdown reads it), and per stage its time and
    its send onward."""

    table: LoadedLayers
    stage_ns: list[int]
    send_ns: list[int]


@dataclass(frozen=True)
class _Priced:
    """What ``prediction_of`` and ``decode_round_ns`` both price from: the layout at the batch the engine holds
    (``slots_held``), its cost context, microbatching, load factors and layer kinds per stage."""

    layout: Layout
    ctx: CostContext
    mu: int
    micro: int
    factors: dict[int, float]
    counts: list[Counter[LayerKind]]
    kinds: list[LayerKind]

    @classmethod
    def of(cls, problem: Problem, layout: Layout, profile: Profile) -> _Priced:
        model = problem.model
        held = slots_held(problem, layout, profile)
        if held != layout.batch:  # only an engine that reserves whole sequences, at a batch memory does not hold
            layout = layout.model_copy(update={"batch": held})
        ctx = CostContext(model, problem.cluster, profile, stage_shape(model, layout), problem.redundant_slots)
        mu, micro = microbatching(layout.pp, layout.batch)
        counts = [kind_counts(model, layout.stage_layers(s)) for s in range(layout.pp)]
        kinds = sorted({k for c in counts for k in c}, key=lambda k: (k.moe, k.windowed))
        return cls(layout, ctx, mu, micro, layer_load_factors(model, layout), counts, kinds)

    def decode_stages(self, problem: Problem) -> _DecodeStages:
        layout, ctx, S = self.layout, self.ctx, self.layout.pp
        step = Step(Phase.DECODE, self.micro, 1, decode_context(problem))
        table = LoadedLayers(ctx, step, phase_table(ctx, step, self.kinds), self.factors)
        stage_ns, send_ns = [], []
        for s in range(S):
            stage_ns.append(table.stage_ns(layout.stage_layers(s), self.counts[s], s == 0, s == S - 1))
            if s == S - 1:
                send_ns.append(0)
            else:
                start, nxt = layout.stage_gpus(0, s).start, layout.stage_gpus(0, s + 1).start
                send_ns.append(round(ctx.send_recv_s(step, start, nxt) * NS_PER_S))
        return _DecodeStages(table, stage_ns, send_ns)

    def round_ns(self, decode: _DecodeStages) -> int:
        """A decode round: one microbatch through every stage and send, or ``mu`` times the busiest stage."""
        d, x = decode.stage_ns, decode.send_ns
        return max(sum(d) + sum(x), self.mu * max(a + b for a, b in zip(d, x, strict=True)))


def memory_reports(problem: Problem, layout: Layout, profile: Profile | None = None) -> tuple[MemoryReport, ...]:
    profile = resolve_profile(problem, profile)
    limit, capacity = memory_limit_gib(problem, profile), problem.cluster.gpu.hbm_gib
    return tuple(
        MemoryReport(
            stage=s,
            weights_gib=mem.weights_bytes / GIB,
            kv_cache_gib=mem.kv_cache_bytes / GIB,
            activations_gib=mem.activations_bytes / GIB,
            comm_buffers_gib=mem.comm_buffers_bytes / GIB,
            runtime_gib=mem.runtime_bytes / GIB,
            total_gib=mem.total_bytes / GIB,
            capacity_gib=capacity,
            limit_gib=limit,
        )
        for s, mem in enumerate(_stage_memories(problem, layout, profile, layout.batch))
    )


def _stage_memories(problem: Problem, layout: Layout, profile: Profile, batch: int) -> list[StageMemory]:
    """Bytes on one GPU of each stage of ``layout`` at ``batch`` sequences (whatever its own batch), for
    ``profile``: what ``memory_reports`` reports and ``fits`` judges."""
    model, wl = problem.model, problem.workload
    shape = stage_shape(model, layout)
    prefill_tokens = prefill_chunk(problem, profile, microbatching(layout.pp, batch)[1]) * wl.isl
    return [
        stage_memory(
            model, shape, profile, layout.stage_layers(s), s == 0, s == layout.pp - 1,
            batch, wl.context, prefill_tokens, extra_slots=problem.redundant_slots,
        )
        for s in range(layout.pp)
    ]


def fits(problem: Problem, layout: Layout, profile: Profile | None = None) -> bool:
    return _fits_at(problem, layout, resolve_profile(problem, profile), layout.batch)


def _fits_at(problem: Problem, layout: Layout, profile: Profile, batch: int) -> bool:
    """``fits`` of ``layout`` at ``batch`` sequences, without building the layout at that batch or the
    reports (the batch bisection asks it about ten times per layout)."""
    limit = memory_limit_gib(problem, profile)
    return all(within_limit(mem.total_bytes / GIB, limit) for mem in _stage_memories(problem, layout, profile, batch))


def max_batch(problem: Problem, layout: Layout, profile: Profile | None = None) -> int:
    """Largest batch (concurrent sequences at ISL + OSL) whose memory fits on every stage, within the engine's
    limit in each attention group (BAT-001: ``--max-batch``, else the profile's, times ``attn_dp``, as the search
    and the disaggregated pools count it); 0 if not even one sequence fits. Memory grows with the batch, so a
    bisection finds it."""
    profile = resolve_profile(problem, profile)
    one = layout.model_copy(update={"batch": 1})
    key = (problem, one, _memory_fields(profile))
    found = _MAX_BATCH.get(key)
    if found is not None:
        return found
    if not _fits_at(problem, layout, profile, 1):
        lo = 0
    else:
        lo, hi = 1, layout.attn_dp * engine_batch_limit(problem, profile)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if _fits_at(problem, layout, profile, mid):
                lo = mid
            else:
                hi = mid - 1
    if len(_MAX_BATCH) >= 65536:
        _MAX_BATCH.clear()
    _MAX_BATCH[key] = lo
    return lo


# max_batch[(problem, layout at batch 1, memory fields of the profile)]: memoised largest batch.
# Memory does not depend on the time factors, so the fitter's candidate profiles share entries.
_MAX_BATCH: dict[tuple[Any, ...], int] = {}


def _memory_fields(profile: Profile) -> tuple[Any, ...]:
    """The profile fields that memory_reports and the bisection read."""
    return (
        profile.usable_memory_fraction, profile.runtime_overhead_gib, profile.comm_buffer_gib,
        profile.max_batch, profile.max_num_tokens,
    )


def best_throughput(problem: Problem, layout: Layout, profile: Profile | None = None) -> Prediction | None:
    """The prediction at the batch with the most output tokens/s among those that fit (None if
    nothing fits). Candidates: powers of two up to the maximum batch, and the maximum itself."""
    profile = resolve_profile(problem, profile)
    top = max_batch(problem, layout, profile)
    if top == 0:
        return None
    candidates = sorted({top, *(2**i for i in range(int(math.log2(top)) + 1))})
    best = None
    for b in candidates:
        pred = evaluate(problem, layout.model_copy(update={"batch": b}), profile)
        if best is None or pred.metrics.output_tokens_per_s > best.metrics.output_tokens_per_s:
            best = pred
    return best

