"""The MCP resources: read-only JSON an agent can put in its context before calling a tool.

``shardplan://rules`` is the rule catalog (every plan, placement and DAG rule, as ``shardplan rules
--json`` prints it); ``shardplan://dag-schema`` the execution DAG's schema, read from the constants the
DAG rules check against (``rules/dag/view.py``) and the schema text of ``rules/dag/catalog.py``, so it
cannot drift from what ``validate_dag`` enforces.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from shardplan.rules.catalog import LISTED_RULES
from shardplan.rules.dag import catalog as dag_catalog
from shardplan.rules.dag import disagg as dag_disagg
from shardplan.rules.dag.disagg import DISAGG_DAG_RULES, DISAGG_SCHEMA
from shardplan.rules.dag.view import (
    COLLECTIVE,
    COMPUTE,
    CONTROL,
    DETAILS,
    EDGE_KINDS,
    PHASES,
    SCHEMA,
    STATE,
    TYPED,
    NodeKind,
)
from shardplan.solver.dag.export import WRITERS


def rule_catalog() -> list[dict[str, Any]]:
    """Every rule in the registry, plan, placement and DAG, each once, as ``shardplan rules --json``."""
    return [rule.describe() for rule in LISTED_RULES]


def _kinds(group: frozenset[NodeKind]) -> list[str]:
    return [kind.value for kind in NodeKind if kind in group]  # NodeKind's order, not a set's


def dag_schema() -> dict[str, Any]:
    """What a DAG that ``validate_dag`` accepts looks like."""
    doc = inspect.getdoc(dag_catalog) or ""
    return {
        "schema": SCHEMA,
        "format": "networkx node-link JSON: {directed: true, multigraph: false, graph: {...}, "
                  "nodes: [{id, ...}], edges: [{source, target, ...}]}",
        "details": list(DETAILS),
        "phases": [phase.value for phase in PHASES],
        "edge_kinds": list(EDGE_KINDS),
        "node_kinds": {"control": _kinds(CONTROL), "compute": _kinds(COMPUTE), "state": _kinds(STATE),
                       "collective": _kinds(COLLECTIVE)},
        "typed_node_attributes": sorted(TYPED),
        "attributes": doc[doc.find("Schema"):].strip() if "Schema" in doc else doc,
        "file_formats": sorted(WRITERS),
        "rules": [rule.id for rule in dag_catalog.DAG_RULES],
        # A disaggregated deployment's DAG has its own schema and rules (rules/dag/disagg.py).
        "disaggregated": {
            "schema": DISAGG_SCHEMA,
            "attributes": inspect.getdoc(dag_disagg) or "",
            "rules": [rule.id for rule in DISAGG_DAG_RULES],
        },
    }


@dataclass(frozen=True)
class ResourceSpec:
    uri: str
    name: str
    description: str
    read: Callable[[], Any]


RESOURCES: tuple[ResourceSpec, ...] = (
    ResourceSpec("shardplan://rules", "rules", "The rule catalog: every plan, expert-placement and DAG rule with "
                 "its ID, statement, source and examples (as `shardplan rules --json`).", rule_catalog),
    ResourceSpec("shardplan://dag-schema", "dag-schema", "The execution DAG's schema: node and edge kinds, graph "
                 "and node attributes, and the DAG rules validate_dag checks.", dag_schema),
)


def normal_uri(uri: str) -> str:
    """``uri`` as the catalog spells it (RFC 3986 §6.2.2): the scheme in lower case and percent-encoded octets
    decoded, so ``SHARDPLAN://rules`` and ``shardplan://dag%2Dschema`` name the resources they are equivalent to.
    Decoding every octet, reserved ones too, names no other resource: no catalog URI holds one.

    >>> normal_uri("SHARDPLAN://dag%2Dschema")
    'shardplan://dag-schema'
    """
    scheme, colon, rest = uri.partition(":")
    return scheme.lower() + colon + unquote(rest) if colon else unquote(uri)
