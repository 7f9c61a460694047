"""The one catalog of rules: the solver posts them, explanations name them, plans are checked
against them, ``shardplan rules`` lists them. IDs are never reused."""

from __future__ import annotations

from collections.abc import Iterable

from shardplan.models.errors import SpecError, quoted
from shardplan.rules.base import Diagnostic, Kind, Rule
from shardplan.rules.capacity import EngineBatchLimit, MemoryFits, TpotLimit, TtftLimit
from shardplan.rules.dag.catalog import DAG_RULES
from shardplan.rules.dag.disagg import DISAGG_DAG_RULES
from shardplan.rules.disagg import DISAGG_RULES
from shardplan.rules.experts import PLACEMENT_RULES
from shardplan.rules.parallel import (
    ExpertParallelWidth,
    ExpertsPerRank,
    FfnDivisible,
    NoTpInsideExperts,
    SpShardsHoldTokens,
    SpShortContext,
    TpDividesHeads,
    TpInsideDomain,
    TpKvHeads,
)
from shardplan.rules.pins import pins_of
from shardplan.rules.plan import Plan
from shardplan.rules.problem import Problem
from shardplan.rules.structure import (
    DataParallelLatency,
    DataParallelOutside,
    GpuCount,
    StageAlignment,
    StagesContiguous,
)

CATALOG: tuple[Rule, ...] = (
    GpuCount(),
    StagesContiguous(),
    StageAlignment(),
    DataParallelOutside(),
    DataParallelLatency(),
    TpDividesHeads(),
    TpKvHeads(),
    TpInsideDomain(),
    FfnDivisible(),
    SpShardsHoldTokens(),
    SpShortContext(),
    ExpertParallelWidth(),
    NoTpInsideExperts(),
    ExpertsPerRank(),
    MemoryFits(),
    EngineBatchLimit(),
    TtftLimit(),
    TpotLimit(),
)

SWITCHES = {rule.switch: rule.id for rule in CATALOG if rule.switch}

# Rules on the expert placement (EXP-*) only check plans: the placement is decided after the layout,
# so they have no CP-SAT constraint (nor a solver trio) and are kept apart from the rules the solver posts.
ALL_RULES: tuple[Rule, ...] = CATALOG + PLACEMENT_RULES

# Rules on the shape of an execution DAG (DAG-*): rules/dag/check.py runs them on DAGs; they are never
# posted nor run on plans, so they stay out of CATALOG. Rules on the pair of pools of a disaggregated
# deployment (DIS-*): rules/disagg_plan.py runs them beside the catalog per pool. `shardplan rules`
# lists all four families.
LISTED_RULES: tuple[Rule, ...] = (*CATALOG, *PLACEMENT_RULES, *DAG_RULES, *DISAGG_DAG_RULES, *DISAGG_RULES)

# The one registry: every rule of every family by ID and by name (IDs are never reused).
REGISTRY: dict[str, Rule] = {key: rule for rule in LISTED_RULES for key in (rule.id.lower(), rule.name)}


def get_rule(rule_id: str) -> Rule:
    """Any rule, plan or DAG, by its ID (any case) or its kebab-case name."""
    rule = REGISTRY.get(rule_id.lower())
    if rule is None:
        raise SpecError("rule", f"unknown rule {quoted(rule_id)}; known: {', '.join(r.id for r in LISTED_RULES)}")
    return rule


def rules_for(problem: Problem) -> list[Rule]:
    """The rules in force for a problem, the user's pins included."""
    return [rule for rule in CATALOG if rule.applies(problem)] + pins_of(problem)


def check_plan(plan: Plan) -> list[Diagnostic]:
    """Every diagnostic of every catalog rule and pin (advisory ones as warnings)."""
    out = []
    for rule in (*ALL_RULES, *pins_of(plan.problem)):
        out.extend(rule.check(plan))
    return out


def errors_of(diagnostics: list[Diagnostic]) -> list[Diagnostic]:
    return [d for d in diagnostics if d.severity == "error"]


def unknown_switches(allow: frozenset[str]) -> list[str]:
    return sorted(set(allow) - set(SWITCHES))


def check_allow(allow: Iterable[str]) -> None:
    """Every --allow switch must name a rule that can be turned off (``SpecError`` naming the first that does not)."""
    bad = unknown_switches(frozenset(allow))
    if bad:
        raise SpecError("allow", f"unknown switch {quoted(bad[0])}; known: {', '.join(sorted(SWITCHES))}")


__all__ = [
    "ALL_RULES", "CATALOG", "DAG_RULES", "DISAGG_RULES", "LISTED_RULES", "REGISTRY", "SWITCHES", "Kind", "Rule",
    "check_allow", "check_plan", "errors_of", "get_rule", "rules_for", "unknown_switches",
]

