"""The execution DAG of a plan: build it, measure its critical paths (DESIGN.md "Execution DAG").

``build_dag(plan, detail)`` returns a networkx ``DiGraph`` in the schema of ``rules/dag/catalog.py``;
``check_dag`` (``rules/dag/check.py``) validates any such graph against the knowledge base's DAG rules,
``fix_dag`` (``rules/dag/fix.py``) repairs what has one safe repair, and ``export.py`` writes it as JSON,
GraphML, DOT or Mermaid. docs/dag.md describes the schema.

>>> from shardplan.solver.cli.inputs import ProblemArgs, build_problem
>>> from shardplan.solver.optimise import solve
>>> plan = solve(build_problem(ProblemArgs(model="llama-3.1-8b", cluster="2xH100")))
>>> dag = build_dag(plan)
>>> check_dag(dag)
[]
>>> abs(critical_path_us(dag, "decode") / (plan.prediction.metrics.decode_step_ms * 1e3) - 1) < 1e-5
True
"""

from __future__ import annotations

from typing import Any

import networkx as nx

from shardplan.rules.dag.catalog import longest_path_us
from shardplan.rules.dag.check import check_dag
from shardplan.rules.dag.fix import fix_dag
from shardplan.rules.plan import Plan
from shardplan.solver.dag.build import NODE_BUDGET, build, contiguous_hosting, expert_hosting

DETAILS = ("logical", "expanded")


def build_dag(plan: Plan, detail: str = "logical", fold: bool | None = None) -> nx.DiGraph:
    """The execution DAG of ``plan``.

    ``detail``: ``logical`` (one node per operator, mapped to its ranks) or ``expanded`` (one node per
    shard or expert-hosting GPU, rejoining at explicit collectives). ``fold``: represent the ``dp``
    identical replicas by one Replica node with ``multiplicity`` = dp (None: only when the explicit
    graph would pass ``NODE_BUDGET`` nodes).
    """
    return build(plan, detail, fold)


def branch_nodes(dag: nx.DiGraph, phase: str, replica: int = 0) -> list[Any]:
    return [n for n, d in dag.nodes(data=True) if d.get("phase") == phase and d.get("replica") == replica]


def critical_path(dag: nx.DiGraph, phase: str, replica: int = 0) -> tuple[float, list[Any]]:
    """(microseconds, node ids) of the longest path of one branch, weighting nodes by ``est_us``.
    For a plan's DAG it is the plan's TTFT (prefill) or TPOT (decode)."""
    return longest_path_us(dag, branch_nodes(dag, phase, replica))


def critical_path_us(dag: nx.DiGraph, phase: str, replica: int = 0) -> float:
    return critical_path(dag, phase, replica)[0]


def summary(dag: nx.DiGraph) -> dict[str, Any]:
    """Node and edge counts by kind, for reports and benchmarks."""
    kinds: dict[str, int] = {}
    for _, d in dag.nodes(data=True):
        kinds[d.get("kind")] = kinds.get(d.get("kind"), 0) + 1
    edges: dict[str, int] = {}
    for _, _, d in dag.edges(data=True):
        edges[d.get("kind")] = edges.get(d.get("kind"), 0) + 1
    return {"nodes": dag.number_of_nodes(), "edges": dag.number_of_edges(), "node_kinds": kinds, "edge_kinds": edges}


__all__ = [
    "DETAILS", "NODE_BUDGET", "branch_nodes", "build_dag", "check_dag", "contiguous_hosting", "critical_path",
    "critical_path_us", "expert_hosting", "fix_dag", "summary",
]
