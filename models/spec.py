"""The architecture of a decoder-only LLM, as the planner needs it.

Only shapes and number formats: no weights, no tokenizer. A spec is built from a Hugging Face
config.json by ``hf_config.load_config`` (presets go through the same loader) and is immutable.
Derived quantities (parameter counts, bytes, FLOPs, KV-cache size) live in ``derived``.
"""

from __future__ import annotations

from enum import Enum
from functools import lru_cache

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt, model_validator

from shardplan.models.dtypes import DType
from shardplan.models.errors import SpecError
from shardplan.models.frozen import HashOnce

_STRICT = ConfigDict(extra="forbid", frozen=True, strict=True)


class AttentionKind(str, Enum):
    MHA = "mha"  # one KV head per query head
    GQA = "gqa"  # groups of query heads share a KV head
    MQA = "mqa"  # one KV head for all query heads
    MLA = "mla"  # DeepSeek's multi-head latent attention: the cache holds a compressed latent


class Attention(BaseModel):
    """Self-attention of one layer (the same in every layer)."""

    model_config = _STRICT

    kind: AttentionKind = Field(description="MHA, GQA, MQA or MLA")
    num_heads: PositiveInt = Field(description="query heads")
    num_kv_heads: PositiveInt = Field(
        description="KV heads that the cache stores (MLA: equals num_heads, the cache is the latent)"
    )
    head_dim: PositiveInt = Field(description="query/key width per head (MLA: nope + rope dims)")
    v_head_dim: PositiveInt = Field(description="value width per head")
    qkv_bias: bool = Field(default=False, description="biases on the q, k and v projections")
    q_lora_rank: NonNegativeInt = Field(default=0, description="MLA: rank of the query down-projection; 0 = none")
    kv_lora_rank: NonNegativeInt = Field(default=0, description="MLA: width of the cached KV latent")
    qk_rope_head_dim: NonNegativeInt = Field(default=0, description="MLA: rotary part of each query/key head")
    qk_nope_head_dim: NonNegativeInt = Field(default=0, description="MLA: non-rotary part of each query/key head")
    sliding_window: PositiveInt | None = Field(
        default=None, description="tokens a windowed (or chunked) layer attends to; None = none"
    )
    sliding_window_layers: tuple[NonNegativeInt, ...] = Field(
        default=(), description="indices of the layers that use the window; the others attend to everything"
    )

    @model_validator(mode="after")
    def _consistent(self) -> Attention:
        if self.kind is AttentionKind.MLA:
            if self.kv_lora_rank == 0 or self.qk_rope_head_dim == 0:
                raise SpecError("kv_lora_rank", "MLA needs kv_lora_rank and qk_rope_head_dim > 0")
            if self.head_dim != self.qk_nope_head_dim + self.qk_rope_head_dim:
                raise SpecError("head_dim", "MLA head_dim must equal qk_nope_head_dim + qk_rope_head_dim")
            return self
        if self.num_heads % self.num_kv_heads:
            raise SpecError(
                "num_key_value_heads",
                f"{self.num_kv_heads} KV heads do not divide {self.num_heads} attention heads",
            )
        expected = (
            AttentionKind.MHA
            if self.num_kv_heads == self.num_heads
            else AttentionKind.MQA
            if self.num_kv_heads == 1
            else AttentionKind.GQA
        )
        if self.kind is not expected:
            raise SpecError("attention.kind", f"{self.num_heads}/{self.num_kv_heads} heads make {expected.value}")
        if self.sliding_window_layers and self.sliding_window is None:
            raise SpecError("sliding_window", "windowed layers are listed but no window is set")
        return self


class MoE(BaseModel):
    """Mixture-of-experts feed-forward, shared by all MoE layers of the model."""

    model_config = _STRICT

    num_experts: PositiveInt = Field(description="routed experts per MoE layer")
    experts_per_token: PositiveInt = Field(description="routed experts each token activates (top-k)")
    expert_intermediate_size: PositiveInt = Field(description="FFN width of one routed expert")
    num_shared_experts: NonNegativeInt = Field(default=0, description="experts every token passes through")
    shared_intermediate_size: NonNegativeInt = Field(
        default=0, description="FFN width of one shared expert (0 when there is none)"
    )
    layers: tuple[NonNegativeInt, ...] = Field(description="indices of the MoE layers, ascending")

    @model_validator(mode="after")
    def _consistent(self) -> MoE:
        if self.experts_per_token > self.num_experts:
            raise SpecError("num_experts_per_tok", f"top-{self.experts_per_token} exceeds {self.num_experts} experts")
        if not self.layers:
            raise SpecError("moe.layers", "a MoE model needs at least one MoE layer")
        if list(self.layers) != sorted(set(self.layers)):
            raise SpecError("moe.layers", "MoE layer indices must be ascending and distinct")
        if self.num_shared_experts and not self.shared_intermediate_size:
            raise SpecError("shared_intermediate_size", "shared experts need a width")
        return self


class ModelSpec(HashOnce):
    """One decoder-only transformer: layers, attention, FFN, optional MoE, number formats."""

    model_config = _STRICT

    name: str = Field(min_length=1, description="Hugging Face id or the user's name for it")
    architecture: str = Field(description="the Hugging Face architecture class, e.g. LlamaForCausalLM")
    num_layers: PositiveInt = Field(description="transformer blocks")
    hidden_size: PositiveInt = Field(description="residual stream width")
    vocab_size: PositiveInt = Field(description="tokens in the vocabulary")
    tie_word_embeddings: bool = Field(description="LM head shares the embedding matrix")
    attention: Attention
    intermediate_size: NonNegativeInt = Field(description="FFN width of a dense layer (0: no dense layers)")
    gated_ffn: bool = Field(default=True, description="SwiGLU-style FFN: three matrices instead of two")
    activation: str = Field(default="silu", description="FFN activation function")
    moe: MoE | None = Field(default=None, description="None for a dense model")
    weights_dtype: DType = Field(default=DType.BF16, description="format of the dense linear weights")
    expert_dtype: DType = Field(default=DType.BF16, description="format of the routed-expert weights")
    embedding_dtype: DType = Field(default=DType.BF16, description="format of embedding and LM head")
    kv_dtype: DType = Field(default=DType.BF16, description="format of the KV cache")
    max_position_embeddings: PositiveInt = Field(default=131072, description="longest context the model takes")

    @model_validator(mode="after")
    def _consistent(self) -> ModelSpec:
        if self.moe is not None:
            if self.moe.layers[-1] >= self.num_layers:
                raise SpecError("moe.layers", f"layer {self.moe.layers[-1]} beyond {self.num_layers} layers")
            if len(self.moe.layers) < self.num_layers and self.intermediate_size == 0:
                raise SpecError("intermediate_size", "dense layers exist but their FFN width is 0")
        elif self.intermediate_size == 0:
            raise SpecError("intermediate_size", "a dense model needs an FFN width > 0")
        bad = [i for i in self.attention.sliding_window_layers if i >= self.num_layers]
        if bad:
            raise SpecError("sliding_window_layers", f"layer {bad[0]} beyond {self.num_layers} layers")
        return self

    # Predicates that read as sentences.
    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    def is_moe_layer(self, layer: int) -> bool:
        return layer in _layer_sets(self)[0]

    def is_window_layer(self, layer: int) -> bool:
        """A layer that attends within ``attention.sliding_window`` (or a chunk of it), not the whole context."""
        return layer in _layer_sets(self)[1]

    @property
    def num_moe_layers(self) -> int:
        return len(self.moe.layers) if self.moe else 0

    @property
    def num_dense_layers(self) -> int:
        return self.num_layers - self.num_moe_layers

    def with_dtypes(
        self, weights: DType | None = None, kv: DType | None = None
    ) -> ModelSpec:
        """The same model in other number formats: ``weights`` sets dense and expert weights."""
        update: dict[str, DType] = {}
        if weights is not None:
            update.update(weights_dtype=weights, expert_dtype=weights)
        if kv is not None:
            update["kv_dtype"] = kv
        return self.model_copy(update=update) if update else self


@lru_cache(maxsize=64)
def _layer_sets(spec: ModelSpec) -> tuple[frozenset[int], frozenset[int]]:
    """The MoE layers and the windowed layers of ``spec`` as sets, built once per model: the cost tables ask of
    every layer of every layout they price (a 1,024-layer model: 290,000 questions in 20 plans, each one
    building the set anew before). A spec hashes once (``HashOnce``), so a lookup costs no more than a call."""
    moe = frozenset(spec.moe.layers) if spec.moe else frozenset()
    attention = spec.attention
    windowed = frozenset(attention.sliding_window_layers) if attention.sliding_window is not None else frozenset()
    return moe, windowed
