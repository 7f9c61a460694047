"""The MoE block's costs as engine fields (benchmarks/accuracy/moe_engine.py): fitted only where the group has MoE
runs, each within its physical range, and given back from runs they made."""

from __future__ import annotations

import pytest

from benchmarks.accuracy.joint import fit_fields
from benchmarks.accuracy.moe_engine import MOE_BOUNDS, at_bound, bounds_for, fields_for
from shardplan.hardware import parse_cluster
from shardplan.hardware.profile import Profile, get_profile
from shardplan.models import get_model
from shardplan.rules.layout import Layout
from shardplan.rules.problem import Objective, Problem, Workload
from shardplan.solver.cost.calibration.engine_fit import ENGINE_FIELDS, ENGINE_LIMITS, EngineRun
from shardplan.solver.cost.evaluate import evaluate


def _run(name: str, batch: int, truth: Profile) -> EngineRun:
    model = get_model(name)
    problem = Problem(model=model, cluster=parse_cluster("1xH100"), workload=Workload(isl=1024, osl=256, batch=batch),
                      objective=Objective.THROUGHPUT, engine="sglang")
    layout = Layout.even(model.num_layers, 1, batch=batch)
    m = evaluate(problem, layout, truth).metrics
    return EngineRun(problem, layout, m.tpot_ms, m.ttft_ms, name, "test")


def _truth(moe_fixed_us: float) -> Profile:
    return get_profile("h100-sxm").model_copy(update={
        **ENGINE_LIMITS["sglang"], "layer_overhead_us": 30.0, "hbm_efficiency": 0.6, "moe_fixed_us": moe_fixed_us})


def test_a_moe_field_is_fitted_only_where_the_group_has_moe_runs():
    truth = _truth(28.35)
    dense = [_run("llama-3.1-8b", 8, truth)]
    moe = [_run("qwen3-30b-a3b", 8, truth)]
    assert fields_for(dense, ("moe_fixed_us",)) == ENGINE_FIELDS
    assert fields_for(dense + moe, ("moe_fixed_us",)) == (*ENGINE_FIELDS, "moe_fixed_us")
    assert fields_for(dense + moe, ()) == ENGINE_FIELDS


def test_the_fixed_cost_is_paid_once_per_moe_layer_of_a_decode_step():
    # Qwen3-30B-A3B: 48 layers, every one a MoE block; on one GPU each pays moe_fixed_us once per decode step,
    # so 70 us more per block is 48 x 70 us = 3.36 ms more per step, whatever the batch.
    for batch in (1, 64):
        run = _run("qwen3-30b-a3b", batch, _truth(0.0))
        steps = [evaluate(run.problem, run.layout, _truth(us)).metrics.decode_step_ms for us in (0.0, 70.0)]
        assert steps[1] - steps[0] == pytest.approx(48 * 70e-3, rel=1e-6)
    dense = _run("llama-3.1-8b", 8, _truth(0.0))
    assert (evaluate(dense.problem, dense.layout, _truth(70.0)).metrics.decode_step_ms
            == evaluate(dense.problem, dense.layout, _truth(0.0)).metrics.decode_step_ms)


def test_the_fit_gives_back_the_moe_fixed_cost_that_made_the_runs():
    # A dense model sets the stream and the per-layer cost; the MoE model's runs then set its blocks' fixed cost.
    pytest.importorskip("scipy")
    truth = _truth(70.0)
    runs = [_run(name, batch, truth) for name in ("llama-3.1-8b", "qwen3-30b-a3b") for batch in (1, 8, 64)]
    fields = fields_for(runs, ("moe_fixed_us",))
    start = truth.model_copy(update={"layer_overhead_us": 50.0, "hbm_efficiency": 0.8, "moe_fixed_us": 28.35})
    fitted = fit_fields(start, fields, bounds_for(fields), runs, [])
    assert fitted.moe_fixed_us == pytest.approx(70.0, rel=0.03)
    assert fitted.layer_overhead_us == pytest.approx(30.0, rel=0.03)
    assert fitted.hbm_efficiency == pytest.approx(0.6, rel=0.02)


def test_the_ranges_and_the_lifted_stream():
    assert bounds_for(("hbm_efficiency", "moe_fixed_us")) == [(0.3, 0.95), MOE_BOUNDS["moe_fixed_us"]]
    assert bounds_for(("hbm_efficiency",), 3.0) == [(0.3, 3.0)]
    # 1 % of the range's width from either end counts as at the bound: 2 us of 200, 1 ns of 100
    assert at_bound("moe_fixed_us", 1.9) and not at_bound("moe_fixed_us", 2.1) and at_bound("moe_fixed_us", 198.5)
    assert at_bound("moe_routed_token_ns", 99.5) and not at_bound("moe_routed_token_ns", 35.48)
