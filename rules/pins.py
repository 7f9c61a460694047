"""The user's pins as rules, so an infeasibility explanation can name them like any other rule."""

from __future__ import annotations

from typing import Any

from shardplan.rules.base import Diagnostic, Kind, Rule
from shardplan.rules.plan import Plan
from shardplan.rules.problem import Pins, Problem

_SHAPE_FIELDS = ("tp", "sp", "attn_dp", "expert_tp")


class Pin(Rule):
    kind = Kind.STRUCTURAL
    source = "user input"

    def __init__(self, field: str, value: Any):
        self.field, self.value = field, value
        self.id = f"PIN-{field}"
        self.name = f"pinned-{field.replace('_', '-')}"
        self.statement = f"{field} pinned to {value}"

    def post(self, enc: Any, enforce: Any) -> None:
        cp, v = enc.cp, self.value
        if self.field in _SHAPE_FIELDS:
            enc.forbid_shapes(lambda o: getattr(o, self.field) != v, enforce)
        elif self.field == "pp":
            cp.add(enc.stages == v).only_enforce_if(enforce)
        elif self.field == "dp":
            cp.add(enc.dp == v).only_enforce_if(enforce)
        elif self.field == "ep":
            cp.add(enc.ep == v).only_enforce_if(enforce)
        elif self.field == "stages":
            cp.add(enc.stages == len(v)).only_enforce_if(enforce)
            for s, (start, _end) in enumerate(v):
                cp.add(enc.bound[s] == start).only_enforce_if(enforce)
            cp.add(enc.bound[len(v)] == v[-1][1]).only_enforce_if(enforce)

    def check(self, plan: Plan) -> list[Diagnostic]:
        lay = plan.layout
        got: object
        if self.field == "stages":
            got = lay.stages
        else:
            got = lay.degrees().get(self.field, lay.pp if self.field == "pp" else None)
        if self.field == "ep" and not plan.problem.model.is_moe:
            got = 1
        return [self.error(f"{self.field} is {got}, pinned to {self.value}")] if got != self.value else []

    def conflict_message(self, problem: Problem) -> str:
        """The pin, and when the pins together ask for more GPUs than the cluster has, how many: the GPU count
        is no rule of its own in the model, so the explanation names only the pins."""
        need, have = pinned_gpus(problem.pins), problem.cluster.num_gpus
        if need > have:
            return f"{self.statement}; the pins need at least {need:,} GPUs, the cluster has {have:,}"
        return self.statement


def pinned_gpus(pins: Pins) -> int:
    """The fewest GPUs a layout with these pins uses: dp x stages x a stage's GPUs (tp x sp x attn_dp, and at
    least ep x expert_tp), each degree not pinned counted as 1."""
    def given(value: int | None) -> int:
        return value or 1

    stages = len(pins.stages) if pins.stages is not None else given(pins.pp)
    stage_gpus = max(given(pins.tp) * given(pins.sp) * given(pins.attn_dp), given(pins.ep) * given(pins.expert_tp))
    return given(pins.dp) * stages * stage_gpus


def pins_of(problem: Problem) -> list[Pin]:
    fields = problem.pins.model_dump()
    return [
        Pin(name, value if name != "stages" else tuple(tuple(r) for r in value))
        for name, value in fields.items()
        if value is not None
    ]
