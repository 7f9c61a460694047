"""A plan: the problem it answers, the layout chosen, and what the cost model predicts for it.

Rules check plans; the solver returns them. The prediction (``rules/prediction.py``) and the expert
placement (``rules/expert_placement.py``) are the solver's, produced by the cost model and the placer,
and stored here as plain data so rules can read them without importing the solver.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from shardplan.rules.expert_placement import PlanPlacement
from shardplan.rules.layout import Layout
from shardplan.rules.prediction import Prediction
from shardplan.rules.problem import Problem


class Plan(BaseModel):
    # ``experts`` is a frozen dataclass: pydantic takes an instance as it is, without rebuilding it.
    model_config = ConfigDict(extra="forbid", frozen=True)

    problem: Problem
    layout: Layout
    prediction: Prediction = Field(description="the cost model's prediction of the layout")
    status: str = Field(description="optimal | feasible | evaluated")
    objective_value: int | None = Field(default=None, description="the solver's integer objective")
    bound: float | None = Field(default=None, description="best bound the solver proved")
    gap: float | None = Field(default=None, description="|bound - objective| / objective of a feasible plan")
    solve_time_s: float | None = None
    experts: PlanPlacement | None = Field(default=None, description="expert placement, when decided")
