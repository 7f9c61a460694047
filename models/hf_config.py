"""Read a Hugging Face ``config.json`` into a ``ModelSpec``.

Each supported family says where its fields live; everything they share is read once. The hazards
other tools fell into (REFERENCE.md): the expert count under three names, top-k under two, four ways
of saying which layers are MoE, Llama 4's nested ``text_config``, an MLA cache mistaken for
``num_key_value_heads``. A missing or mistyped field raises ``SpecError`` naming it.
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from shardplan.models.derived import parameter_counts
from shardplan.models.dtypes import DType
from shardplan.models.errors import SpecError, printable, quoted, spec_error_from
from shardplan.models.files import parse_json, read_text, reread_json
from shardplan.models.spec import Attention, AttentionKind, ModelSpec, MoE

Config = dict[str, Any]

CONFIG_FILE = "config.json"  # a Hugging Face checkpoint's model config, in the checkpoint's folder


def load_config_file(path: str | Path, name: str | None = None) -> ModelSpec:
    """Load a config.json from disk; ``name`` defaults to its ``_shardplan_id``, else, for a file called
    ``config.json``, the directory holding it as given (a checkpoint's folder: what vLLM, SGLang and
    TensorRT-LLM load, so the launch commands name it), else the file's stem.

    The file is read through ``models.files`` (a regular file, at most 1 MiB, strict UTF-8, nesting
    bounded); an ``_shardplan_id`` must be a Hugging Face id (``check_model_id``), because launch
    commands print it.
    """
    path = Path(path)
    fallback = str(path.parent) if path.name == CONFIG_FILE else path.stem
    return _load_config_text(read_text(path, "model"), str(path), name, printable(fallback))


def load_config_object(cfg: object, name: str | None = None) -> ModelSpec:
    """A config.json handed over already parsed (an agent's JSON object rather than a file): written
    back to JSON text and read through the checks a file gets, so the same size and nesting bounds
    and the same messages apply. ``name`` defaults to its ``_shardplan_id``, else ``custom``."""
    return _load_config_data(reread_json(cfg, "model", "the config"), "the config", name, "custom")


def _load_config_text(text: str, where: str, name: str | None, default_name: str) -> ModelSpec:
    return _load_config_data(parse_json(text, "model", where), where, name, default_name)


def _load_config_data(cfg: Any, where: str, name: str | None, default_name: str) -> ModelSpec:
    if not isinstance(cfg, dict):
        raise SpecError("model", f"{where} must hold a JSON object")
    model_id = cfg.get("_shardplan_id")
    if model_id is not None:
        check_model_id(model_id, "_shardplan_id")
    return load_config(cfg, name=name or model_id or default_name)


# A Hugging Face repository id: ``org/name`` (or a bare ``name``), each part letters, digits and ``._-``,
# starting and ending with a letter or digit, without ``--`` or ``..``, at most 96 characters.
_HF_PART = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"
HF_ID = re.compile(rf"^{_HF_PART}(?:/{_HF_PART})?$")


def check_model_id(value: object, field: str) -> str:
    """``value`` when it is a Hugging Face id (``org/name``); otherwise ``SpecError(field, ...)``.

    >>> check_model_id("meta-llama/Llama-3.1-8B", "_shardplan_id")
    'meta-llama/Llama-3.1-8B'
    """
    if not isinstance(value, str) or not HF_ID.match(value) or "--" in value or ".." in value:
        shown = repr(value)[:80]
        raise SpecError(field, f"{shown} is not a Hugging Face id (org/name of letters, digits, '._-')")
    return value


# The largest value each size field may hold. Real checkpoints are far below (the largest preset has
# 126 layers, hidden size 16,384, 384 experts); the caps keep every derived count (parameters, bytes,
# FLOPs per token) well inside 64-bit integers and the solver's scaled bounds, and bound the work a
# config can ask for (a table per layer, a placement per expert).
MAX_LAYERS = 1024
MAX_WIDTH = 1 << 20  # hidden and FFN sizes, vocabulary
MAX_HEADS = 1 << 12  # heads, KV heads, head dims, LoRA ranks
MAX_EXPERTS = 4096
MAX_CONTEXT = 1 << 24  # max_position_embeddings, sliding windows: 16M tokens
MAX_INT = (1 << 31) - 1  # anything else
MAX_PARAMETERS = 1 << 46  # 70 trillion, 70x the largest preset: bytes and FLOPs stay far inside 2**63
_FIELD_MAX = {
    "num_hidden_layers": MAX_LAYERS,
    "first_k_dense_replace": MAX_LAYERS, "moe_layer_freq": MAX_LAYERS, "decoder_sparse_step": MAX_LAYERS,
    "interleave_moe_layer_step": MAX_LAYERS, "no_rope_layer_interval": MAX_LAYERS,
    "hidden_size": MAX_WIDTH, "intermediate_size": MAX_WIDTH, "moe_intermediate_size": MAX_WIDTH,
    "intermediate_size_mlp": MAX_WIDTH, "vocab_size": MAX_WIDTH,
    "num_attention_heads": MAX_HEADS, "num_key_value_heads": MAX_HEADS, "head_dim": MAX_HEADS,
    "v_head_dim": MAX_HEADS, "qk_rope_head_dim": MAX_HEADS, "qk_nope_head_dim": MAX_HEADS,
    "q_lora_rank": MAX_WIDTH, "kv_lora_rank": MAX_WIDTH,
    "num_local_experts": MAX_EXPERTS, "num_experts": MAX_EXPERTS, "n_routed_experts": MAX_EXPERTS,
    "num_experts_per_tok": MAX_EXPERTS, "experts_per_token": MAX_EXPERTS, "n_shared_experts": MAX_EXPERTS,
    "max_position_embeddings": MAX_CONTEXT, "sliding_window": MAX_CONTEXT, "attention_chunk_size": MAX_CONTEXT,
}


# Fields of a composite (Llama 4) config.json that describe the whole checkpoint, read when text_config lacks them.
_WHOLE_MODEL_FIELDS = ("quantization_config", "torch_dtype", "dtype")


def load_config(cfg: Config, name: str = "custom") -> ModelSpec:
    """Build a ``ModelSpec`` from a parsed config.json."""
    archs = cfg.get("architectures")
    supported = f"supported: {', '.join(sorted(_FAMILIES))}"
    if archs is None:
        raise SpecError("architectures", f"missing; {supported}")
    if isinstance(archs, str):
        raise SpecError("architectures", f"expected a list of class names, got the string {quoted(archs)}; "
                                            "write it inside [ ]")
    if not isinstance(archs, list) or not archs:
        raise SpecError("architectures", f"expected a list of class names, got {quoted(archs)}; {supported}")
    if not isinstance(archs[0], str):
        raise SpecError("architectures", f"expected a class name, got {quoted(archs[0])}; {supported}")
    arch = archs[0]
    if arch not in _FAMILIES:
        raise SpecError("architectures", f"unsupported {quoted(arch)}; {supported}")
    if arch == "Llama4ForConditionalGeneration":
        text = cfg.get("text_config")
        if not isinstance(text, dict):
            raise SpecError("text_config", "Llama 4 keeps its text model under text_config; missing")
        # A composite config keeps the checkpoint's number formats at its top: transformers saves
        # quantization_config there, not in text_config, so reading text_config alone priced an FP8 or 4-bit
        # checkpoint as bf16 (Maverick: 801 GB of weights either way).
        outer = {key: cfg[key] for key in _WHOLE_MODEL_FIELDS if key in cfg and key not in text}
        fields = {**text, **outer, "architectures": archs}
    else:
        fields = cfg
    try:
        spec = _FAMILIES[arch](_Reader(fields), name, arch)
    except ValidationError as exc:
        raise spec_error_from(exc) from None
    total = parameter_counts(spec).total
    if total > MAX_PARAMETERS:
        raise SpecError(
            "num_hidden_layers", f"the config describes {total:.3g} parameters; at most {MAX_PARAMETERS:.3g}"
        )
    return spec


class _Reader:
    """Typed access to config fields, so every error names the field it is about."""

    def __init__(self, cfg: Config):
        self.cfg = cfg

    def has(self, key: str) -> bool:
        return self.cfg.get(key) is not None

    def absent(self, key: str) -> bool:
        """The file does not name the field at all (a null is named: for some fields it means "none")."""
        return key not in self.cfg

    def get(self, key: str, default: Any = None) -> Any:
        """The field's value; a field set to null is not given, as transformers reads it: ``default``."""
        value = self.cfg.get(key)
        return default if value is None else value

    def int(self, key: str, default: int | None = None, minimum: int = 1) -> int:
        value = self.get(key, default)
        if value is None:
            raise SpecError(key, "missing")
        if isinstance(value, bool) or not isinstance(value, int):
            raise SpecError(key, f"expected an integer, got {quoted(value)}")
        if value < minimum:
            raise SpecError(key, f"must be >= {minimum}, got {value}")
        if value > _FIELD_MAX.get(key, MAX_INT):
            raise SpecError(key, f"must be <= {_FIELD_MAX.get(key, MAX_INT):,}, got {quoted(value)}")
        return value

    # Below the method ``int``, a bare ``int`` in an annotation names that method (class scope), so
    # these signatures spell the type ``builtins.int``.
    def first_int(self, keys: tuple[str, ...], minimum: builtins.int = 1) -> builtins.int:
        for key in keys:
            if self.has(key):
                return self.int(key, minimum=minimum)
        raise SpecError(keys[0], f"missing (also looked for {', '.join(keys[1:])})")

    def bool(self, key: str, default: bool) -> bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise SpecError(key, f"expected true or false, got {quoted(value)}")
        return value

    def int_list(self, key: str) -> list[builtins.int]:
        value = self.cfg.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise SpecError(key, f"expected a list of integers, got {quoted(value)}")
        if len(value) > MAX_LAYERS or any(not 0 <= v <= MAX_LAYERS for v in value):
            raise SpecError(key, f"expected at most {MAX_LAYERS} layer indices in 0..{MAX_LAYERS}")
        return value

    def str(self, key: str, default: str) -> str:
        value = self.get(key, default)
        if not isinstance(value, str):
            raise SpecError(key, f"expected a string, got {quoted(value)}")
        return value


def _common(r: _Reader, name: str, arch: str) -> dict[str, Any]:
    """Fields every family shares: sizes, vocabulary, number formats."""
    weights, experts = _weight_dtypes(r)
    return dict(
        name=name,
        architecture=arch,
        num_layers=r.int("num_hidden_layers"),
        hidden_size=r.int("hidden_size"),
        vocab_size=r.int("vocab_size"),
        tie_word_embeddings=r.bool("tie_word_embeddings", False),
        activation=r.str("hidden_act", "silu"),
        weights_dtype=weights,
        expert_dtype=experts,
        kv_dtype=DType.FP16 if weights is DType.FP16 else DType.BF16,
        max_position_embeddings=r.int("max_position_embeddings", 131072),
    )


def _weight_dtypes(r: _Reader) -> tuple[DType, DType]:
    """(dense weights, routed-expert weights) from torch_dtype and quantization_config."""
    base = DType.parse(str(r.cfg.get("torch_dtype") or r.cfg.get("dtype") or "bf16"), "torch_dtype")
    if base not in (DType.BF16, DType.FP16):
        base = DType.BF16  # float32 checkpoints are served in 16 bits
    quant = r.cfg.get("quantization_config")
    if not quant:
        return base, base
    if not isinstance(quant, dict):
        raise SpecError("quantization_config", "expected an object")
    if quant.get("quant_method") is None:
        raise SpecError("quantization_config.quant_method", "missing; supported: fp8, mxfp4, awq, gptq")
    method = str(quant["quant_method"]).lower()
    if method == "fp8":
        return DType.FP8, DType.FP8
    if method == "mxfp4":
        # gpt-oss: only the routed experts are MXFP4; attention, router and embeddings stay 16-bit.
        return base, DType.MXFP4
    if method in ("awq", "gptq"):
        # Only 4-bit integer weights are priced (DType.INT4); GPTQ and AWQ also write 2, 3 and 8 bits,
        # which were priced as 4. Absent (or null), transformers' default: 4.
        bits = quant.get("bits")
        if bits is not None and (isinstance(bits, bool) or bits != 4):
            raise SpecError("quantization_config.bits",
                            f"{method} with {quoted(bits)} bits is not supported; only 4-bit {method} is priced")
        # INT4 is priced at 4.125 bits a weight, one 16-bit scale per 128; smaller groups store more (groups of 32:
        # 4.5 bits, 9 % more weight bytes than priced), so they are refused rather than under-priced. Larger groups
        # and per-channel scales (-1) store less and are priced on the safe side.
        group = quant.get("group_size")
        if group is not None and (isinstance(group, bool) or not isinstance(group, int) or 0 <= group < 128):
            raise SpecError("quantization_config.group_size",
                            f"{method} groups of {quoted(group)} weights store more than the 4.125 bits a weight "
                            "priced; only groups of 128 or more (or -1, per channel) are priced")
        return DType.INT4, DType.INT4
    raise SpecError(
        "quantization_config.quant_method", f"unsupported {quoted(method)}; supported: fp8, mxfp4, awq, gptq"
    )


def _attention(
    r: _Reader, window_layers: tuple[int, ...] = (), window: int | None = None, head_dim_default: int | None = None
) -> Attention:
    """``head_dim_default``: the width a family's transformers config class gives a missing ``head_dim``, where
    that is a constant rather than hidden / heads (Qwen3: 128, gpt-oss: 64)."""
    heads = r.int("num_attention_heads")
    kv_heads = r.int("num_key_value_heads", default=heads)
    hidden = r.int("hidden_size")
    if not r.has("head_dim") and head_dim_default is None and hidden % heads:
        raise SpecError("head_dim", f"missing, and hidden_size {hidden} is not a multiple of {heads} heads")
    head_dim = r.int("head_dim", default=head_dim_default or hidden // heads)
    kind = AttentionKind.MHA if kv_heads == heads else AttentionKind.MQA if kv_heads == 1 else AttentionKind.GQA
    return Attention(
        kind=kind,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        v_head_dim=head_dim,
        qkv_bias=r.bool("attention_bias", False),
        sliding_window=window,
        sliding_window_layers=window_layers,
    )


def _every_layer_window(r: _Reader, arch: str) -> tuple[tuple[int, ...], int | None]:
    """Mistral-style sliding window on every layer, when the config sets one, or on the layers ``layer_types``
    marks ``sliding_attention`` where the config lists them.

    Qwen configs carry a ``sliding_window`` value too, but it only applies with ``use_sliding_window: true``
    (transformers' Qwen2/Qwen3 configs default it to false), and then to the layers ``layer_types`` marks
    ``sliding_attention``, or without that list from layer ``max_window_layers`` on (default 28), as
    transformers' Qwen2/Qwen3 configs lay their layers out.
    """
    qwen = arch.startswith("Qwen")
    if not r.has("sliding_window") or not r.bool("use_sliding_window", not qwen):
        return (), None
    window = r.int("sliding_window")
    layers = r.int("num_hidden_layers")
    typed = _typed_window_layers(r, layers)
    if typed is not None:  # the config lists each layer's kind (Qwen, and Mistral-family configs that interleave)
        windowed = typed
    elif not qwen:
        windowed = tuple(range(layers))
    else:
        windowed = tuple(range(min(r.int("max_window_layers", default=28, minimum=0), layers), layers))
    return windowed, window if windowed else None


# transformers' Qwen3Config gives a missing head_dim 128, not hidden / heads: Qwen3-0.6B has 16 heads of 128 over a
# hidden size of 1024.
_HEAD_DIM_DEFAULT = {"Qwen3ForCausalLM": 128}


def _dense(r: _Reader, name: str, arch: str, qkv_bias: bool = False) -> ModelSpec:
    """Llama 2/3, Mistral, Qwen2, Qwen3: one attention and one gated FFN per layer."""
    attention = _attention(r, *_every_layer_window(r, arch), head_dim_default=_HEAD_DIM_DEFAULT.get(arch))
    if qkv_bias:
        attention = attention.model_copy(update={"qkv_bias": True})
    return ModelSpec(**_common(r, name, arch), attention=attention, intermediate_size=r.int("intermediate_size"))


def _qwen2(r: _Reader, name: str, arch: str) -> ModelSpec:
    # Qwen2 has biases on q, k and v but no attention_bias field.
    return _dense(r, name, arch, qkv_bias=True)


def _mixtral(r: _Reader, name: str, arch: str) -> ModelSpec:
    layers = r.int("num_hidden_layers")
    moe = MoE(
        num_experts=r.first_int(("num_local_experts", "num_experts")),
        experts_per_token=r.int("num_experts_per_tok"),
        expert_intermediate_size=r.int("intermediate_size"),
        layers=tuple(range(layers)),
    )
    common = _common(r, name, arch)
    attention = _attention(r, *_every_layer_window(r, arch))
    return ModelSpec(**common, attention=attention, intermediate_size=0, moe=moe)


def _qwen3_moe(r: _Reader, name: str, arch: str) -> ModelSpec:
    layers = r.int("num_hidden_layers")
    step = r.int("decoder_sparse_step", default=1)
    dense_only = set(r.int_list("mlp_only_layers"))
    moe_layers = tuple(i for i in range(layers) if i not in dense_only and (i + 1) % step == 0)
    _require_moe_layer(moe_layers, layers, "decoder_sparse_step" if step > layers else "mlp_only_layers",
                       f"decoder_sparse_step {step}, {len(dense_only)} mlp_only_layers")
    moe = MoE(
        num_experts=r.first_int(("num_experts", "num_local_experts")),
        experts_per_token=r.int("num_experts_per_tok"),
        expert_intermediate_size=r.int("moe_intermediate_size"),
        layers=moe_layers,
    )
    dense_ffn = r.int("intermediate_size") if len(moe_layers) < layers else r.int("intermediate_size", minimum=0)
    return ModelSpec(
        **_common(r, name, arch), attention=_attention(r, *_every_layer_window(r, arch)), intermediate_size=dense_ffn,
        moe=moe,
    )


def _require_moe_layer(moe_layers: tuple[int, ...], layers: int, field: str, settings: str) -> None:
    """A MoE family whose layer fields leave no MoE layer is refused naming the field the config gave, not the
    spec's ``moe.layers``, a name no config has."""
    if not moe_layers:
        raise SpecError(field, f"leaves none of the {layers} layers a MoE layer ({settings})")


# What an absent field means to transformers' DeepseekV3Config and to DeepSeek's own configuration_deepseek.py.
_DEEPSEEK_ABSENT = {
    "first_k_dense_replace": "transformers makes the first 3 layers dense, DeepSeek's code none",
    "n_shared_experts": "transformers adds 1 shared expert, DeepSeek's code none",
    "q_lora_rank": "transformers and DeepSeek's code both compress queries to rank 1536",
}


def _deepseek_v3(r: _Reader, name: str, arch: str) -> ModelSpec:
    """DeepSeek-V3/R1 and Kimi-K2: MLA attention, first k layers dense, then MoE every moe_layer_freq."""
    # Every released config names these three (null where there is none); a config without one was priced as
    # all-MoE, unshared and uncompressed, which neither reader of the file builds.
    for field, meaning in _DEEPSEEK_ABSENT.items():
        if r.absent(field):
            raise SpecError(field, f"missing; name it (null for none): absent, {meaning}")
    layers = r.int("num_hidden_layers")
    heads = r.int("num_attention_heads")
    rope, nope = r.int("qk_rope_head_dim"), r.int("qk_nope_head_dim")
    attention = Attention(
        kind=AttentionKind.MLA,
        num_heads=heads,
        # The cache holds one latent per token, not per-head keys: num_key_value_heads is ignored.
        num_kv_heads=heads,
        head_dim=nope + rope,
        v_head_dim=r.int("v_head_dim"),
        qkv_bias=r.bool("attention_bias", False),
        q_lora_rank=r.int("q_lora_rank", default=0, minimum=0),
        kv_lora_rank=r.int("kv_lora_rank"),
        qk_rope_head_dim=rope,
        qk_nope_head_dim=nope,
    )
    first_dense = r.int("first_k_dense_replace", default=0, minimum=0)
    freq = r.int("moe_layer_freq", default=1)
    moe_layers = tuple(i for i in range(first_dense, layers) if i % freq == 0)
    _require_moe_layer(moe_layers, layers, "first_k_dense_replace" if first_dense >= layers else "moe_layer_freq",
                       f"first_k_dense_replace {first_dense}, moe_layer_freq {freq}")
    shared = r.int("n_shared_experts", default=0, minimum=0)
    expert_ffn = r.int("moe_intermediate_size")
    moe = MoE(
        num_experts=r.first_int(("n_routed_experts", "num_experts", "num_local_experts")),
        experts_per_token=r.int("num_experts_per_tok"),
        expert_intermediate_size=expert_ffn,
        num_shared_experts=shared,
        shared_intermediate_size=expert_ffn if shared else 0,
        layers=moe_layers,
    )
    # The multi-token-prediction module (num_nextn_predict_layers) is not part of inference here.
    common = _common(r, name, arch)
    return ModelSpec(**common, attention=attention, intermediate_size=r.int("intermediate_size"), moe=moe)


def _typed_window_layers(r: _Reader, layers: int) -> tuple[int, ...] | None:
    """The layers ``layer_types`` marks ``sliding_attention``, or None when the config does not list them."""
    types = r.get("layer_types")
    if types is None:
        return None
    if not isinstance(types, list) or len(types) != layers:
        raise SpecError("layer_types", f"expected {layers} entries")
    unknown = [kind for kind in types if kind not in ("sliding_attention", "full_attention")]
    if unknown:  # a misspelt kind was priced as full attention
        raise SpecError("layer_types", f"unknown kind {quoted(unknown[0])}; one of sliding_attention, full_attention")
    return tuple(i for i, kind in enumerate(types) if kind == "sliding_attention")


def _gpt_oss(r: _Reader, name: str, arch: str) -> ModelSpec:
    """gpt-oss: a config without ``layer_types``, ``sliding_window`` or ``head_dim`` gets transformers' GptOssConfig
    defaults: every other layer from layer 0 windowed to 128 tokens, heads of 64 (not 2880 / 64 = 45)."""
    layers = r.int("num_hidden_layers")
    typed = _typed_window_layers(r, layers)
    window_layers = typed if typed is not None else tuple(range(0, layers, 2))
    window = r.int("sliding_window", default=128 if r.absent("sliding_window") else None) if window_layers else None
    attention = _attention(r, window_layers, window, head_dim_default=64).model_copy(update={"qkv_bias": True})
    moe = MoE(
        num_experts=r.first_int(("num_local_experts", "num_experts")),
        experts_per_token=r.first_int(("num_experts_per_tok", "experts_per_token")),
        expert_intermediate_size=r.int("intermediate_size"),
        layers=tuple(range(layers)),
    )
    return ModelSpec(**_common(r, name, arch), attention=attention, intermediate_size=0, moe=moe)


def _llama4(r: _Reader, name: str, arch: str) -> ModelSpec:
    """Llama 4 text model: MoE every interleave step with one shared expert; chunked local attention."""
    layers = r.int("num_hidden_layers")
    if r.has("moe_layers"):
        moe_layers = tuple(r.int_list("moe_layers"))
        # Checked here, naming the config's field: the spec's own check named ``moe.layers``, which no config has.
        if list(moe_layers) != sorted(set(moe_layers)) or any(i >= layers for i in moe_layers):
            raise SpecError("moe_layers", f"expected ascending, distinct layer indices below {layers}, got "
                                          f"{quoted(list(moe_layers))}")
        _require_moe_layer(moe_layers, layers, "moe_layers", "moe_layers []")
    else:
        step = r.int("interleave_moe_layer_step", default=1)
        moe_layers = tuple(range(step - 1, layers, step))
        _require_moe_layer(moe_layers, layers, "interleave_moe_layer_step", f"interleave_moe_layer_step {step}")
    expert_ffn = r.int("intermediate_size")
    # no_rope_layers[i] == 1 marks a RoPE layer, which attends within chunks of attention_chunk_size;
    # absent, transformers makes every no_rope_layer_interval-th layer (default 4th) a global NoPE layer.
    rope_flags = r.int_list("no_rope_layers")
    # A short list made the layers past its end global NoPE layers; a long one was refused naming
    # sliding_window_layers, a field no config has.
    if rope_flags and len(rope_flags) != layers:
        raise SpecError("no_rope_layers", f"expected {layers} entries, one per layer, got {len(rope_flags)}")
    bad = next((flag for flag in rope_flags if flag not in (0, 1)), None)
    if bad is not None:
        raise SpecError("no_rope_layers", f"expected 1 (RoPE, chunked) or 0 (NoPE) per layer, got {bad}")
    if not rope_flags:
        interval = r.int("no_rope_layer_interval", default=4)
        rope_flags = [int((i + 1) % interval != 0) for i in range(layers)]
    # Absent, transformers' Llama4TextConfig chunks at 8192 tokens (as both released models do); null: no chunks.
    if r.absent("attention_chunk_size"):
        chunk: int | None = 8192
    else:
        chunk = r.int("attention_chunk_size") if r.has("attention_chunk_size") and rope_flags else None
    window_layers = tuple(i for i, flag in enumerate(rope_flags) if flag) if chunk else ()
    moe = MoE(
        num_experts=r.int("num_local_experts"),
        experts_per_token=r.int("num_experts_per_tok"),
        expert_intermediate_size=expert_ffn,
        num_shared_experts=1,
        shared_intermediate_size=expert_ffn,
        layers=moe_layers,
    )
    dense_ffn = r.int("intermediate_size_mlp") if len(moe_layers) < layers else 0
    return ModelSpec(
        **_common(r, name, arch),
        attention=_attention(r, window_layers, chunk),
        intermediate_size=dense_ffn,
        moe=moe,
    )


_FAMILIES: dict[str, Callable[[_Reader, str, str], ModelSpec]] = {
    "LlamaForCausalLM": _dense,
    "MistralForCausalLM": _dense,
    "Qwen3ForCausalLM": _dense,
    "Qwen2ForCausalLM": _qwen2,
    "MixtralForCausalLM": _mixtral,
    "Qwen3MoeForCausalLM": _qwen3_moe,
    "DeepseekV3ForCausalLM": _deepseek_v3,
    "GptOssForCausalLM": _gpt_oss,
    "Llama4ForConditionalGeneration": _llama4,
    "Llama4ForCausalLM": _llama4,
}
