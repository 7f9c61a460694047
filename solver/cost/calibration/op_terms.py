"""Physics terms read off the measured operator points (``op_points.csv``), beyond the GEMM curve and the
all-reduce factors ``fit.op_factors`` reads:

- ``kv_stream_efficiency``: the share of HBM peak TensorRT-LLM's generation-attention kernels read the KV
  cache at, per GPU, from the points where the KV read dominates (at least ``KV_BOUND_TOKENS`` cached
  tokens per kernel): bytes = batch x kv_len x kv_heads x head_dim x 2 (K and V) x 2 (bf16).
- ``moe_fixed_us`` and ``moe_routed_token_ns``: what a MoE block costs beyond the expert GEMMs the cost
  model prices: each balanced-routing MoE point's measured time less ``CostContext``'s expert GEMM time
  for the same shape, fitted as ``fixed + per_assignment x assignments per GPU`` (relative least
  squares, both at least 0).

No scipy: one median and one two-parameter linear least squares.
"""

from __future__ import annotations

import csv
import re
import statistics
from dataclasses import dataclass
from pathlib import Path

from shardplan.hardware import get_gpu, parse_cluster
from shardplan.hardware.profile import Profile
from shardplan.models import SpecError, get_model
from shardplan.rules.layout import Layout
from shardplan.rules.operators import Op, Phase
from shardplan.solver.cost.operators import CostContext, LayerKind, Step
from shardplan.solver.cost.stage import stage_shape

KV_BOUND_TOKENS = 16384  # cached tokens per kernel from which the read, not the launch, sets the time
MOE_MODEL = "deepseek-v3"  # the MoE points are DeepSeek-V3 layers (hidden 7168, 256 experts, top-8)


@dataclass(frozen=True)
class OpTerms:
    kv_stream_efficiency: dict[str, float]  # per GPU preset name
    moe_fixed_us: float
    moe_routed_token_ns: float
    moe_points: int

    def kv_stream_for(self, gpu: str) -> tuple[float, bool]:
        """(efficiency, measured): the GPU's own, else the mean of the measured GPUs (an assumption)."""
        if gpu in self.kv_stream_efficiency:
            return self.kv_stream_efficiency[gpu], True
        return statistics.fmean(self.kv_stream_efficiency.values()), False


def _ints(text: str, pattern: str) -> tuple[int, ...]:
    found = re.search(pattern, text)
    if found is None:
        raise SpecError("op_points", f"shape_params {text!r} has no {pattern}")
    return tuple(int(x) for x in found.groups())


def _rows(path: str | Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def kv_stream_efficiencies(rows: list[dict[str, str]]) -> dict[str, float]:
    found: dict[str, list[float]] = {}
    for r in rows:
        if r["op"] != "generation_attention" or "kv bf16" not in r["dtype"]:
            continue
        text = r["shape_params"]
        batch, kv_len = _ints(text, r"batch=(\d+) kv_len=(\d+)")
        (kv_heads,) = _ints(text, r"kv_heads=(\d+)")
        (head_dim,) = _ints(text, r"head_dim=(\d+)")
        if batch * kv_len < KV_BOUND_TOKENS:
            continue
        gpu = get_gpu(r["gpu"])
        nbytes = batch * kv_len * kv_heads * head_dim * 2 * 2
        found.setdefault(gpu.name, []).append(nbytes / (float(r["latency_us"]) * 1e-6) / gpu.hbm_bytes_per_s)
    return {gpu: statistics.median(values) for gpu, values in sorted(found.items())}


def _expert_gemm_us(gpu: str, tokens: int, ep: int, profile: Profile) -> float:
    """The cost model's expert GEMM time (no MoE overhead terms) of one DeepSeek-V3 MoE layer on one of
    ``ep`` GPUs serving ``tokens`` tokens in FP8."""
    model = get_model(MOE_MODEL)
    layout = Layout.even(model.num_layers, 1, attn_dp=ep, batch=tokens)
    bare = profile.model_copy(update={"moe_fixed_us": 0.0, "moe_routed_token_ns": 0.0})
    ctx = CostContext(model, parse_cluster(f"{ep}x{gpu}"), bare, stage_shape(model, layout))
    ops = ctx.layer_ops_s(LayerKind(moe=True, windowed=False), Step(Phase.DECODE, tokens, 1, 1024))
    return ops[Op.MOE_EXPERTS] * 1e6


def moe_terms(rows: list[dict[str, str]], profiles: dict[str, Profile]) -> tuple[float, float, int]:
    """(fixed us, ns per assignment, points used), from the balanced MoE points of the GPUs in ``profiles``."""
    model = get_model(MOE_MODEL)
    moe = model.moe
    if moe is None:
        raise SpecError("op_points", f"{MOE_MODEL} has no MoE layers")
    points = []  # (assignments per GPU, measured us, modelled GEMM us)
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
        points.append((tokens * topk / ep, float(r["latency_us"]), _expert_gemm_us(gpu, tokens, ep, profiles[gpu])))
    if len(points) < 2:
        raise SpecError("op_points", "fewer than two balanced MoE points: the MoE terms cannot be fitted")
    # Minimise sum(((gemm + f + a x n) / measured - 1)^2): linear in (f, a) with rows scaled by 1/measured.
    sxx = sxy = syy = sx = sy = 0.0
    for n, measured, gemm in points:
        u, v, t = 1.0 / measured, n / measured, 1.0 - gemm / measured
        sxx, sxy, syy, sx, sy = sxx + u * u, sxy + u * v, syy + v * v, sx + u * t, sy + v * t
    det = sxx * syy - sxy * sxy
    fixed = (sx * syy - sy * sxy) / det
    per = (sxx * sy - sxy * sx) / det
    if per < 0:  # keep both physical: refit the other alone
        per, fixed = 0.0, sx / sxx
    if fixed < 0:
        fixed, per = 0.0, sy / syy
    return fixed, per * 1e3, len(points)


def op_terms(path: str | Path, profiles: dict[str, Profile]) -> OpTerms:
    """Every term above from the operator points at ``path``; ``profiles[gpu]`` prices the MoE GEMMs."""
    rows = _rows(path)
    kv = kv_stream_efficiencies(rows)
    if not kv:
        raise SpecError("op_points", "no bandwidth-bound generation-attention points")
    fixed, per_ns, n = moe_terms(rows, profiles)
    return OpTerms(kv, fixed, per_ns, n)
