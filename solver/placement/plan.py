"""The expert placement of a plan: per pipeline stage, which EP rank hosts which experts of that
stage's MoE layers, and what the plan costs with it.

Order of decisions (DESIGN.md "Cost model": MoE time is set by the most-loaded GPU). The CP-SAT
layout search prices every MoE layer of a shape at one load factor per EP degree
(``tables.search_load_factor``: the mean over the layers of this routine's placements for that EP
degree; exact under uniform routing), because its integer tables are per layer kind, not per layer.
Once ``solve`` has chosen the layout, each stage places its own MoE layers over its EP ranks
(``place_experts``, with ``ceil(E / ep) + redundant_slots`` slots per rank) using the problem's
routing profile — uniform when none is given — and the plan is re-priced with each MoE layer's own
max/mean load (``Layout.moe_load_factor``). So the search sees how badly each EP degree spreads the
hot experts, the placement is optimal (or within its proven bound) for the chosen layout, and the
reported metrics include each layer's own imbalance.

Under uniform routing with ``ep`` dividing the expert count the placement is the trivial balanced one
and the metrics do not change. When ``ep`` does not divide it, some rank must serve more than the mean
even under uniform routing; that is priced too.

Every replica repeats replica 0's placement on its own GPUs. No rule checking here: the rules
EXP-001..003 (``rules/experts.py``) read ``violations``, which runs ``check_placement``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shardplan.models.errors import SpecError
from shardplan.models.load_profile import ExpertLoadProfile, uniform_profile
from shardplan.models.spec import MoE
from shardplan.rules.layout import Layout
from shardplan.rules.prediction import Prediction
from shardplan.rules.problem import Problem
from shardplan.solver.cost.evaluate import evaluate
from shardplan.solver.placement.check import check_placement
from shardplan.solver.placement.export import placement_to_json
from shardplan.solver.placement.place import greedy_placement, place_experts
from shardplan.solver.placement.result import ExpertPlacement, LayerPlacement

# CP-SAT budget of one stage's placement. None by default: place_experts' CP-SAT phase only runs on
# layers without a spare slot (E = S x G) that its heuristics leave within a gap, builds one model per
# layer (~50 ms each), and on Qwen3 (94 layers, 128 experts on 8 ranks) spent 5-17 s of wall time
# without closing the 0.009 % gap the heuristics leave (2026-11-22). The bounds are reported either way.
PLACEMENT_TIME_LIMIT_S = 0.0
FACTOR_DIGITS = 9  # load factors are rounded so that a balanced layer's 1.0000000000000002 reads as 1

# A placer places a profile's layers on (EP ranks, slots per rank): best_placement, greedy_placement,
# place_experts_in_budget. A time budget is the placer's own, not an argument.
Placer = Callable[[ExpertLoadProfile, int, int], ExpertPlacement]


@dataclass(frozen=True)
class StagePlacement:
    """One stage: its MoE layers placed over its EP ranks."""

    index: int
    ep_rank_gpus: tuple[tuple[int, ...], ...]  # ep_rank_gpus[k]: global GPU ids of EP rank k (replica 0)
    placement: ExpertPlacement  # its layers are the stage's MoE layers, by global layer index
    profile: ExpertLoadProfile  # the stage's rows of the plan's routing profile


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
            for placed, ratio in zip(stage.placement.layers, stage.placement.max_over_mean(stage.profile), strict=True):
                out[placed.layer] = round(ratio, FACTOR_DIGITS)
        return out

    def load_factors(self, moe_layers: tuple[int, ...]) -> tuple[float, ...]:
        """``Layout.moe_load_factor``: the max/mean of each of the model's MoE layers, in order."""
        ratios = self.max_over_mean()
        missing = [layer for layer in moe_layers if layer not in ratios]
        if missing:
            raise SpecError("experts", f"MoE layer {missing[0]} has no placement")
        return tuple(max(1.0, ratios[layer]) for layer in moe_layers)

    def violations(self, plan: Any) -> list[tuple[str, str]]:
        """(category, message) for everything wrong with this placement as part of ``plan``:
        category "hosted" (EXP-001), "slots" (EXP-002) or "replicas" (EXP-003)."""
        problem, layout = plan.problem, plan.layout
        moe = problem.model.moe
        found: list[tuple[str, str]] = []
        budget = slot_budget(problem, layout)
        placed_stage = {p.layer: st.index for st in self.stages for p in st.placement.layers}
        for s in range(layout.pp):
            for layer in layout.stage_layers(s):
                if not problem.model.is_moe_layer(layer):
                    continue
                if layer not in placed_stage:
                    found.append(("hosted", f"MoE layer {layer} has no placement: none of its experts is hosted"))
                elif placed_stage[layer] != s:
                    found.append(("hosted", f"MoE layer {layer} of stage {s} is placed on stage "
                                            f"{placed_stage[layer]}'s GPUs"))
        for stage in self.stages:
            where = f"stage {stage.index}"
            if not 0 <= stage.index < layout.pp:
                found.append(("hosted", f"{where} does not exist (pp={layout.pp})"))
                continue
            placed = stage.placement
            if placed.num_gpus != layout.ep:
                found.append(("slots", f"{where}: placed over {placed.num_gpus} EP ranks, "
                                       f"the layout has ep={layout.ep}"))
            if placed.slots_per_gpu > budget:
                found.append(("slots", f"{where}: {placed.slots_per_gpu} expert slots per GPU, the budget is "
                                       f"ceil({moe.num_experts}/{layout.ep}) + {problem.redundant_slots} = {budget}"))
            found.extend(_rank_gpu_violations(stage, layout))
            found.extend((_category(msg), f"{where}: {msg}") for msg in check_placement(placed, stage.profile))
        return found

    def summary(self) -> dict[str, Any]:
        """The compact form for the plan's JSON ``experts`` field (the full map: ``to_json``)."""
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

    def to_json(self) -> dict[str, Any]:
        """The full map for ``--experts-out``: ``placement_to_json`` over every MoE layer of the model
        (one row per MoE layer, one entry per physical slot, slot ``g * S + i`` = slot ``i`` of EP
        rank ``g`` of the layer's stage), plus where each stage's EP ranks are."""
        layers = sorted((p for st in self.stages for p in st.placement.layers), key=lambda p: p.layer)
        # strict=False: a record with a bound missing is check_placement's to report (EXP-001), not ours
        bounds = {p.layer: b for st in self.stages
                  for p, b in zip(st.placement.layers, st.placement.lower_bounds, strict=False)}
        ep = self.stages[0].placement.num_gpus
        whole = ExpertPlacement(
            num_gpus=ep, slots_per_gpu=self.slots_per_gpu, layers=tuple(layers),
            lower_bounds=tuple(bounds[p.layer] for p in layers), status=self.status, solve_time_s=self.solve_time_s,
        )
        doc = placement_to_json(whole)
        ratios = self.max_over_mean()
        doc.update({
            "routing": self.routing,
            "method": self.method,
            "redundant_slots": self.redundant_slots,
            "max_over_mean": [ratios[p.layer] for p in layers],
            "stage_of_layer": [self.stage_of(p.layer).index for p in layers],
            "stages": [{"index": st.index, "ep_rank_gpus": [list(g) for g in st.ep_rank_gpus]} for st in self.stages],
            "replicas": self.replicas,
            "gpus_per_replica": self.gpus_per_replica,
            "replica_gpu_offset": "replica r runs the same map on GPU ids + r * gpus_per_replica",
        })
        return doc


def slot_budget(problem: Problem, layout: Layout) -> int:
    """Expert slots per EP rank: ``ceil(E / ep)`` plus the problem's redundant slots."""
    return math.ceil(_moe(problem).num_experts / layout.ep) + problem.redundant_slots


def routing_profile(problem: Problem) -> ExpertLoadProfile:
    """The problem's profile, or uniform routing (one token per expert: only ratios matter)."""
    if problem.expert_load is not None:
        return problem.expert_load
    moe = _moe(problem)
    return uniform_profile(moe.num_experts, moe.layers, float(moe.num_experts))


def best_placement(profile: ExpertLoadProfile, num_gpus: int, slots_per_gpu: int, *,
                   time_limit_s: float = PLACEMENT_TIME_LIMIT_S) -> ExpertPlacement:
    """``place_experts``, except that a greedy placement meeting the proven lower bound on every
    layer (uniform routing, mostly) is taken as it is: it is optimal, and the greedy is about ten
    times faster than ``place_experts``'s search, which does not stop early there."""
    greedy = greedy_placement(profile, num_gpus, slots_per_gpu)
    if greedy.status == "optimal":
        return greedy
    return place_experts(profile, num_gpus, slots_per_gpu, time_limit_s=time_limit_s)


def place_experts_in_budget(profile: ExpertLoadProfile, num_gpus: int, slots_per_gpu: int) -> ExpertPlacement:
    """``place_experts`` within a plan's CP-SAT budget (``PLACEMENT_TIME_LIMIT_S``), never the greedy
    shortcut of ``best_placement``: the placer to compare with ``greedy_placement``."""
    return place_experts(profile, num_gpus, slots_per_gpu, time_limit_s=PLACEMENT_TIME_LIMIT_S)


def place_for_layout(problem: Problem, layout: Layout, placer: Placer = best_placement) -> PlanPlacement | None:
    """Each stage's MoE layers placed over its ``ep`` ranks (None for a dense model)."""
    model = problem.model
    if model.moe is None:
        return None
    profile = routing_profile(problem)
    slots = slot_budget(problem, layout)
    stages = []
    for s in range(layout.pp):
        layers = tuple(i for i in layout.stage_layers(s) if model.is_moe_layer(i))
        if not layers:
            continue
        sub = ExpertLoadProfile(
            num_experts=profile.num_experts, layers=layers,
            loads=tuple(profile.layer_loads(i) for i in layers), source=profile.source,
        )
        gpus = tuple(layout.stage_gpus(0, s))
        etp = layout.expert_tp
        ranks = tuple(gpus[k * etp:(k + 1) * etp] for k in range(layout.ep))
        placed = placer(sub, layout.ep, slots)
        stages.append(StagePlacement(index=s, ep_rank_gpus=ranks, placement=placed, profile=sub))
    return PlanPlacement(
        profile=profile,
        routing="uniform" if problem.expert_load is None else (profile.source or "profile"),
        method=_METHODS.get(placer, getattr(placer, "__name__", "placer")),
        slots_per_gpu=slots,
        redundant_slots=problem.redundant_slots,
        replicas=layout.dp,
        gpus_per_replica=layout.gpus_per_replica,
        stages=tuple(stages),
    )


def priced(problem: Problem, layout: Layout, experts: PlanPlacement | None) -> tuple[Layout, Prediction]:
    """``layout`` carrying the placement's per-layer load factors, and its prediction."""
    if experts is not None:
        layout = layout.model_copy(update={"moe_load_factor": experts.load_factors(_moe(problem).layers)})
    return layout, evaluate(problem, layout)


def place_and_price(
    problem: Problem, layout: Layout, placer: Placer = best_placement
) -> tuple[Layout, Prediction, PlanPlacement | None]:
    """Place the experts for ``layout`` and price it with them (the layout is returned with its
    ``moe_load_factor`` set, so ``evaluate(problem, layout)`` reproduces the prediction)."""
    experts = place_for_layout(problem, layout, placer)
    layout, prediction = priced(problem, layout, experts)
    return layout, prediction, experts


def write_experts(path: str | Path, experts: PlanPlacement | None) -> None:
    """Write ``experts.to_json()`` to ``path``."""
    if experts is None:
        raise SpecError("experts-out", "the model has no MoE layers: there is no expert placement to write")
    try:
        Path(path).write_text(json.dumps(experts.to_json(), indent=1) + "\n")
    except OSError as exc:
        raise SpecError("experts-out", f"cannot write {path}: {exc.strerror}") from None


_METHODS: dict[Placer, str] = {
    best_placement: "place_experts (the greedy kept where it meets the proven bound)",
    place_experts_in_budget: "place_experts",
    place_experts: "place_experts",
    greedy_placement: "greedy",
}

def _moe(problem: Problem) -> MoE:
    """The model's MoE block: every caller here has a MoE model (a dense one has no placement)."""
    if problem.model.moe is None:
        raise SpecError("model", f"{problem.model.name} has no MoE layers: there is no expert placement")
    return problem.model.moe


# check_placement's messages by rule: hosted (EXP-001), slots (EXP-002), replicas (EXP-003).
# Anything else (its bounds and status) is a fault of the placement record and reported as EXP-001.
_CATEGORIES = (
    ("replicas", re.compile(r"twice|has share|shares of expert")),
    ("slots", re.compile(r"more than \d+ slots|\d+ GPUs, expected \d+")),
    ("hosted", re.compile(r"not hosted|unknown expert|do not match the profile")),
)


def _category(message: str) -> str:
    for category, pattern in _CATEGORIES:
        if pattern.search(message):
            return category
    return "hosted"


def _rank_gpu_violations(stage: StagePlacement, layout: Layout) -> list[tuple[str, str]]:
    """The EP ranks must be the stage's own GPUs, ``expert_tp`` each, no GPU in two ranks: otherwise
    two "distinct" copies of an expert could sit on one GPU."""
    expected = tuple(layout.stage_gpus(0, stage.index))
    etp = layout.expert_tp
    wanted = tuple(expected[k * etp:(k + 1) * etp] for k in range(layout.ep))
    if stage.ep_rank_gpus == wanted:
        return []
    flat = [g for rank in stage.ep_rank_gpus for g in rank]
    if len(flat) != len(set(flat)):
        return [("replicas", f"stage {stage.index}: a GPU belongs to two EP ranks")]
    return [("slots", f"stage {stage.index}: EP ranks on GPUs {[list(r) for r in stage.ep_rank_gpus]}, "
                      f"expected the stage's GPUs {[list(r) for r in wanted]}")]
