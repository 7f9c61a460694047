"""``solve --limits-at median-error`` against ``solve`` as predicted, on the promises sweep's random problems.

    python -m benchmarks.limits_at                     # 40 problems with a limit, seed 20261207 (about 10 min)
    python -m benchmarks.limits_at --count 10 --seed 3

Each problem (``benchmarks/promises/problems.py``, kept only with a --ttft-ms or --tpot-ms limit) is solved both
ways, each in its own process. Checked on each plan held at the median error, from the stored figures
(``hardware/measured_error.json``) read here, not from the plan's own ``measured_error``:
1. its TTFT and TPOT, off as the median run of its engine, mode and band, meet the limits given (unless a limit
   stopped the rounds, which the plan then says: ``limits_at.stopped``);
2. its predictions are within the limits held, and those within the limits given;
3. ``evaluate`` of its layout under the limits held prints its metrics and no violation;
4. it is no better than the plan as predicted (tighter limits cannot beat it): at most its tokens/s per GPU, at
   least its GPUs for --rate, at least its end-to-end latency for the latency objective; infeasible where that one is.
Prints one row per check and, per problem, the rounds and what holding the limits cost; exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from typing import Any

from benchmarks.promises.checks import PLANNED, Tally, evaluate_argv
from benchmarks.promises.problems import opt, problem, run, without
from shardplan.hardware.measured_error import MEASURED_ERROR_FILE

FIGURES = json.loads(MEASURED_ERROR_FILE.read_text(encoding="utf-8"))


def quoted_over(plan: dict[str, Any], mode: str, engine: str, given: dict[str, float | None]) -> list[str]:
    """The limits given that ``plan``'s TTFT and TPOT break, off as the median run of its band (else of all runs)."""
    figures = FIGURES[mode][engine]
    in_flight = plan["metrics"]["batch"]
    holding = [b for b in figures["bands"] if b["low"] <= in_flight and (b["high"] is None or in_flight <= b["high"])]
    band = holding[0] if holding else figures
    over = []
    for key, metric in (("ttft_ms", "ttft"), ("tpot_ms", "tpot")):
        limit = given[key]
        if limit is not None and round(plan["metrics"][key] / (1 + band[metric]["median"]), 3) > limit:
            over.append(key)
    return over


def cost(plan: dict[str, Any], args: list[str]) -> float:
    """The objective as a number where larger is better: tokens/s per GPU, fewer GPUs, or a shorter e2e."""
    if "--rate" in args:
        return -float(plan["num_gpus"])
    if opt(args, "--objective") == "latency":
        return -float(plan["metrics"]["e2e_ms"])
    return float(plan["metrics"]["output_tokens_per_s_per_gpu"])


def kept(held: float, predicted: float) -> float:
    """The share of the objective the plan held at the median error keeps of the plan as predicted: tokens/s per GPU
    held / predicted; GPUs or e2e (costs negated, larger is better) predicted / held. 1 where nothing changed."""
    if held == predicted:
        return 1.0
    return held / predicted if predicted > 0 else predicted / held


def modes_of(data: dict[str, Any], args: list[str]) -> dict[str, dict[str, Any]]:
    serving = opt(args, "--serving") or "colocated"
    if serving == "auto":
        return {m: p for m, p in data["modes"].items() if p.get("status") in PLANNED}
    return {serving: data} if data.get("status") in PLANNED else {}


def one(t: Tally, index: int, args: list[str], rows: list[dict[str, Any]]) -> None:
    where = {"i": index, "argv": "shardplan solve " + " ".join(args) + " --limits-at median-error"}
    started = time.monotonic()
    code0, out0, _ = run(["solve", *args, "--json"])
    predicted_s = time.monotonic() - started
    started = time.monotonic()
    code, out, err = run(["solve", *args, "--limits-at", "median-error", "--json"])
    held_s = time.monotonic() - started
    if code0 != 0 or code != 0:
        t.check("4 infeasible where the plan as predicted is", code0 == 0 or code != 0, where, f"exit {code0}, {code}")
        rows.append({"i": index, "exits": (code0, code)})
        return
    engine = opt(args, "--engine") or "vllm"
    given = {"ttft_ms": float(x) if (x := opt(args, "--ttft-ms")) else None,
             "tpot_ms": float(x) if (x := opt(args, "--tpot-ms")) else None}
    before, after = modes_of(json.loads(out0), args), modes_of(json.loads(out), args)
    for mode, plan in after.items():
        here = {**where, "mode": mode}
        found = plan["limits_at"]
        over = quoted_over(plan, mode, engine, given)
        t.check("1 meets the limits given at the median error", not over or bool(found["stopped"]), here, str(over))
        held, m = found["held"], plan["metrics"]
        bad = [k for k in ("ttft_ms", "tpot_ms") if given[k] is not None
               and not (m[k] <= held[k] + 1e-6 and held[k] <= given[k])]
        t.check("2 predictions within the limits held, held within given", not bad and found["given"] == given, here,
                f"{bad} {m['ttft_ms']} {m['tpot_ms']} {held}")
        base = without(args, "--serving", "--rate", "--objective", "--ttft-ms", "--tpot-ms")
        limits = [x for k in ("ttft_ms", "tpot_ms") if held[k] is not None for x in (f"--{k.replace('_', '-')}",
                                                                                       repr(held[k]))]
        ecode, eout, eerr = run(evaluate_argv([*base, *limits], plan, mode == "disagg"))
        ev = json.loads(eout) if eout.startswith("{") else {}
        same = {k: v for k, v in m.items() if k in ev.get("metrics", {}) and ev["metrics"][k] != v}
        t.check("3 evaluate under the limits held: same metrics, no violation",
                ecode == 0 and not same and ev.get("violations") == [], here, f"exit {ecode} {same} {eerr[-200:]}")
        if mode in before:
            t.check("4 no better than the plan as predicted", cost(plan, args) <= cost(before[mode], args) + 1e-9,
                    here, f"{cost(plan, args)} vs {cost(before[mode], args)}")
            rows.append({"i": index, "mode": mode, "rounds": found["rounds"], "stopped": bool(found["stopped"]),
                         "batch_cap": found["batch_cap"],
                         "kept": kept(cost(plan, args), cost(before[mode], args)),
                         "was_over": bool(before[mode]["measured_error"]["over_limit"]),
                         "time": (predicted_s, held_s)})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.limits_at", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=20261207)
    parser.add_argument("--count", type=int, default=40, help="problems with a limit to solve")
    args = parser.parse_args(argv)
    rng, tally, rows, started = random.Random(args.seed), Tally(), [], time.monotonic()
    index = 0
    while index < args.count:
        argv_one = problem(rng)
        if "--ttft-ms" not in argv_one and "--tpot-ms" not in argv_one:
            continue
        one(tally, index, argv_one, rows)
        index += 1
        print(f"{index}/{args.count} {time.monotonic() - started:,.0f} s  {' '.join(argv_one)}", file=sys.stderr,
              flush=True)
    print(f"{args.count} problems with a limit, seed {args.seed}, {time.monotonic() - started:,.0f} s")
    print("| check | passed | failed |\n|---|---:|---:|")
    for name, (ok, bad) in sorted(tally.counts.items()):
        print(f"| {name} | {ok} | {bad} |")
    planned = [r for r in rows if "mode" in r]
    for mode in ("colocated", "disagg"):
        mine = [r for r in planned if r["mode"] == mode]
        if not mine:
            continue
        over = [r for r in mine if r["was_over"]]
        met = [r["kept"] for r in over if not r["stopped"]]
        print(f"{mode}: {len(mine)} plans; {len(over)} over a limit at the median error as predicted, of which "
              f"{len(met)} now meet the limits and {len(over) - len(met)} had their rounds stopped; rounds "
              f"{dict(sorted((k, sum(1 for r in mine if r['rounds'] == k)) for k in {r['rounds'] for r in mine}))}; "
              f"objective kept by those that now meet them, median {statistics.median(met) if met else 1.0:.3f} "
              f"(least {min(met, default=1.0):.3f}); a band's capped plan won in "
              f"{sum(r['batch_cap'] is not None for r in mine)}")
    times = [r["time"] for r in planned]
    if times:
        print(f"wall time per problem, median: as predicted {statistics.median(a for a, _ in times):.1f} s, held "
              f"{statistics.median(b for _, b in times):.1f} s")
    exits = [r["exits"] for r in rows if "exits" in r]
    print(f"no plan (exit as predicted, held): {exits}")
    for row in rows:  # each plan held at the median error, for the reader who wants the cases behind the medians
        print(json.dumps({k: v for k, v in row.items() if k != "time"}))
    for failure in tally.failures:
        print(json.dumps(failure))
    return 1 if tally.failures else 0


if __name__ == "__main__":
    sys.exit(main())
