"""Parameter counts and KV-cache sizes against published figures and hand computations."""

from __future__ import annotations

import json

import pytest

from shardplan.models import get_model, load_config
from shardplan.models.derived import (
    kv_bytes_per_sequence,
    kv_bytes_per_token,
    parameter_counts,
    prefill_flops,
    weight_bytes_total,
)
from shardplan.models.presets import CONFIG_DIR
from tests.unit.models.published_counts import PUBLISHED

# Publishers count "active" parameters two ways. Mistral, Meta and Qwen count both vocabulary
# matrices; DeepSeek, OpenAI and Moonshot leave out the input embedding, of which a token reads
# one row (see the comments in published_counts.py). Where a publisher also gives a more precise
# figure than the headline, that figure is used and cited here.
COMPUTE_CONVENTION = {"deepseek-v3", "gpt-oss-120b", "kimi-k2"}
PRECISE_ACTIVE = {
    "deepseek-v3": (36.6e9, "DeepSeek-V3 README_WEIGHTS.md: main model 36.6B activated"),
    "gpt-oss-120b": (5.13e9, "gpt-oss model card, arXiv:2508.10925, table 1: 5.13B active"),
}
# Figures published to two significant digits ("3.3B", "17B") cannot carry 1 %: the publisher
# rounds or truncates, so one unit of the last published digit is the honest tolerance there.
LAST_DIGIT = {("qwen3-30b-a3b", "active"): 0.1e9, ("llama-4-maverick", "active"): 1e9}
# Kimi-K2's 1.04T (tech report) does not reconcile with the model card's own shapes; see below.
UNRECONCILED_TOTAL = {"kimi-k2"}


def _tolerance(alias: str, which: str, published: float) -> float:
    return max(0.01 * published, LAST_DIGIT.get((alias, which), 0.0))


@pytest.mark.parametrize("alias,total,active,source", PUBLISHED, ids=[p[0] for p in PUBLISHED])
def test_parameter_counts_match_published(alias, total, active, source):
    counts = parameter_counts(get_model(alias))
    if alias not in UNRECONCILED_TOTAL:
        assert abs(counts.total - total) <= _tolerance(alias, "total", total), (counts.total, total, source)
    if active is not None:
        active = PRECISE_ACTIVE.get(alias, (active,))[0]
        ours = counts.active_compute if alias in COMPUTE_CONVENTION else counts.active
        assert abs(ours - active) <= _tolerance(alias, "active", active), (ours, active, source)


def test_kimi_k2_total_is_the_model_card_shapes_summed_by_hand():
    # 61 layers: 1 dense (FFN 18432), 60 MoE of 384 routed + 1 shared experts (width 2048), MLA
    # with 64 heads, hidden 7168, vocab 163840, untied. Summed by hand from those shapes:
    h = 7168
    expert = 3 * h * 2048
    moe_layer = 385 * expert + h * 384 + 2 * h
    attention = h * 1536 + 1536 + 1536 * 64 * 192 + h * 576 + 512 + 512 * 64 * 256 + 64 * 128 * h
    dense_layer = 3 * h * 18432 + 2 * h
    expected = 60 * moe_layer + 61 * attention + dense_layer + 2 * 163840 * h + h
    assert parameter_counts(get_model("kimi-k2")).total == expected
    # 1.026e12: 1.3 % below the tech report's 1.04T, 2.6 % above the model card's "1T".
    assert 1.02e12 < expected < 1.03e12


def test_llama_3_1_70b_kv_bytes_per_token():
    # 80 layers x 8 KV heads x 128 dims x (K and V) x 2 bytes
    assert kv_bytes_per_token(get_model("llama-3.1-70b")) == 80 * 8 * 128 * 2 * 2 == 327_680


def test_deepseek_v3_mla_kv_bytes_per_token_uses_the_latent():
    # 61 layers x (kv_lora_rank 512 + rope 64) x 2 bytes, not num_key_value_heads.
    spec = get_model("deepseek-v3")
    assert spec.kv_dtype.bytes == 2
    assert kv_bytes_per_token(spec) == 61 * (512 + 64) * 2 == 70_272


def test_sliding_window_layers_cap_their_cache():
    spec = get_model("gpt-oss-120b")  # 18 of 36 layers attend to a 128-token window
    per_layer = 2 * 8 * 64 * 2
    assert kv_bytes_per_sequence(spec, 4096) == (18 * 4096 + 18 * 128) * per_layer
    assert kv_bytes_per_sequence(spec, 100) == 36 * 100 * per_layer


def test_mistral_window_applies_to_every_layer():
    spec = get_model("mistral-7b")
    assert spec.attention.sliding_window == 4096
    assert len(spec.attention.sliding_window_layers) == 32


def test_a_mistral_config_listing_layer_types_windows_only_the_sliding_ones():
    """A Mistral-family config that interleaves (``layer_types``, as Ministral's do): only the layers marked
    ``sliding_attention`` cap their cache at the window; the others keep the whole sequence (by hand: 16 of 32
    layers at 4,096 tokens of an 8,000-token sequence)."""
    cfg = json.loads((CONFIG_DIR / "mistral-7b.json").read_text())
    cfg["layer_types"] = ["sliding_attention", "full_attention"] * 16
    spec = load_config(cfg)
    assert spec.attention.sliding_window_layers == tuple(range(0, 32, 2))
    per_layer = 2 * spec.attention.num_kv_heads * spec.attention.head_dim * 2
    assert kv_bytes_per_sequence(spec, 8000) == (16 * 8000 + 16 * 4096) * per_layer


def test_llama4_layers():
    maverick = get_model("llama-4-maverick")
    assert maverick.moe.layers == tuple(range(1, 48, 2))
    # every 4th layer is a global NoPE layer, the other 36 attend within 8192-token chunks
    assert len(maverick.attention.sliding_window_layers) == 36
    assert 3 not in maverick.attention.sliding_window_layers
    scout = get_model("llama-4-scout")
    assert scout.num_moe_layers == 48 and scout.moe.num_experts == 16


def test_deepseek_first_layers_are_dense():
    spec = get_model("deepseek-r1")
    assert spec.moe.layers[0] == 3 and spec.num_moe_layers == 58 and spec.num_dense_layers == 3


def test_weight_bytes_follow_the_dtypes():
    # gpt-oss: experts in MXFP4 (4.25 bits), the rest in bf16 -> about 65 GB, as the checkpoint.
    assert 60e9 < weight_bytes_total(get_model("gpt-oss-120b")) < 68e9
    # Llama-3.1-70B bf16: 2 bytes per parameter.
    spec = get_model("llama-3.1-70b")
    assert weight_bytes_total(spec) == pytest.approx(2 * parameter_counts(spec).total)


def test_prefill_flops_have_the_quadratic_attention_term():
    spec = get_model("llama-3.1-8b")
    linear = 2 * (parameter_counts(spec).active - 2 * 128256 * 4096 - 4096 - 32 * 2 * 4096)
    head = 2 * 128256 * 4096
    for L in (1024, 8192):
        attention = 32 * 2 * 32 * (128 + 128) * L * (L + 1) / 2
        assert prefill_flops(spec, L) == pytest.approx(L * linear + attention + head)


def test_a_qwen_window_applies_only_when_asked_and_from_max_window_layers_on():
    # transformers' Qwen2/Qwen3 configs: use_sliding_window defaults to false; when true, layers from
    # max_window_layers (default 28) on attend within the window. Qwen3-32B has 64 layers.
    base = json.loads((CONFIG_DIR / "qwen3-32b.json").read_text())
    del base["use_sliding_window"]
    unasked = load_config({**base, "sliding_window": 4096})
    assert unasked.attention.sliding_window_layers == ()
    asked = load_config({**base, "sliding_window": 4096, "use_sliding_window": True, "max_window_layers": 60})
    assert asked.attention.sliding_window == 4096
    assert asked.attention.sliding_window_layers == (60, 61, 62, 63)
    default_start = load_config({**base, "sliding_window": 4096, "use_sliding_window": True, "max_window_layers": None})
    assert default_start.attention.sliding_window_layers == tuple(range(28, 64))
    typed = ["full_attention", "sliding_attention"] * 32
    listed = load_config({**base, "sliding_window": 4096, "use_sliding_window": True, "layer_types": typed})
    assert listed.attention.sliding_window_layers == tuple(range(1, 64, 2))
    unused = load_config({**base, "sliding_window": 4096, "layer_types": typed})  # use_sliding_window not given
    assert unused.attention.sliding_window_layers == ()
    # Mistral has no use_sliding_window: its window covers every layer (test_mistral_window_applies_to_every_layer).


def test_layer_predicates_against_published_layouts():
    # DeepSeek-V3: the first 3 layers dense (first_k_dense_replace), the other 58 MoE; gpt-oss-120b: 18 of 36
    # layers windowed; Mistral-7B: all 32; Llama-3.1-8B: none.
    deepseek = get_model("deepseek-v3")
    assert [deepseek.is_moe_layer(i) for i in range(61)] == [False] * 3 + [True] * 58
    assert sum(get_model("gpt-oss-120b").is_window_layer(i) for i in range(36)) == 18
    assert all(get_model("mistral-7b").is_window_layer(i) for i in range(32))
    llama = get_model("llama-3.1-8b")
    assert not any(llama.is_window_layer(i) or llama.is_moe_layer(i) for i in range(32))
