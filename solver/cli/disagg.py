"""``shardplan evaluate --serving disagg``: price and judge a prefill pool and a decode pool.

The shared options give the model, cluster, workload and precision; ``--batch`` is the requests in
flight over the whole deployment. The single-pool degree flags and the expert-placement options do not
apply (the degrees are given per pool; placement per pool is not built yet), and saying so is better
than ignoring them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import click

from shardplan.models import SpecError
from shardplan.models.files import json_text
from shardplan.rules.catalog import errors_of
from shardplan.rules.disagg_plan import check_disagg
from shardplan.solver.cli.inputs import (
    ProblemArgs,
    build_problem,
    check_decodes,
    check_pool_routing,
    engine_with_emit,
)
from shardplan.solver.cli.outputs import OutputFiles, say_wrote
from shardplan.solver.cli.pools import disagg_layout
from shardplan.solver.cli.results import launch_dict
from shardplan.solver.cost.disagg import evaluate_disagg
from shardplan.solver.outputs import report
from shardplan.solver.outputs.disagg_json import disagg_dict
from shardplan.solver.outputs.launch.disagg import emit_disagg


@dataclass(frozen=True)
class DisaggOutputs:
    """What ``evaluate --serving disagg`` writes or prints besides the plan."""

    dag_path: str | None
    detail: str
    emit_engine: str | None
    experts_out: str | None


def refuse_single_pool_options(args: ProblemArgs, experts_out: str | None) -> None:
    for degree, value in args.pins.items():
        if value is not None:
            raise SpecError(degree.replace("_", "-"), "with --serving disagg give the degrees per pool "
                                                      "(--prefill KEY=VALUE,..., --decode KEY=VALUE,...)")
    if experts_out is not None:
        raise SpecError("experts-out", "expert placement per pool is not supported with --serving disagg yet")
    check_pool_routing(args, "disagg")


def evaluated_disagg(args: ProblemArgs, prefill: str | None, decode: str | None, out: DisaggOutputs,
                     inputs: list[str | None]) -> dict[str, Any]:
    """``evaluate --serving disagg --json``'s object: the pools priced, the rules they break under
    ``violations``, the launch under ``launch``; the DAG written (beside its target, renamed once all is
    done). The engine is ``--emit``'s, as in ``solve``."""
    refuse_single_pool_options(args, out.experts_out)
    # networkx loaded lazily on purpose: solve --serving imports this module and may write no DAG.
    from shardplan.solver.dag.disagg import build_disagg_dag
    from shardplan.solver.dag.export import write_graph, writer_for

    with OutputFiles(inputs) as outputs:
        outputs.add("dag", out.dag_path)
        if out.dag_path:
            writer_for(out.dag_path)  # an unknown extension is bad input, before any work
        problem = build_problem(replace(args, engine=engine_with_emit(args.engine, out.emit_engine)))
        check_decodes(problem)
        plan = evaluate_disagg(problem, disagg_layout(problem, prefill, decode))
        if out.dag_path:
            write_graph(build_disagg_dag(plan, out.detail), outputs.temp("dag"))
        launch = emit_disagg(plan, out.emit_engine) if out.emit_engine else None
        outputs.commit()
    violations = [{"rule": d.rule, "message": d.message} for d in errors_of(check_disagg(plan))]
    data = disagg_dict(plan, status="evaluated", extra={"violations": violations})
    if launch is not None:
        data["launch"] = launch_dict(launch.engine, launch)
    return data


def evaluate_disagg_cmd(args: ProblemArgs, prefill: str | None, decode: str | None, as_json: bool,
                        out: DisaggOutputs, inputs: list[str | None]) -> bool:
    """Print the plan (JSON or text) or its launch commands, write its DAG; True when it breaks a rule
    (the caller exits 1)."""
    data = evaluated_disagg(args, prefill, decode, out, inputs)
    violations, launch = data["violations"], data.get("launch")
    if as_json:
        click.echo(json_text(data, indent=2, sort_keys=False))
    elif launch is not None:
        click.echo(launch["script"], nl=False)
    else:
        print_disagg(data)
        for v in violations:
            click.echo(f"violation {v['rule']}: {v['message']}")
        if out.dag_path:
            say_wrote(out.dag_path)
    return bool(violations)


def print_disagg(data: dict[str, Any]) -> None:
    m, kv = data["metrics"], data["kv_transfer"]
    p, d = data["prefill"], data["decode"]
    within = "" if data.get("gap") is None else (  # a limit stopped the search: how far from the proven bound
        f", within {data['gap']:.2%} of the proven bound ({data['bound']:,.1f} tokens/s/GPU)")
    click.echo(f"{data['model']}, disaggregated, {data['num_gpus']} GPUs: {data['status']}{within}")
    click.echo(f"  {data['cluster']}")
    click.echo("  " + report.pool_line("prefill", p))
    click.echo("  " + report.pool_line("decode", d))
    click.echo(f"  TTFT {m['ttft_ms']:.1f} ms (serving stack {m['request_overhead_ms']:.1f}, "
               f"waiting {m['waiting_ms']:.1f}, prefill {p['prefill_ms']:.1f}, "
               f"KV transfer {kv['transfer_ms'] + kv['relayout_ms']:.2f} over {kv['tier']}, "
               f"decode admission {m['admission_ms']:.1f})   "
               f"TPOT {m['tpot_ms']:.2f} ms   end-to-end {m['e2e_ms']:.0f} ms   {m['batch']} requests in flight")
    click.echo(f"  throughput {m['output_tokens_per_s']:,.0f} tokens/s, {m['output_tokens_per_s_per_gpu']:,.1f} "
               f"per GPU, {m['requests_per_s']:.2f} requests/s, set by {m['bottleneck']}")
    caps = (f"prefill {p['capacity_rps']:.2f} (chunk {p['chunk']})", f"decode {_cap(d['capacity_rps'])} "
            f"(batch {d['batch']} per worker)", f"KV links {_cap(kv['capacity_rps'])}")
    click.echo("  capacity in requests/s: " + ", ".join(caps))
    for line in (report.measured_error_text(data), report.limits_at_text(data)):
        if line is not None:
            click.echo(f"  {line}")


def _cap(value: float | None) -> str:
    return "unbounded" if value is None else f"{value:.2f}"


__all__ = ["evaluate_disagg_cmd", "evaluated_disagg", "print_disagg"]
