"""Rules on a plan's expert placement (``Plan.experts``): every expert hosted, the slot budget
kept, copies of an expert on distinct GPUs with shares summing to 1.

These rules only ``check``: the placement is decided after the layout (``solver/placement/plan.py``),
so there is nothing for them to post into the CP-SAT layout search. The checks themselves are
``check_placement``'s, reached through the placement object (``plan.experts.violations(plan)``
returns (category, message) pairs), because rules may not import the solver. A plan without a
placement (a dense model, or a layout evaluated without one) has nothing to check.
"""

from __future__ import annotations

from typing import Any

from shardplan.rules.base import Diagnostic, Kind, Rule

_AFTER_LAYOUT = "checked on the plan after the layout is chosen (the placement is not part of the CP-SAT model)"


class _PlacementRule(Rule):
    kind = Kind.STRUCTURAL
    category = ""  # the placement's violation category this rule reports

    def applies(self, problem: Any) -> bool:
        return False  # nothing to post: see the module docstring

    def check(self, plan: Any) -> list[Diagnostic]:
        experts = getattr(plan, "experts", None)
        if experts is None or not hasattr(experts, "violations"):
            return []
        return [self.error(message) for category, message in experts.violations(plan) if category == self.category]


class ExpertsHosted(_PlacementRule):
    id = "EXP-001"
    name = "expert-not-hosted"
    category = "hosted"
    statement = f"every routed expert of every MoE layer is hosted by at least one EP rank of its stage; {_AFTER_LAYOUT}"
    source = "003 §2.4 (each GPU hosts experts), DESIGN.md (ep = the stage's GPUs)"
    example_bad = "256 experts on 8 ranks of 32 slots with expert 7 on no rank"
    example_good = "256 experts on 8 ranks of 32 slots, each expert on one rank"


class SlotBudget(_PlacementRule):
    id = "EXP-002"
    name = "expert-slots-exceeded"
    category = "slots"
    statement = (
        "no EP rank hosts more experts than its slots, ceil(experts / ep) + redundant slots (what memory is "
        f"priced with), and each stage's layers are placed over exactly its ep ranks; {_AFTER_LAYOUT}"
    )
    source = "004 §7 (weights per GPU), DESIGN.md (redundant experts)"
    example_bad = "33 experts on a rank of 32 slots (no --redundant-slots)"
    example_good = "33 experts on a rank with --redundant-slots 1"


class ReplicasDistinct(_PlacementRule):
    id = "EXP-003"
    name = "expert-replicas-collide"
    category = "replicas"
    statement = (
        "the copies of one expert sit on distinct GPUs, and the shares of its tokens the copies serve are "
        f"non-negative and sum to 1; {_AFTER_LAYOUT}"
    )
    source = "DESIGN.md (hot experts may be replicated)"
    example_bad = "expert 5 twice on rank 3; or copies serving 60 % + 60 % of its tokens"
    example_good = "expert 5 on ranks 3 and 7, serving 50 % each"


PLACEMENT_RULES: tuple[Rule, ...] = (ExpertsHosted(), SlotBudget(), ReplicasDistinct())
