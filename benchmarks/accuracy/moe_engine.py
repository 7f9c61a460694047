"""``python -m benchmarks.accuracy.moe_engine [ENGINE:GPU ...]``: does a MoE block's cost beyond its expert GEMMs,
fitted per engine and GPU, free the weight streams held at their bound (README, "The MoE block's costs as engine
fields")?

``moe_fixed_us`` and ``moe_routed_token_ns`` are operator terms today: one pair from TensorRT-LLM's CUTLASS MoE
kernels (op_points.csv), copied into every engine profile. vLLM and SGLang run other MoE kernels, so each is a
candidate engine field. Per (engine, GPU) group of runs that has an engine profile and MoE runs (TensorRT-LLM's
groups are left out: the op points measured its kernels), and per variant (the stored two fields, and each MoE
field fitted beside them): the fields fitted with ``hbm_efficiency`` within its range and with its bound lifted
(the free value the data want), how many fields the profile would fit, median |TPOT error| in sample and with each
model held out, and each model's median signed error. The fit is ``engine_fit.fit_engine``'s (same loss, start and
tolerances, runs only). Nothing is written. scipy is needed (the ``calibrate`` extra), as for every fit.
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks.accuracy import serving
from benchmarks.accuracy.joint import cell, fit_fields
from shardplan.hardware.profile import Profile
from shardplan.solver.cost.calibration.engine_fit import (
    ENGINE_BOUNDS,
    ENGINE_FIELDS,
    ENGINE_LIMITS,
    EngineRun,
    tpot_errors,
)
from shardplan.solver.cost.calibration.ranges import FittedField

# Physical ranges of the MoE block's two costs as engine fields.
# - moe_fixed_us: what the block costs at one token beyond its expert GEMMs is a handful of kernel launches (top-k
#   routing, the permutation and its index build, the activation quantisation, the weighted combine): none when all
#   are fused into the GEMMs' launch, ~200 us when about twenty run eagerly at ~10 us each (the range of the
#   per-layer cost, engine_fit.ENGINE_BOUNDS). TensorRT-LLM's measure 28.4 us (op_points.csv).
# - moe_routed_token_ns: per 7,168-wide assignment (operators.MOE_REFERENCE_HIDDEN), copying, quantising and summing
#   rows: 100 ns is ~23 passes over a 16-bit row at H100's HBM peak (3.35 TB/s), 1.5x the most any fit of the op
#   points gave (66 ns: H100's points alone with the GEMMs at the bare kernels' efficiencies).
MOE_BOUNDS: dict[str, tuple[float, float]] = {"moe_fixed_us": (0.0, 200.0), "moe_routed_token_ns": (0.0, 100.0)}
# The stream's bound lifted to find the value the runs want (as the README's earlier checks: the search's limit).
FREE_STREAM_MAX = 3.0
# Each variant's MoE fields fitted beside engine_fit.ENGINE_FIELDS.
VARIANTS: dict[str, tuple[str, ...]] = {
    "stored (operator terms)": (),
    "moe_fixed_us per engine": ("moe_fixed_us",),
    "moe_routed_token_ns per engine": ("moe_routed_token_ns",),
    "both per engine": ("moe_fixed_us", "moe_routed_token_ns"),
}
# The engine whose MoE kernels op_points.csv measured (TensorRT-LLM 1.3's CUTLASS MoE): its groups keep them.
MEASURED_ENGINE = "trtllm"
DEFAULT_GROUPS = ("sglang:H200-SXM", "sglang:B200-SXM", "vllm:B200-SXM", "vllm:H200-SXM")


def is_moe(run: EngineRun) -> bool:
    return run.problem.model.moe is not None


def fields_for(runs: Sequence[EngineRun], moe_fields: Sequence[str]) -> tuple[str, ...]:
    """The fields a profile fits on ``runs``: the engine fields, and ``moe_fields`` only where some run is of a MoE
    model (a MoE field moves no dense run's price, so dense runs alone cannot set it: the op points' value stays).

    >>> fields_for([], ("moe_fixed_us",))
    ('layer_overhead_us', 'hbm_efficiency')
    """
    return (*ENGINE_FIELDS, *moe_fields) if any(is_moe(r) for r in runs) else ENGINE_FIELDS


def bounds_for(fields: Sequence[str], stream_max: float | None = None) -> list[tuple[float, float]]:
    """Each field's physical range; ``stream_max`` lifts ``hbm_efficiency``'s upper bound (the free value)."""
    bounds = {**ENGINE_BOUNDS, **MOE_BOUNDS}
    if stream_max is not None:
        bounds["hbm_efficiency"] = (bounds["hbm_efficiency"][0], stream_max)
    return [bounds[f] for f in fields]


def at_bound(field: str, value: float) -> bool:
    """Within ``fit.AT_BOUND_SHARE`` of the physical range's width from either end (``ranges``' rule)."""
    lo, hi = {**ENGINE_BOUNDS, **MOE_BOUNDS}[field]
    return FittedField("", field, value, lo, hi).at_bound


@dataclass(frozen=True)
class VariantFit:
    fields: tuple[str, ...]
    bounded: Profile  # every field within its physical range
    free: Profile  # hbm_efficiency's bound lifted
    held_out: list[float]  # TPOT errors of each model's runs, fitted on the group's other models


def fit_variant(start: Profile, runs: Sequence[EngineRun], moe_fields: Sequence[str]) -> VariantFit:
    fields = fields_for(runs, moe_fields)
    bounded = fit_fields(start, fields, bounds_for(fields), runs, [])
    free = fit_fields(start, fields, bounds_for(fields, FREE_STREAM_MAX), runs, [])
    held: list[float] = []
    models = sorted({r.model for r in runs})
    for model in models if len(models) > 1 else ():
        train = [r for r in runs if r.model != model]
        train_fields = fields_for(train, moe_fields)
        fitted = fit_fields(start, train_fields, bounds_for(train_fields), train, [])
        held += tpot_errors([r for r in runs if r.model == model], fitted)
    return VariantFit(fields, bounded, free, held)


def _values(profile: Profile, fields: Sequence[str], flag: bool) -> str:
    return ", ".join(f"{f} {getattr(profile, f):.4g}{'*' if flag and at_bound(f, getattr(profile, f)) else ''}"
                     for f in fields)


def _per_model(runs: Sequence[EngineRun], errors: Sequence[float]) -> str:
    by_model: dict[str, list[float]] = defaultdict(list)
    for r, e in zip(runs, errors, strict=True):
        by_model[r.model.split("/")[-1]].append(e)
    return "  ".join(f"{m} {statistics.median(v):+.1%}" for m, v in sorted(by_model.items()))


def report(engine: str, gpu: str, runs: Sequence[EngineRun], start: Profile) -> None:
    moe = sum(is_moe(r) for r in runs)
    print(f"== {engine} on {gpu}: {len(runs)} runs ({moe} MoE); operator terms moe_fixed_us {start.moe_fixed_us:g}, "
          f"moe_routed_token_ns {start.moe_routed_token_ns:g} (* at a bound)")
    for name, moe_fields in VARIANTS.items():
        v = fit_variant(start, runs, moe_fields)
        errors = tpot_errors(runs, v.bounded)
        held = f"{statistics.median(abs(e) for e in v.held_out):.1%}" if v.held_out else "-"
        print(f"  {name} ({len(v.fields)} fields fitted): {_values(v.bounded, v.fields, True)}")
        print(f"    TPOT in sample {cell(errors)}, model held out {held}; per model {_per_model(runs, errors)}")
        print(f"    bound lifted: {_values(v.free, v.fields, False)}; TPOT {cell(tpot_errors(runs, v.free))}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.accuracy.moe_engine", description=__doc__.split("\n\n")[0])
    ap.add_argument("groups", nargs="*", default=list(DEFAULT_GROUPS),
                    help=f"ENGINE:GPU groups of runs (default: {' '.join(DEFAULT_GROUPS)})")
    args = ap.parse_args(argv)
    runs, _ = serving.load_runs(serving.SERVING_CSV)
    groups = serving.engine_runs(runs)
    terms = serving._op_terms()
    for group in args.groups:
        engine, _, gpu = group.partition(":")
        if engine not in ENGINE_LIMITS or not gpu:
            ap.error(f"{group!r}: expected ENGINE:GPU with ENGINE one of {', '.join(ENGINE_LIMITS)}")
        group_runs = groups.get((engine, gpu), [])
        if engine == MEASURED_ENGINE:
            print(f"== {group}: skipped, op_points.csv measured {MEASURED_ENGINE}'s own MoE kernels")
        elif len(group_runs) < serving.MIN_RUNS:
            print(f"== {group}: {len(group_runs)} runs, fewer than {serving.MIN_RUNS}: no engine profile")
        else:
            base, _ = serving.base_profile(gpu, terms)
            report(engine, gpu, group_runs, base.model_copy(update=ENGINE_LIMITS[engine]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
