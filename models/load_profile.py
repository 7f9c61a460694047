"""How many tokens the router sends to each expert of each MoE layer: the input of expert placement.

A profile is data only: measured counts read from a file (``load_profile``) or a synthetic shape
(``uniform_profile``, ``zipf_profile``). Nothing here decides a placement; ``solver/placement`` does.

File formats read by ``load_profile``:

- JSON: an object ``{"layers": {"3": [t0, t1, ...], "4": [...]}}`` whose keys are MoE layer indices
  (strings, as JSON requires) and whose values list the tokens routed to expert 0, 1, ... of that
  layer, one number per expert. Optional keys: ``"num_experts"`` (checked against the model) and
  ``"source"`` (free text, kept in the profile).
- CSV: a header line ``layer,expert,tokens`` and then one row per (layer, expert). An expert missing
  from a layer that has rows got no tokens (0); a layer with no rows at all is an error.

Both must cover exactly the model's MoE layers: a missing layer or one that is not a MoE layer of the
model is a ``SpecError``.
"""

from __future__ import annotations

import csv
import math
import random
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import ConfigDict, Field, NonNegativeInt, PositiveInt, ValidationError, model_validator

from shardplan.models.errors import SpecError, printable, quoted, spec_error_from
from shardplan.models.files import csv_records, parse_json, read_text
from shardplan.models.frozen import HashOnce

MAX_PROFILE_BYTES = 16 << 20  # 4,096 experts x 1,024 layers of counts fit comfortably
# The most tokens one expert of one layer may be given: far beyond any measured trace, and low enough that a
# layer's total over 4,096 experts stays finite (128 counts of 1e308 summed to inf, and the placement's
# max/mean load became NaN in the JSON output, which is then not JSON).
MAX_COUNT = 1e15


class ExpertLoadProfile(HashOnce):
    """Tokens routed to each expert, per MoE layer (one row of ``loads`` per entry of ``layers``)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    num_experts: PositiveInt = Field(description="routed experts per MoE layer")
    layers: tuple[NonNegativeInt, ...] = Field(description="indices of the MoE layers, ascending")
    loads: tuple[tuple[float, ...], ...] = Field(
        description="per layer (same order as layers), tokens routed to expert 0, 1, ...; non-negative"
    )
    source: str | None = Field(default=None, description="where the counts come from (file, synthetic shape)")

    def __init__(self, **data: Any) -> None:
        # Pydantic wraps the SpecError of the validator below; hand the caller ours, naming the field.
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise spec_error_from(exc) from None

    @model_validator(mode="after")
    def _consistent(self) -> ExpertLoadProfile:
        _check_layer_order(self.layers)
        if len(self.loads) != len(self.layers):
            raise SpecError("loads", f"{len(self.loads)} rows of loads for {len(self.layers)} layers")
        for i, (layer, row) in enumerate(zip(self.layers, self.loads, strict=True)):
            if len(row) != self.num_experts:
                raise SpecError(f"loads[{i}]", f"layer {layer}: expected {self.num_experts} experts, got {len(row)}")
            for e, tokens in enumerate(row):
                if not math.isfinite(tokens):
                    raise SpecError(f"loads[{i}][{e}]", f"layer {layer}: not a finite number ({tokens})")
                if tokens < 0:
                    raise SpecError(f"loads[{i}][{e}]", f"layer {layer}: negative count ({tokens})")
                if tokens > MAX_COUNT:
                    raise SpecError(f"loads[{i}][{e}]", f"layer {layer}: count {tokens:g} is above {MAX_COUNT:g}")
        return self

    def restricted_to(self, layers: Sequence[int]) -> ExpertLoadProfile:
        """The rows of ``layers`` (ascending, distinct, each in this profile) as a profile of their own: a
        stage's MoE layers. Not validated again: each row was checked with this profile, which for 4,096 experts
        is most of the cost of building one (5 ms, once per stage of every layout an enumeration places)."""
        picked = _check_layer_order(tuple(layers))
        rows = tuple(self.layer_loads(i) for i in picked)  # a layer not here is a SpecError
        return ExpertLoadProfile.model_construct(
            num_experts=self.num_experts, layers=picked, loads=rows, source=self.source
        )

    def layer_loads(self, layer: int) -> tuple[float, ...]:
        """The row of one MoE layer, by its layer index (not its position in ``layers``)."""
        try:
            return self.loads[self.layers.index(layer)]
        except ValueError:
            where = f"layers {self.layers[0]}..{self.layers[-1]}"
            raise SpecError("layer", f"layer {layer} is not in the profile ({where})") from None


def _check_layer_order(layers: tuple[int, ...]) -> tuple[int, ...]:
    if not layers:
        raise SpecError("layers", "a profile needs at least one MoE layer")
    if list(layers) != sorted(set(layers)) or layers[0] < 0:
        raise SpecError("layers", "layer indices must be ascending, distinct and >= 0")
    return layers


def _profile(
    num_experts: int, layers: Sequence[int], rows: Iterable[Iterable[float]], source: str
) -> ExpertLoadProfile:
    return ExpertLoadProfile(
        num_experts=num_experts,
        layers=tuple(layers),
        loads=tuple(tuple(float(t) for t in row) for row in rows),
        source=source,
    )


def _check_sizes(num_experts: int, moe_layers: Sequence[int]) -> tuple[int, ...]:
    if not isinstance(num_experts, int) or num_experts < 1:
        raise SpecError("num_experts", f"expected a positive integer, got {num_experts!r}")
    layers = tuple(moe_layers)
    if not layers:
        raise SpecError("layers", "a profile needs at least one MoE layer")
    return layers


def uniform_profile(num_experts: int, moe_layers: Sequence[int], tokens_per_layer: float) -> ExpertLoadProfile:
    """Every expert of every layer gets ``tokens_per_layer / num_experts`` tokens.

    >>> uniform_profile(4, [1, 2], 8).loads
    ((2.0, 2.0, 2.0, 2.0), (2.0, 2.0, 2.0, 2.0))
    """
    layers = _check_sizes(num_experts, moe_layers)
    if not tokens_per_layer > 0:
        raise SpecError("tokens_per_layer", f"must be > 0, got {tokens_per_layer}")
    first = _profile(num_experts, layers[:1], [[tokens_per_layer / num_experts] * num_experts], "uniform")
    # The one row, validated once, is every layer's: its checks and max loads are then found by identity
    # (rules.experts), and 4,096 experts x 1,024 layers are not validated one count at a time (1.7 s).
    return ExpertLoadProfile.model_construct(
        num_experts=num_experts, layers=_check_layer_order(layers), loads=first.loads * len(layers), source="uniform"
    )


def zipf_profile(
    num_experts: int, moe_layers: Sequence[int], exponent: float, tokens_per_layer: float, seed: int = 0
) -> ExpertLoadProfile:
    """Expert popularity proportional to ``1 / rank**exponent``, the ranks shuffled per layer.

    Loads are expected counts (``tokens_per_layer`` split in proportion), so every layer holds the same
    multiset of loads on different experts. The shuffles come from ``random.Random(seed)``: the same
    arguments give the same profile on every machine. ``tokens_per_layer`` counts routed tokens, i.e.
    batch tokens times experts per token (top-k); note that with top-k routing no expert can really get
    more than ``tokens_per_layer / k`` (a Zipf shape with a steep exponent can exceed that).
    """
    layers = _check_sizes(num_experts, moe_layers)
    if not exponent >= 0 or not math.isfinite(exponent):
        raise SpecError("exponent", f"must be a finite number >= 0, got {exponent}")
    if not tokens_per_layer > 0:
        raise SpecError("tokens_per_layer", f"must be > 0, got {tokens_per_layer}")
    weights = [1.0 / (rank + 1) ** exponent for rank in range(num_experts)]
    total = sum(weights)
    by_rank = [tokens_per_layer * w / total for w in weights]
    rng = random.Random(seed)
    rows = []
    for _ in layers:
        experts = list(range(num_experts))
        rng.shuffle(experts)  # experts[rank] is the expert of that popularity rank
        row = [0.0] * num_experts
        for rank, expert in enumerate(experts):
            row[expert] = by_rank[rank]
        rows.append(row)
    return _profile(num_experts, layers, rows, f"zipf(s={exponent:g}, seed={seed})")


def load_profile(path: str | Path, num_experts: int, moe_layers: Sequence[int]) -> ExpertLoadProfile:
    """Read measured counts from a ``.json`` or ``.csv`` file (formats in the module docstring)."""
    layers = _check_sizes(num_experts, moe_layers)
    path = Path(path)
    text = read_text(path, "profile", MAX_PROFILE_BYTES)  # a regular file, strict UTF-8
    suffix = path.suffix.lower()
    if suffix == ".json":
        by_layer, source = _read_json(text, path, num_experts)
    elif suffix == ".csv":
        by_layer, source = _read_csv(text, path, num_experts), str(path)
    else:
        raise SpecError("profile", f"{path}: expected a .json or .csv file")
    wanted = set(layers)
    extra = sorted(set(by_layer) - wanted)
    if extra:
        raise SpecError("layers", f"{path}: layer {extra[0]} is not a MoE layer of the model")
    missing = [layer for layer in layers if layer not in by_layer]
    if missing:
        raise SpecError("layers", f"{path}: missing layer {missing[0]}")
    return _profile(num_experts, layers, [by_layer[layer] for layer in layers], printable(source))  # shown as text


def _layer_index(key: str, where: str) -> int:
    try:
        layer = int(key)
    except (TypeError, ValueError):
        raise SpecError(where, f"expected a layer index, got {key!r}") from None
    if layer < 0 or str(layer) != str(key).strip():
        raise SpecError(where, f"expected a layer index, got {key!r}")
    return layer


def _read_json(text: str, path: Path, num_experts: int) -> tuple[dict[int, list[float]], str]:
    data = parse_json(text, "profile", str(path))
    if not isinstance(data, dict) or not isinstance(data.get("layers"), dict):
        raise SpecError("layers", f'{path}: expected an object {{"layers": {{"<layer>": [tokens per expert], ...}}}}')
    unknown = sorted(set(data) - {"layers", "num_experts", "source"})
    if unknown:
        raise SpecError(unknown[0][:40], f"{path}: unknown key (allowed: layers, num_experts, source)")
    if "num_experts" in data and data["num_experts"] != num_experts:
        raise SpecError("num_experts", f"{path} has {quoted(data['num_experts'])}, the model has {num_experts}")
    by_layer: dict[int, list[float]] = {}
    for key, row in data["layers"].items():
        layer = _layer_index(key, f"layers.{key}")
        if not isinstance(row, list):
            raise SpecError(f"layers.{key}", f"{path}: expected a list of token counts")
        for e, tokens in enumerate(row):
            if isinstance(tokens, bool) or not isinstance(tokens, (int, float)):
                raise SpecError(f"layers.{key}[{e}]", f"{path}: expected a number, got {tokens!r}")
        if len(row) != num_experts:
            raise SpecError(f"layers.{key}", f"{path}: expected {num_experts} experts, got {len(row)}")
        by_layer[layer] = row
    source = data.get("source", str(path))
    if not isinstance(source, str):
        raise SpecError("source", f"{path}: expected a string")
    return by_layer, source


def _read_csv(text: str, path: Path, num_experts: int) -> dict[int, list[float]]:
    try:
        first, rows = csv_records(text)
    except csv.Error as exc:  # e.g. a field past csv's size limit
        raise SpecError("profile", f"{path}: not a readable CSV ({exc})") from None
    header = [cell.strip().lower() for cell in first]
    if header != ["layer", "expert", "tokens"]:
        raise SpecError("profile", f"{path}: the first line must be the header layer,expert,tokens")
    by_layer: dict[int, list[float]] = {}
    seen: set[tuple[int, int]] = set()
    for line, row in rows:
        if not row or all(not cell.strip() for cell in row):
            continue
        where = f"{path.name}:{line}"
        if len(row) != 3:
            raise SpecError(where, f"expected 3 columns layer,expert,tokens, got {len(row)}")
        layer = _layer_index(row[0].strip(), f"{where} layer")
        expert = _layer_index(row[1].strip(), f"{where} expert")
        if expert >= num_experts:
            raise SpecError(f"{where} expert", f"expert {expert} outside 0..{num_experts - 1}")
        try:
            tokens = float(row[2])
        except ValueError:
            raise SpecError(f"{where} tokens", f"expected a number, got {row[2]!r}") from None
        if (layer, expert) in seen:
            raise SpecError(where, f"layer {layer} expert {expert} listed twice")
        seen.add((layer, expert))
        by_layer.setdefault(layer, [0.0] * num_experts)[expert] = tokens
    return by_layer
