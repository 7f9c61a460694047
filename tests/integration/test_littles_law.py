"""Every plan solve, enumerate and evaluate print keeps Little's law: throughput = replicas x batch x OSL
/ e2e, and e2e = TTFT + (OSL - 1) x TPOT with TPOT = the decode step plus the prefill sharing its steps."""

from __future__ import annotations

import itertools

import pytest

from shardplan.hardware.profile import get_profile
from shardplan.rules.plan import Plan
from shardplan.solver.cli.inputs import layout_from_pins
from shardplan.solver.enumerate import enumerate_plans
from shardplan.solver.optimise import solve
from shardplan.solver.placement.plan import place_and_price
from tests.factory import problem
from tests.integration.scenarios import SCENARIOS, scenario_id


def _keeps_littles_law(plan: Plan) -> None:
    m, wl, lay = plan.prediction.metrics, plan.problem.workload, plan.layout
    assert m.output_tokens_per_s == pytest.approx(lay.dp * m.batch * wl.osl / (m.e2e_ms / 1e3), rel=0.01)
    assert m.e2e_ms == pytest.approx(m.ttft_ms + (wl.osl - 1) * m.tpot_ms, rel=1e-9)
    assert m.tpot_ms >= m.decode_step_ms
    assert m.output_tokens_per_s_per_user == pytest.approx(1e3 / m.tpot_ms, rel=1e-9)
    if m.batch == 1:  # one request: nothing else's prefill shares its steps, nothing to wait for
        assert m.tpot_ms == m.decode_step_ms
        overhead_ms = get_profile(plan.prediction.profile).request_overhead_ms  # the serving stack's own cost
        assert m.ttft_ms == pytest.approx(plan.prediction.prefill_ms + overhead_ms, rel=1e-12)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=scenario_id)
def test_solved_and_enumerated_plans_keep_littles_law(scenario: dict) -> None:
    p = problem(**scenario)
    _keeps_littles_law(solve(p))
    for plan in itertools.islice(enumerate_plans(p), 6):
        _keeps_littles_law(plan)


@pytest.mark.parametrize("batch", [1, 7, 64, 300])
def test_evaluated_layouts_keep_littles_law(batch: int) -> None:
    p = problem(model="llama-3.1-70b", cluster="8xH200", isl=4000, osl=500, tp=4, pp=2, batch=batch)
    layout, prediction, experts = place_and_price(p, layout_from_pins(p))
    _keeps_littles_law(Plan(problem=p, layout=layout, prediction=prediction, status="evaluated", experts=experts))


def test_the_prefill_sharing_a_token_grows_with_the_other_requests() -> None:
    # TPOT = decode step + ceil((C - 1) x slowest chunk stage / (OSL x chunk)): at C = 1 the bare step,
    # and the share grows with the requests whose prompts are prefilled while this one decodes.
    shares = []
    for batch in (1, 2, 16, 128):
        p = problem(model="llama-3.1-8b", cluster="1xH100", batch=batch)
        pred = place_and_price(p, layout_from_pins(p))[1]
        shares.append(pred.metrics.tpot_ms - pred.metrics.decode_step_ms)
    assert shares[0] == 0 and shares[1] > 0 and shares[1] < shares[2] < shares[3]
