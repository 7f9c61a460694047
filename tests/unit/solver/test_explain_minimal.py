"""The explanation is a minimal conflicting set, checked by CP-SAT on a fresh model with its own defaults:
the set assumed on is infeasible, and leaving out any one of its rules (the others free) is feasible.

``explain`` assumes the rules outside a trial set off and probes nothing; neither may change which set comes
back, only how fast (DeepSeek-V3 on 64x8xH200 below any TPOT: 16 s to 4 s)."""

from __future__ import annotations

import pytest
from ortools.sat.python import cp_model

from shardplan.rules.problem import Problem
from shardplan.solver.encode import build_model, new_solver
from shardplan.solver.explain import explain
from tests.factory import problem

CHECK_WORK = 60.0  # CP-SAT's deterministic time per check: far past what these small models need


def _status(p: Problem, on: set[str]) -> int:
    """CP-SAT's status of ``p``'s model with the rules named in ``on`` assumed and every other rule free."""
    model = build_model(p)
    model.enc.cp.add_assumptions([lit for rule, lit in zip(model.rules, model.literals, strict=True) if rule.id in on])
    solver = new_solver(None, presolve=True, work_limit_s=CHECK_WORK)
    return solver.solve(model.enc.cp)


CASES = {
    "weights beyond the GPUs": lambda: problem("deepseek-v3", "8xH100"),
    "TPOT below any step": lambda: problem("llama-3.1-8b", "4xH100", objective="throughput", tpot_ms=0.001),
    "TTFT and TPOT below any step": lambda: problem("llama-3.1-8b", "4xH100", ttft_ms=0.001, tpot_ms=0.001),
    "one GPU per replica pinned": lambda: problem("llama-3.1-70b", "8xH100", weights_dtype="bf16", tp=1, sp=1, pp=1),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_explanation_is_a_minimal_conflicting_set(case: str) -> None:
    p = CASES[case]()
    named = {rule for rule, _ in explain(p)}
    assert named
    assert _status(p, named) == cp_model.INFEASIBLE
    for rule in sorted(named):
        assert _status(p, named - {rule}) in (cp_model.OPTIMAL, cp_model.FEASIBLE), rule
