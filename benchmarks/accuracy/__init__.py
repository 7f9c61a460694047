"""How close is the calibrated cost model to published measurements, and does it rank layouts right?

The library half of ``python -m benchmarks.accuracy`` (see README.md): predict every usable row of
``perf_points.csv`` with the profile it belongs to, summarise the errors, check the layout ranking
inside each ``config_group``, refit the profiles, and fit-on-one-half / test-on-the-other checks.
Printing lives in ``__main__``.
"""

from __future__ import annotations

import os
import random
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from shardplan.hardware.profile import PROFILE_DIR, Engine, Profile, get_profile, profile_for_gpu
from shardplan.solver.cost.calibration.fit import (
    FitResult,
    calibrate,
    op_factors,
    shared_profile,
    write_profile,
)
from shardplan.solver.cost.calibration.measures import predict
from shardplan.solver.cost.calibration.points import LATENCY, SERVING, THROUGHPUT, Point, load_points

# The measured points: the copies in data/ (with their sources, data/README.md), or another folder
# holding files of the same names.
_SHARED = Path(os.environ.get("SHARDPLAN_CALIBRATION_DIR", Path(__file__).resolve().parent / "data"))
POINTS_CSV = _SHARED / "perf_points.csv"
OPS_CSV = _SHARED / "op_points.csv"

KINDS = (THROUGHPUT, LATENCY, SERVING)
TARGETS = {THROUGHPUT: 0.10, LATENCY: 0.15}  # median |error| the acceptance asks for
RANK_TOLERANCE = 0.05  # the predicted-best layout may measure this much below the measured best
RANK_TARGET = 0.90
SEED = 20261122  # the held-out split


@dataclass(frozen=True)
class Row:
    """One usable point with its prediction."""

    point: Point
    predicted: float
    profile: str
    batch: int
    fits: bool

    @property
    def error(self) -> float:
        """Signed relative error, predicted / measured - 1."""
        return self.predicted / self.point.value - 1.0


def predict_all(
    points: Iterable[Point], profiles: dict[str, Profile] | None = None, engine_default: Engine | None = None
) -> list[Row]:
    """Each point priced with its own profile (``point.problem.profile``): from ``profiles`` when
    given (a fit not yet written), else the stored profile of that name; with ``engine_default``,
    that engine's default profile of the point's GPU instead (what a user of the CLI gets)."""
    rows = []
    for p in points:
        name = p.problem.profile
        if engine_default is not None:
            profile = profile_for_gpu(p.gpu, engine_default)
        else:
            found = profiles.get(name) if profiles is not None else None
            profile = found if found is not None else get_profile(name)
        m = predict(p, profile)
        rows.append(Row(p, m.value, m.profile, m.batch, m.fits))
    return rows


def median_abs(rows: Sequence[Row]) -> float:
    return statistics.median(abs(r.error) for r in rows) if rows else float("nan")


def summary(rows: Sequence[Row]) -> dict[str, dict[str, tuple[int, float]]]:
    """{kind: {source or 'all': (rows, median |error|)}} plus {'all': {'all': ...}}."""
    out: dict[str, dict[str, tuple[int, float]]] = {}
    for kind in KINDS:
        mine = [r for r in rows if r.point.kind == kind]
        by_source: dict[str, list[Row]] = defaultdict(list)
        for r in mine:
            by_source[r.point.source].append(r)
        table = {src: (len(v), median_abs(v)) for src, v in sorted(by_source.items())}
        table["all"] = (len(mine), median_abs(mine))
        out[kind] = table
    out["all"] = {"all": (len(rows), median_abs(rows))}
    return out


def by_metric(rows: Sequence[Row]) -> dict[str, tuple[int, float]]:
    groups: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        groups[r.point.metric].append(r)
    return {m: (len(v), median_abs(v)) for m, v in sorted(groups.items())}


# --- ranking -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class GroupRanking:
    group: str
    metric: str
    per_gpu: bool  # throughputs compared per GPU because the layouts use different GPU counts
    measured_best: str
    predicted_best: str
    shortfall: float  # how far the predicted-best layout measures below the measured best (0: same)

    @property
    def exact(self) -> bool:
        return self.measured_best == self.predicted_best

    @property
    def ok(self) -> bool:
        return self.shortfall <= RANK_TOLERANCE + 1e-12


def _layout_name(p: Point) -> str:
    layout = p.layout
    name = f"tp{layout.tp}pp{layout.pp}"
    if layout.dp > 1:
        name += f"dp{layout.dp}"
    return name


def rankings(rows: Sequence[Row]) -> list[GroupRanking]:
    """For each config_group with two or more usable rows: is the layout the model ranks first
    the measured best, or within RANK_TOLERANCE of it? Throughputs: higher is better (per GPU when
    GPU counts differ); latencies: lower is better."""
    groups: dict[str, list[Row]] = defaultdict(list)
    for r in rows:
        if r.point.group:
            groups[r.point.group].append(r)
    out = []
    for group, members in sorted(groups.items(), key=lambda kv: (len(kv[0]), kv[0])):
        if len(members) < 2:
            continue
        metric = members[0].point.metric
        lower_better = members[0].point.kind == LATENCY
        per_gpu = not lower_better and len({r.point.num_gpus for r in members}) > 1

        # The group's flags are bound as defaults: the closure is used only inside this iteration,
        # but binding them says so and keeps a later change from reading the next group's flags.
        def score(value: float, r: Row, per_gpu: bool = per_gpu, lower_better: bool = lower_better) -> float:
            v = value / r.point.num_gpus if per_gpu else value
            return -v if lower_better else v

        best_measured = max(members, key=lambda r: (score(r.point.value, r), r.point.row_id))
        best_predicted = max(members, key=lambda r: (score(r.predicted, r), r.point.row_id))
        top = abs(score(best_measured.point.value, best_measured))
        got = abs(score(best_predicted.point.value, best_predicted))
        shortfall = (got - top) / top if lower_better else (top - got) / top
        out.append(
            GroupRanking(
                group,
                metric,
                per_gpu,
                _layout_name(best_measured.point),
                _layout_name(best_predicted.point),
                max(0.0, shortfall),
            )
        )
    return out


# --- fitting -------------------------------------------------------------------------------------

def refit(
    points_csv: Path = POINTS_CSV, ops_csv: Path = OPS_CSV, jobs: int = 2, directory: Path = PROFILE_DIR
) -> list[FitResult]:
    """Fit every profile and write it, plus ``generic.json`` (the fallback for GPUs without
    measurements: shared operator factors and the median of the fitted default profiles)."""
    results = calibrate(points_csv, ops_csv, jobs=jobs)
    for r in results:
        write_profile(r.profile, directory / f"{r.profile.name}.json")
    write_profile(generic_profile(results, ops_csv), directory / "generic.json")
    return results


def generic_profile(results: Sequence[FitResult], ops_csv: Path = OPS_CSV) -> Profile:
    ops = op_factors(ops_csv)
    base = shared_profile(ops, "*", "trtllm").model_copy(update={"name": "generic", "default": True})
    defaults = [r for r in results if r.profile.default and r.profile.software == base.software]
    fields = sorted({f for r in defaults for f in r.fields})
    # Each field's median over the profiles that fitted it: a field only some GPUs fit (fp4_gemm_ratio, on
    # Blackwell's FP4 rows) is None in the others, which has no median (the refit crashed there).
    update = {f: statistics.median(getattr(r.profile, f) for r in defaults if f in r.fields) for f in fields}
    names = ", ".join(r.profile.name for r in defaults)
    update["source"] = (
        f"fallback for GPUs without measurements: shared operator factors ({ops.note}); fitted fields "
        f"({', '.join(fields)}) are the medians over the default profiles {names}"
    )
    return base.model_copy(update=update)


def fitted_profiles(results: Iterable[FitResult]) -> dict[str, Profile]:
    return {r.profile.name: r.profile for r in results}


def _unfitted(points: Iterable[Point], ops_csv: Path) -> dict[str, Profile]:
    """Starting profiles for points whose (GPU, software) got no rows in a training half."""
    ops = op_factors(ops_csv)
    return {p.problem.profile: shared_profile(ops, p.gpu, p.software) for p in points}


@dataclass(frozen=True)
class Holdout:
    name: str
    train_rows: int
    test: list[Row]  # test rows whose profile was fitted on the training half
    unfitted: list[Row]  # test rows whose (GPU, software) had no training rows: starting values


def holdout(
    name: str,
    train: Callable[[Point], bool],
    points_csv: Path = POINTS_CSV,
    ops_csv: Path = OPS_CSV,
    jobs: int = 2,
) -> Holdout:
    """Fit on the points ``train`` accepts, predict the others."""
    points, _ = load_points(points_csv)
    results = calibrate(points_csv, ops_csv, row_filter=train, jobs=jobs)
    profiles = _unfitted(points, ops_csv)
    fitted = fitted_profiles(results)
    profiles.update(fitted)
    rows = predict_all([p for p in points if not train(p)], profiles)
    return Holdout(
        name,
        sum(1 for p in points if train(p)),
        [r for r in rows if r.point.problem.profile in fitted],
        [r for r in rows if r.point.problem.profile not in fitted],
    )


def random_half(point: Point) -> bool:
    """A fixed pseudo-random half of the rows (by row id)."""
    return random.Random(f"{SEED}:{point.row_id}").random() < 0.5


def model_half(models: Sequence[str]) -> Callable[[Point], bool]:
    """Train on every model not in ``models`` (the test half is unseen models)."""
    held = set(models)
    return lambda p: p.problem.model.name not in held


# Sources another source of the same software generation can stand in for: leaving one out still
# fits its profiles, on the other's rows (the v0.17 and v1.0 tables share the ``trtllm`` profiles).
SOURCE_OUT = ("TRTLLM-PERF-v0.17", "TRTLLM-PERF-v1.0")


def source_out(source: str) -> Callable[[Point], bool]:
    """Train on every source but ``source`` (the test rows are a table the profiles never saw)."""
    return lambda p: p.source != source


def model_halves(points: Sequence[Point]) -> tuple[list[str], list[str]]:
    """Models split in two by alternating over their sorted names: each half holds some of every
    family, and neither half's models appear in the other's training rows."""
    names = sorted({p.problem.model.name for p in points})
    return names[0::2], names[1::2]

