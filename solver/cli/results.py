"""The JSON results of the commands and the one line an error becomes, without click or a terminal.

The CLI prints these (``--json``, and its error line on stderr); the MCP server (``solver/mcp/``)
returns the same dicts and lines to an agent, so the two answer one question with the same bytes
(timing fields aside). Nothing here solves, reads or writes a file: each function shapes what its
caller computed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from shardplan.models import InfeasibleError, ShardplanError
from shardplan.models.errors import printable
from shardplan.rules.base import Diagnostic
from shardplan.rules.catalog import check_plan, errors_of
from shardplan.rules.dag.check import diagnostics_json, rule_ids
from shardplan.rules.dag.fix import Change
from shardplan.rules.plan import Plan
from shardplan.rules.problem import Problem
from shardplan.solver.outputs import report
from shardplan.solver.outputs.launch import Emitted
from shardplan.solver.outputs.plan_json import limits_at_dict, plan_dict

if TYPE_CHECKING:  # only a type here: networkx loads where a DAG is built
    import networkx as nx


def error_message(exc: ShardplanError | RecursionError) -> str:
    """What the CLI says of one of our errors, after ``shardplan: ``: ``infeasible: TP-001: ...`` or
    ``error: model: unknown model ...`` (a RecursionError: input nested deeper than Python recurses)."""
    if isinstance(exc, InfeasibleError):
        return str(exc)
    if isinstance(exc, RecursionError):
        return "error: input: nested too deeply"
    return f"error: {exc}"


def one_line(message: str) -> str:
    """``shardplan: message`` on one line: newlines inside a message become spaces, and every other character
    a terminal acts on (of a path or value echoed unquoted) its escape (``printable``)."""
    return printable(" ".join(f"shardplan: {message}".split("\n")))


# The fields that vary run to run: the plan's and its expert placement's solve time, the runner-up's.
TIMING_FIELDS = frozenset({"solve_time_s", "runner_up_solve_time_s"})


def without_timing(data: Any) -> Any:
    """A result with its timing fields removed at any depth: what is the same bytes on every run."""
    if isinstance(data, dict):
        return {k: without_timing(v) for k, v in data.items() if k not in TIMING_FIELDS}
    if isinstance(data, list):
        return [without_timing(v) for v in data]
    return data


def infeasible_dict(problem: Problem, exc: InfeasibleError) -> dict[str, Any]:
    """DESIGN.md's JSON for a problem with no plan: status, objective and the conflicting rules."""
    return {
        "status": "infeasible",
        "objective": problem.objective.value,
        "model": problem.model.name,
        "cluster": problem.cluster.describe(),
        "conflict": [{"rule": rule, "message": message} for rule, message in exc.conflicts],
        **limits_at_dict(problem),  # the limits held, which the conflicts' messages name, beside the user's
    }


def solved_dict(plan: Plan, findings: list[report.Finding]) -> dict[str, Any]:
    """``solve --json`` without its optional parts (runner-up, launch): the plan, the objective value
    the search reached and the constraints around it (``findings``: ``report.binding_constraints``)."""
    data = plan_dict(plan.problem, plan.layout, plan.prediction, status=plan.status, solve_time_s=plan.solve_time_s,
                     experts=plan.experts, extra={"objective_value": plan.objective_value, **unproven(plan)})
    return {**data, "binding": report.findings_dicts(findings)}


def unproven(plan: Plan) -> dict[str, Any]:
    """A feasible plan's distance from optimal: ``gap`` = |bound - objective| / objective, with ``bound`` the
    best bound proven on the objective (null when none was); an optimal plan has neither."""
    if plan.status != "feasible":
        return {}
    return {"bound": plan.bound, "gap": None if plan.gap is None else round(plan.gap, 6)}


def launch_dict(engine: str, launch: Emitted) -> dict[str, Any]:
    """``solve --emit ENGINE --json``'s ``launch`` object: the engine's files, script and commands."""
    return {"engine": engine, "version": launch.version, "notes": list(launch.notes),
            "files": dict(launch.files), "script": launch.script(),
            "commands": [{"label": one.label, "env": dict(one.env), "argv": list(one.argv)}
                         for one in launch.launches]}


def evaluated_dict(plan: Plan) -> dict[str, Any]:
    """``evaluate --json``: the priced layout and every rule or limit it breaks under ``violations``."""
    violations = [{"rule": d.rule, "message": d.message} for d in errors_of(check_plan(plan))]
    return plan_dict(plan.problem, plan.layout, plan.prediction, status="evaluated", experts=plan.experts,
                     extra={"violations": violations})


def enumerated_row(index: int, plan: Plan) -> dict[str, Any]:
    """One layout of ``enumerate``, as ``--jsonl`` streams it."""
    return {"index": index, **plan_dict(plan.problem, plan.layout, plan.prediction, status="feasible")}


def enumeration_dict(rows: list[dict[str, Any]], marks: list[bool], partial: bool) -> dict[str, Any]:
    """``enumerate --json``: the count, the Pareto frontier's indices first, then every layout marked, and
    whether a limit stopped it before every layout (the CLI writes the same object from a spool,
    ``solver/cli/stream.py``)."""
    plans = [{**row, "pareto": on} for row, on in zip(rows, marks, strict=True)]
    return {"count": len(rows), "pareto": [i for i, on in enumerate(marks) if on], "plans": plans,
            "partial": partial}


def validation_dict(file: str | None, dag: nx.DiGraph, diagnostics: list[Diagnostic],
                    fixed: str | None = None, changes: list[Change] | None = None) -> dict[str, Any]:
    """``validate --json``: the DAG's size and the DAG rules it breaks; after ``--fix``, where the
    repaired DAG went and each change made (``fixed`` None: no fix was asked for)."""
    data: dict[str, Any] = {
        "file": file,
        "valid": not diagnostics,
        "detail": dag.graph.get("detail"),
        "nodes": dag.number_of_nodes(),
        "edges": dag.number_of_edges(),
        "rules": rule_ids(diagnostics),
        "violations": diagnostics_json(diagnostics),
    }
    if changes is not None:
        data.update(fixed=fixed, changes=[c.to_dict() for c in changes])
    return data
