"""The walk in brute force's order (``solver/disagg/walk.py``) against brute force, what it leaves the
CP-SAT search held to the exact check (no deployment of a listed pair above the frontier carries more than
the frontier within every rule),
and the search from a walk cut short (its frontier posted as ``PoolModel.cap_pair``) still equal to
brute force."""

from __future__ import annotations

import random
from fractions import Fraction
from types import SimpleNamespace

import pytest
from ortools.sat.python import cp_model

from shardplan.solver.cost.disagg import decode_step
from shardplan.solver.disagg import brute
from shardplan.solver.disagg import walk as walk_module
from shardplan.solver.disagg.model import PoolModel, bounded_ratio
from shardplan.solver.disagg.search import max_throughput
from shardplan.solver.disagg.ttft_cut import ChoiceFloor, rungs
from shardplan.solver.disagg.walk import PairKeys, first_pair_bound, held_pair_bound, pair_bound, walk
from shardplan.solver.disagg.workers import capacity_units
from shardplan.solver.encode import new_solver
from shardplan.solver.optimise import Deadline
from tests.unit.solver.disagg.test_search import SGL_TIGHT, SMALL, case_id, pools_for

CASES = SMALL + SGL_TIGHT


def per_gpu(pools, c) -> Fraction:
    return Fraction(pools.rate(c), pools.gpus(c))


def key(pools, c) -> Fraction:
    """Where the walk lists a deployment: its full rate per GPU, or its pair's bound within every rule if lower (over
    the rungs, and at every batch for the deployments of its group of prefill worker counts, where the pair may
    list more than ``FINE_LISTED``)."""
    floor = ChoiceFloor(pools)
    bound = held_pair_bound(pools, floor, c.prefill, c.decode)
    if walk_module._lists_many(pools, c.prefill, c.decode, None):
        group = Fraction(*PairKeys(pools, floor).group_terms(c.prefill, c.decode, least_of_group(c.x)))
        bound = min(bound, held_pair_bound(pools, floor, c.prefill, c.decode, fine=True), group)
    return min(per_gpu(pools, c), bound)


def least_of_group(x: int) -> int:
    """The least prefill worker count of the walk's group holding ``x`` (1, 2-3, 4-7, ...)."""
    return 1 << (x.bit_length() - 1)


@pytest.mark.parametrize("case", CASES, ids=case_id)
@pytest.mark.parametrize("fine_listed", [walk_module.FINE_LISTED, 0])
def test_the_walk_accepts_brute_force_s_answer(case, fine_listed, monkeypatch) -> None:
    """Brute force's deployment, with the bound over the rungs read where the walk reads it and (0: these small
    cases list fewer than ``FINE_LISTED`` a pair) for every pair."""
    monkeypatch.setattr(walk_module, "FINE_LISTED", fine_listed)
    pools = pools_for(case)
    walked = walk(pools, Fraction(0), Deadline(None))
    best = brute.best_throughput(pools)
    assert walked.complete
    assert (walked.accepted and walked.accepted[0]) == (best and best[0])
    assert walked.accepted is None or walked.accepted[1].plan.prediction == best[1].prediction


@pytest.mark.parametrize("case", CASES, ids=case_id)
@pytest.mark.parametrize("most", [0, 3, 40])
@pytest.mark.parametrize("fine_listed", [walk_module.FINE_LISTED, 0])
def test_a_walk_cut_short_leaves_only_refused_deployments_above_its_frontier(case, most, fine_listed,
                                                                             monkeypatch) -> None:
    """No deployment of a listed pair strictly above the frontier carries more than the frontier per GPU
    within every rule (``Pools.served``), and each one it names at the frontier carries at most its cap, or
    nothing where the cap is None (what ``PoolModel.cap_pair``, ``cap_choice`` and ``forbid`` then post); with
    the bound over the rungs read for every pair too (``fine_listed`` 0)."""
    monkeypatch.setattr(walk_module, "FINE_LISTED", fine_listed)
    pools = pools_for(case)
    walked = walk(pools, Fraction(0), Deadline(None), most=most)
    if walked.frontier is None:
        assert walked.expanded == []
        return
    listed = set(walked.expanded)
    for c in brute.choices(pools):
        if (c.prefill, c.decode) in listed and pools.rate(c) > 0 and per_gpu(pools, c) > walked.frontier:
            served = pools.served(c)
            assert served is None or Fraction(served.units, pools.gpus(c)) <= walked.frontier, c
    for c, cap in walked.capped_at_frontier:
        served = pools.served(c)
        assert key(pools, c) == walked.frontier
        assert served is None if cap is None else served is None or served.units <= cap


@pytest.mark.parametrize("case", CASES, ids=case_id)
@pytest.mark.parametrize("most", [0, 40])
def test_the_search_from_a_walk_cut_short_equals_brute_force(case, most, monkeypatch) -> None:
    """The CP-SAT search takes over where the walk stopped (``most`` deployments listed: 0 is the CP-SAT
    search alone, with the TTFT floor) and returns brute force's deployment. (Cut short at 3 too, this
    cost 56 s of the suite's time for a case between these two; the frontier test above keeps 3.) The two
    8B cases on 2x4 GPUs run without the decode batch caps: with them each took over a minute here. The other
    TTFT cases keep them, and test_search and test_prune hold the whole search on every case's capped
    candidates to brute force."""
    monkeypatch.setattr(walk_module, "WALK_CHOICES", most)
    pools = pools_for(case, caps=False if case["cluster"].startswith("2x4x") else None)
    found = max_throughput(pools, Deadline(None))
    best = brute.best_throughput(pools)
    assert found.proven
    assert found.choice == (None if best is None else best[0])


def test_a_pair_s_cap_forbids_exactly_the_deployments_above_it() -> None:
    """A choice pinned in the model at its own rate, its pair capped at a rate per GPU: feasible exactly
    when its rate per GPU is at most the cap (hand-picked caps: a choice's own; one rate unit per GPU below
    it; a millionth of a unit below it, which ``bounded_ratio`` posts at the choice's own, the cluster
    having 4 GPUs)."""
    pools = pools_for(SMALL[0])
    choices = [c for c in brute.choices(pools) if pools.rate(c) > 0][::7]
    for c in choices:
        own = per_gpu(pools, c)
        for cap, allowed in ((own, True), (own - 1, False), (own - Fraction(1, 10**6), True)):
            m = PoolModel(pools)
            m.cap_pair(c.prefill, c.decode, cap)
            cp = m.cp.clone()
            for var, value in ((m.p[c.prefill], 1), (m.d[c.decode], 1), (m.x, c.x), (m.y, c.y),
                               (m.rate, pools.rate(c))):
                cp.add(var == value)
            status = new_solver(None).solve(cp)
            assert (status in (cp_model.OPTIMAL, cp_model.FEASIBLE)) == allowed, (c, cap)


def test_a_ratio_is_posted_at_the_least_fraction_of_a_bounded_denominator_no_lower() -> None:
    """``bounded_ratio``: kept where its denominator is small enough, else rounded up (by hand: 1000/3 is
    333.33..., so with a denominator of at most 2 the least no lower is 667/2)."""
    assert bounded_ratio(Fraction(1000, 3), 4) == Fraction(1000, 3)
    assert bounded_ratio(Fraction(1000, 3), 2) == Fraction(667, 2)
    assert bounded_ratio(Fraction(10**14 + 1, 10**8), 64) == Fraction(64 * 10**6 + 1, 64)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_a_walk_within_a_gpu_budget_accepts_brute_force_s_answer_on_that_budget(case) -> None:
    """``most_gpus`` (the seed's walk, ``prune.walked_seed``): brute force's answer among the deployments on at
    most 4 GPUs."""
    pools = pools_for(case)
    walked = walk(pools, Fraction(0), Deadline(None), most_gpus=4)
    best = brute.best_throughput(pools, most_gpus=4)
    assert walked.complete
    assert (walked.accepted and walked.accepted[0]) == (best and best[0])


@pytest.mark.parametrize("case", SGL_TIGHT[1:] + [SMALL[1]], ids=case_id)
def test_no_deployment_carries_more_than_its_pair_s_bound_within_every_rule(case) -> None:
    """Brute force over every deployment: what it carries within every rule (``Pools.served``) is at most x times
    what its prefill candidate feeds with its decode candidate (``ChoiceFloor.worker_cap_units``), and with any
    decode candidate, and at most its pair's ``held_pair_bound`` per GPU (over the powers of two and over the
    rungs), the first at most the heap's first key (``first_pair_bound``), and at most its group's bound over every
    batch (``PairKeys.group_terms`` at the least prefill worker count of its group; across scale-up domains where
    no deployment of the group fits one, which each case of more than one domain holds). Each is below the one
    before on some pair of each case, so no check is the last one's again; the first key is below the plain pair
    bound only for Qwen3-30B-A3B under SGLang at TTFT 400 ms (on every pair; measured)."""
    pools = pools_for(case)
    floor = ChoiceFloor(pools)
    keys = PairKeys(pools, floor)
    first_tighter = held_tighter = fine_tighter = group_tighter = across = False
    for c in brute.choices(pools):
        cap, any_cap = floor.worker_cap_units(c.prefill, c.decode), floor.worker_cap_units(c.prefill)
        assert cap is not None and any_cap is not None and cap <= any_cap
        first = first_pair_bound(pools, floor, c.prefill, c.decode)
        held = held_pair_bound(pools, floor, c.prefill, c.decode)
        fine = held_pair_bound(pools, floor, c.prefill, c.decode, fine=True)
        assert held <= first, c
        fine_tighter |= fine < held
        p, d = pools.prefill[c.prefill], pools.decode[c.decode]
        first_tighter |= first < pair_bound(Fraction(p.capacity_units, p.gpus), Fraction(d.capacity_units, d.gpus))
        held_tighter |= held < first
        group = Fraction(*keys.group_terms(c.prefill, c.decode, least_of_group(c.x)))
        assert group <= held, c
        group_tighter |= group < fine
        served = pools.served(c) if pools.rate(c) > 0 else None
        if served is not None:
            assert served.units <= c.x * cap, c
            assert Fraction(served.units, pools.gpus(c)) <= min(held, fine, group), c
            # a group whose deployments all cross scale-up domains: its bound reads the transfer across them
            across |= least_of_group(c.x) * p.gpus + d.gpus > pools.problem.cluster.scaleup_domain_gpus
    assert first_tighter == (case is SGL_TIGHT[1])
    assert held_tighter and fine_tighter and group_tighter
    cluster = pools.problem.cluster
    assert across == (cluster.num_gpus > cluster.scaleup_domain_gpus)  # on each case of more than one domain


@pytest.mark.parametrize("case", SGL_TIGHT + [SMALL[1]], ids=case_id)
@pytest.mark.parametrize("fine", [False, True])
def test_a_pair_s_held_bound_is_its_best_band_s_bound(case, fine) -> None:
    """``held_pair_bound`` reads the bands from the largest batch down and stops where no band left could beat
    the best even with the prefill worker's whole capacity; it equals the plain maximum over every band of
    ``pair_bound`` with the prefill worker's rate at most what it feeds at the band's round (0 where it feeds
    none), on every pair of each case."""
    pools = pools_for(case)
    floor = ChoiceFloor(pools)
    for i, p in enumerate(pools.prefill):
        for k in range(len(pools.decode)):
            best = Fraction(0)
            for band, (round_ns, most_units) in enumerate(floor.decode_bands(k, fine)):
                feed = min(p.capacity_units, floor.feed_cap_units(i, round_ns, in_flight_two=band > 0))
                if feed > 0:
                    best = max(best, pair_bound(Fraction(feed, p.gpus), Fraction(most_units, pools.decode[k].gpus)))
            assert held_pair_bound(pools, floor, i, k, fine) == best, (i, k)


@pytest.mark.parametrize("case", SGL_TIGHT + [SMALL[1]], ids=case_id)
@pytest.mark.parametrize("slack", [walk_module.GROUP_SLACK, Fraction(0)], ids=["slack", "exact"])
def test_a_group_s_bound_is_its_best_single_batch_s_bound_within_the_slack(case, slack, monkeypatch) -> None:
    """``PairKeys.group_terms`` halves the best band until it is one batch or within ``GROUP_SLACK`` of a batch's
    bound; it is at least the plain maximum, over every batch of the decode candidate, of ``pair_bound`` with the
    prefill worker's rate at most what it feeds at that batch's round in a pool of at least ``workers`` (with the
    least transfer of a deployment on that many prefill workers and one decode worker) and the decode worker's at
    most what that batch sustains (its capacity at its own batch), and at most that times 1 + the slack (with no
    slack, exactly it), on every pair of each case, for groups of 1, 2 and 4 workers. The maximum is below the one
    of the group before on some pair."""
    monkeypatch.setattr(walk_module, "GROUP_SLACK", slack)
    pools = pools_for(case)
    floor = ChoiceFloor(pools)
    keys = PairKeys(pools, floor)
    falls = False
    for i, p in enumerate(pools.prefill):
        for k, d in enumerate(pools.decode):
            last = None
            for workers in (1, 2, 4):
                transfer_ns = floor.least_transfer_ns(i, k, workers * p.gpus + d.gpus)
                best = Fraction(0)
                for batch in range(1, d.batch + 1):
                    round_ns, most_units = (d.round_ns, d.capacity_units) if batch == d.batch else floor.band(
                        k, batch, batch + 1)
                    feed = min(p.capacity_units, floor.feed_cap_units(i, round_ns, batch > 1, workers, transfer_ns))
                    if feed > 0:
                        best = max(best, pair_bound(Fraction(feed, p.gpus), Fraction(most_units, d.gpus)))
                assert best <= Fraction(*keys.group_terms(i, k, workers)) <= best * (1 + slack), (i, k, workers)
                falls |= last is not None and best < last
                last = best
    assert falls


class _Bands:
    """A TTFT floor of given bands (round, most rate units) and feed caps by round, for ``PairKeys``."""

    active = True

    def __init__(self, bands, feeds):
        self.bands, self.feeds = bands, feeds

    def decode_bands(self, k, fine=False):
        return self.bands

    def feed_cap_units(self, i, round_ns, in_flight_two=False, workers=1, transfer_ns=0):
        return self.feeds[round_ns]


@pytest.mark.parametrize(("feeds", "expected"), [
    # the top band feeds nothing; the best is band 1's: 90 x 50 / (50 + 90)
    ({1: 100, 2: 90, 3: 80, 4: 0}, Fraction(4500, 140)),
    # the rate dips at band 2: band 3 gives 100 x 40 / 140, band 2 cannot beat it, band 1 does (100 x 50 / 150)
    ({1: 100, 2: 100, 3: 100, 4: 100}, Fraction(100, 3)),
])
def test_the_held_bound_reads_past_a_band_that_feeds_nothing_or_dips(feeds, expected) -> None:
    """``PairKeys.held`` from the largest batch down, by hand: a prefill worker of 100 rate units on one GPU, a
    decode worker on one, bands of most 5, 50, 10 and 40 rate units (a dip, which real bands rarely show); each
    band's bound is ``feed x most / (feed + most)``. Stopping at a band that feeds nothing, or on a band's own rate
    rather than the most of it and every band below, returns less."""
    pools = SimpleNamespace(prefill=[SimpleNamespace(capacity_units=100, gpus=1)],
                            decode=[SimpleNamespace(capacity_units=60, gpus=1)],
                            problem=SimpleNamespace(workload=SimpleNamespace(osl=10)))
    floor = _Bands([(1, 5), (2, 50), (3, 10), (4, 40)], feeds)
    assert PairKeys(pools, floor).held(0, 0) == expected


@pytest.mark.parametrize("case", SGL_TIGHT[1:] + [SMALL[1]], ids=case_id)
@pytest.mark.parametrize("fine", [False, True])
def test_each_decode_band_bounds_what_a_worker_sustains_at_every_batch_in_it(case, fine) -> None:
    """``ChoiceFloor.decode_bands``, held to every batch (brute force over ``decode_step``): the bands start at
    batch 1 and each power of two below the candidate's batch (``fine``: at every rung), then the batch alone; at
    every batch of a band the round is at least the band's and a worker's requests per second (at most the
    candidate's capacity, as every deployment's rate is, ``Pools.rate``) at most the band's rate."""
    pools = pools_for(case)
    floor = ChoiceFloor(pools)
    osl = pools.problem.workload.osl
    for k, d in enumerate(pools.decode):
        bands = floor.decode_bands(k, fine)
        if fine:  # every rung: 1 to 16, then each a sixteenth more, and the batch itself
            starts = rungs(d.batch)
        else:
            starts = [b for b in (1 << n for n in range(d.batch.bit_length())) if b < d.batch] + [d.batch]
        assert len(bands) == len(starts)
        ends = [*starts[1:], d.batch + 1]
        for (round_ns, most_units), lo, hi in zip(bands, starts, ends, strict=True):
            for b in range(lo, hi):
                step = decode_step(pools.problem, d.layout, b, pools.profile)
                assert step.round_ns >= round_ns, (k, b)
                # no deployment's rate passes y times the capacity at the candidate's batch (Pools.rate)
                assert min(capacity_units(b, step.round_ns, osl), d.capacity_units) <= most_units, (k, b)


def test_the_model_s_feed_caps_keep_every_deployment_at_what_it_carries() -> None:
    """``PoolModel.cap_feed`` forbids nothing the exact judgement accepts: each deployment, pinned in the model at
    the rate units it carries within every rule, stays feasible (every fifth, for time), on the case whose caps
    bind (the test above), where it posts a row per prefill candidate."""
    pools = pools_for(SGL_TIGHT[1])
    floor = ChoiceFloor(pools)
    bare = len(PoolModel(pools).cp.proto.constraints)
    for c in [c for c in brute.choices(pools) if pools.rate(c) > 0][::5]:
        served = pools.served(c)
        if served is None:
            continue
        m = PoolModel(pools)
        m.cap_feed(floor)
        assert len(m.cp.proto.constraints) == bare + len(pools.prefill)
        cp = m.cp.clone()
        for var, value in ((m.p[c.prefill], 1), (m.d[c.decode], 1), (m.x, c.x), (m.y, c.y), (m.rate, served.units)):
            cp.add(var == value)
        assert new_solver(None).solve(cp) in (cp_model.OPTIMAL, cp_model.FEASIBLE), c


def test_heap_entries_order_as_their_exact_keys_then_kind_and_what() -> None:
    """The walk's heap entries (a float, then integer terms compared only where floats tie): sorted, they come in
    the order of the exact keys, highest first, then kind and what, also for ratios whose floats tie ((10^17 + 1)
    / 3 and 10^17 / 3) and equal ratios of unequal terms (1/2, 2/4, 3/6)."""
    rng = random.Random(20261207)
    terms = [(rng.randrange(0, 50), rng.randrange(1, 50)) for _ in range(400)]
    terms += [(10**17 + 1, 3), (10**17, 3), (1, 2), (2, 4), (3, 6), (0, 5)]
    entries = [(n, m, rng.randrange(2), (rng.randrange(5),)) for n, m in terms]
    by_heap = sorted(entries, key=lambda e: walk_module._entry(*e))
    exact = sorted(entries, key=lambda e: (-Fraction(e[0], e[1]), e[2], e[3]))
    assert [(Fraction(n, m), kind, what) for n, m, kind, what in by_heap] == \
        [(Fraction(n, m), kind, what) for n, m, kind, what in exact]
    assert (10**17 + 1) / 3 == 10**17 / 3  # their floats tie: the terms decide


@pytest.mark.parametrize("case", SGL_TIGHT + [SMALL[1]], ids=case_id)
def test_the_rung_bands_of_a_group_are_bounded_higher_the_larger_their_batches(case) -> None:
    """The premise of the lazy order of ``PairKeys._fine_terms``: the rung bands under one power of two (a group,
    ``PairKeys._groups``) are bounded at one round, so within a group a band's bound is at least the one before
    it, on every pair of each case; and the groups cover every rung band once, in order."""
    pools = pools_for(case)
    floor = ChoiceFloor(pools)
    keys = PairKeys(pools, floor)
    for k in range(len(pools.decode)):
        spans = floor.band_spans(k, fine=True)
        groups = keys._groups(k)
        assert [band for first, end in groups for band in range(first, end)] == list(range(len(spans)))
        for i in range(len(pools.prefill)):
            for first, end in groups:
                bounds = [keys._bound_at(i, k, spans, band, first) for band in range(first, end)]
                ratios = [Fraction(0) if b is None else Fraction(b[1], b[2]) for b in bounds]
                assert ratios == sorted(ratios), (i, k, first)
