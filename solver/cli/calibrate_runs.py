"""``shardplan calibrate --runs``: an engine profile fitted to the user's own serving runs.

Thin: reads the options ``calibrate`` passed, calls ``solver/cost/calibration/runs.py``, writes the profile(s)
through ``OutputFiles`` (nothing written on any error) and prints the runs used, the fields with their ranges and
the in-sample errors, as a human view or ``--json``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from shardplan.hardware.profile import Engine
from shardplan.models import SpecError
from shardplan.models.files import json_text
from shardplan.solver.cli.outputs import OutputFiles, say_wrote
from shardplan.solver.cost.calibration.fit import require_scipy, write_profile
from shardplan.solver.cost.calibration.runs import RunsFit, at_bound, calibrate_runs, field_bounds


def runs_dict(fit: RunsFit) -> dict[str, Any]:
    """One fitted profile as ``calibrate --runs --json`` prints it (the table fit's keys, and the runs')."""
    p = fit.profile
    return {
        "profile": p.name,
        "gpu": p.gpu,
        "engine": p.engine,
        "rows": len(fit.runs),
        "median_abs_error": round(fit.median_abs_tpot_error, 4),  # TPOT, as the engine profiles record it
        "median_abs_ttft_error": round(fit.median_abs_ttft_error, 4),
        "fitted": {f: getattr(p, f) for f in fit.fields},
        "bounds": {f: list(field_bounds(f)) for f in fit.fields},
        "at_bound": [f for f in fit.fields if at_bound(f, getattr(p, f))],
        "runs": [
            {"id": m.row_id, "run": m.label, "ttft_ms": m.run.ttft_ms, "tpot_ms": m.run.tpot_ms,
             "predicted_ttft_ms": round(ttft, 3), "predicted_tpot_ms": round(tpot, 3)}
            for m, (ttft, tpot) in zip(fit.runs, fit.predicted, strict=True)
        ],
    }


def print_fit(row: dict[str, Any]) -> None:
    click.echo(f"{row['profile']}: {row['rows']} runs of {row['engine']} on {row['gpu']}")
    click.echo(f"  {'id':>8s}  {'TTFT ms':>9s} {'predicted':>9s}  {'TPOT ms':>8s} {'predicted':>9s}  run")
    for r in row["runs"]:
        click.echo(f"  {r['id'][:8]:>8s}  {r['ttft_ms']:9.1f} {r['predicted_ttft_ms']:9.1f}  {r['tpot_ms']:8.2f} "
                   f"{r['predicted_tpot_ms']:9.2f}  {r['run']}")
    for f, value in row["fitted"].items():
        lo, hi = row["bounds"][f]
        flag = "  * at a bound: the runs would take it past its physical range" if f in row["at_bound"] else ""
        click.echo(f"  {f} {value:g} [{lo:g}, {hi:g}]{flag}")
    click.echo(f"  median |TPOT error| {row['median_abs_error']:.1%}, median |TTFT error| "
               f"{row['median_abs_ttft_error']:.1%} (in sample)")


def calibrate_runs_cmd(
    runs_csv: str, out: str, engine: Engine | None, gpu: str | None, time_limit: float, as_json: bool
) -> None:
    """Fit, write (``out``: a file, or a directory for one profile per engine and GPU), print."""
    with OutputFiles([runs_csv]) as outputs:
        outputs.add("out", out, directory_ok=True)
        require_scipy()
        target = Path(outputs.temp("out"))
        fits = calibrate_runs(runs_csv, engine=engine, gpu=gpu, one_profile=not target.is_dir(),
                              time_limit_s=time_limit)
        if not fits:
            raise SpecError("runs", f"no runs in {runs_csv}")
        for fit in fits:
            write_profile(fit.profile, target / f"{fit.profile.name}.json" if target.is_dir() else target)
        outputs.commit()
    rows = [runs_dict(f) for f in fits]
    if as_json:
        click.echo(json_text(rows, indent=2, sort_keys=False))
        return
    for row in rows:
        print_fit(row)
    say_wrote(out)
