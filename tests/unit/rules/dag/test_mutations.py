"""Every kind of invalid change is rejected with the rule that names it; every single communication
or pipeline edge deleted, reversed or rewired is caught; fix_dag repairs the fixable kinds."""

from __future__ import annotations

from functools import cache

import networkx as nx
import pytest

from shardplan.rules.dag.catalog import COLLECTIVE, DAG_RULES
from shardplan.rules.dag.check import rule_ids
from shardplan.solver.dag import build_dag, check_dag, critical_path_us, fix_dag
from tests.unit.rules.dag.mutations import MUTATIONS, Mutation, bypass
from tests.unit.solver.dag.plans import SMALL, evaluated

CASES = [(m, plan, detail) for m in MUTATIONS for plan in SMALL for detail in ("logical", "expanded")
         if not (m.moe_only and plan == "dense")]


@cache
def valid(plan: str, detail: str) -> nx.DiGraph:
    return build_dag(SMALL[plan](), detail)


def mutated(m: Mutation, plan: str, detail: str) -> nx.DiGraph:
    g = valid(plan, detail).copy()
    m.apply(g)
    return g


def test_at_least_twenty_kinds_apply_to_both_a_dense_and_a_moe_plan() -> None:
    both = {m.name for m in MUTATIONS if not m.moe_only}
    assert len(both) >= 20
    assert len({m.name for m in MUTATIONS}) == len(MUTATIONS)


def test_every_error_rule_has_a_mutation_that_it_names() -> None:
    named = {m.rule for m in MUTATIONS}
    missing = [r.id for r in DAG_RULES if r.kind.value != "advisory" and r.id not in named]
    assert missing == []


@pytest.mark.parametrize("m,plan,detail", CASES, ids=[f"{m.name}-{p}-{d}" for m, p, d in CASES])
def test_mutation_is_rejected_with_its_rule(m: Mutation, plan: str, detail: str) -> None:
    assert check_dag(valid(plan, detail)) == []
    found = check_dag(mutated(m, plan, detail))
    assert m.rule in rule_ids(found), f"{m.name}: expected {m.rule}, got {[str(d) for d in found[:5]]}"
    named = [d for d in found if d.rule == m.rule]
    assert all(d.message for d in named)


@pytest.mark.parametrize("m,plan,detail", [c for c in CASES if c[0].fixable],
                         ids=[f"{m.name}-{p}-{d}" for m, p, d in CASES if m.fixable])
def test_fixable_mutation_is_repaired(m: Mutation, plan: str, detail: str) -> None:
    broken = mutated(m, plan, detail)
    fixed, changes, remaining = fix_dag(broken)
    assert changes and remaining == [], [str(d) for d in remaining[:5]]
    assert check_dag(broken) != []  # the input is left as it was
    metrics = SMALL[plan]().prediction.metrics
    assert critical_path_us(fixed, "decode") == pytest.approx(metrics.decode_step_ms * 1e3, rel=1e-5)
    assert critical_path_us(fixed, "prefill") == pytest.approx(SMALL[plan]().prediction.prefill_ms * 1e3, rel=1e-5)


@pytest.mark.parametrize("m,plan,detail", [c for c in CASES if not c[0].fixable],
                         ids=[f"{m.name}-{p}-{d}" for m, p, d in CASES if not m.fixable])
def test_unfixable_mutation_is_reported_not_guessed(m: Mutation, plan: str, detail: str) -> None:
    _, _, remaining = fix_dag(mutated(m, plan, detail))
    assert m.rule in rule_ids(remaining)


@pytest.mark.parametrize("plan", list(SMALL))
@pytest.mark.parametrize("detail", ["logical", "expanded"])
def test_fix_leaves_a_valid_dag_alone(plan: str, detail: str) -> None:
    g = valid(plan, detail)
    fixed, changes, remaining = fix_dag(g)
    assert changes == [] and remaining == []
    assert nx.utils.graphs_equal(fixed, g)


def communication_edges(g: nx.DiGraph) -> list[tuple]:
    return [(u, v) for u, v, d in g.edges(data=True)
            if d["kind"] == "pipeline" or g.nodes[u]["kind"] in COLLECTIVE or g.nodes[v]["kind"] in COLLECTIVE]


def other(g: nx.DiGraph, like: str, avoid: set) -> str:
    """The next node after ``like`` (in build order, wrapping) of the same kind and branch, not in
    ``avoid``; any other node of the branch if there is none."""
    d = g.nodes[like]
    order = list(g.nodes)
    start = order.index(like)
    ring = order[start + 1:] + order[:start]
    same_branch = [
        n for n in ring if g.nodes[n].get("phase") == d.get("phase") and g.nodes[n].get("replica") == d.get("replica")
    ]
    for n in same_branch:
        if g.nodes[n]["kind"] == d["kind"] and n not in avoid:
            return n
    return next(n for n in same_branch if n not in avoid)


EDGE_CASES = [
    ("dense", "logical"),
    pytest.param("dense", "expanded", marks=pytest.mark.slow),
    pytest.param("moe", "logical", marks=pytest.mark.slow),
    pytest.param("moe", "expanded", marks=pytest.mark.slow),  # ~30 s: 384 edges x 4 changes
]


@pytest.mark.parametrize("plan,detail", EDGE_CASES)
def test_every_communication_edge_deleted_reversed_or_rewired_is_caught(plan: str, detail: str) -> None:
    g0 = valid(plan, detail)
    edges = communication_edges(g0)
    assert len(edges) > 20
    missed = []
    for u, v in edges:
        kind = g0.edges[u, v]["kind"]
        variants = {}
        g = g0.copy()
        g.remove_edge(u, v)
        variants["delete"] = g
        g = g0.copy()
        g.remove_edge(u, v)
        g.add_edge(v, u, kind=kind)
        variants["reverse"] = g
        g = g0.copy()
        g.remove_edge(u, v)
        g.add_edge(u, other(g0, v, {u, v, *g0.succ[u]}), kind=kind)
        variants["rewire-head"] = g
        g = g0.copy()
        g.remove_edge(u, v)
        g.add_edge(other(g0, u, {u, v, *g0.pred[v]}), v, kind=kind)
        variants["rewire-tail"] = g
        for name, g in variants.items():
            if not check_dag(g):
                missed.append((name, u, v))
    assert missed == []


REMOVAL_PLANS = {
    "tp-x-sp": dict(model="llama-3.1-8b", cluster="2x8xH100", layers=4, tp=2, sp=2, attn_dp=2, pp=2, batch=4),
    "expert-tp": dict(model="qwen3-30b-a3b", cluster="2x8xH100", layers=4, allow=("expert-tp",), tp=2, attn_dp=2,
                      expert_tp=2, pp=2, batch=8),
}


@pytest.mark.parametrize("detail", ["logical", "expanded"])
@pytest.mark.parametrize("name", list(REMOVAL_PLANS))
def test_every_collective_removed_is_restored_but_the_dispatch(name: str, detail: str) -> None:
    """Remove each collective of a decode branch (wiring its inputs to its outputs): fix_dag puts it
    back with its time, except the MoE dispatch, which nothing names (reported as DAG-027)."""
    kw = dict(REMOVAL_PLANS[name])
    plan = evaluated(kw.pop("model"), kw.pop("cluster"), **kw)
    g0 = build_dag(plan, detail)
    tpot = plan.prediction.metrics.decode_step_ms * 1e3
    removed = [n for n, d in g0.nodes(data=True)
               if d["kind"] in COLLECTIVE and d["kind"] != "SendRecv" and d["phase"] == "decode" and d["replica"] == 0]
    assert len(removed) >= 8
    for c in removed:
        g = g0.copy()
        bypass(g, c)
        assert check_dag(g), c
        fixed, _, remaining = fix_dag(g)
        if g0.nodes[c]["op"] == "moe.dispatch":
            assert "DAG-027" in rule_ids(remaining)
        else:
            assert remaining == [], (c, [str(d) for d in remaining[:3]])
            assert critical_path_us(fixed, "decode") == pytest.approx(tpot, rel=1e-5)
