"""Small layers against brute force; exact balance of the water-filling; the bounds are valid."""

import random

import pytest

from shardplan.models.load_profile import ExpertLoadProfile
from shardplan.solver.placement import check_placement, greedy_placement, place_experts
from shardplan.solver.placement.bounds import layer_lower_bound
from shardplan.solver.placement.fill import fill_group, fits_in_one_group

from .oracle import optimum

# (experts, GPUs, slots): one group suffices, no slot to spare, and several groups needed
CASES = [(3, 2, 2), (4, 2, 2), (4, 3, 2), (5, 3, 2), (6, 3, 2), (5, 2, 3), (6, 4, 2), (7, 4, 2)]


def _loads(seed: int, n: int) -> list[float]:
    rng = random.Random(seed)
    loads = [float(rng.choice([0, 1, 2, 3, 5, 8, 13, rng.randint(1, 40)])) for _ in range(n)]
    loads[0] = max(loads[0], 1.0)
    return loads


@pytest.mark.parametrize("experts,gpus,slots", CASES)
@pytest.mark.parametrize("seed", range(3))
def test_matches_brute_force(experts, gpus, slots, seed):
    loads = _loads(seed * 100 + experts * 10 + gpus, experts)
    profile = ExpertLoadProfile(num_experts=experts, layers=(0,), loads=(tuple(loads),))
    placed = place_experts(profile, gpus, slots)
    best = optimum(loads, gpus, slots)
    assert check_placement(placed, profile) == []
    assert placed.layers[0].max_load(loads) == pytest.approx(best, rel=1e-6)
    assert placed.lower_bounds[0] <= best * (1 + 1e-9)
    assert placed.status == "optimal"


def test_group_named_after_a_late_expert():
    # The optimum puts experts 3, 4 and 6 alone on a GPU: a group whose first member is expert 3 while
    # there are only 3 GPUs (found by hypothesis: CP-SAT's group model once allowed only groups 0..G-1).
    loads = [0.0, 0.0, 0.0, 1.0, 1.0, 3.0, 101.0, 204.0]
    profile = ExpertLoadProfile(num_experts=8, layers=(0,), loads=(tuple(loads),))
    placed = place_experts(profile, 3, 3)
    assert check_placement(placed, profile) == []
    assert placed.layers[0].max_load(loads) == pytest.approx(optimum(loads, 3, 3)) == pytest.approx(103.5)
    assert placed.status == "optimal"


def test_six_experts_three_gpus_two_slots():
    loads = [10.0, 7.0, 6.0, 4.0, 2.0, 1.0]
    profile = ExpertLoadProfile(num_experts=6, layers=(0,), loads=(tuple(loads),))
    placed = place_experts(profile, 3, 2)
    assert placed.layers[0].max_load(loads) == pytest.approx(optimum(loads, 3, 2)) == pytest.approx(11.0)
    assert greedy_placement(profile, 3, 2).layers[0].max_load(loads) >= 11.0


@pytest.mark.parametrize("seed", range(200))
def test_fill_balances_exactly(seed):
    rng = random.Random(seed)
    slots, gpus = rng.randint(2, 6), rng.randint(1, 9)
    count = rng.randint(1, (slots - 1) * gpus + 1)
    experts = [(e, rng.choice([0.0, rng.random(), 10 * rng.random(), 1.0])) for e in range(count)]
    assert fits_in_one_group(count, gpus, slots)
    pieces = fill_group(experts, gpus, slots)
    total = sum(w for _, w in experts)
    served: dict[int, float] = {}
    for gpu in pieces:
        assert len(gpu) <= slots
        assert len({e for e, _ in gpu}) == len(gpu)
        assert sum(w for _, w in gpu) <= total / gpus * (1 + 1e-9) + 1e-12
        for e, w in gpu:
            served[e] = served.get(e, 0.0) + w
    assert served.keys() == {e for e, _ in experts}
    assert all(served[e] == pytest.approx(w, abs=1e-9 * max(total, 1)) for e, w in experts)


def test_one_spare_slot_per_gpu_reaches_the_mean():
    rng = random.Random(5)
    loads = [rng.paretovariate(1.2) for _ in range(64)]
    profile = ExpertLoadProfile(num_experts=64, layers=(0,), loads=(tuple(loads),))
    placed = place_experts(profile, 16, 5)  # 64/16 + 1 slots
    assert placed.imbalance(profile, 0) == pytest.approx(1.0, abs=1e-12)
    assert placed.status == "optimal"


@pytest.mark.parametrize("experts,gpus,slots", CASES)
def test_bound_never_exceeds_optimum(experts, gpus, slots):
    for seed in range(4):
        loads = _loads(seed * 7 + 1, experts)
        assert layer_lower_bound(loads, gpus, slots, feasible=sum(loads)) <= optimum(loads, gpus, slots) * (1 + 1e-9)
