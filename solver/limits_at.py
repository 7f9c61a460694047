"""``solve --limits-at median-error``: plans that meet the TTFT and TPOT limits were their predictions off as
their engine's median measured run at their load.

A plan's ``measured_error`` (``rules.problem.measured_error``) says what its TTFT and TPOT would be off as the
median run of its engine, serving mode and band of requests in flight; a plan held at the limits by the cost model
alone breaks them there wherever the engine ran slower than predicted (disaggregated TensorRT-LLM TTFT: median
error -39 %). Here the planner holds tighter limits instead. The error depends on the band, and the band on the
plan, so the limits are found by rounds:

1. solve with the limits held (at first, the user's);
2. if the plan, off as its band's median run, breaks a limit the user gave, hold that limit at the given value x
   (1 + the band's median error), rounded down to the microsecond: below the plan's own prediction, so the next
   round cannot return it; solve again.

A limit held only falls, each time to one of finitely many values (the given limit x (1 + a band's median error),
one per band), so the rounds end: at most one per band and metric and one more. The plan returned meets every
given limit at its own band's median error.

The limits held are the tightest any round needed, so the rounds may pass up a plan at a lighter load whose band ran
closer to its predictions. On one pool the load is the batch per replica, which the launch commands cap at the
plan's batch, so where the rounds tightened a limit each band with an upper end is also solved once, with the
engine's batch per attention group capped there and the limits held at that band's error (``band_problems``), and
the best plan that meets the limits given is returned. With one attention group per replica that covers every band;
with more, a capped plan may run more than the band's top per replica, and is then judged at its own band like any
other. Disaggregated deployments take the rounds' plan: their load is the requests in flight over both pools, which
no engine setting caps. Half the measured runs were off by more than the median; this is a correction of the bias,
not a guarantee.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Literal, TypeVar

from shardplan.hardware.measured_error import Serving
from shardplan.models import InfeasibleError, SolverLimitError
from shardplan.models.errors import SpecError
from shardplan.rules.disagg_plan import DisaggPlan
from shardplan.rules.plan import Plan
from shardplan.rules.problem import GivenLimits, Objective, Problem, engine_errors, given_limits, measured_error
from shardplan.solver.optimise import solve
from shardplan.solver.search_base import Deadline

LimitsAt = Literal["prediction", "median-error"]
LIMITS_AT: tuple[LimitsAt, ...] = ("prediction", "median-error")

# Bands of requests in flight in the stored figures (four) plus the whole, per metric, and one round more: the most
# the argument in the module docstring allows. Reaching it would mean a round made no progress, which that argument
# rules out; the loop stops there all the same, and the plan's measured_error then still names the broken limit.
MAX_ROUNDS = 2 * 5 + 1

Result = TypeVar("Result")


def check_limits_at(problem: Problem, limits_at: str, modes: tuple[Serving, ...]) -> None:
    """``--limits-at``: one of ``LIMITS_AT``; median-error needs a limit to hold and the engine's measured figures
    in every mode planned (the default profile of its GPU: a profile named or read has no measured runs)."""
    if limits_at not in LIMITS_AT:
        raise SpecError("limits-at", f"{limits_at!r}; one of {', '.join(LIMITS_AT)}")
    if limits_at == "prediction":
        return
    if problem.workload.ttft_ms is None and problem.workload.tpot_ms is None:
        raise SpecError("limits-at", "median-error holds the --ttft-ms and --tpot-ms limits; give one")
    for mode in modes:
        if engine_errors(problem, mode) is None:
            raise SpecError("limits-at", f"median-error needs the measured runs of {problem.engine}'s default "
                                         f"profile ({'one pool' if mode == 'colocated' else 'disaggregated'}); "
                                         "this problem is priced with another profile")


def with_given_limits(problem: Problem) -> Problem:
    """The problem of the first round: the user's limits held, and recorded as given."""
    wl = problem.workload
    return problem.model_copy(update={"limits_given": GivenLimits(ttft_ms=wl.ttft_ms, tpot_ms=wl.tpot_ms)})


def plan_latency(plan: Plan | DisaggPlan) -> tuple[Serving, int, float, float]:
    """What the measured error of a plan is read at: its serving mode, its requests in flight as the runs count
    them (per replica colocated, over the deployment disaggregated), its predicted TTFT and TPOT in ms."""
    metrics = plan.prediction.metrics
    if isinstance(plan, DisaggPlan):
        return "disagg", plan.layout.concurrency, metrics.ttft_ms, metrics.tpot_ms
    return "colocated", plan.layout.batch, metrics.ttft_ms, metrics.tpot_ms


def next_round(problem: Problem, plan: Plan | DisaggPlan) -> Problem | None:
    """The problem of the next round, its limits held lower where ``plan`` (solved for ``problem``), off as its
    band's median run, breaks a given limit; None where it breaks none."""
    serving, in_flight, ttft_ms, tpot_ms = plan_latency(plan)
    found = measured_error(problem, serving, in_flight, ttft_ms, tpot_ms)
    if found is None or not found["over_limit"]:
        return None
    basis = found["band"] or found
    given = given_limits(problem)
    held = {"ttft_ms": problem.workload.ttft_ms, "tpot_ms": problem.workload.tpot_ms}
    for key in found["over_limit"]:
        limit, held_ms = given[key], held[key]
        assert limit is not None and held_ms is not None  # over_limit names only limits given
        held[key] = min(held_ms, held_at(limit, basis[key.removesuffix("_ms")]["median"]))
    recorded = problem.limits_given
    assert recorded is not None  # set by with_given_limits before the first round
    return problem.model_copy(update={
        "workload": problem.workload.model_copy(update=held),
        "limits_given": recorded.model_copy(update={"rounds": recorded.rounds + 1}),
    })


def held_at(limit_ms: float, error: float) -> float:
    """The limit held for ``limit_ms`` given, at a median error ``error`` (predicted / measured - 1): ``limit_ms`` x
    (1 + ``error``), to the microsecond below; rounded first, so that 2,000 x 0.539 is 1,078, not 1,077.999."""
    return math.floor(round(limit_ms * (1 + error) * 1000, 6)) / 1000


def solve_within(problem: Problem, solve: Callable[[Problem], Result],
                 plan_of: Callable[[Result], Plan | DisaggPlan | None],
                 better: Callable[[Plan, Plan], bool] | None = None) -> tuple[Result, str | None]:
    """``solve`` in rounds (the module docstring) from the user's limits in ``problem``: the last round's result,
    and None; a round without a plan (``plan_of`` None: no plan meets the limits held) ends the rounds with it.
    Where the time or work limit stops a round after the first before it has a plan (``SolverLimitError``), the
    round before's result, over a limit at the median error (its ``measured_error`` says which), and why.
    With ``better`` (one pool: whether a plan beats another at the objective), where the rounds tightened a limit,
    each band's plan too (``band_problems``), and the best that meets the limits given."""
    current = with_given_limits(problem)
    result, stopped = solve(current), None
    for _ in range(MAX_ROUNDS - 1):
        plan = plan_of(result)
        following = None if plan is None else next_round(current, plan)
        if following is None:
            break
        try:
            result, current = solve(following), following
        except SolverLimitError as exc:
            stopped = f"the next round, at the limits held lower, was stopped: {exc}"
            break
    if better is None or (current.limits_given is not None and not current.limits_given.rounds and not stopped):
        return result, stopped  # held as given: the plan as predicted, which no band's tighter problem can beat
    for capped in band_problems(current):
        try:
            candidate = solve(capped)
        except SolverLimitError:  # the rounds' result stands; a band the limit left unjudged is no plan
            continue
        plan, incumbent = plan_of(candidate), plan_of(result)
        if not isinstance(plan, Plan) or next_round(capped, plan) is not None:
            continue  # no plan, or one whose load fell in a band that breaks a limit given
        if stopped is not None or not isinstance(incumbent, Plan) or better(plan, incumbent):
            result, stopped = candidate, None
    return result, stopped


def band_problems(problem: Problem) -> list[Problem]:
    """One pool: for each band of requests in flight with an upper end, ``problem`` with the engine's batch per
    attention group capped there (``Problem.max_batch``; launch commands cap the engine at the plan's batch, so this
    is a setting the plan keeps) and each limit given held at that band's median error where its predictions ran
    fast. The rounds hold the tightest limit any round needed; a plan at a lighter load, in a band that ran closer to
    its predictions, may meet the limits given with more to spare (module docstring)."""
    found = engine_errors(problem, "colocated")
    given = problem.limits_given
    if found is None or given is None:
        return []
    out = []
    for band in found.bands:
        if band.high is None:
            continue
        held = {}
        for key, limit in given_limits(problem).items():
            error = getattr(band, key.removesuffix("_ms")).median
            held[key] = None if limit is None else held_at(limit, min(0.0, error))
        cap = band.high if problem.max_batch is None else min(problem.max_batch, band.high)
        out.append(problem.model_copy(update={
            "workload": problem.workload.model_copy(update=held), "max_batch": cap,
            "limits_given": given.model_copy(update={"batch_cap": cap}),
        }))
    return out


def better_at_objective(plan: Plan, other: Plan) -> bool:
    """Whether ``plan`` beats ``other`` at their problem's objective: more output tokens/s over the cluster, or a
    shorter end-to-end latency (``Objective``)."""
    if plan.problem.objective is Objective.THROUGHPUT:
        return plan.prediction.metrics.output_tokens_per_s > other.prediction.metrics.output_tokens_per_s
    return plan.prediction.metrics.e2e_ms < other.prediction.metrics.e2e_ms


def solve_colocated(problem: Problem, deadline: Deadline,
                    limits_at: LimitsAt) -> tuple[Problem, Plan | InfeasibleError]:
    """``solve``'s colocated search (``solver.optimise.solve``), in rounds under median-error, then each band's
    (``solve_within``): the problem of the plan returned (its limits held) and the plan, or why it has none."""

    def attempt(held: Problem) -> tuple[Problem, Plan | InfeasibleError]:
        try:
            return held, solve(held, deadline=deadline)
        except InfeasibleError as exc:
            return held, exc

    if limits_at == "prediction":
        return attempt(problem)
    started = time.perf_counter()
    (held, found), stopped = solve_within(problem, attempt, lambda tried: tried[1] if isinstance(tried[1], Plan)
                                         else None, better_at_objective)
    if not isinstance(found, Plan):
        return held, found
    update: dict[str, object] = {"solve_time_s": time.perf_counter() - started}  # every round's, not the last's
    if stopped is not None:
        update["problem"] = stopped_at(held, stopped)
    return held, found.model_copy(update=update)


def stopped_at(problem: Problem, why: str) -> Problem:
    """``problem`` (a round's, its limits given recorded) marked as the last round: the rounds stopped for ``why``."""
    given = problem.limits_given
    assert given is not None  # a round's problem: with_given_limits set it
    return problem.model_copy(update={"limits_given": given.model_copy(update={"stopped": why})})


__all__ = [
    "LIMITS_AT", "MAX_ROUNDS", "LimitsAt", "band_problems", "better_at_objective", "check_limits_at", "held_at",
    "next_round", "plan_latency", "solve_colocated", "solve_within", "stopped_at", "with_given_limits",
]
