"""``solve`` and ``enumerate`` share one search driver and one decoding: the layout ``solve`` returns
appears in the enumeration with the same boundaries and batch, and with metrics identical to the last
bit — experts placed and priced the same way, also under a skewed routing profile (where a
decoding without the placement once priced the same layout at 53,475.2 tok/s against solve's 53,475.1).
"""

from __future__ import annotations

import pytest

from shardplan.solver.enumerate import enumerate_plans
from shardplan.solver.optimise import solve
from shardplan.solver.placement.export import plan_placement_to_json
from tests.factory import problem

CASES = {
    "dense": dict(model="llama-3.1-8b", cluster="4xH100", objective="throughput"),
    "moe": dict(model="mixtral-8x7b", cluster="8xH100", objective="latency"),
    "routing-profile": dict(model="qwen3-30b-a3b", cluster="4xH100", objective="throughput", zipf=1.2),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_enumeration_prices_solves_layout_as_solve_does(case):
    p = problem(**case)
    plan = solve(p)
    same_degrees = [q for q in enumerate_plans(p) if q.layout.degrees() == plan.layout.degrees()]
    assert len(same_degrees) == 1
    entry = same_degrees[0]
    assert entry.layout == plan.layout  # boundaries, batch and the placement's load factors
    assert entry.prediction.metrics == plan.prediction.metrics
    assert (entry.experts is None) == (plan.experts is None)
    if plan.experts is not None:
        assert plan_placement_to_json(entry.experts) == plan_placement_to_json(plan.experts)
