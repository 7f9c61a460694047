"""Which fields of a stored profile were fitted, and the physical range each must sit inside.

A fitted field at an end of its range is a sign that the fit pushed it there to carry a term the model
lacks (issue 13: "a fit that cannot hide a missing term"), so the ends count as failures, not only values
outside. One definition, read by the accuracy benchmarks (which print every field beside its range) and
by the test that reads every default profile.

- A GPU's default (hardware) profile, and ``generic`` (their medians): the fields ``fit.py`` fits for its
  software generation, within ``fit.BOUNDS``, narrowed where op_points.csv measured the bare kernel (no
  weight stream or GEMM faster than it on H100/H200) and by the GPU's scale-up fabric (``scaleup_bw_max``).
- An engine profile (``engine_default``): those hardware fields as inherited, plus the engine's own
  (``engine_fit.ENGINE_BOUNDS``) and its TTFT pair (``ttft_fit.TTFT_BOUNDS``); not the GEMM curve where
  op_points.csv measured the GPU's own kernels (``fit.gemm_terms``): there it is a measurement, not a fit.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardplan.hardware.compose import ANY_GPU
from shardplan.hardware.profile import Profile
from shardplan.solver.cost.calibration.engine_fit import ENGINE_BOUNDS, ENGINE_FIELDS
from shardplan.solver.cost.calibration.fit import (
    FITTED,
    FITTED_BY_SOFTWARE,
    OpFactors,
    at_an_end,
    field_bounds,
    fp4_share_fields,
    gemm_terms,
)
from shardplan.solver.cost.calibration.points import GENERATIONS
from shardplan.solver.cost.calibration.ttft_fit import TTFT_BOUNDS, TTFT_FIELDS


@dataclass(frozen=True)
class FittedField:
    profile: str
    field: str
    value: float
    low: float
    high: float

    @property
    def inside(self) -> bool:
        return self.low <= self.value <= self.high

    @property
    def at_bound(self) -> bool:
        """Within ``fit.AT_BOUND_SHARE`` of the range's width from either end (``fit.at_an_end``)."""
        return at_an_end(self.value, self.low, self.high)

    @property
    def ok(self) -> bool:
        return self.inside and not self.at_bound


def generation(profile: Profile) -> str:
    """The software generation a hardware profile was fitted for, from its name (``fit.profile_name``)."""
    if profile.gpu == ANY_GPU:
        return "trtllm"  # generic: the medians of the default generation's profiles
    suffix = profile.name.removeprefix(profile.gpu.lower()).removeprefix("-")
    return suffix if suffix in GENERATIONS else "trtllm"


def fitted_fields(profile: Profile, ops: OpFactors) -> list[FittedField]:
    """Every fitted field of ``profile`` with its physical range (nothing for a profile nobody fitted)."""
    ranges: dict[str, tuple[float, float]] = {}
    if profile.default or profile.engine_default:
        hardware = FITTED if profile.engine_default else FITTED_BY_SOFTWARE.get(generation(profile), FITTED)
        if profile.fp4_gemm_ratio is not None:  # a GPU whose rows are all FP4 (fit._fit_task)
            hardware = fp4_share_fields(hardware)
        measured = set(gemm_terms(ops, profile.gpu)) if profile.engine_default else set()
        ranges.update({f: field_bounds(f, ops, profile.gpu) for f in hardware if f not in measured})
    if profile.engine_default:
        ranges.update({f: ENGINE_BOUNDS[f] for f in ENGINE_FIELDS})
        ranges.update({f: TTFT_BOUNDS[f] for f in TTFT_FIELDS})
    return [FittedField(profile.name, f, float(getattr(profile, f)), lo, hi) for f, (lo, hi) in ranges.items()]


def default_profiles(profiles: list[Profile]) -> list[Profile]:
    """The profiles plans are priced with when the user names none: each GPU's default, each engine's, generic."""
    return [p for p in profiles if p.default or p.engine_default]


__all__ = ["FittedField", "default_profiles", "fitted_fields", "generation"]
