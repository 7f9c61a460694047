"""``python -m benchmarks.accuracy [--refit] [--holdout] [--brief]``: the accuracy report (README.md)."""

from __future__ import annotations

import argparse
import statistics
import time
from collections import Counter, defaultdict
from pathlib import Path

from benchmarks.accuracy import (
    KINDS,
    OPS_CSV,
    POINTS_CSV,
    RANK_TARGET,
    RANK_TOLERANCE,
    SOURCE_OUT,
    TARGETS,
    by_metric,
    holdout,
    median_abs,
    model_half,
    model_halves,
    predict_all,
    random_half,
    rankings,
    refit,
    source_out,
    summary,
)
from benchmarks.accuracy import disagg as disagg_runs
from benchmarks.accuracy import serving as serving_runs
from shardplan.hardware.profile import list_profiles
from shardplan.solver.cost.calibration.fit import op_factors
from shardplan.solver.cost.calibration.points import SKIP_REASONS, THROUGHPUT, load_points
from shardplan.solver.cost.calibration.ranges import default_profiles, fitted_fields


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.accuracy", description=__doc__)
    ap.add_argument("--points", type=Path, default=POINTS_CSV, help="measured points (perf_points.csv)")
    ap.add_argument("--ops", type=Path, default=OPS_CSV, help="operator points (op_points.csv)")
    ap.add_argument(
        "--refit", action="store_true", help="refit every profile and rewrite hardware/profiles/*.json first"
    )
    ap.add_argument(
        "--holdout", action="store_true", help="also fit on half the rows and test on the other half (slow)"
    )
    ap.add_argument("--brief", action="store_true", help="summaries only, not every row")
    ap.add_argument("--jobs", type=int, default=2, help="processes for fitting")
    args = ap.parse_args(argv)

    if args.refit:
        t = time.perf_counter()
        results = refit(args.points, args.ops, jobs=args.jobs)
        print(f"refit {len(results)} profiles in {time.perf_counter() - t:.0f} s")
        for r in results:
            fitted = ", ".join(f"{f}={getattr(r.profile, f):g}" for f in r.fields)
            print(f"  {r.profile.name:28s} {r.rows:4d} rows  median |err| {r.median_abs_error:6.1%}  {fitted}")
        print()

    points, skipped = load_points(args.points)
    t = time.perf_counter()
    rows = predict_all(points)
    elapsed = time.perf_counter() - t
    print(
        f"{len(points)} usable rows of {len(points) + len(skipped)} in {args.points.name}, "
        f"predicted in {elapsed:.1f} s"
    )

    if not args.brief:
        _print_rows(rows)
    _print_summary(rows)
    _print_rankings(rows)
    _print_user_facing(points, rows)
    _print_ranges(args.ops)
    _print_under_load()
    _print_skipped(skipped)
    if args.holdout:
        _print_holdouts(points, args)
    return 0


def _print_under_load() -> None:
    """The runs under load of serving_points.csv per engine, as ``shardplan evaluate`` prices them with the
    GPU's default (engine) profile: the headline of serving.py and disagg.py, whose own reports say more."""
    runs, _ = serving_runs.load_runs()
    print()
    serving_runs.print_table("== runs under load, one pool (python -m benchmarks.accuracy.serving for more): "
                             "median |error| per engine", serving_runs.price(runs))
    split, _ = disagg_runs.load_runs()
    held = [r for r in split if disagg_runs.holds_a_sequence(r)]
    disagg_runs.print_table("== runs under load, disaggregated (python -m benchmarks.accuracy.disagg for more): "
                            "median |error| per engine", disagg_runs.price(held))


def _print_rows(rows) -> None:
    print()
    print("== every usable row: predicted vs measured (error = predicted / measured - 1)")
    print(
        f"{'id':>5} {'source':21s} {'kind':18s} {'configuration':64s} {'metric':30s} "
        f"{'measured':>10s} {'predicted':>10s} {'error':>7s}  profile"
    )
    for r in sorted(rows, key=lambda r: (r.point.source, r.point.kind, int(r.point.row_id))):
        p = r.point
        pred = f"{r.predicted:10.4g}" if r.fits else "  no fit  "
        print(
            f"{p.row_id:>5} {p.source:21s} {p.kind:18s} {p.label:64s} {p.metric:30s} "
            f"{p.value:10.4g} {pred} {r.error:+7.1%}  {r.profile}"
        )


def _print_summary(rows) -> None:
    table = summary(rows)
    print()
    print("== median |error| per source and kind")
    for kind in KINDS:
        target = TARGETS.get(kind)
        n, med = table[kind]["all"]
        verdict = ""
        if target is not None:
            verdict = f"  (target <= {round(target * 100)} %: {'met' if med <= target else 'MISSED'})"
        print(f"{kind}: {n} rows, median |error| {med:.1%}{verdict}")
        for src, (n_src, m_src) in table[kind].items():
            if src != "all":
                print(f"    {src:24s} {n_src:4d} rows  {m_src:6.1%}")
    n, med = table["all"]["all"]
    print(f"overall: {n} rows, median |error| {med:.1%}")
    print()
    print("== median |error| per metric")
    for metric, (n, med) in by_metric(rows).items():
        print(f"    {metric:32s} {n:4d} rows  {med:6.1%}")
    profiles = Counter(r.profile for r in rows)
    print()
    print("== profiles used (rows)")
    for name, n in sorted(profiles.items()):
        print(f"    {name:30s} {n:4d}  median |error| {median_abs([r for r in rows if r.profile == name]):6.1%}")


def _print_rankings(rows) -> None:
    ranks = rankings(rows)
    print()
    print(
        "== layout ranking per config_group "
        f"(ok: the predicted-best layout measures within {RANK_TOLERANCE:.0%} of the measured best)"
    )
    by_source = defaultdict(list)
    for g in ranks:
        src = next(r.point.source for r in rows if r.point.group == g.group)
        by_source[src].append(g)
        mark = "exact" if g.exact else ("ok" if g.ok else "MISS")
        unit = " per GPU" if g.per_gpu else ""
        print(
            f"    {g.group:6s} {src:21s} {g.metric}{unit:8s} measured best {g.measured_best:8s} "
            f"predicted best {g.predicted_best:8s} shortfall {g.shortfall:6.1%}  {mark}"
        )
    ok = sum(g.ok for g in ranks)
    exact = sum(g.exact for g in ranks)
    share = ok / len(ranks) if ranks else float("nan")
    print(
        f"groups: {len(ranks)}; predicted best within {RANK_TOLERANCE:.0%}: {ok} ({share:.1%}, "
        f"target >= {RANK_TARGET:.0%}: {'met' if share >= RANK_TARGET else 'MISSED'}); "
        f"exactly the measured best: {exact} ({exact / len(ranks):.1%})"
    )
    for src, gs in sorted(by_source.items()):
        within = sum(g.ok for g in gs) / len(gs)
        exact_share = sum(g.exact for g in gs) / len(gs)
        print(
            f"    {src:24s} {len(gs):4d} groups  within {RANK_TOLERANCE:.0%}: {within:6.1%}  exact: {exact_share:6.1%}"
        )


GROUPS = (
    ("Qwen3-30B-A3B", lambda p: p.problem.model.name.startswith("Qwen/Qwen3-30B")),
    ("Mixtral-8x22B", lambda p: "Mixtral-8x22B" in p.problem.model.name),
    ("Llama-4-Maverick", lambda p: "Maverick" in p.problem.model.name),
    ("B200/GB200 FP4", lambda p: p.gpu in ("B200-SXM", "GB200-NVL72") and p.problem.model.weights_dtype.value == "fp4"),
)


def _print_user_facing(points, rows) -> None:
    """The maximum-throughput rows of the TensorRT-LLM tables as a user gets them: priced with
    TensorRT-LLM's default profile for the GPU (what ``evaluate --engine trtllm`` with the layout
    pinned uses), not the profile of each table's software generation; and the model groups the
    issue names, both ways."""
    tables = [p for p in points if p.kind == THROUGHPUT and p.source.startswith("TRTLLM-PERF")]
    user = {id(r.point): r for r in predict_all(tables, engine_default="trtllm")}
    fitted = {id(r.point): r for r in rows}
    print()
    print("== user-facing path: max-throughput rows of the TensorRT-LLM tables, priced with TensorRT-LLM's "
          "default profile of the GPU (target <= 7 %)")
    by_source = defaultdict(list)
    for p in tables:
        by_source[p.source].append(user[id(p)])
    all_rows = list(user.values())
    verdict = "met" if median_abs(all_rows) <= 0.07 else "MISSED"
    print(f"    all tables               {len(all_rows):4d} rows  {median_abs(all_rows):6.1%}  ({verdict})")
    for src, rs in sorted(by_source.items()):
        print(f"    {src:24s} {len(rs):4d} rows  {median_abs(rs):6.1%}")
    by_gpu = defaultdict(list)
    for p in tables:
        by_gpu[(p.gpu, user[id(p)].profile)].append(user[id(p)])
    print("    by GPU (and the profile that prices it):")
    for (gpu, profile), rs in sorted(by_gpu.items()):
        print(f"      {gpu:14s} {profile:22s} {len(rs):4d} rows  {median_abs(rs):6.1%}  {median_signed(rs):+6.1%}")
    drained = sum(p.requests is not None for p in tables)
    print(f"    ({drained} rows priced as the drain of their run's requests, points.OFFLINE_REQUESTS; "
          f"{len(tables) - drained} as a steady state or static batch)")
    by_shape = defaultdict(list)
    for p in tables:
        by_shape[_workload_shape(p)].append(user[id(p)])
    print("    by workload, median |error| and median error (the sign says which way a missing term leans):")
    for shape, rs in sorted(by_shape.items()):
        print(f"      {shape:40s} {len(rs):4d} rows  {median_abs(rs):6.1%}  {median_signed(rs):+6.1%}")
    print("== model groups, max-throughput rows: median |error| with each table's profile / with the user-facing one")
    for name, member in GROUPS:
        mine = [p for p in points if p.kind == THROUGHPUT and member(p)]
        own = [fitted[id(p)] for p in mine]
        facing = [user[id(p)] for p in mine if id(p) in user]
        flag = "" if max(median_abs(own), median_abs(facing) if facing else 0.0) <= 0.15 else "  (above 15 %)"
        print(f"    {name:18s} {len(mine):4d} rows  {median_abs(own):6.1%} / {median_abs(facing):6.1%}{flag}")


def _workload_shape(p) -> str:
    """Decode-heavy (OSL at least 4 x ISL), prefill-heavy (ISL at least 4 x OSL) or mixed."""
    isl, osl = p.problem.workload.isl, p.problem.workload.osl
    if osl >= 4 * isl:
        return "decode-heavy (OSL >= 4 ISL)"
    if isl >= 4 * osl:
        return "prefill-heavy (ISL >= 4 OSL)"
    return "mixed"


def median_signed(rows) -> float:
    return statistics.median(r.error for r in rows) if rows else float("nan")


def _print_ranges(ops_csv: Path) -> None:
    """Each fitted field of every default profile beside its physical range; '*' marks one at an end or outside."""
    ops = op_factors(ops_csv)
    print()
    print("== fitted fields of the default profiles, value [physical range] (* at a bound or outside)")
    flagged = 0
    for profile in default_profiles(list_profiles()):
        fields = fitted_fields(profile, ops)
        flagged += sum(not f.ok for f in fields)
        cells = "  ".join(f"{f.field} {f.value:.4g} [{f.low:g}, {f.high:.3g}]{'' if f.ok else '*'}" for f in fields)
        print(f"    {profile.name:26s} {len(fields)} fitted: {cells}")
    print(f"fields at a bound or outside their range: {flagged}")


def _print_skipped(skipped) -> None:
    print()
    print(f"== skipped rows: {len(skipped)}")
    counts = Counter(s.reason for s in skipped)
    for reason, n in counts.most_common():
        detail = Counter(f"{s.source}/{s.model}" for s in skipped if s.reason == reason)
        print(f"    {n:4d}  {reason}: {SKIP_REASONS[reason]}")
        print("          " + ", ".join(f"{k} ({v})" for k, v in sorted(detail.items())))


def _print_holdouts(points, args) -> None:
    print()
    print(
        "== held-out checks: fit on one half, report the other half's median |error| (profiles not written)"
    )
    first, second = model_halves(points)
    checks = [
        ("random half of the rows (seed 20261122)", random_half),
        (f"unseen models A ({', '.join(m.split('/')[-1] for m in first)})", model_half(first)),
        (f"unseen models B ({', '.join(m.split('/')[-1] for m in second)})", model_half(second)),
        *((f"unseen source {src}", source_out(src)) for src in SOURCE_OUT),
    ]
    for name, train in checks:
        t = time.perf_counter()
        h = holdout(name, train, args.points, args.ops, jobs=args.jobs)
        parts = []
        for kind in KINDS:
            test = [r for r in h.test if r.point.kind == kind]
            if test:
                parts.append(f"{kind} {median_abs(test):.1%} ({len(test)})")
        ranks = rankings(h.test)
        rank = f"; ranking within {RANK_TOLERANCE:.0%}: {sum(g.ok for g in ranks)}/{len(ranks)}" if ranks else ""
        print(f"    {name}: trained on {h.train_rows} rows, tested on {len(h.test)}: "
              f"{'; '.join(parts)}; all {median_abs(h.test):.1%}{rank}  [{time.perf_counter() - t:.0f} s]")
        if h.unfitted:
            names = sorted({r.point.problem.profile for r in h.unfitted})
            print(
                f"        + {len(h.unfitted)} test rows whose GPU/software had no training rows ({', '.join(names)}), "
                f"priced with unfitted starting values: median |error| {median_abs(h.unfitted):.1%}"
            )


if __name__ == "__main__":
    raise SystemExit(main())
