"""A pin's place in an infeasibility explanation: with more GPUs pinned than the cluster has, it says how many."""

from __future__ import annotations

import pytest

from shardplan.models import InfeasibleError
from shardplan.rules.pins import pinned_gpus
from shardplan.rules.problem import Pins
from shardplan.solver.optimise import solve
from tests.factory import problem


@pytest.mark.parametrize(("pins", "gpus"), [
    (Pins(), 1),
    (Pins(dp=4), 4),
    (Pins(dp=2, pp=3, tp=4, sp=2), 48),
    (Pins(tp=2, attn_dp=4), 8),
    (Pins(ep=16), 16),  # a stage of 16 expert ranks
    (Pins(tp=8, ep=4, expert_tp=2), 8),  # the stage's 8 GPUs hold 4 ranks of 2
    (Pins(dp=2, stages=((0, 10), (10, 20), (20, 32))), 6),
])
def test_pinned_gpus_by_hand(pins, gpus):
    assert pinned_gpus(pins) == gpus


def test_dp_pinned_past_the_cluster_says_how_many_gpus_it_needs():
    # solve --dp 4 on one H100 said only 'PIN-dp: dp pinned to 4', which does not say what conflicts with it.
    with pytest.raises(InfeasibleError) as err:
        solve(problem("llama-3.1-8b", "1xH100", dp=4))
    assert err.value.conflicts == [("PIN-dp", "dp pinned to 4; the pins need at least 4 GPUs, the cluster has 1")]


def test_a_pin_within_the_cluster_is_said_as_it_was():
    # Llama-3.1-70B's 131 GiB of BF16 weights on one GPU of 8: the pins need 1 GPU, memory is what conflicts.
    with pytest.raises(InfeasibleError) as err:
        solve(problem("llama-3.1-70b", "8xH100", tp=1, pp=1, sp=1, attn_dp=1))
    assert ("PIN-tp", "tp pinned to 1") in err.value.conflicts
