"""Physics terms read off the measured operator points (``op_points.csv``), beyond the GEMM curve and the
all-reduce factors ``fit.op_factors`` reads:

- ``attention_fixed_us`` and ``kv_stream_efficiency``: TensorRT-LLM's generation-attention kernels per GPU,
  fitted as ``time = fixed + bytes / (HBM peak x efficiency)`` over all of that GPU's points (least
  squares): bytes = batch x kv_len x kv_heads x head_dim x 2 (K and V) x 2 (bf16). A one-sequence kernel
  reading 2 MB takes ~16 us, as long as the fixed part; a bare ratio of bytes to time at 134 MB (0.42-0.62)
  counts that fixed part as slow streaming and prices a large KV cache too slowly.
- ``low_precision_stream_ratio``: the M = 1 GEMMs' weight-read rate of FP8 against 16-bit weights of the
  same shape on the same GPU (bytes / time of each; both include the kernel's fixed time).
- ``moe_fixed_us`` and ``moe_routed_token_ns``: what a MoE block costs beyond the expert GEMMs the cost
  model prices: each balanced-routing MoE point's measured time less ``CostContext``'s expert GEMM time
  for the same shape, fitted as ``fixed + per_assignment x assignments per GPU`` (relative least
  squares, both at least 0), one figure for every GPU.

  Pricing the per-assignment part as memory traffic instead (``MOE_ROUTED_AT_BANDWIDTH``: bytes per
  assignment and hidden element at each GPU's datasheet HBM peak, ``hardware/presets/gpus.json``) was
  measured and not taken (benchmarks/accuracy/README.md, branch ``moebw``). The points favour it: H100 and
  H200 share one die and differ in HBM (3.35 vs 4.8 TB/s); fitted on each GPU's three points alone
  (``moe_terms_per_gpu``) the fixed part is 29.1 and 27.8 us (a launch cost) and the per-assignment part
  60.9 and 18.0 ns, a ratio of 0.30, below the bandwidth's 0.70 and far from the 1.0 of one figure; fitted
  on one GPU, the other's 4,096-token point comes out within 13-17 % as bytes, 21-24 % as one figure. But
  the engine profiles refit with it (H100 46.4 ns, H200 32.4, B200 and GB200 19.4 against 35.5 on all)
  priced the user-facing table rows and the runs under load slightly worse.

No scipy: medians and two-parameter linear least squares.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from shardplan.hardware import get_gpu, parse_cluster
from shardplan.hardware.profile import Profile
from shardplan.models import SpecError, get_model
from shardplan.models.files import read_csv_rows
from shardplan.rules.layout import Layout
from shardplan.rules.operators import Op, Phase
from shardplan.solver.cost.operators import MOE_REFERENCE_HIDDEN, CostContext, LayerKind, Step
from shardplan.solver.cost.stage import stage_shape

MOE_MODEL = "deepseek-v3"  # the MoE points are DeepSeek-V3 layers (hidden 7168, 256 experts, top-8)
# Price the MoE per-assignment part as bytes at each GPU's HBM peak (True) or as one time on every GPU (False).
# False: measured both ways, the bandwidth form priced the user-facing rows slightly worse (module docstring).
MOE_ROUTED_AT_BANDWIDTH = False


@dataclass(frozen=True)
class MoeTerms:
    """The MoE block's fixed cost and its per-assignment cost, as one figure or as bytes at HBM bandwidth."""

    fixed_us: float
    per_assignment: float  # ns per MOE_REFERENCE_HIDDEN-wide assignment; at_bandwidth: bytes per hidden element
    at_bandwidth: bool
    points: int

    def routed_token_ns(self, gpu: str) -> float:
        """``moe_routed_token_ns`` of a profile for ``gpu``."""
        return moe_routed_ns(self.per_assignment, gpu) if self.at_bandwidth else self.per_assignment


@dataclass(frozen=True)
class OpTerms:
    kv_stream_efficiency: dict[str, float]  # per GPU preset name
    attention_fixed_us: dict[str, float]  # per GPU preset name
    low_precision_stream_ratio: dict[str, float]  # per GPU preset name
    moe: MoeTerms

    def for_gpu(self, gpu: str) -> tuple[dict[str, float], bool]:
        """(the per-GPU terms as profile fields, measured): the GPU's own, else the mean of the measured
        GPUs (an assumption: no points for this GPU); the MoE terms from one fit over the measured GPUs."""
        tables = {
            "kv_stream_efficiency": self.kv_stream_efficiency,
            "attention_fixed_us": self.attention_fixed_us,
            "low_precision_stream_ratio": self.low_precision_stream_ratio,
        }
        measured = all(gpu in t for t in tables.values())
        fields = {f: t[gpu] if measured else statistics.fmean(t.values()) for f, t in tables.items()}
        # Stored to 0.01 us and ns, as the profiles have carried them.
        fields["moe_fixed_us"] = round(self.moe.fixed_us, 2)
        fields["moe_routed_token_ns"] = round(self.moe.routed_token_ns(gpu), 2)
        return fields, measured


def moe_routed_ns(bytes_per_element: float, gpu: str) -> float:
    """ns to move ``bytes_per_element`` x ``MOE_REFERENCE_HIDDEN`` bytes at ``gpu``'s HBM peak."""
    return bytes_per_element * MOE_REFERENCE_HIDDEN / get_gpu(gpu).hbm_bytes_per_s * 1e9


def _ints(text: str, pattern: str) -> tuple[int, ...]:
    found = re.search(pattern, text)
    if found is None:
        raise SpecError("op_points", f"shape_params {text!r} has no {pattern}")
    return tuple(int(x) for x in found.groups())


OP_COLUMNS = ("gpu", "backend", "op", "shape_params", "dtype", "latency_us")
# A kernel's measured time in us: far beyond real kernels both ways, and inside the range where the rates
# derived from it (FLOPs or bytes per second) stay finite.
MIN_LATENCY_US, MAX_LATENCY_US = 1e-3, 1e12


def read_op_points(path: str | Path) -> list[dict[str, str]]:
    """The operator points' rows (``--ops``): a UTF-8 CSV with every column the fit reads, each row's
    ``latency_us`` a number within range. A ``SpecError`` names the column or the row: a NaN, zero or
    negative time went into the GEMM and all-reduce fits unnoticed (a profile written from it, exit 0)."""
    rows = read_csv_rows(path, "ops", OP_COLUMNS)
    for line, row in rows:
        shown = row["latency_us"].strip()[:20]
        try:
            latency = float(row["latency_us"])
        except ValueError:
            raise SpecError(f"ops row {line}", f"latency_us {shown!r} is not a number") from None
        if not MIN_LATENCY_US <= latency <= MAX_LATENCY_US:  # NaN fails both comparisons
            raise SpecError(f"ops row {line}",
                            f"latency_us {shown!r} is outside {MIN_LATENCY_US:g}..{MAX_LATENCY_US:g}")
    return [row for _, row in rows]


def _line(points: list[tuple[float, float]]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line through ``points``."""
    xs, ys = [x for x, _ in points], [y for _, y in points]
    x_mean, y_mean = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - x_mean) * (y - y_mean) for x, y in points) / sum((x - x_mean) ** 2 for x in xs)
    return y_mean - slope * x_mean, slope


def kv_stream_terms(rows: list[dict[str, str]]) -> dict[str, tuple[float, float]]:
    """Per GPU: (fixed us per kernel, share of HBM peak past it) of the generation-attention points."""
    found: dict[str, list[tuple[float, float]]] = {}
    for r in rows:
        if r["op"] != "generation_attention" or "kv bf16" not in r["dtype"]:
            continue
        text = r["shape_params"]
        batch, kv_len = _ints(text, r"batch=(\d+) kv_len=(\d+)")
        (kv_heads,) = _ints(text, r"kv_heads=(\d+)")
        (head_dim,) = _ints(text, r"head_dim=(\d+)")
        nbytes = batch * kv_len * kv_heads * head_dim * 2 * 2
        found.setdefault(get_gpu(r["gpu"]).name, []).append((nbytes, float(r["latency_us"])))
    terms = {}
    for gpu, points in sorted(found.items()):
        if len({x for x, _ in points}) < 2:
            raise SpecError(
                "op_points", f"{gpu}: generation-attention points of one size cannot split fixed time and stream"
            )
        fixed_us, us_per_byte = _line(points)
        terms[gpu] = (max(fixed_us, 0.0), 1e6 / us_per_byte / get_gpu(gpu).hbm_bytes_per_s)
    return terms


def low_precision_stream_ratios(rows: list[dict[str, str]]) -> dict[str, float]:
    """Per GPU: bytes per second of the M = 1 FP8 GEMMs over those of the 16-bit GEMMs of the same N and K."""
    rates: dict[tuple[str, str, str], float] = {}  # (gpu, shape, dtype) -> weight bytes per us
    for r in rows:
        if r["op"] != "gemm" or not r["shape_params"].startswith("M=1 "):
            continue
        n, k = _ints(r["shape_params"], r"N=(\d+) K=(\d+)")
        width = {"bfloat16": 2, "float16": 2, "fp8": 1}.get(r["dtype"])
        if width is not None:
            key = (get_gpu(r["gpu"]).name, r["shape_params"], "fp8" if width == 1 else "16-bit")
            rates[key] = n * k * width / float(r["latency_us"])
    ratios: dict[str, list[float]] = {}
    for (gpu, shape, dtype), rate in rates.items():
        if dtype == "fp8" and (gpu, shape, "16-bit") in rates:
            ratios.setdefault(gpu, []).append(rate / rates[(gpu, shape, "16-bit")])
    return {gpu: statistics.median(values) for gpu, values in sorted(ratios.items())}


def _expert_gemm_us(gpu: str, tokens: int, ep: int, profile: Profile) -> float:
    """The cost model's expert GEMM time (no MoE overhead terms) of one DeepSeek-V3 MoE layer on one of
    ``ep`` GPUs serving ``tokens`` tokens in FP8."""
    model = get_model(MOE_MODEL)
    layout = Layout.even(model.num_layers, 1, attn_dp=ep, batch=tokens)
    bare = profile.model_copy(update={"moe_fixed_us": 0.0, "moe_routed_token_ns": 0.0})
    ctx = CostContext(model, parse_cluster(f"{ep}x{gpu}"), bare, stage_shape(model, layout))
    ops = ctx.layer_ops_s(LayerKind(moe=True, windowed=False), Step(Phase.DECODE, tokens, 1, 1024))
    return ops[Op.MOE_EXPERTS] * 1e6


@dataclass(frozen=True)
class MoePoint:
    """One balanced MoE operator point: the GPU, assignments it serves, measured and modelled-GEMM time."""

    gpu: str
    assignments: float
    measured_us: float
    gemm_us: float


def moe_points(rows: list[dict[str, str]], profiles: dict[str, Profile]) -> list[MoePoint]:
    """The balanced DeepSeek-V3 MoE points of the GPUs in ``profiles``, each with its modelled expert GEMMs."""
    model = get_model(MOE_MODEL)
    moe = model.moe
    if moe is None:
        raise SpecError("op_points", f"{MOE_MODEL} has no MoE layers")
    points = []
    for r in rows:
        if not r["op"].startswith("moe (grouped") or "routing=balanced" not in r["shape_params"]:
            continue
        text = r["shape_params"]
        (tokens,) = _ints(text, r"tokens=(\d+)")
        (hidden,) = _ints(text, r"hidden=(\d+)")
        (experts,) = _ints(text, r"experts=(\d+)")
        (topk,) = _ints(text, r"topk=(\d+)")
        (ep,) = _ints(text, r"moe_ep=(\d+)")
        if (hidden, experts, topk) != (model.hidden_size, moe.num_experts, moe.experts_per_token):
            continue  # not the preset's shape: the model cannot price it
        gpu = get_gpu(r["gpu"]).name
        if gpu not in profiles:
            continue
        gemm_us = _expert_gemm_us(gpu, tokens, ep, profiles[gpu])
        points.append(MoePoint(gpu, tokens * topk / ep, float(r["latency_us"]), gemm_us))
    return points


def fit_moe(points: list[MoePoint], us_per_unit: dict[str, float]) -> tuple[float, float]:
    """(fixed us, per unit) minimising sum(((gemm + fixed + per x assignments x us_per_unit[gpu]) / measured
    - 1)^2), both at least 0: linear in (fixed, per) with each row scaled by 1 / measured."""
    if len(points) < 2:
        raise SpecError("op_points", "fewer than two balanced MoE points: the MoE terms cannot be fitted")
    sxx = sxy = syy = sx = sy = 0.0
    for p in points:
        u, v = 1.0 / p.measured_us, p.assignments * us_per_unit[p.gpu] / p.measured_us
        t = 1.0 - p.gemm_us / p.measured_us
        sxx, sxy, syy, sx, sy = sxx + u * u, sxy + u * v, syy + v * v, sx + u * t, sy + v * t
    det = sxx * syy - sxy * sxy
    if det <= 1e-12 * sxx * syy:
        raise SpecError("op_points", "balanced MoE points of one size cannot split fixed and per-assignment costs")
    fixed = (sx * syy - sy * sxy) / det
    per = (sxx * sy - sxy * sx) / det
    if per < 0:  # keep both physical: refit the other alone
        per, fixed = 0.0, sx / sxx
    if fixed < 0:
        fixed, per = 0.0, sy / syy
    return fixed, per


def _us_per_unit(gpus: set[str], at_bandwidth: bool) -> dict[str, float]:
    """us one unit of the per-assignment part costs per assignment on each GPU: 1 ns on every GPU, or (at
    bandwidth) one byte per hidden element of the MoE points' rows at the GPU's HBM peak."""
    hidden = get_model(MOE_MODEL).hidden_size
    return {g: hidden / get_gpu(g).hbm_bytes_per_s * 1e6 if at_bandwidth else 1e-3 for g in gpus}


def moe_terms(
    rows: list[dict[str, str]], profiles: dict[str, Profile], at_bandwidth: bool = MOE_ROUTED_AT_BANDWIDTH
) -> MoeTerms:
    """The MoE terms from the balanced MoE points of the GPUs in ``profiles``: the per-assignment part as ns
    on every GPU, or (``at_bandwidth``) as HBM bytes per hidden element, a point on GPU g taking bytes x
    hidden / g's HBM peak."""
    points = moe_points(rows, profiles)
    fixed, per = fit_moe(points, _us_per_unit({p.gpu for p in points}, at_bandwidth))
    return MoeTerms(fixed, per, at_bandwidth, len(points))


def moe_terms_per_gpu(rows: list[dict[str, str]], profiles: dict[str, Profile]) -> dict[str, tuple[float, float]]:
    """Per GPU: (fixed us, ns per assignment) fitted on that GPU's points alone (a fixed time per assignment,
    no bandwidth): how the two parts move between GPUs is the evidence for pricing the second at HBM bandwidth."""
    points = moe_points(rows, profiles)
    fits = {}
    for gpu in sorted({p.gpu for p in points}):
        fits[gpu] = fit_moe([p for p in points if p.gpu == gpu], _us_per_unit({gpu}, False))
    return fits


def moe_held_out_errors(points: list[MoePoint], at_bandwidth: bool) -> dict[str, list[tuple[float, float]]]:
    """Per GPU: (assignments, predicted / measured - 1) of its points, priced by the fit on the other GPUs'."""
    units = _us_per_unit({p.gpu for p in points}, at_bandwidth)
    held: dict[str, list[tuple[float, float]]] = {}
    for gpu in sorted(units):
        fixed, per = fit_moe([p for p in points if p.gpu != gpu], units)
        held[gpu] = [
            (p.assignments, (p.gemm_us + fixed + per * p.assignments * units[gpu]) / p.measured_us - 1)
            for p in points if p.gpu == gpu
        ]
    return held


def op_terms(
    path: str | Path, profiles: dict[str, Profile], moe_at_bandwidth: bool = MOE_ROUTED_AT_BANDWIDTH
) -> OpTerms:
    """Every term above from the operator points at ``path``; ``profiles[gpu]`` prices the MoE GEMMs."""
    rows = read_op_points(path)
    kv = kv_stream_terms(rows)
    if not kv:
        raise SpecError("op_points", "no generation-attention points")
    ratios = low_precision_stream_ratios(rows)
    if not ratios:
        raise SpecError("op_points", "no M = 1 GEMMs of FP8 and 16-bit weights of one shape")
    return OpTerms(
        {g: eff for g, (_, eff) in kv.items()},
        {g: us for g, (us, _) in kv.items()},
        ratios,
        moe_terms(rows, profiles, moe_at_bandwidth),
    )
