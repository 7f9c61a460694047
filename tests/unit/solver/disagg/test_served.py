"""``Pools.served``: a deployment held below its full rate, against every number of requests in flight up to its
full rate's (brute force over the concurrency). The bisection's premise, that the counts keeping the limits are
those up to some largest one, holds only roughly: TTFT wiggles by a few ms where the steady state's decode batch
steps, so past the first refused count some larger ones keep the limits again. What holds, and is held here:
the count found keeps every rule, carries at least every count before the first refused one, and at most the
best count of all."""

from __future__ import annotations

import pytest

from shardplan.rules.catalog import errors_of
from shardplan.rules.disagg_plan import check_disagg
from shardplan.solver.cost.disagg import evaluate_disagg
from shardplan.solver.disagg import brute
from shardplan.solver.disagg.deploy import LOAD_RULES
from shardplan.solver.disagg.workers import rate_units
from tests.unit.solver.disagg.test_search import SGL_TIGHT, SMALL, case_id, pools_for


@pytest.mark.parametrize("case", [SMALL[1], SGL_TIGHT[2]], ids=case_id)
def test_served_is_the_most_any_number_of_requests_in_flight_carries_within_every_rule(case) -> None:
    pools = pools_for(case, caps=False)
    checked = held = 0
    for c in [c for c in brute.choices(pools) if pools.rate(c) > 0][::3]:
        served = pools.served(c)
        full = pools.concurrency_for(c, pools.rate(c))
        assert full is not None
        at_full = evaluate_disagg(pools.problem, pools.layout(c, full), pools.profile)
        errors = errors_of(check_disagg(at_full))
        if not errors:
            assert served is not None and served.units == pools.rate(c) and served.plan == at_full
            continue
        kept = []
        for n in range(1, full):
            plan = evaluate_disagg(pools.problem, pools.layout(c, n), pools.profile)
            if not errors_of(check_disagg(plan)):
                kept.append((rate_units(plan.prediction.throughput_rps), n))
        checked += 1
        if any(d.rule not in LOAD_RULES for d in errors) or not kept:
            assert served is None
            continue
        counts = {n for _, n in kept}
        if 1 not in counts:  # the bisection starts from one request in flight
            assert served is None
            continue
        held += 1
        first_refused = next(n for n in range(1, full + 1) if n not in counts)
        prefix = [units for units, n in kept if n < first_refused]
        assert served is not None and not errors_of(check_disagg(served.plan))
        assert served.plan.layout.concurrency < full
        assert max(prefix) <= served.units <= max(units for units, _ in kept)
    assert checked and held  # the case has deployments held below their full rate
