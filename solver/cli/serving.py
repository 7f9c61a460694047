"""``shardplan solve --serving disagg|auto`` and ``--rate R``: plan one or both serving modes.

``colocated`` without ``--rate`` is ``solve``'s own path (main.py), unchanged. Here:
- ``--serving disagg``: the best disaggregated deployment (tokens/s per GPU, or the fewest GPUs for
  ``--rate``), printed as ``evaluate --serving disagg`` prints one, with ``solve_time_s``;
- ``--serving colocated --rate R``: the fewest colocated replicas that sustain R;
- ``--serving auto``: both, the better chosen by the objective; the JSON is the chosen plan's object
  with ``serving``, ``chosen`` and ``modes`` {colocated, disagg} (each mode's object, or its
  infeasibility), and the text shows both.
The objective is tokens/s per GPU (``--objective throughput``); a disaggregated latency objective is
not built, so asking for one is bad input.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, cast

import click

from shardplan.hardware.measured_error import Serving
from shardplan.models import InfeasibleError, SolverLimitError, SpecError
from shardplan.models.files import json_text
from shardplan.rules.capacity import MemoryFits
from shardplan.rules.disagg_plan import DisaggPlan
from shardplan.rules.plan import Plan
from shardplan.rules.problem import Objective, Problem
from shardplan.solver.cli.disagg import print_disagg
from shardplan.solver.cli.inputs import (
    ProblemArgs,
    build_problem,
    check_decodes,
    check_experts_out,
    check_pool_routing,
    engine_with_emit,
)
from shardplan.solver.cli.outputs import OutputFiles, say_wrote
from shardplan.solver.cli.results import infeasible_dict, launch_dict, solved_dict
from shardplan.solver.cli.working import searching
from shardplan.solver.disagg.frontier import DisaggEnumeration
from shardplan.solver.disagg.search import DisaggResult
from shardplan.solver.disagg.serving import (
    DisaggOutcome,
    better_mode,
    colocated_rate,
    colocated_throughput,
    rate_order,
    solve_disagg,
    throughput_problem,
    why_no_deployment,
)
from shardplan.solver.disagg.workers import RATE_UNITS_PER_RPS
from shardplan.solver.limits_at import LimitsAt, better_at_objective, check_limits_at, solve_within
from shardplan.solver.optimise import Deadline
from shardplan.solver.outputs import report
from shardplan.solver.outputs.disagg_json import disagg_dict
from shardplan.solver.outputs.launch.disagg import emit_either
from shardplan.solver.placement.plan import write_experts

MAX_RATE_RPS = 1e6
MEMORY = MemoryFits()  # MEM-001, to name when a model fits no colocated layout at all


def check_serving_inputs(problem: Problem, rate_rps: float | None, objective_given: bool, serving: str) -> None:
    if rate_rps is not None and not (rate_rps > 0 and rate_rps <= MAX_RATE_RPS):
        raise SpecError("rate", f"must be a number of requests/s in (0, {MAX_RATE_RPS:g}], got {rate_rps:g}")
    if objective_given and problem.objective is Objective.LATENCY:
        # --rate alone leaves --serving colocated: name what actually asked for a throughput question.
        asked = "--rate plans the fewest GPUs for the rate" if serving == "colocated" else (
            f"--serving {serving} plans tokens/s per GPU (or the fewest GPUs for --rate)")
        raise SpecError("objective", f"{asked}; a latency objective is planned only with --serving colocated "
                                     "and without --rate")
    if serving != "colocated":
        check_decodes(problem)
    if serving != "colocated" and problem.workload.batch is not None:
        # The disaggregated search decides the requests in flight; a given one is evaluate's question.
        raise SpecError("batch", f"--serving {serving} decides the requests in flight; --batch fixes one colocated "
                                 "layout's batch (evaluate --serving disagg --batch C prices a given concurrency)")
    if serving != "colocated":
        for degree, value in problem.pins.model_dump().items():
            if value is not None:
                raise SpecError(degree.replace("_", "-"), f"--serving {serving} chooses each pool's degrees; "
                                                          "pins apply to one colocated layout")


def _colocated(problem: Problem, rate_rps: float | None, deadline: Deadline) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        if rate_rps is None:
            plan = colocated_throughput(problem, deadline=deadline)
        else:
            found = colocated_rate(problem, rate_rps, deadline)
            if found is None and MEMORY.fits_nowhere(problem):  # the model fits no layout: that, not the rate
                raise InfeasibleError([(MEMORY.id, MEMORY.conflict_message(problem))])
            if found is None:
                raise InfeasibleError([("SLA-001", f"no colocated replicas sustain {rate_rps:g} requests/s "
                                                   "within the limits on this cluster")])
            # the replicas' plan is decoded afresh, without a solve time: the whole search's
            plan = found.plan.model_copy(update={"solve_time_s": time.perf_counter() - started})
    except InfeasibleError as exc:
        return {"serving": "colocated", **infeasible_dict(throughput_problem(problem), exc)}
    return {"serving": "colocated", **solved_dict(plan, report.binding_constraints(plan)), "_plan": plan}


def _disagg(problem: Problem, rate_rps: float | None, deadline: Deadline) -> dict[str, Any]:
    started = time.perf_counter()
    outcome = solve_disagg(throughput_problem(problem), rate_rps, deadline)
    plan = outcome.result.plan
    if plan is None and not outcome.result.proven:
        # The search stopped before it had proposed every deployment: the rules that refused the ones it
        # did are no proof that none exists, so say what colocated says when its limit cuts it short.
        raise SolverLimitError(deadline.no_plan() if deadline.passed() else
                               f"no disaggregated deployment found in {outcome.result.proposals} proposals")
    if plan is None:
        why = why_no_deployment(outcome, rate_rps)
        return {"serving": "disagg", **infeasible_dict(throughput_problem(problem), why)}
    status = "optimal" if outcome.result.proven else "feasible"
    data = disagg_dict(plan, status=status, extra={
        "solve_time_s": round(time.perf_counter() - started, 3),
        "proposals": outcome.result.proposals,
        **unproven_disagg(outcome),
    })
    data["_plan"] = plan
    return data


def unproven_disagg(outcome: DisaggOutcome) -> dict[str, Any]:
    """A feasible deployment's distance from optimal, as colocated's ``unproven``: ``bound`` the most
    tokens/s per GPU any deployment reaches (``search.per_gpu_bound``; null for --rate, whose bound on GPUs is
    not kept), ``gap`` = (bound - objective) / objective, the objective the deployment's rate per GPU as the
    search counts it (``Pools.served``: its full rate, ``Pools.rate``, or below it the rate its requests in
    flight carry, the steady state's at least); an optimal deployment has neither."""
    result, pools = outcome.result, outcome.pools
    if result.proven or result.choice is None:
        return {}
    if result.bound_per_gpu is None:
        return {"bound": None, "gap": None}
    served = pools.served(result.choice)  # memoised: the search judged it
    assert served is not None, "a returned deployment keeps every rule"
    value = Fraction(served.units, pools.gpus(result.choice))
    tokens_per_unit = pools.problem.workload.osl / RATE_UNITS_PER_RPS
    return {"bound": round(float(result.bound_per_gpu) * tokens_per_unit, 3),
            "gap": round(float((result.bound_per_gpu - value) / value), 6)}


@dataclass(frozen=True)
class ServingResult:
    """Both or one mode planned: ``data`` is what ``--json`` prints (the chosen plan's object; for auto
    with ``serving``, ``chosen`` and ``modes``), ``plans`` each mode's plan (None when infeasible)."""

    problem: Problem
    serving: str
    rate_rps: float | None
    data: dict[str, Any]
    modes: dict[str, dict[str, Any]]
    plans: dict[str, Plan | DisaggPlan | None]
    chosen: str | None
    cut_by_work: tuple[str, ...] = ()  # the modes whose plan the work limit left unproven

    @property
    def chosen_plan(self) -> Plan | DisaggPlan | None:
        return None if self.chosen is None else self.plans[self.chosen]

    def infeasible(self) -> InfeasibleError:
        """Every mode's conflicting rules, each message naming its mode."""
        return InfeasibleError([(c["rule"], f"{mode}: {c['message']}")
                                for mode, d in self.modes.items() for c in d["conflict"]])


TIME_LIMIT = "time-limit"  # a mode's status when the time limit stopped it before any plan (auto only)
WORK_LIMIT = "work-limit"  # the same when the work limit (--work-limit or its default) stopped it
CUT_SHORT = (TIME_LIMIT, WORK_LIMIT)


def _cut_short(mode: str, exc: SolverLimitError, deadline: Deadline) -> dict[str, Any]:
    """A mode a limit stopped before any plan, named by the limit that did (a script tells which to raise)."""
    return {"serving": mode, "status": WORK_LIMIT if deadline.by_work() else TIME_LIMIT, "message": str(exc)}


MIN_MODE_S = 0.01  # what a mode gets when the modes before it spent the whole limit: it says so at once


def mode_budget_s(time_limit_s: float | None, spent_s: float, modes_left: int) -> float | None:
    """A mode's share of ``--time-limit``: an even share of what the modes before it left, so that auto's two
    modes together keep to the limit (each used to get all of it: 18.7 s under --time-limit 5), and a mode that
    finishes early leaves its time to the next."""
    if time_limit_s is None:
        return None
    left_s = time_limit_s - spent_s
    return left_s / modes_left if left_s > 0 else MIN_MODE_S


Planner = Callable[[Problem, "float | None", Deadline], dict[str, Any]]


def _plan_mode(mode: str, planner: Planner, problem: Problem, rate_rps: float | None, deadline: Deadline,
               limits_at: LimitsAt) -> dict[str, Any]:
    """One mode's answer (``_colocated``, ``_disagg``); under median-error, the best of its rounds and, colocated,
    of its bands (``solver/limits_at.py``)."""
    if limits_at == "prediction":
        return planner(problem, rate_rps, deadline)
    better = None if mode == "disagg" else better_at_objective if rate_rps is None else fewer_gpus
    started = time.perf_counter()
    data, stopped = solve_within(problem, lambda p: planner(p, rate_rps, deadline), lambda data: data.get("_plan"),
                                 better)
    if stopped is not None:  # the round before's plan, whose JSON was built before the rounds stopped
        data["limits_at"]["stopped"] = stopped
    if data.get("solve_time_s") is not None:
        data["solve_time_s"] = round(time.perf_counter() - started, 3)  # every round's, not the last's
    return data


def fewer_gpus(plan: Plan, other: Plan) -> bool:
    """Whether ``plan`` beats ``other`` at ``--rate`` (``rate_order``, as ``better_mode`` compares the modes)."""
    return rate_order(plan) < rate_order(other)


def plan_serving(problem: Problem, serving: str, rate_rps: float | None, time_limit_s: float | None,
                 work_limit: float | None = None, limits_at: LimitsAt = "prediction") -> ServingResult:
    """Plan the modes ``serving`` names (colocated, disagg or auto) and choose the better. In auto, a mode
    a limit stopped before any plan gets the status ``time-limit`` or ``work-limit`` (the limit that did)
    and the other is still planned and may be chosen; when no mode has a plan and one was cut short, the
    limit is the error (nothing is proven infeasible). ``work_limit`` (``search_base.Deadline``) bounds
    each mode's search whole: auto's colocated answer is then the colocated mode's, whatever the other
    mode needs. ``limits_at`` median-error plans each mode in rounds (``solver/limits_at.py``), all within the
    mode's limits."""
    modes: dict[str, dict[str, Any]] = {}
    planners: dict[str, Planner] = {"colocated": _colocated, "disagg": _disagg}
    selected = [mode for mode in planners if serving in (mode, "auto")]
    started = time.monotonic()
    deadlines: dict[str, Deadline] = {}
    for index, mode in enumerate(selected):
        budget_s = time_limit_s if len(selected) == 1 else mode_budget_s(time_limit_s, time.monotonic() - started,
                                                                           len(selected) - index)
        deadlines[mode] = Deadline(budget_s, work_limit)
        try:
            modes[mode] = _plan_mode(mode, planners[mode], problem, rate_rps, deadlines[mode], limits_at)
        except SolverLimitError as exc:
            if serving != "auto":
                raise
            modes[mode] = _cut_short(mode, exc, deadlines[mode])
    plans = {mode: data.pop("_plan", None) for mode, data in modes.items()}
    cut_short = [f"{mode}: {data['message']}" for mode, data in modes.items() if data["status"] in CUT_SHORT]
    if cut_short and all(plan is None for plan in plans.values()):
        raise SolverLimitError("; ".join(cut_short))
    for data in modes.values():
        if rate_rps is not None:
            data["rate_rps"] = rate_rps
    chosen = better_mode(*choosable(modes, plans), rate_rps)
    if serving == "auto":
        base = modes[chosen] if chosen else modes["colocated"]
        data = {**base, "serving": "auto", "chosen": chosen, "modes": modes}
    else:
        data = modes[serving]
    cut = tuple(mode for mode, data in modes.items() if data["status"] == "feasible" and deadlines[mode].by_work())
    return ServingResult(problem, serving, rate_rps, data, modes, plans, chosen, cut)


def choosable(modes: dict[str, dict[str, Any]],
              plans: dict[str, Plan | DisaggPlan | None]) -> tuple[Plan | None, DisaggPlan | None]:
    """The colocated and disaggregated plans auto chooses between. Under ``--limits-at median-error`` a mode whose
    rounds a limit stopped (``limits_at.stopped``) holds a plan over a limit at the median error: it is chosen only
    where the other mode has no plan that meets them either."""
    meets = {mode: plan for mode, plan in plans.items()
             if plan is not None and not (modes[mode].get("limits_at") or {}).get("stopped")}
    kept = meets or plans
    colocated, disagg = kept.get("colocated"), kept.get("disagg")
    assert colocated is None or isinstance(colocated, Plan)
    assert disagg is None or isinstance(disagg, DisaggPlan)
    return colocated, disagg


@dataclass(frozen=True)
class ServingOutputs:
    """The files and the launch commands ``solve --serving`` gives of the chosen plan."""

    dag_path: str | None = None
    detail: str = "logical"
    emit_engine: str | None = None
    report_path: str | None = None
    experts_out: str | None = None

    def check(self, outputs: OutputFiles, serving: str) -> None:
        """Before any work: each path writable, the DAG's format known, expert placement only colocated
        (placement per pool is not built, as ``evaluate --serving disagg`` says)."""
        if self.experts_out is not None and serving != "colocated":
            raise SpecError("experts-out", f"expert placement per pool is not supported with --serving {serving} "
                                           "yet (--serving colocated --rate R writes it)")
        outputs.add("dag", self.dag_path)
        outputs.add("report", self.report_path)
        outputs.add("experts-out", self.experts_out)
        if self.dag_path:
            # networkx (about 0.1 s of CPU to import) loaded lazily on purpose: only a DAG needs it.
            from shardplan.solver.dag.export import writer_for

            writer_for(self.dag_path)

    def write(self, result: ServingResult, outputs: OutputFiles) -> None:
        """The chosen plan's files to their temporaries, its launch under ``launch``; nothing if no plan."""
        plan = result.chosen_plan
        if plan is None:
            return
        if self.dag_path:
            from shardplan.solver.dag.disagg import serving_dag  # lazily, as in check
            from shardplan.solver.dag.export import write_graph

            write_graph(serving_dag(plan, self.detail), outputs.temp("dag"))
        if self.experts_out and isinstance(plan, Plan):
            write_experts(outputs.temp("experts-out"), plan.experts)
        if self.emit_engine:
            result.data["launch"] = launch_dict(self.emit_engine, emit_either(plan, self.emit_engine))
        if self.report_path:
            page = report.serving_report(result.problem, result.modes, result.chosen, result.serving,
                                         result.rate_rps)
            report.write_report(outputs.temp("report"), page)


def prepare_serving(args: ProblemArgs, serving: str, rate_rps: float | None, objective_given: bool,
                    out: ServingOutputs, outputs: OutputFiles, limits_at: str = "prediction") -> Problem:
    """The checks of ``solve --serving`` in the order the CLI makes them (outputs, engine, problem,
    serving inputs), then the problem; ``args.engine`` becomes the ``--emit`` engine as in ``solve``."""
    out.check(outputs, serving)
    check_pool_routing(args, serving)
    problem = build_problem(replace(args, engine=engine_with_emit(args.engine, out.emit_engine)))
    check_serving_inputs(problem, rate_rps, objective_given, serving)
    planned: tuple[Serving, ...] = ("colocated", "disagg") if serving == "auto" else (cast(Serving, serving),)
    check_limits_at(problem, limits_at, planned)
    check_experts_out(problem, out.experts_out)
    return problem


def run_serving(problem: Problem, serving: str, rate_rps: float | None, time_limit_s: float | None,
                out: ServingOutputs, outputs: OutputFiles, work_limit: float | None = None,
                limits_at: LimitsAt = "prediction") -> ServingResult:
    """Plan, and write the chosen plan's files (renamed into place; nothing when no mode has a plan)."""
    result = plan_serving(problem, serving, rate_rps, time_limit_s, work_limit, limits_at)
    out.write(result, outputs)
    if result.chosen is not None:
        outputs.commit()
    return result


def solve_serving(problem: Problem, serving: str, rate_rps: float | None, time_limit_s: float | None,
                  as_json: bool, out: ServingOutputs, outputs: OutputFiles, work_limit: float | None = None,
                  work_note: str = "", limits_at: LimitsAt = "prediction") -> None:
    """Plan, write the chosen plan's files (renamed into place before anything prints), print; raises
    InfeasibleError (after the JSON) when no mode has a plan."""
    with searching("solving", time_limit_s, quiet=as_json, work_limit=work_limit):
        result = run_serving(problem, serving, rate_rps, time_limit_s, out, outputs, work_limit, limits_at)
    launch = result.data.get("launch")
    if as_json:
        click.echo(json_text(result.data, indent=2, sort_keys=False))
    elif launch is not None:
        click.echo(launch["script"], nl=False)
    else:
        print_modes(result.modes, result.chosen, serving)
        if result.cut_by_work:  # the work limit, not a proof, ended a mode's search with a plan
            click.echo(f"{', '.join(result.cut_by_work)}: {work_note}")
        for path in (out.dag_path, out.report_path, out.experts_out):
            if path and result.chosen is not None:
                say_wrote(path)
    if result.chosen is None:
        raise result.infeasible()


def _summary(mode: str, data: dict[str, Any]) -> str:
    if data["status"] in CUT_SHORT:
        return f"{mode:<10} {data['message']}"
    if data["status"] == "infeasible":
        rules = ", ".join(sorted({c["rule"] for c in data["conflict"]}))
        return f"{mode:<10} infeasible ({rules})"
    m = data["metrics"]
    return (f"{mode:<10} {data['num_gpus']:>4} GPUs  {m['output_tokens_per_s_per_gpu']:>9,.1f} tokens/s/GPU  "
            f"{m['output_tokens_per_s_per_user']:>7,.1f} tokens/s/user  TTFT {m['ttft_ms']:,.0f} ms  "
            f"TPOT {m['tpot_ms']:.1f} ms  {m['output_tokens_per_s'] / data['workload']['osl']:,.2f} requests/s"
            f"{_over_at_median_error(data)}")


def _over_at_median_error(data: dict[str, Any]) -> str:
    """What a mode's row adds where its plan, off as its engine's median run at its load, would break a limit
    (``measured_error.over_limit``): the modes' errors differ, so a choice by the predictions alone may not hold."""
    found = data.get("measured_error")
    if not found or not found["over_limit"]:
        return ""
    return "  (over its limit at the median error: " + ", ".join(report.over_limit_parts(found)) + ")"


def print_modes(modes: dict[str, dict[str, Any]], chosen: str | None, serving: str) -> None:
    for mode, data in modes.items():
        if data["status"] in ("infeasible", *CUT_SHORT):
            continue
        if mode == "disagg":
            print_disagg(data)
        else:
            deg = data["degrees"]
            shape = ", ".join(f"{k}={deg[k]}" for k in ("dp", "pp", "tp", "sp", "ep") if deg.get(k, 1) != 1)
            click.echo(f"{data['model']}, colocated, {data['num_gpus']} GPUs ({shape or '1 GPU'}): {data['status']}")
            if (held := report.limits_at_text(data)) is not None:
                click.echo(f"  {held}")
    if serving == "auto" or len(modes) > 1:
        click.echo("both modes:")
        for mode, data in modes.items():
            mark = " <- chosen" if mode == chosen else ""
            click.echo("  " + _summary(mode, data) + mark)
    else:
        for mode, data in modes.items():
            click.echo("  " + _summary(mode, data))




def disagg_rows(run: DisaggEnumeration) -> Iterator[dict[str, Any]]:
    """Each deployment ``run`` finds, as its JSON object with its ``index``, as found."""
    for plan in run:
        yield {"index": run.count - 1, **disagg_dict(plan, status="feasible")}


def no_deployment(run: DisaggEnumeration) -> InfeasibleError:
    """Why an enumeration found nothing: the rules that refused every pair, as ``solve`` says it."""
    return why_no_deployment(DisaggOutcome(DisaggResult(None, None, not run.partial, 0), run.pools, 0.0))


def disagg_enumeration_dict(rows: list[dict[str, Any]], run: DisaggEnumeration) -> dict[str, Any]:
    """``enumerate --serving disagg --json``'s object: count, the frontier's indices, every row marked."""
    pareto = run.frontier.indices
    marked = [{**row, "pareto": row["index"] in pareto} for row in rows]
    return {"count": run.count, "pareto": pareto, "plans": marked, "partial": run.partial}


def end_of_frontier(problem: Problem, rows: list[dict[str, Any]], pareto: list[int], count: int, partial: bool,
                    jsonl: bool, as_json: bool, report_path: str | None, outputs: OutputFiles | None,
                    json_object: Callable[[], dict[str, Any]], summary: str) -> None:
    """How an enumeration on the tokens/s per GPU against tokens/s per user axes ends: the report written
    and renamed into place, then ``--jsonl``'s last line, or (``--jsonl`` wins) ``--json``'s object, or the
    table's ``summary`` line and where the report went."""
    if report_path and outputs is not None:
        page = report.frontier_report(problem, rows, pareto, partial)
        report.write_report(outputs.temp("report"), page)
        outputs.commit()
    if jsonl:
        click.echo(json_text({"type": "frontier", "count": count, "pareto": pareto, "partial": partial}))
    elif as_json:
        click.echo(json_text(json_object(), indent=2))
    else:
        click.echo(summary)
        if report_path:
            say_wrote(report_path)


def enumerate_disagg(problem: Problem, as_json: bool, jsonl: bool, limit: int | None,
                     time_limit_s: float | None, report_path: str | None = None,
                     outputs: OutputFiles | None = None, work_limit: float | None = None) -> None:
    """``enumerate --serving disagg``: a deployment per pair of worker candidates as found (``--jsonl``
    one per line, then ``{"type": "frontier", "count", "pareto", "partial"}``; ``--json`` one object
    ``{"count", "pareto", "plans", "partial"}``; a table otherwise), and the frontier of tokens/s per GPU
    against tokens/s per user. Nothing feasible is infeasible (exit 1). ``report_path``: the frontier's
    HTML page, written through ``outputs`` (every row is kept for it) and renamed before the summary."""
    run = DisaggEnumeration(throughput_problem(problem), limit, time_limit_s, work_limit)
    rows: list[dict[str, Any]] = []
    for row in disagg_rows(run):
        if jsonl:
            click.echo(json_text(row, sort_keys=False))
        if as_json or report_path:
            rows.append(row)
        if not (as_json or jsonl):
            click.echo(f"{row['index']:>4}  " + _summary("disagg", row) + "  " + report.pools_brief(row))
    if run.count == 0:
        if run.partial and (run.cut_short or run.deadline.passed()):  # stopped before any deployment: nothing proven
            raise SolverLimitError(run.deadline.no_plan("deployment"))
        exc = no_deployment(run)
        if as_json:  # solve's infeasible object, as colocated enumerate prints it; the line goes to stderr
            click.echo(json_text(infeasible_dict(throughput_problem(problem), exc), indent=2))
        raise exc
    pareto = run.frontier.indices
    end_of_frontier(problem, rows, pareto, run.count, run.partial, jsonl, as_json, report_path, outputs,
                    lambda: disagg_enumeration_dict(rows, run),
                    f"{run.count} deployments{' (partial)' if run.partial else ''}; frontier of tokens/s/GPU "
                    f"against tokens/s/user: {', '.join(map(str, pareto))}")


__all__ = ["ServingOutputs", "ServingResult", "check_serving_inputs", "disagg_enumeration_dict", "disagg_rows",
           "end_of_frontier", "enumerate_disagg", "no_deployment", "plan_serving",
           "prepare_serving", "run_serving", "solve_serving"]
