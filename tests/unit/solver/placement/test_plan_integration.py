"""The expert placement as part of a plan: priced by the cost model, checked by EXP-001..003,
exported with --experts-out, and its inputs (--load-profile, --zipf, --redundant-slots) validated."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from shardplan.models.derived import layer_bytes
from shardplan.models.errors import InfeasibleError, SpecError
from shardplan.models.load_profile import zipf_profile
from shardplan.rules.catalog import ALL_RULES, CATALOG, check_plan, errors_of, get_rule
from shardplan.rules.expert_placement import LayerPlacement
from shardplan.rules.experts import check_plan_placement
from shardplan.rules.plan import Plan
from shardplan.rules.problem import Problem
from shardplan.solver.cli import main
from shardplan.solver.cli.inputs import layout_from_pins
from shardplan.solver.cost.evaluate import evaluate
from shardplan.solver.optimise import solve
from shardplan.solver.placement import greedy_placement
from shardplan.solver.placement.plan import place_and_price, place_experts_in_budget, place_for_layout
from tests.factory import problem

EXP = ("EXP-001", "EXP-002", "EXP-003")


# --- acceptance (3): the predicted MoE time moves with the placement ------------------------------

def test_greedy_and_solver_placements_give_tpot_in_the_order_of_their_max_loads():
    # One layout, decode compute-bound enough for expert load to show: DeepSeek-V3, 16 EP ranks with
    # one redundant slot each, 4,096 sequences, Zipf(1.0) routing.
    p = problem(model="deepseek-v3", cluster="2x8xH200", attn_dp=16, batch=4096, zipf=1.0, redundant_slots=1)
    layout = layout_from_pins(p)
    greedy_layout, greedy, greedy_experts = place_and_price(p, layout, greedy_placement)
    ours_layout, ours, ours_experts = place_and_price(p, layout, place_experts_in_budget)
    g_max, o_max = max(greedy_layout.moe_load_factor), max(ours_layout.moe_load_factor)
    assert o_max == pytest.approx(1.0, abs=1e-9)  # one spare slot per rank: ours balances exactly
    assert g_max > 1.005
    assert ours.metrics.tpot_ms < greedy.metrics.tpot_ms
    assert ours.metrics.ttft_ms < greedy.metrics.ttft_ms
    # Layer by layer the placement with the lower max load is never priced slower.
    assert all(o <= g for o, g in zip(ours_layout.moe_load_factor, greedy_layout.moe_load_factor, strict=True))
    # The priced layout carries the factors, so evaluate() alone reproduces each prediction.
    assert evaluate(p, greedy_layout) == greedy and evaluate(p, ours_layout) == ours
    assert greedy_experts.method == "greedy" and ours_experts.method == "place_experts"


def test_each_moe_layer_is_priced_at_its_own_factor():
    p = problem(model="qwen3-30b-a3b", cluster="8xH100", attn_dp=4, pp=2, batch=1024)
    layout = layout_from_pins(p)
    moe_layers = p.model.moe.layers
    flat = evaluate(p, layout)
    assert evaluate(p, layout.model_copy(update={"moe_load_factor": (1.0,) * len(moe_layers)})) == flat
    # A factor on one layer of stage 1 changes stage 1 only.
    hot = layout.model_copy(update={"moe_load_factor": tuple(2.0 if i == 30 else 1.0 for i in moe_layers)})
    out = evaluate(p, hot)
    assert out.stages[0] == flat.stages[0]
    assert out.stages[1].prefill_ms > flat.stages[1].prefill_ms
    # Two such layers cost exactly twice the extra of one (integer ns per layer, summed).
    two = layout.model_copy(update={"moe_load_factor": tuple(2.0 if i in (30, 31) else 1.0 for i in moe_layers)})
    extra_one = out.stages[1].prefill_ms - flat.stages[1].prefill_ms
    assert evaluate(p, two).stages[1].prefill_ms - flat.stages[1].prefill_ms == pytest.approx(2 * extra_one, abs=2e-6)
    with pytest.raises(SpecError, match="moe_load_factor"):
        evaluate(p, layout.model_copy(update={"moe_load_factor": (1.0, 1.0)}))
    with pytest.raises(SpecError, match="moe_load_factor"):
        evaluate(p, layout.model_copy(update={"moe_load_factor": (0.5,) * len(moe_layers)}))


def test_redundant_slots_cost_expert_memory():
    base = problem(model="qwen3-30b-a3b", cluster="8xH100", attn_dp=4, batch=64)
    more = problem(model="qwen3-30b-a3b", cluster="8xH100", attn_dp=4, batch=64, redundant_slots=2)
    layout = layout_from_pins(base)
    expert = layer_bytes(base.model, 0).expert
    extra = 2 * expert * base.model.num_moe_layers / 2**30
    got = evaluate(more, layout).memory[0].weights_gib - evaluate(base, layout).memory[0].weights_gib
    assert got == pytest.approx(extra, rel=1e-9)


def test_redundant_copies_are_read_like_experts_at_decode():
    # 256 experts on 16 EP ranks: 16 per rank, 17 with one redundant slot. A decode step of 256
    # sequences gives each rank about 8 tokens per expert, far below what a GEMM needs to leave the
    # weight-read regime, so the routed-expert time grows by the weights read: exactly 17/16.
    from shardplan.hardware import parse_cluster
    from shardplan.hardware.profile import profile_for_gpu
    from shardplan.models import get_model
    from shardplan.solver.cost.operators import CostContext, LayerKind, Phase, Step
    from shardplan.solver.cost.stage import shape_of

    model, cluster = get_model("deepseek-v3"), parse_cluster("2x8xH200")
    shape = shape_of(model, 16, 1, 1, 16, 1)
    step = Step(Phase.DECODE, 256, 1, 2048)
    moe = LayerKind(moe=True, windowed=False)
    # Without the MoE overhead terms: they do not grow with the experts a rank reads.
    hardware = profile_for_gpu(cluster.gpu.name, "trtllm").model_copy(update={"moe_fixed_us": 0.0,
                                                                            "moe_routed_token_ns": 0.0})
    plain = CostContext(model, cluster, hardware, shape).layer_ops_s(moe, step)
    spare = CostContext(model, cluster, hardware, shape, 1).layer_ops_s(moe, step)
    assert spare["moe.experts"] / plain["moe.experts"] == pytest.approx(17 / 16, rel=1e-9)
    others = [k for k in plain if k != "moe.experts"]
    assert [spare[k] for k in others] == [plain[k] for k in others] and spare.keys() == plain.keys()
    # At most one copy of each expert per rank: 255 redundant slots on one rank read 256 experts.
    one_rank = shape_of(model, 1, 1, 1, 1, 1)
    full = CostContext(model, cluster, hardware, one_rank, 255).layer_ops_s(moe, step)
    assert full == CostContext(model, cluster, hardware, one_rank).layer_ops_s(moe, step)


# --- a solved plan carries its placement -----------------------------------------------------------

@pytest.mark.parametrize("model,cluster,kw", [
    ("deepseek-v3", "2x8xH200", dict(zipf=1.0, redundant_slots=1)),
    ("qwen3-235b-a22b", "2x8xH100", dict(zipf=0.5)),
    ("qwen3-30b-a3b", "8xH100", dict(objective="throughput", zipf=1.0)),
])
def test_solved_plan_carries_a_placement_that_passes_the_exp_rules(model, cluster, kw):
    p = problem(model=model, cluster=cluster, **kw)
    plan = solve(p)
    experts = plan.experts
    moe = p.model.moe
    assert experts is not None and errors_of(check_plan(plan)) == []
    assert all(get_rule(rule).check(plan) == [] for rule in EXP)
    assert check_plan_placement(experts, plan.problem, plan.layout) == []
    placed = sorted(pl.layer for st in experts.stages for pl in st.placement.layers)
    assert placed == list(moe.layers)
    for st in experts.stages:  # each stage places its own MoE layers over its own GPUs
        layers = plan.layout.stage_layers(st.index)
        assert all(pl.layer in layers for pl in st.placement.layers)
        assert [g for rank in st.ep_rank_gpus for g in rank] == list(plan.layout.stage_gpus(0, st.index))
        assert st.placement.slots_per_gpu == math.ceil(moe.num_experts / plan.layout.ep) + p.redundant_slots
    assert plan.layout.moe_load_factor == experts.load_factors(moe.layers)
    assert evaluate(p, plan.layout) == plan.prediction


def test_uniform_routing_leaves_the_metrics_unchanged():
    p = problem(model="deepseek-v3", cluster="2x8xH200")
    plan = solve(p)
    assert plan.experts.routing == "uniform" and plan.experts.status == "optimal"
    assert set(plan.layout.moe_load_factor) == {1.0}
    bare = evaluate(p, plan.layout.model_copy(update={"moe_load_factor": None}))
    assert plan.prediction == bare
    assert plan.prediction.metrics.e2e_ms * 1e6 == pytest.approx(plan.objective_value, rel=1e-12)


def test_a_dense_plan_has_no_placement():
    plan = solve(problem(model="llama-3.1-8b", cluster="4xH100"))
    assert plan.experts is None and plan.layout.moe_load_factor is None


def test_redundant_slots_are_priced_by_the_search():
    # The search prices the redundant slots' memory: under a cap the one-stage layout just meets
    # without them, 8 extra expert slots per GPU send it to a layout where they fit.
    base = problem(model="qwen3-30b-a3b", cluster="8xH100")
    first = solve(base)
    need = max(m.total_gib for m in first.prediction.memory)
    cap = need + 0.01
    plan = solve(problem(model="qwen3-30b-a3b", cluster="8xH100", mem_cap_gib=cap, redundant_slots=8))
    assert max(m.total_gib for m in plan.prediction.memory) <= cap
    assert (plan.layout.stages, plan.layout.num_gpus) != (first.layout.stages, first.layout.num_gpus)


def test_the_search_sees_how_each_ep_degree_spreads_hot_experts():
    # Zipf(1.0) without spare slots: 128 experts on 8 ranks leave one rank far above the mean, on 4
    # ranks much less. The search prices each EP degree at its placements' mean factor, so it picks
    # a layout that beats, under the same routing, the one it picks for uniform routing.
    from shardplan.solver.tables import search_load_factor

    skewed = problem(model="qwen3-235b-a22b", cluster="2x8xH100", zipf=1.0, objective="throughput")
    uniform = problem(model="qwen3-235b-a22b", cluster="2x8xH100", objective="throughput")
    assert search_load_factor(skewed, 8) > search_load_factor(skewed, 4) > 1.0 == search_load_factor(uniform, 8)
    aware, blind = solve(skewed), solve(uniform)
    assert aware.layout.ep != blind.layout.ep
    _, blind_under_skew, _ = place_and_price(skewed, blind.layout.model_copy(update={"moe_load_factor": None}))
    assert aware.prediction.metrics.output_tokens_per_s > blind_under_skew.metrics.output_tokens_per_s
    assert errors_of(check_plan(aware)) == []


def test_a_limit_the_imbalance_breaks_is_named_by_the_search():
    # This pinned layout keeps a 650 ms TPOT under uniform routing (596.6 ms: a 126.8 ms decode step and
    # the prefill of 4,095 other requests sharing its steps); Zipf(1.0) without a spare slot costs 2.77 x
    # the mean on the hottest rank (711.3 ms), and the search prices that, so the problem is infeasible
    # with the TPOT limit and the pin named.
    kw = dict(model="deepseek-v3", cluster="2x8xH200", attn_dp=16, batch=4096, tpot_ms=650.0)
    assert solve(problem(**kw)).prediction.metrics.tpot_ms < 650.0
    with pytest.raises(InfeasibleError) as err:
        solve(problem(**kw, zipf=1.0))
    assert {"SLA-002", "PIN-attn_dp"} <= {rule for rule, _ in err.value.conflicts}


def test_a_limit_broken_only_by_per_layer_imbalance_is_reported_not_crashed():
    # Skewed routing in the first half of the MoE layers only: the search prices every layer at the
    # mean factor (222.2 ms TPOT for this layout), the plan prices stage 1's layers at their own, higher
    # factor (236.3 ms). A 230 ms limit breaks only then; the user hears which limit and why.
    from shardplan.models import get_model
    from shardplan.models.load_profile import ExpertLoadProfile

    layers = get_model("deepseek-v3").moe.layers
    skewed = zipf_profile(256, layers, 1.0, 256.0)
    rows = tuple(row if layer < 31 else (1.0,) * 256 for row, layer in zip(skewed.loads, layers, strict=True))
    half = ExpertLoadProfile(num_experts=256, layers=tuple(layers), loads=rows)
    kw = dict(model="deepseek-v3", cluster="2x8xH200", attn_dp=8, pp=2, batch=4096, profile="h200-sxm")
    assert 230.0 < solve(problem(**kw).model_copy(update={"expert_load": half})).prediction.metrics.tpot_ms
    with pytest.raises(InfeasibleError) as err:
        solve(problem(**kw, tpot_ms=230.0).model_copy(update={"expert_load": half}))
    assert [rule for rule, _ in err.value.conflicts] == ["SLA-002"]
    assert "priced layer by layer" in str(err.value)


# --- the rules ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def solved():
    p = problem(model="qwen3-30b-a3b", cluster="8xH100", attn_dp=4, zipf=1.0, redundant_slots=1)
    return solve(p)


def _with_layer(plan: Plan, gpu_experts) -> Plan:
    """``plan`` with the first MoE layer's placement replaced."""
    experts = plan.experts
    stage = experts.stages[0]
    first = stage.placement.layers[0]
    layers = (LayerPlacement(first.layer, tuple(tuple(g) for g in gpu_experts)),) + stage.placement.layers[1:]
    placement = dataclasses.replace(stage.placement, layers=layers)
    stages = (dataclasses.replace(stage, placement=placement),) + experts.stages[1:]
    return plan.model_copy(update={"experts": dataclasses.replace(experts, stages=stages)})


def _flagged(plan: Plan) -> set[str]:
    return {d.rule for d in errors_of(check_plan(plan))}


def test_placement_rules_are_listed_and_only_check(solved):
    assert [r.id for r in ALL_RULES if r.id.startswith("EXP-")] == list(EXP)
    assert not any(r.id.startswith("EXP-") for r in CATALOG)  # the solver does not post them
    for rule_id in EXP:
        rule = get_rule(rule_id)
        assert not rule.applies(solved.problem) and "after the layout" in rule.statement
    assert _flagged(solved) == set()


def test_exp_001_flags_an_expert_hosted_nowhere(solved):
    gpus = [list(g) for g in solved.experts.stages[0].placement.layers[0].gpu_experts]
    lost = gpus[0].pop(0)[0]
    gpus = [[(e, s) for e, s in g if e != lost] for g in gpus]
    assert _flagged(_with_layer(solved, gpus)) == {"EXP-001"}


def test_exp_002_flags_a_rank_over_its_slot_budget(solved):
    placed = solved.experts.stages[0].placement
    gpus = [list(g) for g in placed.layers[0].gpu_experts]
    # Move one whole expert from rank 1 to rank 0: rank 0 then holds one more than its slots.
    on_0 = {e for e, _ in gpus[0]}
    e, share = next((e, s) for e, s in gpus[1] if s == 1.0 and e not in on_0)
    gpus[1] = [(x, s) for x, s in gpus[1] if x != e]
    gpus[0] = gpus[0] + [(e, share)]
    assert len(gpus[0]) > placed.slots_per_gpu
    assert _flagged(_with_layer(solved, gpus)) == {"EXP-002"}
    # A budget beyond ceil(E / ep) + redundant slots is also flagged, even if every rank keeps it.
    stage = solved.experts.stages[0]
    wide = dataclasses.replace(stage.placement, slots_per_gpu=stage.placement.slots_per_gpu + 1)
    stages = (dataclasses.replace(stage, placement=wide),) + solved.experts.stages[1:]
    experts = dataclasses.replace(solved.experts, stages=stages)
    assert _flagged(solved.model_copy(update={"experts": experts})) == {"EXP-002"}


def test_exp_003_flags_two_copies_on_one_gpu_and_shares_off_one(solved):
    gpus = [list(g) for g in solved.experts.stages[0].placement.layers[0].gpu_experts]
    e, share = gpus[0][0]
    # Rank 0 gives the slot of an expert that also has a copy elsewhere to a second copy of e.
    elsewhere = {x for g in gpus[1:] for x, _ in g}
    i = next(i for i, (x, _) in enumerate(gpus[0]) if i > 0 and x in elsewhere)
    twice = [list(g) for g in gpus]
    twice[0] = [(e, share / 2)] + [(e, share / 2) if j == i else item for j, item in enumerate(gpus[0]) if j > 0]
    assert _flagged(_with_layer(solved, twice)) == {"EXP-003"}
    over = [list(g) for g in gpus]
    over[0] = [(e, share + 0.5)] + gpus[0][1:]
    assert _flagged(_with_layer(solved, over)) == {"EXP-003"}


def test_plans_without_a_placement_are_left_alone(solved):
    assert _flagged(solved.model_copy(update={"experts": None})) == set()


# --- --experts-out and the JSON field ------------------------------------------------------------------

def test_experts_out_writes_one_row_per_moe_layer_and_one_entry_per_slot(tmp_path, capsys):
    out = tmp_path / "placement.json"
    main(["solve", "--model", "qwen3-30b-a3b", "--cluster", "8xH100", "--attn-dp", "4", "--zipf", "1.0",
          "--redundant-slots", "1", "--experts-out", str(out), "--json"])
    plan = json.loads(capsys.readouterr().out)
    doc = json.loads(out.read_text())
    moe_layers = list(range(48))
    ep, slots = plan["degrees"]["ep"], 128 // plan["degrees"]["ep"] + 1
    assert doc["layers"] == moe_layers and doc["num_gpus"] == ep and doc["slots_per_gpu"] == slots
    assert len(doc["physical_to_logical_map"]) == len(moe_layers)
    for row, shares in zip(doc["physical_to_logical_map"], doc["shares"], strict=True):
        assert len(row) == doc["num_physical_experts"] == ep * slots
        assert set(row) == set(range(128))  # every expert has a slot, every slot an expert
        assert len(shares) == len(row)
    assert doc["stages"][0]["ep_rank_gpus"] == [[g] for g in plan["stages"][0]["gpus"]]
    # The plan's JSON holds the compact form.
    experts = plan["experts"]
    assert experts["routing"].startswith("zipf(s=1") and experts["slots_per_gpu"] == slots
    stage = experts["stages"][0]
    assert stage["layers"] == moe_layers and len(stage["max_over_mean"]) == len(moe_layers)
    assert len(stage["lower_bound_over_mean"]) == len(moe_layers) and stage["status"] in ("optimal", "feasible")


def test_evaluate_prices_the_placement_too(tmp_path, capsys):
    args = ["evaluate", "--model", "deepseek-v3", "--cluster", "2x8xH200", "--attn-dp", "16", "--batch", "4096",
            "--json"]
    main(args)
    uniform = json.loads(capsys.readouterr().out)
    main(args + ["--zipf", "1.0"])
    skewed = json.loads(capsys.readouterr().out)
    assert uniform["experts"]["max_over_mean"] == 1.0 < skewed["experts"]["max_over_mean"]
    assert skewed["metrics"]["tpot_ms"] > uniform["metrics"]["tpot_ms"]


# --- acceptance (4): malformed profiles are rejected with the field named, exit 2 ---------------------

def _json_profile(path, rows: dict, **extra):
    path.write_text(json.dumps({"layers": {str(k): v for k, v in rows.items()}, **extra}))
    return path


def _rejected(capsys, *args) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(["solve", "--model", "qwen3-30b-a3b", "--cluster", "8xH100", *args])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and err.startswith("shardplan: error: ")
    return err


def test_malformed_profiles_exit_2_naming_the_field(tmp_path, capsys):
    good = {layer: [1.0] * 128 for layer in range(48)}
    short = _json_profile(tmp_path / "short.json", {**good, 5: [1.0] * 127})
    assert "load-profile layers.5: " in _rejected(capsys, "--load-profile", str(short))
    assert "expected 128 experts, got 127" in _rejected(capsys, "--load-profile", str(short))
    negative = _json_profile(tmp_path / "negative.json", {**good, 7: [1.0] * 127 + [-3.0]})
    err = _rejected(capsys, "--load-profile", str(negative))
    assert "load-profile loads[7][127]: " in err and "negative" in err and "layer 7" in err
    missing = _json_profile(tmp_path / "missing.json", {k: v for k, v in good.items() if k != 11})
    err = _rejected(capsys, "--load-profile", str(missing))
    assert "load-profile layers: " in err and "missing layer 11" in err
    extra = _json_profile(tmp_path / "extra.json", {**good, 48: [1.0] * 128})
    assert "layer 48 is not a MoE layer" in _rejected(capsys, "--load-profile", str(extra))
    count = _json_profile(tmp_path / "count.json", good, num_experts=256)
    assert "load-profile num_experts: " in _rejected(capsys, "--load-profile", str(count))
    csv = tmp_path / "bad.csv"
    csv.write_text("layer,expert,tokens\n0,128,5\n")
    assert "load-profile bad.csv:2 expert: " in _rejected(capsys, "--load-profile", str(csv))
    assert "load-profile: cannot read " in _rejected(capsys, "--load-profile", str(tmp_path / "absent.json"))


def test_other_bad_placement_inputs_exit_2(tmp_path, capsys):
    assert "zipf: give either" in _rejected(capsys, "--zipf", "1", "--load-profile", "x.json")
    assert "zipf: must be a finite number >= 0" in _rejected(capsys, "--zipf", "-1")
    assert "redundant-slots: " in _rejected(capsys, "--redundant-slots", "-1")
    assert "experts-out: " in _rejected(capsys, "--experts-out", str(tmp_path / "no" / "such" / "dir.json"))
    with pytest.raises(SystemExit) as exit_:
        main(["solve", "--model", "llama-3.1-8b", "--cluster", "4xH100", "--zipf", "1"])
    assert exit_.value.code == 2 and "zipf: " in capsys.readouterr().err


def test_a_good_csv_profile_is_used(tmp_path):
    csv = tmp_path / "counts.csv"
    rows = ["layer,expert,tokens"] + [f"{layer},{e},{(e % 8) + 1}" for layer in range(48) for e in range(128)]
    csv.write_text("\n".join(rows) + "\n")
    p = problem(model="qwen3-30b-a3b", cluster="8xH100", load_profile=str(csv), attn_dp=4)
    experts = place_for_layout(p, layout_from_pins(p))
    assert experts.routing == str(csv) and experts.profile.layer_loads(3)[:3] == (1.0, 2.0, 3.0)


def test_problem_rejects_a_profile_that_does_not_fit_its_model():
    # Built directly, pydantic wraps our SpecError in a ValidationError (a ValueError) with its text.
    p = dict(problem(model="qwen3-30b-a3b", cluster="8xH100"))
    with pytest.raises(ValueError, match="load-profile: 64 experts per layer; the model has 128"):
        Problem(**{**p, "expert_load": zipf_profile(64, range(48), 1.0, 64.0)})
    with pytest.raises(ValueError, match="load-profile: missing layer 47"):
        Problem(**{**p, "expert_load": zipf_profile(128, range(47), 1.0, 128.0)})
    dense = dict(problem(model="llama-3.1-8b", cluster="4xH100"))
    with pytest.raises(ValueError, match="redundant-slots: .* has no MoE layers"):
        Problem(**{**dense, "redundant_slots": 1})
