"""Fit calibration profiles to measured points: ``shardplan calibrate`` and the accuracy benchmark's refit.

What is fitted, and how (DESIGN.md "Cost model": every efficiency is a named, fitted field):

1. **Operator level** (``op_points.csv``, TensorRT-LLM 1.3 kernels on H100/H200): the GEMM curve
   ``efficiency x M / (M + half_tokens)`` fitted to the BF16 and FP8 GEMMs at M >= 1024 gives
   ``gemm_half_tokens`` and the FP8-to-BF16 ratio ``low_precision_gemm_ratio``; the weight-read
   bandwidth of the M = 1 GEMMs bounds ``hbm_efficiency``; the all-reduce points fix the α-β factors
   (``collective_latency_scale``, ``scaleup_bw_efficiency``). These are shared by every profile.
2. **End to end** (``perf_points.csv``): per GPU type and software generation, a handful of fields
   (``FITTED``) by least squares on the log of predicted over measured, with a robust loss so a few
   odd rows cannot drag the fit and weak priors (``PRIORS``) so a field the rows cannot see stays
   at a typical value. The operator terms ``op_terms.py`` reads (KV stream, attention kernel's fixed
   time, MoE costs, per-rank full-width passes) can be fitted with (``TERM_SOFTWARE``); the stored
   table profiles are not (it made them worse), the engine profiles are. Memory: the engine's
   reserve in GiB (``runtime_overhead_gib``: CUDA context, CUDA graphs, allocator slack, the share
   of free memory the engine leaves unused) is fitted; the activation workspace follows the token
   budget (``memory.activation_bytes``); the whole of HBM is usable (``usable_memory_fraction`` 1,
   an engine flag such as vLLM's 0.9, not a fitted share). The optimiser starts from fixed values
   and runs single-threaded arithmetic, and stored values are rounded to ``DIGITS`` significant
   digits, so a refit rewrites the profile files byte for byte.

scipy is imported lazily (the ``calibrate`` extra): planning never needs it.
"""

from __future__ import annotations

import importlib.util
import math
import re
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from shardplan.hardware import Collective, collective_time_s, get_gpu, oneshot_allreduce_s, parse_cluster
from shardplan.hardware.profile import PROFILE_DIR, Profile, get_profile
from shardplan.models import InfeasibleError, SolverLimitError, SpecError
from shardplan.models.errors import quoted
from shardplan.models.files import json_text
from shardplan.solver.cost.calibration.measures import predict
from shardplan.solver.cost.calibration.op_terms import MOE_ROUTED_AT_BANDWIDTH, OpTerms, op_terms, read_op_points
from shardplan.solver.cost.calibration.points import (
    GENERATIONS,
    SERVING,
    Point,
    load_points,
    profile_name,
    skipped_summary,
)

DIGITS = 4

# Fields fitted per profile, with their bounds. Everything else is shared (``shared_profile``).
FITTED: tuple[str, ...] = (
    "gemm_efficiency",
    "hbm_efficiency",
    "layer_overhead_us",
    "step_overhead_us",
    "runtime_overhead_gib",
    "scaleup_bw_efficiency",
)
# Generations that fit other fields than FITTED.
FITTED_BY_SOFTWARE: dict[str, tuple[str, ...]] = {
    "trtllm-0.14": FITTED + ("request_overhead_ms",),  # its serving runs time the front end too
    # Static-batching runs state their batch, so no memory field is identifiable from them, and a
    # dozen rows carry three fields at most.
    "trtllm-0.9": ("gemm_efficiency", "hbm_efficiency", "layer_overhead_us"),
    # Splitwise's stack scales badly with TP (decode at TP8 no faster than at TP4): its collectives
    # are fitted instead of a step overhead.
    "splitwise": (
        "gemm_efficiency",
        "hbm_efficiency",
        "layer_overhead_us",
        "scaleup_bw_efficiency",
        "collective_latency_scale",
    ),
}
BOUNDS: dict[str, tuple[float, float]] = {
    "gemm_efficiency": (0.2, 0.95),
    "hbm_efficiency": (0.3, 0.95),
    "layer_overhead_us": (0.0, 500.0),  # kernel launches of a layer without CUDA graphs: tens of us
    "step_overhead_us": (0.0, 5000.0),  # an iteration's scheduling and sampling: a few ms at most
    # An engine's own reserve per GPU: a CUDA context and library workspaces take ~0.5-1 GiB, captured CUDA
    # graphs 1-3 GiB, and TensorRT-LLM leaves 10 % of the memory free after weights (its default
    # free_gpu_memory_fraction 0.9: 4-7 GiB of an 80-141 GB GPU); beyond 16 GiB no engine reserves.
    "runtime_overhead_gib": (0.5, 16.0),
    # A ring step cannot move more than the link carries; only an in-switch reduction (NVLink SHARP, NVSwitch 3
    # and later) sends each byte once instead of 2(n - 1) / n times (scaleup_bw_max).
    "scaleup_bw_efficiency": (0.05, 1.0),
    "request_overhead_ms": (0.0, 100.0),
    "collective_latency_scale": (0.01, 100.0),
    # The FP4 share of gemm_efficiency: at most the 16-bit share itself (no GEMM reaches more of its peak).
    "fp4_gemm_ratio": (0.1, 1.0),
}

# A fitted value within this share of its range's width from an end counts as at the bound (``at_an_end``): the fit
# pushed it there to carry a term the model lacks, or rows no value inside the range describes.
AT_BOUND_SHARE = 0.01
# The most a profile ``calibrate`` writes may miss the median row of its fit by, as a factor either way: 2. A refit
# of benchmarks/accuracy/data/perf_points.csv misses its 19 profiles' median rows by 1.02-1.15 (median |error|
# 2.5-12.9 %, with or without --ops), the stored profiles theirs by at most 1.21; the accuracy targets are 10-15 %;
# and the fit's robust loss counts a row missed by more than ~1.16 (f_scale 0.15 in log) as an outlier. Past 2, most
# rows are far outliers and what the profile holds is its priors and bounds, not the rows: measurements of 1e-9
# tokens/s leave the fit 5e12-fold off with only two of its six fields at a bound.
MAX_MEDIAN_MISS = 2.0

# Weak priors: (typical value, width). A fitted value one width away from its prior costs as much
# as one row missed by PRIOR_WEIGHT in log terms, so the data decide wherever they say anything and
# a field they cannot see stays at a physically typical value instead of wandering to a bound.
PRIORS: dict[str, tuple[float, float]] = {
    "gemm_efficiency": (0.7, 0.2),
    "hbm_efficiency": (0.8, 0.15),
    "layer_overhead_us": (20.0, 100.0),
    "step_overhead_us": (300.0, 2000.0),
    "runtime_overhead_gib": (3.0, 3.0),
    "scaleup_bw_efficiency": (0.6, 0.5),
    "request_overhead_ms": (5.0, 10.0),
    "collective_latency_scale": (1.0, 5.0),
    "fp4_gemm_ratio": (0.78, 0.3),  # Hopper's measured FP8 share (op_points.csv), what FP4 was priced at before
}
PRIOR_WEIGHT = 0.3

# Engine facts per software generation (not fitted): scheduler limits of what was measured.
ENGINES: dict[str, dict[Any, Any]] = {
    "trtllm": dict(
        software="TensorRT-LLM 0.17-1.0, in-flight batching (trtllm-bench, engine flow and PyTorch backend)",
        max_batch=2048, max_num_tokens=8192,
    ),
    "trtllm-0.14": dict(
        software="TensorRT-LLM 0.14, in-flight batching (trtllm-bench engine flow, Triton backend)",
        max_batch=2048, max_num_tokens=8192,
    ),
    "trtllm-0.9": dict(
        software="TensorRT-LLM 0.9 gptSessionBenchmark, static batching (the whole batch's prompts in one pass)",
        max_batch=1024, max_num_tokens=131072,
    ),
    "splitwise": dict(
        software="Splitwise profiling runs (2023 serving stack), whole batch prefilled at once",
        max_batch=256, max_num_tokens=32768,
    ),
}


# --- operator-level factors ---------------------------------------------------------------------

@dataclass(frozen=True)
class OpFactors:
    """Shared factors read off op_points.csv."""

    gemm_efficiency: float
    gemm_half_tokens: float
    low_precision_gemm_ratio: float
    hbm_efficiency_max: float
    scaleup_bw_efficiency: float
    collective_latency_scale: float
    note: str
    # The same points fitted with the one-shot kernel beside the ring (``oneshot_allreduce_s``): what fabrics
    # whose engines run a custom all-reduce use (ONESHOT_ALLREDUCE_GPUS); the ring-only pair above for the rest.
    oneshot: AllReduceFactors | None = None
    # The GEMM curve of each GPU fitted on its own points (the fields above pool H100 and H200).
    gemm_by_gpu: dict[str, GemmCurve] = field(default_factory=dict)


@dataclass(frozen=True)
class GemmCurve:
    """One GPU's GEMM curve: 16-bit ``efficiency x M / (M + half_tokens)``, FP8 at ``low_precision_ratio`` of it."""

    efficiency: float
    half_tokens: float
    low_precision_ratio: float


@dataclass(frozen=True)
class AllReduceFactors:
    """An all-reduce price fitted to the custom all-reduce points: the ring's bandwidth share and latency scale,
    and the one-shot kernel's fixed time (None: the ring alone)."""

    scaleup_bw_efficiency: float
    collective_latency_scale: float
    allreduce_oneshot_us: float | None


def _shape_ints(row: dict[str, str], pattern: str) -> tuple[int, ...]:
    """The integers ``pattern`` captures in an operator row's ``shape_params`` (``M=128 N=4096 ...``)."""
    found = re.search(pattern, row["shape_params"])
    if found is None:
        raise SpecError("op_points", f"shape_params {row['shape_params']!r} has no {pattern}")
    return tuple(int(x) for x in found.groups())


def op_factors(path: str | Path) -> OpFactors:
    """GEMM and all-reduce factors from the operator points (H100-SXM and H200-SXM rows)."""
    rows = read_op_points(path)
    gemm = [r for r in rows if r["op"] == "gemm"]

    bf16_eff, bf16_half = gemm_curve(gemm, "bfloat16")
    fp8_eff, _ = gemm_curve(gemm, "fp8")
    # M = 1 GEMMs only read their weights: the best bandwidth a weight stream reaches.
    stream = []
    for r in gemm:
        if "M=1 " in r["shape_params"] and r["dtype"] == "bfloat16":
            gpu = get_gpu(r["gpu"])
            n, k = _shape_ints(r, r"N=(\d+) K=(\d+)")
            stream.append(2.0 * n * k / (float(r["latency_us"]) * 1e-6) / gpu.hbm_bytes_per_s)
    # All-reduce over NVLink (TensorRT-LLM's custom kernels, what its engines run).
    ar = []
    for r in rows:
        if r["op"] == "all_reduce" and "custom AR" in r["backend"]:
            (n,) = _shape_ints(r, r"num_gpus=(\d+)")
            (elements,) = _shape_ints(r, r"elements=(\d+)")
            ar.append((r["gpu"], n, elements * 2, float(r["latency_us"]) * 1e-6))

    ring = allreduce_fit(ar, oneshot=False)
    both = allreduce_fit(ar, oneshot=True)
    note = (
        f"op_points.csv: GEMM curve at M>=1024 (bf16 {bf16_eff:.3f} x M/(M+{bf16_half:.0f}), fp8/bf16 share "
        f"{fp8_eff / bf16_eff:.3f}), M=1 weight stream {max(stream):.3f} of HBM peak (upper bound of hbm_efficiency), "
        f"custom all-reduce alpha-beta fit (bandwidth {ring.scaleup_bw_efficiency:.3f}, latency "
        f"x{ring.collective_latency_scale:.3f}; with the one-shot kernel beside the ring on NVSwitch GPUs: "
        f"bandwidth {both.scaleup_bw_efficiency:.3f}, latency x{both.collective_latency_scale:.3f}, one-shot "
        f"{both.allreduce_oneshot_us:.2f} us)"
    )
    return OpFactors(
        gemm_efficiency=bf16_eff,
        gemm_half_tokens=bf16_half,
        low_precision_gemm_ratio=min(1.0, fp8_eff / bf16_eff),
        hbm_efficiency_max=max(stream),
        scaleup_bw_efficiency=ring.scaleup_bw_efficiency,
        collective_latency_scale=ring.collective_latency_scale,
        note=note,
        oneshot=both,
        gemm_by_gpu=gemm_curves(gemm),
    )


def gemm_curve(rows: Sequence[dict[str, str]], dtype: str) -> tuple[float, float]:
    """(efficiency, half tokens) of the GEMM curve ``efficiency x M / (M + half)`` fitted by least squares on the log
    of the share of peak that ``rows``' GEMMs of ``dtype`` reached at M >= 1024."""
    # scipy is optional (the ``calibrate`` extra) and heavy: imported here so that planning never loads it.
    from scipy.optimize import least_squares

    pts = []
    for r in rows:
        if r["dtype"] != dtype:
            continue
        (m,) = _shape_ints(r, r"M=(\d+)")
        if m < 1024:
            continue  # below that the GEMM is bound by weight reads, not by the curve
        gpu = get_gpu(r["gpu"])
        n, k = _shape_ints(r, r"N=(\d+) K=(\d+)")
        peak = gpu.flops_per_s("bf16" if dtype == "bfloat16" else "fp8")
        pts.append((m, 2.0 * m * n * k / (float(r["latency_us"]) * 1e-6) / peak))

    def res(x: Sequence[float]) -> list[float]:
        eff, half = x
        return [math.log(eff * m / (m + half) / a) for m, a in pts]

    fit = least_squares(res, [0.8, 100.0], bounds=([0.1, 0.0], [1.0, 4096.0]))
    return float(fit.x[0]), float(fit.x[1])


def gemm_curves(rows: Sequence[dict[str, str]]) -> dict[str, GemmCurve]:
    """The GEMM curve of each GPU the rows measured, fitted on its own points (``gemm_curve``)."""
    out = {}
    for gpu in sorted({get_gpu(r["gpu"]).name for r in rows}):
        mine = [r for r in rows if get_gpu(r["gpu"]).name == gpu]
        bf16_eff, bf16_half = gemm_curve(mine, "bfloat16")
        fp8_eff, _ = gemm_curve(mine, "fp8")
        out[gpu] = GemmCurve(bf16_eff, bf16_half, min(1.0, fp8_eff / bf16_eff))
    return out


# A measured all-reduce: (GPU, group size, bytes, seconds).
AllReducePoint = tuple[str, int, int, float]


def allreduce_seconds(point: AllReducePoint, factors: AllReduceFactors) -> float:
    """The model's price of a measured all-reduce under ``factors``: the ring, or the one-shot kernel where that
    is faster (``CostContext.collective_s``)."""
    gpu, n, nbytes, _ = point
    cluster = parse_cluster(f"{n}x{get_gpu(gpu).name}")
    bw, lat = factors.scaleup_bw_efficiency, factors.collective_latency_scale
    ring = collective_time_s(Collective.ALL_REDUCE, nbytes, range(n), cluster, bw_efficiency=bw, latency_scale=lat)
    if factors.allreduce_oneshot_us is None:
        return ring
    one = oneshot_allreduce_s(nbytes, n, cluster, fixed_s=factors.allreduce_oneshot_us * 1e-6, bw_efficiency=bw)
    return min(ring, one)


def allreduce_fit(points: Sequence[AllReducePoint], oneshot: bool) -> AllReduceFactors:
    """Least squares on log(priced / measured) over the all-reduce points: the ring's (bandwidth, latency) pair,
    and with ``oneshot`` the one-shot kernel's fixed time as well. The ring alone cannot follow the custom kernels
    across sizes (8 GPUs: 3.6 us at 16 KiB, 35 us at 2 MiB, 322 us at 64 MiB; h100-sxm's ring, its bandwidth share
    fitted on the tables, prices them 2.5x, 0.7x and 1.7x), and a prefill chunk's all-reduce of tens of MiB pays the
    last (benchmarks/accuracy/README.md,
    "The prefill lean: each GPU's GEMM curve, and the all-reduce")."""
    # scipy is optional (the ``calibrate`` extra) and heavy: imported here so that planning never loads it.
    from scipy.optimize import least_squares

    def factors(x: Sequence[float]) -> AllReduceFactors:
        return AllReduceFactors(float(x[0]), float(x[1]), float(x[2]) if oneshot else None)

    def res(x: Sequence[float]) -> list[float]:
        f = factors(x)
        return [math.log(allreduce_seconds(p, f) / p[3]) for p in points]

    start, low, high = [0.7, 1.0], [0.1, 0.01], [2.0, 10.0]
    if oneshot:
        start, low, high = start + [3.0], low + [0.0], high + [50.0]
    return factors(least_squares(res, start, bounds=(low, high)).x)


# --- profiles ------------------------------------------------------------------------------------

def shared_profile(
    ops: OpFactors, gpu: str, software: str, default: bool = True, terms: OpTerms | None = None
) -> Profile:
    """The starting point of a fit: shared factors from the operator points, engine limits, and
    fixed starting values of the fitted fields (the same for every GPU: determinism); with ``terms``,
    the default generation also carries the operator terms (``with_op_terms``)."""
    engine = ENGINES[software]
    start = Profile(
        name=profile_name(gpu, software),
        gpu=gpu,
        software=engine["software"],
        engine=None if software == "splitwise" else "trtllm",  # Splitwise does not name its engine
        default=default,
        gemm_efficiency=_sig(min(0.7, ops.gemm_efficiency)),
        gemm_half_tokens=_sig(ops.gemm_half_tokens),
        low_precision_gemm_ratio=_sig(ops.low_precision_gemm_ratio),
        attention_efficiency=0.5,
        moe_efficiency=0.7,
        hbm_efficiency=0.7,
        scaleup_bw_efficiency=_sig(ops.scaleup_bw_efficiency),
        scaleout_bw_efficiency=0.8,
        collective_latency_scale=_sig(ops.collective_latency_scale),
        layer_overhead_us=20.0,
        step_overhead_us=500.0,
        request_overhead_ms=5.0 if software == "trtllm-0.14" else 0.0,
        usable_memory_fraction=1.0,
        runtime_overhead_gib=PRIORS["runtime_overhead_gib"][0],
        comm_buffer_gib=0.5,
        max_batch=engine["max_batch"],
        max_num_tokens=engine["max_num_tokens"],
        source="starting values",
    )
    if terms is None or software not in TERM_SOFTWARE:
        return start
    return with_op_terms(start, terms)


# Generations fitted with the operator terms. None: refit with them, the default generation's tables came out
# worse (v1.0 8.6 -> 11.2 %, h200-sxm 4.2 -> 7.0 %) with its fixed costs driven to zero, the terms measured on
# TensorRT-LLM 1.3 kernels pricing the tables' older engines slower than they ran (benchmarks/accuracy/README.md,
# "Memory reserve, field ranges and the table refit"). Set ("trtllm",) to repeat that experiment; the engine
# profiles carry the terms either way.
TERM_SOFTWARE: tuple[str, ...] = ()
# Passes over a token's 16-bit hidden vector per layer and tensor-parallel rank: two fused residual-add +
# RMSNorm kernels (vLLM, SGLang and TensorRT-LLM alike), each reading the input and the residual and
# writing both.
FULL_WIDTH_PASSES = 8.0
# FlashMLA's decode kernel streams the latent cache at up to 3,000 GB/s memory-bound on H800 SXM5 (deepseek-ai/
# FlashMLA README), 0.896 of the 3.35 TB/s HBM3 H800 shares with H100 SXM, where op_points.csv's GQA generation-
# attention kernels stream at 0.752: one wide latent head shared by every query head reads better than per-head
# KV. Carried to other GPUs as that ratio to their own measured KV stream (HBM3e streams worse: the GQA kernels
# reach 0.597 on H200), an assumption beyond H100.
FLASHMLA_H800_SHARE = 3000 / 3350
MLA_REFERENCE_GPU = "H100-SXM"  # same HBM3 as the H800 FlashMLA was measured on


def mla_stream_efficiency(terms: OpTerms, gpu: str) -> float:
    """The MLA latent-cache stream on ``gpu``: FlashMLA's share of peak times the GPU's measured KV stream over
    the reference GPU's."""
    reference = terms.for_gpu(MLA_REFERENCE_GPU)[0]["kv_stream_efficiency"]
    own = terms.for_gpu(gpu)[0]["kv_stream_efficiency"]
    return round(min(1.0, FLASHMLA_H800_SHARE * own / reference), 4)


def with_op_terms(profile: Profile, terms: OpTerms) -> Profile:
    """``profile`` with the operator-level terms for its GPU: measured on H100/H200, the mean of the two
    elsewhere (an assumption). The FP8 weight-stream ratio of bare M = 1 GEMMs is measured but not
    applied: the bare FP8 GEMM quantises its activation in a kernel of its own, which engines fuse into
    the RMSNorm before it (benchmarks/accuracy/README.md, "Engines: physics terms")."""
    per_gpu, _ = terms.for_gpu(profile.gpu)
    del per_gpu["low_precision_stream_ratio"]
    return profile.model_copy(update={
        **{field: round(value, 4) for field, value in per_gpu.items()},
        "mla_stream_efficiency": mla_stream_efficiency(terms, profile.gpu),
        "full_width_passes": FULL_WIDTH_PASSES,
    })


def table_op_terms(op_csv: str | Path, ops: OpFactors) -> OpTerms:
    """The operator terms for the table fits. The MoE points' expert GEMMs are priced at the bare kernels'
    own efficiencies (the GEMM curve and the M = 1 weight stream of ``ops``), not at a fitted profile's:
    the points are bare kernels, and the terms then do not depend on the profiles a refit rewrites."""
    bare = {
        gpu: shared_profile(ops, gpu, "trtllm").model_copy(
            update={"gemm_efficiency": ops.gemm_efficiency, "hbm_efficiency": ops.hbm_efficiency_max}
        )
        for gpu in _OP_GPUS
    }
    return op_terms(op_csv, bare)


def field_bounds(field: str, ops: OpFactors, gpu: str) -> tuple[float, float]:
    """The physical range of a fitted field on ``gpu``: ``BOUNDS``, narrowed by what the operator points
    measured and by the GPU's scale-up fabric."""
    lo, hi = BOUNDS[field]
    if field == "hbm_efficiency" and gpu in _OP_GPUS:
        hi = min(hi, max(ops.hbm_efficiency_max, lo + 0.01))  # no better than a bare weight stream
    if field == "gemm_efficiency" and gpu in _OP_GPUS:
        hi = min(hi, ops.gemm_efficiency)  # no better than the bare GEMM kernel
    if field == "scaleup_bw_efficiency":
        hi = scaleup_bw_max(gpu)
    return lo, hi


_OP_GPUS = ("H100-SXM", "H200-SXM")
# GPUs whose scale-up switch reduces in the network (NVLink SHARP of NVSwitch 3 and NVLink 5 switches: NVIDIA's
# HGX H100/H200 and B200, GB200 NVL72 documentation): an all-reduce then sends and receives each byte once, not
# 2(n - 1) / n times as the ring the alpha-beta model prices, so up to 2(n - 1) / n = 1.75 of the link at n = 8
# looks like a ring efficiency above 1. Every other GPU's ring cannot beat its link.
IN_SWITCH_REDUCTION = ("H100-SXM", "H200-SXM", "B200-SXM", "GB200-NVL72")
IN_SWITCH_GPUS = 8  # the node the tables' all-reduces span


# GPUs whose engines run a custom all-reduce with a one-shot kernel over the NVSwitch fabric (TensorRT-LLM, vLLM and
# SGLang alike; measured on H100 and H200, assumed on B200 and GB200 at their own link rate). The PCIe servers and the
# older fabrics keep the ring alone.
ONESHOT_ALLREDUCE_GPUS = IN_SWITCH_REDUCTION


def allreduce_terms(ops: OpFactors, gpu: str) -> dict[str, float]:
    """The all-reduce fields the operator points give a profile of ``gpu`` (``op_factors``' fit with the one-shot
    kernel): the one-shot's fixed time and the ring's step latency on ONESHOT_ALLREDUCE_GPUS, and the ring's
    bandwidth share where it was measured (H100, H200; elsewhere the fabric's own fitted share stays). Empty for
    other GPUs, and without the fit. The engine profiles carry them (``benchmarks/accuracy/serving.base_profile``);
    the table profiles keep the ring alone, fitted with the rest of their fields."""
    if ops.oneshot is None or ops.oneshot.allreduce_oneshot_us is None or gpu not in ONESHOT_ALLREDUCE_GPUS:
        return {}
    terms = {
        "allreduce_oneshot_us": _sig(ops.oneshot.allreduce_oneshot_us),
        "allreduce_latency_scale": _sig(ops.oneshot.collective_latency_scale),
    }
    if gpu in _OP_GPUS:
        terms["scaleup_bw_efficiency"] = _sig(ops.oneshot.scaleup_bw_efficiency)
    return terms


def gemm_terms(ops: OpFactors, gpu: str) -> dict[str, float]:
    """The GEMM curve ``gpu``'s own operator points give (``OpFactors.gemm_by_gpu``): the 16-bit efficiency and half
    tokens and the FP8 share, where they were measured (H100, H200); empty elsewhere. The table profiles fit
    ``gemm_efficiency`` on their rows with the pooled curve's half tokens, and on H200 that fit lands 9 % below the
    GPU's measured kernels (0.7436 against 0.815 at M = 8,192), below H100's although the two share a die and the
    bare GEMMs of H200 run no slower; the engine profiles carry the measured curve instead."""
    curve = ops.gemm_by_gpu.get(gpu)
    if curve is None:
        return {}
    return {
        "gemm_efficiency": _sig(curve.efficiency),
        "gemm_half_tokens": _sig(curve.half_tokens),
        "low_precision_gemm_ratio": _sig(curve.low_precision_ratio),
    }


def hopper_gemm_terms(ops: OpFactors) -> dict[str, float]:
    """The GEMM curve a GPU without operator points takes: the mean of the H100's and H200's measured curves
    (``gemm_by_gpu``; the pooled curve where the factors carry none), as the KV stream takes their mean kernels."""
    curves = [ops.gemm_by_gpu[g] for g in _OP_GPUS if g in ops.gemm_by_gpu]
    if not curves:
        curves = [GemmCurve(ops.gemm_efficiency, ops.gemm_half_tokens, ops.low_precision_gemm_ratio)]
    return {
        "gemm_efficiency": _sig(sum(c.efficiency for c in curves) / len(curves)),
        "gemm_half_tokens": _sig(sum(c.half_tokens for c in curves) / len(curves)),
        "low_precision_gemm_ratio": _sig(sum(c.low_precision_ratio for c in curves) / len(curves)),
    }


def all_fp4(points: Sequence[Point]) -> bool:
    """Whether every row's GEMMs run in FP4 (weights and experts): then the rows identify the FP4 share of peak
    and nothing of the 16-bit or FP8 curve."""
    return bool(points) and all(
        p.problem.model.weights_dtype.compute_class == "fp4" and p.problem.model.expert_dtype.compute_class == "fp4"
        for p in points
    )


def fp4_share_fields(fields: Sequence[str]) -> tuple[str, ...]:
    """``fields`` with ``fp4_gemm_ratio`` fitted in place of ``gemm_efficiency`` (a GPU whose rows are all FP4)."""
    return tuple("fp4_gemm_ratio" if f == "gemm_efficiency" else f for f in fields)


def scaleup_bw_max(gpu: str) -> float:
    """The physical upper end of ``scaleup_bw_efficiency`` on ``gpu``."""
    if gpu in IN_SWITCH_REDUCTION:
        return 2 * (IN_SWITCH_GPUS - 1) / IN_SWITCH_GPUS
    return BOUNDS["scaleup_bw_efficiency"][1]


def residual(point: Point, profile: Profile) -> float:
    """log(predicted / measured); a layout the model says does not fit counts as a 20x miss."""
    value = predict(point, profile).value
    return math.log(max(value, point.value / 20.0) / point.value)


def at_an_end(value: float, low: float, high: float) -> bool:
    """Whether ``value`` is within ``AT_BOUND_SHARE`` of the width of ``[low, high]`` from either end (or outside).

    >>> at_an_end(0.2, 0.2, 0.95), at_an_end(0.945, 0.2, 0.95), at_an_end(0.94, 0.2, 0.95)
    (True, True, False)
    """
    margin = AT_BOUND_SHARE * (high - low)
    return value <= low + margin or value >= high - margin


@dataclass(frozen=True)
class FitResult:
    profile: Profile
    rows: int
    median_abs_error: float
    fields: tuple[str, ...] = FITTED
    # ranges[field]: the physical range the fit kept a fitted field inside (``field_bounds``)
    ranges: dict[str, tuple[float, float]] = field(default_factory=dict)
    # exp(median |log(predicted / measured)|): how many times off the fit is on its median row, a miss either way
    # counted alike (median_abs_error, |predicted / measured - 1|, never passes 1 for rows predicted too low)
    median_miss: float = 1.0

    @property
    def at_bounds(self) -> list[str]:
        """The fitted fields at an end of their physical range (``at_an_end``), in fitting order."""
        return [f for f, (lo, hi) in self.ranges.items() if at_an_end(getattr(self.profile, f), lo, hi)]

    @property
    def describes_rows(self) -> bool:
        """Whether the fit is within ``MAX_MEDIAN_MISS`` of its median row: a profile worth writing."""
        return self.median_miss <= MAX_MEDIAN_MISS


class FitTimedOut(Exception):
    """The fit's wall-clock end passed (``calibrate``'s ``time_limit_s``); raised in a worker, named by the caller."""


def fit_profile(points: Sequence[Point], start: Profile, ops: OpFactors, fields: Sequence[str] = FITTED,
                end_at: float | None = None) -> FitResult:
    """Least squares on log error over ``points`` for ``fields`` of ``start``; values rounded. ``end_at``: a
    ``time.time()`` past which it stops (``FitTimedOut``), checked at each evaluation of the residuals (one
    pricing of every row: its cost grows with the rows, up to the CSV's size limit)."""
    # scipy is optional (the ``calibrate`` extra) and heavy: imported here so that planning never loads it.
    from scipy.optimize import least_squares

    fields = [f for f in fields if f in BOUNDS]
    lo, hi, x0 = [], [], []
    for f in fields:
        a, b = field_bounds(f, ops, start.gpu)
        lo.append(a)
        hi.append(b)
        x0.append(min(max(getattr(start, f), a), b))
    scale = [max(abs(v), 1e-3) for v in x0]
    weights = _weights(points)

    def candidate(x: Sequence[float]) -> Profile:
        return start.model_copy(update={f: float(v) for f, v in zip(fields, x, strict=True)})

    def res(x: Sequence[float]) -> list[float]:
        if end_at is not None and time.time() >= end_at:
            raise FitTimedOut
        prof = candidate(x)
        rows = [w * residual(p, prof) for p, w in zip(points, weights, strict=True)]
        priors = [
            PRIOR_WEIGHT * (v - PRIORS[f][0]) / PRIORS[f][1] for f, v in zip(fields, x, strict=True) if f in PRIORS
        ]
        return rows + priors

    fit = least_squares(
        res, x0, bounds=(lo, hi), x_scale=scale, diff_step=0.02, loss="soft_l1", f_scale=0.15,
        max_nfev=60 * (len(fields) + 1), xtol=1e-4, ftol=1e-6,
    )
    fitted = candidate(fit.x)
    rounded = fitted.model_copy(update={f: _sig(getattr(fitted, f)) for f in fields})
    logs = [residual(p, rounded) for p in points]
    errors = sorted(abs(math.expm1(r)) for r in logs)
    misses = sorted(abs(r) for r in logs)
    return FitResult(
        rounded, len(points), errors[len(errors) // 2] if errors else float("nan"), tuple(fields),
        dict(zip(fields, zip(lo, hi, strict=True), strict=True)),
        math.exp(misses[len(misses) // 2]) if misses else float("nan"),
    )


def _weights(points: Sequence[Point]) -> list[float]:
    """Latency and max-throughput rows weigh the same in total; serving throughputs, mostly set by
    the offered rate, weigh half."""
    counts: dict[str, int] = {}
    for p in points:
        counts[p.kind] = counts.get(p.kind, 0) + 1
    total = len(points)
    share = {k: (0.5 if k == SERVING else 1.0) for k in counts}
    norm = sum(share.values())
    return [math.sqrt(share[p.kind] / norm * total / counts[p.kind]) for p in points]


# --- whole-file fits --------------------------------------------------------------------------------

def group_points(points: Iterable[Point]) -> dict[tuple[str, str], list[Point]]:
    groups: dict[tuple[str, str], list[Point]] = {}
    for p in points:
        groups.setdefault(p.profile_key, []).append(p)
    return dict(sorted(groups.items()))


def calibrate(
    points_csv: str | Path,
    op_csv: str | Path | None = None,
    *,
    gpu: str | None = None,
    row_filter: Callable[[Point], bool] | None = None,
    jobs: int = 1,
    one_profile: bool = False,
    time_limit_s: float | None = None,
) -> list[FitResult]:
    """Fit one profile per (GPU, software generation) found in ``points_csv`` (only ``gpu``'s if
    given; only rows ``row_filter(point)`` accepts). Returns the fits, profiles rounded. With
    ``one_profile``, rows of more than one (GPU, generation) are refused before any fitting (a fit of
    every generation of a GPU takes about half a minute; the caller could only keep one). ``time_limit_s``:
    the fits not done within it (counted from here) end in ``SolverLimitError`` naming ``time-limit``."""
    end_at = None if time_limit_s is None else time.time() + time_limit_s
    points, skipped = load_points(points_csv)
    if not points:
        raise SpecError("points", f"no usable rows in {points_csv}: {skipped_summary(skipped)}")
    if row_filter is not None:
        points = [p for p in points if row_filter(p)]
    if gpu is not None:
        name = get_gpu(gpu).name
        points = [p for p in points if p.gpu == name]
        if not points:
            raise SpecError("gpu", f"no usable rows for {name} in {points_csv}")
    ops = op_factors(op_csv) if op_csv else default_op_factors()
    # without operator points, or with no generation fitted with them, no operator terms
    terms = table_op_terms(op_csv, ops) if op_csv and TERM_SOFTWARE else None
    groups = group_points(points)
    if one_profile and len(groups) > 1:
        names = ", ".join(profile_name(g, sw) for g, sw in groups)
        raise SpecError("out", f"the rows make {len(groups)} profiles ({names}): choose one with --gpu/--software, "
                               "or pass a directory")
    newest: dict[str, int] = {}  # newest[gpu]: index in GENERATIONS of its newest software
    for gpu_name, software in groups:
        rank = GENERATIONS.index(software)
        newest[gpu_name] = min(rank, newest.get(gpu_name, rank))
    tasks = [(key, pts, ops, GENERATIONS.index(key[1]) == newest[key[0]], terms, end_at)
             for key, pts in groups.items()]
    try:
        if jobs > 1 and len(tasks) > 1:
            with ProcessPoolExecutor(max_workers=jobs) as pool:  # each worker stops at the same end
                results = list(pool.map(_fit_task, tasks))
        else:
            results = [_fit_task(t) for t in tasks]
    except FitTimedOut:
        raise SolverLimitError(f"time-limit: the fit of {len(points)} rows into {len(tasks)} profile(s) had not "
                               f"finished within {time_limit_s:g} s; fit fewer rows (--gpu, --software) or give "
                               "it more time") from None
    return [_with_source(r, pts, points_csv, ops) for r, (_, pts, *_) in zip(results, tasks, strict=True)]


def _fit_task(task: tuple[tuple[str, str], list[Point], OpFactors, bool, OpTerms | None, float | None]) -> FitResult:
    (gpu, software), pts, ops, default, terms, end_at = task
    fields = FITTED_BY_SOFTWARE.get(software, FITTED)
    start = shared_profile(ops, gpu, software, default, terms)
    if gpu not in _OP_GPUS and "gemm_efficiency" in fields and all_fp4(pts):
        # Rows all in FP4 price every GEMM at gemm_efficiency x the FP4 share: they see only the product, so the
        # 16-bit and FP8 curve is taken from the measured Hopper kernels and the FP4 share fitted on them.
        curve = hopper_gemm_terms(ops)
        start = start.model_copy(update={**curve, "fp4_gemm_ratio": curve["low_precision_gemm_ratio"]})
        fields = fp4_share_fields(fields)
    return fit_profile(pts, start, ops, fields, end_at)


def _with_source(result: FitResult, points: Sequence[Point], points_csv: str | Path, ops: OpFactors) -> FitResult:
    sources = sorted({p.source for p in points})
    terms = ""
    if result.profile.full_width_passes:
        where = "this GPU's" if result.profile.gpu in _OP_GPUS else "the H100's and H200's mean (an assumption)"
        routed = " (the per-assignment part as bytes at this GPU's HBM peak)" if MOE_ROUTED_AT_BANDWIDTH else ""
        terms = (
            f"; operator terms (op_points.csv): attention_fixed_us and kv_stream_efficiency from {where} "
            "generation-attention kernels, moe_fixed_us and moe_routed_token_ns from the balanced DeepSeek-V3 MoE "
            f"points less their expert GEMMs at the bare kernels' efficiencies{routed}, full_width_passes "
            f"{FULL_WIDTH_PASSES:g}"
        )
    if "fp4_gemm_ratio" in result.fields:
        terms += ("; every row FP4: gemm_efficiency, gemm_half_tokens and low_precision_gemm_ratio are the mean of "
                  "the H100's and H200's GEMM curves of op_points.csv (an assumption: no 16-bit or FP8 points for this "
                  "GPU), fp4_gemm_ratio (the FP4 share of gemm_efficiency) fitted on the rows")
    source = (
        f"fitted by shardplan calibrate: least squares on log(predicted/measured) of {result.rows} rows of "
        f"{Path(points_csv).name} ({', '.join(sources)}; rows {_id_ranges(p.row_id for p in points)}), "
        f"fields {', '.join(result.fields)}; median |error| on those rows {result.median_abs_error:.1%}. "
        f"Shared factors: {ops.note}{terms}; attention and MoE GEMM efficiencies, scale-out and communication "
        "buffers are engineering defaults"
    )
    update = {"source": source, "fit_rows": result.rows, "fit_median_abs_error": round(result.median_abs_error, 4)}
    return replace(result, profile=result.profile.model_copy(update=update))


@lru_cache(maxsize=1)
def default_op_factors() -> OpFactors:
    """Op factors when no op_points.csv is given: those stored in the generic profile."""
    g = get_profile("generic")
    return OpFactors(
        gemm_efficiency=g.gemm_efficiency,
        gemm_half_tokens=g.gemm_half_tokens,
        low_precision_gemm_ratio=g.low_precision_gemm_ratio,
        hbm_efficiency_max=0.95,
        scaleup_bw_efficiency=g.scaleup_bw_efficiency,
        collective_latency_scale=g.collective_latency_scale,
        note="the generic profile's operator factors",
    )


# --- files ---------------------------------------------------------------------------------------

def calibrate_to_file(
    points_csv: str | Path,
    out: str | Path,
    *,
    gpu: str | None = None,
    software: str | None = None,
    op_csv: str | Path | None = None,
    jobs: int = 1,
    time_limit_s: float | None = None,
) -> list[FitResult]:
    """What ``shardplan calibrate`` does: fit (within ``time_limit_s``), then write one profile to ``out`` (a
    file), or every fitted profile into ``out`` when it is a directory. A fit that misses its median row by more
    than ``MAX_MEDIAN_MISS`` writes nothing at all: ``InfeasibleError`` naming each such profile."""
    require_scipy()
    if software is not None and software not in GENERATIONS:
        raise SpecError("software", f"{quoted(software)}; one of {', '.join(GENERATIONS)}")
    row_filter = (lambda p: p.software == software) if software else None
    out = Path(out)
    results = calibrate(points_csv, op_csv, gpu=gpu, row_filter=row_filter, jobs=jobs, one_profile=not out.is_dir(),
                        time_limit_s=time_limit_s)
    if not results:
        raise SpecError("points", f"no usable rows in {points_csv}")
    refused = [r for r in results if not r.describes_rows]
    if refused:
        raise InfeasibleError([("points", "no profile inside the physical ranges describes the rows: "
                                          + "; ".join(_misfit(r) for r in refused) + "; nothing written")])
    if out.is_dir():
        for r in results:
            write_profile(r.profile, out / f"{r.profile.name}.json")
        return results
    write_profile(results[0].profile, out)
    return results


def _misfit(result: FitResult) -> str:
    """What a refused fit says of itself: its miss on the median row and its fields at a bound."""
    ends = result.at_bounds
    bounds = "" if not ends else (
        f", {', '.join(f'{f} {getattr(result.profile, f):g}' for f in ends)} at an end of "
        f"{'its range' if len(ends) == 1 else 'their ranges'}")
    return (f"{result.profile.name}'s fit of {result.rows} rows misses its median row {result.median_miss:.3g}-fold "
            f"(at most {MAX_MEDIAN_MISS:g}-fold is written){bounds}")


def require_scipy() -> None:
    if importlib.util.find_spec("scipy") is None:
        raise SpecError("calibrate", "fitting needs scipy: pip install 'shardplan[calibrate]'")


def profile_json(profile: Profile) -> str:
    """The profile as stored: fields in declaration order, floats at DIGITS significant digits."""
    data = {}
    for name in Profile.model_fields:
        value = getattr(profile, name)
        data[name] = _sig(value) if isinstance(value, float) else value
    return json_text(data, indent=2, ensure_ascii=False) + "\n"


def write_profile(profile: Profile, path: str | Path | None = None) -> Path:
    path = Path(path) if path is not None else PROFILE_DIR / f"{profile.name}.json"
    path.write_text(profile_json(profile), encoding="utf-8")
    return path


def _sig(value: float, digits: int = DIGITS) -> float:
    if value == 0 or not math.isfinite(value):
        return float(value)
    out = round(value, digits - 1 - int(math.floor(math.log10(abs(value)))))
    return float(out)


def _id_ranges(ids: Iterable[str]) -> str:
    nums = sorted({int(i) for i in ids if i.isdigit()})
    runs: list[list[int]] = []  # [first, last] of each run of consecutive ids
    for n in nums:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(f"{first}-{last}" if last > first else str(first) for first, last in runs)


__all__ = [
    "AT_BOUND_SHARE", "BOUNDS", "DIGITS", "FITTED", "MAX_MEDIAN_MISS", "FitResult", "OpFactors", "all_fp4", "at_an_end",
    "calibrate", "calibrate_to_file", "field_bounds", "fit_profile", "fp4_share_fields", "hopper_gemm_terms",
    "mla_stream_efficiency", "op_factors", "profile_json", "profile_name", "require_scipy", "residual",
    "shared_profile", "write_profile",
]
