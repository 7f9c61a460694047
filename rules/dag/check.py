"""Validate an execution DAG against every DAG-shape rule of the catalog (``rules/dag/catalog.py``).

The graph is indexed once and every rule reads that index; a graph whose graph-level attributes are
missing gets only the schema rule's diagnostics (nothing else can be checked without the layout).
"""

from __future__ import annotations

from typing import Any

from shardplan.rules.base import Diagnostic
from shardplan.rules.dag.catalog import DAG_RULES, DagView
from shardplan.rules.dag.disagg import DISAGG_DAG_RULES, check_disagg_dag, is_disagg


def check_dag(dag: Any, include_warnings: bool = False) -> list[Diagnostic]:
    """Violations of ``dag``: errors only, unless ``include_warnings`` (advisory rules) is set.
    Each diagnostic names its rule ID and, where it has one, the offending node id. A disaggregated
    deployment's DAG (its own schema) is judged by its own rules (``rules/dag/disagg.py``)."""
    if is_disagg(dag):
        return check_disagg_dag(dag)
    view = DagView(dag)
    out: list[Diagnostic] = []
    for rule in DAG_RULES:
        try:
            found = rule.check_dag(view)
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:
            # A file malformed in a way no rule foresaw: say so under the schema rule, never crash.
            found = [
                Diagnostic("DAG-022", "error", f"{rule.id} could not read this graph: {type(exc).__name__}: {exc}")
            ]
        for diag in found:
            if diag.severity == "error" or include_warnings:
                out.append(diag)
    return out


def rule_ids(diagnostics: list[Diagnostic]) -> list[str]:
    """The distinct rule IDs of ``diagnostics``, in catalog order."""
    found = {d.rule for d in diagnostics}
    return [rule.id for rule in (*DAG_RULES, *DISAGG_DAG_RULES) if rule.id in found]


def diagnostics_json(diagnostics: list[Diagnostic]) -> list[dict[str, Any]]:
    return [
        {"rule": d.rule, "severity": d.severity, "node": d.node, "message": d.message, "hint": d.hint}
        for d in diagnostics
    ]


__all__ = ["check_dag", "diagnostics_json", "rule_ids"]
