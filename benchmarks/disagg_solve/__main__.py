"""Issue 15's speed and rate questions, measured once (never in a loop; the machine is shared).

- speed (acceptance 5, whole process): ``shardplan solve --serving auto`` on 16 and 512 GPUs, and
  ``shardplan validate`` of the DAG of a 64-GPU disaggregated plan, each a fresh process timed by wall
  clock (CPU time of the children printed too: other sessions share the two cores);
- rate (acceptance 3): ``--rate 20 --ttft-ms 2000 --tpot-ms 50`` for Llama-3.1-70B on 8x8xH200, the
  disaggregated search against brute force over the same candidates.

Run: ``python -m benchmarks.disagg_solve [speed|rate]``.
"""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
import time

from shardplan.solver.cli.inputs import ProblemArgs, build_problem
from shardplan.solver.cost.disagg import resolve_profile
from shardplan.solver.disagg import brute
from shardplan.solver.disagg.search import build_pools, fewest_gpus, target_units
from shardplan.solver.optimise import Deadline

ASKED = ["--isl", "4000", "--osl", "500", "--ttft-ms", "2000", "--tpot-ms", "50"]


def timed(argv: list[str]) -> tuple[float, float, int]:
    """(wall s, children's CPU s, exit code) of one shardplan process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "shardplan.solver.cli", *argv], capture_output=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.returncode


def speed() -> None:
    cases = {
        "auto, qwen3-235b-a22b, 2x8xH200 (16 GPUs)": ["--model", "qwen3-235b-a22b", "--cluster", "2x8xH200"],
        "auto, qwen3-235b-a22b, 64x8xH200 (512 GPUs)": ["--model", "qwen3-235b-a22b", "--cluster", "64x8xH200"],
    }
    for name, argv in cases.items():
        wall, cpu, code = timed(["solve", "--serving", "auto", *argv, *ASKED, "--json"])
        print(f"{name}: {wall:.1f} s wall, {cpu:.1f} s CPU, exit {code}")
    with tempfile.TemporaryDirectory() as tmp:
        dag = os.path.join(tmp, "dag.json")
        pools = ["--prefill", "workers=4,tp=8", "--decode", "workers=4,attn_dp=8", "--batch", "512"]
        timed(["evaluate", "--serving", "disagg", "--model", "qwen3-235b-a22b", "--cluster", "8x8xH200",
               *ASKED, *pools, "--dag", dag])
        wall, cpu, code = timed(["validate", dag])
        print(f"validate the DAG of a 64-GPU disaggregated plan: {wall:.1f} s wall, {cpu:.1f} s CPU, exit {code}")


def rate() -> None:
    problem = build_problem(ProblemArgs(model="llama-3.1-70b", cluster="8x8xH200", isl=4000, osl=500,
                                        ttft_ms=2000, tpot_ms=50, objective="throughput"))
    pools = build_pools(problem, resolve_profile(problem))
    start = time.perf_counter()
    found = fewest_gpus(pools, 20.0, Deadline(None))
    solved_s = time.perf_counter() - start
    start = time.perf_counter()
    best = brute.fewest_gpus(pools, target_units(20.0))
    brute_s = time.perf_counter() - start
    print(f"candidates: {len(pools.prefill)} prefill, {len(pools.decode)} decode; "
          f"choices {sum(1 for _ in brute.choices(pools)):,}")
    print(f"search: {pools.gpus(found.choice) if found.choice else None} GPUs ({solved_s:.1f} s, "
          f"{found.proposals} proposals); brute force: {pools.gpus(best[0]) if best else None} GPUs ({brute_s:.1f} s)")


if __name__ == "__main__":
    {"speed": speed, "rate": rate}[sys.argv[1] if len(sys.argv) > 1 else "speed"]()
