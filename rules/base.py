"""What a rule is: an id, a name that names the violation, a statement, a source, a kind.

A rule may ``post`` CP-SAT constraints on an encoding, gated on its enforcement literal, and may
``check`` a finished plan. ``check`` never touches CP-SAT; ``post`` only uses the encoding's
public helpers (rules may not import the solver, so the encoding is duck-typed here).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from shardplan.rules.plan import Plan
from shardplan.rules.problem import Problem


class Kind(str, Enum):
    STRUCTURAL = "structural"  # always on
    DEFAULT = "default"  # on unless the policy switch turns it off
    ADVISORY = "advisory"  # a warning, never a constraint


@dataclass(frozen=True)
class Diagnostic:
    rule: str
    severity: str  # "error" or "warning"
    message: str
    node: str | None = None
    hint: str | None = None

    def __str__(self) -> str:
        return f"{self.rule}: {self.message}"


class StageDegrees(Protocol):
    """What a shape rule reads of a stage: its inner degrees. A ``Layout`` has them, and so has each
    stage shape the solver searches over."""

    @property
    def tp(self) -> int: ...

    @property
    def sp(self) -> int: ...

    @property
    def attn_dp(self) -> int: ...

    @property
    def expert_tp(self) -> int: ...


class Rule:
    """Base class: subclasses set the class attributes and override the hooks they need."""

    id: str = ""
    name: str = ""
    statement: str = ""
    source: str = ""
    kind: Kind = Kind.STRUCTURAL
    switch: str | None = None  # the --allow name that turns a default rule off
    example_bad: str = ""
    example_good: str = ""

    def applies(self, problem: Problem) -> bool:
        """Whether the rule is in force for this problem (policy switches, SLA limits given)."""
        return not (self.switch and problem.allows(self.switch)) and self.kind is not Kind.ADVISORY

    def post(self, enc: Any, enforce: Any) -> None:
        """Add the rule's constraints to the CP-SAT encoding, each only enforced if ``enforce``."""

    def check(self, plan: Plan) -> list[Diagnostic]:
        """Violations of the rule by a finished plan."""
        return []

    def conflict_message(self, problem: Problem) -> str:
        """The numbers behind the rule when it is part of an infeasibility explanation."""
        return self.statement

    def error(self, message: str, hint: str | None = None) -> Diagnostic:
        return Diagnostic(self.id, "error" if self.kind is not Kind.ADVISORY else "warning", message, hint=hint)

    def describe(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "statement": self.statement,
            "source": self.source,
            "kind": self.kind.value,
            "switch": self.switch,
            "example_bad": self.example_bad,
            "example_good": self.example_good,
        }


class ShapeRule(Rule):
    """A rule on the inside of a stage alone (tp, sp, attention groups, expert-tp): it forbids
    some shapes. ``forbids`` takes anything with those four degrees (``StageDegrees``) — a solver
    shape or a ``Layout`` — so the solver's constraints and the plan check share one predicate."""

    def forbids(self, problem: Problem, shape: StageDegrees) -> bool:
        raise NotImplementedError

    def violation(self, problem: Problem, shape: StageDegrees) -> str:
        return self.statement

    def post(self, enc: Any, enforce: Any) -> None:
        enc.forbid_shapes(lambda o: self.forbids(enc.problem, o), enforce)

    def check(self, plan: Plan) -> list[Diagnostic]:
        if self.applies(plan.problem) and self.forbids(plan.problem, plan.layout):
            return [self.error(self.violation(plan.problem, plan.layout))]
        return []


def stage_gpus(shape: StageDegrees) -> int:
    return shape.tp * shape.sp * shape.attn_dp
