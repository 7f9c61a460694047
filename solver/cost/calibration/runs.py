"""Serving runs under load as the cost model sees them, and the engine profile they fit.

A run is one closed-loop benchmark of a deployment (``vllm bench serve``, SGLang's ``bench_serving``,
TensorRT-LLM's ``benchmark_serving``) at a stated concurrency: its mean TTFT and TPOT. Each becomes an
``EngineRun`` (the Problem and the Layout at that concurrency, experts placed as ``shardplan evaluate``
places them), and the runs of one engine on one GPU fit an engine profile: the engine's TPOT fields
(``engine_fit.fit_engine``), then its TTFT fields (``ttft_fit.fit_ttft``). ``shardplan calibrate --runs``
reads a user's runs CSV (``RUN_COLUMNS``) here; the accuracy benchmark (benchmarks/accuracy/serving.py)
builds its runs from ``serving_points.csv`` with the same functions.

Conventions for what a run leaves unstated (the benchmark's, README "Latency under load"):

- **layout**: attention TP ``tp`` in each of ``attn_dp`` attention groups, ``pp`` stages, one instance.
  A MoE model's experts spread over the stage's ``tp x attn_dp`` GPUs ``ep`` ways, each expert
  tensor-parallel over the rest (``expert_tp = tp x attn_dp / ep``; ``ep`` 1 is TensorRT-LLM's and
  vLLM's default without expert parallelism). A dense model's ``attn_dp`` groups are whole replicas.
- **batch**: the concurrency is the instance's (all replicas or attention groups); ``Layout.batch`` is
  per replica.
- **KV cache** left blank: TensorRT-LLM takes the ModelOpt checkpoint's FP8 cache for FP8 and FP4
  weights; vLLM and SGLang default ``--kv-cache-dtype auto`` to the activation type, bf16.
- **context**: a run beyond the model's context limit stands as measured (the limit is lifted).

No CP-SAT here; scipy is imported by the fit only.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from shardplan.hardware import get_gpu
from shardplan.hardware.cluster import parse_cluster
from shardplan.hardware.profile import (
    ENGINE_NAMES,
    ENGINES,
    Engine,
    Profile,
    list_profiles,
    profile_for_gpu,
    profile_from_data,
)
from shardplan.models import DType, InfeasibleError, ModelSpec, SolverLimitError, SpecError
from shardplan.models.errors import quoted
from shardplan.models.files import read_csv_rows
from shardplan.models.presets import find_preset
from shardplan.rules.base import Kind, ShapeRule
from shardplan.rules.catalog import CATALOG
from shardplan.rules.layout import Layout
from shardplan.rules.problem import Objective, Problem, Workload
from shardplan.solver.cost.calibration.engine_fit import ENGINE_BOUNDS, ENGINE_FIELDS, EngineRun, fit_engine
from shardplan.solver.cost.calibration.fit import MAX_MEDIAN_MISS, FitTimedOut, at_an_end, profile_json
from shardplan.solver.cost.calibration.points import MAX_VALUE, MIN_VALUE
from shardplan.solver.cost.calibration.ttft_fit import TTFT_BOUNDS, fit_ttft, fitted_fields, ttft_run, with_ttft_fields
from shardplan.solver.cost.calibration.ttft_fit import errors as ttft_errors
from shardplan.solver.cost.evaluate import evaluate
from shardplan.solver.placement.plan import place_and_price

MIN_RUNS = 20  # runs of one engine on one GPU below which no engine profile is fitted

# The runs CSV: the columns every row states (blank allowed where ``read_runs`` says), and those it may add.
RUN_COLUMNS = ("model", "gpu", "weights_dtype", "kv_cache_dtype", "tp", "pp", "ep", "attn_dp", "isl", "osl",
               "concurrency", "ttft_ms", "tpot_ms")
OPTIONAL_COLUMNS = ("engine", "id", "notes")

# Operator terms (op_points.csv) an engine profile carries on top of its GPU's hardware profile: the
# kernels' KV and latent-cache streams, the attention kernel's and the MoE block's fixed costs, the
# per-rank full-width passes (and the all-reduce kernels and FP8 weight stream, kept at the hardware
# profile's where not applied); with the GEMM curve where the GPU's own GEMMs were measured.
OP_TERM_FIELDS = ("kv_stream_efficiency", "mla_stream_efficiency", "attention_fixed_us", "moe_fixed_us",
                  "moe_routed_token_ns", "full_width_passes", "low_precision_stream_ratio", "allreduce_oneshot_us",
                  "allreduce_latency_scale")
GEMM_CURVE_FIELDS = ("gemm_efficiency", "gemm_half_tokens", "low_precision_gemm_ratio")


# --- one run ---------------------------------------------------------------------------------------

def parse_engine(text: str, field: str = "engine") -> tuple[Engine, str]:
    """``vllm 0.11.0`` -> (``vllm``, ``0.11.0``): the engine and the version written after it (may be empty)."""
    words = text.split()
    family = words[0].lower() if words else ""
    if family not in ENGINES:
        raise SpecError(field, f"unknown engine {quoted(text)}; one of {', '.join(ENGINES)}")
    return cast(Engine, family), text.strip()[len(family):].strip()  # one of ENGINES: checked above


def default_kv(engine: str, weights: DType) -> DType:
    """The KV cache an engine keeps unless told: TensorRT-LLM the ModelOpt FP8/FP4 checkpoint's FP8 cache,
    vLLM and SGLang (``--kv-cache-dtype auto``) the activation type."""
    if engine == "trtllm" and weights in (DType.FP8, DType.FP4):
        return DType.FP8
    return DType.BF16


def serving_model(model: ModelSpec, weights: DType, kv: DType, isl: int, osl: int) -> ModelSpec:
    """``model`` in the run's number formats, its context limit lifted to the run's ISL + OSL if below."""
    model = model.with_dtypes(weights, kv)
    if isl + osl > model.max_position_embeddings:
        model = model.model_copy(update={"max_position_embeddings": isl + osl})
    return model


def serving_layout(
    model: ModelSpec, tp: int, pp: int, attn_dp: int, expert_tp: int, concurrency: int
) -> tuple[Layout, frozenset[str]]:
    """The layout of one serving instance at ``concurrency`` sequences in flight, and the default rules it
    needs off: a MoE model runs ``attn_dp`` attention groups of ``tp`` per stage with experts ``expert_tp``-way
    tensor-parallel (``expert-tp`` allowed when above 1); a dense model's ``attn_dp`` groups are replicas."""
    allow: frozenset[str] = frozenset()
    if model.is_moe:
        replicas, degrees = 1, dict(tp=tp, attn_dp=attn_dp, expert_tp=expert_tp)
        if expert_tp > 1:
            allow = frozenset({"expert-tp"})
    else:
        replicas, degrees = attn_dp, dict(tp=tp)
    if concurrency % replicas:
        raise SpecError("concurrency", f"{concurrency} over {replicas} replicas")
    return Layout.even(model.num_layers, pp, dp=replicas, batch=concurrency // replicas, **degrees), allow


def serving_problem(
    model: ModelSpec, gpu: str, layout: Layout, isl: int, osl: int, allow: frozenset[str], engine: Engine
) -> Problem:
    """The problem a serving run prices: ``layout``'s GPUs of ``gpu`` (as ``--cluster`` reads ``NxGPU``), the
    run's workload at the layout's batch, priced with ``engine``'s profile unless one is given."""
    return Problem(
        model=model,
        cluster=parse_cluster(f"{layout.num_gpus}x{gpu}"),
        workload=Workload(isl=isl, osl=osl, batch=layout.batch),
        objective=Objective.THROUGHPUT,
        allow=allow,
        engine=engine,
    )


def placed_run(
    problem: Problem, layout: Layout, tpot_ms: float, ttft_ms: float, version: str = "", origin: str = ""
) -> EngineRun:
    """The run with its experts placed as ``shardplan evaluate`` places them (once: the placement does not
    depend on the fields fitted)."""
    placed, _, _ = place_and_price(problem, layout)
    return EngineRun(problem, placed, tpot_ms, ttft_ms, problem.model.name, version, origin)


# Structural rules a measured run may still break: BAT-001, a concurrency above the engine's batch limit, is a
# common benchmark setting (`vllm bench serve --max-concurrency 2048` against --max-num-seqs 1024: the server
# queues the rest); the accuracy benchmark prices such runs as ``evaluate`` does, and so does the fit.
MEASURED_MAY_BREAK = frozenset({"BAT-001"})


def refuse_shape(problem: Problem, layout: Layout) -> None:
    """A ``SpecError`` naming the first structural rule on a stage's shape the layout breaks (``TP-001``
    tp-not-dividing-heads, ...): no engine runs such a layout. The rules a measured run may well break are
    not asked: the memory and SLA rules (the run was measured; it is priced as ``evaluate`` prices it) and
    the default rules, whose switches are policy (expert-tp is allowed where the row says so)."""
    for rule in CATALOG:
        if (isinstance(rule, ShapeRule) and rule.kind is Kind.STRUCTURAL and rule.id not in MEASURED_MAY_BREAK
                and rule.applies(problem) and rule.forbids(problem, layout)):
            raise SpecError(rule.id, rule.violation(problem, layout))


# --- the runs CSV ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class MeasuredRun:
    """One row of a runs CSV, ready to price."""

    row_id: str  # the ``id`` column, else the row's line number
    engine: Engine
    gpu: str  # the GPU preset's name
    label: str
    run: EngineRun


def _count(row: dict[str, str], column: str, blank: int | None = None) -> int:
    text = row[column].strip()
    if not text and blank is not None:
        return blank
    try:
        value = int(text)
    except ValueError:
        raise SpecError(column, f"{quoted(text, 20)} is not a whole number") from None
    if value < 1:
        raise SpecError(column, f"must be at least 1, got {value}")
    return value


def _ms(row: dict[str, str], column: str) -> float:
    text = row[column].strip()
    try:
        value = float(text)
    except ValueError:
        raise SpecError(column, f"{quoted(text, 20)} is not a number") from None
    if not (math.isfinite(value) and MIN_VALUE <= value <= MAX_VALUE):
        raise SpecError(column, f"must be a number in {MIN_VALUE:g}..{MAX_VALUE:g} ms, got {quoted(text, 20)}")
    return value


def _run_of_row(row: dict[str, str], engine_option: Engine | None) -> MeasuredRun:
    """One row as a ``MeasuredRun``; anything it cannot be is a ``SpecError`` naming the column."""
    if row.get("engine", "").strip():
        engine, version = parse_engine(row["engine"])
    elif engine_option is not None:
        engine, version = engine_option, ""
    else:
        raise SpecError("engine", "blank: state the engine in the column or give --engine")
    preset = find_preset(row["model"])
    if preset is None:
        raise SpecError("model", f"{quoted(row['model'], 40)} is not a model preset id or alias (shardplan models)")
    gpu = get_gpu(row["gpu"].strip()).name
    base = preset.load()
    weights_text, kv_text = row["weights_dtype"].strip(), row["kv_cache_dtype"].strip()
    weights = DType.parse(weights_text, "weights_dtype") if weights_text else base.weights_dtype
    kv = DType.parse(kv_text, "kv_cache_dtype") if kv_text else default_kv(engine, weights)
    tp, pp = _count(row, "tp"), _count(row, "pp")
    ep, attn_dp = _count(row, "ep", blank=1), _count(row, "attn_dp", blank=1)
    isl, osl, concurrency = _count(row, "isl"), _count(row, "osl"), _count(row, "concurrency")
    ttft_ms, tpot_ms = _ms(row, "ttft_ms"), _ms(row, "tpot_ms")
    model = serving_model(base, weights, kv, isl, osl)
    stage = tp * attn_dp
    if not model.is_moe and ep != 1:
        raise SpecError("ep", f"{ep} for a dense model (no experts): leave it blank or 1")
    if stage % ep:
        raise SpecError("ep", f"{ep} does not divide the stage's {stage} GPUs (tp x attn_dp)")
    layout, allow = serving_layout(model, tp, pp, attn_dp, stage // ep, concurrency)
    problem = serving_problem(model, gpu, layout, isl, osl, allow, engine)
    refuse_shape(problem, layout)
    run = placed_run(problem, layout, tpot_ms, ttft_ms, version, row.get("notes", "").strip())
    label = (f"{preset.aliases[0] if preset.aliases else preset.id} {weights.value}/{kv.value} {gpu} {engine} "
             f"tp{tp} pp{pp} ep{ep} attn_dp{attn_dp} {isl}/{osl} c{concurrency}")
    return MeasuredRun(row.get("id", "").strip(), engine, gpu, label, run)


def read_runs(path: str | Path, engine: Engine | None = None) -> list[MeasuredRun]:
    """Every row of the runs CSV at ``path`` (``RUN_COLUMNS``, and optionally ``OPTIONAL_COLUMNS``): a file
    that is not a UTF-8 CSV with those columns, or a row that does not describe a run (a short or long row, a
    non-number, an unknown model, GPU, engine or number format, a layout the model cannot take) is a
    ``SpecError`` naming the column and the row. ``engine``: the engine of rows that leave it blank."""
    rows = read_csv_rows(path, "runs", RUN_COLUMNS, skip_blank_cells=True)
    if not rows:
        raise SpecError("runs", f"{path}: no runs (a header and no rows)")
    out = []
    for line, row in rows:
        try:
            measured = _run_of_row(row, engine)
        except (SpecError, ValueError) as exc:  # ValueError: a layout or problem its validators refuse
            what = f"{exc.field}: {exc.reason}" if isinstance(exc, SpecError) else str(exc).splitlines()[0]
            raise SpecError(f"runs row {line}", what) from None
        out.append(measured if measured.row_id else _with_id(measured, str(line)))
    return out


def _with_id(run: MeasuredRun, row_id: str) -> MeasuredRun:
    return MeasuredRun(row_id, run.engine, run.gpu, run.label, run.run)


# --- the fit ----------------------------------------------------------------------------------------

def hardware_profile(gpu: str) -> Profile:
    """The GPU's default (hardware) profile."""
    return next((p for p in list_profiles() if p.default and p.gpu == gpu), profile_for_gpu(gpu, "trtllm"))


def engine_base(gpu: str, engine: Engine) -> Profile:
    """What an engine profile for ``gpu`` starts from: the GPU's hardware profile with the operator terms
    (``OP_TERM_FIELDS``, ``GEMM_CURVE_FIELDS``) its stored engine profiles carry (benchmarks/accuracy/serving.py
    ``base_profile`` sets them from op_points.csv; every engine's profile of a GPU holds the same, rounded as
    stored: ``engine``'s own is read). A GPU without a stored engine profile starts from the profile its plans
    for ``engine`` are priced with today, composed from its hardware profile and the engine's behaviour
    (``hardware/compose.py``): op_points.csv measured H100 and H200 kernels only, and the package does not ship
    it, so the fit refines what such a plan already assumes."""
    stored = [p for p in list_profiles() if p.engine_default and p.gpu == gpu]
    if not stored:
        return profile_for_gpu(gpu, engine)
    own = next((p for p in stored if p.engine == engine), stored[0])
    return hardware_profile(gpu).model_copy(
        update={f: getattr(own, f) for f in (*OP_TERM_FIELDS, *GEMM_CURVE_FIELDS)})


@dataclass(frozen=True)
class RunsFit:
    """An engine profile fitted to one engine's runs on one GPU, as it reads back from its file, and each
    run's relative errors (predicted / measured - 1) priced with it."""

    profile: Profile
    runs: tuple[MeasuredRun, ...]
    predicted: tuple[tuple[float, float], ...]  # (TTFT ms, TPOT ms) of each run

    @property
    def fields(self) -> tuple[str, ...]:
        """The fields fitted: the TPOT fields, then the engine's two TTFT fields."""
        return (*ENGINE_FIELDS, *fitted_fields(self.profile.prefill_mixes_with_decode))

    @property
    def tpot_errors(self) -> list[float]:
        return [tpot / m.run.tpot_ms - 1 for m, (_, tpot) in zip(self.runs, self.predicted, strict=True)]

    @property
    def ttft_errors(self) -> list[float]:
        return [ttft / m.run.ttft_ms - 1 for m, (ttft, _) in zip(self.runs, self.predicted, strict=True)]

    @property
    def median_abs_tpot_error(self) -> float:
        return statistics.median(abs(e) for e in self.tpot_errors)

    @property
    def median_abs_ttft_error(self) -> float:
        return statistics.median(abs(e) for e in self.ttft_errors)

    @property
    def median_miss(self) -> float:
        """How many times off the profile is on its median run, a miss either way counted alike, in TPOT or TTFT
        whichever is worse (the table fit's ``FitResult.median_miss``)."""
        return max(math.exp(statistics.median(abs(math.log1p(e)) for e in errors))
                   for errors in (self.tpot_errors, self.ttft_errors))


def field_bounds(field: str) -> tuple[float, float]:
    return ENGINE_BOUNDS[field] if field in ENGINE_BOUNDS else TTFT_BOUNDS[field]


def at_bound(field: str, value: float) -> bool:
    """Whether a fitted field sits at an end of its physical range (``fit.at_an_end``, as ``engine_fit`` and
    ``ttft_fit`` ask it)."""
    return at_an_end(value, *field_bounds(field))


FITTED_BY = "shardplan calibrate --runs"


def fit_runs(runs: Sequence[MeasuredRun], source_note: str, end_at: float | None = None) -> RunsFit:
    """The engine profile of ``runs`` (one engine on one GPU, at least ``MIN_RUNS``): ``engine_base`` with the
    TPOT fields fitted (``fit_engine``), then the TTFT fields on the runs priced with those
    (``fit_ttft``), named ``<gpu>-<engine>-calibrated`` (not the stored profile's name: a plan quotes the stored
    profile's measured error only when priced with it). ``end_at``: a ``time.time()`` past which the fit
    ends in ``FitTimedOut``."""
    engine, gpu = runs[0].engine, runs[0].gpu
    if any(m.engine != engine or m.gpu != gpu for m in runs):
        raise SpecError("runs", "one engine profile fits one engine on one GPU")
    if len(runs) < MIN_RUNS:
        raise SpecError("runs", f"{ENGINE_NAMES[engine]} on {gpu}: {len(runs)} runs, an engine profile needs at "
                                f"least {MIN_RUNS} (several layouts and concurrencies)")
    engine_runs = [m.run for m in runs]
    base = engine_base(gpu, engine)
    start = ("operator terms as the stored engine profiles of this GPU carry them" if base.engine is None else
             f"the other fields as {base.name} carries them (no stored engine profile of this GPU)")
    fitted = fit_engine(base, engine, engine_runs, source_note, start, fitted_by=FITTED_BY, end_at=end_at)
    if end_at is not None and time.time() >= end_at:
        raise FitTimedOut
    timed = [ttft_run(r, fitted.profile) for r in engine_runs]
    fields = fit_ttft(timed)
    error = statistics.median(abs(e) for e in ttft_errors(timed, fields))
    profile = with_ttft_fields(fitted.profile, fields, len(timed), error, fitted_by=FITTED_BY,
                               runs_note=f"of {source_note}")
    profile = profile.model_copy(update={"name": f"{gpu.lower()}-{engine}-calibrated"})
    # Price with the profile as its file reads back (floats at the stored digits), so the figures are the file's.
    stored = profile_from_data(json.loads(profile_json(profile)), profile.name)
    predicted = []
    for r in engine_runs:
        metrics = evaluate(r.problem, r.layout, stored).metrics
        predicted.append((metrics.ttft_ms, metrics.tpot_ms))
    return RunsFit(stored, tuple(runs), tuple(predicted))


def group_runs(runs: Sequence[MeasuredRun]) -> dict[tuple[str, str], list[MeasuredRun]]:
    """The runs per (engine, GPU), in file order within each."""
    groups: dict[tuple[str, str], list[MeasuredRun]] = {}
    for m in runs:
        groups.setdefault((m.engine, m.gpu), []).append(m)
    return dict(sorted(groups.items()))


def calibrate_runs(
    path: str | Path, *, engine: Engine | None = None, gpu: str | None = None, one_profile: bool = False,
    time_limit_s: float | None = None,
) -> list[RunsFit]:
    """One engine profile per (engine, GPU) of the runs CSV at ``path`` (only ``engine``'s and ``gpu``'s runs
    when given; ``engine`` is also the engine of rows that leave it blank). With ``one_profile``, runs making
    more than one profile are refused before any fit. Every group needs ``MIN_RUNS`` runs. ``time_limit_s``: the
    fits not done within it (counted from here) end in ``SolverLimitError`` naming ``time-limit``."""
    end_at = None if time_limit_s is None else time.time() + time_limit_s
    runs = read_runs(path, engine)
    if engine is not None:
        runs = [m for m in runs if m.engine == engine]
        if not runs:
            raise SpecError("engine", f"no {engine} runs in {path}")
    if gpu is not None:
        name = get_gpu(gpu).name
        runs = [m for m in runs if m.gpu == name]
        if not runs:
            raise SpecError("gpu", f"no runs on {name} in {path}")
    groups = group_runs(runs)
    if one_profile and len(groups) > 1:
        names = ", ".join(f"{e} on {g}" for e, g in groups)
        raise SpecError("out", f"the runs make {len(groups)} profiles ({names}): choose one with --engine/--gpu, "
                               "or pass a directory")
    for (e, g), group in groups.items():
        if len(group) < MIN_RUNS:
            raise SpecError("runs", f"{ENGINE_NAMES[e]} on {g}: {len(group)} runs, an engine profile needs at least "
                                    f"{MIN_RUNS} (several layouts and concurrencies)")
    try:
        fits = [fit_runs(group, Path(path).name, end_at) for group in groups.values()]
    except FitTimedOut:
        raise SolverLimitError(f"time-limit: the fit of {len(runs)} runs into {len(groups)} profile(s) had not "
                               f"finished within {time_limit_s:g} s; fit fewer runs (--engine, --gpu) or give it "
                               "more time") from None
    refused = [f for f in fits if f.median_miss > MAX_MEDIAN_MISS]
    if refused:  # as the table fit refuses: what such a profile holds is its bounds, not the runs
        raise InfeasibleError([("runs", "no profile inside the physical ranges describes the runs: " + "; ".join(
            f"{f.profile.name}'s fit of {len(f.runs)} runs misses its median run {f.median_miss:.3g}-fold (at most "
            f"{MAX_MEDIAN_MISS:g}-fold is written)" for f in refused) + "; nothing written")])
    return fits


__all__ = [
    "MIN_RUNS", "OPTIONAL_COLUMNS", "RUN_COLUMNS", "MeasuredRun", "RunsFit", "at_bound", "calibrate_runs",
    "default_kv", "engine_base", "field_bounds", "fit_runs", "group_runs", "hardware_profile", "parse_engine",
    "placed_run", "read_runs", "serving_layout", "serving_model", "serving_problem",
]
