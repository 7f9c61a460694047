"""What a placement is: per MoE layer, which experts each GPU hosts and what share of each expert's tokens
it serves; plus the proven lower bounds. Plain frozen dataclasses, no solving here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from shardplan.models.errors import SpecError
from shardplan.models.load_profile import ExpertLoadProfile


@dataclass(frozen=True)
class LayerPlacement:
    """One MoE layer: ``gpu_experts[g]`` lists (expert id, share) hosted on GPU ``g`` (EP rank ``g``).

    ``share`` is the fraction of that expert's tokens the router sends to this copy; the shares of one
    expert sum to 1 over its copies. A share of 0 marks a padding copy (a slot filled so that engines
    which need every slot mapped get one; it receives no tokens).
    """

    layer: int
    gpu_experts: tuple[tuple[tuple[int, float], ...], ...]

    @property
    def num_gpus(self) -> int:
        return len(self.gpu_experts)

    def gpu_loads(self, loads: Sequence[float]) -> list[float]:
        """Tokens each GPU serves, for the per-expert ``loads`` of this layer."""
        return [sum(loads[e] * share for e, share in gpu) for gpu in self.gpu_experts]

    def max_load(self, loads: Sequence[float]) -> float:
        """Tokens on the most-loaded GPU: what sets the layer's time."""
        return max(self.gpu_loads(loads), default=0.0)

    def replicas(self, expert: int) -> list[int]:
        """GPUs that host a copy of ``expert``."""
        return [g for g, gpu in enumerate(self.gpu_experts) if any(e == expert for e, _ in gpu)]

    def physical_to_logical(self, slots: int) -> list[int]:
        """Per physical slot (GPU-major: GPU 0's slots first), the logical expert id; -1 for an empty slot."""
        out: list[int] = []
        for g, gpu in enumerate(self.gpu_experts):
            if len(gpu) > slots:
                raise SpecError("slots", f"GPU {g} of layer {self.layer} hosts {len(gpu)} experts, more than {slots} slots")
            out.extend(e for e, _ in gpu)
            out.extend([-1] * (slots - len(gpu)))
        return out

    def slot_shares(self, slots: int) -> list[float]:
        """Per physical slot, the share of its expert's tokens it serves (0.0 for an empty slot)."""
        out: list[float] = []
        for gpu in self.gpu_experts:
            out.extend(share for _, share in gpu)
            out.extend([0.0] * (slots - len(gpu)))
        return out


@dataclass(frozen=True)
class ExpertPlacement:
    """A placement of every MoE layer of a profile on ``num_gpus`` EP ranks of ``slots_per_gpu`` slots.

    ``lower_bounds[i]`` is a proven lower bound on the most-loaded GPU of ``layers[i]`` (tokens) for this
    slot budget; ``status`` is "optimal" when every layer reaches its bound, otherwise "feasible".
    """

    num_gpus: int
    slots_per_gpu: int
    layers: tuple[LayerPlacement, ...]
    lower_bounds: tuple[float, ...]
    status: str
    solve_time_s: float

    def layer(self, layer: int) -> LayerPlacement:
        """The placement of one MoE layer, by its layer index."""
        for placed in self.layers:
            if placed.layer == layer:
                return placed
        raise SpecError("layer", f"layer {layer} is not placed")

    def max_loads(self, profile: ExpertLoadProfile) -> list[float]:
        """Per layer, tokens on the most-loaded GPU."""
        return [placed.max_load(profile.layer_loads(placed.layer)) for placed in self.layers]

    def imbalance(self, profile: ExpertLoadProfile, layer: int) -> float:
        """Max GPU load / mean GPU load of one layer (1.0 is perfect balance)."""
        loads = profile.layer_loads(layer)
        mean = sum(loads) / self.num_gpus
        return self.layer(layer).max_load(loads) / mean if mean > 0 else 1.0

    def max_over_mean(self, profile: ExpertLoadProfile) -> list[float]:
        """``imbalance`` of every layer, in the order of ``layers``."""
        return [self.imbalance(profile, placed.layer) for placed in self.layers]

    def bound_over_mean(self, profile: ExpertLoadProfile) -> list[float]:
        """The lower bounds divided by the mean GPU load, per layer (what no placement can beat)."""
        out = []
        for placed, bound in zip(self.layers, self.lower_bounds):
            mean = sum(profile.layer_loads(placed.layer)) / self.num_gpus
            out.append(bound / mean if mean > 0 else 1.0)
        return out
