"""Memory one GPU of a stage needs: weights, KV cache, activations, buffers, runtime (004 §7).

Weights: attention split by tp, dense FFNs and shared experts by the attention group (tp x sp),
routed experts by expert-parallel slots (ceil(E / ep) per GPU, plus redundant slots), routers and
norms replicated; the embedding on the first stage, the LM head on the last, both vocab-parallel
over the attention group. KV cache: every sequence in flight on this replica at its full
context, split by KV heads up to tp and replicated beyond, split by sp, and per attention group
only for that group's sequences (004 §2.3, §4; DESIGN.md table). Everything in bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from shardplan.hardware.profile import Profile
from shardplan.models import ModelSpec
from shardplan.models.derived import (
    cached_tokens,
    embedding_bytes,
    kv_bytes_per_token_layer,
    layer_bytes,
    lm_head_resident_bytes,
)
from shardplan.solver.cost.operators import ACT_BYTES
from shardplan.solver.cost.stage import StageShape

GIB = 2**30


@dataclass(frozen=True)
class StageMemory:
    """Bytes on one GPU of one stage."""

    weights_bytes: float
    kv_cache_bytes: float
    activations_bytes: float
    comm_buffers_bytes: float
    runtime_bytes: float

    @property
    def total_bytes(self) -> float:
        return (
            self.weights_bytes
            + self.kv_cache_bytes
            + self.activations_bytes
            + self.comm_buffers_bytes
            + self.runtime_bytes
        )


def layer_weight_bytes(model: ModelSpec, layer: int, shape: StageShape, extra_slots: int = 0) -> float:
    """One layer's weights on one GPU of the stage."""
    b = layer_bytes(model, layer)
    attention = b.attention / shape.tp
    if b.num_experts:
        slots = math.ceil(b.num_experts / shape.ep) + extra_slots
        ffn = slots * b.expert / shape.expert_tp + b.shared_experts / shape.group_size
    else:
        ffn = b.dense_ffn / shape.group_size
    return attention + ffn + b.router + b.norms


def layer_kv_bytes(model: ModelSpec, layer: int, shape: StageShape, sequences: int, context: int) -> float:
    """KV cache of one layer on one GPU for ``sequences`` sequences of the replica at ``context``."""
    group_seqs = math.ceil(sequences / shape.attn_dp)
    return (
        group_seqs * cached_tokens(model, layer, context) * kv_bytes_per_token_layer(model) / shape.kv_split / shape.sp
    )


def end_weight_bytes(model: ModelSpec, shape: StageShape, first: bool, last: bool) -> float:
    """Embedding on the first stage, LM head on the last; a tied head shares the embedding's
    matrix only when both sit on the same stage."""
    nbytes = 0.0
    if first:
        nbytes += embedding_bytes(model)
    if last and not (first and model.tie_word_embeddings):
        nbytes += lm_head_resident_bytes(model)
    return nbytes / shape.group_size


def activation_bytes(
    model: ModelSpec, shape: StageShape, profile: Profile, sequences: int, prefill_tokens: int
) -> float:
    """Peak transient activations: the widest intermediate of a prefill chunk, and the logits of
    a decode step (fp32, vocab split over the attention group)."""
    group_tokens = math.ceil(prefill_tokens / shape.attn_dp)
    widest = max(model.intermediate_size, model.moe.expert_intermediate_size if model.moe else 0) / shape.group_size
    hidden = 4 * model.hidden_size + 2 * widest
    chunk = group_tokens * hidden * ACT_BYTES
    logits = math.ceil(sequences / shape.attn_dp) * model.vocab_size / shape.group_size * 4
    return chunk + logits


@lru_cache(maxsize=8192)
def _layers_weight_bytes(model: ModelSpec, shape: StageShape, start: int, stop: int, extra_slots: int) -> float:
    """Sum of ``layer_weight_bytes`` over layers [start, stop) (memoised: the fitter and the
    batch bisection ask for the same stages thousands of times)."""
    return sum(layer_weight_bytes(model, i, shape, extra_slots) for i in range(start, stop))


@lru_cache(maxsize=8192)
def _layers_cached_tokens(model: ModelSpec, start: int, stop: int, context: int) -> int:
    """Tokens one sequence of ``context`` keeps over layers [start, stop): the per-layer factor of
    ``layer_kv_bytes``, summed."""
    return sum(cached_tokens(model, i, context) for i in range(start, stop))


@lru_cache(maxsize=8192)
def _stage_fixed(
    model: ModelSpec, shape: StageShape, start: int, stop: int, first: bool, last: bool, context: int, extra_slots: int
) -> tuple[float, int, float]:
    """What ``stage_memory`` reads that the batch does not change, in one memoised look-up (the batch
    bisection asks for the same stage about ten times): the weight bytes with the model's ends on the
    stage, one sequence's cached tokens over its layers, and the KV bytes per token and layer."""
    weights = _layers_weight_bytes(model, shape, start, stop, extra_slots)
    weights += end_weight_bytes(model, shape, first, last)
    return weights, _layers_cached_tokens(model, start, stop, context), kv_bytes_per_token_layer(model)


def stage_memory(
    model: ModelSpec,
    shape: StageShape,
    profile: Profile,
    layers: range,
    first: bool,
    last: bool,
    sequences: int,
    context: int,
    prefill_tokens: int,
    extra_slots: int = 0,
) -> StageMemory:
    fixed = _stage_fixed(model, shape, layers.start, layers.stop, first, last, context, extra_slots)
    weights, tokens, kv_per_token = fixed
    group_seqs = math.ceil(sequences / shape.attn_dp)
    kv = group_seqs * tokens * kv_per_token
    kv /= shape.kv_split * shape.sp
    talks = shape.gpus > 1
    return StageMemory(
        weights_bytes=weights,
        kv_cache_bytes=kv,
        activations_bytes=activation_bytes(model, shape, profile, sequences, prefill_tokens),
        comm_buffers_bytes=profile.comm_buffer_gib * GIB if talks else 0.0,
        runtime_bytes=profile.runtime_overhead_gib * GIB,
    )
