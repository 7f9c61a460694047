"""Engine profiles: a GPU's default (hardware) profile with the serving engine's own fields fitted to
that engine's runs under load.

The same layout decodes at different speeds on vLLM, SGLang and TensorRT-LLM: their kernels stream
weights and KV cache at different shares of HBM bandwidth, and their per-layer fixed costs differ
(CUDA-graph capture, fused norms and residuals). ``ENGINE_FIELDS`` are those two; everything else
(GEMM curve, collectives, memory) stays the GPU's hardware profile, fitted on the offline tables and
the operator points (``fit.py``).

The fit reads measured TPOT: each run is priced exactly as ``shardplan evaluate`` prices it
(``evaluate``'s ``tpot_ms``, the prefill of the other requests included), and least squares with a
robust loss on log(predicted / measured) sets the fields within ``ENGINE_BOUNDS``. Optionally (the joint
fit, ``table_points``) the engine's own offline max-throughput rows of the same GPU are fitted with them,
each priced as the accuracy benchmark prices a table row (``fit.residual``), the runs and the rows
weighing the same in total. TTFT is not fitted:
the measured TTFT grows with concurrency far faster than the cost model's wait term (see
benchmarks/accuracy/README.md), and fitting these fields to it would bend them to a missing term.

scipy is imported lazily (the ``calibrate`` extra): planning never needs it.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

from shardplan.hardware.profile import ENGINE_NAMES, Engine, Profile
from shardplan.rules.layout import Layout
from shardplan.rules.problem import Problem, resolve_profile
from shardplan.solver.cost.calibration.fit import FitTimedOut, _sig, at_an_end, residual, scaleup_bw_max
from shardplan.solver.cost.calibration.points import Point
from shardplan.solver.cost.evaluate import evaluate

ENGINE_FIELDS: tuple[str, ...] = ("layer_overhead_us", "hbm_efficiency")
# Physical ranges: a layer's fixed cost between none (everything fused into one graph) and the
# ~200 us of eager launches of a dozen kernels; a stream between 0.3 of HBM peak and the 0.95 no
# kernel exceeds (the bare M = 1 GEMMs of op_points.csv reach 0.79-0.82 on H100/H200, their fixed time
# included; the FP8 expert blocks 0.86-0.89 past theirs). The KV stream, the attention kernel's fixed time
# and the per-rank full-width work are operator terms set before the fit (op_terms.py, serving.py).
ENGINE_BOUNDS: dict[str, tuple[float, float]] = {"layer_overhead_us": (0.0, 200.0), "hbm_efficiency": (0.3, 0.95)}

# Scheduler and memory limits each engine starts with when the user sets none (engine behaviour as
# data, not fitted); an engine without an entry keeps its GPU profile's value.
ENGINE_LIMITS: dict[str, dict[str, float]] = {
    # vLLM V1 defaults on GPUs with at least 70 GiB: --max-num-seqs 1024, --max-num-batched-tokens 8192
    # for the OpenAI server (vllm/engine/arg_utils.py, the usage-context defaults); the process keeps
    # to --gpu-memory-utilization 0.9 of the GPU's memory (its cache configuration's default).
    # V1 always chunks prefill into the decode steps under that budget.
    "vllm": {"max_batch": 1024, "max_num_tokens": 8192, "usable_memory_fraction": 0.9,
             "prefill_mixes_with_decode": True},
    # SGLang: --chunked-prefill-size 8192 under 160 GB of HBM (16,384 above: B200; server_args.py);
    # --max-running-requests follows memory. Its scheduler runs waiting prompts as a prefill batch of their
    # own before any decode step (get_next_batch_to_run); --enable-mixed-chunk, off by default, mixes them.
    "sglang": {"max_batch": 2048, "max_num_tokens": 8192, "prefill_mixes_with_decode": False},
    # TensorRT-LLM trtllm-serve: max_batch_size 2048, max_num_tokens 8192; in-flight batching runs context
    # and generation requests in one batch. Its default capacity scheduler policy, GUARANTEED_NO_EVICT, starts a
    # request only when KV cache for its whole sequence is free (docs "Useful Runtime Options").
    "trtllm": {"max_batch": 2048, "max_num_tokens": 8192, "prefill_mixes_with_decode": True,
               "reserves_whole_sequence": True},
}


@dataclass(frozen=True)
class EngineRun:
    """One measured run under load: the problem (its engine set), the layout with its experts placed,
    and what was measured."""

    problem: Problem
    layout: Layout
    tpot_ms: float
    ttft_ms: float
    model: str  # the model's name, for leave-one-model-out
    version: str  # the engine version the source names
    origin: str = ""  # which measurement campaign of the source it came from (leave-one-source-out)


@dataclass(frozen=True)
class EngineFit:
    profile: Profile
    rows: int
    median_abs_error: float  # of TPOT, on the rows fitted
    table_rows: int = 0  # offline table rows fitted with the runs (the joint fit)
    table_median_abs_error: float = float("nan")  # of those rows' throughput


def tpot_errors(runs: Sequence[EngineRun], profile: Profile) -> list[float]:
    """predicted / measured - 1 of each run's TPOT, priced with ``profile``."""
    return [evaluate(r.problem, r.layout, profile).metrics.tpot_ms / r.tpot_ms - 1 for r in runs]


def floor_profile(profile: Profile) -> Profile:
    """``profile`` at the physical limits: GEMMs at the tensor cores' peak from the first token, weights and KV
    at HBM peak, collectives at the most the fabric carries (``fit.scaleup_bw_max``; the NIC's full rate) with
    no latency, and no fixed cost or extra pass. The decode step it prices is the least time in which every
    sequence of a step can gain one token; memory and the scheduler's limits are the profile's own."""
    return profile.model_copy(update={
        "gemm_efficiency": 1.0, "low_precision_gemm_ratio": 1.0, "fp4_gemm_ratio": 1.0, "gemm_half_tokens": 0.0,
        "attention_efficiency": 1.0, "moe_efficiency": 1.0, "hbm_efficiency": 1.0, "kv_stream_efficiency": 1.0,
        "mla_stream_efficiency": 1.0,
        "low_precision_stream_ratio": None, "attention_fixed_us": 0.0, "full_width_passes": 0.0,
        "moe_fixed_us": 0.0, "moe_routed_token_ns": 0.0, "scaleup_bw_efficiency": scaleup_bw_max(profile.gpu),
        "allreduce_latency_scale": None, "allreduce_oneshot_us": None,
        "scaleout_bw_efficiency": 1.0, "collective_latency_scale": 0.0, "layer_overhead_us": 0.0,
        "step_overhead_us": 0.0,
    })


def decode_floor_ms(problem: Problem, layout: Layout) -> float:
    """The least decode step of ``layout`` at one token per sequence (``floor_profile`` of the problem's
    profile). A run whose measured TPOT is below it decoded more than one token per step (speculative decoding)
    or ran fewer sequences than it states."""
    return evaluate(problem, layout, floor_profile(resolve_profile(problem))).metrics.decode_step_ms


def tpot_floor_ms(problem: Problem, layout: Layout) -> float:
    """The least TPOT of ``layout`` under load: ``decode_floor_ms``'s step plus the other requests' prefill that
    shares the steps (each prompt prefilled once, as ``evaluate`` prices it), both at the physical limits
    (``floor_profile``). A run measuring less prefilled fewer prompt tokens than it states (a prefix cache that
    hit, shorter prompts) or decoded more than one token per step."""
    return evaluate(problem, layout, floor_profile(resolve_profile(problem))).metrics.tpot_ms


def table_errors(points: Sequence[Point], profile: Profile) -> list[float]:
    """predicted / measured - 1 of each table row priced with ``profile`` (a layout that does not fit
    counts as the 20x miss ``fit.residual`` gives it)."""
    return [math.expm1(residual(p, profile)) for p in points]


def kind_weights(runs: int, rows: int) -> tuple[float, float]:
    """Residual weights of the runs and the table rows such that each kind weighs half of the total
    (as ``fit._weights`` weighs its kinds): with no rows, every run weighs 1."""
    if rows == 0:
        return 1.0, 0.0
    total = runs + rows
    return math.sqrt(0.5 * total / runs), math.sqrt(0.5 * total / rows)


def fit_engine(
    base: Profile, engine: Engine, runs: Sequence[EngineRun], source_note: str, physics_note: str = "",
    table_points: Sequence[Point] = (), fitted_by: str = "benchmarks/accuracy/serving.py --refit",
    end_at: float | None = None,
) -> EngineFit:
    """``base`` with ``ENGINE_FIELDS`` fitted to ``runs`` (all of ``engine`` on ``base``'s GPU) and, in the
    joint fit, to ``table_points`` (the engine's offline max-throughput rows on that GPU), the engine's
    limits, and a record of what was fitted on which rows (``physics_note``: where the base's operator
    terms came from; ``fitted_by``: what fitted it, for its source). ``end_at``: a ``time.time()`` past which
    it stops (``fit.FitTimedOut``), checked at each pricing of the runs."""
    # scipy is optional (the ``calibrate`` extra) and heavy: imported here so that planning never loads it.
    from scipy.optimize import least_squares

    fields = list(ENGINE_FIELDS)
    lo = [ENGINE_BOUNDS[f][0] for f in fields]
    hi = [ENGINE_BOUNDS[f][1] for f in fields]
    x0 = [min(max(getattr(base, f), a), b) for f, a, b in zip(fields, lo, hi, strict=True)]
    start = base.model_copy(update=ENGINE_LIMITS[engine])

    def candidate(x: Sequence[float]) -> Profile:
        return start.model_copy(update={f: float(v) for f, v in zip(fields, x, strict=True)})

    run_weight, row_weight = kind_weights(len(runs), len(table_points))

    def residuals(x: Sequence[float]) -> list[float]:
        if end_at is not None and time.time() >= end_at:
            raise FitTimedOut
        profile = candidate(x)
        return ([run_weight * math.log1p(e) for e in tpot_errors(runs, profile)]
                + [row_weight * residual(p, profile) for p in table_points])

    fit = least_squares(
        residuals, x0, bounds=(lo, hi), x_scale=[max(abs(v), 1.0) for v in x0], diff_step=0.03,
        loss="soft_l1", f_scale=0.2, max_nfev=80, xtol=1e-4, ftol=1e-6,
    )
    fitted = candidate([_sig(float(v)) for v in fit.x])
    error = statistics.median(abs(e) for e in tpot_errors(runs, fitted))
    table_error = statistics.median(abs(e) for e in table_errors(table_points, fitted)) if table_points else math.nan
    versions = ", ".join(v for v in sorted({r.version for r in runs}) if v)  # runs of a user's CSV may name none
    tables = ""
    if table_points:
        sources = ", ".join(sorted({p.source for p in table_points}))
        tables = (f" and the throughput of {len(table_points)} max-throughput rows of {sources} (perf_points.csv) "
                  f"on this GPU, each kind weighing half (median |throughput error| {table_error:.1%})")
    profile = fitted.model_copy(update={
        "name": f"{base.name}-{engine}",
        "engine": engine,
        "default": False,
        "engine_default": True,
        "software": f"{ENGINE_NAMES[engine]} {versions}".rstrip() + ", serving under load (closed loop)",
        "fit_rows": len(runs),
        "fit_median_abs_error": round(error, 4),
        "source": (
            f"{base.name} (hardware fields) with {', '.join(fields)} fitted by {fitted_by}: robust least squares on "
            f"log(predicted/measured) TPOT of {len(runs)} {ENGINE_NAMES[engine]} runs of "
            f"{source_note}{tables}; median |TPOT error| on those runs {error:.1%}; scheduler limits "
            f"{ENGINE_LIMITS[engine]} are the engine's defaults{'; ' + physics_note if physics_note else ''}"
        ),
    })
    return EngineFit(profile, len(runs), error, len(table_points), table_error)


def at_bound(field: str, value: float) -> bool:
    return at_an_end(value, *ENGINE_BOUNDS[field])
