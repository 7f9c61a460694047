"""The decided batch is an integer (issue 12): the ranges the search prices, the bound they rely on,
and the batch a plan runs against evaluate() of every integer batch of its layout."""

from __future__ import annotations

import pytest

from shardplan.rules.catalog import check_plan, errors_of
from shardplan.solver.cost.evaluate import evaluate, fits, max_batch, prefill_chunk, resolve_profile
from shardplan.solver.optimise import solve
from shardplan.solver.oracle import Oracle
from shardplan.solver.space import BatchOption, SearchSpace
from shardplan.solver.tables import build_tables
from tests.factory import problem


def _space(p, **kw):
    return SearchSpace(p, resolve_profile(p), **kw)


@pytest.mark.parametrize("model, cluster", [("llama-3.1-8b", "4xH100"), ("qwen3-30b-a3b", "8xH100")])
def test_ranges_cover_every_integer_batch_once(model, cluster):
    p = problem(model=model, cluster=cluster, objective="throughput", max_batch=300)
    space, profile = _space(p, refined={}), resolve_profile(p)
    for shape in space.shapes:
        options = space.batch_options(shape)
        covered = [q for opt in options for q in range(opt.q, opt.q_hi + 1)]
        assert covered == list(range(1, 301)), shape
        for opt in options:
            assert opt.micro == shape.attn_dp * opt.q
            # One prefill chunk per range: the range's times are priced at its smallest q.
            ends = (prefill_chunk(p, profile, opt.micro), prefill_chunk(p, profile, shape.attn_dp * opt.q_hi))
            assert ends[0] == ends[1], (shape, opt)


def test_grid_space_has_only_exact_points():
    p = problem(model="llama-3.1-8b", cluster="4xH100", objective="throughput", max_batch=300)
    for shape in _space(p, ranges=False).shapes:
        assert all(opt.exact for opt in _space(p, ranges=False).batch_options(shape))


@pytest.mark.parametrize(
    "model, cluster", [("llama-3.1-8b", "1xH100"), ("llama-3.1-70b", "8xH100"), ("mixtral-8x7b", "8xH100")]
)
def test_a_range_priced_at_its_smallest_q_bounds_every_q_in_it(model, cluster):
    # The search's bound is valid only if a decode step at q is at least the step at the range's
    # smallest q plus the KV slope for the extra sequences (tables.py kv_slope, the -1 for rounding).
    p = problem(model=model, cluster=cluster, objective="throughput", max_batch=512)
    tables = build_tables(p, _space(p))
    for (shape, option), entry in list(tables.time.items()):
        if option.exact:
            continue
        for q in sorted({option.q + 1, (option.q + option.q_hi) // 2, option.q_hi}):
            exact = tables.price(shape, BatchOption.at(shape.attn_dp, q))
            for kind, ns in exact.decode.items():
                assert ns >= entry.decode[kind] - 1 + entry.kv_slope[kind] * (q - option.q), (shape, option, q)
            assert exact.prefill == entry.prefill and exact.chunk == entry.chunk
            assert exact.steps >= entry.steps


@pytest.mark.parametrize(
    "scenario",
    [
        dict(model="llama-3.1-8b", cluster="1xH100"),
        dict(model="llama-3.1-70b", cluster="8xH100", tpot_ms=50.0, isl=4000, osl=500),
        dict(model="mixtral-8x7b", cluster="8xH100", max_batch=128),
    ],
)
def test_pinned_layout_runs_evaluates_best_integer_batch(scenario):
    # Every degree and boundary pinned: solve's batch and throughput are the best evaluate() gives
    # over every integer batch of the layout (pp x attn_dp x q) that fits and keeps the limits.
    free = solve(problem(objective="throughput", **scenario))
    lay = free.layout
    pins = dict(dp=lay.dp, pp=lay.pp, tp=lay.tp, sp=lay.sp, attn_dp=lay.attn_dp, expert_tp=lay.expert_tp)
    p = problem(objective="throughput", stages=lay.stages, **pins, **scenario)
    pinned = solve(p)
    assert pinned.layout.model_copy(update={"batch": 0}) == lay.model_copy(update={"batch": 0})
    wl, step = p.workload, lay.pp * lay.attn_dp
    best_tps, best_batch = 0.0, None
    limit = p.max_batch or resolve_profile(p).max_batch
    for q in range(1, limit // lay.pp + 1):
        at = lay.model_copy(update={"batch": step * q})
        if not fits(p, at):
            break
        m = evaluate(p, at).metrics
        if (wl.tpot_ms is None or m.tpot_ms <= wl.tpot_ms) and (wl.ttft_ms is None or m.ttft_ms <= wl.ttft_ms):
            if m.output_tokens_per_s > best_tps:
                best_tps, best_batch = m.output_tokens_per_s, step * q
    assert pinned.layout.batch == best_batch
    assert pinned.prediction.metrics.output_tokens_per_s == pytest.approx(best_tps, rel=1e-12)
    assert errors_of(check_plan(pinned)) == []


def test_memory_bound_batch_is_not_a_power_of_two():
    # One H100 holds a few hundred sequences of Llama-3.1-8B at ISL 1,024 + OSL 256 (350 under vLLM's
    # 0.9 of memory): the plan runs exactly as many as fit, where the power-of-two grid ran 256.
    p = problem(model="llama-3.1-8b", cluster="1xH100", objective="throughput")
    plan = solve(p)
    assert plan.status == "optimal"
    assert fits(p, plan.layout)
    assert not fits(p, plan.layout.model_copy(update={"batch": plan.layout.batch + 1}))
    assert plan.layout.batch == max_batch(p, plan.layout)
    assert plan.layout.batch & (plan.layout.batch - 1) != 0  # not a power of two


def test_full_batch_limit_is_proven_equal_to_brute_force():
    # Llama-3.1-8B on 4 H100 at the engine's full batch limit (1,024 integer batches per layout): the
    # plan is proven optimal and brute force over every layout and every integer batch agrees.
    p = problem(model="llama-3.1-8b", cluster="4xH100", objective="throughput")
    plan = solve(p)
    best = Oracle(build_tables(p, _space(p))).optimum()
    assert best is not None
    optimum = best.tokens * p.workload.osl * 1e9 / best.e2e_ns
    assert plan.status == "optimal" and plan.bound is None and plan.gap is None
    assert plan.prediction.metrics.output_tokens_per_s == pytest.approx(optimum, rel=1e-12)
    assert errors_of(check_plan(plan)) == []
