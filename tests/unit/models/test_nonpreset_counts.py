"""Real configs of models that are not presets: parameters, weight bytes, KV cache and layer kinds, each summed
by hand from the config and compared with what the publisher states (configs and sources in nonpreset_configs)."""

from __future__ import annotations

import pytest

from shardplan.models import SpecError, load_config
from shardplan.models.derived import kv_bytes_per_sequence, kv_bytes_per_token, parameter_counts, weight_bytes_total
from shardplan.models.spec import AttentionKind
from tests.unit.models.nonpreset_configs import CONFIGS, PUBLISHED

# Publishers round; a headline figure given to two significant digits ("12B", "0.6B", "A3B", "A35B") is honest to
# one unit of its last digit, the others to 1 %. OpenAI counts active parameters without the input embedding (a
# token reads one row of it), as DeepSeek does (test_counts.COMPUTE_CONVENTION); Qwen counts both matrices.
# Moonlight's '3B' is met either way (2.58e9 without, 2.91e9 with); with is the closer.
LAST_DIGIT = {("mistral-nemo-12b", "total"): 1e9, ("qwen3-0.6b", "total"): 0.1e9, ("moonlight-16b-a3b", "total"): 1e9,
              ("moonlight-16b-a3b", "active"): 1e9, ("qwen3-coder-480b-a35b-fp8", "active"): 1e9}
COMPUTE_CONVENTION = {"gpt-oss-20b"}


def _spec(name: str):
    return load_config(CONFIGS[name], name=name)


def _tolerance(name: str, which: str, published: float) -> float:
    return max(0.01 * published, LAST_DIGIT.get((name, which), 0.0))


@pytest.mark.parametrize("name,total,active,source", PUBLISHED, ids=[p[0] for p in PUBLISHED])
def test_counts_match_what_the_publisher_states(name, total, active, source):
    counts = parameter_counts(_spec(name))
    assert abs(counts.total - total) <= _tolerance(name, "total", total), (counts.total, total, source)
    if active is not None:
        ours = counts.active_compute if name in COMPUTE_CONVENTION else counts.active
        assert abs(ours - active) <= _tolerance(name, "active", active), (ours, active, source)


def _gqa_attention(h: int, heads: int, kv: int, head_dim: int, bias: bool = False) -> int:
    """q and o (heads x head_dim each side of h), k and v (kv heads), q/k/v biases when the model has them."""
    return 2 * h * heads * head_dim + 2 * h * kv * head_dim + ((heads + 2 * kv) * head_dim if bias else 0)


def test_llama_3_2_1b_ties_its_head_to_the_embedding():
    # 16 layers: attention 2048 -> 32 x 64 and 8 x 64, SwiGLU 3 x 2048 x 8192, two norms; one 128256 x 2048
    # matrix for embedding and head (tied), the final norm: 1,235,814,400 (Meta: '1.23B').
    layer = _gqa_attention(2048, 32, 8, 64) + 3 * 2048 * 8192 + 2 * 2048
    spec = _spec("llama-3.2-1b")
    assert parameter_counts(spec).total == 16 * layer + 128256 * 2048 + 2048 == 1_235_814_400
    assert parameter_counts(spec).lm_head == 0
    assert weight_bytes_total(spec) == 2 * 1_235_814_400  # bf16, the tied matrix stored once
    assert kv_bytes_per_token(spec) == 16 * 2 * 8 * 64 * 2 == 32_768


def test_llama_3_2_3b():
    layer = _gqa_attention(3072, 24, 8, 128) + 3 * 3072 * 8192 + 2 * 3072
    assert parameter_counts(_spec("llama-3.2-3b")).total == 28 * layer + 128256 * 3072 + 3072 == 3_212_749_824


def test_mistral_nemo_takes_head_dim_from_the_config_not_hidden_over_heads():
    # head_dim 128, not 5120 / 32 = 160: q is 5120 x 4096. 40 layers, untied 131072 x 5120 vocabulary matrices.
    layer = _gqa_attention(5120, 32, 8, 128) + 3 * 5120 * 14336 + 2 * 5120
    spec = _spec("mistral-nemo-12b")
    assert spec.attention.head_dim == 128
    assert parameter_counts(spec).total == 40 * layer + 2 * 131072 * 5120 + 5120 == 12_247_782_400
    assert kv_bytes_per_token(spec) == 40 * 2 * 8 * 128 * 2 == 163_840
    assert spec.attention.sliding_window is None  # "sliding_window": null: every layer sees the whole context


@pytest.mark.parametrize("name,layers,h,heads,kv,ffn,vocab,tied,expected", [
    ("qwen2.5-7b", 28, 3584, 28, 4, 18944, 152064, False, 7_615_616_512),
    ("qwen2.5-3b", 36, 2048, 16, 2, 11008, 151936, True, 3_085_938_688),
])
def test_qwen2_5_counts_its_qkv_biases_and_equals_the_hub_count_exactly(name, layers, h, heads, kv, ffn, vocab, tied,
                                                                        expected):
    # Qwen2 has biases on q, k and v (no attention_bias field); head_dim = hidden / heads = 128. The hub's
    # safetensors count is exact, so is ours. The configs' sliding_window is unused (use_sliding_window false).
    layer = _gqa_attention(h, heads, kv, 128, bias=True) + 3 * h * ffn + 2 * h
    spec = _spec(name)
    assert parameter_counts(spec).total == layers * layer + (1 if tied else 2) * vocab * h + h == expected
    assert spec.attention.sliding_window_layers == ()
    assert kv_bytes_per_token(spec) == layers * 2 * kv * 128 * 2


def test_qwen3_0_6b_head_dim_is_twice_hidden_over_heads():
    # head_dim 128 with hidden 1024 and 16 heads: q is 1024 x 2048. Tied. The card's 0.44B non-embedding is
    # the total less the one 151936 x 1024 matrix. (q_norm/k_norm, 2 x 128 per layer, are not counted: 7,168.)
    layer = _gqa_attention(1024, 16, 8, 128) + 3 * 1024 * 3072 + 2 * 1024
    counts = parameter_counts(_spec("qwen3-0.6b"))
    assert counts.total == 28 * layer + 151936 * 1024 + 1024 == 596_042_752
    assert abs(counts.total - counts.embedding - 0.44e9) <= 0.01e9


def test_qwen3_14b_untied():
    # 40 layers of 40/8 heads of 128 over 5120 (q is 5120 x 5120 here), SwiGLU 17408, two 151936 x 5120 matrices.
    layer = _gqa_attention(5120, 40, 8, 128) + 3 * 5120 * 17408 + 2 * 5120
    counts = parameter_counts(_spec("qwen3-14b"))
    assert counts.total == 40 * layer + 2 * 151936 * 5120 + 5120 == 14_768_296_960
    assert abs(counts.total - counts.embedding - counts.lm_head - 13.2e9) <= 0.1e9  # card: 13.2B non-embedding


def test_qwen3_coder_480b_every_layer_moe_and_fp8_bytes():
    # 62 MoE layers of 160 experts (top-8) of width 2560, no shared expert, router 6144 x 160; 96/8 heads of 128.
    h = 6144
    attention = _gqa_attention(h, 96, 8, 128)
    expert = 3 * h * 2560
    norms, router = 2 * h, h * 160
    vocab = 2 * 151936 * h
    spec = _spec("qwen3-coder-480b-a35b-fp8")
    counts = parameter_counts(spec)
    assert counts.total == 62 * (attention + 160 * expert + router + norms) + vocab + h == 480_154_859_520
    assert counts.active == 62 * (attention + 8 * expert + router + norms) + vocab + h == 35_474_749_440
    assert spec.num_moe_layers == 62 and spec.num_dense_layers == 0
    # FP8: attention and experts 1 byte; routers, norms, embedding and head 2 bytes. The FP8 snapshot is '450G'
    # on disk (du, GiB) in the same report: 482.08e9 bytes = 449.0 GiB.
    fp8 = 62 * (attention + 160 * expert)
    assert weight_bytes_total(spec) == fp8 + 2 * (62 * (router + norms) + vocab + h)
    assert kv_bytes_per_token(spec) == 62 * 2 * 8 * 128 * 2 == 253_952


def test_gpt_oss_20b_windows_every_other_layer_and_keeps_attention_in_bf16():
    # 24 layers, 32 experts top-4 of width 2880 (MXFP4, 4.25 bits), 64/8 heads of 64 with q/k/v biases, untied
    # 201088 x 2880 vocabulary. Not counted: attention sinks, o_proj and expert biases (24 x 32 x 8640 = 6.6e6).
    h = 2880
    attention = _gqa_attention(h, 64, 8, 64, bias=True)
    expert = 3 * h * 2880
    rest = attention + h * 32 + 2 * h  # router, norms
    vocab = 201088 * h
    spec = _spec("gpt-oss-20b")
    counts = parameter_counts(spec)
    assert counts.total == 24 * (rest + 32 * expert) + 2 * vocab + h == 20_908_050_240  # card: 20.91B
    assert counts.active_compute == 24 * (rest + 4 * expert) + vocab + h == 3_607_406_400  # card: 3.61B
    assert spec.attention.sliding_window_layers == tuple(range(0, 24, 2)) and spec.attention.sliding_window == 128
    # Checkpoint 12.8 GiB (card): experts at 4.25 bits, the rest bf16.
    assert weight_bytes_total(spec) == 24 * 32 * expert * 4.25 / 8 + 2 * (24 * rest + 2 * vocab + h)
    assert round(weight_bytes_total(spec) / 2**30, 1) == 12.8
    # 4096-token sequence: 12 full layers keep 4096 tokens, 12 windowed ones 128; 8 KV heads of 64, bf16.
    assert kv_bytes_per_sequence(spec, 4096) == (12 * 4096 + 12 * 128) * 2 * 8 * 64 * 2


def test_moonlight_mla_without_query_lora_and_two_shared_experts():
    # DeepSeek-V3 schema: q_lora_rank null (q is one 2048 x 16 x 192 matrix), kv down 2048 x (512 + 64) plus its
    # 512 norm, kv up 512 x 16 x (128 + 128), o 16 x 128 x 2048. Layer 0 dense (FFN 11264), 26 MoE layers of 64
    # routed (top-6) and 2 shared experts of width 1408.
    h = 2048
    attention = h * 16 * 192 + h * 576 + 512 + 512 * 16 * 256 + 16 * 128 * h
    expert = 3 * h * 1408
    moe = attention + 64 * expert + 2 * expert + h * 64 + 2 * h
    dense = attention + 3 * h * 11264 + 2 * h
    spec = _spec("moonlight-16b-a3b")
    counts = parameter_counts(spec)
    assert counts.total == 26 * moe + dense + 2 * 163840 * h + h == 15_960_108_544
    assert spec.attention.kind is AttentionKind.MLA and spec.attention.q_lora_rank == 0
    assert [spec.is_moe_layer(i) for i in range(27)] == [False] + [True] * 26
    # The cache holds the 512 latent and the 64 rope dims per token per layer, not 16 KV heads.
    assert kv_bytes_per_token(spec) == 27 * (512 + 64) * 2 == 31_104


def test_qwen2_moe_is_refused_naming_the_architecture():
    # Qwen2-57B-A14B (Qwen2MoeForCausalLM) has a gated shared expert of its own width
    # (shared_expert_intermediate_size 20480): not one of the families read, so refused rather than read as Qwen2.
    cfg = {"architectures": ["Qwen2MoeForCausalLM"], "hidden_size": 3584, "num_hidden_layers": 28,
           "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 151936, "intermediate_size": 18944,
           "moe_intermediate_size": 2560, "shared_expert_intermediate_size": 20480, "num_experts": 64,
           "num_experts_per_tok": 8}
    with pytest.raises(SpecError) as err:
        load_config(cfg)
    assert err.value.field == "architectures" and "unsupported 'Qwen2MoeForCausalLM'" in err.value.reason
