"""``python -m benchmarks.accuracy.joint [GPU ...]``: what TensorRT-LLM's engine fields can and cannot explain of
its own max-throughput tables (README, "The TensorRT-LLM engine profiles fitted on runs and tables together").

Per GPU with a TensorRT-LLM engine profile (H100-SXM, H200-SXM, B200-SXM unless named), on its serving runs and
its v0.17/v1.0 table rows (``serving.engine_table_points``): the median |error| and median error of both kinds
over a grid of the two engine fields; the fields the table rows alone would choose; the stored profile's table
errors sliced by source, workload shape, model and GPU count; each operator term of the profile switched off;
and ``kv_stream_efficiency`` fitted as a third field, on the runs alone and on both kinds. Nothing is written.
scipy is needed (the ``calibrate`` extra), as for every fit.
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections import defaultdict
from collections.abc import Callable, Sequence

from benchmarks.accuracy import serving
from shardplan.hardware.profile import Profile, profile_for_gpu
from shardplan.solver.cost.calibration.engine_fit import (
    ENGINE_BOUNDS,
    ENGINE_LIMITS,
    EngineRun,
    kind_weights,
    table_errors,
    tpot_errors,
)
from shardplan.solver.cost.calibration.fit import residual
from shardplan.solver.cost.calibration.points import Point

GPUS = ("H100-SXM", "H200-SXM", "B200-SXM")
HBM_GRID = (0.7, 0.8, 0.9, 0.95)
LAYER_GRID_US = (0.0, 10.0, 20.0, 40.0, 80.0)
# Each operator term of an engine profile (op_terms.py, serving.FULL_WIDTH_PASSES) as it was before the term
# existed: KV read at the weight stream, no fixed attention time, no per-rank full-width passes, no MoE costs.
TERMS_OFF: dict[str, dict[str, float | None]] = {
    "stored profile": {},
    "KV stream at hbm_efficiency": {"kv_stream_efficiency": None},
    "attention_fixed_us 0": {"attention_fixed_us": 0.0},
    "full_width_passes 0": {"full_width_passes": 0.0},
    "MoE fixed and per-token costs 0": {"moe_fixed_us": 0.0, "moe_routed_token_ns": 0.0},
}
KV_BOUNDS = (0.3, 0.95)  # the range of a stream: as hbm_efficiency's (engine_fit.ENGINE_BOUNDS)


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else math.nan


def cell(errors: Sequence[float]) -> str:
    """Median |error| and median signed error."""
    return f"{_median([abs(e) for e in errors]):5.1%} ({_median(errors):+5.1%})"


def both(runs: Sequence[EngineRun], rows: Sequence[Point], profile: Profile) -> str:
    return f"runs TPOT {cell(tpot_errors(runs, profile))}  tables {cell(table_errors(rows, profile))}"


def fit_fields(start: Profile, fields: Sequence[str], bounds: Sequence[tuple[float, float]],
               runs: Sequence[EngineRun], rows: Sequence[Point]) -> Profile:
    """``start`` with ``fields`` fitted as ``engine_fit.fit_engine`` fits its two (same loss, weights and
    tolerances), on any mix of runs and table rows; values unrounded."""
    # scipy is optional (the ``calibrate`` extra) and heavy: imported here, as in every fit module.
    from scipy.optimize import least_squares

    lo, hi = [b[0] for b in bounds], [b[1] for b in bounds]
    x0 = [min(max(getattr(start, f) or a, a), b) for f, a, b in zip(fields, lo, hi, strict=True)]
    run_weight, row_weight = kind_weights(len(runs), len(rows)) if runs else (0.0, 1.0)

    def candidate(x: Sequence[float]) -> Profile:
        return start.model_copy(update={f: float(v) for f, v in zip(fields, x, strict=True)})

    def residuals(x: Sequence[float]) -> list[float]:
        profile = candidate(x)
        return ([run_weight * math.log1p(e) for e in tpot_errors(runs, profile)]
                + [row_weight * residual(p, profile) for p in rows])

    fit = least_squares(residuals, x0, bounds=(lo, hi), x_scale=[max(abs(v), 1.0) for v in x0], diff_step=0.03,
                        loss="soft_l1", f_scale=0.2, max_nfev=80, xtol=1e-4, ftol=1e-6)
    return candidate([float(v) for v in fit.x])


def _shape(p: Point) -> str:
    isl, osl = p.problem.workload.isl, p.problem.workload.osl
    return "decode-heavy" if osl >= 4 * isl else "prefill-heavy" if isl >= 4 * osl else "mixed"


SLICES: dict[str, Callable[[Point], str]] = {
    "source": lambda p: p.source,
    "shape": _shape,
    "model": lambda p: p.problem.model.name.split("/")[-1],
    "GPUs": lambda p: str(p.num_gpus),
}


def report(gpu: str, runs: Sequence[EngineRun], rows: Sequence[Point], start: Profile) -> None:
    stored = profile_for_gpu(gpu, "trtllm")
    print(f"== {gpu}: {len(runs)} TensorRT-LLM runs, {len(rows)} table rows; median |error| (median error)")
    print(f"  stored {stored.name} (hbm_efficiency {stored.hbm_efficiency:g}, layer_overhead_us "
          f"{stored.layer_overhead_us:g}): {both(runs, rows, stored)}")
    print("  grid over the engine fields (the operator terms and hardware fields as stored):")
    for hbm in HBM_GRID:
        cells = [f"l {layer:g}: " + both(runs, rows, start.model_copy(
            update={"hbm_efficiency": hbm, "layer_overhead_us": layer})) for layer in LAYER_GRID_US]
        print(f"    hbm {hbm:g}: " + " | ".join(cells))
    fields = ("hbm_efficiency", "layer_overhead_us")
    alone = fit_fields(start, fields, [ENGINE_BOUNDS[f] for f in fields], [], rows)
    print(f"  fitted on the table rows alone: hbm_efficiency {alone.hbm_efficiency:.4g}, layer_overhead_us "
          f"{alone.layer_overhead_us:.4g}: {both(runs, rows, alone)}")
    print("  the stored profile's table errors by slice:")
    errors = table_errors(rows, stored)
    for name, key in SLICES.items():
        groups: dict[str, list[float]] = defaultdict(list)
        for p, e in zip(rows, errors, strict=True):
            groups[key(p)].append(e)
        print(f"    {name:7s} " + "  ".join(f"{k} {len(v)}: {cell(v)}" for k, v in sorted(groups.items())))
    print("  each operator term of the stored profile switched off:")
    for name, update in TERMS_OFF.items():
        print(f"    {name:32s} {both(runs, rows, stored.model_copy(update=update))}")
    kv_fields = ("layer_overhead_us", "hbm_efficiency", "kv_stream_efficiency")
    kv_bounds = [ENGINE_BOUNDS["layer_overhead_us"], ENGINE_BOUNDS["hbm_efficiency"], KV_BOUNDS]
    for label, fit_rows in (("runs alone", []), ("runs and tables", list(rows))):
        kv = fit_fields(start, kv_fields, kv_bounds, runs, fit_rows)
        values = ", ".join(f"{f} {getattr(kv, f):.4g}" for f in kv_fields)
        print(f"  kv_stream_efficiency fitted too, on the {label} (from {start.kv_stream_efficiency:g}): {values}: "
              f"{both(runs, rows, kv)}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.accuracy.joint", description=__doc__.split("\n\n")[0])
    ap.add_argument("gpus", nargs="*", default=list(GPUS), help="GPU presets with a TensorRT-LLM engine profile")
    args = ap.parse_args(argv)
    runs, _ = serving.load_runs(serving.SERVING_CSV)
    groups = serving.engine_runs(runs)
    tables = serving.engine_table_points()
    terms = serving._op_terms()
    for gpu in args.gpus:
        base, _ = serving.base_profile(gpu, terms)
        start = base.model_copy(update=ENGINE_LIMITS[serving.TABLE_ENGINE])
        report(gpu, groups.get((serving.TABLE_ENGINE, gpu), []), tables.get(gpu, []), start)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
