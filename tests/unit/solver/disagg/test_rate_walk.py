"""The ``--rate`` walk (``rate_walk.py``) against brute force on the same candidates: its lazy order is
``brute.fewest_gpus``' sort, its least worker counts bound every deployment reaching the target, what a walk cut
short leaves the CP-SAT search was truly refused, and the search from there returns brute force's deployment."""

from __future__ import annotations

import pytest

from shardplan.hardware import Tier
from shardplan.solver.disagg import brute
from shardplan.solver.disagg import rate_walk as rate_walk_module
from shardplan.solver.disagg.deploy import Pools, pools_capacity
from shardplan.solver.disagg.rate_walk import least_workers, rate_walk
from shardplan.solver.disagg.search import fewest_gpus, target_units
from shardplan.solver.disagg.ttft_cut import ChoiceFloor
from shardplan.solver.optimise import Deadline
from tests.unit.solver.disagg.test_search import SGL_TIGHT, SMALL, case_id, pools_for

# SMALL[1] spans two scale-up domains (the link's slower tier); SGL_TIGHT[0] is where TTFT binds at 800 ms.
CASES = [SMALL[0], SMALL[1], SGL_TIGHT[0], SGL_TIGHT[1]]
RATES = [3.0, 10.0]
# Rates at which the walk judges 7 to 20 deployments before its answer (or, the second, finds none: 20 judged):
# a walk cut short after at most 6 leaves the CP-SAT search work to do.
TIGHT = [(SGL_TIGHT[1], 15.0), (SGL_TIGHT[1], 30.0), (SGL_TIGHT[0], 30.0), (SMALL[1], 40.0), (SGL_TIGHT[2], 30.0)]
CUT_SHORT = [0, 3, 6]


def tight_id(case_rate) -> str:
    return f"{case_id(case_rate[0])}-{case_rate[1]}"


def reaching(pools, target: int) -> list:
    """Every deployment reaching ``target``, in brute force's order (its sort, written out here)."""
    listed = [c for c in brute.choices(pools) if pools.rate(c) >= target]
    return sorted(listed, key=lambda c: (pools.gpus(c), -pools.rate(c), -pools_capacity(pools, c), c))


class RefuseAll(ChoiceFloor):
    """A floor that refuses every deployment, noting the order it was asked in."""

    def __init__(self, pools):
        super().__init__(pools)
        self.asked: list = []

    def refuses(self, c, target_units: int) -> bool:
        self.asked.append(c)
        return True


@pytest.mark.parametrize("rate_rps", RATES)
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_the_walk_judges_every_deployment_reaching_the_target_in_brute_force_s_order(case, rate_rps) -> None:
    pools = pools_for(case)
    target = target_units(rate_rps)
    floor = RefuseAll(pools)
    walked = rate_walk(pools, target, Deadline(None), floor, most=10**9)
    expected = reaching(pools, target)
    assert expected  # the case has deployments to order
    assert floor.asked == expected
    assert walked.complete and walked.accepted is None and walked.checks == 0


@pytest.mark.parametrize("rate_rps", RATES + [25.0])
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_the_least_worker_counts_bound_every_deployment_reaching_the_target(case, rate_rps) -> None:
    pools = pools_for(case)
    target = target_units(rate_rps)
    for c in brute.choices(pools):
        least = least_workers(pools, c.prefill, c.decode, target)
        if pools.rate(c) >= target:
            assert least is not None and c.x >= least[0] and c.y >= least[1], c


@pytest.mark.parametrize("most", CUT_SHORT)
@pytest.mark.parametrize("case_rate", TIGHT, ids=tight_id)
def test_a_walk_cut_short_leaves_only_refused_deployments_below_where_it_stopped(case_rate, most) -> None:
    case, rate_rps = case_rate
    pools = pools_for(case)
    target = target_units(rate_rps)
    walked = rate_walk(pools, target, Deadline(None), ChoiceFloor(pools), most=most)
    assert not walked.complete and walked.accepted is None
    below = [c for c in reaching(pools, target) if pools.gpus(c) < walked.fewest_gpus]
    for c in below + walked.refused_at_fewest:
        assert pools.feasible_plan(c, target) is None, c
    assert all(pools.gpus(c) == walked.fewest_gpus for c in walked.refused_at_fewest)
    assert len(below) + len(walked.refused_at_fewest) == most  # each judged one is named, by its GPUs or itself


@pytest.mark.parametrize("most", CUT_SHORT + [None])
@pytest.mark.parametrize("case_rate", TIGHT + [(case, rate) for case in CASES for rate in RATES], ids=tight_id)
def test_the_search_from_a_walk_cut_short_equals_brute_force(case_rate, most) -> None:
    """``most`` deployments judged by the walk before the CP-SAT search takes over (0: the CP-SAT search alone;
    None: the walk as ``solve`` runs it, to the end)."""
    case, rate_rps = case_rate
    pools = pools_for(case)
    kwargs = {} if most is None else {"most_walked": most}
    found = fewest_gpus(pools, rate_rps, Deadline(None), **kwargs)
    best = brute.fewest_gpus(pools, target_units(rate_rps))
    assert (found.plan is None) == (best is None)
    assert found.proven
    if best is not None:
        assert found.choice == best[0]


@pytest.mark.parametrize("most, pops_per_judged", [(None, 8), (1, 8), (3, 1)], ids=["whole", "judged", "popped"])
def test_deployments_a_slow_link_leaves_below_the_target_are_skipped_in_order(monkeypatch, most, pops_per_judged):
    """Across scale-up domains a link at half the target per worker pair leaves deployments with one worker of a role
    below the target: the walk pops and skips them (brute force does not list them), the rest still come in brute
    force's order, a walk cut short (after one judged, or after three popped: the third is skipped, and the third
    judged, the answer, is the seventh popped) names only refused deployments, and the search from it equals brute
    force."""
    case, rate_rps = SGL_TIGHT[0], 30.0  # 2x4xH200: two scale-up domains; the answer is the third judged
    target = target_units(rate_rps)
    real = Pools.kv_units

    def slow_across(self, i, k, tier):
        return real(self, i, k, tier) if tier is Tier.SCALE_UP else target // 2

    monkeypatch.setattr(Pools, "kv_units", slow_across)
    monkeypatch.setattr(rate_walk_module, "POPS_PER_JUDGED", pops_per_judged)
    pools = pools_for(case)
    expected = reaching(pools, target)
    skipped = [c for c in brute.choices(pools) if pools.end_gpu(c) > 4 and pools.rate(c) < target
               and min(c.x * pools.prefill[c.prefill].capacity_units, c.y * pools.decode[c.decode].capacity_units)
               >= target]
    assert skipped  # the link, not the pools, leaves these below the target
    if most is None:
        floor = RefuseAll(pools)
        rate_walk(pools, target, Deadline(None), floor, most=10**9)
        assert floor.asked == expected
    else:
        walked = rate_walk(pools, target, Deadline(None), ChoiceFloor(pools), most=most)
        assert not walked.complete
        below = [c for c in expected if pools.gpus(c) < walked.fewest_gpus]
        assert all(pools.feasible_plan(c, target) is None for c in below + walked.refused_at_fewest)
        judged = len(below) + len(walked.refused_at_fewest)
        assert judged == (most if pops_per_judged > 1 else 2)  # three popped: two judged, one skipped
    found = fewest_gpus(pools, rate_rps, Deadline(None), **({} if most is None else {"most_walked": most}))
    best = brute.fewest_gpus(pools, target)
    assert best is not None and found.choice == best[0]
