"""Do plans keep their promises? Random problems, each plan's numbers checked by an independent path.

    python -m benchmarks.promises                      # 160 problems, seed 20261129 (about 30 min of one core)
    python -m benchmarks.promises --count 20 --seed 7 --failures fails.jsonl

Prints one row per check (passed, failed) and each failure with its command line; exits 1 on any failure.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from .checks import Tally, one_problem
from .problems import problems, run


def presets() -> dict[str, tuple[int, int]]:
    """Each preset alias's layers and KV bytes per token, as ``shardplan models --json`` lists them."""
    out: dict[str, tuple[int, int]] = {}
    for model in json.loads(run(["models", "--json"])[1]):
        for name in [model["id"], *model["aliases"]]:
            out[name] = (model["layers"], model["kv_bytes_per_token"])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.promises", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=20261129)
    parser.add_argument("--count", type=int, default=160)
    parser.add_argument("--failures", help="write every failure as a JSON line here")
    args = parser.parse_args(argv)
    tally, known, started = Tally(), presets(), time.monotonic()
    for index, problem in enumerate(problems(args.seed, args.count)):
        one_problem(tally, index, problem, known)
        print(f"{index + 1}/{args.count} {time.monotonic() - started:,.0f} s  {' '.join(problem)}",
              file=sys.stderr, flush=True)
    print(f"{args.count} problems, seed {args.seed}, {time.monotonic() - started:,.0f} s")
    print(f"{'check':<48} {'pass':>5} {'fail':>5}")
    for name in sorted(tally.counts):
        passed, failed = tally.counts[name]
        print(f"{name:<48} {passed:>5} {failed:>5}")
    for failure in tally.failures:
        print(f"FAIL {failure['check']}: {failure['detail']}\n  {failure['argv']}")
    if args.failures:
        with open(args.failures, "w") as f:
            f.writelines(json.dumps(x) + "\n" for x in tally.failures)
    return 1 if tally.failures else 0


if __name__ == "__main__":
    sys.exit(main())
