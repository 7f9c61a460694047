"""The TTFT cuts (``solver/disagg/ttft_cut.py``) held to the exact check by brute force: no deployment
the exact check accepts breaks a cut, the CP-SAT encoding forbids exactly what the cuts' own test
(``PairCuts.allows``) forbids, the cuts do forbid refused deployments where TTFT binds, and what the
floor takes from the cost model (the pass and the round grow with the chunk and the batch, and so do
a worker's capacities) holds on these cases. Likewise the floor of one deployment at one rate
(``ChoiceFloor``), with SGLang's profile where TTFT binds."""

from __future__ import annotations

import pytest
from ortools.sat.python import cp_model

from shardplan.solver.cost.disagg import decode_step, engine_profile, largest_chunk, prefill_step, resolve_profile
from shardplan.solver.disagg import brute, ttft_cut
from shardplan.solver.disagg.deploy import Pools
from shardplan.solver.disagg.model import PoolModel
from shardplan.solver.disagg.search import fewest_gpus, target_units
from shardplan.solver.disagg.serving import DisaggOutcome, why_no_deployment
from shardplan.solver.disagg.ttft_cut import (
    ChoiceFloor,
    _climb,
    batch_levels,
    capacity_below,
    chunk_levels,
    pair_cuts,
    rungs,
)
from shardplan.solver.disagg.workers import PrefillWorker, decode_workers, prefill_priced
from shardplan.solver.encode import new_solver
from shardplan.solver.optimise import Deadline
from tests.factory import problem
from tests.unit.solver.disagg.test_search import SGL_TIGHT, SMALL, case_id, pools_for

WITH_TTFT = [c for c in SMALL if c.get("ttft_ms") is not None]
IDS = [f"{c['model']}-{c['cluster']}-{c['isl']}-ttft{c['ttft_ms']}" for c in WITH_TTFT]


def cuts_of(pools):
    return {(i, k): pair_cuts(pools.problem, pools.profile, p, d)
            for i, p in enumerate(pools.prefill) for k, d in enumerate(pools.decode)}


def accepted_at(pools, target: int) -> list:
    """Every deployment (brute force) the exact check accepts at ``target`` rate units."""
    return [c for c in brute.choices(pools) if pools.rate(c) >= target and pools.feasible_plan(c, target) is not None]


@pytest.mark.parametrize("case", WITH_TTFT, ids=IDS)
def test_no_deployment_the_exact_check_accepts_breaks_a_cut(case) -> None:
    pools = pools_for(case)
    cuts = cuts_of(pools)
    accepted = 0
    for c in brute.choices(pools):
        if pools.feasible_plan(c) is not None:
            accepted += 1
            assert cuts[(c.prefill, c.decode)].allows(c.x, c.y, pools.rate(c)), c
    assert accepted > 0  # the cases have feasible deployments to hold the cuts to


AT_RATES = [(c, r) for c in WITH_TTFT for r in (3.0, 12.5)] + [(c, r) for c in SGL_TIGHT[:2] for r in (10.0, 20.0)]


@pytest.mark.parametrize(("case", "rate_rps"), AT_RATES, ids=lambda v: case_id(v) if isinstance(v, dict) else f"{v:g}")
def test_no_deployment_accepted_at_a_target_rate_breaks_a_cut_or_the_floor_at_that_rate(case, rate_rps) -> None:
    """The ``--rate`` search's use of the cuts and the floor: the exact check prices a deployment at the
    concurrency that reaches the target, and the model's rate may be the target, so every deployment
    accepted there must pass every cut, and the floor, at the target's rate units."""
    pools = pools_for(case)
    cuts = cuts_of(pools)
    floor = ChoiceFloor(pools)
    target = target_units(rate_rps)
    accepted = accepted_at(pools, target)
    assert accepted
    for c in accepted:
        assert cuts[(c.prefill, c.decode)].allows(c.x, c.y, target), c
        assert not floor.refuses(c, target), c


def test_the_cuts_forbid_refused_deployments_where_ttft_binds() -> None:
    """TTFT 400 ms on 2x4xH100 binds (test_search's case): the floor must do some of the refusing, and
    every deployment it forbids is one the exact check refuses for TTFT."""
    case = SMALL[1]
    pools = pools_for(case)
    cuts = cuts_of(pools)
    forbidden = [c for c in brute.choices(pools) if pools.rate(c) > 0
                 and not cuts[(c.prefill, c.decode)].allows(c.x, c.y, pools.rate(c))]
    assert forbidden
    for c in forbidden[:: max(1, len(forbidden) // 40)]:
        plan = pools.price(c)
        assert plan is None or plan.prediction.metrics.ttft_ms > case["ttft_ms"]


@pytest.mark.parametrize("case", WITH_TTFT, ids=IDS)
def test_the_model_forbids_what_the_cuts_forbid(case) -> None:
    """A choice pinned in the model with every pair's cuts, its rate at the choice's own: feasible
    exactly when ``allows`` says so (a sample of choices of each verdict)."""
    pools = pools_for(case)
    cuts = cuts_of(pools)
    m = PoolModel(pools)
    m.cut_ttft_all()
    choices = [c for c in brute.choices(pools) if pools.rate(c) > 0]
    verdicts = {c: cuts[(c.prefill, c.decode)].allows(c.x, c.y, pools.rate(c)) for c in choices}
    sample = [c for c in choices if verdicts[c]][::max(1, len(choices) // 30)]
    sample += [c for c in choices if not verdicts[c]][::max(1, len(choices) // 30)]
    for c in sample:
        cp = m.cp.clone()
        cp.add(m.p[c.prefill] == 1)
        cp.add(m.d[c.decode] == 1)
        cp.add(m.x == c.x)
        cp.add(m.y == c.y)
        cp.add(m.rate == pools.rate(c))
        status = new_solver(None).solve(cp)
        assert (status in (cp_model.OPTIMAL, cp_model.FEASIBLE)) == verdicts[c], c


@pytest.mark.parametrize("case", WITH_TTFT, ids=IDS)
def test_the_floor_s_premises_hold_on_the_candidates(case) -> None:
    """The pass and the round never fall as the chunk or the batch grows (the floor reads a least pass
    and round from a least chunk and batch), at every chunk and batch of every candidate."""
    pools = pools_for(case)
    p, profile = pools.problem, pools.profile
    top_chunk = min(largest_chunk(p, profile), profile.max_batch)
    for w in pools.prefill:
        steps = [prefill_step(p, w.layout, h, profile) for h in range(1, top_chunk + 1)]
        for a, b in zip(steps, steps[1:], strict=False):
            assert b.pass_ns >= a.pass_ns
    for w in pools.decode:
        steps = [decode_step(p, w.layout, j, profile) for j in range(1, w.batch + 1)]
        for a, b in zip(steps, steps[1:], strict=False):
            assert b.round_ns >= a.round_ns


def test_the_capacity_below_a_level_bounds_every_smaller_batch() -> None:
    """Rounds growing with the batch, each level's bound is at least every smaller batch's capacity
    (hand-made rounds: 10 ns per sequence plus 100, OSL 2)."""
    levels = [1, 4, 8, 9, 10]
    rounds = {b: 100 + 10 * b for b in range(1, 11)}
    below = capacity_below(levels, [rounds[j] for j in levels], osl=2)
    assert below[0] == 0
    for m, level in enumerate(levels):
        for b in range(1, level):
            assert below[m] >= b * 1e9 / rounds[b]
    # Hand-computed: batches 1-3 at most 3 / round(1); 4-7 at most 7 / round(4), the largest after.
    assert below[1] == pytest.approx(3e9 / 110) and below[3] == pytest.approx(7e9 / 140)


def test_levels_include_the_ends_and_stay_in_range() -> None:
    assert chunk_levels(2) == [1, 2]
    assert chunk_levels(40) == [1]  # too many chunks to price each: the lone prompt's only
    assert batch_levels(1) == [1]
    assert batch_levels(316)[-3:] == [314, 315, 316] and batch_levels(316)[0] == 1
    assert all(1 <= j <= 20 for j in batch_levels(20))


# --- the floor of one deployment at one rate (ChoiceFloor) ------------------------------------------
FLOOR_CASES = WITH_TTFT + SGL_TIGHT


@pytest.mark.parametrize("case", FLOOR_CASES, ids=case_id)
def test_no_deployment_the_exact_check_accepts_is_refused_by_the_floor(case) -> None:
    """Brute force over every deployment: the floor at a deployment's own rate never refuses one the
    exact check accepts; and under SGLang's profile it does refuse (most of) the rest."""
    pools = pools_for(case)
    floor = ChoiceFloor(pools)
    accepted = refused_by_floor = 0
    for c in brute.choices(pools):
        if pools.rate(c) == 0:
            continue
        refuses = floor.refuses(c, pools.rate(c))
        refused_by_floor += refuses
        if pools.feasible_plan(c) is not None:
            accepted += 1
            assert not refuses, c
    if case.get("engine") == "sglang":
        assert refused_by_floor > 0
    assert accepted > 0 or case is SGL_TIGHT[-1]  # the last SGLang case has none (every one breaks TTFT)


# TensorRT-LLM's scheduler admits a request after 6.8 decode rounds (its profile's ``ttft_wait_steps``): at
# 400 ms the decode worker's admission is a large share of what TTFT leaves the queue.
TRT_ADMISSION = dict(model="llama-3.1-8b", cluster="2x4xH200", isl=4000, osl=300, ttft_ms=400, tpot_ms=20,
                     engine="trtllm")


def test_the_floor_counts_the_decode_admission_and_still_refuses_no_accepted_deployment(monkeypatch) -> None:
    """Brute force on a TensorRT-LLM case: with the admission the floor refuses every deployment it refused
    without it and more (236 of 401 against 86 when measured), and still none the exact check
    accepts."""
    pools = pools_for(TRT_ADMISSION)
    choices = [c for c in brute.choices(pools) if pools.rate(c) > 0]
    floor = ChoiceFloor(pools)
    refused = {c for c in choices if floor.refuses(c, pools.rate(c))}
    assert not any(pools.feasible_plan(c) is not None for c in refused)
    monkeypatch.setattr(ttft_cut, "admission_ns", lambda *_: 0)
    without = ChoiceFloor(pools)
    refused_without = {c for c in choices if without.refuses(c, pools.rate(c))}
    assert refused_without < refused
    assert len(refused) > 2 * len(refused_without)


@pytest.mark.parametrize("case", SGL_TIGHT, ids=case_id)
def test_what_the_floor_refuses_breaks_the_ttft_limit(case) -> None:
    """Not only refused: priced at its own rate, each deployment the floor refuses (a sample) has a TTFT
    over the limit, so the floor does not stand in for another rule."""
    pools = pools_for(case)
    floor = ChoiceFloor(pools)
    refused = [c for c in brute.choices(pools) if pools.rate(c) > 0 and floor.refuses(c, pools.rate(c))]
    assert refused
    for c in refused[:: max(1, len(refused) // 30)]:
        plan = pools.price(c)
        assert plan is None or plan.prediction.metrics.ttft_ms > case["ttft_ms"], c


@pytest.mark.parametrize("case", SGL_TIGHT[:2], ids=case_id)
def test_the_floor_s_premises_hold_on_sglang_candidates(case) -> None:
    """The prefill step at n prompts per rank holds n x attn_dp prompts, and its slowest stage, its pass
    and the decode round never fall as the chunk or the batch grows (``ChoiceFloor``'s climb)."""
    pools = pools_for(case)
    p, profile = pools.problem, pools.profile
    top_chunk = min(largest_chunk(p, profile), profile.max_batch)
    for w in pools.prefill:
        steps = [prefill_step(p, w.layout, h, profile) for h in range(1, top_chunk + 1)]
        assert [s.chunk for s in steps] == [h * w.layout.attn_dp for h in range(1, top_chunk + 1)]
        for a, b in zip(steps, steps[1:], strict=False):
            assert b.slowest_ns >= a.slowest_ns and b.pass_ns >= a.pass_ns
    for w in pools.decode:
        rounds = [decode_step(p, w.layout, j, profile).round_ns for j in range(1, w.batch + 1)]
        assert rounds == sorted(rounds)


def test_the_climb_stops_at_the_least_n_that_covers_itself() -> None:
    """``n -> ceil(n / 2 + 3)`` from 1: 4, 5, 6, then 6 (the least n with n >= n / 2 + 3); within ``top``."""
    assert _climb(100, lambda n: n / 2 + 3) == 6
    assert _climb(5, lambda n: n / 2 + 3) == 5
    assert _climb(100, lambda n: 0.5) == 1


def test_rungs_cover_one_to_sixteen_then_grow_by_a_sixteenth_to_the_top() -> None:
    assert rungs(1) == [1] and rungs(20) == list(range(1, 21))
    ladder = rungs(316)
    assert ladder[:16] == list(range(1, 17)) and ladder[-1] == 316
    assert all(a < b <= max(a + 1, a * 17 / 16) for a, b in zip(ladder, ladder[1:], strict=False))


# Cases and targets for ``refuses_every``: the small cases with TTFT, and the same models at a TTFT limit
# only a lone prompt nearly meets (the serving stack's 81 and 176 ms included: the fastest lone prompts take
# 79.5 and 35.3 ms), where no deployment keeps it at any rate.
HOPELESS = [dict(model="llama-3.1-8b", cluster="2x4xH100", isl=8000, osl=300, ttft_ms=165, tpot_ms=50),
            dict(model="llama-3.1-8b", cluster="4xH200", isl=4000, osl=200, ttft_ms=230, engine="sglang")]
# The same at limits below every lone prompt with the serving stack: no prefill candidate at all.
BELOW_STACK = [{**HOPELESS[0], "ttft_ms": 160}, {**HOPELESS[1], "ttft_ms": 211}]
# A lone prompt keeps TTFT 300 ms here; at 20 requests/s and more the queue of OSL 2,000's requests in flight
# cannot (the proof's utilisation term), at 0.5 it may.
QUEUED = dict(model="llama-3.1-8b", cluster="2x4xH100", isl=8000, osl=2000, ttft_ms=300, tpot_ms=50)
EVERY_AT = [(c, r) for c in WITH_TTFT + SGL_TIGHT + HOPELESS + [QUEUED] for r in (0.5, 3.0, 12.5, 50.0)]


@pytest.mark.parametrize(("case", "rate_rps"), EVERY_AT, ids=lambda v: case_id(v) if isinstance(v, dict) else f"{v:g}")
def test_the_floor_refuses_every_deployment_only_where_brute_force_accepts_none(case, rate_rps) -> None:
    """``ChoiceFloor.refuses_every`` (the ``--rate`` search's early proof that nothing keeps TTFT): where it
    holds, the floor refuses every choice at the target and brute force finds no deployment the exact
    check accepts there."""
    pools = pools_for(case)
    floor = ChoiceFloor(pools)
    target = target_units(rate_rps)
    if floor.refuses_every(target):
        assert all(floor.refuses(c, target) for c in brute.choices(pools) if pools.rate(c) >= target)
        assert brute.fewest_gpus(pools, target) is None


@pytest.mark.parametrize("case", HOPELESS, ids=case_id)
def test_refuses_every_holds_where_the_request_overhead_leaves_no_queue(case) -> None:
    """The proof applies to these cases (so the test above holds it to brute force somewhere), and the
    ``--rate`` search then answers with the rule, as it does without the proof."""
    pools = pools_for(case)
    assert ChoiceFloor(pools).refuses_every(target_units(3.0))
    found = fewest_gpus(pools, 3.0, Deadline(None))
    assert found.plan is None and found.proven
    assert "SLA-001" in pools.refused


@pytest.mark.parametrize("case", BELOW_STACK, ids=case_id)
def test_no_prefill_candidate_where_every_lone_prompt_and_the_stack_pass_the_limit(case) -> None:
    """Every TTFT carries the serving stack's cost and at least the lone prompt's pass, so a layout whose two
    pass the limit is no candidate (before, only the pass was read and such layouts were searched, every
    deployment of them refused); the answer is then at once, naming SLA-001 and the stack's cost."""
    p = problem(**case, objective="throughput")
    profile = engine_profile(p, resolve_profile(p))
    priced = prefill_priced(p, profile)
    lone_ms = [prefill_step(p, w.layout, 1, profile).pass_ns / 1e6 for w in priced]
    assert priced and all(ms + profile.request_overhead_ms > case["ttft_ms"] for ms in lone_ms)
    assert any(ms <= case["ttft_ms"] for ms in lone_ms)  # the lone prompt alone would have passed
    pools = pools_for(case)
    assert not pools.prefill
    why = why_no_deployment(DisaggOutcome(fewest_gpus(pools, 3.0, Deadline(None)), pools, 0.0), 3.0)
    assert [rule for rule, _ in why.conflicts] == ["MEM-001", "SLA-001"]
    assert f"serving stack's {profile.request_overhead_ms:g} ms" in why.conflicts[1][1]


def test_the_candidates_the_serving_stack_leaves_out_are_in_no_accepted_deployment() -> None:
    """Brute force on QUEUED at 0.5 requests/s, over the candidates the lone prompt alone admits: 2 of its 25
    prefill layouts take longer than the limit with the stack, none is in a deployment the exact check
    accepts, and the fewest GPUs are the same without them."""
    p = problem(**QUEUED, objective="throughput")
    profile = engine_profile(p, resolve_profile(p))
    limit_ns = round(QUEUED["ttft_ms"] * 1e6)
    by_pass = [PrefillWorker(w.layout, w.step.chunk, w.step.pass_ns, first, w.capacity_units)
               for w in prefill_priced(p, profile)
               if (first := prefill_step(p, w.layout, 1, profile).pass_ns) <= limit_ns]
    wider = Pools(p, profile, by_pass, decode_workers(p, profile))
    stack_ns = round(profile.request_overhead_ms * 1e6)
    left_out = [w for w in by_pass if w.first_pass_ns + stack_ns > limit_ns]
    assert len(by_pass) == 25 and len(left_out) == 2
    target = target_units(0.5)
    accepted = [c for c in brute.choices(wider) if wider.rate(c) >= target
                and wider.feasible_plan(c, target) is not None]
    assert accepted and not any(wider.prefill[c.prefill] in left_out for c in accepted)
    pools = pools_for(QUEUED, caps=False)  # the same decode candidates as ``wider``
    assert len(pools.prefill) == 23
    best_wider, best = brute.fewest_gpus(wider, target), brute.fewest_gpus(pools, target)
    assert best_wider is not None and best is not None
    assert wider.gpus(best_wider[0]) == pools.gpus(best[0])


def test_refuses_every_reads_the_queue_not_only_the_lone_prompt() -> None:
    pools = pools_for(QUEUED)
    floor = ChoiceFloor(pools)
    assert not floor.refuses_every(target_units(0.5))
    assert floor.refuses_every(target_units(50.0))


def test_the_cuts_count_the_decode_admission_and_still_allow_every_accepted_deployment(monkeypatch) -> None:
    """Brute force on the TensorRT-LLM case above: the pair cuts with the decode worker's admission allow every
    deployment the exact check accepts, and forbid more of the refused ones than without it."""
    pools = pools_for(TRT_ADMISSION)
    choices = [c for c in brute.choices(pools) if pools.rate(c) > 0]
    accepted = {c for c in choices if pools.feasible_plan(c) is not None}
    cuts = cuts_of(pools)
    assert accepted and all(cuts[(c.prefill, c.decode)].allows(c.x, c.y, pools.rate(c)) for c in accepted)
    forbidden = {c for c in choices if not cuts[(c.prefill, c.decode)].allows(c.x, c.y, pools.rate(c))}
    monkeypatch.setattr(ttft_cut, "admission_ns", lambda *_: 0)
    without = cuts_of(pools)
    forbidden_without = {c for c in choices if not without[(c.prefill, c.decode)].allows(c.x, c.y, pools.rate(c))}
    assert forbidden_without < forbidden and not forbidden & accepted


def _highest_unrefused(floor: ChoiceFloor, c, top: int) -> int:
    """The most rate units the floor lets ``c`` be asked for (it refuses every rate above; bisected)."""
    lo, hi = 0, top
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (lo, mid - 1) if floor.refuses(c, mid) else (mid, hi)
    return lo


def test_the_floor_lets_through_what_a_deployment_carries_and_little_more() -> None:
    """Brute force over the deployments the exact check holds below their full rate (SGLang, TTFT binding), as the
    per-GPU walk asks the floor for them: it never refuses a rate a deployment carries, and read at each
    deployment's own link and, where the rungs let it through, at the exact decode rounds, it lets through a
    median 0.7 % more than the deployment carries (measured 2026-12-07; 2.9 % with the rungs' rounds and either
    link's transfer alone)."""
    pools = pools_for(SGL_TIGHT[0])
    floor = ChoiceFloor(pools)
    ratios = []
    for c in list(brute.choices(pools))[::3]:
        served = pools.served(c) if pools.rate(c) > 0 else None
        if served is None or served.units >= pools.rate(c):
            continue
        highest = _highest_unrefused(floor, c, pools.rate(c))
        assert highest >= served.units, c
        ratios.append(highest / served.units)
    assert len(ratios) > 300
    assert sorted(ratios)[len(ratios) // 2] < 1.015


def test_a_deployment_s_link_is_the_one_its_placement_prices() -> None:
    """``Pools.tier`` (what the floor reads the transfer over) is the tier of the plan the exact check prices, for
    every deployment of a two-node case: inside one node NVLink, across both the NICs."""
    pools = pools_for(SMALL[1])  # 2x4xH100
    tiers = set()
    for c in brute.choices(pools):
        plan = pools.price(c)
        if plan is None or pools.end_gpu(c) > pools.problem.cluster.num_gpus:
            continue
        assert plan.prediction.kv.tier == pools.tier(c).value, c
        tiers.add(pools.tier(c))
    assert len(tiers) == 2
