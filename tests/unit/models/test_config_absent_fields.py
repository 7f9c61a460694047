"""A field a config leaves out means what the family's transformers config class makes of it, or is refused where
the readers of the file disagree; never a width or layout of our own choosing."""

from __future__ import annotations

import json

import pytest

from shardplan.models import SpecError, load_config
from shardplan.models.derived import kv_bytes_per_sequence, parameter_counts
from shardplan.models.presets import CONFIG_DIR
from tests.unit.models.nonpreset_configs import CONFIGS


def _without(cfg: dict, *fields: str) -> dict:
    return {k: v for k, v in cfg.items() if k not in fields}


def test_qwen3_without_head_dim_has_heads_of_128():
    # transformers' Qwen3Config: head_dim defaults to 128. Qwen3-0.6B (hidden 1024, 16 heads) was read with heads
    # of 1024 / 16 = 64: 507,962,368 parameters instead of 596,042,752, and half the KV cache.
    full = load_config(CONFIGS["qwen3-0.6b"])
    spec = load_config(_without(CONFIGS["qwen3-0.6b"], "head_dim"))
    assert spec.attention.head_dim == 128
    assert parameter_counts(spec).total == parameter_counts(full).total == 596_042_752


def test_gpt_oss_without_layer_types_window_or_head_dim_is_the_released_model():
    # transformers' GptOssConfig: layer_types alternate sliding/full from layer 0, sliding_window 128, head_dim 64.
    # gpt-oss-20b without them was read with no window (a 4096-token sequence: 24 x 4096 cached tokens instead of
    # 12 x 4096 + 12 x 128) and heads of 2880 / 64 = 45.
    full = load_config(CONFIGS["gpt-oss-20b"])
    spec = load_config(_without(CONFIGS["gpt-oss-20b"], "layer_types", "sliding_window", "head_dim"))
    assert spec.attention == full.attention
    assert spec.attention.sliding_window_layers == tuple(range(0, 24, 2)) and spec.attention.head_dim == 64
    assert kv_bytes_per_sequence(spec, 4096) == (12 * 4096 + 12 * 128) * 2 * 8 * 64 * 2


def test_llama4_without_attention_chunk_size_chunks_at_8192_and_null_means_none():
    # transformers' Llama4TextConfig: attention_chunk_size defaults to 8192 (Scout and Maverick both give 8192);
    # without it Scout's 36 RoPE layers were priced as attending to the whole context.
    scout = json.loads((CONFIG_DIR / "llama-4-scout.json").read_text())
    text = scout["text_config"]
    absent = load_config({**scout, "text_config": _without(text, "attention_chunk_size")})
    assert absent.attention.sliding_window == 8192 and len(absent.attention.sliding_window_layers) == 36
    null = load_config({**scout, "text_config": {**text, "attention_chunk_size": None}})
    assert null.attention.sliding_window is None and null.attention.sliding_window_layers == ()


@pytest.mark.parametrize("field,said", [
    ("first_k_dense_replace", "transformers makes the first 3 layers dense, DeepSeek's code none"),
    ("n_shared_experts", "transformers adds 1 shared expert, DeepSeek's code none"),
    ("q_lora_rank", "compress queries to rank 1536"),
])
def test_a_deepseek_config_without_a_layout_field_is_refused_naming_it(field, said):
    # Moonlight-16B-A3B without one of them was priced all-MoE (27 instead of 26 MoE layers), without its 2 shared
    # experts, or with uncompressed queries: no reader of the file builds that model.
    with pytest.raises(SpecError) as err:
        load_config(_without(CONFIGS["moonlight-16b-a3b"], field))
    assert err.value.field == field and err.value.reason.startswith("missing; name it (null for none)")
    assert said in err.value.reason
