"""The integer-batch branch and bound against plain enumeration: its pieces and its answer."""

from __future__ import annotations

import itertools
import random

import pytest

from shardplan.solver.batch_search import _least_slowest, best_integer_batch, tokens_per_s
from shardplan.solver.cost.evaluate import evaluate, resolve_profile
from shardplan.solver.oracle import Oracle
from shardplan.solver.space import BatchOption, SearchSpace
from shardplan.solver.tables import build_tables
from tests.factory import problem


def _splits(n: int, parts: int):
    """Every way to cut n items, in order, into ``parts`` groups (empty groups allowed)."""
    for cuts in itertools.combinations_with_replacement(range(n + 1), parts - 1):
        yield (0, *cuts, n)


@pytest.mark.parametrize("seed", range(40))
def test_least_slowest_is_the_min_max_over_every_split(seed):
    rng = random.Random(seed)
    items = [rng.randint(1, 50) for _ in range(rng.randint(1, 7))]
    parts, first, last = rng.randint(1, 4), rng.randint(0, 30), rng.randint(0, 30)
    best = None
    for b in _splits(len(items), parts):
        loads = [sum(items[b[s]:b[s + 1]]) for s in range(parts)]
        loads[0] += first
        loads[-1] += last
        best = max(loads) if best is None else min(best, max(loads))
    assert _least_slowest(items, parts, first, last) == best


def _oracle(p, lazy=False):
    return Oracle(build_tables(p, SearchSpace(p, resolve_profile(p), ranges=not lazy), lazy=lazy))


def test_split_front_matches_every_split_scored_by_stage_cost():
    p = problem(model="llama-3.1-8b", cluster="4xH100", objective="throughput", max_batch=64)
    oracle = _oracle(p)
    o = next(s for s in oracle.shapes() if s.tp == 1)
    L = p.model.num_layers
    for S, q in ((2, 3), (3, 17)):
        opt = BatchOption.at(o.attn_dp, q)
        points = []
        for cuts in itertools.combinations(range(1, L), S - 1):
            b = (0, *cuts, L)
            costs = [oracle.stage_cost(o, opt, S, s, b[s], b[s + 1]) for s in range(S)]
            if all(mem <= oracle.t.limit_bytes for _, _, mem in costs):
                points.append((max(d for d, _, _ in costs), max(p_ for _, p_, _ in costs), b))
        pareto = sorted({(d, pp) for d, pp, _ in points if not any(
            (d2 <= d and p2 <= pp) and (d2, p2) != (d, pp) for d2, p2, _ in points)})
        assert sorted((d, pp) for d, pp, _ in oracle.fronts(o, opt, S)) == pareto


SCENARIOS = [
    dict(model="llama-3.1-8b", cluster="2xH100", max_batch=200),
    dict(model="llama-3.1-8b", cluster="4xH100", max_batch=160, tpot_ms=12.0),
    dict(model="llama-3.1-8b", cluster="4xH100", max_batch=160, ttft_ms=150.0),
    dict(model="llama-3.1-70b", cluster="8xH100", max_batch=100, isl=4000, osl=500, tpot_ms=50.0),
    dict(model="llama-3.1-70b", cluster="8xH100", max_batch=90, pp=2),
    dict(model="mixtral-8x7b", cluster="4xH100", max_batch=64, tpot_ms=30.0),
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: "-".join(map(str, s.values())))
def test_branch_and_bound_equals_brute_force(scenario):
    # Brute force: every layout at every integer batch (the oracle's exhaustive enumeration).
    p = problem(objective="throughput", **scenario)
    truth = _oracle(p).optimum()
    found = best_integer_batch(_oracle(p, lazy=True))
    assert found.open_bound is None  # ran to the end: proven
    assert truth is not None and found.best is not None
    assert found.best.tokens * truth.e2e_ns == truth.tokens * found.best.e2e_ns


def test_cut_short_it_keeps_a_bound_above_the_optimum():
    p = problem(model="llama-3.1-70b", cluster="8xH100", objective="throughput", max_batch=100)
    truth = _oracle(p).optimum()
    assert truth is not None
    calls = iter(range(10**6))
    found = best_integer_batch(_oracle(p, lazy=True), passed=lambda: next(calls) >= 5)
    assert found.open_bound is not None
    optimum = truth.tokens * p.workload.osl * 1e9 / truth.e2e_ns
    assert tokens_per_s(found.open_bound, p.workload.osl) >= optimum * (1 - 1e-12)
    if found.best is not None:
        assert not found.best.better_than(truth, p.objective)


@pytest.mark.parametrize("scenario, uneven", [
    (dict(model="llama-3.1-70b", cluster="8xH100", max_batch=63, pp=2, tp=4), 63),
    (dict(model="mixtral-8x7b", cluster="8xH100", max_batch=21, tpot_ms=40.0, pp=2, attn_dp=4), 84),
], ids=["pp2-limit63", "pp2-attn_dp4-tpot40"])
def test_the_best_batch_need_not_be_a_multiple_of_stages_x_groups(scenario, uneven):
    # Both the brute force and the search find the batch evaluate finds best (matrix.py PROBES), which
    # no pp x attn_dp multiple reaches: the search space is every integer batch.
    p = problem(objective="throughput", dp=1, **scenario)
    truth = _oracle(p).optimum()
    found = best_integer_batch(_oracle(p, lazy=True))
    assert truth is not None and found.best is not None and found.open_bound is None
    assert truth.layout.batch == found.best.layout.batch == uneven
    assert found.best.tokens * truth.e2e_ns == truth.tokens * found.best.e2e_ns


@pytest.mark.parametrize("scenario", [
    dict(model="llama-3.1-8b", cluster="4xH100", max_batch=11, pp=3, tp=1, sp=1, stages="0:10,10:21,21:32"),
    dict(model="mixtral-8x7b", cluster="8xH100", max_batch=5, pp=2, tp=1, sp=1, attn_dp=4, stages="0:16,16:32"),
], ids=["pp3", "pp2-attn_dp4"])
def test_the_oracle_prices_every_integer_batch_as_evaluate_does(scenario):
    # Every batch 1 .. attn_dp x the limit is in the brute force's space, each priced to the ns as
    # evaluate prices that batch (microbatches of ceil(B / min(S, B)), KV of ceil(B / attn_dp)).
    p = problem(objective="throughput", dp=1, **scenario)
    oracle = _oracle(p)
    (o,) = list(oracle.shapes())
    S = p.pins.pp
    options = list(oracle.options(o, S))
    assert [opt.batch for opt in options] == list(range(1, o.attn_dp * p.max_batch + 1))
    bounds = tuple(a for a, _ in p.pins.stages) + (p.pins.stages[-1][1],)
    for opt in options:
        (dmax, pmax, _), = oracle._score_fixed(o, opt, S, bounds)
        cand, _ = oracle.evaluate_combo(o, opt, S, 1, bounds, dmax, pmax)
        truth = evaluate(p, cand.layout).metrics
        assert cand.e2e_ns == round(truth.e2e_ms * 1e6), opt.batch
