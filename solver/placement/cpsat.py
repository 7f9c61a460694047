"""CP-SAT where it proves or improves: exact group split on small layers, and whole-expert assignment
when there is no slot to spare.

Both models work on integer loads ``L_e = floor(K w_e)``; their bounds are turned back into bounds on
real loads (``_real_bound``). Searches are deterministic: a fixed seed, a deterministic time limit, and
with more than one worker the interleaved search.

- ``exact_split``: experts -> groups (the characterisation of ``groups.py``: a group of ``k`` experts on
  ``m`` GPUs is balanced exactly iff ``k <= (S - 1) m + 1``), minimising ``max W_j / m_j``. Exact, so a
  finished search proves optimality; used for small layers (a dozen experts).
- ``assign_whole``: with ``E = S G`` no expert can have a second copy, so a placement is an assignment of
  whole experts, ``S`` per GPU; minimises the most-loaded GPU from a heuristic hint.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ortools.sat.python import cp_model

from shardplan.solver.interruptible import InterruptibleSolver
from shardplan.solver.placement.groups import Group

_SCALE_TOTAL = 10**9  # integer loads sum to about this


@dataclass(frozen=True)
class CpResult:
    groups: list[Group] | None  # the best split found (None if none)
    bound: float  # proven lower bound on the real max load
    optimal: bool  # the search finished: ``groups`` is optimal for the integer loads


def _scale(loads: Sequence[float]) -> tuple[float, list[int]]:
    total = sum(loads)
    k = _SCALE_TOTAL / total if total > 0 else 1.0
    return k, [int(w * k) for w in loads]


def _solver(det_time: float, workers: int) -> cp_model.CpSolver:
    solver = InterruptibleSolver()  # Ctrl-C stops it and reaches the caller (solver/interruptible.py)
    solver.parameters.max_deterministic_time = max(det_time, 0.01)
    solver.parameters.num_workers = max(1, workers)
    solver.parameters.random_seed = 1
    if workers > 1:
        solver.parameters.interleave_search = True  # keeps a multi-worker search deterministic
    return solver


def _real_bound(bound_int: float, k: float, slack: float) -> float:
    # The real optimum T* has integer loads at most K T* (plus ``slack`` rounding units), so the
    # integer optimum cannot exceed K T* + slack.
    return max(0.0, (bound_int - slack) / k)


def exact_split(loads: Sequence[float], num_gpus: int, slots: int, hint: Sequence[Group] | None,
                det_time: float, workers: int = 1) -> CpResult:
    """Optimal split of one small layer's experts into groups (see the module docstring)."""
    n = len(loads)
    k, weight = _scale(loads)
    top = sum(weight)
    model = cp_model.CpModel()
    groups = range(n)  # group j, if used, is named after its first member, expert j; at most G are used
    # in_group[(e, j)]: expert e belongs to group j (only j <= e)
    in_group = {(e, j): model.new_bool_var(f"e{e}_g{j}") for e in range(n) for j in groups if j <= e}
    used = [in_group[j, j] for j in groups]  # expert j is in group j exactly when group j is used
    gpus = [model.new_int_var(0, num_gpus, f"m{j}") for j in groups]
    target = model.new_int_var(0, top, "T")
    for e in range(n):
        model.add_exactly_one(in_group[e, j] for j in groups if j <= e)
    model.add(sum(gpus) <= num_gpus)
    for j in groups:
        members = [in_group[e, j] for e in range(j, n)]
        for var in members[1:]:
            model.add_implication(var, used[j])
        model.add(gpus[j] >= used[j])
        # copies fit the slots: k experts on m GPUs need k <= (S - 1) m + 1
        model.add(sum(members) <= (slots - 1) * gpus[j] + 1)
        # the group's load fits its GPUs: m * T >= W
        product = model.new_int_var(0, top * num_gpus, f"mT{j}")
        model.add_multiplication_equality(product, [gpus[j], target])
        model.add(product >= sum(weight[e] * in_group[e, j] for e in range(j, n)))
    model.minimize(target)
    if hint:
        _hint_split(model, in_group, gpus, target, hint, weight, groups)
    solver = _solver(det_time, workers)
    status = solver.solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return CpResult(None, _real_bound(solver.best_objective_bound, k, 1.0), False)
    found = []
    for j in groups:
        chosen = [e for e in range(j, n) if solver.value(in_group[e, j])]
        if chosen:
            found.append(Group(chosen, max(1, solver.value(gpus[j]))))
    return CpResult(found, _real_bound(solver.best_objective_bound, k, 1.0), status == cp_model.OPTIMAL)


def _hint_split(model, in_group, gpus, target, hint, weight, groups) -> None:
    # Relabel the hint so that each group is named after its first expert, as the model requires.
    index = {min(g.experts): g for g in hint}
    for (e, j), var in in_group.items():
        g = index.get(j)
        model.add_hint(var, bool(g is not None and e in g.experts))
    worst = 0
    for j in groups:
        g = index.get(j)
        model.add_hint(gpus[j], g.gpus if g else 0)
        if g:
            worst = max(worst, -(-sum(weight[e] for e in g.experts) // g.gpus))
    model.add_hint(target, worst)


def assign_whole(loads: Sequence[float], num_gpus: int, slots: int, hint: Sequence[Group] | None,
                 det_time: float, workers: int = 1) -> CpResult:
    """Whole experts, exactly ``slots`` per GPU (``E = S G``), minimising the most-loaded GPU."""
    n = len(loads)
    k, weight = _scale(loads)
    model = cp_model.CpModel()
    # on[(e, g)]: expert e is hosted on GPU g
    on = {(e, g): model.new_bool_var(f"e{e}_g{g}") for e in range(n) for g in range(num_gpus)}
    target = model.new_int_var(0, sum(weight), "T")
    load = []
    for e in range(n):
        model.add_exactly_one(on[e, g] for g in range(num_gpus))
    for g in range(num_gpus):
        model.add(sum(on[e, g] for e in range(n)) == slots)
        load_g = model.new_int_var(0, sum(weight), f"load{g}")
        model.add(load_g == sum(weight[e] * on[e, g] for e in range(n)))
        model.add(load_g <= target)
        load.append(load_g)
    # GPUs are interchangeable: order them by load (a symmetry break that keeps an optimum).
    for g in range(num_gpus - 1):
        model.add(load[g] >= load[g + 1])
    model.minimize(target)
    if hint:
        ordered = sorted(hint, key=lambda grp: -sum(weight[e] for e in grp.experts))
        for g, grp in enumerate(ordered):
            for e in range(n):
                model.add_hint(on[e, g], e in grp.experts)
            model.add_hint(load[g], sum(weight[e] for e in grp.experts))
        model.add_hint(target, max(sum(weight[e] for e in grp.experts) for grp in hint))
    solver = _solver(det_time, workers)
    status = solver.solve(model)
    bound = _real_bound(solver.best_objective_bound, k, 0.0)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return CpResult(None, bound, False)
    found = [Group([e for e in range(n) if solver.value(on[e, g])], 1) for g in range(num_gpus)]
    return CpResult(found, bound, status == cp_model.OPTIMAL)
