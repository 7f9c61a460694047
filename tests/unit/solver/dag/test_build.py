"""Plans of several models, clusters and objectives give DAGs that validate at both detail levels,
whose critical paths are the plans' TTFT and TPOT."""

from __future__ import annotations

import importlib

import networkx as nx
import pytest

from shardplan.models.errors import SpecError
from shardplan.rules.catalog import CATALOG, LISTED_RULES, get_rule
from shardplan.rules.dag.catalog import DAG_RULES, is_sharded
from shardplan.rules.plan import Plan
from shardplan.solver.dag import build_dag, check_dag, contiguous_hosting, critical_path, critical_path_us
from shardplan.solver.dag.build import expert_hosting
from tests.unit.solver.dag.plans import evaluated, small_dense, small_moe, solved

build_module = importlib.import_module("shardplan.solver.dag.build")  # the package's ``build`` is the function

SOLVED = [
    ("llama-3.1-8b", "2xH100", "latency"),  # dense, tp=2
    ("llama-3.1-70b", "4x8xH100", "throughput"),  # dense, dp=4 x pp=4 x tp=2, 4 microbatches
    ("mixtral-8x7b", "8xH100", "throughput"),  # MoE, attention groups, all-to-all
    ("llama-4-maverick", "2x8xH100", "latency"),  # MoE every other layer, pp=2, tp=8
    ("qwen3-30b-a3b", "8xH100", "throughput"),  # MoE, dp=2 x pp=2
    ("deepseek-v3", "4x8xH200", "latency"),  # MLA, shared experts, dense first layers
    ("gpt-oss-120b", "8xH100", "latency"),  # windowed attention layers
]

EVALUATED = {
    "tp-x-sp-groups": dict(model="llama-3.1-8b", cluster="8xH100", tp=2, sp=2, attn_dp=2, batch=4),
    "sp-only-pp2": dict(model="llama-3.1-8b", cluster="8xH100", tp=1, sp=4, pp=2, batch=3),
    "expert-tp-groups": dict(
        model="qwen3-30b-a3b",
        cluster="2x8xH100",
        allow=("expert-tp",),
        tp=2,
        attn_dp=2,
        expert_tp=2,
        pp=2,
        batch=8,
        dp=2,
    ),
    "expert-tp-one-group": dict(
        model="qwen3-30b-a3b", cluster="8xH100", allow=("expert-tp",), tp=4, expert_tp=2, batch=2
    ),
    "moe-sp-groups-pp2": dict(model="mixtral-8x7b", cluster="8xH100", sp=2, attn_dp=2, pp=2, batch=5),
    "one-gpu-dense": dict(model="llama-3.1-8b", cluster="1xH100", batch=2),
    "one-gpu-moe": dict(model="qwen3-30b-a3b", cluster="1xH100", batch=2),
    "uneven-experts": dict(model="mixtral-8x7b", cluster="8xH100", tp=2, attn_dp=3, batch=6),
}


def plan_named(name: str) -> Plan:
    """Plans are made when a test needs them (solving at collection time would slow every run)."""
    if name in EVALUATED:
        kw = dict(EVALUATED[name])
        return evaluated(kw.pop("model"), kw.pop("cluster"), allow=kw.pop("allow", ()), **kw)
    if name == "small-dense":
        return small_dense()
    if name == "small-moe":
        return small_moe()
    return solved(*name.split("|"))


NAMES = ["|".join(c) for c in SOLVED] + list(EVALUATED) + ["small-dense", "small-moe"]


@pytest.mark.parametrize("detail", ["logical", "expanded"])
@pytest.mark.parametrize("name", NAMES)
def test_plan_dag_is_valid_and_its_critical_paths_are_ttft_and_tpot(name: str, detail: str) -> None:
    plan = plan_named(name)
    dag = build_dag(plan, detail)
    assert check_dag(dag, include_warnings=True) == []
    metrics = plan.prediction.metrics
    for r in range(plan.layout.dp if not dag.graph["folded"] else 1):
        assert critical_path_us(dag, "prefill", r) == pytest.approx(plan.prediction.prefill_ms * 1e3, rel=1e-4)
        assert critical_path_us(dag, "decode", r) == pytest.approx(metrics.decode_step_ms * 1e3, rel=1e-4)


def test_logical_has_one_node_per_operator_and_expanded_one_per_shard() -> None:
    plan = evaluated("llama-3.1-8b", "8xH100", tp=2, sp=2, attn_dp=2, batch=4)
    logical, expanded = build_dag(plan, "logical"), build_dag(plan, "expanded")
    def attn(g: nx.DiGraph) -> list[str]:
        return [n for n, d in g.nodes(data=True)
                if d["kind"] == "Attention" and d["layer"] == 0 and d["phase"] == "decode"]

    assert len(attn(logical)) == 1
    assert logical.nodes[attn(logical)[0]]["ranks"] == tuple(range(8))
    shards = attn(expanded)
    assert len(shards) == 8  # 2 groups x sp 2 x tp 2
    assert sorted(r for n in shards for r in expanded.nodes[n]["ranks"]) == list(range(8))
    for n in shards:
        d = expanded.nodes[n]
        assert {"group", "sp_rank", "tp_rank", "rejoin"} <= set(d)
        assert expanded.nodes[d["rejoin"]]["kind"] in ("AllReduce", "AllGather")


def test_decode_branch_is_one_token_step_after_the_previous_token() -> None:
    dag = build_dag(small_dense(), "expanded")
    prev, token = "r0.decode.prev", "r0.decode.token"
    assert dag.nodes[prev]["kind"] == "PrevToken" and dag.nodes[token]["kind"] == "Token"
    attention = [
        n for n, d in dag.nodes(data=True) if d["kind"] == "Attention" and d["phase"] == "decode" and d["replica"] == 0
    ]
    for n in attention:
        caches = [u for u in dag.pred[n] if dag.nodes[u]["kind"] == "KVCache"]
        assert caches and all(dag.has_edge(prev, c) for c in caches)
        assert any(dag.nodes[v]["kind"] == "KVCacheUpdate" for v in dag.succ[n])


def test_round_node_carries_the_busiest_stage_when_microbatches_fill_the_pipeline() -> None:
    plan = solved("llama-3.1-70b", "4x8xH100", "throughput")
    assert plan.prediction.microbatches > 1
    dag = build_dag(plan)
    rnd = dag.nodes["r0.decode.round"]
    b = rnd["bottleneck_stage"]
    st = plan.prediction.stages[b]
    assert rnd["est_us"] == pytest.approx(plan.prediction.microbatches * (st.decode_ms + st.send_decode_ms) * 1e3)
    us, path = critical_path(dag, "decode")
    assert us == pytest.approx(plan.prediction.metrics.decode_step_ms * 1e3, rel=1e-5)


def test_moe_layer_has_router_dispatch_one_expert_per_gpu_and_combine() -> None:
    plan = evaluated("mixtral-8x7b", "8xH100", tp=2, attn_dp=4, batch=8)
    dag = build_dag(plan, "logical")
    layer = [n for n, d in dag.nodes(data=True) if d.get("layer") == 0 and d["phase"] == "decode"]
    kinds = sorted(dag.nodes[n]["kind"] for n in layer)
    assert kinds.count("Expert") == 8 and kinds.count("Router") == 1 and kinds.count("AllToAll") == 2
    experts = [dag.nodes[n] for n in layer if dag.nodes[n]["kind"] == "Expert"]
    assert sorted(e for d in experts for e in d["experts"]) == list(range(8))
    assert sorted(d["ranks"][0] for d in experts) == list(range(8))


def test_default_hosting_is_contiguous_and_at_most_ceil_per_rank() -> None:
    assert contiguous_hosting(8, 3) == ((0, 1), (2, 3, 4), (5, 6, 7))
    assert contiguous_hosting(256, 8)[1] == tuple(range(32, 64))
    assert contiguous_hosting(2, 4) == ((0,), (1,), (0,), (1,))


class _Placed:
    def __init__(self, gpu_experts):
        self.gpu_experts = gpu_experts


class _Placement:
    """Anything with layer(i).gpu_experts, like solver.placement.ExpertPlacement."""

    def __init__(self, lists):
        self.lists = lists

    def layer(self, layer):
        return _Placed(self.lists)


def test_placement_hook_uses_per_gpu_expert_lists() -> None:
    plan = evaluated("mixtral-8x7b", "8xH100", tp=2, attn_dp=2, batch=4)
    lists = (((7, 1.0), (0, 0.5)), ((1, 1.0), (2, 1.0)), ((3, 1.0), (4, 1.0)), ((5, 1.0), (6, 1.0), (0, 0.5)))
    placed = plan.model_copy(update={"experts": _Placement(lists)})
    assert expert_hosting(placed, 0) == ((7, 0), (1, 2), (3, 4), (5, 6, 0))
    dag = build_dag(placed)
    assert dag.graph["expert_placement"] == "plan"
    assert dag.nodes["r0.decode.L0.expert.e3"]["experts"] == (5, 6, 0)
    assert check_dag(dag) == []


def test_folded_replicas_keep_the_rules_and_the_critical_paths() -> None:
    plan = solved("llama-3.1-70b", "4x8xH100", "throughput")
    full, folded = build_dag(plan, fold=False), build_dag(plan, fold=True)
    assert folded.graph["folded"] and not full.graph["folded"]
    assert folded.nodes["r0"]["multiplicity"] == plan.layout.dp
    assert folded.number_of_nodes() < full.number_of_nodes() / (plan.layout.dp - 0.5)
    assert check_dag(folded) == []
    assert critical_path_us(folded, "decode") == pytest.approx(critical_path_us(full, "decode"))


def test_every_rule_is_registered_with_a_kebab_name_and_a_source() -> None:
    ids = [r.id for r in DAG_RULES]
    assert len(ids) == len(set(ids)) and all(i.startswith("DAG-") for i in ids)
    assert not set(ids) & {r.id for r in CATALOG}
    for rule in DAG_RULES:
        assert rule in LISTED_RULES and get_rule(rule.id) is rule
        assert rule.name == rule.name.lower() and " " not in rule.name
        assert rule.source and rule.statement and rule.example_bad and rule.example_good


def test_sharded_predicate() -> None:
    assert is_sharded({"tp_rank": 0}) and is_sharded({"tp": 2}) and not is_sharded({"tp": 1, "group": 3})


def test_a_dag_past_the_node_limit_is_refused_naming_the_option(monkeypatch: pytest.MonkeyPatch) -> None:
    """A replica is never folded, so its DAG grows with layers x GPUs per stage: a valid plan (1,024
    layers, 4,096 experts, 2 stages of 2,048 GPUs) ran out of 5 GB building its logical DAG (exit 3,
    MemoryError). Past MAX_DAG_NODES the build stops with bad input naming --dag; the limit is lowered
    here so a small plan reaches it."""
    plan = small_moe()
    size = build_dag(plan, "expanded").number_of_nodes()
    monkeypatch.setattr(build_module, "MAX_DAG_NODES", size - 1)
    with pytest.raises(SpecError, match=r"^dag: the plan's expanded DAG passes .* --detail logical has fewer$"):
        build_dag(plan, "expanded")
    monkeypatch.setattr(build_module, "MAX_DAG_NODES", size)
    assert build_dag(plan, "expanded").number_of_nodes() == size
