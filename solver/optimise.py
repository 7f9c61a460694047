"""Solve a planning problem: build the encoding, post every rule, optimise, decode a Plan.

- latency: minimise TTFT + OSL x TPOT (integer ns), exactly ``evaluate()``'s e2e;
- throughput: maximise dp x batch / cycle, a ratio, solved exactly by Dinkelbach's method: given
  the best ratio a/c so far, look for a plan with ``c x tokens - a x cycle >= 1``; none proves a/c
  optimal.
Both start from the best even-staged plan (the oracle's quick mode, the same integer tables) and
then ask CP-SAT for strictly better plans until it proves there is none; asked without an
objective, that last question is usually settled in presolve. Ties are broken in a final pass
with the objective fixed: fewer GPUs, then fewer stages, then the lexicographically smallest
shape. One worker and a fixed seed keep the output reproducible.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ortools.sat.python import cp_model

from shardplan.models.errors import InfeasibleError, SolverLimitError, SpecError
from shardplan.rules.catalog import SWITCHES, Rule, check_plan, errors_of, rules_for, unknown_switches
from shardplan.rules.layout import Layout
from shardplan.rules.plan import Plan
from shardplan.rules.problem import Objective, Problem
from shardplan.solver.cost.evaluate import evaluate, resolve_profile
from shardplan.solver.encode import Encoding
from shardplan.solver.oracle import Oracle
from shardplan.solver.placement.plan import place_and_price
from shardplan.solver.space import SearchSpace
from shardplan.solver.tables import Tables, build_tables

SEED = 20261122
STEP_LIMIT_S = 1.0  # budget of one improvement step before it is settled without an objective


@dataclass
class Model:
    """An encoding with every rule posted under its own enforcement literal."""

    enc: Encoding
    rules: list[Rule]
    literals: list  # literals[i] enforces rules[i]


@dataclass
class Outcome:
    """The best value an improvement loop reached, and whether it proved it optimal."""

    proven: bool
    e2e: int | None = None  # latency objective
    tokens: int | None = None  # throughput objective: tokens / cycle
    cycle: int | None = None


def build_model(problem: Problem, only_pins: bool = False, tables: Tables | None = None) -> Model:
    """A fresh encoding with every rule posted; ``tables`` (pure data) may be reused from another."""
    bad = unknown_switches(problem.allow)
    if bad:
        raise SpecError("allow", f"unknown switch {bad[0]!r}; known: {', '.join(sorted(SWITCHES))}")
    if tables is None:
        tables = build_tables(problem, SearchSpace(problem, resolve_profile(problem), only_pins=only_pins))
    enc = Encoding(tables)
    rules = rules_for(problem)
    literals = []
    for rule in rules:
        lit = enc.cp.new_bool_var(f"rule[{rule.id}]")
        rule.post(enc, lit)
        literals.append(lit)
    return Model(enc, rules, literals)


def enforce_all(model: Model) -> None:
    """Turn every rule on for optimisation (explanations build their own copy with assumptions)."""
    for lit in model.literals:
        model.enc.cp.add(lit == 1)


def parameters(time_limit_s: float | None, presolve: bool = True) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = 1
    solver.parameters.random_seed = SEED
    solver.parameters.cp_model_presolve = presolve
    if time_limit_s is not None:
        solver.parameters.max_time_in_seconds = time_limit_s
    return solver


class Deadline:
    def __init__(self, time_limit_s: float | None):
        self.end = None if time_limit_s is None else time.perf_counter() + time_limit_s

    def remaining(self) -> float | None:
        return None if self.end is None else max(0.01, self.end - time.perf_counter())

    def step(self) -> float:
        left = self.remaining()
        return STEP_LIMIT_S if left is None else min(STEP_LIMIT_S, left)


def e2e_expr(enc: Encoding):
    return enc.ttft + enc.problem.workload.osl * enc.round


def throughput_terms(enc: Encoding):
    """(output tokens per round over all replicas, ns per round) as CP-SAT variables.

    cycle = round + ceil(batch x slowest prefill stage / (OSL x chunk)), as ``evaluate``.
    """
    cp, hi = enc.cp, enc.hi
    osl = enc.problem.workload.osl
    fixed = isinstance(enc.batch, int)
    batch = cp.new_constant(enc.batch) if fixed else enc.batch
    # dp x S x attn_dp <= N GPUs and S x q <= the engine's batch limit, so the cluster holds at
    # most N x q_max sequences (N x b for a fixed batch b).
    tokens_hi = enc.num_gpus * (enc.batch if fixed else max(enc.space.q_values))
    batch_hi = enc.batch if fixed else enc.num_gpus * max(enc.space.q_values)
    tokens = cp.new_int_var(1, tokens_hi, "tokens")
    cp.add_multiplication_equality(tokens, [enc.dp, batch])
    chunks = [enc.tables.time[key].chunk for key in enc.pair]
    chunk_osl = cp.new_int_var(osl * min(chunks), osl * max(chunks), "osl*chunk")
    cp.add(chunk_osl == sum(osl * enc.tables.time[key].chunk * lit for key, lit in enc.pair.items()))
    share_hi = batch_hi * hi // (osl * min(chunks)) + 1
    share = cp.new_int_var(0, share_hi, "prefill_share")
    lhs = cp.new_int_var(0, osl * max(chunks) * share_hi, "osl*chunk*share")
    cp.add_multiplication_equality(lhs, [chunk_osl, share])
    rhs = cp.new_int_var(0, batch_hi * hi, "batch*slowest_prefill")
    cp.add_multiplication_equality(rhs, [batch, enc.slowest_prefill])
    cp.add(lhs >= rhs)
    cp.add(lhs - chunk_osl < rhs)  # share = ceil(rhs / chunk_osl) exactly
    if not fixed:
        # Redundant, for the LP: dp x S <= N / G, so tokens <= floor(N / G) x micro, a constant
        # per (shape, batch option) pair; and the slowest prefill stage takes at least 1/S of all
        # prefill work while batch = S x micro, so the prefill share is at least micro x (all
        # prefill layers) / (OSL x chunk).
        cp.add(tokens <= sum((enc.num_gpus // o.gpus) * opt.micro * lit for (o, opt), lit in enc.pair.items()))
        cp.add(share >= sum(
            lit * (_pair_prefill_ns(enc, key) * key[1].micro // (osl * enc.tables.time[key].chunk))
            for key, lit in enc.pair.items()
        ))
    cycle = cp.new_int_var(1, enc.round_hi + share_hi, "cycle")
    cp.add(cycle == enc.round + share)
    return Ratio(tokens, cycle, tokens_hi)


@dataclass(frozen=True)
class Ratio:
    """Throughput as tokens per round over ns per round (bounds kept in Python: reading a
    variable's proto while the model grows crashed OR-Tools 9.15, CPSAT-NOTES)."""

    tokens: cp_model.IntVar
    cycle: cp_model.IntVar
    tokens_hi: int

    def gain(self, cp: cp_model.CpModel, a: int, c: int):
        """``c x tokens - a x cycle``, positive for plans better than a/c. The cycle is copied
        into a variable bounded by c x tokens_max / a, which every plan at least as good as a/c
        respects, so a x cycle cannot overflow 64 bits on large clusters."""
        if a == 0:
            return self.tokens
        hi = c * self.tokens_hi // a + 1
        bounded = cp.new_int_var(0, hi, "cycle_bounded")
        cp.add(bounded == self.cycle)
        return c * self.tokens - a * bounded


def _pair_prefill_ns(enc: Encoding, key) -> int:
    """Prefill ns of every layer and both ends for a (shape, batch option) pair, no sends."""
    e = enc.tables.time[key]
    return sum(enc.tables.layers_of(k) * e.prefill[k] for k in enc.kinds) + e.first_prefill + e.last_prefill


def _improve(cp: cp_model.CpModel, better, objective, deadline: Deadline, minimise: bool):
    """One step: (solver, proven) for a plan satisfying ``better``, pushed as far along
    ``objective`` as the step's budget allows — ``proven`` when the step itself proved that plan
    optimal — or None when CP-SAT proves no such plan exists. Raises SolverLimitError when time
    runs out undecided."""
    step = cp.clone()
    for constraint in better:
        step.add(constraint)
    if objective is not None:
        step.minimize(objective) if minimise else step.maximize(objective)
    solver = parameters(deadline.step())
    status = solver.solve(step)
    proven = objective is not None and status == cp_model.OPTIMAL
    if status == cp_model.UNKNOWN:
        # Nothing better within the step's budget: settle the question without an objective.
        step.clear_objective()
        solver = parameters(deadline.remaining())
        status = solver.solve(step)
    if status == cp_model.INFEASIBLE:
        return None
    if status == cp_model.UNKNOWN:
        raise SolverLimitError("the time limit ended the search")
    return solver, proven


def minimise_latency(enc: Encoding, cp: cp_model.CpModel, deadline: Deadline, best: int | None) -> Outcome:
    e2e = e2e_expr(enc)
    proven = True
    while True:
        try:
            solver = _improve(cp, [e2e <= best - 1] if best is not None else [], e2e, deadline, minimise=True)
        except SolverLimitError:
            if best is None:
                raise
            proven = False
            break
        if solver is None:
            break
        solver, optimal = solver
        best = solver.value(e2e)
        if optimal:
            break  # the step proved it
    return Outcome(proven=proven, e2e=best)


def maximise_throughput(enc: Encoding, cp: cp_model.CpModel, terms, deadline: Deadline, a: int, c: int) -> Outcome:
    found, proven = a > 0, True
    while True:
        step = cp.clone()
        gain = terms.gain(step, a, c)
        try:
            solver = _improve(step, [gain >= 1], gain, deadline, minimise=False)
        except SolverLimitError:
            if not found:
                raise
            proven = False
            break
        if solver is None:
            break
        solver = solver[0]
        a, c, found = solver.value(terms.tokens), solver.value(terms.cycle), True
    return Outcome(proven=proven, tokens=a if found else None, cycle=c)


def solve(problem: Problem, time_limit_s: float | None = None) -> Plan:
    """The optimal plan, or raises ``InfeasibleError`` naming the conflicting rules."""
    started = time.perf_counter()
    deadline = Deadline(time_limit_s)
    model = build_model(problem)
    enc, cp = model.enc, model.enc.cp
    enforce_all(model)
    incumbent = Oracle(enc.tables).incumbent()
    if problem.objective is Objective.LATENCY:
        out = minimise_latency(enc, cp, deadline, incumbent.e2e_ns if incumbent else None)
        if out.e2e is None:
            _raise_infeasible(problem, enc.tables)
        cp.add(e2e_expr(enc) == out.e2e)
        value = out.e2e
    else:
        terms = throughput_terms(enc)
        if problem.pins.dp is None:
            # Dominance: replicas multiply throughput and change nothing else, so an optimum
            # runs as many as fit; another one must not fit. Cuts the dp dimension away.
            cp.add(enc.gpus_used + enc.gpus_per_replica >= enc.num_gpus + 1)
        a, c = (incumbent.tokens, incumbent.cycle_ns) if incumbent else (0, 1)
        out = maximise_throughput(enc, cp, terms, deadline, a, c)
        if out.tokens is None:
            _raise_infeasible(problem, enc.tables)
        cp.add(terms.gain(cp, out.tokens, out.cycle) >= 0)  # exactly as good as the best
        value = round(out.tokens * 1e9 / out.cycle)
    layout = tie_break(enc, cp, deadline)
    return decode(problem, layout, "optimal" if out.proven else "feasible", value, time.perf_counter() - started)


def _raise_infeasible(problem: Problem, tables: Tables) -> None:
    from shardplan.solver.explain import explain

    raise InfeasibleError(explain(problem, tables))


def tie_break(enc: Encoding, cp: cp_model.CpModel, deadline: Deadline) -> Layout:
    """Among plans as good as the optimum: fewest GPUs, then fewest stages, then smallest shape."""
    ranks = {o: i for i, o in enumerate(enc.shapes)}
    n = len(enc.shapes)
    step = cp.clone()
    step.minimize(
        enc.gpus_used * (enc.max_stages + 1) * n
        + enc.stages * n
        + sum(ranks[o] * lit for o, lit in enc.shape.items())
    )
    solver = parameters(deadline.remaining())
    status = solver.solve(step)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise SolverLimitError(f"tie-breaking ended with status {solver.status_name(status)}")
    return read_layout(enc, solver)


def read_layout(enc: Encoding, solver: cp_model.CpSolver) -> Layout:
    shape = next(o for o, lit in enc.shape.items() if solver.value(lit))
    stages = solver.value(enc.stages)
    bounds = [solver.value(enc.bound[s]) for s in range(stages)] + [enc.num_layers]
    batch = enc.batch if isinstance(enc.batch, int) else solver.value(enc.batch)
    return Layout(
        dp=solver.value(enc.dp),
        tp=shape.tp,
        sp=shape.sp,
        attn_dp=shape.attn_dp,
        expert_tp=shape.expert_tp,
        stages=tuple((bounds[s], bounds[s + 1]) for s in range(stages)),
        batch=batch,
    )


def decode(problem: Problem, layout: Layout, status: str, value: int, elapsed: float) -> Plan:
    """The plan with the cost model's prediction; every rule's check must pass.

    For a MoE model the experts are placed for the chosen layout (``solver/placement/plan.py``) and
    the prediction prices each MoE layer at its placement's max/mean load: the search priced them all
    at the layers' mean, so ``metrics`` may differ from ``objective_value`` when the routing is skewed.
    """
    placed, prediction, experts = place_and_price(problem, layout)
    plan = Plan(
        problem=problem,
        layout=placed,
        prediction=prediction,
        status=status,
        objective_value=value,
        solve_time_s=elapsed,
        experts=experts,
    )
    violations = errors_of(check_plan(plan))
    if violations:
        _reject(problem, layout, violations, experts is not None)
    return plan


def _reject(problem: Problem, layout: Layout, violations: list, placed: bool) -> None:
    """A plan that breaks a check: a bug, unless only the placement's per-layer imbalance, priced in after
    the search's per-EP mean, broke a limit the search kept (a TPOT or TTFT limit) — then the user hears so."""
    bare = Plan(problem=problem, layout=layout, prediction=evaluate(problem, layout), status="evaluated")
    if not placed or any(d.rule.startswith("EXP-") for d in violations) or errors_of(check_plan(bare)):
        # the encoding and the checks disagree: a bug, never a user error
        raise AssertionError("solver returned a plan that breaks " + "; ".join(map(str, violations)))
    note = (
        "once the expert placement's imbalance is priced layer by layer (the layout search plans at the "
        "layers' mean imbalance, "
        "so another layout may still hold: pin one with --dp/--pp/--tp/--attn-dp, or relax the limit)"
    )
    raise InfeasibleError([(d.rule, f"{d.message} {note}") for d in violations])
