"""``python -m benchmarks.accuracy.measured_error [--write]``: the error bars plans quote.

Prices the serving runs of ``serving_points.csv`` as the accuracy report's "runs under load" tables do (one
pool: ``serving.py``; disaggregated: ``disagg.py``, the runs whose workers hold a sequence), and prints per
mode and engine the runs, their GPUs and the median relative error of TTFT and TPOT. ``--write`` stores them
in ``hardware/measured_error.json``, which ``solve`` and ``evaluate`` quote beside each plan
(``measured_error``); a test keeps the file equal to what this computes, so a cost-model change that moves
the figures must rewrite it.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from benchmarks.accuracy import disagg as disagg_runs
from benchmarks.accuracy import serving as serving_runs
from shardplan.hardware.measured_error import MEASURED_ERROR_FILE, MeasuredErrors
from shardplan.hardware.profile import ENGINES

SOURCE = ("python -m benchmarks.accuracy.measured_error --write: serving runs of "
          "benchmarks/accuracy/data/serving_points.csv, each priced as shardplan evaluate prices it with the "
          "engine's default profile for its GPU; error = predicted / measured - 1")
DIGITS = 3  # 0.1 % steps: finer than the figures mean, coarse enough that the bytes are stable


Priced = serving_runs.Priced | disagg_runs.Priced


def per_engine(priced: Sequence[Priced]) -> dict[str, dict[str, Any]]:
    """Per engine with runs: the runs, their GPUs, and the median |error| and median error of TTFT and TPOT."""
    groups: dict[str, list[Priced]] = defaultdict(list)
    for p in priced:
        groups[p.run.engine].append(p)

    def figure(errors: list[float]) -> dict[str, float]:
        return {"median_abs": round(statistics.median(abs(e) for e in errors), DIGITS),
                "median": round(statistics.median(errors), DIGITS)}

    return {
        engine: {
            "runs": len(ps),
            "gpus": sorted({p.run.problem.cluster.gpu.name for p in ps}),
            "ttft": figure([p.ttft_error for p in ps]),
            "tpot": figure([p.tpot_error for p in ps]),
        }
        for engine in ENGINES if (ps := groups.get(engine))
    }


def compute() -> dict[str, Any]:
    """The figures as ``measured_error.json`` stores them."""
    colocated, _ = serving_runs.load_runs()
    split, _ = disagg_runs.load_runs()
    held = [r for r in split if disagg_runs.holds_a_sequence(r)]
    data = {
        "source": SOURCE,
        "colocated": per_engine(serving_runs.price(colocated)),
        "disagg": per_engine(disagg_runs.price(held)),
    }
    MeasuredErrors.model_validate(data)  # the shape the package reads
    return data


def serialised(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.accuracy.measured_error", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--write", action="store_true", help=f"store the figures in {MEASURED_ERROR_FILE.name}")
    args = ap.parse_args(argv)
    data = compute()
    print(f"  {'mode':10s} {'engine':7s} {'runs':>5s} {'|TTFT|':>8s} {'TTFT med':>9s} {'|TPOT|':>8s} "
          f"{'TPOT med':>9s}  GPUs")
    for mode in ("colocated", "disagg"):
        for engine, e in data[mode].items():
            print(f"  {mode:10s} {engine:7s} {e['runs']:5d} {e['ttft']['median_abs']:8.1%} "
                  f"{e['ttft']['median']:+9.1%} {e['tpot']['median_abs']:8.1%} {e['tpot']['median']:+9.1%}  "
                  f"{', '.join(e['gpus'])}")
    if args.write:
        MEASURED_ERROR_FILE.write_text(serialised(data), encoding="utf-8")
        print(f"wrote {MEASURED_ERROR_FILE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
