"""Rules on a plan's expert placement (``Plan.experts``): every expert hosted, the slot budget
kept, copies of an expert on distinct GPUs with shares summing to 1; and the checks that find where
a placement breaks them.

These rules only ``check``: the placement is decided after the layout (``solver/placement/plan.py``),
so there is nothing for them to post into the CP-SAT layout search. ``check_placement`` judges one
placement against its load profile, ``check_plan_placement`` a plan's placement stage by stage; both
return diagnostics that name the rule they break, and each rule's ``check`` keeps its own. A plan
without a placement (a dense model, or a layout evaluated without one) has nothing to check.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from shardplan.models.errors import SpecError
from shardplan.models.frozen import by_identity
from shardplan.models.load_profile import ExpertLoadProfile
from shardplan.rules.base import Diagnostic, Kind, Rule
from shardplan.rules.expert_placement import (
    ExpertPlacement,
    LayerPlacement,
    PlanPlacement,
    Slots,
    StagePlacement,
)
from shardplan.rules.layout import Layout
from shardplan.rules.plan import Plan
from shardplan.rules.problem import Problem

SHARE_TOLERANCE = 1e-6

_AFTER_LAYOUT = "checked on the plan after the layout is chosen (the placement is not part of the CP-SAT model)"


class _PlacementRule(Rule):
    kind = Kind.STRUCTURAL

    def applies(self, problem: Problem) -> bool:
        return False  # nothing to post: see the module docstring

    def check(self, plan: Plan) -> list[Diagnostic]:
        if plan.experts is None:
            return []
        return [d for d in check_plan_placement(plan.experts, plan.problem, plan.layout) if d.rule == self.id]


class ExpertsHosted(_PlacementRule):
    id = "EXP-001"
    name = "expert-not-hosted"
    statement = (
        "every routed expert of every MoE layer is hosted by at least one EP rank of its stage; "
        f"{_AFTER_LAYOUT}"
    )
    source = "003 §2.4 (each GPU hosts experts), DESIGN.md (ep = the stage's GPUs)"
    example_bad = "256 experts on 8 ranks of 32 slots with expert 7 on no rank"
    example_good = "256 experts on 8 ranks of 32 slots, each expert on one rank"


class SlotBudget(_PlacementRule):
    id = "EXP-002"
    name = "expert-slots-exceeded"
    statement = (
        "no EP rank hosts more experts than its slots, ceil(experts / ep) + redundant slots (what memory is "
        f"priced with), and each stage's layers are placed over exactly its ep ranks; {_AFTER_LAYOUT}"
    )
    source = "004 §7 (weights per GPU), DESIGN.md (redundant experts)"
    example_bad = "33 experts on a rank of 32 slots (no --redundant-slots)"
    example_good = "33 experts on a rank with --redundant-slots 1"


class ReplicasDistinct(_PlacementRule):
    id = "EXP-003"
    name = "expert-replicas-collide"
    statement = (
        "the copies of one expert sit on distinct GPUs, and the shares of its tokens the copies serve are "
        f"non-negative and sum to 1; {_AFTER_LAYOUT}"
    )
    source = "DESIGN.md (hot experts may be replicated)"
    example_bad = "expert 5 twice on rank 3; or copies serving 60 % + 60 % of its tokens"
    example_good = "expert 5 on ranks 3 and 7, serving 50 % each"


HOSTED = ExpertsHosted()
SLOTS = SlotBudget()
REPLICAS = ReplicasDistinct()
PLACEMENT_RULES: tuple[Rule, ...] = (HOSTED, SLOTS, REPLICAS)


def slot_budget(problem: Problem, layout: Layout) -> int:
    """Expert slots per EP rank: ``ceil(E / ep)`` plus the problem's redundant slots."""
    moe = problem.model.moe
    if moe is None:
        raise SpecError("model", f"{problem.model.name} has no MoE layers, so no expert slots")
    return math.ceil(moe.num_experts / layout.ep) + problem.redundant_slots


def check_plan_placement(experts: PlanPlacement, problem: Problem, layout: Layout) -> list[Diagnostic]:
    """Everything wrong with ``experts`` as the placement of ``layout`` for ``problem``: every MoE layer
    placed on its own stage (EP rank GPUs included), each stage over ``ep`` ranks within the slot
    budget, and each stage's placement passing ``check_placement``. Empty when all hold."""
    moe = problem.model.moe
    if moe is None:
        raise SpecError("experts", f"{problem.model.name} has no MoE layers: its plans carry no expert placement")
    budget = slot_budget(problem, layout)
    found: list[Diagnostic] = []
    placed_stage = {p.layer: st.index for st in experts.stages for p in st.placement.layers}
    for s in range(layout.pp):
        for layer in layout.stage_layers(s):
            if not problem.model.is_moe_layer(layer):
                continue
            if layer not in placed_stage:
                found.append(HOSTED.error(f"MoE layer {layer} has no placement: none of its experts is hosted"))
            elif placed_stage[layer] != s:
                found.append(HOSTED.error(
                    f"MoE layer {layer} of stage {s} is placed on stage {placed_stage[layer]}'s GPUs"
                ))
    for stage in experts.stages:
        where = f"stage {stage.index}"
        if not 0 <= stage.index < layout.pp:
            found.append(HOSTED.error(f"{where} does not exist (pp={layout.pp})"))
            continue
        placed = stage.placement
        if placed.num_gpus != layout.ep:
            found.append(SLOTS.error(f"{where}: placed over {placed.num_gpus} EP ranks, the layout has ep={layout.ep}"))
        if placed.slots_per_gpu > budget:
            found.append(SLOTS.error(
                f"{where}: {placed.slots_per_gpu} expert slots per GPU, the budget is "
                f"ceil({moe.num_experts}/{layout.ep}) + {problem.redundant_slots} = {budget}"
            ))
        found.extend(_rank_gpu_violations(stage, layout))
        found.extend(dataclasses.replace(d, message=f"{where}: {d.message}") for d in _stage_violations(stage))
    return found


@by_identity(kept=256)
def _stage_violations(stage: StagePlacement) -> tuple[Diagnostic, ...]:
    """``check_placement`` of one stage's placement against its profile. The three EXP rules each check a plan
    (``_PlacementRule.check``), and enumeration checks one pair's placement at every replica count, its copies
    sharing the stage objects: each stage (immutable) is judged once."""
    return tuple(check_placement(stage.placement, stage.profile))


def check_placement(placement: ExpertPlacement, profile: ExpertLoadProfile) -> list[Diagnostic]:
    """Violations of: one placement per profile layer; every expert hosted at least once; at most
    ``slots_per_gpu`` experts per GPU; copies of one expert on distinct GPUs; shares of each expert
    non-negative and summing to 1; the lower bound not above the achieved load. Empty when all hold.

    Faults of the record itself (its layers, bounds and status) are reported as EXP-001: a placement
    that does not say where a layer's experts are does not host them.
    """
    found: list[Diagnostic] = []
    placed_layers = [p.layer for p in placement.layers]
    if placed_layers != list(profile.layers):
        found.append(HOSTED.error(f"layers {placed_layers} do not match the profile's {list(profile.layers)}"))
    if len(placement.lower_bounds) != len(placement.layers):
        found.append(HOSTED.error(f"{len(placement.lower_bounds)} lower bounds for {len(placement.layers)} layers"))
    if placement.status not in ("optimal", "feasible"):
        found.append(HOSTED.error(f"unknown status {placement.status!r}"))
    wanted = set(profile.layers)
    # Not strict: a count mismatch is reported just above, and the layers that have a bound are still checked.
    for placed, bound in zip(placement.layers, placement.lower_bounds, strict=False):
        if placed.layer not in wanted:
            continue
        loads = profile.layer_loads(placed.layer)
        found.extend(_check_layer(placed, loads, placement.num_gpus, placement.slots_per_gpu, bound))
    return found


def _check_layer(placed: LayerPlacement, loads: Sequence[float], num_gpus: int, slots: int,
                 bound: float) -> list[Diagnostic]:
    layer = placed.layer
    found: list[Diagnostic] = []
    if placed.num_gpus != num_gpus:
        found.append(SLOTS.error(f"layer {layer}: {placed.num_gpus} GPUs, expected {num_gpus}"))
    faults, achieved = _slot_faults(placed.gpu_experts, tuple(loads), slots)
    found.extend(rule.error(f"layer {layer}: {text}") for rule, text in faults)
    if bound > achieved * (1 + 1e-9) + 1e-9:
        found.append(HOSTED.error(
            f"layer {layer}: lower bound {bound:.6g} above the achieved max load {achieved:.6g}"
        ))
    return found


SlotFaults = tuple[tuple[tuple[Rule, str], ...], float]


@by_identity(kept=256)
def _slot_faults(gpu_experts: Slots, loads: tuple[float, ...], slots: int) -> SlotFaults:
    """What is wrong with one layer's slots (each rule with its text, the layer left out) and the tokens on its
    most-loaded GPU (``LayerPlacement.max_load``), in one pass: with 4,096 experts this check was most of an
    enumeration's time. Under uniform routing every layer of a stage shares one slots object and one row of loads
    (``models.load_profile.uniform_profile``), so they are judged once; by identity, since hashing 4,096
    experts' slots costs a tenth of judging them."""
    faults: list[tuple[Rule, str]] = []
    num_experts = len(loads)
    share_sum = [0.0] * num_experts
    hosted = [False] * num_experts
    achieved = 0.0
    for g, gpu in enumerate(gpu_experts):
        if len(gpu) > slots:
            faults.append((SLOTS, f"GPU {g} hosts {len(gpu)} experts, more than {slots} slots"))
        ids = [e for e, _ in gpu]
        if len(ids) != len(set(ids)):
            faults.append((REPLICAS, f"GPU {g} hosts expert {_first_repeat(ids)} twice"))
        tokens = 0.0
        for e, share in gpu:
            if not 0 <= e < num_experts:
                faults.append((HOSTED, f"GPU {g} hosts unknown expert {e}"))
                continue
            hosted[e] = True
            if not (math.isfinite(share) and share >= 0):
                faults.append((REPLICAS, f"GPU {g} has share {share} for expert {e}"))
                continue
            share_sum[e] += share
            tokens += loads[e] * share
        achieved = max(achieved, tokens)
    for e in range(num_experts):
        if not hosted[e]:
            faults.append((HOSTED, f"expert {e} is not hosted"))
        elif abs(share_sum[e] - 1.0) > SHARE_TOLERANCE:
            faults.append((REPLICAS, f"shares of expert {e} sum to {share_sum[e]:.9f}, not 1"))
    return tuple(faults), achieved


def _rank_gpu_violations(stage: StagePlacement, layout: Layout) -> list[Diagnostic]:
    """The EP ranks must be the stage's own GPUs, ``expert_tp`` each, no GPU in two ranks: otherwise
    two "distinct" copies of an expert could sit on one GPU."""
    expected = tuple(layout.stage_gpus(0, stage.index))
    etp = layout.expert_tp
    wanted = tuple(expected[k * etp:(k + 1) * etp] for k in range(layout.ep))
    if stage.ep_rank_gpus == wanted:
        return []
    flat = [g for rank in stage.ep_rank_gpus for g in rank]
    if len(flat) != len(set(flat)):
        return [REPLICAS.error(f"stage {stage.index}: a GPU belongs to two EP ranks")]
    return [SLOTS.error(
        f"stage {stage.index}: EP ranks on GPUs {[list(r) for r in stage.ep_rank_gpus]}, "
        f"expected the stage's GPUs {[list(r) for r in wanted]}"
    )]


def _first_repeat(ids: list[int]) -> int:
    seen: set[int] = set()
    for e in ids:
        if e in seen:
            return e
        seen.add(e)
    return -1
