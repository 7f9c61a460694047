"""Llama 4's composite config: no_rope_layers, one 0/1 flag per layer or refused naming the field; the checkpoint's
quantization_config, kept beside text_config."""

from __future__ import annotations

import json

import pytest

from shardplan.models import SpecError, load_config
from shardplan.models.derived import weight_bytes_total
from shardplan.models.presets import CONFIG_DIR

SCOUT = json.loads((CONFIG_DIR / "llama-4-scout.json").read_text())  # 48 layers


def _with_flags(flags: list[int]) -> dict:
    cfg = json.loads(json.dumps(SCOUT))
    cfg["text_config"]["no_rope_layers"] = flags
    return cfg


@pytest.mark.parametrize("flags", [[1, 1, 0], [1] * 47, [1] * 49, [1] * 100], ids=["3", "47", "49", "100"])
def test_a_list_not_one_per_layer_is_refused_naming_it(flags):
    # Short, the layers past its end were priced as global NoPE layers (exit 0); long, the error named
    # sliding_window_layers, a field no config has.
    with pytest.raises(SpecError) as err:
        load_config(_with_flags(flags))
    assert err.value.field == "no_rope_layers"
    assert f"expected 48 entries, one per layer, got {len(flags)}" in err.value.reason


@pytest.mark.parametrize("flag", [2, 7])
def test_a_flag_other_than_0_or_1_is_refused_naming_it(flag):
    with pytest.raises(SpecError) as err:
        load_config(_with_flags([1] * 47 + [flag]))
    assert err.value.field == "no_rope_layers"


def test_one_flag_per_layer_marks_the_chunked_layers():
    spec = load_config(_with_flags([1, 0] * 24))
    assert spec.attention.sliding_window_layers == tuple(range(0, 48, 2))


MAVERICK = json.loads((CONFIG_DIR / "llama-4-maverick.json").read_text())


def test_a_quantization_config_at_the_top_of_the_composite_config_is_read():
    # transformers saves a Llama 4 checkpoint's quantization_config beside text_config, not in it; it was dropped,
    # so an FP8 Maverick was priced at 801.4e9 bytes of bf16 weights and an FBGEMM or compressed-tensors one as bf16
    # without a word. FP8 weights (norms, routers, embedding and head stay 16-bit): 402.8e9 bytes.
    fp8 = load_config({**MAVERICK, "quantization_config": {"quant_method": "fp8"}})
    assert (fp8.weights_dtype.value, fp8.expert_dtype.value) == ("fp8", "fp8")
    assert 402e9 < weight_bytes_total(fp8) < 403e9
    for method in ("fbgemm_fp8", "compressed-tensors"):
        with pytest.raises(SpecError) as err:
            load_config({**MAVERICK, "quantization_config": {"quant_method": method}})
        assert err.value.field == "quantization_config.quant_method" and f"unsupported '{method}'" in err.value.reason
