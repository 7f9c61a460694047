"""The ``shardplan`` command line: thin subcommands over the library (DESIGN.md contract).

Every command has ``--json``. Errors never show a traceback: bad input prints one line and exits
2, an infeasible problem names the conflicting rules and exits 1.
"""

from __future__ import annotations

import errno
import math
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any, TypeVar, cast

import click

from shardplan.hardware.profile import DEFAULT_ENGINE, ENGINES, Engine
from shardplan.models import InfeasibleError, ShardplanError, SolverLimitError, SpecError
from shardplan.models.errors import printable
from shardplan.models.files import MAX_CSV_BYTES, json_text, read_text
from shardplan.rules.catalog import LISTED_RULES, get_rule
from shardplan.rules.plan import Plan
from shardplan.solver.cli.inputs import (
    DEFAULT_CLUSTER,
    DEFAULT_MODEL,
    ProblemArgs,
    build_problem,
    check_experts_out,
    check_pool_routing,
    engine_with_emit,
    held_notes,
    layout_from_pins,
    note_on_stderr,
    print_notes,
)
from shardplan.solver.cli.once import OnceGroup
from shardplan.solver.cli.outputs import OutputFiles, say_wrote
from shardplan.solver.cli.pools import refuse_pools
from shardplan.solver.cli.results import (
    enumerated_row,
    error_message,
    evaluated_dict,
    infeasible_dict,
    launch_dict,
    one_line,
    solved_dict,
)
from shardplan.solver.cli.stream import Kept, Printer
from shardplan.solver.cli.validate import validate
from shardplan.solver.cli.working import searching
from shardplan.solver.enumerate import Enumeration
from shardplan.solver.limits_at import LIMITS_AT, LimitsAt, check_limits_at, solve_colocated
from shardplan.solver.mcp.safety import DEFAULT_CALL_TIME_S, MAX_CALL_TIME_S, Root, TimeLimits
from shardplan.solver.outputs import report
from shardplan.solver.outputs.launch import Emitted, emit
from shardplan.solver.placement.plan import place_and_price, write_experts
from shardplan.solver.search_base import DEFAULT_WORK_LIMIT, Deadline

EXIT_INFEASIBLE, EXIT_BAD_INPUT, EXIT_INTERNAL = 1, 2, 3
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for a command ended by Ctrl-C
EXIT_TERMINATED = 143  # 128 + SIGTERM, what `timeout`, CI runners and service managers send
MAX_JOBS = 256
# calibrate's default --time-limit: its work grows with the rows, and a CSV within the size limit (MAX_CSV_BYTES)
# holds about a hundred times the repository's, which fit in about 90 s; a script must not wait for hours.
CALIBRATE_TIME_LIMIT_S = 600.0
MIN_RUNNER_UP_S = 0.5  # less left of --time-limit than this after the plan: no runner-up is searched
# The runner-up's work without --time-limit (search_base.Deadline): a multiple of the plan's, as the
# wall-clock max(5 s, 3 x the plan's search) it replaces was; 5 units are 5-8 s of one core (CP-SAT
# steps cut at 1 s of wall clock had done 0.6-0.75 units on gpt-oss-120b, 32x8xB200, at load 2-3).
RUNNER_UP_WORK_FACTOR = 3.0
RUNNER_UP_MIN_WORK = 5.0

Command = TypeVar("Command", bound=Callable[..., Any])


def cli_views() -> ModuleType:
    """The terminal views, imported on first use."""
    # Lazily on purpose: rich costs about 0.06 s of CPU to import, and --json output never uses it.
    from shardplan.solver.cli import views

    return views


def emit_json(data: Any) -> None:
    click.echo(json_text(data, indent=2, sort_keys=False))


def problem_options(func: Command) -> Command:
    """The inputs solve, enumerate and evaluate share."""
    options = [
        click.option("--model", default=DEFAULT_MODEL, show_default=True,
                     help="preset id or alias, a config.json path, or a checkpoint folder holding one "
                          "(launch commands then load that folder)"),
        click.option("--cluster", default=DEFAULT_CLUSTER, show_default=True, help="e.g. 8xH100, 4x8xH200, 72xGB200"),
        click.option("--objective", type=click.Choice(["latency", "throughput"]), default="latency", show_default=True,
                     help="latency: the lowest end-to-end time of one request (batch 1 unless --batch); throughput: "
                          "the most output tokens/s, batch decided unless --batch (evaluate only records it)"),
        click.option("--isl", type=int, default=1024, show_default=True, help="input (prompt) tokens per request"),
        click.option("--osl", type=int, default=256, show_default=True, help="output (generated) tokens per request"),
        click.option("--batch", type=int, default=None,
                     help="requests in flight per replica (evaluate --serving disagg: over the whole deployment; "
                          "solve --serving disagg|auto decides it and refuses --batch); "
                          "default: 1 for latency and for evaluate, decided for throughput"),
        click.option("--mem-cap-gib", type=float, default=None,
                     help="per-GPU memory cap in GiB, at most the GPU's capacity "
                          "(default: capacity x usable fraction)"),
        click.option("--ttft-ms", type=float, default=None,
                     help="limit on time to first token in ms, at the plan's concurrency (default: none)"),
        click.option("--tpot-ms", type=float, default=None,
                     help="limit on time per output token in ms, at the plan's concurrency (default: none)"),
        click.option("--max-batch", type=int, default=None,
                     help="the engine's limit on sequences one attention group runs at once (vLLM --max-num-seqs, "
                          "SGLang --max-running-requests); with --serving disagg it holds in each pool: a decode "
                          "worker's batch and a prefill step's prompts per attention group; default: the "
                          "calibration profile's"),
        click.option("--weights-dtype", default=None,
                     help="bf16, fp16, fp8, fp4, mxfp4, int4 (default: the checkpoint's)"),
        click.option("--kv-dtype", default=None, help="bf16, fp16 or fp8 (default: 16-bit)"),
        click.option("--engine", type=click.Choice(ENGINES), default=None,
                     help=f"serving engine: prices with its calibration profile and formats --emit's launch "
                          f"command (default: {DEFAULT_ENGINE}, the engine most deployments run; with --emit X, X)"),
        click.option("--profile", default=None,
                     help="calibration profile: a name from `shardplan profiles`, or a JSON file `shardplan "
                          "calibrate` wrote (default: the GPU's profile for the engine)"),
        click.option("--allow", multiple=True,
                     help="turn a default rule off, e.g. --allow expert-tp; repeatable (switches: `shardplan rules`)"),
        click.option("--dp", type=int, default=None, help="pin replicas (whole copies of the model)"),
        click.option("--pp", type=int, default=None, help="pin pipeline stages per replica"),
        click.option("--tp", type=int, default=None, help="pin tensor parallelism"),
        click.option("--sp", type=int, default=None, help="pin sequence parallelism"),
        click.option("--ep", type=int, default=None, help="pin expert parallelism (= GPUs per stage / expert-tp)"),
        click.option("--attn-dp", type=int, default=None, help="pin attention groups per stage"),
        click.option("--expert-tp", type=int, default=None,
                     help="pin tensor parallelism inside experts (needs --allow expert-tp)"),
        click.option("--stages", default=None,
                     help="pin stage boundaries as start:end layer ranges, end exclusive, e.g. 0:30,30:61"),
        click.option("--load-profile", default=None,
                     help="tokens routed to each expert per MoE layer (.json or .csv; default: uniform routing)"),
        click.option("--zipf", type=float, default=None,
                     help="synthetic Zipf routing with this exponent (fixed seed) instead of a load profile"),
        click.option("--redundant-slots", type=int, default=0, show_default=True,
                     help="expert slots per GPU beyond ceil(experts / ep), for copies of hot experts"),
        click.option("--json", "as_json", is_flag=True, help="print one JSON object"),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def problem_args(kw: dict[str, Any]) -> ProblemArgs:
    pins = {k: kw.pop(k) for k in ("dp", "pp", "tp", "sp", "ep", "attn_dp", "expert_tp", "stages")}
    return ProblemArgs(pins=pins, **{k: kw.pop(k) for k in list(kw) if k in ProblemArgs.__dataclass_fields__})


@click.group(cls=OnceGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="shardplan")
def cli() -> None:
    """Plan how to run an LLM for inference on a GPU cluster.

    \b
    shardplan solve                          plan the built-in default (DeepSeek-V3 on 2x8xH200)
    shardplan solve --model llama-3.1-70b --cluster 8xH100 --objective throughput
    shardplan evaluate --model llama-3.1-70b --cluster 8xH100 --tp 4 --dp 2
    shardplan models | hardware              the presets
    """


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def models(as_json: bool) -> None:
    """List the model presets with parameter counts and KV bytes per token.

    \b
    Example: shardplan models --json
    """
    rows = cli_views().model_rows()
    if as_json:
        emit_json(rows)
    else:
        cli_views().print_models(rows)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def hardware(as_json: bool) -> None:
    """List the GPU presets: capacity, bandwidths, peak rates.

    \b
    Example: shardplan hardware --json
    """
    rows = cli_views().gpu_rows()
    if as_json:
        emit_json(rows)
    else:
        cli_views().print_gpus(rows)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def profiles(as_json: bool) -> None:
    """List the calibration profiles: engine, GPU, software version, rows fitted and their median |error|.

    \b
    Example: shardplan profiles --json
    """
    rows = cli_views().profile_rows()
    if as_json:
        emit_json(rows)
    else:
        cli_views().print_profiles(rows)


experts_out_option = click.option(
    "--experts-out", type=click.Path(dir_okay=False), default=None,
    help="write the expert placement (per MoE layer, physical slot -> logical expert) as JSON",
)


@cli.command()
@problem_options
@experts_out_option
@click.option("--serving", type=click.Choice(["colocated", "disagg"]), default="colocated", show_default=True,
              help="one layout for both phases, or a prefill pool and a decode pool (--prefill, --decode)")
@click.option("--prefill", "prefill_pool", default=None,
              help="with --serving disagg: the prefill pool, e.g. workers=3,tp=4 (keys: the degree flags' names)")
@click.option("--decode", "decode_pool", default=None,
              help="with --serving disagg: the decode pool, e.g. workers=1,attn_dp=8,ep=8,batch=64")
@click.option("--dag", "dag_path", default=None, type=click.Path(dir_okay=False),
              help="with --serving disagg: write the execution DAG (.json, .graphml, .dot, .mmd)")
@click.option("--detail", type=click.Choice(["logical", "expanded"]), default="logical", show_default=True,
              help="--dag's detail: one node per operator, or one per GPU shard")
@click.option("--emit", "emit_engine", type=click.Choice(["vllm", "sglang", "trtllm"]), default=None,
              help="with --serving disagg: print the launch commands for this engine instead of the plan")
def evaluate(as_json: bool, experts_out: str | None, serving: str, prefill_pool: str | None,
             decode_pool: str | None, dag_path: str | None, detail: str, emit_engine: str | None,
             **kw: Any) -> None:
    """Predict TTFT, TPOT, throughput and memory of one layout (pinned with --tp/--pp/...), and judge it:
    every rule and limit the layout breaks is listed under "violations" and the exit code is 1.
    With --serving disagg, of a prefill pool and a decode pool at --batch requests in flight over both.
    A degree not given is 1.

    \b
    Examples:
      shardplan evaluate --model llama-3.1-70b --cluster 8xH100 --tp 4 --dp 2 --json
      shardplan evaluate --model llama-3.1-8b --cluster 8xH100 --serving disagg \\
          --prefill workers=2,tp=2 --decode workers=1,tp=4 --batch 32
    """
    if serving == "disagg":
        # Lazily on purpose: the disaggregated path builds DAGs (networkx, about 0.2 s of CPU to import).
        from shardplan.solver.cli.disagg import DisaggOutputs, evaluate_disagg_cmd

        outputs_of = DisaggOutputs(dag_path, detail, emit_engine, experts_out)
        if evaluate_disagg_cmd(problem_args(kw), prefill_pool, decode_pool, as_json, outputs_of, input_files(kw)):
            sys.exit(EXIT_INFEASIBLE)
        return
    refuse_pools(prefill_pool, decode_pool, dag_path, emit_engine)
    with OutputFiles(input_files(kw)) as outputs:
        outputs.add("experts-out", experts_out)
        problem = build_problem(problem_args(kw))
        check_experts_out(problem, experts_out)
        layout, prediction, experts = place_and_price(problem, layout_from_pins(problem))
        if experts_out:
            write_experts(outputs.temp("experts-out"), experts)
        outputs.commit()
    plan = Plan(problem=problem, layout=layout, prediction=prediction, status="evaluated", experts=experts)
    data = evaluated_dict(plan)
    violations = data["violations"]
    if as_json:
        emit_json(data)
    else:
        cli_views().print_plan(data, plan, report.binding_constraints(plan))
        for v in violations:
            click.echo(f"violation {v['rule']}: {v['message']}")
    if violations:
        sys.exit(EXIT_INFEASIBLE)


@cli.command()
@click.argument("points", type=click.Path(exists=True, dir_okay=False))
@click.option("--out", required=True, type=click.Path(),
              help="profile JSON to write (a directory: every fitted profile)")
@click.option("--gpu", default=None, help="fit only this GPU's rows (preset name or alias)")
@click.option("--software", default=None,
              help="fit only one software generation: trtllm, trtllm-0.14, trtllm-0.9, splitwise")
@click.option("--ops", default=None, type=click.Path(exists=True, dir_okay=False),
              help="op_points.csv for the shared operator factors")
@click.option("--jobs", type=int, default=1, show_default=True, help="processes fitting profiles in parallel")
@click.option("--time-limit", type=float, default=CALIBRATE_TIME_LIMIT_S, show_default=True,
              help="seconds the fit may take; past them it ends with one line, exit 2, nothing written (the "
                   "repository's 1,337 rows into 19 profiles take about 90 s on one core)")
@click.option("--runs", "runs", is_flag=True,
              help="POINTS is a runs CSV (below): fit an engine profile to serving runs under load")
@click.option("--engine", type=click.Choice(ENGINES), default=None,
              help="with --runs: fit only this engine's runs; the engine of rows that leave it blank")
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def calibrate(
    points: str, out: str, gpu: str | None, software: str | None, ops: str | None, jobs: int, time_limit: float,
    runs: bool, engine: str | None, as_json: bool,
) -> None:
    """Fit calibration profiles to measured points; needs scipy (pip install 'shardplan[calibrate]').

    \b
    POINTS is a UTF-8 CSV with a header naming at least these columns (any order, more allowed):
      id, source_id      row id and source (source_id picks the software generation, e.g. TRTLLM-PERF-v0.17)
      model              e.g. Llama-3.1-70B (rows of models without a preset are skipped and counted)
      weights_dtype, kv_cache_dtype   FP8, FP16, BF16, FP4 (blank: the checkpoint's)
      gpu, num_gpus      e.g. H100-SXM-80GB, 8
      tp, pp, dp         the layout's degrees (blank dp: 1)
      isl, osl           input / output tokens per request (positive integers)
      batch_size         static batch, when stated
      request_rate_qps   offered rate (inf: all requests at once; blank: not serving)
      metric, value      e.g. output_tokens_per_s_total, 29526.04 (a number in 1e-9..1e15)
      config_group       rows differing only in layout share it (blank allowed)
      notes              free text
    A missing column, a short or long row, a non-number in isl/osl/value or bytes that are not UTF-8
    (a leading UTF-8 byte-order mark is dropped, as for every file shardplan reads; a UTF-16 or UTF-32
    file is named as such) exit 2 with the column, row or byte named, and write nothing.
    Each fitted field the fit leaves at an end of its physical range is named in a note on stderr
    (and under at_bound in --json). Rows no profile inside the ranges describes (its fit misses the
    median row by more than 2-fold either way) exit 1 with one line naming the profile, and write nothing.
    Write the profile with --out and plan with --profile FILE.
    Example: shardplan calibrate perf_points.csv --gpu H100 --software trtllm --out h100.json

    \b
    With --runs, POINTS holds serving runs under load (vllm bench serve, SGLang's bench_serving,
    TensorRT-LLM's benchmark_serving), one run a row, these columns (any order, more allowed):
      model              preset id or alias, e.g. llama-3.1-70b
      gpu                preset name or alias, e.g. H100
      engine             vllm, sglang or trtllm, a version may follow ("vllm 0.11.0"); optional
                         column, a blank cell takes --engine
      weights_dtype      fp8, fp4, bf16, ... (blank: the checkpoint's)
      kv_cache_dtype     blank: the engine's default (fp8 on trtllm with fp8/fp4 weights, else bf16)
      tp, pp             tensor-parallel degree in an attention group, pipeline stages
      ep                 MoE: expert-parallel degree over the stage's tp x attn_dp GPUs, experts
                         tensor-parallel over the rest (blank: 1); dense models: blank or 1
      attn_dp            attention data-parallel groups (dense models: replicas) (blank: 1)
      isl, osl           input / output tokens per request
      concurrency        requests in flight over the whole deployment (--max-concurrency)
      ttft_ms, tpot_ms   the measured mean TTFT and TPOT
      id, notes          optional: the row's name in the output, free text
    It fits one engine profile per engine and GPU (a file --out takes one: choose with --engine
    and --gpu; a directory takes them all) from at least 20 runs each: the engine's TPOT fields
    (layer_overhead_us, hbm_efficiency), then its two TTFT fields, on the GPU's hardware profile
    and operator terms (a GPU without a stored engine profile: on the composed profile its plans
    are priced with, shardplan profiles). It prints each run measured and
    predicted, each field with its range (a field at a bound is named), and the median |TPOT| and
    |TTFT| error. A bad row (a short row, a non-number, an unknown model, GPU, engine or format,
    a layout the model cannot take) exits 2 naming the row and the column; nothing is written. Runs
    no profile inside the ranges describes (its fit misses the median run by more than 2-fold in TPOT
    or TTFT) exit 1 with one line, and nothing is written.
    Example: shardplan calibrate my_runs.csv --runs --engine vllm --out mine.json
             shardplan solve --profile mine.json --engine vllm --model llama-3.1-70b --cluster 8xH100
    """
    if not 1 <= jobs <= MAX_JOBS:
        raise SpecError("jobs", f"must be an integer in 1..{MAX_JOBS}, got {jobs}")
    check_time_limit(time_limit)
    if runs:
        if software is not None or ops is not None:
            raise SpecError("software" if software is not None else "ops",
                            "fits table profiles; --runs fits an engine profile on the stored operator terms")
        # Lazily on purpose, as the table fit below: SciPy loads only for this command.
        from shardplan.solver.cli.calibrate_runs import calibrate_runs_cmd

        calibrate_runs_cmd(points, out, cast("Engine | None", engine), gpu, time_limit, as_json)
        return
    if engine is not None:
        raise SpecError("engine", "picks the engine of a runs CSV: add --runs")
    with OutputFiles([points, ops]) as outputs:
        outputs.add("out", out, directory_ok=True)
        if ops is not None:
            read_text(ops, "ops", MAX_CSV_BYTES)  # a regular UTF-8 file, before the fit opens it
        # Lazily on purpose: the fit's process pool and SciPy load only for this command.
        from shardplan.solver.cost.calibration.fit import calibrate_to_file

        try:
            results = calibrate_to_file(points, outputs.temp("out"), gpu=gpu, software=software, op_csv=ops,
                                        jobs=jobs, time_limit_s=time_limit)
        except SpecError:
            raise
        except (ValueError, ArithmeticError, KeyError, AttributeError, IndexError) as exc:
            # The fit reads measured numbers it cannot check one by one (an operator table without the
            # rows a curve needs, values that make a residual undefined): the input's fault, named as such.
            field = "ops" if ops is not None else "points"
            raise SpecError(field, f"cannot fit from the given data ({type(exc).__name__}: {exc})") from None
        outputs.commit()
    rows: list[dict[str, Any]] = [
        {"profile": r.profile.name, "gpu": r.profile.gpu, "rows": r.rows,
         "median_abs_error": round(r.median_abs_error, 4),
         "fitted": {f: getattr(r.profile, f) for f in r.fields},
         "at_bound": [_at_bound(f, getattr(r.profile, f), r.ranges[f]) for f in r.at_bounds]}
        for r in results
    ]
    for row in rows:  # each field a fit left at an end of its range, one line on stderr
        for end in row["at_bound"]:
            note_on_stderr(f"{row['profile']}: {end['field']} {end['value']:g} is at the {end['end']} end of its "
                           f"physical range {end['range'][0]:g}..{end['range'][1]:g}: the rows pushed it there (a "
                           "term the cost model lacks, or rows no value in the range describes)")
    if as_json:
        emit_json(rows)
    else:
        for row in rows:
            fitted = ", ".join(f"{k}={v:g}" for k, v in row["fitted"].items())
            click.echo(f"{row['profile']}: {row['rows']} rows, median |error| {row['median_abs_error']:.1%}; {fitted}")
        say_wrote(out)


def _at_bound(field: str, value: float, bounds: tuple[float, float]) -> dict[str, Any]:
    """``calibrate --json``'s entry for a fitted field at an end of its physical range (``fit.at_an_end``)."""
    low, high = bounds
    return {"field": field, "value": value, "end": "low" if value - low <= high - value else "high",
            "range": [low, high]}


@cli.command()
@problem_options
@click.option("--time-limit", type=float, default=None,
              help="seconds the search may take; the best plan found by then is returned as 'feasible' with its "
                   "bound and gap; --serving auto keeps both modes within it (colocated half, disaggregated the "
                   "rest) (default: none)")
@click.option("--work-limit", type=float, default=None, metavar="UNITS",
              help=f"search work allowed: CP-SAT's deterministic time, branch-and-bound nodes and exact checks, "
                   f"a unit about 1-3 CPU seconds but counted the same on every machine and at any load, so the "
                   f"same input prints the same bytes; the best plan found by then is returned as 'feasible' "
                   f"with its bound and gap (none found: exit 2); 0: search to a proof, however long; --serving "
                   f"auto gives each mode all of it (default: {DEFAULT_WORK_LIMIT:g} without --time-limit, none "
                   f"with it)")
@click.option("--dag", "dag_path", default=None, type=click.Path(dir_okay=False),
              help="write the execution DAG (.json, .graphml, .dot, .mmd)")
@click.option("--detail", type=click.Choice(["logical", "expanded"]), default="logical", show_default=True,
              help="--dag's detail: one node per operator, or one per GPU shard")
@experts_out_option
@click.option("--emit", "emit_engine", type=click.Choice(["vllm", "sglang", "trtllm"]), default=None,
              help="print ready-to-run launch commands for this serving engine instead of the plan (and price with "
                   "it)")
@click.option("--report", "report_path", default=None, type=click.Path(dir_okay=False),
              help="write a self-contained HTML report of the plan")
@click.option("--runner-up/--no-runner-up", default=None,
              help="solve again without the winner's shape to say why it won (default: on, off with --json; "
                   "costs about one more solve)")
@click.option("--serving", type=click.Choice(["colocated", "disagg", "auto"]), default="colocated",
              show_default=True, help="one layout for both phases, a prefill pool and a decode pool chosen "
                                      "together, or both planned and the better returned (tokens/s per GPU)")
@click.option("--rate", "rate_rps", type=float, default=None,
              help="requests/s to sustain: the plan on the fewest GPUs that serves it within the limits (alone: "
                   "colocated layouts; with --serving disagg|auto, those modes); default: none")
@click.option("--limits-at", "limits_at", type=click.Choice(LIMITS_AT), default="prediction", show_default=True,
              help="hold --ttft-ms/--tpot-ms at the cost model's predictions, or at the engine's median measured "
                   "error: tighter limits, found in rounds, so that the plan's TTFT and TPOT, off as the median run "
                   "of its engine at its load (the plan's measured_error), still meet them; the JSON's limits_at "
                   "says which were held")
@click.pass_context
def solve(ctx: click.Context, as_json: bool, time_limit: float | None, work_limit: float | None,
          dag_path: str | None, detail: str,
          experts_out: str | None, emit_engine: str | None, report_path: str | None, runner_up: bool | None,
          serving: str, rate_rps: float | None, limits_at: LimitsAt, **kw: Any) -> None:
    """Find the best layout: minimum latency, or maximum throughput under the memory cap.

    With no arguments, plans DeepSeek-V3 on two 8xH200 nodes for minimum latency.
    With --serving disagg|auto or --rate: tokens/s per GPU (or the fewest GPUs for the rate) over
    colocated layouts, disaggregated prefill and decode pools, or both. Under --ttft-ms/--tpot-ms a
    disaggregated deployment may run below its pools' full rate, at the most requests in flight that
    keep the limits ("set by concurrency"): admit no more than its plan says.
    Exit 0 with a plan, 1 infeasible (the conflicting rules named), 2 bad input.

    \b
    Examples:
      shardplan solve --model llama-3.1-70b --cluster 2x8xH100 --objective throughput --mem-cap-gib 60
      shardplan solve --model qwen3-235b-a22b --cluster 2x8xH200 --serving auto --tpot-ms 50 --json
    """
    check_time_limit(time_limit)
    work = work_budget(time_limit, work_limit)
    note = work_note(work, given=work_limit is not None)
    if serving != "colocated" or rate_rps is not None:
        # Lazily on purpose: the disaggregated search loads OR-Tools, networkx and the pool models, none
        # of which a colocated solve's start-up needs.
        from shardplan.solver.cli.serving import ServingOutputs, prepare_serving, solve_serving

        if runner_up:
            raise SpecError("runner-up", "not with --serving disagg|auto or --rate: --serving auto shows both modes")
        serving_outputs = ServingOutputs(dag_path, detail, emit_engine, report_path, experts_out)
        objective_given = ctx.get_parameter_source("objective") is not click.core.ParameterSource.DEFAULT
        with OutputFiles(input_files(kw)) as outputs:
            problem = prepare_serving(problem_args(kw), serving, rate_rps, objective_given, serving_outputs, outputs,
                                      limits_at)
            solve_serving(problem, serving, rate_rps, time_limit, as_json, serving_outputs, outputs, work, note,
                          limits_at)
        return
    with OutputFiles(input_files(kw)) as outputs:
        outputs.add("dag", dag_path)
        outputs.add("report", report_path)
        outputs.add("experts-out", experts_out)
        if dag_path:  # an unknown extension is bad input: say so before solving
            # Lazily on purpose: the DAG needs networkx (about 0.2 s of CPU to import), only for --dag.
            from shardplan.solver.dag.export import write_dag, writer_for

            writer_for(dag_path)
        kw["engine"] = engine_with_emit(kw.get("engine"), emit_engine)
        problem = build_problem(problem_args(kw))
        check_experts_out(problem, experts_out)
        check_limits_at(problem, limits_at, ("colocated",))
        deadline = Deadline(time_limit, work)
        with searching("solving", time_limit, quiet=as_json, work_limit=work):
            held, found = solve_colocated(problem, deadline, limits_at)
        if isinstance(found, InfeasibleError):
            if as_json:  # the contract's infeasible object on stdout; the one line still goes to stderr
                emit_json(infeasible_dict(held, found))
            raise found
        plan = found
        if dag_path:
            write_dag(plan, outputs.temp("dag"), detail)
        if experts_out:
            write_experts(outputs.temp("experts-out"), plan.experts)
        left_s = None if time_limit is None else time_limit - (plan.solve_time_s or 0.0)
        show_plan(plan, as_json, emit_engine, report_path,
                  runner_up if runner_up is not None else not (as_json or emit_engine), outputs, left_s,
                  deadline.work_done, work)
        if plan.status == "feasible" and deadline.by_work() and not (as_json or emit_engine):
            click.echo(note)


def input_files(kw: dict[str, Any]) -> list[str | None]:
    """The files the shared options read (a config.json given as --model, a load profile): no output
    may overwrite them."""
    return [kw.get("model"), kw.get("load_profile"), kw.get("profile")]


def check_time_limit(time_limit: float | None) -> None:
    if time_limit is not None and not (time_limit > 0 and math.isfinite(time_limit)):
        raise SpecError("time-limit", f"must be a finite number > 0, got {time_limit}")


def work_budget(time_limit: float | None, work_limit: float | None) -> float | None:
    """The search's work limit (``search_base.Deadline``): ``--work-limit``'s (0: none, a search to the end),
    else ``DEFAULT_WORK_LIMIT`` without --time-limit and none with it (the clock alone bounds it, as before)."""
    if work_limit is None:
        return DEFAULT_WORK_LIMIT if time_limit is None else None
    if not (work_limit >= 0 and math.isfinite(work_limit)):
        raise SpecError("work-limit", f"must be a finite number >= 0 (0: search to the end), got {work_limit}")
    return work_limit or None


def work_note(work: float | None, given: bool) -> str:
    """The human view's line when the work limit, not a proof, ended the search (``work`` None: never)."""
    if work is None:
        return ""
    what = f"--work-limit {work:g}" if given else f"the default work limit ({work:g} units)"
    return (f"note: {what} ended the search before it proved this plan the best; --work-limit N allows more, "
            "--work-limit 0 searches to a proof")


def show_plan(plan: Plan, as_json: bool, emit_engine: str | None, report_path: str | None,
              with_runner_up: bool, outputs: OutputFiles, left_s: float | None = None,
              plan_work: float = 0.0, work_limit: float | None = None) -> None:
    """The plan as the options ask: JSON, a launch command or the human view; and the HTML report.
    Every output file is renamed into place before anything is printed. ``left_s``: what --time-limit
    leaves after the plan's search (None without a limit), the runner-up's budget; ``plan_work``: the
    work the plan's search did (``Deadline.work_done``), which sizes it without a limit, at most
    ``work_limit`` (the plan's own, default or --work-limit): a plan the limit cut short gets a runner-up
    no longer than its own search, not three times it."""
    findings = report.binding_constraints(plan)
    runner, note = None, None
    if with_runner_up and left_s is not None and left_s < MIN_RUNNER_UP_S:
        note = "runner-up not computed: --time-limit was spent on the plan"
    elif with_runner_up:
        # About one more solve; bounded so a large problem does not double its wait unboundedly, and
        # within what --time-limit leaves, so the whole command keeps to it. Without a limit the bound
        # is work, not seconds: the same runner-up on every machine and at every load.
        work = None if left_s is not None else max(RUNNER_UP_MIN_WORK, RUNNER_UP_WORK_FACTOR * plan_work)
        if work is not None and work_limit is not None:
            work = min(work, work_limit)
        with searching("the runner-up", left_s, quiet=as_json):
            runner = report.runner_up(plan, time_limit_s=left_s, work_limit=work)
    else:
        note = "runner-up not computed (--runner-up computes it)"
    data = solved_dict(plan, findings)
    if runner is not None:
        data["runner_up"] = runner.to_dict()
    launch: Emitted | None = None
    if emit_engine:
        launch = emit(plan, emit_engine)
        data["launch"] = launch_dict(emit_engine, launch)
    if report_path:
        report.write_report(outputs.temp("report"), report.plan_report(plan, data, findings, runner, note))
    outputs.commit()
    if as_json:
        emit_json(data)
    elif launch is not None:
        click.echo(launch.script(), nl=False)
    else:
        cli_views().print_plan(data, plan, findings, runner, note)
    if report_path and not as_json and launch is None:
        say_wrote(report_path)


@cli.command(name="enumerate")
@problem_options
@click.option("--jsonl", is_flag=True, help="stream one JSON object per layout, then the frontier")
@click.option("--limit", type=int, default=None,
              help="stop after this many layouts; the output is marked partial (default: none)")
@click.option("--time-limit", type=float, default=None,
              help="seconds for the whole enumeration; the output is marked partial (default: none)")
@click.option("--work-limit", type=float, default=None, metavar="UNITS",
              help=f"search work for the whole enumeration (as solve counts it: a unit is about 1-3 CPU seconds, "
                   f"counted the same at any load, so the same rows every time); the output is marked partial; "
                   f"0: every layout, however long (default: {DEFAULT_WORK_LIMIT:g} without --time-limit, none "
                   f"with it)")
@click.option("--report", "report_path", default=None, type=click.Path(dir_okay=False),
              help="write a self-contained HTML report: latency-throughput scatter and Pareto frontier")
@click.option("--serving", type=click.Choice(["colocated", "disagg", "auto"]), default="colocated", show_default=True,
              help="colocated layouts, or disaggregated deployments (a frontier of tokens/s per GPU "
                   "against tokens/s per user), or auto: both, colocated at the throughput objective, on one "
                   "frontier, each row with its serving mode")
@click.pass_context
def enumerate_cmd(ctx: click.Context, as_json: bool, jsonl: bool, limit: int | None, time_limit: float | None,
                  work_limit: float | None, report_path: str | None, serving: str, **kw: Any) -> None:
    """Every feasible layout with its best boundaries and batch, and the latency-throughput
    Pareto frontier. Stage boundaries are not enumerated (there are ~10^14 ways to cut 61 layers
    into 8 stages): each layout shows its best ones.

    \b
    Example: shardplan enumerate --model llama-3.1-70b --cluster 2x8xH100 --report layouts.html
    """
    if as_json and jsonl:  # --jsonl silently won: one stream of lines where one JSON object was asked for
        raise SpecError("json", "--json and --jsonl are two output formats; give one")
    if limit is not None and limit < 1:
        raise SpecError("limit", f"must be >= 1, got {limit}")
    check_time_limit(time_limit)
    work = work_budget(time_limit, work_limit)
    if serving != "colocated":
        # Lazily on purpose: as in solve, the disaggregated search's modules load only for it.
        from shardplan.solver.cli.enumerate_both import enumerate_both
        from shardplan.solver.cli.serving import check_serving_inputs, enumerate_disagg

        with OutputFiles(input_files(kw)) as outputs:
            outputs.add("report", report_path)
            args = problem_args(kw)
            check_pool_routing(args, serving)
            problem = build_problem(args)
            objective_given = ctx.get_parameter_source("objective") is not click.core.ParameterSource.DEFAULT
            check_serving_inputs(problem, None, objective_given, serving)
            run_modes = enumerate_disagg if serving == "disagg" else enumerate_both
            run_modes(problem, as_json, jsonl, limit, time_limit, report_path, outputs, work)
        return
    with OutputFiles(input_files(kw)) as outputs:
        outputs.add("report", report_path)
        enumerate_and_show(as_json, jsonl, limit, time_limit, report_path, outputs, kw, work)


def enumerate_and_show(as_json: bool, jsonl: bool, limit: int | None, time_limit: float | None,
                       report_path: str | None, outputs: OutputFiles, kw: dict[str, Any],
                       work_limit: float | None = None) -> None:
    """The body of ``enumerate``: rows are printed as they are found (``solver/cli/stream.py``); the report
    goes to a temporary file, renamed before the summary prints. Ctrl-C ends the output as a partial one
    before the one-line interruption."""
    problem = build_problem(problem_args(kw))
    printer = Printer("jsonl" if jsonl else "json" if as_json else "table")
    kept = Kept(with_points=report_path is not None)
    run = Enumeration(problem, limit=limit, time_limit_s=time_limit, work_limit=work_limit)
    deadline = run.deadline  # the enumeration's, and what is left of it for an explanation
    try:
        with cli_views().progress("enumerating layouts", enabled=not (as_json or jsonl)) as tick:
            run.progress = tick
            for plan in run:
                printer.add(enumerated_row(kept.count, plan), kept)
    except KeyboardInterrupt:
        printer.finish(kept, partial=True)
        raise
    if kept.count == 0:
        if run.partial and deadline.passed():
            raise SolverLimitError(deadline.no_plan("layout"))
        # Nothing feasible is an infeasible problem, explained like solve's, never an empty result;
        # --json prints solve's infeasible object too, and the one line still goes to stderr.
        # Lazily on purpose: explaining builds CP-SAT models, and OR-Tools loads only when needed; loading it is
        # not search time (``Deadline.paused``).
        with deadline.paused():
            from shardplan.solver.explain import explain

        exc = InfeasibleError(explain(problem, deadline=deadline))
        if as_json:
            emit_json(infeasible_dict(problem, exc))
        raise exc
    if report_path:
        page = report.enumeration_report(problem, kept.points, kept.marks(), partial=run.partial)
        report.write_report(outputs.temp("report"), page)
    outputs.commit()
    printer.finish(kept, run.partial)
    if report_path and not (as_json or jsonl):
        say_wrote(report_path)


@cli.command(short_help="The rule catalog, or one rule (e.g. TP-001) explained.")
@click.argument("rule_id", required=False)
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def rules(rule_id: str | None, as_json: bool) -> None:
    """The rule catalog; with an ID (e.g. TP-001), what the rule enforces and why.

    \b
    Examples: shardplan rules          shardplan rules TP-001 --json
    """
    # "is not None": an empty ID (a script's unset variable) is an unknown rule, not the whole catalog,
    # whose first rule --json printed as if it had been asked for.
    selected = [get_rule(rule_id)] if rule_id is not None else list(LISTED_RULES)
    data = [rule.describe() for rule in selected]
    if as_json:
        emit_json(data if rule_id is None else data[0])
    else:
        cli_views().print_rules(data, detailed=rule_id is not None)


cli.add_command(validate)  # `shardplan validate FILE.json` (solver/cli/validate.py)


@cli.command(name="mcp")
@click.option("--root", default=None, type=click.Path(file_okay=False),
              help="the one folder whose files tools may read and write (default: none)")
@click.option("--time-limit", type=float, default=DEFAULT_CALL_TIME_S, show_default=True,
              help="seconds a call's solver gets when the call names none")
@click.option("--max-time-limit", type=float, default=MAX_CALL_TIME_S, show_default=True,
              help="the most seconds a call may ask for")
def mcp_server(root: str | None, time_limit: float, max_time_limit: float) -> None:
    """Serve plan, enumerate, evaluate, validate_dag, fix_dag, explain_rule and the preset lists as
    Model Context Protocol tools on stdin/stdout, for an agent (needs the mcp extra:
    pip install 'shardplan[mcp]').

    \b
    Example: shardplan mcp --root ./plans --time-limit 30
    """
    limits = TimeLimits(default_s=time_limit, max_s=max_time_limit)
    checked_root = Root(root).path  # a missing folder is bad input before the SDK loads
    try:
        # Lazily on purpose: the MCP SDK is an optional extra, and loads only for this command.
        from shardplan.solver.mcp.server import serve
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] != "mcp":
            raise
        raise SpecError("mcp", "the MCP SDK is not installed: pip install 'shardplan[mcp]'") from None
    serve(checked_root, limits)


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the group, turning our errors into one line and an exit code.

    The group runs through ``make_context``/``invoke`` rather than ``click``'s ``main``, which would
    turn a closed stdout into exit 1 (our "infeasible") and Ctrl-C into a blank line and "Aborted!".
    """
    _tolerant_streams()
    args = sys.argv[1:] if argv is None else list(argv)
    for i, arg in enumerate(args):
        # No command line carries a NUL (execve ends the argument there), nor a surrogate the file system's encoding
        # cannot turn back into bytes (an undecodable byte arrives as one it can: \udc80-\udcff); main(argv)
        # in-process can, and os.stat, click's path checks and realpath raise ValueError (UnicodeEncodeError) on them
        # (an internal error, exit 3).
        problem = "contains a NUL byte" if "\0" in arg else _unencodable(arg)
        if problem:
            option = (args[i - 1] if i and args[i - 1].startswith("-") else
                      arg.split("=")[0] if arg.startswith("-") else "argument")
            name = printable(option.lstrip("-").replace(chr(0), "")) or "argument"
            fail(f"error: {name}: {problem}", EXIT_BAD_INPUT)
    with held_notes() as notes, _sigterm_unwinds():
        _run(args, notes)


def _unencodable(arg: str) -> str | None:
    """Why ``arg`` holds a character the file system's encoding cannot write, or None when it holds none."""
    try:
        os.fsencode(arg)
    except UnicodeEncodeError as exc:
        return f"holds \\u{ord(arg[exc.start]):04x}, a lone surrogate: not text (no command line carries one)"
    return None


def _tolerant_streams() -> None:
    """stdout and stderr escape what their encoding cannot hold (``\\xe8``) instead of raising.

    Under ``PYTHONIOENCODING=ascii`` (or a latin-1 terminal) a model named by its file's stem
    (``modèle.json``) made the human view raise UnicodeEncodeError: exit 3 and an internal-error line
    for a layout that was priced.
    JSON output is ASCII already (``json_text``); this only changes what would otherwise be a crash.
    """
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)  # an in-process capture may be another kind
        if reconfigure is not None:
            try:
                reconfigure(errors="backslashreplace")
            except (ValueError, OSError):  # closed, or a wrapper that refuses
                pass


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread as Ctrl-C is: the command unwinds through the same paths (every
    temporary output removed, a CP-SAT search stopped, an enumeration's output ended as partial)."""


@contextmanager
def _sigterm_unwinds() -> Iterator[None]:
    """SIGTERM raises ``Terminated`` while the command runs. Python's default is to die at once, without
    unwinding: ``timeout 60 shardplan calibrate ... --out DIR`` left its temporary folder (.shardplan-*) in
    DIR, and ``solve --dag F`` its temporary DAG beside F while the runner-up was searched."""
    if threading.current_thread() is not threading.main_thread():  # signal.signal works there only
        yield
        return
    def terminated(signum: int, frame: object) -> None:
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run(args: list[str], notes: list[str]) -> None:
    """``main``'s body; ``notes`` (``held_notes``) are printed once the command has a result: a plan,
    or ``evaluate``'s verdict (exit 0 or 1), never beside bad input's one line."""
    try:
        try:
            with cli.make_context("shardplan", args) as ctx:
                cli.invoke(ctx)
        except SystemExit as exc:  # a command's own exit: evaluate's verdict on a layout (exit 1)
            if exc.code in (None, 0, EXIT_INFEASIBLE):
                print_notes(notes)
            raise
        if sys.stdout is not None:  # None when the caller closed it (``>&-``)
            sys.stdout.flush()  # here, so a full disk or a failing device is reported below, not at exit
        print_notes(notes)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort as exc:
        if _caused_by_ctrl_c(exc):
            _fail_interrupted(exc)
        fail("aborted", EXIT_BAD_INPUT)
    except click.exceptions.NoArgsIsHelpError:  # its message is the whole --help, squashed onto one line
        fail(f"error: command: none given; one of {', '.join(sorted(cli.commands))} (shardplan --help says "
             "what each does)", EXIT_BAD_INPUT)
    except click.ClickException as exc:  # UsageError, BadParameter, a missing file argument, ...
        fail(f"error: {_click_message(exc)}", EXIT_BAD_INPUT)
    except ShardplanError as exc:  # SpecError, InfeasibleError and the rest of ours
        fail(error_message(exc), EXIT_INFEASIBLE if isinstance(exc, InfeasibleError) else EXIT_BAD_INPUT)
    except BrokenPipeError:
        # The reader went away (``shardplan solve | head -1``): what it read was what it wanted.
        _silence_stdout()
        sys.exit(0)
    except KeyboardInterrupt as exc:
        _fail_interrupted(exc)
    except OSError as exc:
        if exc.errno not in _WRITE_ERRNOS:
            _internal_error(exc)
        # Standard output cannot take the result (``> /dev/full``, a failing disk): nothing more can
        # be written there, so stderr says why and the exit is the unusable-output code, not a bug's.
        _silence_stdout()
        fail(f"error: cannot write standard output: {exc.strerror}", EXIT_BAD_INPUT)
    except RecursionError as exc:
        fail(error_message(exc), EXIT_BAD_INPUT)
    except Exception as exc:  # a bug: still one line, the traceback only on request
        if _caused_by_ctrl_c(exc):
            _fail_interrupted(exc)
        _internal_error(exc)


_EXTRA_ARGUMENTS = "Got unexpected extra argument"  # click's words for words no parameter takes


def _click_message(exc: click.ClickException) -> str:
    """click's message, with a field named where click names none: "Got unexpected extra argument (x)" (a
    stray word, e.g. a value with a space left unquoted) becomes "argument: unexpected extra argument (x) ..."."""
    message = exc.format_message()
    if isinstance(exc, click.UsageError) and message.startswith(_EXTRA_ARGUMENTS) and exc.ctx is not None:
        command = exc.ctx.command_path
        return f"argument: {message[len('Got '):]} for {command} (see {command} --help)"
    return message


def _fail_interrupted(exc: BaseException) -> None:
    """The one line and exit code of a command Ctrl-C (130) or SIGTERM (143, ``Terminated``) ended."""
    if _caused_by(exc, Terminated):
        fail("terminated", EXIT_TERMINATED)
    fail("interrupted", EXIT_INTERRUPTED)


def _caused_by_ctrl_c(exc: BaseException) -> bool:
    return _caused_by(exc, KeyboardInterrupt)


def _caused_by(exc: BaseException, kind: type[BaseException]) -> bool:
    """Whether an exception of ``kind`` is in ``exc``'s chain of causes: Ctrl-C while a compiled module
    (OR-Tools', imported on first use) initialises surfaces as 'ImportError: initialization failed' raised
    from it."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        if isinstance(link, kind):
            return True
        seen.add(id(link))
        link = link.__cause__ or link.__context__
    return False


# errno values of a write that standard output refused (full device, quota, I/O error).
_WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG})


def _internal_error(exc: Exception) -> None:
    """A bug: one line and the internal-error code; SHARDPLAN_DEBUG=1 re-raises for the traceback."""
    if debugging():
        raise exc
    fail(f"internal error: {type(exc).__name__}: {exc} (SHARDPLAN_DEBUG=1 shows the traceback)", EXIT_INTERNAL)


def debugging() -> bool:
    """SHARDPLAN_DEBUG is on when set to anything but empty, 0, false, no or off (any case): any non-empty
    value was on, so SHARDPLAN_DEBUG=0 showed the traceback it was set to hide."""
    return os.environ.get("SHARDPLAN_DEBUG", "").strip().lower() not in ("", "0", "false", "no", "off")


def fail(message: str, code: int) -> None:
    """One line on stderr, then exit: newlines inside a message (a value quoted back) become spaces."""
    line = one_line(message)
    try:
        click.echo(line, err=True)
    except (BrokenPipeError, OSError):
        pass
    sys.exit(code)


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so flushing it at exit does not raise BrokenPipeError again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # an in-process stdout without a descriptor
        pass


if __name__ == "__main__":  # pragma: no cover
    main()
