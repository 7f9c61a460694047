"""Latency under load: the AIC-SILICON aggregated runs of ``serving_points.csv`` against the cost model.

``python -m benchmarks.accuracy.serving`` loads the closed-loop runs (one pool, a stated concurrency)
whose model and GPU have presets, prices each layout at its concurrency with the GPU's default
profile as ``shardplan evaluate --json`` does (experts placed, then ``evaluate``: ``metrics.ttft_ms``
with its wait, ``metrics.tpot_ms`` with the prefill sharing its steps), and prints the median |error|
and the median signed error of TTFT and TPOT per engine, per concurrency bucket and overall. The
latency-under-load formula lives in ``solver/cost/evaluate.py``, not here; nothing is fitted.
Runs whose layout does not fit memory at their concurrency are priced anyway and counted apart.

Conventions for what the runs leave unstated (read with ``solver/cost/calibration/points.py``):

- **models**: DeepSeek-R1 and -V3 (and NVIDIA's NVFP4 R1) share the DeepSeek-V3 architecture;
  Kimi-K2.5's language model is Kimi-K2's (``DeepseekV3ForCausalLM``: 61 layers, hidden 7168, 384
  experts top-8, MLA; K2.5 is K2-Base continued on vision-text tokens, its vision tower is left out);
  Llama-3.1-8B(-Instruct, -FP8) and -70B; Qwen3-235B-A22B(-FP8). MiniMax-M2.5, Qwen3.5-397B and
  GLM-5 have no preset: skipped as ``no-preset``.
- **GPUs**: B300/GB300 have no preset: skipped as ``no-gpu-preset``.
- **layout** (``notes``: ``dp column = attention-DP size; moe_tp=.. moe_ep=..``): attention TP = ``tp``,
  ``attn_dp`` = ``dp``, pipeline ``pp``, one replica; MoE layers ``expert_tp = moe_tp`` over the
  stage's GPUs, so ``ep = G / moe_tp``, which must equal the recorded ``moe_ep`` (else ``bad-row``);
  ``expert-tp`` allowed when ``moe_tp > 1``. Dense models with ``dp > 1`` are ``dp`` replicas.
  Rows flagged ``tp>8 as recorded in source; verify`` are skipped (``tp-unverified``).
- **batch**: the concurrency is the instance's (all attention-DP ranks); ``Layout.batch`` is per replica.
- **one measurement, one run**: the source merges dumps that repeat runs under other ids; a run with
  the same engine, model, GPU, formats, workload, concurrency and both measured values as an earlier one
  is counted once (``duplicate``); where the copies disagree on the GPU count, the fewest-GPU copy is kept
  (``gpu-count-conflict``: the evidence is in ``SKIP_REASONS``).
- **number formats**: weights from ``weights_dtype`` (fp8, fp4 = NVFP4, int4 = weight-only INT4,
  bf16; ``unspecified`` is the bf16 checkpoint). KV cache is unrecorded: TensorRT-LLM takes the
  ModelOpt checkpoint's FP8 KV cache (``kv_cache_config.dtype=auto`` reads ``hf_quant_config``), so
  fp8 for fp8/fp4 weights; vLLM and SGLang default ``--kv-cache-dtype auto`` to the activation type,
  so bf16.
"""

from __future__ import annotations

import argparse
import csv
import math
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TypeVar, cast

from benchmarks.accuracy import _SHARED, POINTS_CSV
from benchmarks.accuracy.ttft_shape import PricedRun, print_shape, repeat_spread
from shardplan.hardware import get_gpu
from shardplan.hardware.profile import Engine, Profile, list_profiles, profile_for_gpu, reload_profiles
from shardplan.models import DType, SpecError, get_model
from shardplan.rules.layout import Layout
from shardplan.rules.problem import Problem
from shardplan.solver.cost.calibration.engine_fit import (
    ENGINE_BOUNDS,
    ENGINE_FIELDS,
    EngineRun,
    at_bound,
    decode_floor_ms,
    fit_engine,
    table_errors,
    tpot_errors,
    tpot_floor_ms,
)
from shardplan.solver.cost.calibration.fit import (
    FLASHMLA_H800_SHARE,
    OpFactors,
    allreduce_terms,
    gemm_terms,
    mla_stream_efficiency,
    op_factors,
    write_profile,
)
from shardplan.solver.cost.calibration.op_terms import (
    MOE_ROUTED_AT_BANDWIDTH,
    OpTerms,
    moe_held_out_errors,
    moe_points,
    moe_terms,
    moe_terms_per_gpu,
    op_terms,
    read_op_points,
)
from shardplan.solver.cost.calibration.points import THROUGHPUT, Point, load_points
from shardplan.solver.cost.calibration.runs import (
    MIN_RUNS,
    default_kv,
    hardware_profile,
    parse_engine,
    placed_run,
    serving_layout,
    serving_model,
    serving_problem,
)
from shardplan.solver.cost.calibration.ttft_fit import (
    TTFT_BOUNDS,
    TTFT_FIELDS,
    TtftRun,
    fit_ttft,
    fitted_fields,
    leave_one_band_out,
    median_abs,
    ttft_run,
    with_ttft_fields,
)
from shardplan.solver.cost.calibration.ttft_fit import at_bound as ttft_at_bound
from shardplan.solver.cost.calibration.ttft_fit import errors as ttft_errors
from shardplan.solver.cost.calibration.ttft_fit import leave_one_model_out as ttft_leave_one_model_out
from shardplan.solver.cost.calibration.ttft_fit import leave_one_source_out as ttft_leave_one_source_out
from shardplan.solver.cost.evaluate import fits
from shardplan.solver.placement.plan import place_and_price

RunT = TypeVar("RunT")  # a run of either benchmark (colocated here, disaggregated in disagg.py)

SERVING_CSV = _SHARED / "serving_points.csv"
OPS_CSV = _SHARED / "op_points.csv"
SOURCE = "AIC-SILICON"

MODEL_PRESETS = {
    "deepseek-ai/DeepSeek-R1": "deepseek-v3",
    "deepseek-ai/DeepSeek-V3": "deepseek-v3",
    "nvidia/DeepSeek-R1-NVFP4": "deepseek-v3",
    "moonshotai/Kimi-K2.5": "kimi-k2",
    "meta-llama/Llama-3.1-70B": "llama-3.1-70b",
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "nvidia/Llama-3.1-8B-Instruct-FP8": "llama-3.1-8b",
    "Qwen/Qwen3-235B-A22B": "qwen3-235b-a22b",
    "Qwen/Qwen3-235B-A22B-FP8": "qwen3-235b-a22b",
}
ENGINES = ("vllm", "sglang", "trtllm")
BUCKETS = (("1", 1, 1), ("2-16", 2, 16), ("17-128", 17, 128), (">128", 129, math.inf))
SKIP_REASONS = {
    "disagg": "separate prefill and decode pools (mode=disagg): not one layout",
    "no-preset": "model has no preset (MiniMax-M2.5, Qwen3.5-397B, GLM-5)",
    "no-gpu-preset": "GPU has no preset (B300, GB300)",
    "tp-unverified": "the source flags the TP degree (tp>8 as recorded in source; verify)",
    "no-concurrency": "concurrency not stated",
    "bad-row": "row does not describe a valid layout (GPU count, ep = G / moe_tp, dtype)",
    "gpu-count-conflict": "the same measurement recorded again with more GPUs (11 measurements, all TensorRT-LLM "
    "DeepSeek attention-DP runs: G GPUs with attention-DP G in the 2026-03-25 dump, G x G in the 2026-04-06 or "
    "DB dump, whose run ids still say tp8_ep8; TensorRT-LLM's tp_size is the world size with attention DP on, so "
    "tp x DP counts it twice; the G-GPU layout's TPOT matches): the fewest-GPU copy is kept",
    "duplicate": "the same run again: the source merges dumps (2026-03-25, 2026-04-06, the 2026-04-27 DB) that "
    "repeat runs under other ids, with the same configuration and the same TTFT and TPOT to every digit",
}


@dataclass(frozen=True)
class ServingRun:
    """One measured run (a configuration at one concurrency): its TTFT and TPOT and how to price it."""

    key: str  # the source's row id (configuration and concurrency)
    engine: Engine
    engine_version: str
    label: str
    concurrency: int  # sequences in flight over the whole instance
    problem: Problem
    layout: Layout
    ttft_ms: float
    tpot_ms: float
    origin: str = ""  # the source's measurement campaign (``origin``)

    @property
    def bucket(self) -> str:
        return next(name for name, lo, hi in BUCKETS if lo <= self.concurrency <= hi)


def _skip_reason(row: dict[str, str]) -> str | None:
    notes = row["notes"]
    if "mode=agg" not in notes:
        return "disagg"
    if row["model"] not in MODEL_PRESETS:
        return "no-preset"
    try:
        get_gpu(row["gpu"])
    except SpecError:
        return "no-gpu-preset"
    if "tp>8 as recorded in source" in notes:
        return "tp-unverified"
    if not row["concurrency"].strip():
        return "no-concurrency"
    return None


def _weights(text: str) -> DType:
    head = text.split("(")[0].strip().lower()
    return DType.BF16 if head in ("unspecified", "") else DType.parse(head, "weights_dtype")


def _run(row: dict[str, str], ttft_ms: float, tpot_ms: float) -> ServingRun:
    engine, version = parse_engine(row["engine"])
    weights = _weights(row["weights_dtype"])
    isl, osl = int(row["isl"]), int(row["osl"])
    model = serving_model(get_model(MODEL_PRESETS[row["model"]]), weights, default_kv(engine, weights), isl, osl)
    tp, pp, dp, num_gpus = int(row["tp"]), int(row["pp"]), int(row["dp"] or 1), int(row["num_gpus"])
    found = re.search(r"moe_tp=(\d+) moe_ep=(\d+)", row["notes"])
    moe_tp, moe_ep = (int(found.group(1)), int(found.group(2))) if found else (1, 1)
    concurrency = int(row["concurrency"])
    layout, allow = serving_layout(model, tp, pp, dp, moe_tp, concurrency)
    if layout.num_gpus != num_gpus:
        raise SpecError("num_gpus", f"layout uses {layout.num_gpus} GPUs, the row {num_gpus}")
    if model.is_moe and layout.ep != moe_ep:
        raise SpecError("moe_ep", f"ep = G / moe_tp = {layout.ep}, the row {moe_ep}")
    gpu = get_gpu(row["gpu"])
    problem = serving_problem(model, gpu.name, layout, isl, osl, allow, engine)
    label = (
        f"{row['model'].split('/')[-1]} {weights.value} {gpu.name} {engine} tp{tp}pp{pp}dp{dp} "
        f"moe{moe_tp}x{moe_ep} {isl}/{osl} c{concurrency}"
    )
    return ServingRun(row["source"], engine, version, label, concurrency, problem, layout, ttft_ms, tpot_ms,
                      _origin(row["notes"]))


def _origin(notes: str) -> str:
    """The measurement campaign a run came from (``origin=`` in ``notes``): one of the source's dumps, or its
    gap-analysis files taken together."""
    found = re.search(r"origin=([^;(]*)", notes)
    return found.group(1).strip() if found else ""


def _source_rows(path: str | Path) -> list[dict[str, str]]:
    """The CSV's rows of ``SOURCE``. Not ``points.read_rows``: that one requires every row's ISL,
    and the file's other sources leave it blank where they do not state it."""
    with open(path, newline="", encoding="utf-8") as f:
        return [row for row in csv.DictReader(f) if row["source_id"] == SOURCE]


def pair_runs(
    rows: Iterable[dict[str, str]], make: Callable[[dict[str, str], float, float], RunT], skipped: Counter[str]
) -> list[RunT]:
    """One run per ``source`` key from its two rows (its TTFT and its TPOT), built by ``make(ttft row,
    ttft ms, tpot ms)``. A key without both rows, or one ``make`` refuses (``SpecError`` or ``ValueError``:
    e.g. moe_tp wider than the stage), is counted in ``skipped`` as bad rows and set aside."""
    by_key: dict[str, dict[str, dict[str, str]]] = defaultdict(dict)
    for row in rows:
        kind = row["metric"].split("_")[0]  # ttft or tpot
        by_key[row["source"]][kind] = row
    runs = []
    for metrics in by_key.values():
        if set(metrics) != {"ttft", "tpot"}:
            skipped["bad-row"] += len(metrics)
            continue
        try:
            runs.append(make(metrics["ttft"], float(metrics["ttft"]["value"]), float(metrics["tpot"]["value"])))
        except (SpecError, ValueError):
            skipped["bad-row"] += 2
    return runs


def load_runs(path: str | Path = SERVING_CSV) -> tuple[list[ServingRun], Counter[str]]:
    """The usable runs, and how many CSV rows (of the source) each skip reason took."""
    skipped: Counter[str] = Counter()
    usable = []
    for row in _source_rows(path):
        reason = _skip_reason(row)
        if reason is not None:
            skipped[reason] += 1
        else:
            usable.append(row)
    return _once_each(pair_runs(usable, _run, skipped), skipped), skipped


def _measurement(run: ServingRun) -> tuple[object, ...]:
    """What identifies one measurement: the engine, model, number formats, GPU, workload, concurrency and
    both measured values (two runs agreeing on all of it to the CSV's digits are one run)."""
    p = run.problem
    return (run.engine, p.model.name, p.model.weights_dtype, p.cluster.gpu.name, p.workload.isl, p.workload.osl,
            run.concurrency, run.ttft_ms, run.tpot_ms)


def _once_each(runs: list[ServingRun], skipped: Counter[str]) -> list[ServingRun]:
    """Each measurement once, in file order. Copies with the same layout are ``duplicate`` rows; copies
    recorded with more GPUs than another copy of the same measurement are ``gpu-count-conflict`` rows, and
    the copy with the fewest GPUs is kept (``SKIP_REASONS`` says why)."""
    copies: dict[tuple[object, ...], list[int]] = defaultdict(list)
    for i, r in enumerate(runs):
        copies[_measurement(r)].append(i)
    kept = []
    for indices in copies.values():
        best = min(indices, key=lambda i: (runs[i].layout.num_gpus, i))
        kept.append(best)
        for i in indices:
            if i != best:
                same_layout = runs[i].layout == runs[best].layout
                skipped["duplicate" if same_layout else "gpu-count-conflict"] += 2
    return [runs[i] for i in sorted(kept)]


# --- comparing ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Priced:
    """One run as ``shardplan evaluate`` prices it, and its relative errors (predicted / measured - 1)."""

    run: ServingRun
    ttft_ms: float
    tpot_ms: float
    fits: bool  # the layout's KV cache and weights fit the default profile's memory at the concurrency

    @property
    def ttft_error(self) -> float:
        return self.ttft_ms / self.run.ttft_ms - 1

    @property
    def tpot_error(self) -> float:
        return self.tpot_ms / self.run.tpot_ms - 1


def price(runs: Iterable[ServingRun]) -> list[Priced]:
    """Each run at its concurrency with the GPU's default profile, experts placed as the CLI places
    them (``place_and_price``), so the numbers are those ``shardplan evaluate --json`` prints."""
    out = []
    for r in runs:
        layout, prediction, _ = place_and_price(r.problem, r.layout)
        metrics = prediction.metrics
        out.append(Priced(r, metrics.ttft_ms, metrics.tpot_ms, fits(r.problem, layout)))
    return out


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def table(priced: Sequence[Priced]) -> list[tuple[str, int, float, float, float, float]]:
    """Rows (group, runs, median |TTFT err|, median |TPOT err|, median signed TTFT and TPOT err)."""
    groups: dict[str, list[Priced]] = defaultdict(list)
    for p in priced:
        groups[p.run.engine].append(p)
        groups[f"c {p.run.bucket}"].append(p)
        groups["all"].append(p)
    order = [*ENGINES, *(f"c {b[0]}" for b in BUCKETS), "all"]
    return [
        (g, len(groups[g]),
         _median([abs(p.ttft_error) for p in groups[g]]), _median([abs(p.tpot_error) for p in groups[g]]),
         _median([p.ttft_error for p in groups[g]]), _median([p.tpot_error for p in groups[g]]))
        for g in order if groups[g]
    ]


def print_table(title: str, priced: Sequence[Priced]) -> None:
    print(title)
    print(f"  {'group':10s} {'runs':>5s} {'|TTFT|':>8s} {'|TPOT|':>8s} {'TTFT bias':>9s} {'TPOT bias':>9s}")
    for g, n, ttft, tpot, ttft_bias, tpot_bias in table(priced):
        print(f"  {g:10s} {n:5d} {ttft:8.1%} {tpot:8.1%} {ttft_bias:+9.1%} {tpot_bias:+9.1%}")


def offset_table(priced: Sequence[Priced]) -> list[tuple[str, float, float, float, float]]:
    """Per engine: the median predicted / measured ratio of TTFT and TPOT, and the median |error| left
    once each run is divided by its engine's median ratio (how much of the error one engine-wide
    offset would carry)."""
    out = []
    for engine in ENGINES:
        group = [p for p in priced if p.run.engine == engine]
        if not group:
            continue
        row: list[float] = []
        for ratios in ([1 + p.ttft_error for p in group], [1 + p.tpot_error for p in group]):
            offset = statistics.median(ratios)
            row += [offset, statistics.median(abs(r / offset - 1) for r in ratios)]
        out.append((engine, *row))
    return out


def _band(p: Priced) -> str:
    return f"c {p.run.bucket}"


SHAPE_SLICES: dict[str, Callable[[Priced], str]] = {
    "version": lambda p: "named" if names_its_version(p.run.engine_version) else "unstated",
    "source": lambda p: p.run.origin.replace("NVIDIA ", "").replace(" measurements", "") or "unstated",
    "concurrency": _band,
    "ISL": lambda p: str(p.run.problem.workload.isl),
    "GPU": lambda p: p.run.problem.cluster.gpu.name,
    "model": lambda p: p.run.problem.model.name.split("/")[-1],
    "TP": lambda p: f"tp{p.run.layout.tp}",
    "attention DP": lambda p: f"{p.run.layout.attn_dp} ranks",
    "memory": lambda p: "fits" if p.fits else "does not fit",
}


def _configuration(p: Priced) -> tuple[object, ...]:
    """What two measurements of the same configuration share: engine and version, model and formats, GPU,
    layout, workload and concurrency."""
    r = p.run
    return (r.engine, r.engine_version, r.problem.model.name, r.problem.model.weights_dtype, r.problem.cluster.gpu.name,
            r.layout, r.problem.workload.isl, r.problem.workload.osl, r.concurrency)


def print_ttft_shape(priced: Sequence[Priced]) -> None:
    """Per engine, the TTFT error sliced (``ttft_shape``): bias and scatter per slice, and the repeats' spread."""
    print("TTFT error by slice (median |error| (runs, bias = median signed error, scatter = median |error| about "
          "the slice's median ratio)):")
    for engine in ENGINES:
        group = [p for p in priced if p.run.engine == engine]
        if group:
            repeats = repeat_spread((_configuration(p), p.run.ttft_ms) for p in group)
            print_shape(engine, group, cast(dict[str, Callable[[PricedRun], str]], SHAPE_SLICES), repeats)


SLOPE_MAX_CONCURRENCY = 8  # few enough in flight that the prompt's own prefill is most of the TTFT difference


@dataclass(frozen=True)
class IslSlope:
    """One setup (engine, model, formats, GPU, layout, concurrency) measured at two or more ISLs: the difference
    of its median TTFT between the longest and the shortest, measured and predicted. The fixed costs per request
    (serving stack, the scheduler's wait) cancel in it, so its ratio judges the prefill's price on the margin, which
    fitted TTFT fields can hide at one ISL (benchmarks/accuracy/README.md, branch ``moeprefill``)."""

    label: str
    moe: bool
    isl: tuple[int, int]
    measured_ms: float
    predicted_ms: float

    @property
    def ratio(self) -> float:
        return self.predicted_ms / self.measured_ms


def isl_slopes(priced: Sequence[Priced]) -> list[IslSlope]:
    """Every setup at concurrency <= ``SLOPE_MAX_CONCURRENCY`` measured at two ISLs or more, whose measured TTFT
    grows with the ISL (a difference at or below zero is the runs' noise, not a prefill)."""
    setups: dict[tuple[object, ...], dict[int, list[Priced]]] = defaultdict(lambda: defaultdict(list))
    for p in priced:
        r = p.run
        if r.concurrency <= SLOPE_MAX_CONCURRENCY:
            key = (r.engine, r.problem.model.name, r.problem.model.weights_dtype, r.problem.cluster.gpu.name,
                   r.layout, r.concurrency)
            setups[key][r.problem.workload.isl].append(p)
    slopes = []
    for by_isl in setups.values():
        if len(by_isl) < 2:
            continue
        short, long = by_isl[min(by_isl)], by_isl[max(by_isl)]
        measured = _median([p.run.ttft_ms for p in long]) - _median([p.run.ttft_ms for p in short])
        if measured <= 0:
            continue
        predicted = _median([p.ttft_ms for p in long]) - _median([p.ttft_ms for p in short])
        run = long[0].run
        slopes.append(IslSlope(run.label, run.problem.model.moe is not None, (min(by_isl), max(by_isl)), measured,
                               predicted))
    return sorted(slopes, key=lambda s: (not s.moe, s.label))


def print_isl_slopes(priced: Sequence[Priced]) -> None:
    slopes = isl_slopes(priced)
    if not slopes:
        return
    print(f"TTFT growth with the ISL at <= {SLOPE_MAX_CONCURRENCY} in flight (the same setup at its shortest and "
          "longest ISL; fixed costs cancel): predicted / measured difference")
    for moe, kind in ((True, "MoE"), (False, "dense")):
        ratios = [s.ratio for s in slopes if s.moe == moe]
        if ratios:
            print(f"  {kind:5s} {len(ratios):3d} setups  median {_median(ratios):.2f} "
                  f"(range {min(ratios):.2f}-{max(ratios):.2f})")
    for s in slopes:
        if s.moe:
            print(f"    {s.label}  ISL {s.isl[0]} -> {s.isl[1]}: measured {s.measured_ms:.0f} ms, "
                  f"predicted {s.predicted_ms:.0f} ms ({s.ratio:.2f})")


def version_table(priced: Sequence[Priced]) -> list[tuple[str, str, int, float, float, float]]:
    """Per engine, the runs whose engine version the source names and those it leaves unstated (measured
    October-November 2025, months before the named versions' runs): (engine, which, runs, median |TTFT
    err|, median signed TTFT err, median |TPOT err|). Both kinds are in every other figure."""
    out = []
    for engine in ENGINES:
        for which, unstated in (("named", False), ("unstated", True)):
            group = [p for p in priced
                     if p.run.engine == engine and names_its_version(p.run.engine_version) != unstated]
            if group:
                out.append((engine, which, len(group), _median([abs(p.ttft_error) for p in group]),
                            _median([p.ttft_error for p in group]), _median([abs(p.tpot_error) for p in group])))
    return out


# --- engine profiles ----------------------------------------------------------------------------

# Passes over a token's 16-bit hidden vector each rank makes per layer, whatever its shard: vLLM, SGLang and
# TensorRT-LLM all fuse the residual add into the RMSNorm before attention and before the FFN, and each fused
# kernel reads the input and the residual and writes the new residual and the normalised vector.
FULL_WIDTH_PASSES = 8.0


def engine_runs(runs: Iterable[ServingRun]) -> dict[tuple[str, str], list[EngineRun]]:
    """Runs per (engine, GPU), each with its experts placed once (the placement does not depend on
    the fields fitted)."""
    groups: dict[tuple[str, str], list[EngineRun]] = defaultdict(list)
    for r in runs:
        groups[(r.engine, r.problem.cluster.gpu.name)].append(
            placed_run(r.problem, r.layout, r.tpot_ms, r.ttft_ms, r.engine_version, r.origin))
    return dict(sorted(groups.items()))


OP_GPUS = ("H100-SXM", "H200-SXM")  # the GPUs op_points.csv measured


def _op_terms() -> OpTerms:
    return op_terms(OPS_CSV, {g: hardware_profile(g) for g in OP_GPUS})


def base_profile(gpu: str, terms: OpTerms) -> tuple[Profile, str]:
    """What an engine profile starts from: the GPU's hardware profile with the operator-level physics
    terms (KV stream, MoE fixed and per-token costs), and a note saying where each came from."""
    per_gpu, measured = terms.for_gpu(gpu)
    # The FP8 weight-stream ratio of the bare M = 1 GEMMs is measured but not applied: the isolated FP8 GEMM
    # quantises its activation in a kernel of its own, which the engines fuse into the RMSNorm before it, and
    # priced with it 7 of the 8 engine fits end 4-17 points worse (benchmarks/accuracy/README.md).
    del per_gpu["low_precision_stream_ratio"]
    allreduce = allreduce_terms(_op_factors(), gpu) if ALLREDUCE_TERMS else {}
    gemm = gemm_terms(_op_factors(), gpu)
    base = hardware_profile(gpu).model_copy(update={
        **{field: round(value, 4) for field, value in per_gpu.items()},
        "mla_stream_efficiency": mla_stream_efficiency(terms, gpu),
        "full_width_passes": FULL_WIDTH_PASSES,
        **gemm,
        **allreduce,
    })
    where = "this GPU's" if measured else "the mean of the H100's and H200's (an assumption: no points for this GPU)"
    note = (f"op_points.csv: attention_fixed_us and kv_stream_efficiency from {where} generation-attention "
            f"kernels (fixed time + bytes / stream), mla_stream_efficiency that stream x FlashMLA's share of peak on "
            f"H800 ({FLASHMLA_H800_SHARE:.3f}) over the H100 kernels' (same HBM3); moe_fixed_us and "
            f"moe_routed_token_ns from {terms.moe.points} "
            "balanced DeepSeek-V3 MoE points (H100, H200) less the modelled expert GEMMs"
            f"{_moe_bandwidth_note(gpu, terms)}; full_width_passes "
            f"{FULL_WIDTH_PASSES:g} (two fused residual-add + RMSNorm kernels per layer, each reading and writing "
            "two hidden vectors)")
    if gemm:
        note += ("; the GEMM curve (gemm_efficiency, gemm_half_tokens, low_precision_gemm_ratio) from this GPU's own "
                 "BF16 and FP8 GEMMs at M >= 1,024")
    elif base.fp4_gemm_ratio is not None:
        note += ("; the GEMM curve (gemm_efficiency, gemm_half_tokens, low_precision_gemm_ratio) the hardware "
                 "profile's: the mean of the H100's and H200's measured curves (an assumption), with fp4_gemm_ratio "
                 "fitted on this GPU's FP4 table rows")
    if allreduce:
        bandwidth = ("and its ring bandwidth share scaleup_bw_efficiency " if "scaleup_bw_efficiency" in allreduce
                     else "(an assumption on this GPU: H100 and H200 measured; its ring bandwidth stays the hardware "
                          "profile's) ")
        note += (f"; all-reduce inside the NVSwitch domain: one-shot kernel allreduce_oneshot_us and ring step "
                 f"latency allreduce_latency_scale {bandwidth}fitted with the ring to the 12 custom all-reduce points "
                 "of H100 and H200")
    return base, note


def _moe_bandwidth_note(gpu: str, terms: OpTerms) -> str:
    """Where the per-assignment MoE cost comes from when it is priced as bytes at the GPU's HBM peak."""
    if not terms.moe.at_bandwidth:
        return ""
    where = "measured" if gpu in terms.kv_stream_efficiency else "an assumption: no MoE points for this GPU"
    return (f", the per-assignment part {terms.moe.per_assignment:.1f} bytes per hidden element at this GPU's HBM "
            f"peak ({get_gpu(gpu).hbm_bytes_per_s / 1e12:g} TB/s, {where})")


# Whether the engine profiles carry the all-reduce of op_points.csv's custom kernels (the one-shot kernel beside a ring
# with its own step latency, fit.allreduce_terms). False: measured and not taken (benchmarks/accuracy/README.md, "The
# prefill lean: each GPU's GEMM curve, and the all-reduce"): on top of the GEMM curve it takes the user-facing tables
# from 8.4 to 8.3 % and their prefill lean from -4.5 to -3.5 %, but the engine fits then push hbm_efficiency to its
# bound on five more profiles and the disaggregated TPOT worsens. Set True and run --refit to repeat the experiment.
ALLREDUCE_TERMS = False


@lru_cache(maxsize=1)
def _op_factors() -> OpFactors:
    """The shared operator factors of op_points.csv (the all-reduce fit with the one-shot kernel among them)."""
    return op_factors(OPS_CSV)


# The engine whose offline tables perf_points.csv holds (trtllm-bench), and the software generation of the tables
# its newest profile describes (v0.17 and v1.0: points.GENERATIONS' "trtllm"), for the joint fit.
TABLE_ENGINE = "trtllm"
TABLE_SOFTWARE = "trtllm"


def engine_table_points(points_csv: Path = POINTS_CSV) -> dict[str, list[Point]]:
    """Per GPU, the max-throughput rows of TensorRT-LLM's tables of the generation its engine profile describes:
    what the joint fit (``--refit`` unless ``--runs-only``) fits beside the serving runs. The tables are
    trtllm-bench runs of the same engine, so its fields must explain both (README, "The TensorRT-LLM engine
    profiles fitted on runs and tables together")."""
    points, _ = load_points(points_csv)
    out: dict[str, list[Point]] = defaultdict(list)
    for p in points:
        if p.kind == THROUGHPUT and p.software == TABLE_SOFTWARE and p.source.startswith("TRTLLM-PERF"):
            out[p.gpu].append(p)
    return dict(out)


def _tables_for(engine: str, gpu: str, tables: dict[str, list[Point]] | None) -> list[Point]:
    """The table rows fitted with ``engine``'s runs on ``gpu`` (none unless the joint fit asks, and only for the
    engine whose tables they are)."""
    if tables is None or engine != TABLE_ENGINE:
        return []
    return tables.get(gpu, [])


def refit(
    groups: dict[tuple[str, str], list[EngineRun]], tables: dict[str, list[Point]] | None = None
) -> list[Profile]:
    """Fit and write one engine profile per (engine, GPU) with at least MIN_RUNS runs; with ``tables``,
    TensorRT-LLM's profiles are fitted on its runs and its table rows of the GPU together (the joint fit)."""
    written = []
    terms = _op_terms()
    for (engine, gpu), runs in groups.items():
        if len(runs) < MIN_RUNS:
            print(f"  {engine} on {gpu}: {len(runs)} runs, fewer than {MIN_RUNS}: no engine profile")
            continue
        base, note = base_profile(gpu, terms)
        rows = _tables_for(engine, gpu, tables)
        fitted = fit_engine(base, cast(Engine, engine), runs, f"{SOURCE} in serving_points.csv", note, rows)
        write_profile(fitted.profile)
        written.append(fitted.profile)
        joint = (f", {fitted.table_rows} table rows, median |throughput error| {fitted.table_median_abs_error:.1%}"
                 if rows else "")
        fields = ", ".join(f"{f} {getattr(fitted.profile, f):g}" for f in ENGINE_FIELDS)
        print(f"  wrote {fitted.profile.name}: {fitted.rows} runs, median |TPOT error| {fitted.median_abs_error:.1%}"
              f"{joint} ({fields})")
    return written


def leave_one_model_out(
    groups: dict[tuple[str, str], list[EngineRun]], tables: dict[str, list[Point]] | None = None
) -> tuple[dict[str, list[float]], list[float]]:
    """Per engine, the TPOT errors of each model's runs priced with the engine profile fitted on the
    same GPU's runs of the other models (groups with one model have nothing to hold out); with ``tables``
    (the joint fit), the other models' table rows are fitted too, and the held-out model's table rows are
    priced as well: the second list, their throughput errors."""
    held: dict[str, list[float]] = defaultdict(list)
    held_rows: list[float] = []
    terms = _op_terms()
    for (engine, gpu), runs in groups.items():
        rows = _tables_for(engine, gpu, tables)
        models = sorted({r.model for r in runs} | {p.problem.model.name for p in rows})
        if len(runs) < MIN_RUNS or len(models) < 2:
            continue
        for model in models:
            train = [r for r in runs if r.model != model]
            test = [r for r in runs if r.model == model]
            train_rows = [p for p in rows if p.problem.model.name != model]
            test_rows = [p for p in rows if p.problem.model.name == model]
            fitted = fit_engine(base_profile(gpu, terms)[0], cast(Engine, engine), train, "held-out check",
                                table_points=train_rows)
            held[engine] += tpot_errors(test, fitted.profile)
            held_rows += table_errors(test_rows, fitted.profile)
    return held, held_rows


def names_its_version(version: str) -> bool:
    """Whether the source names the engine version a run measured (``_engine`` keeps the text after the
    engine's name; the source writes "(version unstated)" where it does not)."""
    return "unstated" not in version


def ttft_runs(groups: dict[tuple[str, str], list[EngineRun]]) -> dict[str, list[TtftRun]]:
    """Per engine, its runs on the GPUs that have an engine profile whose engine version the source
    names, each priced with that profile less its two TTFT fields: the runs the fields are fitted and
    held out on. An engine profile describes named software (issue 13: "runs under load, named engine
    versions"); the unstated-version runs, measured months earlier, are priced in every table all the
    same (README, "TTFT fields fitted on named versions")."""
    out: dict[str, list[TtftRun]] = defaultdict(list)
    for (engine, gpu), runs in groups.items():
        profile = profile_for_gpu(gpu, cast(Engine, engine))
        if profile.engine_default and profile.engine == engine:
            out[engine] += [ttft_run(r, profile) for r in runs if names_its_version(r.version)]
    return dict(out)


def refit_ttft(by_engine: dict[str, list[TtftRun]]) -> None:
    """Fit the serving-stack fields per engine and write them into each of the engine's profiles (their
    TPOT fields untouched)."""
    for engine, runs in by_engine.items():
        fields = fit_ttft(runs)
        error = median_abs(ttft_errors(runs, fields))
        for p in list_profiles():
            if p.engine_default and p.engine == engine:
                write_profile(with_ttft_fields(p, fields, len(runs), error))
        print(f"  {engine}: ttft_queue_share {fields.share:g}, ttft_wait_steps {fields.wait_steps:g}, "
              f"request_overhead_ms {fields.overhead_ms:g} ({len(runs)} runs, median |TTFT error| {error:.1%})")


def print_ttft_holdout(by_engine: dict[str, list[TtftRun]]) -> None:
    """In-sample, leave-one-model-out, leave-one-source-out and leave-one-concurrency-band-out median |TTFT
    error| per engine (named-version runs)."""
    print("TTFT fields (one set per engine, two fitted): in sample, leave one model out, leave one source "
          "(measurement campaign) out, leave one concurrency band out")
    for engine, runs in by_engine.items():
        fields = fit_ttft(runs)
        held = ttft_leave_one_model_out(runs)
        sources = ttft_leave_one_source_out(runs)
        bands = leave_one_band_out(runs)
        band_cells = "  ".join(f"c {b} {median_abs(e):.1%} ({len(e)})" for b, e in bands.items())
        every_band = [e for errs in bands.values() for e in errs]
        print(f"  {engine:8s} {len(runs):4d} runs  in sample {median_abs(ttft_errors(runs, fields)):.1%}  "
              f"model out {median_abs(held):.1%}  source out {median_abs(sources):.1%} "
              f"({len({r.source for r in runs})} sources)  band out {median_abs(every_band):.1%} [{band_cells}]")


def print_engine_fields() -> None:
    """Every engine profile's fitted fields beside their physical range; a value at a bound is flagged."""
    print("engine profiles: fitted fields and their physical ranges (* at a bound)")
    for p in list_profiles():
        if not p.engine_default:
            continue
        cells = []
        for f in ENGINE_FIELDS:
            value, (lo, hi) = getattr(p, f), ENGINE_BOUNDS[f]
            cells.append(f"{f} {value:g} [{lo:g}, {hi:g}]{'*' if at_bound(f, value) else ''}")
        for f in TTFT_FIELDS:
            value, (lo, hi) = getattr(p, f), TTFT_BOUNDS[f]
            cells.append(f"{f} {value:g} [{lo:g}, {hi:g}]{'*' if ttft_at_bound(f, value) else ''}")
        runs = "copy" if p.fit_rows is None else str(p.fit_rows)  # same-die copies (disagg.py) fit no rows
        print(f"  {p.name:24s} {runs:>4s} runs  " + "  ".join(cells)
              + f"  ({len(ENGINE_FIELDS)} TPOT fields per profile; {len(TTFT_FIELDS)} TTFT fields per engine, "
              f"{len(fitted_fields(p.prefill_mixes_with_decode))} fitted: "
              f"{', '.join(fitted_fields(p.prefill_mixes_with_decode))})")


def print_moe_points() -> None:
    """The MoE operator points behind moe_fixed_us and moe_routed_token_ns: each GPU's own fit, and each GPU's
    points priced by the fit on the other's, with the per-assignment part as one figure or as bytes at each
    GPU's HBM peak (op_terms.MOE_ROUTED_AT_BANDWIDTH picks which the profiles carry)."""
    profiles = {g: hardware_profile(g) for g in OP_GPUS}
    rows = read_op_points(OPS_CSV)
    own = moe_terms_per_gpu(rows, profiles)
    cells = ", ".join(f"{g} {fixed:.1f} us + {ns:.1f} ns" for g, (fixed, ns) in own.items())
    ns = [per for _, per in own.values()]
    bandwidth = [get_gpu(g).hbm_bytes_per_s for g in own]
    print(f"MoE operator points (op_points.csv, balanced DeepSeek-V3), each GPU alone: {cells} per assignment "
          f"(second / first {ns[-1] / ns[0]:.2f}; HBM bandwidth {bandwidth[0] / bandwidth[-1]:.2f})")
    points = moe_points(rows, profiles)
    for at_bandwidth, form in ((False, "one figure"), (True, "bytes at HBM peak")):
        held = moe_held_out_errors(points, at_bandwidth)
        cells = "; ".join(g + " " + " ".join(f"{n:g}: {e:+.1%}" for n, e in errs) for g, errs in held.items())
        terms = moe_terms(rows, profiles, at_bandwidth)
        chosen = " (the profiles')" if at_bandwidth == MOE_ROUTED_AT_BANDWIDTH else ""
        print(f"  {form}{chosen}: {terms.fixed_us:.1f} us + " + ", ".join(
            f"{g} {terms.routed_token_ns(g):.1f} ns" for g in (*OP_GPUS, "B200-SXM"))
            + f"; fitted on the other GPU, error per assignments per GPU: {cells}")


def print_below_floor(priced: Sequence[Priced]) -> None:
    """How many runs measured a TPOT below the least decode step one token per step allows
    (``engine_fit.decode_floor_ms``), and how many of those do not fit memory (so ran fewer sequences than
    stated). None is excluded from any figure: the count says whether speculative decoding must be priced."""
    below = [p for p in priced if p.run.tpot_ms < decode_floor_ms(p.run.problem, p.run.layout)]
    print(f"{len(below)} runs decode faster than one token per step at every rate's physical peak (speculative "
          f"decoding, or fewer sequences than stated: {sum(not p.fits for p in below)} of them do not fit memory); "
          "none is excluded")
    for p in below:
        print(f"  {p.run.label}: measured TPOT {p.run.tpot_ms:.1f} ms, floor "
              f"{decode_floor_ms(p.run.problem, p.run.layout):.1f} ms")
    # The same with the prompts that share the steps: a run below it cannot have prefilled what its row states.
    floored = [(p, tpot_floor_ms(p.run.problem, p.run.layout)) for p in priced]
    below_tpot = [(p, floor) for p, floor in floored if p.run.tpot_ms < floor]
    print(f"{len(below_tpot)} runs measure a TPOT below the least their steps allow with the other requests' prefill "
          "sharing them, at every rate's physical peak (fewer prompt tokens prefilled than stated, e.g. a prefix "
          "cache that hit, or speculative decoding); none is excluded")
    for p, floor in below_tpot:
        print(f"  {p.run.label}: measured TPOT {p.run.tpot_ms:.1f} ms, floor {floor:.1f} ms "
              f"(its decode step {decode_floor_ms(p.run.problem, p.run.layout):.1f} ms), predicted {p.tpot_ms:.1f} ms")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.accuracy.serving", description=__doc__.split("\n\n")[0])
    ap.add_argument("--points", type=Path, default=SERVING_CSV, help="serving_points.csv")
    ap.add_argument("--refit", action="store_true",
                    help="fit the engine profiles to the runs (TensorRT-LLM's to its runs and its max-throughput table "
                    "rows of the GPU together) and rewrite hardware/profiles/*-ENGINE.json first")
    ap.add_argument("--refit-ttft", action="store_true",
                    help="fit the two TTFT fields per engine and rewrite them in the engine profiles first "
                    "(--refit does this too, after the TPOT fields)")
    ap.add_argument("--runs-only", action="store_true",
                    help="with --refit or --holdout: fit TensorRT-LLM's engine fields on its serving runs alone, not "
                    "on its runs and its max-throughput table rows of the same GPU (v0.17, v1.0) together")
    ap.add_argument("--shape", action="store_true",
                    help="also the TTFT error per engine by source, version, concurrency, ISL, GPU, model, TP, "
                    "attention DP and memory fit, each slice's bias and scatter, and how far repeated runs disagree")
    ap.add_argument("--holdout", action="store_true",
                    help="also the leave-one-model-out TPOT and TTFT checks and the leave-one-band-out TTFT check")
    args = ap.parse_args(argv)
    runs, skipped = load_runs(args.points)
    if args.refit or args.refit_ttft or args.holdout:
        groups = engine_runs(runs)
        tables = None if args.runs_only else engine_table_points()
        if args.refit:
            refit(groups, tables)
            reload_profiles()  # price below with the profiles just written
        if args.refit or args.refit_ttft:
            refit_ttft(ttft_runs(groups))
            reload_profiles()
        if args.holdout:
            print("leave one model out (engine fields fitted on the GPU's other models):")
            held_runs, held_rows = leave_one_model_out(groups, tables)
            for engine, errors in held_runs.items():
                held = _median([abs(e) for e in errors])
                print(f"  {engine:10s} {len(errors):4d} runs  median |TPOT error| {held:.1%}")
            if held_rows:
                print(f"  {TABLE_ENGINE} tables {len(held_rows):4d} rows  median |throughput error| "
                      f"{_median([abs(e) for e in held_rows]):.1%}")
            print_ttft_holdout(ttft_runs(groups))
    print_engine_fields()
    print_moe_points()
    print(f"{len(runs)} runs ({2 * len(runs)} rows) of {SOURCE}; skipped rows: "
          + ", ".join(f"{k} {v}" for k, v in skipped.most_common()))
    priced = price(runs)
    over = [p for p in priced if not p.fits]
    print(f"{len(over)} runs do not fit the default profile's memory at their concurrency: priced anyway, "
          "in the table below and apart after it")
    print_below_floor(priced)
    print_table("evaluate's metrics (ttft_ms with its wait, tpot_ms with the prefill sharing its steps) "
                "vs measured; error = predicted / measured - 1:", priced)
    print_table("  of which the runs that fit memory:", [p for p in priced if p.fits])
    if over:
        print_table("  of which the runs that do not fit memory:", over)
    print("per engine and engine version (named by the source, or unstated), both kinds in every figure above:")
    print(f"  {'engine':10s} {'version':9s} {'runs':>5s} {'|TTFT|':>8s} {'TTFT bias':>9s} {'|TPOT|':>8s}")
    for engine, which, n, ttft, ttft_bias, tpot in version_table(priced):
        print(f"  {engine:10s} {which:9s} {n:5d} {ttft:8.1%} {ttft_bias:+9.1%} {tpot:8.1%}")
    print("per engine, the median ratio (predicted / measured) and the median |error| left after dividing by it:")
    print(f"  {'engine':10s} {'TTFT ratio':>10s} {'|TTFT| left':>11s} {'TPOT ratio':>10s} {'|TPOT| left':>11s}")
    for engine, ttft_ratio, ttft_left, tpot_ratio, tpot_left in offset_table(priced):
        print(f"  {engine:10s} {ttft_ratio:10.2f} {ttft_left:11.1%} {tpot_ratio:10.2f} {tpot_left:11.1%}")
    print_isl_slopes(priced)
    if args.shape:
        print_ttft_shape(priced)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
