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

from shardplan.hardware.profile import Profile
from shardplan.models.load_profile import uniform_profile
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

    def layers_of(self, kind: LayerKind) -> int:
        return self.prefix[kind][-1]

    def memory_bound_bytes(self) -> int:
        """An upper bound on any one stage's memory in the encoding: every layer, both ends, the most
        sequences and the largest chunk on one GPU. A cap above it binds nothing, so the limit is
        clamped to it and the memory rows stay far inside CP-SAT's 2^62 (a --mem-cap-gib of 1e9 times
        the stage count overflowed it, made the model invalid, and reading its empty solution crashed)."""
        space, worst = self.space, 1
        for o, m in self.memory.items():
            seqs = max(space.q_values) if space.decides_batch else space.fixed_seqs_per_gpu(o)
            whole = sum(self.layers_of(k) * (m.weights[k] + m.kv_per_seq[k] * seqs) for k in self.kinds)
            whole += seqs * m.logits_per_seq + m.fixed + m.first + max(m.last, m.last_with_first)
            whole += max((v for (s, _), v in self.chunk_activation.items() if s == o), default=0)
            worst = max(worst, whole)
        return worst

    def time_bound_ns(self) -> int:
        """An upper bound on any one stage step: the whole model on one stage in the slowest
        entry, plus every send. Variable domains are sized from it (a round is at most
        max_stages of these) so that no product or objective can overflow 64 bits."""
        worst = 1
        for e in self.time.values():
            for per_layer, first, last, sends in (
                (e.decode, e.first_decode, e.last_decode, e.send_decode),
                (e.prefill, e.first_prefill, e.last_prefill, e.send_prefill),
            ):
                whole = sum(self.layers_of(k) * per_layer[k] for k in self.kinds) + first + last + sum(sends)
                worst = max(worst, whole)
        return worst


def build_tables(problem: Problem, space: SearchSpace, check: Callable[[], None] | None = None) -> Tables:
    """``check`` runs before each shape is priced: a deadline's, which raises once it has passed."""
    model, cluster = problem.model, problem.cluster
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
    )
    wl = problem.workload
    load_factor: dict[int, float] = {}  # per EP degree: one placement of the whole profile each
    for shape in space.shapes:
        if check is not None:
            check()
        stage = shape_of(model, shape.gpus, shape.tp, shape.sp, shape.attn_dp, shape.expert_tp)
        ctx = CostContext(model, cluster, profile, stage, problem.redundant_slots)
        tables.memory[shape] = _memory_entry(problem, profile, stage, kinds, kind_of_layer)
        for option in space.batch_options(shape):
            chunk = prefill_chunk(problem, profile, option.micro)
            dec_step = Step(Phase.DECODE, option.micro, 1, decode_context(problem))
            pre_step = Step(Phase.PREFILL, chunk, wl.isl, wl.isl)
            if shape.ep not in load_factor:
                load_factor[shape.ep] = search_load_factor(problem, shape.ep)
            load = load_factor[shape.ep]
            dec, pre = phase_table(ctx, dec_step, kinds, load), phase_table(ctx, pre_step, kinds, load)
            sends_d: list[int] = []
            sends_p: list[int] = []
            for s in range(space.max_stages - 1):
                src, dst = s * shape.gpus, (s + 1) * shape.gpus
                if dst >= cluster.num_gpus:  # no such boundary fits in the cluster
                    sends_d.append(0)
                    sends_p.append(0)
                    continue
                sends_d.append(round(ctx.send_recv_s(dec_step, src, dst) * NS_PER_S))
                sends_p.append(round(ctx.send_recv_s(pre_step, src, dst) * NS_PER_S))
            tables.time[(shape, option)] = TimeEntry(
                decode=dec.layer_ns, prefill=pre.layer_ns,
                first_decode=dec.first_ns, first_prefill=pre.first_ns,
                last_decode=dec.last_ns, last_prefill=pre.last_ns,
                send_decode=sends_d, send_prefill=sends_p, chunk=chunk,
                steps=prefill_steps(problem, profile, option.micro, shape.attn_dp),
            )
            tables.chunk_activation[(shape, option)] = math.ceil(
                activation_bytes(model, stage, profile, 0, chunk * wl.isl)
            )
    tables.limit_bytes = min(tables.limit_bytes, tables.memory_bound_bytes())
    return tables


def search_load_factor(problem: Problem, ep: int) -> float:
    """The factor the search prices every MoE layer at for ``ep`` EP ranks: the most-loaded GPU over
    the mean, from the same placement routine the plan will run. Under uniform routing it is exact
    (one layer stands for all; ceil(E / ep) slots per rank may hold replicas that even it out). With a
    routing profile it is the mean over the MoE layers of their placements' factors, so the search
    sees that a wide EP spreads hot experts badly; the plan then places each stage's layers and
    prices each layer at its own factor."""
    moe = problem.model.moe
    if moe is None:
        return 1.0
    if problem.expert_load is None:
        return _uniform_factor(moe.num_experts, moe.layers[0], ep, problem.redundant_slots)
    profile = problem.expert_load
    placed = best_placement(profile, ep, math.ceil(moe.num_experts / ep) + problem.redundant_slots)
    factors = placed.max_over_mean(profile)
    return max(1.0, sum(factors) / len(factors))


@cache
def _uniform_factor(experts: int, layer: int, ep: int, redundant: int) -> float:
    profile = uniform_profile(experts, (layer,), float(experts))
    placed = best_placement(profile, ep, math.ceil(experts / ep) + redundant)
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
