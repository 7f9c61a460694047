"""``architectures`` that is not a non-empty list of class names: one error naming the field and saying what it got."""

from __future__ import annotations

import json

import pytest

from shardplan.models import SpecError, load_config
from shardplan.models.presets import CONFIG_DIR

LLAMA = json.loads((CONFIG_DIR / "llama-3.1-8b.json").read_text())


@pytest.mark.parametrize(("archs", "said"), [
    ("LlamaForCausalLM", "got the string 'LlamaForCausalLM'"),
    ([], "got []"),
    ({"LlamaForCausalLM": 1}, "got {'LlamaForCausalLM': 1}"),
    ([None], "expected a class name, got None"),
    ([["LlamaForCausalLM"]], "expected a class name, got ['LlamaForCausalLM']"),
])
def test_a_malformed_architectures_says_what_it_got(archs, said):
    # Each was refused as "architectures: missing", which a config that has the field does not explain.
    with pytest.raises(SpecError) as err:
        load_config({**LLAMA, "architectures": archs})
    assert err.value.field == "architectures" and said in err.value.reason
    assert "missing" not in err.value.reason


def test_an_absent_architectures_is_missing():
    cfg = {k: v for k, v in LLAMA.items() if k != "architectures"}
    with pytest.raises(SpecError) as err:
        load_config(cfg)
    assert err.value.field == "architectures" and err.value.reason.startswith("missing; supported: ")
