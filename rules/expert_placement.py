"""What an expert placement is: per MoE layer, which experts each EP rank hosts and what share of each
expert's tokens it serves, with the proven lower bounds; and a plan's placement, stage by stage.

This is the vocabulary ``Plan.experts`` carries. It lives in ``rules`` so the EXP rules
(``rules/experts.py``) can read it without importing the solver, which decides it
(``solver/placement/``). Plain frozen dataclasses and what follows from their fields: no solving and
no checking here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from shardplan.models.errors import SpecError
from shardplan.models.frozen import by_identity
from shardplan.models.load_profile import ExpertLoadProfile

Slots = tuple[tuple[tuple[int, float], ...], ...]  # per GPU, (expert id, share) of each copy it hosts
FACTOR_DIGITS = 9  # load factors are rounded so that a balanced layer's 1.0000000000000002 reads as 1


@dataclass(frozen=True)
class LayerPlacement:
    """One MoE layer: ``gpu_experts[g]`` lists (expert id, share) hosted on GPU ``g`` (EP rank ``g``).

    ``share`` is the fraction of that expert's tokens the router sends to this copy; the shares of one
    expert sum to 1 over its copies. A share of 0 marks a padding copy (a slot filled so that engines
    which need every slot mapped get one; it receives no tokens).
    """

    layer: int
    gpu_experts: Slots

    @property
    def num_gpus(self) -> int:
        return len(self.gpu_experts)

    def gpu_loads(self, loads: Sequence[float]) -> list[float]:
        """Tokens each GPU serves, for the per-expert ``loads`` of this layer."""
        return [sum(loads[e] * share for e, share in gpu) for gpu in self.gpu_experts]

    def max_load(self, loads: Sequence[float]) -> float:
        """Tokens on the most-loaded GPU: what sets the layer's time."""
        return _max_gpu_load(self.gpu_experts, tuple(loads))

    def replicas(self, expert: int) -> list[int]:
        """GPUs that host a copy of ``expert``."""
        return [g for g, gpu in enumerate(self.gpu_experts) if any(e == expert for e, _ in gpu)]

    def physical_to_logical(self, slots: int) -> list[int]:
        """Per physical slot (GPU-major: GPU 0's slots first), the logical expert id; -1 for an empty slot."""
        out: list[int] = []
        for g, gpu in enumerate(self.gpu_experts):
            if len(gpu) > slots:
                hosted = f"GPU {g} of layer {self.layer} hosts {len(gpu)} experts"
                raise SpecError("slots", f"{hosted}, more than {slots} slots")
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
        return self._imbalance(self.layer(layer), profile)

    def max_over_mean(self, profile: ExpertLoadProfile) -> list[float]:
        """``imbalance`` of every layer, in the order of ``layers`` (each layer read in place, not looked up)."""
        return [self._imbalance(placed, profile) for placed in self.layers]

    def _imbalance(self, placed: LayerPlacement, profile: ExpertLoadProfile) -> float:
        loads = profile.layer_loads(placed.layer)
        mean = sum(loads) / self.num_gpus
        return placed.max_load(loads) / mean if mean > 0 else 1.0

    def bound_over_mean(self, profile: ExpertLoadProfile) -> list[float]:
        """The lower bounds divided by the mean GPU load, per layer (what no placement can beat)."""
        out = []
        # zip stops at the shorter: a record with too few bounds is EXP-001's to report, not a crash here.
        for placed, bound in zip(self.layers, self.lower_bounds, strict=False):
            mean = sum(profile.layer_loads(placed.layer)) / self.num_gpus
            out.append(bound / mean if mean > 0 else 1.0)
        return out


@dataclass(frozen=True)
class StagePlacement:
    """One stage: its MoE layers placed over its EP ranks."""

    index: int
    ep_rank_gpus: tuple[tuple[int, ...], ...]  # ep_rank_gpus[k]: global GPU ids of EP rank k (replica 0)
    placement: ExpertPlacement  # its layers are the stage's MoE layers, by global layer index
    profile: ExpertLoadProfile  # the stage's rows of the plan's routing profile

    @cached_property
    def max_over_mean(self) -> tuple[float, ...]:
        """``placement.max_over_mean(profile)``, once: enumeration prices one pair's placement at every
        replica count, and the copies share these stage objects (every field is immutable)."""
        return tuple(self.placement.max_over_mean(self.profile))


@dataclass(frozen=True)
class PlanPlacement:
    """Every MoE layer of a plan placed, stage by stage (``Plan.experts``).

    ``layer(i)`` is the placement of MoE layer ``i`` (global index): the hook the DAG builder reads.
    """

    profile: ExpertLoadProfile
    routing: str  # "uniform", or where the profile comes from
    method: str  # the placer's name
    slots_per_gpu: int
    redundant_slots: int
    replicas: int
    gpus_per_replica: int
    stages: tuple[StagePlacement, ...]

    def layer(self, layer: int) -> LayerPlacement:
        for stage in self.stages:
            for placed in stage.placement.layers:
                if placed.layer == layer:
                    return placed
        raise SpecError("layer", f"layer {layer} is not placed")

    def stage_of(self, layer: int) -> StagePlacement:
        for stage in self.stages:
            if any(p.layer == layer for p in stage.placement.layers):
                return stage
        raise SpecError("layer", f"layer {layer} is not placed")

    @property
    def status(self) -> str:
        return "optimal" if all(s.placement.status == "optimal" for s in self.stages) else "feasible"

    @property
    def solve_time_s(self) -> float:
        return sum(s.placement.solve_time_s for s in self.stages)

    def max_over_mean(self) -> dict[int, float]:
        """Per MoE layer (global index): most-loaded EP rank over the mean, rounded."""
        out: dict[int, float] = {}
        for stage in self.stages:
            ratios = stage.max_over_mean  # one per layer, by construction
            for placed, ratio in zip(stage.placement.layers, ratios, strict=True):
                out[placed.layer] = round(ratio, FACTOR_DIGITS)
        return out

    def load_factors(self, moe_layers: tuple[int, ...]) -> tuple[float, ...]:
        """``Layout.moe_load_factor``: the max/mean of each of the model's MoE layers, in order."""
        ratios = self.max_over_mean()
        missing = [layer for layer in moe_layers if layer not in ratios]
        if missing:
            raise SpecError("experts", f"MoE layer {missing[0]} has no placement")
        return tuple(max(1.0, ratios[layer]) for layer in moe_layers)

    def whole(self) -> ExpertPlacement:
        """Every MoE layer of the model as one ``ExpertPlacement``, layers ascending: the slots of the EP
        ranks of each layer's own stage (what engines' expert-location maps take)."""
        layers = sorted((p for st in self.stages for p in st.placement.layers), key=lambda p: p.layer)
        bounds = {
            p.layer: b
            for st in self.stages
            for p, b in zip(st.placement.layers, st.placement.lower_bounds, strict=False)  # as bound_over_mean
        }
        return ExpertPlacement(
            num_gpus=self.stages[0].placement.num_gpus,
            slots_per_gpu=self.slots_per_gpu,
            layers=tuple(layers),
            lower_bounds=tuple(bounds[p.layer] for p in layers),
            status=self.status,
            solve_time_s=self.solve_time_s,
        )

    def summary(self) -> dict[str, Any]:
        """The compact form for the plan's JSON ``experts`` field (the full map:
        ``solver.placement.export.plan_placement_to_json``)."""
        stages = []
        for stage in self.stages:
            p = stage.placement
            stages.append({
                "index": stage.index,
                "layers": [placed.layer for placed in p.layers],
                "slots_per_gpu": p.slots_per_gpu,
                "max_over_mean": [round(x, 6) for x in p.max_over_mean(stage.profile)],
                "lower_bound_over_mean": [round(x, 6) for x in p.bound_over_mean(stage.profile)],
                "status": p.status,
            })
        worst = max(self.max_over_mean().values(), default=1.0)
        return {
            "routing": self.routing,
            "method": self.method,
            "ep": self.stages[0].placement.num_gpus if self.stages else 0,
            "slots_per_gpu": self.slots_per_gpu,
            "redundant_slots": self.redundant_slots,
            "max_over_mean": round(worst, 6),
            "status": self.status,
            "solve_time_s": round(self.solve_time_s, 3),
            "layout_priced_at": ("each EP degree's mean max/mean load (the placement is then decided per "
                                 "layer for the chosen layout; metrics include it)"),
            "stages": stages,
        }



@by_identity(kept=256)
def _max_gpu_load(gpu_experts: Slots, loads: tuple[float, ...]) -> float:
    """``LayerPlacement.max_load``. Under uniform routing every layer of a stage shares one slots object and one
    row of loads, so it is summed once (4,096 experts: 0.7 ms a layer); by identity, as ``rules.experts``
    judges the slots."""
    return max((sum(loads[e] * share for e, share in gpu) for gpu in gpu_experts), default=0.0)
