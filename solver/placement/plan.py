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
EXP-001..003 (``rules/experts.py``) check the placement a plan carries (``rules/expert_placement.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from pathlib import Path

from shardplan.models.errors import SpecError
from shardplan.models.files import json_text
from shardplan.models.load_profile import ExpertLoadProfile, uniform_profile
from shardplan.models.spec import MoE
from shardplan.rules.expert_placement import ExpertPlacement, PlanPlacement, StagePlacement
from shardplan.rules.experts import slot_budget
from shardplan.rules.layout import Layout
from shardplan.rules.prediction import Prediction
from shardplan.rules.problem import Problem
from shardplan.solver.cost.evaluate import evaluate
from shardplan.solver.placement.export import plan_placement_to_json
from shardplan.solver.placement.place import greedy_placement, place_experts

# CP-SAT budget of one stage's placement. None by default: place_experts' CP-SAT phase only runs on
# layers without a spare slot (E = S x G) that its heuristics leave within a gap, builds one model per
# layer (~50 ms each), and on Qwen3 (94 layers, 128 experts on 8 ranks) spent 5-17 s of wall time
# without closing the 0.009 % gap the heuristics leave (2026-11-22). The bounds are reported either way.
PLACEMENT_TIME_LIMIT_S = 0.0

# A placer places a profile's layers on (EP ranks, slots per rank): best_placement, greedy_placement,
# place_experts_in_budget. A time budget is the placer's own, not an argument.
Placer = Callable[[ExpertLoadProfile, int, int], ExpertPlacement]


def routing_profile(problem: Problem) -> ExpertLoadProfile:
    """The problem's profile, or uniform routing (one token per expert: only ratios matter)."""
    if problem.expert_load is not None:
        return problem.expert_load
    moe = _moe(problem)
    return _uniform_routing(moe.num_experts, moe.layers)


@lru_cache(maxsize=16)
def _uniform_routing(num_experts: int, layers: tuple[int, ...]) -> ExpertLoadProfile:
    """Uniform routing over ``layers``, built once per model: every plan of a search asks for it, and building
    one validates experts x layers loads (4 ms for DeepSeek-V3's 256 x 58, a fifth of the time per plan of a
    4,096-expert model's enumeration, hangsweep 2026-11-28). The profile is frozen, so sharing it is safe."""
    return uniform_profile(num_experts, layers, float(num_experts))


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
        sub = profile.restricted_to(layers)
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
    """Write ``plan_placement_to_json(experts)`` to ``path``."""
    if experts is None:
        raise SpecError("experts-out", "the model has no MoE layers: there is no expert placement to write")
    try:
        Path(path).write_text(json_text(plan_placement_to_json(experts), indent=1) + "\n")
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
