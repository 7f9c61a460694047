"""EXP-001..003 without the solver: hand-made placements of Mixtral's 8 experts over 2 EP ranks, each
fault reported under the rule it breaks (the rule ID travels with the diagnostic, no message parsing)."""

from __future__ import annotations

import dataclasses

import pytest

from shardplan.hardware import parse_cluster
from shardplan.models import get_model
from shardplan.models.load_profile import uniform_profile
from shardplan.rules.expert_placement import ExpertPlacement, LayerPlacement, PlanPlacement, StagePlacement
from shardplan.rules.experts import check_placement, check_plan_placement, slot_budget
from shardplan.rules.layout import Layout
from shardplan.rules.problem import Problem

HALVES = (tuple((e, 1.0) for e in range(4)), tuple((e, 1.0) for e in range(4, 8)))  # 4 experts per rank


@pytest.fixture(scope="module")
def problem() -> Problem:
    return Problem(model=get_model("mixtral-8x7b"), cluster=parse_cluster("2xH100"))


@pytest.fixture(scope="module")
def layout(problem: Problem) -> Layout:
    return Layout.even(problem.model.num_layers, tp=2)  # one stage, ep = 2


def _placement(layers: tuple[int, ...], gpu_experts=HALVES, slots: int = 4) -> ExpertPlacement:
    placed = tuple(LayerPlacement(layer, gpu_experts) for layer in layers)
    return ExpertPlacement(2, slots, placed, (4.0,) * len(layers), "optimal", 0.0)


def _plan_placement(problem: Problem, placement: ExpertPlacement) -> PlanPlacement:
    moe = problem.model.moe
    assert moe is not None
    profile = uniform_profile(moe.num_experts, moe.layers, float(moe.num_experts))
    stage = StagePlacement(index=0, ep_rank_gpus=((0,), (1,)), placement=placement, profile=profile)
    return PlanPlacement(profile=profile, routing="uniform", method="by hand", slots_per_gpu=4, redundant_slots=0,
                         replicas=1, gpus_per_replica=2, stages=(stage,))


def _rules(diagnostics) -> set[str]:
    return {d.rule for d in diagnostics}


def test_a_balanced_placement_passes(problem, layout):
    moe = problem.model.moe
    placement = _placement(moe.layers)
    assert check_placement(placement, uniform_profile(8, moe.layers, 8.0)) == []
    assert check_plan_placement(_plan_placement(problem, placement), problem, layout) == []
    assert slot_budget(problem, layout) == 4


@pytest.mark.parametrize("gpu_experts,slots,rule", [
    ((HALVES[0], HALVES[1][:-1]), 4, "EXP-001"),  # expert 7 hosted nowhere
    ((HALVES[0] + ((7, 0.0),), HALVES[1]), 4, "EXP-002"),  # rank 0 holds 5 experts in 4 slots
    ((((0, 0.5), (0, 0.5)) + HALVES[0][1:], HALVES[1]), 5, "EXP-003"),  # expert 0 twice on rank 0
    ((((0, 0.6),) + HALVES[0][1:], ((0, 0.6),) + HALVES[1]), 5, "EXP-003"),  # shares of expert 0 sum to 1.2
])
def test_each_fault_names_its_rule(problem, gpu_experts, slots, rule):
    layers = problem.model.moe.layers
    found = check_placement(_placement(layers, gpu_experts, slots), uniform_profile(8, layers, 8.0))
    assert found and _rules(found) == {rule}


def test_a_plan_placement_off_its_stage_or_budget_is_flagged(problem, layout):
    layers = problem.model.moe.layers
    missing = _plan_placement(problem, _placement(layers[1:]))
    assert _rules(check_plan_placement(missing, problem, layout)) == {"EXP-001"}  # layer 0 unplaced
    wide = _plan_placement(problem, _placement(layers, slots=5))
    assert _rules(check_plan_placement(wide, problem, layout)) == {"EXP-002"}  # budget is ceil(8 / 2) = 4
    good = _plan_placement(problem, _placement(layers))
    shared_gpu = dataclasses.replace(good, stages=(dataclasses.replace(good.stages[0], ep_rank_gpus=((0,), (0,))),))
    assert _rules(check_plan_placement(shared_gpu, problem, layout)) == {"EXP-003"}  # two ranks on GPU 0
    messages = [d.message for d in check_plan_placement(missing, problem, layout)]
    assert messages[0] == "MoE layer 0 has no placement: none of its experts is hosted"


def test_each_stage_is_judged_once_and_by_its_own_placement(problem, layout, monkeypatch):
    """The three EXP rules and every replica count's copy share one stage object: it is checked once. A
    stage built anew (a broken copy) is checked afresh, never given the cached verdict of another."""
    from shardplan.rules import experts as experts_module

    calls: list[ExpertPlacement] = []
    real = experts_module.check_placement

    def counting(placement, profile):
        calls.append(placement)
        return real(placement, profile)

    monkeypatch.setattr(experts_module, "check_placement", counting)
    good = _plan_placement(problem, _placement(problem.model.moe.layers))
    for replicas in (1, 2, 3):  # enumeration's copies: the same stages, another replica count
        copy = dataclasses.replace(good, replicas=replicas)
        for _ in range(3):  # EXP-001, -002 and -003 each ask
            assert check_plan_placement(copy, problem, layout) == []
    assert len(calls) == 1
    broken = _plan_placement(problem, _placement(problem.model.moe.layers, (HALVES[0], HALVES[1][:-1])))
    assert "EXP-001" in _rules(check_plan_placement(broken, problem, layout))
    assert len(calls) == 2
