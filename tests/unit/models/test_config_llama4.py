"""Llama 4's no_rope_layers: one 0/1 flag per layer, or refused naming the field."""

from __future__ import annotations

import json

import pytest

from shardplan.models import SpecError, load_config
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
