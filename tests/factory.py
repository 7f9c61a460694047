"""Small problems for tests, built the way the CLI builds them."""

from __future__ import annotations

from shardplan.rules.problem import Problem
from shardplan.solver.cli.inputs import ProblemArgs, build_problem


def problem(model: str = "llama-3.1-8b", cluster: str = "4xH100", **kw) -> Problem:
    pins = {k: kw.pop(k) for k in ("dp", "pp", "tp", "sp", "ep", "attn_dp", "expert_tp", "stages") if k in kw}
    allow = tuple(kw.pop("allow", ()))
    return build_problem(ProblemArgs(model=model, cluster=cluster, pins=pins, allow=allow, **kw))
