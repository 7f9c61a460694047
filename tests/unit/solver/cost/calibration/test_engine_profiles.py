"""Engine profiles: the engine's fields within their physical ranges, the GPU's hardware fields kept,
and the fit recovering fields it is given data for."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shardplan.hardware import parse_cluster
from shardplan.hardware.profile import Profile, get_profile, list_profiles
from shardplan.models import get_model
from shardplan.rules.layout import Layout
from shardplan.rules.problem import Objective, Problem, Workload
from shardplan.solver.cost.calibration.engine_fit import (
    ENGINE_BOUNDS,
    ENGINE_FIELDS,
    ENGINE_LIMITS,
    EngineRun,
    at_bound,
    decode_floor_ms,
    fit_engine,
    floor_profile,
    kind_weights,
    tpot_errors,
    tpot_floor_ms,
)
from shardplan.solver.cost.calibration.measures import predict
from shardplan.solver.cost.calibration.points import THROUGHPUT, Point
from shardplan.solver.cost.calibration.ttft_fit import TTFT_BOUNDS, TTFT_FIELDS
from shardplan.solver.cost.calibration.ttft_fit import at_bound as ttft_at_bound
from shardplan.solver.cost.evaluate import evaluate
from tests.unit.solver.cost.calibration.known_misses import KNOWN_MISSES

METADATA = {"name", "software", "engine", "default", "engine_default", "source", "fit_rows", "fit_median_abs_error"}
# op_points.csv (and the fused-kernel pass count), not fitted to runs
OP_TERMS = {"kv_stream_efficiency", "mla_stream_efficiency", "attention_fixed_us", "moe_fixed_us",
            "moe_routed_token_ns", "full_width_passes"}
GEMM_CURVE = {"gemm_efficiency", "gemm_half_tokens", "low_precision_gemm_ratio"}  # fit.gemm_terms
MEASURED_GEMM_GPUS = ("H100-SXM", "H200-SXM")  # op_points.csv's GEMMs

ENGINE_PROFILES = [p for p in list_profiles() if p.engine_default]


def test_there_are_engine_profiles_for_every_engine():
    assert {p.engine for p in ENGINE_PROFILES} == {"vllm", "sglang", "trtllm"}


@pytest.mark.parametrize("profile", ENGINE_PROFILES, ids=lambda p: p.name)
def test_engine_fields_are_inside_their_physical_range(profile: Profile):
    for field in ENGINE_FIELDS:
        lo, hi = ENGINE_BOUNDS[field]
        value = getattr(profile, field)
        assert lo <= value <= hi, (field, value)
        assert at_bound(field, value) == ((profile.name, field) in KNOWN_MISSES), (field, value)


@pytest.mark.parametrize("profile", ENGINE_PROFILES, ids=lambda p: p.name)
def test_ttft_fields_are_inside_their_physical_range_and_shared_by_the_engine(profile: Profile):
    for field in TTFT_FIELDS:
        lo, hi = TTFT_BOUNDS[field]
        value = getattr(profile, field)
        assert lo <= value <= hi and not ttft_at_bound(field, value), (field, value)
        # one pair per engine: the serving stack's, not the GPU's
        assert {getattr(p, field) for p in ENGINE_PROFILES if p.engine == profile.engine} == {value}


@pytest.mark.parametrize("profile", ENGINE_PROFILES, ids=lambda p: p.name)
def test_engine_profiles_keep_the_gpu_hardware_fields(profile: Profile):
    base = next(p for p in list_profiles() if p.default and p.gpu == profile.gpu)
    own = set(ENGINE_FIELDS) | set(TTFT_FIELDS) | set(ENGINE_LIMITS[profile.engine]) | METADATA | OP_TERMS
    if profile.gpu in MEASURED_GEMM_GPUS:
        own |= GEMM_CURVE
        # the GPU's own measured GEMM curve (op_points.csv, M >= 1,024: 0.80-0.82 of the 16-bit peak, FP8 at
        # 0.77-0.80 of that), not the table fit's gemm_efficiency
        assert 0.79 <= profile.gemm_efficiency <= 0.82 and 0.77 <= profile.low_precision_gemm_ratio <= 0.80
    for field in Profile.model_fields:
        if field not in own:
            assert getattr(profile, field) == getattr(base, field), field
    for field, value in ENGINE_LIMITS[profile.engine].items():
        assert getattr(profile, field) == value
    # The operator terms sit inside what op_points.csv measured: KV streams of 0.60-0.75 of HBM peak past a
    # fixed ~16 us per attention kernel, a MoE block's fixed cost of tens of microseconds; the FP8 weight-stream
    # ratio of bare GEMMs is not applied (the engines fuse the activation quantisation it includes).
    assert profile.kv_stream_efficiency is not None and 0.59 <= profile.kv_stream_efficiency <= 0.76
    # MLA's latent cache: FlashMLA's 0.896 of peak on H100's memory, the same ratio to the KV stream elsewhere
    assert profile.mla_stream_efficiency == pytest.approx(profile.kv_stream_efficiency * 0.8955 / 0.7521, abs=2e-4)
    assert 15 <= profile.attention_fixed_us <= 17
    assert profile.full_width_passes == 8 and profile.low_precision_stream_ratio is None
    assert 0 < profile.moe_fixed_us < 100 and 0 < profile.moe_routed_token_ns < 1000


def test_the_fit_recovers_the_fields_that_made_the_measurements():
    pytest.importorskip("scipy")
    base = get_profile("h100-sxm")
    truth = base.model_copy(update={**ENGINE_LIMITS["sglang"], "layer_overhead_us": 30.0, "hbm_efficiency": 0.6})
    runs = []
    for name, tp in (("llama-3.1-8b", 1), ("llama-3.1-70b", 4)):
        model = get_model(name)
        for batch in (1, 8, 64):
            problem = Problem(model=model, cluster=parse_cluster(f"{tp}xH100"),
                              workload=Workload(isl=1024, osl=256, batch=batch), objective=Objective.THROUGHPUT,
                              engine="sglang")
            layout = Layout.even(model.num_layers, 1, tp=tp, batch=batch)
            m = evaluate(problem, layout, truth).metrics
            runs.append(EngineRun(problem, layout, m.tpot_ms, m.ttft_ms, name, "test"))
    fitted = fit_engine(base, "sglang", runs, "synthetic runs").profile
    assert fitted.layer_overhead_us == pytest.approx(30.0, rel=0.02)
    assert fitted.hbm_efficiency == pytest.approx(0.6, rel=0.02)
    assert fitted.name == "h100-sxm-sglang" and fitted.engine_default and fitted.fit_rows == 6


def _one_gpu_llama_8b(batch: int, engine: str = "vllm") -> tuple[Problem, Layout]:
    model = get_model("llama-3.1-8b")
    problem = Problem(model=model, cluster=parse_cluster("1xH100"), workload=Workload(isl=1, osl=2, batch=batch),
                      objective=Objective.THROUGHPUT, engine=engine)
    return problem, Layout.even(model.num_layers, 1, batch=batch)


def test_the_decode_floor_of_one_sequence_is_its_weights_at_hbm_peak():
    # Llama-3.1-8B from its config: 32 layers of q, o 4096 x 4096, k, v 4096 x 1024 and a 3 x 4096 x 14336 FFN,
    # plus a 128256 x 4096 LM head: 7.505e9 weights, 15.01 GB in BF16, read once per step at 3.35 TB/s.
    per_layer = 4096 * (4096 + 1024 + 1024 + 4096) + 3 * 4096 * 14336
    weight_bytes = 2 * (32 * per_layer + 128256 * 4096)
    problem, layout = _one_gpu_llama_8b(batch=1)
    assert decode_floor_ms(problem, layout) == pytest.approx(weight_bytes / 3.35e12 * 1e3, rel=0.01)


@pytest.mark.parametrize("profile", ENGINE_PROFILES, ids=lambda p: p.name)
def test_no_profile_prices_a_decode_step_below_the_floor(profile: Profile):
    problem, layout = _one_gpu_llama_8b(batch=64, engine=profile.engine)
    problem = problem.model_copy(update={"cluster": parse_cluster(f"1x{profile.gpu}")})
    floor = evaluate(problem, layout, floor_profile(profile)).metrics.decode_step_ms
    assert 0 < floor < evaluate(problem, layout, profile).metrics.decode_step_ms
    # a floor is a floor of any profile: the same physical limits whatever the fitted fields were
    slower = profile.model_copy(update={"hbm_efficiency": 0.4, "layer_overhead_us": 150.0})
    assert evaluate(problem, layout, floor_profile(slower)).metrics.decode_step_ms == pytest.approx(floor)


@pytest.mark.parametrize(("runs", "rows"), [(135, 102), (170, 37), (10, 1)])
def test_runs_and_table_rows_weigh_half_each_in_the_joint_fit(runs: int, rows: int):
    run_weight, row_weight = kind_weights(runs, rows)
    # a residual's weight enters squared: each kind's total is half of all the residuals together
    assert runs * run_weight**2 == pytest.approx((runs + rows) / 2)
    assert rows * row_weight**2 == pytest.approx((runs + rows) / 2)
    assert kind_weights(runs, 0) == (1.0, 0.0)  # no table rows: the runs-only fit, every run weighing 1


def _table_point(model_name: str, tp: int, isl: int, osl: int, truth: Profile) -> Point:
    """A max-throughput row of 8,192 sequences' steady state whose measured value is what ``truth`` predicts."""
    model = get_model(model_name)
    problem = Problem(model=model, cluster=parse_cluster(f"{tp}xH100"), workload=Workload(isl=isl, osl=osl, batch=2048),
                      objective=Objective.THROUGHPUT, engine="trtllm")
    layout = Layout.even(model.num_layers, 1, tp=tp, batch=2048)
    unpriced = Point(row_id="1", source="synthetic", metric="output_tokens_per_s_total", value=1.0, kind=THROUGHPUT,
                     group=None, gpu="H100-SXM", software="trtllm", num_gpus=tp, problem=problem, layout=layout)
    return replace(unpriced, value=predict(unpriced, truth).value)


def test_the_joint_fit_recovers_the_fields_from_runs_and_table_rows_together():
    # Runs of one model at batches where its decode step only reads weights fix a line of (layer overhead, weight
    # stream) pairs, not a point: every pair on it prices them alike. Table rows of a model with another weight
    # per layer (Llama-3.1-70B at TP8: ~0.22 GB per layer and GPU in BF16, Llama-3.1-8B at TP1 ~0.47 GB) cross that
    # line. Made by one profile, both kinds together give its fields back; the runs alone do not.
    pytest.importorskip("scipy")
    base = get_profile("h100-sxm")
    truth = base.model_copy(update={**ENGINE_LIMITS["trtllm"], "layer_overhead_us": 25.0, "hbm_efficiency": 0.7})
    runs = []
    for batch in (1, 16):
        problem, layout = _one_gpu_llama_8b(batch=batch, engine="trtllm")
        m = evaluate(problem, layout, truth).metrics
        runs.append(EngineRun(problem, layout, m.tpot_ms, m.ttft_ms, "llama-3.1-8b", "test"))
    rows = [_table_point("llama-3.1-70b", 8, isl, osl, truth) for isl, osl in ((128, 2048), (2048, 128), (500, 2000))]
    fitted = fit_engine(base, "trtllm", runs, "synthetic runs", table_points=rows)
    assert fitted.profile.layer_overhead_us == pytest.approx(25.0, rel=0.03)
    assert fitted.profile.hbm_efficiency == pytest.approx(0.7, rel=0.03)
    assert fitted.table_rows == 3 and fitted.table_median_abs_error < 0.01
    assert "3 max-throughput rows of synthetic" in fitted.profile.source
    runs_only = fit_engine(base, "trtllm", runs, "synthetic runs").profile
    assert abs(runs_only.layer_overhead_us - 25.0) > 5.0 and max(abs(e) for e in tpot_errors(runs, runs_only)) < 0.01


def test_the_tpot_floor_adds_the_other_prompts_flops_at_peak():
    # Llama-3.1-8B on one H100 (989 TFLOP/s BF16 dense), 64 requests of 1,000 + 100 tokens in a closed loop: while
    # one request makes a token, the other 63 prefill 63 / 100 prompts of 1,000 tokens between them. Each prompt
    # token is 2 FLOPs per weight of the 32 layers (no LM head: only the last token's logits), and causal attention
    # 4 FLOPs per key of d_model 4,096 for the 1,000 x 1,000 / 2 query-key pairs in each layer.
    model = get_model("llama-3.1-8b")
    per_layer = 4096 * (4096 + 1024 + 1024 + 4096) + 3 * 4096 * 14336
    prompt_flops = 1000 * 2 * 32 * per_layer + 4 * 4096 * 1000 * 1000 / 2 * 32
    floors = {}
    for batch in (1, 64):
        workload = Workload(isl=1000, osl=100, batch=batch)
        problem = Problem(model=model, cluster=parse_cluster("1xH100"), workload=workload,
                          objective=Objective.THROUGHPUT, engine="vllm")
        layout = Layout.even(model.num_layers, 1, batch=batch)
        floors[batch] = tpot_floor_ms(problem, layout) - decode_floor_ms(problem, layout)
    assert floors[1] == 0.0  # one request in flight: nothing else prefills
    assert floors[64] == pytest.approx(63 / 100 * prompt_flops / 989e12 * 1e3, rel=0.01)
