"""GPTQ and AWQ checkpoints: 4-bit weights are priced as INT4; any other width is refused, not priced as 4."""

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
