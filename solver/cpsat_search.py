"""The CP-SAT search of a planning problem (latency, or throughput at a fixed batch): the encoding
with every rule posted, an incumbent from the oracle, improvement steps until CP-SAT proves no better
plan exists, and the tie-break.

- latency: minimise e2e = TTFT + (OSL - 1) x TPOT as users measure them (integer ns), exactly
  ``evaluate()``'s e2e;
- throughput: maximise dp x batch / e2e (x OSL, Little's law), a ratio, solved exactly by
  Dinkelbach's method: given the best ratio a/c so far, look for a plan with
  ``c x tokens - a x e2e >= 1``; none proves a/c optimal.
Both start from an incumbent of the oracle (by default its quick mode: the best even-staged plan, on
the same integer tables) and then ask CP-SAT for strictly better plans until it proves there is none;
asked without an objective, that last question is usually settled in presolve. Ties are broken in a
final pass with the objective fixed: fewer GPUs, then fewer stages, then the lexicographically
smallest shape. One worker and a fixed seed keep the output reproducible. ``optimise.py`` runs it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from ortools.sat.python import cp_model
from ortools.sat.python.cp_model import BoundedLinearExpression, IntVar

from shardplan.models.errors import SolverLimitError
from shardplan.rules.layout import Layout
from shardplan.rules.problem import Objective, Problem
from shardplan.solver.bound import relative_gap, table_bound
from shardplan.solver.cost.evaluate import resolve_profile
from shardplan.solver.encode import Encoding, Expr, Model, build_model, new_solver
from shardplan.solver.oracle import Candidate, Oracle
from shardplan.solver.search_base import SOLUTION_WORK, Deadline, NoPlan, Optimum, Seed
from shardplan.solver.space import SearchSpace, Shape
from shardplan.solver.tables import build_tables

# A constraint as the stubs type it: ortools builds a BoundedLinearExpression, typed as bool.
Constraint = BoundedLinearExpression | bool


@dataclass
class Outcome:
    """The best value an improvement loop reached, and whether it proved it optimal."""

    proven: bool
    e2e: int | None = None  # latency: the best e2e; throughput: the best plan's e2e
    tokens: int | None = None  # throughput objective: tokens / e2e
    layout: Layout | None = None  # a plan reaching that value (before tie-breaking)
    bound: float | None = None  # latency, when not proven: CP-SAT's lower bound on e2e ns
    gain: GainBound | None = None  # throughput, when not proven: what the last Dinkelbach step proved


class TimedOut(SolverLimitError):
    """A search step ran out of time undecided; ``bound`` is what its objective solve proved, if it had one."""

    def __init__(self, message: str, bound: float | None):
        super().__init__(message)
        self.bound = bound


def enforce_all(model: Model) -> None:
    """Turn every rule on for optimisation (explanations build their own copy with assumptions)."""
    for lit in model.literals:
        model.enc.cp.add(lit == 1)


def solve_within(
    deadline: Deadline, model: cp_model.CpModel, time_limit_s: float | None, work_limit: float | None = None
) -> tuple[cp_model.CpSolver, cp_model.CpSolverStatus]:
    """(solver, status) of ``model`` within the wall-clock limit and the work the deadline leaves
    (``work_limit``, when given, bounds it further); the deterministic time it took is spent, and a solve
    stopped at its most solutions spends their work too (search_base.MOST_SOLUTIONS)."""
    left = deadline.work_left()
    work = left if work_limit is None else work_limit if left is None else min(work_limit, left)
    solver = new_solver(time_limit_s, work_limit_s=work)
    status = solver.solve(model)
    deadline.spend(solver.deterministic_time + (SOLUTION_WORK * solver.solutions if solver.capped else 0.0))
    return solver, status


def e2e_expr(enc: Encoding) -> Expr:
    """End-to-end latency as users measure it: TTFT + (OSL - 1) x TPOT at the plan's concurrency."""
    return enc.e2e


# Dinkelbach's products c x tokens must stay inside CP-SAT's 64-bit range with room to spare.
_PRODUCT_LIMIT = 2**61


@dataclass(frozen=True)
class Ratio:
    """Throughput as requests in flight over every replica per request lifetime: output tokens/s =
    tokens x OSL x 1e9 / e2e (Little's law), so maximising tokens / e2e maximises throughput.
    (Bounds kept in Python: reading a variable's proto while the model grows crashed OR-Tools 9.15,
    CPSAT-NOTES.)"""

    tokens: IntVar
    e2e: IntVar
    tokens_hi: int

    def target(self, a: int, c: int) -> tuple[int, int, bool]:
        """(a', c', exact): the ratio to beat. When c x tokens_max would pass the 64-bit budget, both
        terms are scaled down with a' / c' >= a / c, so a plan that beats a'/c' beats a/c; the search
        may then miss plans between the two and is not proven optimal (``exact`` False)."""
        scale = 1
        while c // scale * self.tokens_hi >= _PRODUCT_LIMIT:
            scale *= 2
        if scale == 1:
            return a, c, True
        return -(-a // scale), max(1, c // scale), False

    def gain(self, cp: cp_model.CpModel, a: int, c: int) -> Expr:
        """``c x tokens - a x e2e``, positive for plans better than a/c. The e2e is copied into a
        variable bounded by c x tokens_max / a, which every plan at least as good as a/c respects,
        so a x e2e cannot overflow 64 bits on large clusters."""
        if a == 0:
            return self.tokens
        hi = c * self.tokens_hi // a + 1
        bounded = cp.new_int_var(0, hi, "e2e_bounded")
        cp.add(bounded == self.e2e)
        return c * self.tokens - a * bounded


def throughput_terms(enc: Encoding) -> Ratio:
    """(requests in flight over all replicas, e2e ns) as CP-SAT variables; ``enc.e2e`` is evaluate's."""
    cp = enc.cp
    # dp x S x attn_dp <= N GPUs and S x q <= the engine's batch limit, so the cluster holds at
    # most N x q_max sequences (N x b for a fixed batch b).
    if isinstance(enc.batch, int):
        batch = cp.new_constant(enc.batch)
        tokens_hi = enc.num_gpus * enc.batch
    else:
        batch = enc.batch
        tokens_hi = enc.num_gpus * enc.space.batch_limit
        # Redundant, for the LP: dp x S <= N / G, so tokens <= floor(N / G) x attn_dp x q_hi, a
        # constant per (shape, batch option) pair.
    tokens = cp.new_int_var(1, tokens_hi, "tokens")
    cp.add_multiplication_equality(tokens, [enc.dp, batch])
    if not isinstance(enc.batch, int):
        cp.add(
            tokens <= sum((enc.num_gpus // o.gpus) * o.attn_dp * opt.q_hi * lit for (o, opt), lit in enc.pair.items())
        )
    return Ratio(tokens, enc.e2e, tokens_hi)


def _improve(
    cp: cp_model.CpModel, better: Sequence[Constraint], objective: Expr | None, deadline: Deadline, minimise: bool
) -> tuple[cp_model.CpSolver, bool] | None:
    """One step: (solver, proven) for a plan satisfying ``better``, pushed as far along
    ``objective`` as the step's budget allows — ``proven`` when the step itself proved that plan
    optimal — or None when CP-SAT proves no such plan exists. Raises SolverLimitError when time
    runs out undecided (``TimedOut``, with the bound the objective solve proved)."""
    if deadline.passed():
        raise TimedOut(deadline.no_plan(), None)
    step = cp.clone()
    for constraint in better:
        step.add(constraint)
    if objective is not None:
        if minimise:
            step.minimize(objective)
        else:
            step.maximize(objective)
    solver, status = solve_within(deadline, step, deadline.step(), deadline.step_work())
    proven = objective is not None and status == cp_model.OPTIMAL
    bound = solver.best_objective_bound if objective is not None and status == cp_model.UNKNOWN else None
    if status == cp_model.UNKNOWN:
        # Nothing better within the step's budget: settle the question without an objective.
        step.clear_objective()
        solver, status = solve_within(deadline, step, deadline.remaining())
    if status == cp_model.INFEASIBLE:
        return None
    if status == cp_model.UNKNOWN:
        raise TimedOut(deadline.no_plan(), bound)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        # MODEL_INVALID carries no solution: reading a value would read past the response's end
        # (the SIGSEGV of issue 14). The encoding keeps every row inside 2^62, so this is a bug.
        raise AssertionError(f"CP-SAT returned {solver.status_name(status)}: {step.validate()}")
    return solver, proven


def minimise_latency(
    enc: Encoding, cp: cp_model.CpModel, deadline: Deadline, best: int | None, layout: Layout | None = None
) -> Outcome:
    e2e = e2e_expr(enc)
    proven, bound = True, None
    while True:
        try:
            step = _improve(cp, [e2e <= best - 1] if best is not None else [], e2e, deadline, minimise=True)
        except TimedOut as exc:
            if best is None:
                raise
            proven, bound = False, _latency_bound(best, exc.bound)
            break
        if step is None:
            break
        solver, optimal = step
        best, layout = solver.value(e2e), read_layout(enc, solver)
        if optimal:
            break  # the step proved it
    return Outcome(proven=proven, e2e=best, layout=layout, bound=bound)


def _latency_bound(best: int, step_bound: float | None) -> float | None:
    """A lower bound on every plan's e2e: the step proved it for plans better than ``best``. (A step
    stopped before CP-SAT had a bound reports 0.0: true, and useless; the tables' bound covers it.)"""
    if step_bound is None or not math.isfinite(step_bound) or step_bound <= 0:
        return None
    return float(min(best, math.ceil(step_bound)))


def maximise_throughput(
    enc: Encoding, cp: cp_model.CpModel, terms: Ratio, deadline: Deadline, a: int, c: int,
    layout: Layout | None = None,
) -> Outcome:
    found, proven, gain_bound = a > 0, True, None
    while True:
        model = cp.clone()
        a_target, c_target, exact = terms.target(a, c)
        gain = terms.gain(model, a_target, c_target)
        try:
            step = _improve(model, [gain >= 1], gain, deadline, minimise=False)
        except TimedOut as exc:
            if not found:
                raise
            proven = False
            # The step asks for gain >= 1, so a proven bound is at least 1: below it, CP-SAT stopped
            # before it had one (it reports 0.0 then, measured) and the number proves nothing.
            if exc.bound is not None and math.isfinite(exc.bound) and exc.bound >= 1:
                gain_bound = GainBound(a_target, c_target, exc.bound)
            break
        if step is None:
            proven = proven and exact
            break
        solver = step[0]
        a, c, found = solver.value(terms.tokens), solver.value(terms.e2e), True
        layout = read_layout(enc, solver)
    return Outcome(proven=proven, tokens=a if found else None, e2e=c, layout=layout, gain=gain_bound)


@dataclass(frozen=True)
class GainBound:
    """What a Dinkelbach step cut short proved: no plan has ``c x tokens - a x e2e`` above ``gain``.
    So tokens / e2e <= a / c + gain / (c x e2e) for every plan, and with the least e2e any plan can
    have, a bound on the ratio."""

    a: int
    c: int
    gain: float

    def tokens_per_s(self, e2e_floor_ns: int, osl: int) -> float:
        ratio = self.a / self.c + self.gain / (self.c * e2e_floor_ns)
        return ratio * osl * 1e9


def run_search(
problem: Problem, deadline: Deadline, only_pins: bool, excluded: Collection[tuple[Shape, int]], seed: Seed
) -> Optimum | NoPlan:
    """The CP-SAT search's optimum, starting from the oracle's seed. The tables and the incumbent
    come before the model, so that a deadline passing while the model is built still leaves a plan."""
    prep_started = time.perf_counter()
    space = SearchSpace(problem, resolve_profile(problem), only_pins=only_pins)
    tables = build_tables(problem, space, deadline.check)
    oracle = Oracle(tables, excluded)
    incumbent = seed(oracle)
    # The model takes about as long to build as the tables did (0.3-0.7 of it, measured on DeepSeek-V3
    # at 512x8xH200): a search that could not begin before the deadline is not started.
    if not deadline.allows(time.perf_counter() - prep_started):
        return _unsearched(oracle, incumbent, deadline)
    model = build_model(problem, only_pins=only_pins, tables=tables)
    enc, cp = model.enc, model.enc.cp
    enforce_all(model)
    for shape, stages in excluded:
        if shape in enc.shape and stages in enc.pp:
            cp.add_bool_or([~enc.shape[shape], ~enc.pp[stages]])
    start = incumbent.layout if incumbent else None
    if problem.objective is Objective.LATENCY:
        out = minimise_latency(enc, cp, deadline, incumbent.e2e_ns if incumbent else None, start)
        if out.e2e is None:
            return NoPlan(enc.tables)
        cp.add(e2e_expr(enc) == out.e2e)
        value = out.e2e
    else:
        terms = throughput_terms(enc)
        if problem.pins.dp is None:
            # Dominance: replicas multiply throughput and change nothing else, so an optimum
            # runs as many as fit; another one must not fit. Cuts the dp dimension away.
            cp.add(enc.gpus_used + enc.gpus_per_replica >= enc.num_gpus + 1)
        a, c = (incumbent.tokens, incumbent.e2e_ns) if incumbent else (0, 1)
        out = maximise_throughput(enc, cp, terms, deadline, a, c, start)
        if out.tokens is None or out.e2e is None:
            return NoPlan(enc.tables)
        cp.add(terms.gain(cp, *terms.target(out.tokens, out.e2e)[:2]) >= 0)  # as good as the best
        value = round(out.tokens * problem.workload.osl * 1e9 / out.e2e)
    return _settle(enc, cp, deadline, out, value, oracle)


def _settle(
    enc: Encoding, cp: cp_model.CpModel, deadline: Deadline, out: Outcome, value: int, oracle: Oracle
) -> Optimum:
    """The optimum, tie-broken while time remains; past the deadline the plan the search reached as it
    is (ties unbroken), and an unproven one with the best bound proven on the objective."""
    layout = out.layout
    if not deadline.passed() and not _one_pair_one_replica(enc):
        try:
            layout = tie_break(enc, cp, deadline)
        except SolverLimitError:
            pass  # time ran out among equally good plans: the one reached stands
    assert layout is not None  # a value was reached, so was a plan
    if out.proven:
        return Optimum(layout, True, value)
    return _unproven(oracle, layout, out)


def _one_pair_one_replica(enc: Encoding) -> bool:
    """Whether every plan of the encoding has the same GPUs, stage count and shape: one (shape, stage
    count) pair and the replicas pinned (``enumerate``'s per-pair searches). The tie-break's objective is
    then a constant and the plan the search reached is already tie-broken; its solve found another plan
    as good and cost 44 of 62 s of a Llama-4-Maverick enumeration on 16x8xL40S."""
    return len(enc.shape) == 1 and len(enc.pp) == 1 and enc.problem.pins.dp is not None


def _unsearched(oracle: Oracle, incumbent: Candidate | None, deadline: Deadline) -> Optimum:
    """The deadline passed before CP-SAT could search: the oracle's incumbent, with the tables' bound."""
    if incumbent is None:
        raise SolverLimitError(deadline.no_plan())
    out = Outcome(proven=False, e2e=incumbent.e2e_ns, tokens=incumbent.tokens, layout=incumbent.layout)
    return _unproven(oracle, incumbent.layout, out)


def _unproven(oracle: Oracle, layout: Layout, out: Outcome) -> Optimum:
    """A plan the search could not prove optimal: its objective, the best bound proven and the gap."""
    exact = objective_exact(oracle.problem, out)
    value = round(exact)
    bound = proven_bound(oracle, out)
    gap = None if bound is None else relative_gap(exact, bound, oracle.problem.objective)
    if gap == 0.0:
        return Optimum(layout, True, value)  # the bound proves it: nothing can be better
    return Optimum(layout, False, value, bound, gap)


def objective_exact(problem: Problem, out: Outcome) -> float:
    """The objective an outcome reached: e2e ns for latency, output tokens/s for throughput (unrounded)."""
    assert out.e2e is not None
    if problem.objective is Objective.LATENCY:
        return out.e2e
    assert out.tokens is not None
    return out.tokens * problem.workload.osl * 1e9 / out.e2e


def proven_bound(oracle: Oracle, out: Outcome) -> float | None:
    """The tightest bound on the objective proven so far: the tables' relaxation, and CP-SAT's when a
    step cut short had proved one (``Optimum.objective_value``'s units). None when neither proved any."""
    tables = table_bound(oracle)
    if oracle.problem.objective is Objective.LATENCY:
        bounds = [b for b in (tables.objective, out.bound) if b is not None]
        return max(bounds) if bounds else None  # both are lower bounds on e2e
    bounds = [tables.objective] if tables.objective is not None else []
    if out.gain is not None and tables.e2e_floor_ns:
        bounds.append(out.gain.tokens_per_s(tables.e2e_floor_ns, oracle.osl))
    return min(bounds) if bounds else None  # both are upper bounds on tokens/s


def tie_break(enc: Encoding, cp: cp_model.CpModel, deadline: Deadline) -> Layout:
    """Among plans as good as the optimum: fewest GPUs, fewest stages, smallest shape."""
    ranks = {o: i for i, o in enumerate(enc.shapes)}
    n = len(enc.shapes)
    step = cp.clone()
    step.minimize(
        enc.gpus_used * (enc.max_stages + 1) * n + enc.stages * n + sum(ranks[o] * lit for o, lit in enc.shape.items())
    )
    solver, status = solve_within(deadline, step, deadline.remaining())
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
