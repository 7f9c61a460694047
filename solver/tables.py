"""Integer cost tables: what the CP-SAT model and the brute-force oracle both read.

Times come from the cost model's own ``phase_table`` (integer nanoseconds per layer kind), so a
plan's objective in the solver is exactly ``evaluate()``'s. Memory is in bytes, each coefficient
rounded up: a plan the tables accept fits in ``evaluate()`` as well.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache

from shardplan.hardware import Tier
from shardplan.hardware.profile import Profile
from shardplan.models.load_profile import ExpertLoadProfile, uniform_profile
from shardplan.rules.base import ShapeRule
from shardplan.rules.catalog import rules_for
from shardplan.rules.operators import Op
from shardplan.rules.problem import Problem
from shardplan.solver.cost.evaluate import (
    NS_PER_S,
    decode_context,
    memory_limit_gib,
    phase_table,
    prefill_chunk,
    prefill_steps,
    resolve_profile,
)
from shardplan.solver.cost.memory import GIB, activation_bytes, end_weight_bytes, layer_kv_bytes, layer_weight_bytes
from shardplan.solver.cost.operators import CostContext, LayerKind, Phase, Step, layer_kind
from shardplan.solver.cost.stage import StageShape, shape_of
from shardplan.solver.placement.fill import fits_in_one_group
from shardplan.solver.placement.plan import best_placement
from shardplan.solver.space import BatchOption, SearchSpace, Shape


@dataclass
class TimeEntry:
    """Nanoseconds of one stage step for one (shape, microbatch)."""

    decode: dict[LayerKind, int]
    prefill: dict[LayerKind, int]
    first_decode: int
    first_prefill: int
    last_decode: int
    last_prefill: int
    send_decode: list[int]  # after slot s, for s = 0 .. max_stages - 2
    send_prefill: list[int]
    chunk: int  # prompts per prefill chunk
    steps: int  # chunk steps one prompt needs under load (evaluate's prefill_steps)
    # Per layer kind, ns each further sequence per attention group adds to a decode step at least:
    # its KV cache streamed through attention, which the cost model prices in proportion to the
    # sequences (operators.py _attention_core), every other operator only growing with them. Rounded
    # down, so a batch range priced at its smallest q bounds its times from below along this slope.
    kv_slope: dict[LayerKind, int] = field(default_factory=dict)


@dataclass
class MemoryEntry:
    """Bytes on one GPU of a stage of one shape."""

    weights: dict[LayerKind, int]  # per layer of the kind
    kv_per_seq: dict[LayerKind, int]  # per layer of the kind, per sequence held
    first: int  # embedding
    last: int  # LM head on a stage without the embedding
    last_with_first: int  # LM head on the only stage (0 when tied: it reuses the embedding)
    fixed: int  # runtime + communication buffers
    logits_per_seq: int  # activation bytes per sequence held (decode logits)

    def end_bytes(self, s: int, S: int) -> int:
        """Bytes slot s of S stages holds for the model's ends: the embedding on the first, the LM head on
        the last (on a single stage it may reuse the embedding's weights)."""
        first, last = s == 0, s == S - 1
        return first * self.first + last * (self.last_with_first if S == 1 else self.last)

    def replica_end_bytes(self, S: int) -> int:
        """The ends' bytes over all S stages of a replica (``end_bytes`` summed over the slots)."""
        return self.first + (self.last_with_first if S == 1 else self.last)


@dataclass
class Tables:
    problem: Problem
    space: SearchSpace
    kinds: list[LayerKind]
    kind_of_layer: list[LayerKind]
    prefix: dict[LayerKind, list[int]]  # prefix[k][i]: layers of kind k among the first i
    limit_bytes: int
    time: dict[tuple[Shape, BatchOption], TimeEntry] = field(default_factory=dict)
    memory: dict[Shape, MemoryEntry] = field(default_factory=dict)
    chunk_activation: dict[tuple[Shape, BatchOption], int] = field(default_factory=dict)
    profile: Profile | None = None
    # Called between pieces of the work (a deadline's check, which raises once it has passed).
    check: Callable[[], None] | None = None
    # Per shape: its cost context and memory entry; per EP degree: the MoE load factor the search prices.
    _contexts: dict[Shape, CostContext] = field(default_factory=dict)
    _load_factors: dict[int, float] = field(default_factory=dict)
    _shape_rules: list[ShapeRule] | None = None
    _forbidden_shapes: dict[Shape, bool] = field(default_factory=dict)  # asked once per priced step: remembered
    _priced: dict[tuple[Shape, int], tuple[TimeEntry, int]] = field(default_factory=dict)

    def price(self, shape: Shape, option: BatchOption) -> TimeEntry:
        """The time entry of (shape, option), priced on first use: the encoding's pairs at build time,
        and any exact option the oracle or the driver asks for later."""
        key = (shape, option)
        if key in self.time:
            return self.time[key]
        # A range and the exact option at its smallest q are priced at the same step: price it once.
        priced = self.step(shape, option.micro)
        self.time[key], self.chunk_activation[key] = priced
        return priced[0]

    def step(self, shape: Shape, micro: int) -> tuple[TimeEntry, int]:
        """(time entry, chunk activation bytes) of a stage step of ``shape`` carrying ``micro`` sequences,
        priced once, without registering a batch option in ``time`` (``bound.pair_rates`` asks for steps
        of batches no option of the search has; ``price`` kept one entry per integer batch)."""
        priced = self._priced.get((shape, micro))
        if priced is None:
            priced = self._price_step(shape, micro)
            self._priced[(shape, micro)] = priced
        return priced

    def _price_step(self, shape: Shape, micro: int) -> tuple[TimeEntry, int]:
        """(time entry, chunk activation bytes) of a stage step of ``shape`` carrying ``micro`` sequences."""
        problem, space, kinds = self.problem, self.space, self.kinds
        model, cluster, wl = problem.model, problem.cluster, problem.workload
        profile = self.profile or resolve_profile(problem)
        if shape not in self._contexts:
            stage = shape_of(model, shape.gpus, shape.tp, shape.sp, shape.attn_dp, shape.expert_tp)
            self._contexts[shape] = CostContext(model, cluster, profile, stage, problem.redundant_slots)
            self.memory[shape] = _memory_entry(problem, profile, stage, kinds, self.kind_of_layer)
        ctx = self._contexts[shape]
        load = self._load_factor(shape)
        chunk = prefill_chunk(problem, profile, micro)
        q = -(-micro // shape.attn_dp)  # sequences per attention group
        dec_step = Step(Phase.DECODE, micro, 1, decode_context(problem))
        pre_step = Step(Phase.PREFILL, chunk, wl.isl, wl.isl)
        dec, pre = phase_table(ctx, dec_step, kinds, load), phase_table(ctx, pre_step, kinds, load)
        sends_d: list[int] = []
        sends_p: list[int] = []
        # A send's time depends on the step and the tier of the link it crosses only, so it is priced once
        # per tier: each boundary priced on its own was a fifth of --rate's bounds on 256 GPUs (fuzz
        # --no-limit run G: 606,692 sends for 24,253 steps).
        by_tier: dict[Tier, tuple[int, int]] = {}
        for s in range(space.max_stages - 1):
            src, dst = s * shape.gpus, (s + 1) * shape.gpus
            if dst >= cluster.num_gpus:  # no such boundary fits in the cluster
                sends_d.append(0)
                sends_p.append(0)
                continue
            tier = ctx.link_tier(src, dst)
            if tier not in by_tier:
                by_tier[tier] = (round(ctx.send_recv_s(dec_step, src, dst) * NS_PER_S),
                                 round(ctx.send_recv_s(pre_step, src, dst) * NS_PER_S))
            sends_d.append(by_tier[tier][0])
            sends_p.append(by_tier[tier][1])
        entry = TimeEntry(
            decode=dec.layer_ns, prefill=pre.layer_ns,
            first_decode=dec.first_ns, first_prefill=pre.first_ns,
            last_decode=dec.last_ns, last_prefill=pre.last_ns,
            send_decode=sends_d, send_prefill=sends_p, chunk=chunk,
            steps=prefill_steps(problem, profile, micro, shape.attn_dp),
            kv_slope={k: _per_sequence_ns(ops[Op.ATTN_CORE], q) for k, ops in dec.layer_ops_s.items()},
        )
        return entry, math.ceil(activation_bytes(model, ctx.shape, profile, 0, chunk * wl.isl))

    def _load_factor(self, shape: Shape) -> float:
        """The MoE load factor ``shape`` is priced at. A shape a rule in force forbids (EP-003's ep past
        the experts, mostly) is never in a plan: only ``explain``'s model, which drops rules, may pick
        it, so it is priced at the factor's floor, 1.0, and its experts are never placed. That placement
        grew with the EP degree (8 experts over 196,608 ranks took 13 s per degree); a floor keeps an
        explanation a true conflict (the shape is priced no dearer than it is), if not always minimal."""
        if self.problem.model.moe is None or self._forbidden(shape):
            return 1.0
        if shape.ep not in self._load_factors:
            self._load_factors[shape.ep] = search_load_factor(self.problem, shape.ep, self.check)
        return self._load_factors[shape.ep]

    def _forbidden(self, shape: Shape) -> bool:
        if shape not in self._forbidden_shapes:
            if self._shape_rules is None:
                self._shape_rules = [r for r in rules_for(self.problem) if isinstance(r, ShapeRule)]
            self._forbidden_shapes[shape] = any(rule.forbids(self.problem, shape) for rule in self._shape_rules)
        return self._forbidden_shapes[shape]

    def layers_of(self, kind: LayerKind) -> int:
        return self.prefix[kind][-1]

    def memory_bound_bytes(self) -> int:
        """An upper bound on any one stage's memory in the encoding: every layer, both ends, the most
        sequences and the largest chunk on one GPU. A cap above it binds nothing, so the limit is
        clamped to it and the memory rows stay far inside CP-SAT's 2^62 (a --mem-cap-gib of 1e9 times
        the stage count overflowed it, made the model invalid, and reading its empty solution crashed)."""
        space, worst = self.space, 1
        # chunk[shape]: its largest chunk activation, in one pass over the options (a pass per shape took
        # 10.8 s of --rate's 20.8 s colocated bounds on 57x72xGB200).
        chunk: dict[Shape, int] = {}
        for (o, _), v in self.chunk_activation.items():
            chunk[o] = max(chunk.get(o, 0), v)
        for o, m in self.memory.items():
            seqs = space.batch_limit if space.decides_batch else space.fixed_seqs_per_gpu(o)
            whole = sum(self.layers_of(k) * (m.weights[k] + m.kv_per_seq[k] * seqs) for k in self.kinds)
            whole += seqs * m.logits_per_seq + m.fixed + m.first + max(m.last, m.last_with_first)
            whole += chunk.get(o, 0)
            worst = max(worst, whole)
        return worst

    def time_bound_ns(self) -> int:
        """An upper bound on any one stage step: the whole model on one stage in the slowest
        entry (a batch range at its largest q along the KV slope), plus every send. Variable domains
        are sized from it (a round is at most max_stages of these) so that no product or objective
        can overflow 64 bits."""
        worst = 1
        for (_, option), e in self.time.items():
            extra = max(0, option.q_hi - option.q)
            decode = {k: ns + extra * e.kv_slope.get(k, 0) for k, ns in e.decode.items()}
            for per_layer, first, last, sends in (
                (decode, e.first_decode, e.last_decode, e.send_decode),
                (e.prefill, e.first_prefill, e.last_prefill, e.send_prefill),
            ):
                whole = sum(self.layers_of(k) * per_layer[k] for k in self.kinds) + first + last + sum(sends)
                worst = max(worst, whole)
        return worst


def _per_sequence_ns(seconds: float, sequences: int) -> int:
    """Whole ns per sequence of an operator priced in proportion to its sequences, rounded down
    (with a margin for the float's last bits)."""
    return max(0, math.floor(seconds * NS_PER_S / sequences * (1 - 1e-9)))


def build_tables(
    problem: Problem,
    space: SearchSpace,
    check: Callable[[], None] | None = None,
    reuse: Tables | None = None,
    lazy: bool = False,
) -> Tables:
    """The tables of ``space``'s pairs. ``check`` runs before each shape is priced: a deadline's,
    which raises once it has passed. ``reuse`` (tables of the same problem) lends the steps it has
    priced already, so a refined space prices only its new points. ``lazy``: price nothing yet (the
    integer-batch search prices the steps it needs through ``price``; no encoding reads these)."""
    model = problem.model
    profile = resolve_profile(problem)
    kind_of_layer = [layer_kind(model, i) for i in range(model.num_layers)]
    kinds = sorted(set(kind_of_layer), key=lambda k: (k.moe, k.windowed))
    prefix = {k: [0] for k in kinds}
    for kind in kind_of_layer:
        for k in kinds:
            prefix[k].append(prefix[k][-1] + (k == kind))
    tables = Tables(
        problem=problem,
        space=space,
        kinds=kinds,
        kind_of_layer=kind_of_layer,
        prefix=prefix,
        limit_bytes=math.floor(memory_limit_gib(problem, profile) * GIB),
        profile=profile,
        check=check,
    )
    if reuse is not None:
        tables._priced, tables._contexts = reuse._priced, reuse._contexts
        tables._load_factors, tables.memory = reuse._load_factors, reuse.memory
    if lazy:
        return tables  # the limit stays unclamped: the clamp only keeps the encoding's rows small
    for shape in space.shapes:
        if check is not None:
            check()
        for option in space.batch_options(shape):
            tables.price(shape, option)
    tables.limit_bytes = min(tables.limit_bytes, tables.memory_bound_bytes())
    return tables


def search_load_factor(problem: Problem, ep: int, check: Callable[[], None] | None = None) -> float:
    """The factor the search prices every MoE layer at for ``ep`` EP ranks: the most-loaded GPU over
    the mean, from the same placement routine the plan will run. Under uniform routing it is exact
    (one layer stands for all; ceil(E / ep) slots per rank may hold replicas that even it out), and in
    closed form where one exists (``uniform_load_factor``). With a routing profile it is the mean over
    the MoE layers of their placements' factors, so the search sees that a wide EP spreads hot experts
    badly; the plan then places each stage's layers and prices each layer at its own factor. The
    layers are placed one at a time, ``check`` (a deadline's) called before each: one layer's
    placement is the most a time limit waits for, and the memory held is one layer's."""
    moe = problem.model.moe
    if moe is None:
        return 1.0
    slots = math.ceil(moe.num_experts / ep) + problem.redundant_slots
    if problem.expert_load is None:
        return _uniform_factor(moe.num_experts, moe.layers[0], ep, slots)
    factors = []
    for layer in problem.expert_load.layers:
        if check is not None:
            check()
        one = _one_layer(problem.expert_load, layer)
        factors.extend(best_placement(one, ep, slots).max_over_mean(one))
    return max(1.0, sum(factors) / len(factors))


def _one_layer(profile: ExpertLoadProfile, layer: int) -> ExpertLoadProfile:
    return ExpertLoadProfile(
        num_experts=profile.num_experts, layers=(layer,), loads=(profile.layer_loads(layer),), source=profile.source
    )


def uniform_load_factor(experts: int, ep: int, slots: int) -> float | None:
    """Most-loaded rank over the mean when ``experts`` equally hot experts are placed over ``ep`` ranks of
    ``slots`` slots, where a closed form gives it; None where only a placement does.

    - 1.0 when ``ep`` divides the experts (each rank takes E / ep whole), or when they fit one group
      (E <= (S - 1) ep + 1: laid end to end and cut into ``ep`` equal pieces, each rank's piece spans
      at most S experts; ``placement/fill.py``). Any redundant slot makes them fit.
    - One slot per rank and ``ep >= E``: each rank serves a single expert's share, the least copied
      expert has floor(ep / E) copies, so the top rank serves 1 / floor(ep / E) of an expert against a
      mean of E / ep (the copies bound of ``placement/bounds.py``, exact with one slot).
    The rest (no redundant slot, ep < E not dividing it) has ep x S < 2E copies: cheap to place.
    These are the cases whose placement grew with ep (and with ep x redundant slots)."""
    if experts % ep == 0 or fits_in_one_group(experts, ep, slots):
        return 1.0
    if slots == 1 and ep >= experts:
        return ep / (experts * (ep // experts))
    return None


@cache
def _uniform_factor(experts: int, layer: int, ep: int, slots: int) -> float:
    closed = uniform_load_factor(experts, ep, slots)
    if closed is not None:
        return closed
    profile = uniform_profile(experts, (layer,), float(experts))
    placed = best_placement(profile, ep, slots)
    return max(1.0, placed.imbalance(profile, layer))


def _memory_entry(
    problem: Problem, profile: Profile, stage: StageShape, kinds: list[LayerKind], kind_of_layer: list[LayerKind]
) -> MemoryEntry:
    model, context, redundant = problem.model, problem.workload.context, problem.redundant_slots
    layer_of = {k: kind_of_layer.index(k) for k in kinds}  # a representative layer of each kind
    last_bytes = math.ceil(end_weight_bytes(model, stage, first=False, last=True))
    return MemoryEntry(
        # Redundant expert slots are memory the search must price, as evaluate() does.
        weights={k: math.ceil(layer_weight_bytes(model, i, stage, redundant)) for k, i in layer_of.items()},
        kv_per_seq={k: math.ceil(layer_kv_bytes(model, i, stage, stage.attn_dp, context)) for k, i in layer_of.items()},
        first=math.ceil(end_weight_bytes(model, stage, first=True, last=False)),
        last=last_bytes,
        last_with_first=0 if model.tie_word_embeddings else last_bytes,
        fixed=math.ceil((profile.runtime_overhead_gib + (profile.comm_buffer_gib if stage.gpus > 1 else 0.0)) * GIB),
        logits_per_seq=math.ceil(activation_bytes(model, stage, profile, stage.attn_dp, 0)),
    )
