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
from shardplan.hardware.measured_error import MEASURED_ERROR_FILE, MeasuredErrors, in_band
from shardplan.hardware.profile import ENGINES

SOURCE = ("python -m benchmarks.accuracy.measured_error --write: serving runs of "
          "benchmarks/accuracy/data/serving_points.csv, each priced as shardplan evaluate prices it with the "
          "engine's default profile for its GPU; error = predicted / measured - 1")
DIGITS = 3  # 0.1 % steps: finer than the figures mean, coarse enough that the bytes are stable
# Bands of requests in flight, as the accuracy report's tables split them (serving.BUCKETS): the error grows with load.
BANDS: tuple[tuple[int, int | None], ...] = ((1, 1), (2, 16), (17, 128), (129, None))


Priced = serving_runs.Priced | disagg_runs.Priced


def in_flight(p: Priced) -> int:
    """The requests in flight the run measured: over its one instance (one pool), over the deployment (disagg)."""
    return p.run.concurrency if isinstance(p, serving_runs.Priced) else p.run.layout.concurrency


def figures(ps: Sequence[Priced]) -> dict[str, Any]:
    """The median |error| and median error of TTFT and TPOT over ``ps``, with their count."""

    def figure(errors: list[float]) -> dict[str, float]:
        return {"median_abs": round(statistics.median(abs(e) for e in errors), DIGITS),
                "median": round(statistics.median(errors), DIGITS)}

    return {"runs": len(ps), "ttft": figure([p.ttft_error for p in ps]), "tpot": figure([p.tpot_error for p in ps])}


def per_engine(priced: Sequence[Priced]) -> dict[str, dict[str, Any]]:
    """Per engine with runs: the runs, their GPUs, the median |error| and median error of TTFT and TPOT, and the
    same per band of requests in flight (``BANDS``, those with runs)."""
    groups: dict[str, list[Priced]] = defaultdict(list)
    for p in priced:
        groups[p.run.engine].append(p)
    out = {}
    for engine in ENGINES:
        ps = groups.get(engine)
        if not ps:
            continue
        whole = figures(ps)
        bands = []
        for low, high in BANDS:
            inside = [p for p in ps if in_band(low, high, in_flight(p))]
            if inside:
                bands.append({"low": low, "high": high, **figures(inside)})
        out[engine] = {"runs": whole["runs"], "gpus": sorted({p.run.problem.cluster.gpu.name for p in ps}),
                       "ttft": whole["ttft"], "tpot": whole["tpot"], "bands": bands}
    return out


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
            for b in e["bands"]:
                band = (f"c {b['low']}+" if b["high"] is None else f"c {b['low']}" if b["low"] == b["high"] else
                        f"c {b['low']}-{b['high']}")
                print(f"  {'':10s} {band:>9s} {b['runs']:3d} {b['ttft']['median_abs']:8.1%} "
                      f"{b['ttft']['median']:+9.1%} {b['tpot']['median_abs']:8.1%} {b['tpot']['median']:+9.1%}")
    if args.write:
        MEASURED_ERROR_FILE.write_text(serialised(data), encoding="utf-8")
        print(f"wrote {MEASURED_ERROR_FILE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
