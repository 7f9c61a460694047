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

import json
import time
from typing import Any

import click

from shardplan.models import InfeasibleError, SpecError
from shardplan.rules.plan import Plan
from shardplan.rules.problem import Objective, Problem
from shardplan.solver.cli.disagg import print_disagg
from shardplan.solver.cli.results import infeasible_dict, solved_dict
from shardplan.solver.disagg.frontier import DisaggEnumeration
from shardplan.solver.disagg.search import DisaggResult
from shardplan.solver.disagg.serving import (
    DisaggOutcome,
    better_mode,
    colocated_rate,
    colocated_throughput,
    solve_disagg,
    throughput_problem,
    why_no_deployment,
)
from shardplan.solver.optimise import Deadline
from shardplan.solver.outputs import report
from shardplan.solver.outputs.disagg_json import disagg_dict

MAX_RATE_RPS = 1e6


def check_serving_inputs(problem: Problem, rate_rps: float | None, objective_given: bool, serving: str) -> None:
    if rate_rps is not None and not (rate_rps > 0 and rate_rps <= MAX_RATE_RPS):
        raise SpecError("rate", f"must be a number of requests/s in (0, {MAX_RATE_RPS:g}], got {rate_rps:g}")
    if objective_given and problem.objective is Objective.LATENCY:
        raise SpecError("objective", f"--serving {serving} plans tokens/s per GPU (or the fewest GPUs for --rate); "
                                     "a latency objective is only planned colocated")
    if serving != "colocated" and problem.workload.osl < 2:
        raise SpecError("osl", "a disaggregated deployment decodes after the first token: give --osl >= 2")
    if serving != "colocated":
        for degree, value in problem.pins.model_dump().items():
            if value is not None:
                raise SpecError(degree.replace("_", "-"), f"--serving {serving} chooses each pool's degrees; "
                                                          "pins apply to one colocated layout")


def _colocated(problem: Problem, rate_rps: float | None, time_limit_s: float | None) -> dict[str, Any]:
    try:
        if rate_rps is None:
            plan = colocated_throughput(problem, time_limit_s)
        else:
            found = colocated_rate(problem, rate_rps, Deadline(time_limit_s))
            if found is None:
                raise InfeasibleError([("SLA-001", f"no colocated replicas sustain {rate_rps:g} requests/s "
                                                   "within the limits on this cluster")])
            plan = found.plan
    except InfeasibleError as exc:
        return {"serving": "colocated", **infeasible_dict(throughput_problem(problem), exc)}
    return {"serving": "colocated", **solved_dict(plan, report.binding_constraints(plan)), "_plan": plan}


def _disagg(problem: Problem, rate_rps: float | None, time_limit_s: float | None) -> dict[str, Any]:
    started = time.perf_counter()
    outcome = solve_disagg(throughput_problem(problem), rate_rps, Deadline(time_limit_s))
    plan = outcome.result.plan
    if plan is None:
        return {"serving": "disagg", **infeasible_dict(throughput_problem(problem), why_no_deployment(outcome))}
    status = "optimal" if outcome.result.proven else "feasible"
    data = disagg_dict(plan, status=status, extra={
        "solve_time_s": round(time.perf_counter() - started, 3),
        "proposals": outcome.result.proposals,
    })
    data["_plan"] = plan
    return data


def solve_serving(problem: Problem, serving: str, rate_rps: float | None, time_limit_s: float | None,
                  as_json: bool) -> bool:
    """Plan, print; True when nothing is feasible (the caller exits 1 after the one line)."""
    modes: dict[str, dict[str, Any]] = {}
    if serving in ("colocated", "auto"):
        modes["colocated"] = _colocated(problem, rate_rps, time_limit_s)
    if serving in ("disagg", "auto"):
        modes["disagg"] = _disagg(problem, rate_rps, time_limit_s)
    plans = {mode: data.pop("_plan", None) for mode, data in modes.items()}
    for data in modes.values():
        if rate_rps is not None:
            data["rate_rps"] = rate_rps
    chosen = better_mode(plans.get("colocated"), plans.get("disagg"), rate_rps)
    if serving == "auto":
        base = modes[chosen] if chosen else modes["colocated"]
        data = {**base, "serving": "auto", "chosen": chosen, "modes": modes}
    else:
        data = modes[serving]
    if as_json:
        click.echo(json.dumps(data, indent=2, sort_keys=False))
    else:
        print_modes(modes, chosen, serving, plans)
    if chosen is None:
        conflicts = [(c["rule"], f"{mode}: {c['message']}") for mode, d in modes.items() for c in d["conflict"]]
        raise InfeasibleError(conflicts)
    return False


def _summary(mode: str, data: dict[str, Any]) -> str:
    if data["status"] == "infeasible":
        rules = ", ".join(sorted({c["rule"] for c in data["conflict"]}))
        return f"{mode:<10} infeasible ({rules})"
    m = data["metrics"]
    return (f"{mode:<10} {data['num_gpus']:>4} GPUs  {m['output_tokens_per_s_per_gpu']:>9,.1f} tokens/s/GPU  "
            f"{m['output_tokens_per_s_per_user']:>7,.1f} tokens/s/user  TTFT {m['ttft_ms']:,.0f} ms  "
            f"TPOT {m['tpot_ms']:.1f} ms  {m['output_tokens_per_s'] / data['workload']['osl']:,.2f} requests/s")


def print_modes(modes: dict[str, dict[str, Any]], chosen: str | None, serving: str,
                plans: dict[str, Plan | Any]) -> None:
    for mode, data in modes.items():
        if mode == "disagg" and data["status"] != "infeasible":
            print_disagg(data)
        elif mode == "colocated" and data["status"] != "infeasible":
            deg = data["degrees"]
            shape = ", ".join(f"{k}={deg[k]}" for k in ("dp", "pp", "tp", "sp", "ep") if deg.get(k, 1) != 1)
            click.echo(f"{data['model']}, colocated, {data['num_gpus']} GPUs ({shape or '1 GPU'}): {data['status']}")
    if serving == "auto" or len(modes) > 1:
        click.echo("both modes:")
        for mode, data in modes.items():
            mark = " <- chosen" if mode == chosen else ""
            click.echo("  " + _summary(mode, data) + mark)
    else:
        for mode, data in modes.items():
            click.echo("  " + _summary(mode, data))




def enumerate_disagg(problem: Problem, as_json: bool, jsonl: bool, limit: int | None,
                     time_limit_s: float | None) -> None:
    """``enumerate --serving disagg``: a deployment per pair of worker candidates as found (``--jsonl``
    one per line, then ``{"type": "frontier", "count", "pareto", "partial"}``; ``--json`` one object
    ``{"count", "pareto", "plans", "partial"}``; a table otherwise), and the frontier of tokens/s per GPU
    against tokens/s per user. Nothing feasible is infeasible (exit 1)."""
    run = DisaggEnumeration(throughput_problem(problem), limit, time_limit_s)
    rows: list[dict[str, Any]] = []
    for plan in run:
        row = {"index": run.count - 1, **disagg_dict(plan, status="feasible")}
        if jsonl:
            click.echo(json.dumps(row, sort_keys=False))
        elif as_json:
            rows.append(row)
        else:
            click.echo(f"{row['index']:>4}  " + _summary("disagg", row) + "  " + _pools_brief(row))
    if run.count == 0:
        raise why_no_deployment(DisaggOutcome(DisaggResult(None, None, not run.partial, 0), run.pools, 0.0))
    pareto = run.frontier.indices
    if jsonl:
        click.echo(json.dumps({"type": "frontier", "count": run.count, "pareto": pareto, "partial": run.partial}))
    elif as_json:
        marked = [{**row, "pareto": row["index"] in pareto} for row in rows]
        click.echo(json.dumps({"count": run.count, "pareto": pareto, "plans": marked, "partial": run.partial},
                              indent=2))
    else:
        click.echo(f"{run.count} deployments{' (partial)' if run.partial else ''}; frontier of tokens/s/GPU "
                   f"against tokens/s/user: {', '.join(map(str, pareto))}")


def _pools_brief(row: dict[str, Any]) -> str:
    def one(pool: dict[str, Any]) -> str:
        deg = pool["degrees"]
        shape = ",".join(f"{k}={deg[k]}" for k in ("pp", "tp", "sp", "attn_dp") if deg[k] != 1) or "1 GPU"
        return f"{pool['workers']}x({shape})"

    return f"prefill {one(row['prefill'])} decode {one(row['decode'])}"


__all__ = ["check_serving_inputs", "enumerate_disagg", "solve_serving"]
