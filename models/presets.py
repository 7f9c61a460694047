"""Model presets: the config.json files in ``configs/``, read through the same loader as users' files.

Each file carries ``_shardplan_id`` (its Hugging Face id), ``_shardplan_aliases`` and
``_shardplan_source``; lookups are case-insensitive on the id and the aliases.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache, lru_cache
from pathlib import Path

from shardplan.models.errors import SpecError, quoted
from shardplan.models.hf_config import CONFIG_FILE, load_config, load_config_file
from shardplan.models.spec import ModelSpec

CONFIG_DIR = Path(__file__).parent / "configs"


@dataclass(frozen=True)
class Preset:
    id: str
    aliases: tuple[str, ...]
    source: str
    path: Path

    def load(self) -> ModelSpec:
        return _load_preset(self.path)


@cache
def _load_preset(path: Path) -> ModelSpec:
    cfg = json.loads(path.read_text())
    return load_config(cfg, name=cfg["_shardplan_id"])


@lru_cache(maxsize=1)
def presets() -> tuple[Preset, ...]:
    """Every preset, ordered by id."""
    found = []
    for path in sorted(CONFIG_DIR.glob("*.json")):
        cfg = json.loads(path.read_text())
        found.append(
            Preset(
                id=cfg["_shardplan_id"],
                aliases=tuple(cfg.get("_shardplan_aliases", ())),
                source=cfg.get("_shardplan_source", ""),
                path=path,
            )
        )
    return tuple(sorted(found, key=lambda p: p.id.lower()))


def find_preset(name: str) -> Preset | None:
    key = name.strip().lower()
    for preset in presets():
        if key == preset.id.lower() or key in (a.lower() for a in preset.aliases):
            return preset
    return None


def get_model(name: str) -> ModelSpec:
    """A preset by id or alias, a config.json path, or a checkpoint's folder holding a config.json."""
    preset = find_preset(name)
    if preset is not None:
        return preset.load()
    if name.endswith(".json") or _is_file(name):
        return load_config_file(name)
    if _is_dir(name):
        config = Path(name) / CONFIG_FILE
        if not _is_file(str(config)):
            raise SpecError("model", f"{quoted(name, 240)} is a folder without a {CONFIG_FILE}")
        return load_config_file(config)
    raise unknown_model(name)


def unknown_model(name: str) -> SpecError:
    """The error for a name that is neither a preset nor a config.json file, listing the presets (the command
    line and the MCP server word it alike; only the command line reads a checkpoint folder)."""
    known = ", ".join(p.aliases[0] if p.aliases else p.id for p in presets())
    return SpecError("model", f"unknown model {quoted(name)}: not a preset or a config.json file; presets: {known}")


def _is_dir(name: str) -> bool:
    """Whether ``name`` is an existing folder; a name no folder can have (NUL, too long) is not one."""
    try:
        return Path(name).is_dir()
    except (OSError, ValueError):
        return False


def _is_file(name: str) -> bool:
    """Whether ``name`` is an existing file; a name no file can have (NUL, too long) is not one."""
    try:
        return Path(name).is_file()
    except (OSError, ValueError):
        return False
