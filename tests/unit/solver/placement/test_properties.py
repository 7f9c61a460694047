"""Hypothesis: for random small layers, bound <= ours <= greedy and the checks are clean."""

from hypothesis import example, given, settings
from hypothesis import strategies as st

from shardplan.models.load_profile import ExpertLoadProfile
from shardplan.solver.placement import check_placement, greedy_placement, place_experts


@st.composite
def layers(draw):
    gpus = draw(st.integers(1, 5))
    slots = draw(st.integers(1, 4))
    experts = draw(st.integers(1, min(9, gpus * slots)))
    loads = draw(st.lists(st.one_of(st.just(0.0), st.floats(0.0, 1000.0)), min_size=experts, max_size=experts))
    return ExpertLoadProfile(num_experts=experts, layers=(0,), loads=(tuple(loads),)), gpus, slots


@settings(max_examples=60, deadline=None)
@given(layers())
# Found by Hypothesis (2026-12-07): one subnormal load; the target's bisection halved to 0 and divided by it.
@example((ExpertLoadProfile(num_experts=5, layers=(0,), loads=((0.0, 0.0, 0.0, 0.0, 5e-324),)), 3, 2))
# And (the same day): the greedy's copies halve it to 0, so the best max load is 0 and a split was tried at 0.
@example((ExpertLoadProfile(num_experts=5, layers=(0,), loads=((0.0, 0.0, 0.0, 5e-324, 0.0),)), 3, 2))
def test_bound_ours_greedy(case):
    profile, gpus, slots = case
    ours = place_experts(profile, gpus, slots, time_limit_s=2.0)
    greedy = greedy_placement(profile, gpus, slots)
    assert check_placement(ours, profile) == []
    assert check_placement(greedy, profile) == []
    loads = profile.loads[0]
    achieved = ours.layers[0].max_load(loads)
    assert ours.lower_bounds[0] <= achieved * (1 + 1e-9) + 1e-9
    assert achieved <= greedy.layers[0].max_load(loads) * (1 + 1e-12) + 1e-12
