"""LLM architecture specs: ModelSpec, config.json loading, presets and derived quantities."""

from shardplan.models.dtypes import DType
from shardplan.models.errors import InfeasibleError, ShardplanError, SolverLimitError, SpecError
from shardplan.models.hf_config import load_config, load_config_file
from shardplan.models.presets import Preset, find_preset, get_model, presets
from shardplan.models.spec import Attention, AttentionKind, ModelSpec, MoE

__all__ = [
    "Attention", "AttentionKind", "DType", "InfeasibleError", "ModelSpec", "MoE", "Preset",
    "ShardplanError", "SolverLimitError", "SpecError", "find_preset", "get_model", "load_config",
    "load_config_file", "presets",
]
