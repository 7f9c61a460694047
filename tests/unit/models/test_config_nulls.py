"""A config.json field set to null is not given: its default applies, as transformers reads it."""

from __future__ import annotations

import json

import pytest

from shardplan.models import SpecError, load_config
from shardplan.models.presets import CONFIG_DIR


def _config(preset: str, **fields: object) -> dict:
    cfg = json.loads((CONFIG_DIR / f"{preset}.json").read_text())
    cfg.update(fields)
    return cfg


def test_null_fields_of_a_llama_take_their_defaults():
    # Llama-3.1-8B: 32 heads of 128 over 4,096. With num_key_value_heads and head_dim null the defaults
    # are one KV head per head and hidden_size / heads; the others default to false, silu, 131,072.
    spec = load_config(_config("llama-3.1-8b", num_key_value_heads=None, head_dim=None, attention_bias=None,
                               tie_word_embeddings=None, hidden_act=None, max_position_embeddings=None))
    assert (spec.attention.num_heads, spec.attention.num_kv_heads, spec.attention.head_dim) == (32, 32, 128)
    assert spec.attention.kind.value == "mha"
    assert (spec.attention.qkv_bias, spec.tie_word_embeddings, spec.activation) == (False, False, "silu")
    assert spec.max_position_embeddings == 131072


def test_null_layer_fields_of_qwen3_moe_take_their_defaults():
    # Qwen3-30B-A3B has 48 layers: a null step is 1 and null mlp_only_layers is none, so all 48 are MoE.
    spec = load_config(_config("qwen3-30b-a3b", decoder_sparse_step=None, mlp_only_layers=None))
    assert spec.moe is not None and spec.moe.layers == tuple(range(48))


def test_null_fields_of_deepseek_v3_take_their_defaults():
    # q_lora_rank null: queries are not compressed (rank 0); n_shared_experts null: none.
    spec = load_config(_config("deepseek-v3", q_lora_rank=None, n_shared_experts=None))
    assert spec.attention.q_lora_rank == 0
    assert spec.moe is not None and spec.moe.num_shared_experts == 0


def test_a_required_field_set_to_null_is_missing():
    with pytest.raises(SpecError) as err:
        load_config(_config("llama-3.1-8b", hidden_size=None))
    assert (err.value.field, err.value.reason) == ("hidden_size", "missing")


def test_a_null_quant_method_is_missing_not_the_method_none():
    # It was read as the string 'None' and refused as "unsupported 'none'".
    with pytest.raises(SpecError) as err:
        load_config(_config("llama-3.1-8b", quantization_config={"quant_method": None}))
    assert err.value.field == "quantization_config.quant_method" and err.value.reason.startswith("missing")

