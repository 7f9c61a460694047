"""GPTQ and AWQ checkpoints: 4-bit weights in groups of 128 or more are priced as INT4; any other width, or smaller
groups, is refused, not priced as 4.125 bits."""

from __future__ import annotations

import json

import pytest

from shardplan.models import SpecError, load_config
from shardplan.models.presets import CONFIG_DIR

LLAMA = json.loads((CONFIG_DIR / "llama-3.1-8b.json").read_text())


@pytest.mark.parametrize("method", ["gptq", "awq", "GPTQ"])
@pytest.mark.parametrize("bits", [8, 3, 2, "4", True])
def test_a_width_other_than_4_bits_is_refused_naming_bits(method, bits):
    # An 8-bit GPTQ Llama-3.1-8B was priced with 4-bit weights, half its real size (exit 0).
    with pytest.raises(SpecError) as err:
        load_config({**LLAMA, "quantization_config": {"quant_method": method, "bits": bits}})
    assert err.value.field == "quantization_config.bits"


@pytest.mark.parametrize("quant", [{"quant_method": "gptq", "bits": 4}, {"quant_method": "awq", "bits": 4},
                                   {"quant_method": "awq"}, {"quant_method": "gptq", "bits": None}])
def test_4_bit_or_unstated_width_is_int4(quant):
    spec = load_config({**LLAMA, "quantization_config": quant})
    assert (spec.weights_dtype.value, spec.expert_dtype.value) == ("int4", "int4")


@pytest.mark.parametrize("method", ["gptq", "awq"])
@pytest.mark.parametrize("group", [32, 64, 0, "128"])
def test_groups_smaller_than_128_are_refused_naming_group_size(method, group):
    # INT4 is priced at 4.125 bits (a 16-bit scale per 128 weights); a GPTQ Llama-3.1-8B in groups of 32 stores
    # 4.5 bits a weight and was priced 9 % light (exit 0).
    with pytest.raises(SpecError) as err:
        load_config({**LLAMA, "quantization_config": {"quant_method": method, "bits": 4, "group_size": group}})
    assert err.value.field == "quantization_config.group_size"


@pytest.mark.parametrize("group", [128, 256, -1, None])
def test_groups_of_128_or_more_or_per_channel_are_int4(group):
    spec = load_config({**LLAMA, "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": group}})
    assert spec.weights_dtype.value == "int4"
