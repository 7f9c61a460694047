"""A config whose layer fields leave no MoE layer is refused naming the field it gave, not an internal name."""

from __future__ import annotations

import pytest

from shardplan.models import SpecError, load_config
from tests.unit.models.test_config_nulls import _config


@pytest.mark.parametrize(("preset", "fields", "named"), [
    ("qwen3-30b-a3b", {"mlp_only_layers": list(range(48))}, "mlp_only_layers"),
    ("qwen3-30b-a3b", {"decoder_sparse_step": 100}, "decoder_sparse_step"),
    ("deepseek-v3", {"first_k_dense_replace": 61}, "first_k_dense_replace"),
    ("deepseek-v3", {"first_k_dense_replace": 60, "moe_layer_freq": 7}, "moe_layer_freq"),
])
def test_a_config_that_leaves_no_moe_layer_names_its_own_field(preset, fields, named):
    # These were reported under 'moe.layers', a name no config has.
    with pytest.raises(SpecError) as caught:
        load_config(_config(preset, **fields))
    assert caught.value.field == named and "leaves none of the" in caught.value.reason
