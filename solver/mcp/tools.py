"""The MCP tools: each turns its validated input into the dict the matching CLI command prints with
``--json`` (``solver/cli/results.py`` builds both), or raises the error the CLI would report.

Handlers are plain synchronous functions: ``server.py`` runs them on a worker thread under a
deadline. Paths an agent names go through ``Root.resolve`` before anything opens them; outputs are
written through ``OutputFiles`` as the CLI writes them (checked first, renamed into place at the end).
An infeasible problem is a result (``status: infeasible`` with the conflicting rules), not an error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import networkx as nx
from pydantic import BaseModel

from shardplan.hardware.profile import composed_profiles, profile_names
from shardplan.hardware.profile import list_profiles as profile_registry
from shardplan.models import InfeasibleError, ModelSpec, SolverLimitError, SpecError
from shardplan.models.files import reread_json
from shardplan.models.hf_config import load_config_object
from shardplan.models.presets import find_preset, unknown_model
from shardplan.rules.catalog import get_rule
from shardplan.rules.dag.check import check_dag
from shardplan.rules.dag.fix import fix_dag as repair_dag
from shardplan.rules.plan import Plan
from shardplan.rules.problem import Problem
from shardplan.solver.cli import views
from shardplan.solver.cli.disagg import DisaggOutputs, evaluated_disagg
from shardplan.solver.cli.enumerate_both import BothModes, both_modes_dict
from shardplan.solver.cli.inputs import (
    DEFAULT_MODEL,
    ProblemArgs,
    build_problem,
    check_experts_out,
    check_pool_routing,
    engine_with_emit,
    layout_from_pins,
)
from shardplan.solver.cli.outputs import OutputFiles
from shardplan.solver.cli.pools import refuse_pools
from shardplan.solver.cli.results import (
    enumerated_row,
    enumeration_dict,
    evaluated_dict,
    infeasible_dict,
    launch_dict,
    solved_dict,
    validation_dict,
)
from shardplan.solver.cli.serving import (
    ServingOutputs,
    check_serving_inputs,
    disagg_enumeration_dict,
    disagg_rows,
    no_deployment,
    prepare_serving,
    run_serving,
)
from shardplan.solver.dag import build_dag
from shardplan.solver.dag.disagg import serving_dag
from shardplan.solver.dag.export import (
    MAX_DAG_BYTES,
    check_writable,
    dag_from_data,
    read_json,
    to_json_data,
    write_dag,
    write_graph,
    writer_for,
)
from shardplan.solver.disagg.frontier import DisaggEnumeration
from shardplan.solver.disagg.serving import throughput_problem
from shardplan.solver.enumerate import Enumeration, pareto_front
from shardplan.solver.explain import explain
from shardplan.solver.limits_at import check_limits_at, solve_colocated
from shardplan.solver.mcp.safety import MAX_ENUMERATE_LIMIT, Root, TimeLimits
from shardplan.solver.mcp.schemas import (
    DagInput,
    EnumerateInput,
    EvaluateInput,
    FixDagInput,
    NoInput,
    PlanInput,
    ProblemInput,
    RuleInput,
)
from shardplan.solver.outputs import report
from shardplan.solver.outputs.launch import emit
from shardplan.solver.placement.plan import place_and_price, write_experts
from shardplan.solver.search_base import Deadline

_PINS = ("dp", "pp", "tp", "sp", "ep", "attn_dp", "expert_tp", "stages")
_SHARED = ("cluster", "objective", "isl", "osl", "batch", "mem_cap_gib", "ttft_ms", "tpot_ms", "weights_dtype",
           "kv_dtype", "zipf", "redundant_slots")


@dataclass(frozen=True)
class Session:
    """What every call of one server shares: the file root and the time limits it was started with."""

    root: Root
    limits: TimeLimits


# --- inputs -------------------------------------------------------------------------------------
def model_of(args: ProblemInput, root: Root) -> str | ModelSpec:
    """A preset's name, a config.json path inside the root, or the model the ``config`` object
    describes (read through the checks a config.json file gets)."""
    if args.config is not None:
        if args.model is not None:
            raise SpecError("config", "give either model or config, not both")
        return load_config_object(args.config)
    name = DEFAULT_MODEL if args.model is None else args.model
    if find_preset(name) is not None:
        return name
    if name.endswith(".json"):
        return root.resolve(name, "model")
    # get_model would open a name that happens to be a file or a folder: an agent's bare name never is one here.
    raise unknown_model(name)


def problem_args(args: ProblemInput, root: Root) -> ProblemArgs:
    """The CLI's ``ProblemArgs`` for a tool's input, with every path it names inside the root."""
    return ProblemArgs(
        model=model_of(args, root),
        pins={k: getattr(args, k) for k in _PINS},
        allow=tuple(args.allow),
        load_profile=root.resolve_optional(args.load_profile, "load-profile"),
        profile=profile_of(args.profile, root),
        **{k: getattr(args, k) for k in _SHARED},
    )


def profile_of(profile: str | None, root: Root) -> str | None:
    """A calibration profile's name as it is, or a profile file inside the root: the CLI reads any
    path it is given, and ``../../etc/passwd`` from an agent must not be read."""
    if profile is None or profile in profile_names():
        return profile
    return root.resolve(profile, "profile")


def input_files(args: ProblemArgs) -> list[str | None]:
    """The files a problem reads: no output may overwrite them (as ``solver/cli/main.py`` checks)."""
    profile = args.profile if isinstance(args.profile, str) and args.profile not in profile_names() else None
    return [args.model if isinstance(args.model, str) else None, args.load_profile, profile]


# --- the tools ----------------------------------------------------------------------------------
def plan(args: PlanInput, session: Session) -> dict[str, Any]:
    """``shardplan solve --json``; optionally the launch command, the DAG inline or written to a file."""
    time_limit_s = session.limits.solver_s(args.time_limit)
    inputs = problem_args(args, session.root)
    dag_path = session.root.resolve_optional(args.dag_path, "dag")
    experts_out = session.root.resolve_optional(args.experts_out, "experts-out")
    if args.serving != "colocated" or args.rate is not None:
        return _plan_serving(args, inputs, ServingOutputs(dag_path, args.detail, args.emit, None, experts_out),
                             time_limit_s)
    work = args.work_limit or None  # 0, as on the command line: none
    inputs = replace(inputs, engine=engine_with_emit(None, args.emit))  # as solve: --emit X prices with X
    with OutputFiles(input_files(inputs)) as outputs:
        outputs.add("dag", dag_path)
        outputs.add("experts-out", experts_out)
        if args.dag_path:  # an unknown extension is bad input: say so before solving, naming the path as given
            writer_for(args.dag_path)
        problem = build_problem(inputs)
        check_experts_out(problem, experts_out)
        check_limits_at(problem, args.limits_at, ("colocated",))
        held, solved = solve_colocated(problem, Deadline(time_limit_s, work), args.limits_at)
        if isinstance(solved, InfeasibleError):
            return infeasible_dict(held, solved)
        if dag_path:
            write_dag(solved, outputs.temp("dag"), args.detail)
        if experts_out:
            write_experts(outputs.temp("experts-out"), solved.experts)
        outputs.commit()
    data = solved_dict(solved, report.binding_constraints(solved))
    if args.emit:
        data["launch"] = launch_dict(args.emit, emit(solved, args.emit))
    if args.include_dag:
        data["dag"] = to_json_data(build_dag(solved, args.detail))
    return data


def _plan_serving(args: PlanInput, inputs: ProblemArgs, out: ServingOutputs, time_limit_s: float) -> dict[str, Any]:
    """``shardplan solve --serving S [--rate R] --json`` through the CLI's own steps (``prepare_serving``,
    ``run_serving``); with ``include_dag`` the chosen plan's DAG under ``dag``."""
    with OutputFiles(input_files(inputs)) as outputs:
        if args.dag_path:  # an unknown extension is bad input: say so before solving, naming the path as given
            writer_for(args.dag_path)
        objective_given = "objective" in args.model_fields_set
        problem = prepare_serving(inputs, args.serving, args.rate, objective_given, out, outputs, args.limits_at)
        result = run_serving(problem, args.serving, args.rate, time_limit_s, out, outputs, args.work_limit or None,
                             args.limits_at)
    data = result.data
    if args.include_dag and result.chosen_plan is not None:
        data["dag"] = to_json_data(serving_dag(result.chosen_plan, args.detail))
    return data


def enumerate_layouts(args: EnumerateInput, session: Session) -> dict[str, Any]:
    """``shardplan enumerate --limit N --time-limit S --json``: the Pareto frontier's indices, then
    every layout found, each marked."""
    time_limit_s = session.limits.solver_s(args.time_limit)
    if not 1 <= args.limit <= MAX_ENUMERATE_LIMIT:
        raise SpecError("limit", f"must be an integer in 1..{MAX_ENUMERATE_LIMIT} (the server's cap), got {args.limit}")
    inputs = problem_args(args, session.root)
    check_pool_routing(inputs, args.serving)
    problem = build_problem(inputs)
    work = args.work_limit or None  # 0, as on the command line: none
    if args.serving == "disagg":
        return _enumerate_disagg(problem, args.limit, time_limit_s, work)
    if args.serving == "auto":
        return _enumerate_both(problem, args.limit, time_limit_s, "objective" in args.model_fields_set, work)
    run = Enumeration(problem, limit=args.limit, time_limit_s=time_limit_s, work_limit=work)
    plans = list(run)
    if not plans:
        if run.partial:  # as the CLI: the limit, not the rules, left it empty
            raise SolverLimitError(run.deadline.no_plan("layout"))
        return infeasible_dict(problem, InfeasibleError(explain(problem, deadline=run.deadline)))
    return enumeration_dict([enumerated_row(i, p) for i, p in enumerate(plans)], pareto_front(plans), run.partial)


def _enumerate_disagg(problem: Problem, limit: int, time_limit_s: float, work: float | None) -> dict[str, Any]:
    """``shardplan enumerate --serving disagg --limit N --time-limit S [--work-limit W] --json``."""
    check_serving_inputs(problem, None, False, "disagg")
    run = DisaggEnumeration(throughput_problem(problem), limit, time_limit_s, work)
    rows = list(disagg_rows(run))
    if not rows:
        return infeasible_dict(throughput_problem(problem), no_deployment(run))
    return disagg_enumeration_dict(rows, run)


def _enumerate_both(problem: Problem, limit: int, time_limit_s: float, objective_given: bool,
                    work: float | None) -> dict[str, Any]:
    """``shardplan enumerate --serving auto --limit N --time-limit S [--work-limit W] --json``."""
    check_serving_inputs(problem, None, objective_given, "auto")
    run = BothModes(problem, limit, time_limit_s, work)
    rows = list(run)
    if not rows:
        if run.partial:  # as the CLI: the limit, not the rules, left it empty
            raise SolverLimitError(run.no_plan())
        return infeasible_dict(run.problem, run.infeasible())
    return both_modes_dict(rows, run)


def evaluate(args: EvaluateInput, session: Session) -> dict[str, Any]:
    """``shardplan evaluate --json``: the pinned layout priced, and every rule it breaks; with serving
    'disagg', ``evaluate --serving disagg --prefill P --decode D --json``."""
    inputs = problem_args(args, session.root)
    experts_out = session.root.resolve_optional(args.experts_out, "experts-out")
    if args.serving == "disagg":
        pools = DisaggOutputs(None, "logical", None, experts_out)
        return evaluated_disagg(inputs, args.prefill, args.decode, pools, input_files(inputs))
    refuse_pools(args.prefill, args.decode)
    with OutputFiles(input_files(inputs)) as outputs:
        outputs.add("experts-out", experts_out)
        problem = build_problem(inputs)
        check_experts_out(problem, experts_out)
        layout, prediction, experts = place_and_price(problem, layout_from_pins(problem))
        if experts_out:
            write_experts(outputs.temp("experts-out"), experts)
        outputs.commit()
    return evaluated_dict(Plan(problem=problem, layout=layout, prediction=prediction, status="evaluated",
                               experts=experts))


def _dag_of(args: DagInput, root: Root) -> tuple[str | None, nx.DiGraph]:
    """(the file, resolved inside the root, or None for an inline DAG; the DAG)."""
    if (args.dag is None) == (args.path is None):
        raise SpecError("dag", "give either dag (node-link JSON) or path, not both and not neither")
    if args.path is not None:
        path = root.resolve(args.path, "path")
        return path, read_json(path)
    # Re-read as a file is (models.files): the in-process caller's NaN or 66-level nesting was taken as given.
    data = reread_json(args.dag, "dag", "the dag", MAX_DAG_BYTES)
    try:
        return None, dag_from_data(data, "the dag")
    except SpecError as exc:  # from_json_data names the field of a file; here it is the dag argument
        raise SpecError("dag", exc.reason) from None


def validate_dag(args: DagInput, session: Session) -> dict[str, Any]:
    """``shardplan validate FILE --json``: the DAG rules the DAG breaks (``file`` None for an inline DAG)."""
    file, dag = _dag_of(args, session.root)
    return validation_dict(args.path if file else None, dag, check_dag(dag))


def fix_dag(args: FixDagInput, session: Session) -> dict[str, Any]:
    """``shardplan validate FILE --fix --out FIXED --json``; without ``out`` the repaired DAG comes
    back inline under ``dag``."""
    file, dag = _dag_of(args, session.root)
    out = session.root.resolve_optional(args.out, "out")
    with OutputFiles([file]) as outputs:
        outputs.add("out", out)
        if args.out:
            writer_for(args.out)  # an unknown extension fails before any work
        check_writable(dag)
        fixed, changes, diagnostics = repair_dag(dag)
        if out:
            write_graph(fixed, outputs.temp("out"))
            outputs.commit()
    data = validation_dict(args.path, fixed, diagnostics, args.out, changes)
    if out is None:
        data["dag"] = to_json_data(fixed)
    return data


def explain_rule(args: RuleInput, session: Session) -> dict[str, Any]:
    """``shardplan rules ID --json``: what the rule enforces, why, and a plan that breaks or keeps it."""
    return get_rule(args.rule_id).describe()


def list_models(args: NoInput, session: Session) -> list[dict[str, Any]]:
    """``shardplan models --json``."""
    return views.model_rows()


def list_hardware(args: NoInput, session: Session) -> list[dict[str, Any]]:
    """``shardplan hardware --json``."""
    return views.gpu_rows()


def list_profiles(args: NoInput, session: Session) -> list[dict[str, Any]]:
    """Every calibration profile the registry holds (``hardware/profile.py``), each field as stored, then the
    composed ones (``hardware/compose.py``: an engine on a GPU it has no profile of), as ``shardplan profiles``."""
    return [profile.model_dump() for profile in (*profile_registry(), *composed_profiles())]


# --- the catalog of tools -----------------------------------------------------------------------
@dataclass(frozen=True)
class ToolSpec:
    """One tool: its name, what an agent reads about it, its input model and handler, and how long a
    call may run (``wall_s``, from the input and the server's limits)."""

    name: str
    description: str
    input: type[BaseModel]
    run: Callable[[Any, Session], Any]
    wall_s: Callable[[Any, TimeLimits], float]
    list_key: str | None = None  # a list result: structured content wraps it under this key


def _solver_wall(args: Any, limits: TimeLimits) -> float:
    return limits.wall_s(limits.solver_s(args.time_limit))


def _default_wall(args: Any, limits: TimeLimits) -> float:
    return limits.wall_s(limits.default_s)


TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec("plan", "Find the best parallel layout (minimum latency, or maximum throughput under the memory cap) "
             "of a model on a GPU cluster: the JSON of `shardplan solve --json`. With serving 'disagg' or 'auto' "
             "(and rate): prefill and decode pools, or both modes, by tokens/s per GPU or the fewest GPUs for the "
             "rate. An infeasible problem comes back with status 'infeasible' and the conflicting rules. Each plan's "
             "measured_error says how far its engine's predictions fell from measured runs at its load, and "
             "over_limit the TTFT/TPOT limits it would break were it off as the median run: leave that margin, or "
             "ask for it with limits_at 'median-error'.",
             PlanInput, plan, _solver_wall),
    ToolSpec("enumerate", "Every feasible layout up to `limit`, within `time_limit` seconds, with the "
             "latency-throughput Pareto frontier's indices first (serving 'disagg': disaggregated deployments "
             "and the tokens/s per GPU against tokens/s per user frontier): the JSON of "
             "`shardplan enumerate --json`.",
             EnumerateInput, enumerate_layouts, _solver_wall),
    ToolSpec("evaluate", "Price one pinned layout (tp, pp, dp, ep, ...), or with serving 'disagg' a prefill and a "
             "decode pool, and list every rule and limit it breaks under 'violations': the JSON of "
             "`shardplan evaluate --json`.", EvaluateInput, evaluate, _default_wall),
    ToolSpec("validate_dag", "Check an execution DAG (inline node-link JSON or a file) against the DAG rules: "
             "the JSON of `shardplan validate --json`.", DagInput, validate_dag, _default_wall),
    ToolSpec("fix_dag", "Repair what has one safe repair in an execution DAG (missing collective, KV-cache or "
             "pipeline edge) and list the changes and what remains broken.", FixDagInput, fix_dag, _default_wall),
    ToolSpec("explain_rule", "What a rule (e.g. TP-001) enforces, why, its source, and a plan that breaks it "
             "and one that keeps it: `shardplan rules ID --json`.", RuleInput, explain_rule, _default_wall),
    ToolSpec("list_models", "The model presets with parameter counts and KV bytes per token "
             "(`shardplan models --json`).", NoInput, list_models, _default_wall, "models"),
    ToolSpec("list_hardware", "The GPU presets: capacity, bandwidths, peak rates "
             "(`shardplan hardware --json`).", NoInput, list_hardware, _default_wall, "gpus"),
    ToolSpec("list_profiles", "The calibration profiles the cost model can use (pass one as `profile`): "
             "their GPU, software generation and fitted factors.", NoInput, list_profiles, _default_wall, "profiles"),
)
