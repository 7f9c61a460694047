"""Quantities derived from a ``ModelSpec``: parameters, weight bytes, FLOPs, KV-cache bytes.

Everything here is exact arithmetic on the architecture — no hardware, no efficiencies. Counts
follow the checkpoint: a gated FFN has three matrices, MLA's projections are counted as stored
(down-projections, norms, up-projections), the LM head once when it is tied to the embedding.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from shardplan.models.spec import AttentionKind, ModelSpec


@dataclass(frozen=True)
class LayerParams:
    """Parameters of one transformer block, by component."""

    attention: int  # projections, their biases and norms
    dense_ffn: int  # 0 in a MoE layer
    expert: int  # one routed expert; 0 in a dense layer
    num_experts: int  # routed experts in this layer
    experts_per_token: int
    shared_experts: int  # all shared experts of the layer together
    router: int
    norms: int  # the two RMSNorms around attention and FFN

    @property
    def total(self) -> int:
        return (
            self.attention + self.dense_ffn + self.expert * self.num_experts
            + self.shared_experts + self.router + self.norms
        )

    @property
    def active(self) -> int:
        """Parameters one token passes through."""
        return (
            self.attention + self.dense_ffn + self.expert * self.experts_per_token
            + self.shared_experts + self.router + self.norms
        )

    @property
    def linear_active(self) -> int:
        """Active matrix parameters: each costs 2 FLOPs per token (norms excluded)."""
        return self.active - self.norms


def attention_params(spec: ModelSpec) -> int:
    """Parameters of one attention block: projections, biases, MLA's norms."""
    a, h = spec.attention, spec.hidden_size
    if a.kind is AttentionKind.MLA:
        qk = a.qk_nope_head_dim + a.qk_rope_head_dim
        if a.q_lora_rank:
            q = h * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * a.num_heads * qk
        else:
            q = h * a.num_heads * qk
        kv_down = h * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank
        kv_up = a.kv_lora_rank * a.num_heads * (a.qk_nope_head_dim + a.v_head_dim)
        out = a.num_heads * a.v_head_dim * h
        return q + kv_down + kv_up + out
    q = h * a.num_heads * a.head_dim
    kv = 2 * h * a.num_kv_heads * a.head_dim
    out = a.num_heads * a.v_head_dim * h
    bias = (a.num_heads + 2 * a.num_kv_heads) * a.head_dim if a.qkv_bias else 0
    return q + kv + out + bias


def ffn_params(spec: ModelSpec, width: int) -> int:
    """One FFN (or one expert) of the given width: up (and gate) plus down projection."""
    return (3 if spec.gated_ffn else 2) * spec.hidden_size * width


@cache
def layer_params(spec: ModelSpec, layer: int) -> LayerParams:
    h = spec.hidden_size
    norms = 2 * h
    if spec.is_moe_layer(layer):
        moe = spec.moe
        assert moe is not None
        return LayerParams(
            attention=attention_params(spec),
            dense_ffn=0,
            expert=ffn_params(spec, moe.expert_intermediate_size),
            num_experts=moe.num_experts,
            experts_per_token=moe.experts_per_token,
            shared_experts=moe.num_shared_experts * ffn_params(spec, moe.shared_intermediate_size),
            router=h * moe.num_experts,
            norms=norms,
        )
    return LayerParams(
        attention=attention_params(spec),
        dense_ffn=ffn_params(spec, spec.intermediate_size),
        expert=0,
        num_experts=0,
        experts_per_token=0,
        shared_experts=0,
        router=0,
        norms=norms,
    )


def embedding_params(spec: ModelSpec) -> int:
    return spec.vocab_size * spec.hidden_size


def lm_head_params(spec: ModelSpec) -> int:
    """0 when the LM head reuses the embedding matrix."""
    return 0 if spec.tie_word_embeddings else spec.vocab_size * spec.hidden_size


@dataclass(frozen=True)
class ParameterCounts:
    total: int
    active: int  # per token: every block's active part, the embedding and the LM head
    active_compute: int  # the same without the input embedding table, of which a token reads one row
    embedding: int
    lm_head: int
    attention: int
    dense_ffn: int
    routed_experts: int
    shared_experts: int
    router: int
    norms: int


@cache
def parameter_counts(spec: ModelSpec) -> ParameterCounts:
    layers = [layer_params(spec, i) for i in range(spec.num_layers)]
    emb, head = embedding_params(spec), lm_head_params(spec)
    final_norm = spec.hidden_size
    return ParameterCounts(
        total=sum(p.total for p in layers) + emb + head + final_norm,
        active=sum(p.active for p in layers) + emb + head + final_norm,
        active_compute=sum(p.active for p in layers) + (head or emb) + final_norm,
        embedding=emb,
        lm_head=head,
        attention=sum(p.attention for p in layers),
        dense_ffn=sum(p.dense_ffn for p in layers),
        routed_experts=sum(p.expert * p.num_experts for p in layers),
        shared_experts=sum(p.shared_experts for p in layers),
        router=sum(p.router for p in layers),
        norms=sum(p.norms for p in layers) + final_norm,
    )


@dataclass(frozen=True)
class LayerBytes:
    """Weight bytes of one block, by component, in the model's number formats."""

    attention: float
    dense_ffn: float
    expert: float  # one routed expert
    num_experts: int
    shared_experts: float
    router: float
    norms: float

    @property
    def total(self) -> float:
        return (
            self.attention + self.dense_ffn + self.expert * self.num_experts
            + self.shared_experts + self.router + self.norms
        )


@cache
def layer_bytes(spec: ModelSpec, layer: int) -> LayerBytes:
    """Routers and norms stay 16-bit in every quantised checkpoint we know of."""
    p = layer_params(spec, layer)
    w, e, small = spec.weights_dtype.bytes, spec.expert_dtype.bytes, spec.embedding_dtype.bytes
    return LayerBytes(
        attention=p.attention * w,
        dense_ffn=p.dense_ffn * w,
        expert=p.expert * e,
        num_experts=p.num_experts,
        shared_experts=p.shared_experts * w,
        router=p.router * small,
        norms=p.norms * small,
    )


def embedding_bytes(spec: ModelSpec) -> float:
    return embedding_params(spec) * spec.embedding_dtype.bytes


def lm_head_bytes(spec: ModelSpec) -> float:
    """The LM head's own matrix; a tied head reads the embedding's, so a last stage without the
    embedding still holds a copy (``lm_head_resident_bytes``)."""
    return lm_head_params(spec) * spec.embedding_dtype.bytes


def lm_head_resident_bytes(spec: ModelSpec) -> float:
    """Bytes the LM head needs on its GPU, whether or not it is tied."""
    return spec.vocab_size * spec.hidden_size * spec.embedding_dtype.bytes


def weight_bytes_total(spec: ModelSpec) -> float:
    return (
        sum(layer_bytes(spec, i).total for i in range(spec.num_layers))
        + embedding_bytes(spec) + lm_head_bytes(spec) + spec.hidden_size * spec.embedding_dtype.bytes
    )


# --- KV cache -------------------------------------------------------------------------------

def kv_bytes_per_token_layer(spec: ModelSpec) -> float:
    """KV-cache bytes one token adds to one layer: K and V of every KV head, or MLA's latent."""
    a = spec.attention
    if a.kind is AttentionKind.MLA:
        return (a.kv_lora_rank + a.qk_rope_head_dim) * spec.kv_dtype.bytes
    return 2 * a.num_kv_heads * a.head_dim * spec.kv_dtype.bytes


def kv_bytes_per_token(spec: ModelSpec) -> float:
    """KV-cache bytes one token adds across all layers (windows ignored: the long-context rate)."""
    return spec.num_layers * kv_bytes_per_token_layer(spec)


def cached_tokens(spec: ModelSpec, layer: int, context: int) -> int:
    """Tokens of a ``context``-long sequence that ``layer`` keeps: a windowed layer keeps its window."""
    a = spec.attention
    if a.sliding_window is not None and spec.is_window_layer(layer):
        return min(context, a.sliding_window)
    return context


def kv_bytes_per_sequence(spec: ModelSpec, context: int, layers: range | None = None) -> float:
    """KV-cache bytes of one sequence of ``context`` tokens over ``layers`` (default: all)."""
    layers = layers if layers is not None else range(spec.num_layers)
    per = kv_bytes_per_token_layer(spec)
    return sum(cached_tokens(spec, i, context) for i in layers) * per


# --- FLOPs ----------------------------------------------------------------------------------

def attention_score_flops(spec: ModelSpec, layer: int, context: int, absorbed: bool = False) -> float:
    """FLOPs of QK^T and AV for one query token attending to ``context`` keys in ``layer``.

    MLA in decode runs absorbed (queries projected into the latent space): the dot products are
    over kv_lora_rank + rope dims instead of the per-head key width.
    """
    a = spec.attention
    keys = cached_tokens(spec, layer, context)
    if a.kind is AttentionKind.MLA and absorbed:
        return 2.0 * a.num_heads * keys * (a.kv_lora_rank + a.qk_rope_head_dim + a.kv_lora_rank)
    return 2.0 * a.num_heads * keys * (a.head_dim + a.v_head_dim)


def linear_flops_per_token(spec: ModelSpec, layer: int) -> float:
    """Matrix FLOPs one token costs in ``layer`` (2 per active weight)."""
    return 2.0 * layer_params(spec, layer).linear_active


def prefill_attention_flops(spec: ModelSpec, layer: int, prompt: int) -> float:
    """Causal attention over a ``prompt``-token prefill in one layer: the O(L^2) term.

    Token i attends to i keys (or its window), so the sum runs 1..L.
    """
    a = spec.attention
    per_key = 2.0 * a.num_heads * (a.head_dim + a.v_head_dim)
    if a.sliding_window is not None and spec.is_window_layer(layer) and prompt > a.sliding_window:
        w = a.sliding_window
        keys = w * (w + 1) / 2 + (prompt - w) * w
    else:
        keys = prompt * (prompt + 1) / 2
    return per_key * keys


def prefill_flops(spec: ModelSpec, prompt: int) -> float:
    """Whole-model FLOPs to prefill one ``prompt``-token sequence (LM head on the last token only)."""
    layers = sum(
        prompt * linear_flops_per_token(spec, i) + prefill_attention_flops(spec, i, prompt)
        for i in range(spec.num_layers)
    )
    return layers + lm_head_flops(spec)


def decode_flops(spec: ModelSpec, context: int) -> float:
    """Whole-model FLOPs of one decode step for one sequence whose cache holds ``context`` tokens."""
    layers = sum(
        linear_flops_per_token(spec, i) + attention_score_flops(spec, i, context, absorbed=True)
        for i in range(spec.num_layers)
    )
    return layers + lm_head_flops(spec)


def lm_head_flops(spec: ModelSpec) -> float:
    return 2.0 * spec.vocab_size * spec.hidden_size
