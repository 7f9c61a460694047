"""The DAG of a disaggregated plan validates; every kind of invalid change to it is rejected with the rule
that names it (DAG-030 pools disjoint, DAG-031 transfer before the first decode step, DAG-032 each pool's
own stage chain); and the prefill branch plus the transfer take what the cost model says a prompt takes."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import networkx as nx
import pytest

from shardplan.hardware.profile import get_profile
from shardplan.rules.dag.check import rule_ids
from shardplan.rules.dag.view import longest_path_us
from shardplan.rules.disagg import DisaggLayout
from shardplan.rules.layout import Layout
from shardplan.solver.cost.disagg import evaluate_disagg
from shardplan.solver.dag import check_dag
from shardplan.solver.dag.disagg import build_disagg_dag
from tests.unit.solver.cost.factory import problem

# (model, prefill worker, prefill workers, decode worker, decode workers): stage chains on both sides,
# prefill and decode stage boundaries that differ, a MoE decode pool with attention groups.
PLANS = {
    "dense": ("llama-3.1-8b", Layout.even(32, 2, tp=2), 1, Layout.even(32, 3), 2),
    "moe": ("qwen3-30b-a3b", Layout.even(48, 2, tp=2), 1, Layout.even(48, 2, attn_dp=2), 1),
}


@cache
def plan(name: str, concurrency: int = 8):
    model, p, x, d, y = PLANS[name]
    pr = problem(model, "2x8xH100", isl=1000, osl=100)
    return evaluate_disagg(pr, DisaggLayout.place(p, x, d, y, concurrency, pr.cluster))


@cache
def valid(name: str, detail: str) -> nx.DiGraph:
    return build_disagg_dag(plan(name), detail)


def nodes(g: nx.DiGraph, kind: str, pool: str, **attrs: Any) -> list[Any]:
    return [n for n, d in g.nodes(data=True) if d.get("kind") == kind and d.get("pool") == pool
            and all(d.get(k) == v for k, v in attrs.items())]


def decode_on_prefill_gpu(g):
    n = nodes(g, "Attention", "decode", layer=0)[0]
    g.nodes[n]["ranks"] = (0, *g.nodes[n]["ranks"][1:])


def prefill_on_decode_gpu(g):
    n = nodes(g, "FFN", "prefill")[0] if nodes(g, "FFN", "prefill") else nodes(g, "Expert", "prefill")[0]
    g.nodes[n]["ranks"] = (max(r for _, d in g.nodes(data=True) for r in d["ranks"]),)


def node_without_pool(g):
    n = nodes(g, "Layer", "decode")[0]
    del g.nodes[n]["pool"]


def transfer_removed(g):
    g.remove_node(next(n for n, d in g.nodes(data=True) if d["kind"] == "KVTransfer"))


def transfer_not_before_decode(g):
    x = next(n for n, d in g.nodes(data=True) if d["kind"] == "KVTransfer")
    g.remove_edge(x, next(iter(g.succ[x])))


def transfer_before_prefill_wrote(g):
    x = next(n for n, d in g.nodes(data=True) if d["kind"] == "KVTransfer")
    for u in list(g.pred[x]):
        g.remove_edge(u, x)


def transfer_of_too_few_layers(g):
    x = next(n for n, d in g.nodes(data=True) if d["kind"] == "KVTransfer")
    lo, hi = g.nodes[x]["layers"]
    g.nodes[x]["layers"] = (lo + 1, hi)


def prefill_send_bypassed(g):
    send = nodes(g, "SendRecv", "prefill", stage=0)[0]
    preds, succs = list(g.pred[send]), list(g.succ[send])
    g.remove_node(send)
    for u in preds:
        for v in succs:
            g.add_edge(u, v, kind="data")


def decode_backward_edge(g):
    g.add_edge(nodes(g, "Stage", "decode", stage=1)[0], nodes(g, "Stage", "decode", stage=0)[0], kind="data")


def decode_layer_on_wrong_stage(g):
    n = nodes(g, "Attention", "decode", layer=0)[0]
    g.nodes[n]["stage"] = 1


def prefill_head_on_first_stage(g):
    n = nodes(g, "LMHead", "prefill")[0]
    g.nodes[n]["stage"] = 0


MUTATIONS: list[tuple[Callable[[nx.DiGraph], None], str]] = [
    (decode_on_prefill_gpu, "DAG-030"),
    (prefill_on_decode_gpu, "DAG-030"),
    (node_without_pool, "DAG-030"),
    (transfer_removed, "DAG-031"),
    (transfer_not_before_decode, "DAG-031"),
    (transfer_before_prefill_wrote, "DAG-031"),
    (transfer_of_too_few_layers, "DAG-031"),
    (prefill_send_bypassed, "DAG-032"),
    (decode_backward_edge, "DAG-032"),
    (decode_layer_on_wrong_stage, "DAG-032"),
    (prefill_head_on_first_stage, "DAG-032"),
]
CASES = [(m, rule, name, detail) for m, rule in MUTATIONS for name in PLANS for detail in ("logical", "expanded")]


@pytest.mark.parametrize("name", list(PLANS))
@pytest.mark.parametrize("detail", ["logical", "expanded"])
def test_the_built_dag_is_valid_and_joins_the_pools_by_transfers(name: str, detail: str) -> None:
    g = valid(name, detail)
    assert check_dag(g) == []
    lay = plan(name).layout
    transfers = [d for _, d in g.nodes(data=True) if d["kind"] == "KVTransfer"]
    # one per overlap of a prefill stage with a decode stage, together moving every layer once
    moved = sorted(layer for d in transfers for layer in range(*d["layers"]))
    assert moved == list(range(lay.prefill.layout.num_layers))
    assert sum(d["bytes"] for d in transfers) == pytest.approx(plan(name).prediction.kv.bytes_per_prompt, rel=1e-12)


@pytest.mark.parametrize("m,rule,name,detail", CASES, ids=[f"{m.__name__}-{n}-{d}" for m, _, n, d in CASES])
def test_mutation_is_rejected_with_its_rule(m: Callable[[nx.DiGraph], None], rule: str, name: str,
                                            detail: str) -> None:
    g = valid(name, detail).copy()
    m(g)
    found = check_dag(g)
    assert rule in rule_ids(found), f"{m.__name__}: expected {rule}, got {[str(d) for d in found[:5]]}"
    assert all(d.message for d in found if d.rule == rule)


def test_every_disaggregated_rule_has_a_mutation() -> None:
    assert {rule for _, rule in MUTATIONS} == {"DAG-030", "DAG-031", "DAG-032"}


def test_one_prompt_takes_the_prefill_pass_and_the_transfer() -> None:
    solo = plan("dense", 1)
    g = build_disagg_dag(solo, "logical")
    pre = [n for n, d in g.nodes(data=True) if d.get("pool") in ("prefill", "transfer")]
    total_us, path = longest_path_us(g, pre)
    kv = solo.prediction.kv
    expected_us = (solo.prediction.prefill.prefill_ms + kv.transfer_ms + kv.relayout_ms) * 1e3
    # The prediction's times are rounded to 0.1 us (4 decimals of a ms); three of them make the sum.
    assert total_us == pytest.approx(expected_us, abs=0.2)
    assert g.nodes[path[-1]]["kind"] == "KVTransfer"
    # C = 1: no waiting; TTFT is the path plus the serving stack's fixed cost per request, outside the DAG.
    overhead_us = get_profile(solo.prediction.profile).request_overhead_ms * 1e3
    assert solo.prediction.metrics.ttft_ms * 1e3 == pytest.approx(expected_us + overhead_us, rel=1e-6)
