"""The decode batch caps a TTFT limit adds to the disaggregated candidates (``workers.capped_workers``): what
they are, that they change no ``--rate`` answer, and that they reach deployments the largest batches could not
(the search on them is held to brute force in test_search and test_prune)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from shardplan.solver.cost.disagg import resolve_profile
from shardplan.solver.disagg import brute
from shardplan.solver.disagg.search import fewest_gpus, max_throughput, target_units
from shardplan.solver.disagg.workers import (
    DecodeSearch,
    batch_caps,
    capacity_units,
    capped_reaching,
    capped_workers,
    decode_searches,
)
from shardplan.solver.optimise import Deadline
from tests.factory import problem
from tests.unit.solver.disagg.test_search import SGL_TIGHT, SMALL, case_id, pools_for


def test_the_caps_are_the_powers_of_two_below_the_batch_largest_first() -> None:
    assert batch_caps(198) == [128, 64, 32, 16, 8, 4, 2, 1]
    assert batch_caps(128) == [64, 32, 16, 8, 4, 2, 1]
    assert batch_caps(2) == [1]
    assert batch_caps(1) == []


def test_without_a_ttft_limit_no_cap_is_offered() -> None:
    case = SMALL[2]  # no limits
    assert case.get("ttft_ms") is None
    assert len(pools_for(case).decode) == len(pools_for(case, caps=False).decode)


@pytest.mark.parametrize("case", [SMALL[1], SGL_TIGHT[0]], ids=case_id)
def test_the_capped_candidates_follow_every_uncapped_one_each_below_its_layout_s_batch(case) -> None:
    plain, capped = pools_for(case, caps=False).decode, pools_for(case).decode
    assert capped[:len(plain)] == plain
    largest = {w.layout: w.batch for w in plain}
    extra = capped[len(plain):]
    assert len(extra) == sum(len(batch_caps(b)) for b in largest.values())
    assert all(w.batch < largest[w.layout] for w in extra)


@pytest.mark.parametrize("case", [SMALL[1], SGL_TIGHT[0], SGL_TIGHT[1]], ids=case_id)
def test_the_capped_workers_a_floor_keeps_are_read_without_pricing_the_others(case, monkeypatch) -> None:
    """``capped_reaching`` with a floor on rate units per GPU (the median of the case's capped workers, and 0)
    returns the capped workers at or above it in ``capped_workers``' order, and prices exactly the caps whose
    batch at the round of batch 1 reaches it (fewer than all at the median)."""
    p = problem(**case, objective="throughput")
    searches = decode_searches(p, resolve_profile(p))
    every = capped_workers(searches)
    ratios = sorted(Fraction(w.capacity_units, w.gpus) for w in every)
    priced: list[tuple[object, int]] = []
    worker = DecodeSearch.worker

    def pricing(self, batch=None):
        priced.append((self.layout, batch))
        return worker(self, batch)

    monkeypatch.setattr(DecodeSearch, "worker", pricing)
    for floor in (ratios[len(ratios) // 2], Fraction(0)):
        priced.clear()
        kept = capped_reaching(searches, lambda w, floor=floor: Fraction(w.capacity_units, w.gpus) >= floor)
        assert kept == [w for w in every if Fraction(w.capacity_units, w.gpus) >= floor]
        bounded = [(s.layout, cap) for s in searches for cap in batch_caps(s.finish())
                   if Fraction(capacity_units(cap, s.round_ns(1), p.workload.osl), s.gpus) >= floor]
        assert priced == bounded
        assert len(priced) < len(every) if floor else len(priced) == len(every)


RATES = [(c, r) for c in [SMALL[0], SMALL[1], SGL_TIGHT[0], SGL_TIGHT[1]] for r in (1.0, 12.5)]


@pytest.mark.parametrize(("case", "rate_rps"), RATES, ids=lambda v: case_id(v) if isinstance(v, dict) else f"{v:g}")
def test_the_caps_change_no_rate_s_answer(case, rate_rps) -> None:
    """For ``--rate`` a pool runs at the batch the rate needs whatever its cap, and the uncapped twin of a
    capped deployment carries more (the tie's first key): so the fewest-GPUs deployment is the same with the
    caps as without them (the CLI's --rate leaves them out)."""
    plain, capped = pools_for(case, caps=False), pools_for(case)
    a, b = fewest_gpus(plain, rate_rps, Deadline(None)), fewest_gpus(capped, rate_rps, Deadline(None))
    assert (a.plan is None) == (b.plan is None)
    if a.choice is not None and b.choice is not None:
        assert plain.decode[a.choice.decode] == capped.decode[b.choice.decode]
        assert (plain.prefill[a.choice.prefill], a.choice.x, a.choice.y) == (
            capped.prefill[b.choice.prefill], b.choice.x, b.choice.y)
    best = brute.fewest_gpus(capped, target_units(rate_rps))
    assert (best is None) == (b.plan is None)


def test_below_its_full_rate_a_deployment_keeps_a_ttft_none_keeps_at_it() -> None:
    """Llama-3.1-8B on 4xH200 under SGLang at TTFT 500 ms: at every decode worker's largest batch the requests
    in flight that carry a deployment's full rate queue past the limit (no deployment is accepted there), while
    a capped decode worker carries fewer and keeps it at its full rate. Held below its full rate
    (``Pools.served``), an uncapped deployment keeps it too, at fewer requests in flight than its full rate
    needs, and the search returns brute force's best over both."""
    case = SGL_TIGHT[2]
    plain = pools_for(case, caps=False)
    assert all(plain.feasible_plan(c) is None for c in brute.choices(plain) if plain.rate(c) > 0)
    pools = pools_for(case)
    capped = [c for c in brute.choices(pools) if c.decode >= len(plain.decode) and pools.rate(c) > 0]
    assert any(pools.feasible_plan(c) is not None for c in capped)
    best = brute.best_throughput(pools)
    assert best is not None
    found = max_throughput(pools, Deadline(None))
    assert found.plan is not None and found.proven and found.choice == best[0]
    served = pools.served(found.choice)
    assert served is not None and served.units < pools.rate(found.choice)
    assert served.plan.layout.concurrency < pools.concurrency_for(found.choice, pools.rate(found.choice))
    assert found.plan.prediction.bottleneck == "concurrency"
    assert found.plan.prediction.metrics.ttft_ms <= case["ttft_ms"]
