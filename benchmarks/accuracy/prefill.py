"""``python -m benchmarks.accuracy.prefill``: where the user-facing tables' prefill lean comes from (README, "The
prefill lean: each GPU's GEMM curve, and the all-reduce").

1. Each operator op_points.csv measured on H100 and H200 (GEMMs, context attention, custom all-reduce) beside what
   the TensorRT-LLM engine profile of that GPU prices for the same shape, through the cost model's own primitives
   (``CostContext``); the all-reduce also under the fit with the one-shot kernel (``fit.allreduce_terms``).
2. The user-facing max-throughput rows (``__main__._print_user_facing``) of the GPUs with an engine profile, sliced
   by workload shape, ISL, dense or MoE, weight format and TP: median |error|, median error, the median share of
   the predicted run that is prefill (``measures.drain_parts``), and of the prefill-heavy rows' prefill time the
   median share of each kind of operator.
3. The same rows with the engine profiles given the all-reduce terms, not refit.

Nothing is written; scipy is needed for the all-reduce fit (the ``calibrate`` extra).
"""

from __future__ import annotations

import argparse
import csv
import math
import re
import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.accuracy import OPS_CSV, POINTS_CSV, Row, predict_all
from shardplan.hardware import Collective, get_gpu, parse_cluster
from shardplan.hardware.profile import Profile, profile_for_gpu
from shardplan.models import get_model
from shardplan.rules.operators import Op
from shardplan.solver.cost.calibration.fit import allreduce_terms, op_factors
from shardplan.solver.cost.calibration.measures import drain_parts
from shardplan.solver.cost.calibration.points import THROUGHPUT, Point, load_points
from shardplan.solver.cost.evaluate import evaluate
from shardplan.solver.cost.operators import CostContext
from shardplan.solver.cost.stage import shape_of

OP_GPUS = ("H100-SXM", "H200-SXM")  # what op_points.csv measured
ENGINE_GPUS = ("H100-SXM", "H200-SXM", "B200-SXM", "GB200-NVL72")  # GPUs priced with a TensorRT-LLM engine profile
# A prefill step's operators by kind (rules.operators.Op values).
KINDS: dict[str, tuple[Op, ...]] = {
    "all-reduce": (Op.ATTN_ALLREDUCE, Op.FFN_ALLREDUCE, Op.MOE_COMBINE, Op.MOE_EXPERT_ALLREDUCE),
    "GEMM": (Op.ATTN_PROJ, Op.FFN, Op.MOE_EXPERTS, Op.MOE_SHARED, Op.MOE_ROUTER, Op.LM_HEAD),
    "attention": (Op.ATTN_CORE,),
}


@dataclass(frozen=True)
class OpPrice:
    gpu: str
    op: str
    shape: str
    measured_us: float
    priced_us: float

    @property
    def ratio(self) -> float:
        return self.priced_us / self.measured_us


def _ints(text: str, pattern: str) -> tuple[int, ...]:
    found = re.search(pattern, text)
    if found is None:
        raise ValueError(f"{text!r} has no {pattern}")
    return tuple(int(x) for x in found.groups())


def _context(profile: Profile, gpus: int) -> CostContext:
    """A cost context on ``gpus`` GPUs of the profile's GPU: only its primitives are used, so the model is any."""
    model = get_model("llama-3.1-70b")
    cluster = parse_cluster(f"{gpus}x{get_gpu(profile.gpu).name}")
    return CostContext(model, cluster, profile, shape_of(model, gpus, gpus, 1, 1, 1))


def price_row(row: dict[str, str], profile: Profile) -> OpPrice | None:
    """What ``profile`` prices for one op_points.csv row through ``CostContext``'s primitives (None: an operator
    this diagnosis does not price). A GEMM of M tokens by an N x K weight; a causal context attention of ``batch``
    prompts (half the square of score FLOPs, the K and V of every prompt read once); an all-reduce of the stated
    elements in 16 bits over ``num_gpus`` GPUs of one node."""
    shape, op = row["shape_params"], row["op"]
    if op == "gemm":
        m, n, k = _ints(shape, r"M=(\d+) N=(\d+) K=(\d+)")
        low = row["dtype"] == "fp8"
        seconds = _context(profile, 1).gemm_s(n * k, m, n * k * (1 if low else 2), "fp8" if low else "bf16")
    elif op == "context_attention":
        batch, isl, q_heads, kv_heads, head_dim = _ints(
            shape, r"batch=(\d+) isl=(\d+) q_heads=(\d+) kv_heads=(\d+) head_dim=(\d+)")
        flops = batch * 2.0 * q_heads * 2 * head_dim * isl * (isl + 1) / 2
        seconds = _context(profile, 1).stream_s(flops, batch * isl * kv_heads * head_dim * 2 * 2)
    elif op == "all_reduce" and "custom AR" in row["backend"]:
        (gpus,) = _ints(shape, r"num_gpus=(\d+)")
        (elements,) = _ints(shape, r"elements=(\d+)")
        seconds = _context(profile, gpus).collective_s(Collective.ALL_REDUCE, elements * 2, range(gpus))
    else:
        return None
    return OpPrice(get_gpu(row["gpu"]).name, op, f"{shape} {row['dtype']}", float(row["latency_us"]), seconds * 1e6)


def operator_prices(profiles: dict[str, Profile], ops_csv: Path = OPS_CSV) -> list[OpPrice]:
    """Every priced op_points.csv row of the GPUs in ``profiles``, each with its GPU's profile."""
    out = []
    with open(ops_csv, newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            gpu = get_gpu(row["gpu"]).name
            if gpu in profiles and (price := price_row(row, profiles[gpu])) is not None:
                out.append(price)
    return out


def prefill_kind_shares(point: Point, profile: Profile, batch: int) -> dict[str, float]:
    """Of one prefill chunk through every stage at ``batch`` sequences, the share of each operator kind (``KINDS``;
    the rest is 'other': fixed costs, full-width passes, sends)."""
    pred = evaluate(point.problem, point.layout.model_copy(update={"batch": batch}), profile)
    totals: dict[str, float] = defaultdict(float)
    for stage in pred.stages:
        for name, us in stage.prefill_ops_us.items():
            kind = next((k for k, ops in KINDS.items() if name in {o.value for o in ops}), "other")
            totals[kind] += us
    whole = sum(totals.values())
    return {kind: totals[kind] / whole for kind in (*KINDS, "other")} if whole else {}


@dataclass(frozen=True)
class Sliced:
    row: Row
    prefill_share: float
    kinds: dict[str, float]


def shape_of_workload(p: Point) -> str:
    isl, osl = p.problem.workload.isl, p.problem.workload.osl
    return "decode-heavy" if osl >= 4 * isl else "prefill-heavy" if isl >= 4 * osl else "mixed"


def user_facing(points: Sequence[Point], with_terms: dict[str, dict[str, float]] | None = None) -> list[Sliced]:
    """The user-facing rows of the engine-profile GPUs, each with its predicted prefill share and (prefill-heavy
    rows) its prefill's operator kinds; ``with_terms`` per GPU: fields laid over the engine profile."""
    tables = [p for p in points if p.kind == THROUGHPUT and p.source.startswith("TRTLLM-PERF") and p.gpu in ENGINE_GPUS]
    profiles = {gpu: profile_for_gpu(gpu, "trtllm").model_copy(update=(with_terms or {}).get(gpu, {}))
                for gpu in ENGINE_GPUS}
    out = []
    for point in tables:
        profile = profiles[point.gpu]
        (row,) = predict_all([point], {point.problem.profile: profile})
        parts = drain_parts(point, profile, point.requests) if point.requests else None
        share = parts.prefill_ms / parts.run_ms if parts else math.nan
        kinds = prefill_kind_shares(point, profile, parts.batch) if parts and shape_of_workload(point) == (
            "prefill-heavy") else {}
        out.append(Sliced(row, share, kinds))
    return out


def _median(values: Sequence[float]) -> float:
    values = [v for v in values if not math.isnan(v)]
    return statistics.median(values) if values else math.nan


def print_slices(title: str, rows: Sequence[Sliced], key: Callable[[Sliced], object]) -> None:
    groups: dict[str, list[Sliced]] = defaultdict(list)
    for r in rows:
        groups[str(key(r))].append(r)
    print(f"  by {title}:")
    for name, members in sorted(groups.items()):
        errors = [m.row.error for m in members]
        kinds = "  ".join(f"{k} {_median([m.kinds[k] for m in members if m.kinds]):.2f}"
                          for k in (*KINDS, "other") if any(m.kinds for m in members))
        print(f"    {name:28s} {len(members):4d} rows  {_median([abs(e) for e in errors]):6.1%} "
              f"({_median(errors):+6.1%})  prefill share {_median([m.prefill_share for m in members]):4.2f}  {kinds}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.accuracy.prefill", description=__doc__.split("\n\n")[0])
    ap.parse_args(argv)
    ops = op_factors(OPS_CSV)
    stored = {gpu: profile_for_gpu(gpu, "trtllm") for gpu in OP_GPUS}
    terms = {gpu: allreduce_terms(ops, gpu) for gpu in ENGINE_GPUS}
    fitted = {gpu: p.model_copy(update=terms[gpu]) for gpu, p in stored.items()}
    print("== op_points.csv against the engine profiles' prices (priced / measured)")
    for price, refit in zip(operator_prices(stored), operator_prices(fitted), strict=True):
        extra = f"  with the one-shot fit {refit.ratio:5.2f}" if price.op == "all_reduce" else ""
        print(f"  {price.gpu:9s} {price.op:17s} {price.shape:60s} {price.measured_us:9.2f} us  "
              f"x{price.ratio:5.2f}{extra}")
    points, _ = load_points(POINTS_CSV)
    for label, overlay in (("stored engine profiles", None), ("with the all-reduce terms, not refit", terms)):
        rows = user_facing(points, overlay)
        print(f"== user-facing rows of {', '.join(ENGINE_GPUS)} ({label}): |error| (error), median prefill share, "
              "and for prefill-heavy rows the prefill's operator shares")
        print_slices("GPU x workload", rows, lambda r: (r.row.point.gpu, shape_of_workload(r.row.point)))
        if overlay is None:
            heavy = [r for r in rows if shape_of_workload(r.row.point) == "prefill-heavy"]
            print_slices("ISL (prefill-heavy)", heavy, lambda r: r.row.point.problem.workload.isl)
            print_slices("dense or MoE (prefill-heavy)", heavy,
                         lambda r: "MoE" if r.row.point.problem.model.moe else "dense")
            print_slices("weights (prefill-heavy)", heavy, lambda r: r.row.point.problem.model.weights_dtype.value)
            print_slices("TP (prefill-heavy)", heavy, lambda r: f"tp{r.row.point.layout.tp}")
            print_slices("TP (all rows)", rows, lambda r: f"tp{r.row.point.layout.tp}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
