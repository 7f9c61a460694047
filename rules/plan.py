"""A plan: the problem it answers, the layout chosen, and what the cost model predicts for it.

Rules check plans; the solver returns them. The prediction is the solver's, produced by the cost
model (``solver.cost``), stored here as plain data so rules can read it without importing the
solver.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from shardplan.rules.layout import Layout
from shardplan.rules.problem import Problem


class Plan(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    problem: Problem
    layout: Layout
    prediction: Any = Field(description="solver.cost.Prediction of the layout")
    status: str = Field(description="optimal | feasible | evaluated")
    objective_value: int | None = Field(default=None, description="the solver's integer objective")
    bound: float | None = Field(default=None, description="best bound the solver proved")
    solve_time_s: float | None = None
    experts: Any | None = Field(default=None, description="expert placement, when decided")
