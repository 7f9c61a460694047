"""place_experts and friends: API, checks, JSON for engines, hierarchy, determinism, bad input."""

import json

import pytest

from shardplan.models.errors import SpecError
from shardplan.models.load_profile import ExpertLoadProfile, uniform_profile, zipf_profile
from shardplan.solver.placement import (
    ExpertPlacement,
    LayerPlacement,
    check_placement,
    greedy_placement,
    place_experts,
    placement_to_json,
    sglang_expert_location,
    trtllm_initial_assignments,
)


@pytest.fixture(scope="module")
def zipf():
    return zipf_profile(32, [2, 3, 5], 1.0, 4096, seed=3)


@pytest.mark.parametrize("gpus,slots", [(8, 4), (8, 5), (16, 2), (16, 3), (12, 3), (32, 1), (40, 1), (20, 2)])
def test_every_placement_passes_the_checks(zipf, gpus, slots):
    for place in (place_experts, greedy_placement):
        placed = place(zipf, gpus, slots)
        assert check_placement(placed, zipf) == []
        assert len(placed.layers) == 3 and placed.num_gpus == gpus and placed.slots_per_gpu == slots
    ours = place_experts(zipf, gpus, slots).max_over_mean(zipf)
    greedy = greedy_placement(zipf, gpus, slots).max_over_mean(zipf)
    assert all(a <= b * (1 + 1e-12) for a, b in zip(ours, greedy, strict=True))


def test_redundant_slot_per_gpu_is_optimal_and_full(zipf):
    placed = place_experts(zipf, 8, 5)
    assert placed.status == "optimal"
    assert max(placed.max_over_mean(zipf)) == pytest.approx(1.0, abs=1e-12)
    assert all(-1 not in layer.physical_to_logical(5) for layer in placed.layers)  # padded to full


def test_check_finds_violations(zipf):
    good = place_experts(zipf, 8, 4)
    layer = good.layers[0]
    broken = LayerPlacement(layer.layer, ((layer.gpu_experts[0][0],) * 2,) + layer.gpu_experts[1:-1])  # 7 GPUs
    bad = ExpertPlacement(8, 4, (broken,) + good.layers[1:], good.lower_bounds, good.status, 0.0)
    found = {(d.rule, word) for d in check_placement(bad, zipf)
             for word in ("twice", "not hosted", "sum to", "7 GPUs") if word in d.message}
    assert found == {("EXP-003", "twice"), ("EXP-001", "not hosted"), ("EXP-003", "sum to"), ("EXP-002", "7 GPUs")}
    crowded = ExpertPlacement(8, 3, good.layers, good.lower_bounds, good.status, 0.0)
    assert any(d.rule == "EXP-002" and "more than 3 slots" in d.message for d in check_placement(crowded, zipf))


def test_json_for_engines(zipf):
    placed = place_experts(zipf, 8, 5)
    doc = placement_to_json(placed)
    json.dumps(doc)
    assert doc["num_gpus"] == 8 and doc["slots_per_gpu"] == 5 and doc["layers"] == [2, 3, 5]
    assert len(doc["physical_to_logical_map"]) == 3 and len(doc["physical_to_logical_map"][0]) == 40
    for row, shares in zip(doc["physical_to_logical_map"], doc["shares"], strict=True):
        totals = {}
        for expert, share in zip(row, shares, strict=True):
            totals[expert] = totals.get(expert, 0.0) + share
        assert sorted(totals) == list(range(32))
        assert all(t == pytest.approx(1.0) for t in totals.values())
    sglang = sglang_expert_location(placed, num_layers=6, num_experts=32)
    assert list(sglang) == ["physical_to_logical_map"] and len(sglang["physical_to_logical_map"]) == 6
    assert sglang["physical_to_logical_map"][3] == doc["physical_to_logical_map"][1]
    trt = trtllm_initial_assignments(placed)
    assert trt["num_slots"] == 40 and trt["initial_global_assignments"][5] == doc["physical_to_logical_map"][2]


def test_physical_to_logical_marks_empty_slots():
    layer = LayerPlacement(0, (((0, 1.0),), ((1, 0.5), (2, 1.0)), ((1, 0.5),)))
    assert layer.physical_to_logical(2) == [0, -1, 1, 2, 1, -1]
    assert layer.gpu_loads([4.0, 2.0, 1.0]) == [4.0, 2.0, 1.0]
    assert layer.replicas(1) == [1, 2]


def test_deterministic(zipf):
    a = placement_to_json(place_experts(zipf, 12, 3))
    b = placement_to_json(place_experts(zipf, 12, 3))
    assert a == b


def test_hierarchical_balances_nodes_then_gpus(zipf):
    placed = place_experts(zipf, 16, 3, gpus_per_node=4)
    assert check_placement(placed, zipf) == []
    loads = zipf.layer_loads(2)
    gpu = placed.layer(2).gpu_loads(loads)
    nodes = [sum(gpu[i:i + 4]) for i in range(0, 16, 4)]
    assert max(nodes) == pytest.approx(sum(loads) / 4)
    assert max(gpu) == pytest.approx(sum(loads) / 16)
    tight = place_experts(zipf, 16, 2, gpus_per_node=4)
    assert check_placement(tight, zipf) == []


def test_zero_loads_and_uniform():
    profile = ExpertLoadProfile(num_experts=4, layers=(0, 1), loads=((0.0,) * 4, (0.0, 0.0, 0.0, 5.0)))
    placed = place_experts(profile, 2, 3)
    assert check_placement(placed, profile) == []
    assert placed.imbalance(profile, 0) == 1.0
    assert placed.imbalance(profile, 1) == pytest.approx(1.0)
    flat = uniform_profile(12, [0], 120)
    assert place_experts(flat, 8, 2).layers[0].max_load(flat.loads[0]) == pytest.approx(15.0)  # 4 groups of 3 on 2 GPUs


def test_bad_sizes():
    profile = uniform_profile(10, [0], 10)
    with pytest.raises(SpecError) as caught:
        place_experts(profile, 4, 2)
    assert caught.value.field == "slots_per_gpu" and "need at least 3" in caught.value.reason
    with pytest.raises(SpecError) as caught:
        place_experts(profile, 4, 3, gpus_per_node=3)
    assert caught.value.field == "gpus_per_node"
    with pytest.raises(SpecError):
        place_experts(profile, 0, 3)
    with pytest.raises(SpecError):
        place_experts(profile, 4, 3).layer(7)


def test_greedy_placement_places_each_layer_by_its_own_loads():
    """Layers are placed from a memo keyed by their loads (uniform routing repeats them): each layer of a
    mixed profile, placed whole, equals that layer placed alone, and a repeated row keeps its own index."""
    from shardplan.solver.placement.greedy import greedy_layer
    from shardplan.solver.placement.place import _to_layer

    zipf = zipf_profile(16, (0, 1, 2), 1.2, 4096.0, seed=3)
    rows = (zipf.loads[0], zipf.loads[1], zipf.loads[0], zipf.loads[2])  # layer 7 repeats layer 3's loads
    mixed = ExpertLoadProfile(num_experts=16, layers=(3, 4, 7, 9), loads=rows)
    whole = greedy_placement(mixed, 4, 5)
    for placed, loads, layer in zip(whole.layers, rows, mixed.layers, strict=True):
        alone = _to_layer(layer, greedy_layer(loads, 4, 5), loads)
        assert placed == alone and placed.layer == layer
    assert whole.layers[0].gpu_experts == whole.layers[2].gpu_experts != whole.layers[1].gpu_experts


def test_layers_placed_alike_are_each_judged_by_their_own_loads_and_bound():
    # Two layers on the same slots (one expert per GPU) with different loads: the checks keep what they found for
    # one set of slots and loads, so each layer must still get its own max load (3.0 and 5.0 tokens by hand) and
    # only the bound above its own be reported, under its own layer number.
    slots = ((0, 1.0),), ((1, 1.0),)
    profile = ExpertLoadProfile(num_experts=2, layers=(4, 6), loads=((1.0, 3.0), (5.0, 2.0)))
    layers = (LayerPlacement(4, slots), LayerPlacement(6, slots))
    assert [p.max_load(profile.layer_loads(p.layer)) for p in layers] == [3.0, 5.0]
    honest = ExpertPlacement(2, 1, layers, (3.0, 5.0), "optimal", 0.0)
    assert check_placement(honest, profile) == []
    inflated = ExpertPlacement(2, 1, layers, (4.0, 5.0), "optimal", 0.0)
    found = check_placement(inflated, profile)
    assert [d.message for d in found] == ["layer 4: lower bound 4 above the achieved max load 3"]
