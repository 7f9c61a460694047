"""Solve a planning problem: build the encoding, post every rule, optimise, decode a Plan.

- latency: minimise TTFT + OSL x TPOT (integer ns), exactly ``evaluate()``'s e2e;
- throughput: maximise dp x batch / cycle, a ratio. It is solved exactly by Dinkelbach's method:
  given the best ratio a/c found so far, maximise ``c x tokens - a x cycle``; a positive optimum
  is a better plan, zero proves the current one optimal. Each step is a plain CP-SAT solve.
Ties are broken in a second pass with the objective fixed: fewer GPUs, then fewer stages, then
the lexicographically smallest shape. One worker and a fixed seed keep the output reproducible.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional

from ortools.sat.python import cp_model

from shardplan.models.errors import InfeasibleError, SolverLimitError, SpecError
from shardplan.rules.catalog import Rule, check_plan, errors_of, rules_for, unknown_switches
from shardplan.rules.layout import Layout
from shardplan.rules.plan import Plan
from shardplan.rules.problem import Objective, Problem
from shardplan.solver.cost.evaluate import evaluate, resolve_profile
from shardplan.solver.bruteforce import Oracle
from shardplan.solver.encode import Encoding
from shardplan.solver.space import SearchSpace
from shardplan.solver.tables import build_tables

SEED = 20261122


@dataclass
class Model:
    """An encoding with every rule posted under its own enforcement literal."""

    enc: Encoding
    rules: list[Rule]
    literals: list  # literals[i] enforces rules[i]


def build_model(problem: Problem) -> Model:
    bad = unknown_switches(problem.allow)
    if bad:
        from shardplan.rules.catalog import SWITCHES

        raise SpecError("allow", f"unknown switch {bad[0]!r}; known: {', '.join(sorted(SWITCHES))}")
    profile = resolve_profile(problem)
    space = SearchSpace(problem, profile)
    enc = Encoding(build_tables(problem, space))
    rules = rules_for(problem)
    literals = []
    for rule in rules:
        lit = enc.cp.NewBoolVar(f"rule[{rule.id}]")
        rule.post(enc, lit)
        literals.append(lit)
    return Model(enc, rules, literals)


def parameters(time_limit_s: Optional[float], presolve: bool = True) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = SEED
    solver.parameters.cp_model_presolve = presolve
    if time_limit_s is not None:
        solver.parameters.max_time_in_seconds = time_limit_s
    return solver


def solve(problem: Problem, time_limit_s: Optional[float] = None) -> Plan:
    """The optimal plan, or raises ``InfeasibleError`` naming the conflicting rules."""
    started = time.perf_counter()
    model = build_model(problem)
    deadline = None if time_limit_s is None else started + time_limit_s
    best = _optimise(model, deadline)
    if best is None:
        from shardplan.solver.explain import explain

        raise InfeasibleError(explain(model))
    layout, status, value, bound = best
    plan = decode(problem, layout, status, value, bound, time.perf_counter() - started)
    return plan


def _remaining(deadline: Optional[float]) -> Optional[float]:
    return None if deadline is None else max(0.01, deadline - time.perf_counter())


def _optimise(model: Model, deadline: Optional[float]):
    enc = model.enc
    cp = enc.cp
    cp.ClearAssumptions()
    for lit in model.literals:
        cp.Add(lit == 1)
    if enc.problem.objective is Objective.LATENCY:
        return _minimise_latency(model, deadline)
    return _maximise_throughput(model, deadline)


def e2e_expr(enc: Encoding):
    return enc.ttft + enc.problem.workload.osl * enc.round


def _minimise_latency(model: Model, deadline):
    enc, cp = model.enc, model.enc.cp
    e2e = e2e_expr(enc)
    # Start from the best even-staged plan, then ask for strictly shorter until none exists.
    incumbent = Oracle(enc.tables).optimum(exact=False)
    best = incumbent.e2e_ns if incumbent else None
    label, bound = "optimal", None
    while True:
        step = cp.Clone()
        if best is not None:
            step.Add(e2e <= best - 1)
        step.Minimize(e2e)
        solver = parameters(_step_limit(deadline))
        status = solver.Solve(step)
        if status == cp_model.UNKNOWN:
            step.ClearObjective()
            solver = parameters(_remaining(deadline))
            status = solver.Solve(step)
        if status == cp_model.INFEASIBLE:
            break
        if status == cp_model.UNKNOWN:
            label = "feasible"
            break
        best = solver.Value(e2e)
        if status == cp_model.OPTIMAL and solver.ObjectiveValue() == best:
            bound = solver.BestObjectiveBound()
            break  # proven optimal within the step
    if best is None:
        return None
    cp.Add(e2e == best)
    layout = _tie_break(model, None, deadline)
    return layout, label, best, bound


def _maximise_throughput(model: Model, deadline):
    enc, cp = model.enc, model.enc.cp
    tokens, cycle = throughput_terms(enc)
    # Dinkelbach: start from the best even-staged plan (quick, exact arithmetic on the same
    # tables), then ask CP-SAT for a strictly better ratio until it proves there is none.
    incumbent = Oracle(enc.tables).optimum(exact=False)
    a, c = (incumbent.tokens, incumbent.cycle_ns) if incumbent else (0, 1)
    label, found = "optimal", incumbent is not None
    while True:
        step = cp.Clone()
        step.Add(c * tokens - a * cycle >= 1)
        step.Maximize(c * tokens - a * cycle)
        solver = parameters(_step_limit(deadline))
        status = solver.Solve(step)
        if status == cp_model.UNKNOWN:
            # No better plan within the step's budget: settle the question without an objective,
            # which CP-SAT usually proves infeasible in presolve.
            step.ClearObjective()
            solver = parameters(_remaining(deadline))
            status = solver.Solve(step)
        if status == cp_model.INFEASIBLE:
            break
        if status == cp_model.UNKNOWN:
            label = "feasible"
            break
        a, c, found = solver.Value(tokens), solver.Value(cycle), True
    if not found:
        return None
    cp.Add(c * tokens - a * cycle >= 0)  # only plans exactly as good as the best
    layout = _tie_break(model, None, deadline)
    return layout, label, round(a * 1e9 / c), None


def _step_limit(deadline: Optional[float], cap: float = 1.0) -> float:
    remaining = _remaining(deadline)
    return cap if remaining is None else min(cap, remaining)


def throughput_terms(enc: Encoding):
    """(output tokens per round over all replicas, ns per round) as CP-SAT variables.

    cycle = round + ceil(batch x slowest prefill stage / (OSL x chunk)), as ``evaluate``.
    """
    cp, hi = enc.cp, enc.hi
    osl = enc.problem.workload.osl
    batch = enc.batch if not isinstance(enc.batch, int) else cp.NewConstant(enc.batch)
    batch_hi = enc.batch if isinstance(enc.batch, int) else enc.num_gpus * max(enc.space.q_values)
    tokens = cp.NewIntVar(1, enc.num_gpus * batch_hi, "tokens")
    cp.AddMultiplicationEquality(tokens, [enc.dp, batch])
    if enc.space.decides_batch:
        # Redundant, for the LP: dp x S <= N / G, so tokens <= floor(N / G) x attn_dp x q, a
        # constant per (shape, batch option) pair.
        cp.Add(tokens <= sum((enc.num_gpus // o.gpus) * opt.micro * lit for (o, opt), lit in enc.pair.items()))
    chunks = [enc.tables.time[key].chunk for key in enc.pair]
    chunk_osl = cp.NewIntVar(osl * min(chunks), osl * max(chunks), "osl*chunk")
    cp.Add(chunk_osl == sum(osl * enc.tables.time[key].chunk * lit for key, lit in enc.pair.items()))
    share_hi = batch_hi * hi // (osl * min(chunks)) + 1
    share = cp.NewIntVar(0, share_hi, "prefill_share")
    lhs = cp.NewIntVar(0, osl * max(chunks) * share_hi, "osl*chunk*share")
    cp.AddMultiplicationEquality(lhs, [chunk_osl, share])
    rhs = cp.NewIntVar(0, batch_hi * hi, "batch*slowest_prefill")
    cp.AddMultiplicationEquality(rhs, [batch, enc.slowest_prefill])
    cp.Add(lhs >= rhs)
    cp.Add(lhs - chunk_osl < rhs)  # share = ceil(rhs / chunk_osl) exactly
    # Redundant, for the LP: the slowest prefill stage takes at least 1/S of all prefill layers,
    # and a decided batch is S x micro, so batch x slowest >= micro x (all prefill layers).
    if enc.space.decides_batch:
        cp.Add(share * 1 >= sum(lit * (_pair_prefill_ns(enc, key) * key[1].micro // (osl * enc.tables.time[key].chunk))
                                for key, lit in enc.pair.items()))
    cycle = cp.NewIntVar(1, hi + share_hi, "cycle")
    cp.Add(cycle == enc.round + share)
    return tokens, cycle


def _pair_prefill_ns(enc: Encoding, key) -> int:
    """Prefill ns of every layer and both ends for a (shape, batch option) pair, no sends."""
    e = enc.tables.time[key]
    return sum(enc.tables.layers_of(k) * e.prefill[k] for k in enc.kinds) + e.first_prefill + e.last_prefill


def _tie_break(model: Model, solver: cp_model.CpSolver, deadline) -> Layout:
    enc, cp = model.enc, model.enc.cp
    ranks = {o: i for i, o in enumerate(enc.shapes)}
    n_shapes = len(enc.shapes)
    cp.Minimize(
        enc.gpus_used * (enc.max_stages + 1) * n_shapes
        + enc.stages * n_shapes
        + sum(ranks[o] * lit for o, lit in enc.shape.items())
    )
    solver = parameters(_remaining(deadline))
    status = solver.Solve(cp)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise SolverLimitError(f"tie-breaking ended with status {solver.StatusName(status)}")
    return read_layout(enc, solver)


def read_layout(enc: Encoding, solver: cp_model.CpSolver) -> Layout:
    shape = next(o for o, lit in enc.shape.items() if solver.Value(lit))
    stages = solver.Value(enc.stages)
    bounds = [solver.Value(enc.bound[s]) for s in range(stages)] + [enc.num_layers]
    batch = enc.batch if isinstance(enc.batch, int) else solver.Value(enc.batch)
    return Layout(
        dp=solver.Value(enc.dp),
        tp=shape.tp,
        sp=shape.sp,
        attn_dp=shape.attn_dp,
        expert_tp=shape.expert_tp,
        stages=tuple((bounds[s], bounds[s + 1]) for s in range(stages)),
        batch=batch,
    )


def decode(problem: Problem, layout: Layout, status: str, value: int, bound, elapsed: float) -> Plan:
    """The plan with the cost model's prediction; every rule's check must pass."""
    plan = Plan(
        problem=problem,
        layout=layout,
        prediction=evaluate(problem, layout),
        status=status,
        objective_value=value,
        bound=bound,
        solve_time_s=elapsed,
    )
    violations = errors_of(check_plan(plan))
    if violations:  # the encoding and the checks disagree: a bug, never a user error
        raise AssertionError("solver returned a plan that breaks " + "; ".join(map(str, violations)))
    return plan
