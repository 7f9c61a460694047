"""config.json loading: every preset round-trips, bad input names its field."""

from __future__ import annotations

import json

import pytest

from shardplan.models import ModelSpec, SpecError, get_model, load_config, load_config_file, presets
from shardplan.models.hf_config import load_config_object
from shardplan.models.presets import CONFIG_DIR

LLAMA = json.loads((CONFIG_DIR / "llama-3.1-8b.json").read_text())


@pytest.mark.parametrize("preset", presets(), ids=lambda p: p.id)
def test_every_preset_round_trips_through_json(preset):
    spec = preset.load()
    again = ModelSpec.model_validate_json(spec.model_dump_json())
    assert again == spec
    assert load_config_file(preset.path) == spec


def test_presets_resolve_by_id_and_alias_case_insensitively():
    assert get_model("DeepSeek-V3") == get_model("deepseek-ai/DeepSeek-V3") == get_model("deepseek-r1")


@pytest.mark.parametrize(
    "mutate,field",
    [
        (lambda c: c.pop("hidden_size"), "hidden_size"),
        (lambda c: c.update(num_hidden_layers="32"), "num_hidden_layers"),
        (lambda c: c.update(num_attention_heads=0), "num_attention_heads"),
        (lambda c: c.update(num_key_value_heads=7), "num_key_value_heads"),
        (lambda c: c.update(architectures=["FalconForCausalLM"]), "architectures"),
        (lambda c: c.pop("architectures"), "architectures"),
        (lambda c: c.update(tie_word_embeddings="yes"), "tie_word_embeddings"),
        (lambda c: c.update(quantization_config={"quant_method": "bitsandbytes"}), "quantization_config.quant_method"),
    ],
    ids=["missing", "string-for-number", "zero-heads", "kv-not-dividing", "unknown-arch", "no-arch", "bool", "quant"],
)
def test_bad_configs_raise_spec_error_naming_the_field(mutate, field):
    cfg = json.loads(json.dumps(LLAMA))
    mutate(cfg)
    with pytest.raises(SpecError) as err:
        load_config(cfg)
    assert err.value.field == field


@pytest.mark.parametrize("kind", ["sliding_attn", 5, None])
def test_an_unknown_gpt_oss_layer_type_is_named(kind):
    # A misspelt kind was priced as full attention (exit 0).
    cfg = json.loads((CONFIG_DIR / "gpt-oss-120b.json").read_text())
    cfg["layer_types"][0] = kind
    with pytest.raises(SpecError) as err:
        load_config(cfg)
    assert err.value.field == "layer_types" and "unknown kind" in err.value.reason


def test_unknown_architecture_lists_the_supported_ones():
    with pytest.raises(SpecError, match="MixtralForCausalLM"):
        load_config({**LLAMA, "architectures": ["FalconForCausalLM"]})


def test_unknown_model_name_lists_presets():
    with pytest.raises(SpecError, match="llama-3.1-70b") as err:
        get_model("llama-9")
    assert err.value.field == "model"


def test_malformed_file_is_a_spec_error(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(SpecError, match="not valid JSON"):
        load_config_file(bad)


def test_llama4_without_text_config_is_named():
    with pytest.raises(SpecError) as err:
        load_config({"architectures": ["Llama4ForConditionalGeneration"]})
    assert err.value.field == "text_config"


def test_quantised_checkpoints_carry_their_formats():
    assert get_model("deepseek-v3").weights_dtype.value == "fp8"
    oss = get_model("gpt-oss-120b")
    assert (oss.weights_dtype.value, oss.expert_dtype.value) == ("bf16", "mxfp4")


# --- a config handed over as an object (an MCP agent's), through the checks a file gets -----------
@pytest.mark.parametrize("preset", presets()[:3], ids=lambda p: p.id)
def test_a_config_object_loads_as_its_file(preset):
    cfg = json.loads(preset.path.read_text())
    assert load_config_object(cfg) == load_config_file(preset.path)


def test_a_config_object_fails_with_the_files_messages(tmp_path):
    bad = {k: v for k, v in LLAMA.items() if k != "hidden_size"}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(SpecError) as from_file:
        load_config_file(path)
    with pytest.raises(SpecError) as from_object:
        load_config_object(bad)
    assert str(from_object.value) == str(from_file.value) and from_object.value.field == "hidden_size"
    with pytest.raises(SpecError, match="model: the config must hold a JSON object"):
        load_config_object([LLAMA])
    deep: object = {}
    for _ in range(100):  # past MAX_JSON_DEPTH (64), as a file nested so deep is refused
        deep = {"x": deep}
    with pytest.raises(SpecError, match="nests deeper than 64 levels"):
        load_config_object({**LLAMA, "extra": deep})
    with pytest.raises(SpecError, match="at most 1,048,576 are read"):
        load_config_object({**LLAMA, "padding": "x" * (1 << 20)})


def _checkpoint(folder, with_id: bool = False):
    """A checkpoint folder holding Llama-3.1-8B's config.json, with or without its ``_shardplan_id``."""
    folder.mkdir()
    cfg = dict(LLAMA) if with_id else {k: v for k, v in LLAMA.items() if k != "_shardplan_id"}
    (folder / "config.json").write_text(json.dumps(cfg))
    return folder


def test_a_checkpoint_folder_or_its_config_json_is_named_by_the_folder(tmp_path):
    """What the engines load is the folder, so the model is named by it (as given): ``--model DIR`` and
    ``--model DIR/config.json`` alike; another file name keeps its stem, and an ``_shardplan_id`` wins."""
    folder = _checkpoint(tmp_path / "my-llama")
    assert get_model(str(folder)).name == str(folder)
    assert get_model(f"{folder}/").name == str(folder)
    assert get_model(str(folder / "config.json")).name == str(folder)
    other = tmp_path / "tuned.json"
    other.write_text((folder / "config.json").read_text())
    assert get_model(str(other)).name == "tuned"
    assert get_model(str(_checkpoint(tmp_path / "x", with_id=True))).name == LLAMA["_shardplan_id"]
    assert get_model(str(folder)).num_layers == get_model("llama-3.1-8b").num_layers


def test_a_folder_without_a_config_json_names_the_model_option(tmp_path):
    with pytest.raises(SpecError) as err:
        get_model(str(tmp_path))
    assert err.value.field == "model" and err.value.reason == f"'{tmp_path}' is a folder without a config.json"
