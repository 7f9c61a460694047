"""``enumerate --serving disagg`` (``frontier.DisaggEnumeration``): each pair's deployment is brute force's best
of that pair alone, at what each deployment carries within every rule (``Pools.served``), the TTFT floor the
enumeration asks first refusing none of it; a deployment that only a decode batch limit tells from an earlier
row is listed once."""

from __future__ import annotations

import pytest

from shardplan.rules.disagg_plan import DisaggPlan
from shardplan.solver.disagg import brute
from shardplan.solver.disagg.deploy import Pools
from shardplan.solver.disagg.frontier import DisaggEnumeration
from tests.factory import problem
from tests.unit.solver.disagg.test_search import SGL_TIGHT, SMALL, case_id


@pytest.mark.parametrize("case", [SMALL[1], SGL_TIGHT[2]], ids=case_id)
def test_each_pair_s_deployment_is_brute_force_s_best_of_the_pair(case) -> None:
    """Llama-3.1-8B on 2x4xH100 at TTFT 400 ms, and on 4xH200 under SGLang at 500 ms, where no deployment at a
    decode layout's largest batch keeps the limit at its full rate: the enumeration's plans, in order, are brute
    force's per pair, there some of them held below their full rate."""
    enumeration = DisaggEnumeration(problem(**case, objective="throughput"))
    pools = enumeration.pools
    every_pair = []
    for p in pools.prefill:
        for d in pools.decode:
            best = brute.best_throughput(Pools(pools.problem, pools.profile, [p], [d]))
            if best is not None:
                every_pair.append(best[1])
    expected = [plan for n, plan in enumerate(every_pair)
                if not any(_same_but_batch_limit(plan, earlier) for earlier in every_pair[:n])]
    found = list(enumeration)
    assert not enumeration.partial and found == expected
    if case is SGL_TIGHT[2]:
        assert any(plan.prediction.bottleneck == "concurrency" for plan in expected)
        assert len(expected) < len(every_pair)  # the case has such rows to fold


def _same_but_batch_limit(a: DisaggPlan, b: DisaggPlan) -> bool:
    """Field by field: the same pools, workers, requests in flight and predicted figures, the decode pool's batch
    limit aside."""
    pa, pb = a.prediction, b.prediction
    da, db = (plan.layout.decode.model_copy(update={"max_batch": 1}) for plan in (a, b))
    return (a.layout.prefill == b.layout.prefill and a.layout.concurrency == b.layout.concurrency and da == db
            and pa.metrics == pb.metrics and pa.throughput_rps == pb.throughput_rps
            and pa.bottleneck == pb.bottleneck)
