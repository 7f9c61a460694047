"""Best weighted shares for a fixed set of copies: a small LP (GLOP), no CP-SAT.

Given which GPUs host which experts, the tokens of each expert may be split over its copies in any
proportion; the split that minimises the most-loaded GPU is a linear programme:
minimise ``T`` subject to ``sum_g x[e, g] = w_e`` and ``sum_e x[e, g] <= T``, ``x >= 0``.
Used to re-share the greedy baseline's copies (equal shares) when that helps.
"""

from __future__ import annotations

from collections.abc import Sequence

from ortools.linear_solver import pywraplp

from shardplan.solver.placement.fill import Pieces


def reshare(loads: Sequence[float], hosts: Sequence[Sequence[int]]) -> Pieces | None:
    """Pieces with the load-minimising shares on the copies ``hosts[g]``; None if the LP fails."""
    solver = pywraplp.Solver.CreateSolver("GLOP")
    if solver is None:
        return None
    scale = max(max(loads, default=0.0), 1e-300)  # solve in units of the hottest expert
    top = solver.NumVar(0.0, solver.infinity(), "T")
    # x[(e, g)]: tokens of expert e served by its copy on GPU g (in units of `scale`)
    x = {(e, g): solver.NumVar(0.0, solver.infinity(), f"x{e}_{g}") for g, hosted in enumerate(hosts) for e in hosted}
    by_expert: dict[int, list[pywraplp.Variable]] = {}
    for (e, _), var in x.items():
        by_expert.setdefault(e, []).append(var)
    for e, w in enumerate(loads):
        solver.Add(solver.Sum(by_expert.get(e, [])) == w / scale)
    for g, hosted in enumerate(hosts):
        solver.Add(solver.Sum([x[e, g] for e in hosted]) <= top)
    solver.Minimize(top)
    if solver.Solve() != pywraplp.Solver.OPTIMAL:
        return None
    return [[(e, max(0.0, x[e, g].solution_value()) * scale) for e in hosted] for g, hosted in enumerate(hosts)]
