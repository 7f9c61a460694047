"""Issue 15's speed and rate questions, measured once (never in a loop; the machine is shared).

- speed (acceptance 5, whole process): ``shardplan solve --serving auto`` on 16 and 512 GPUs, and
  ``shardplan validate`` of the DAG of a 64-GPU disaggregated plan, each a fresh process timed by wall
  clock (CPU time of the children printed too: other sessions share the two cores);
- parts: where the time of the disaggregated half goes, in one process (CPU time per phase): the
  candidates priced as far as the pruning needs and the search on those left (what ``solve`` runs),
  against every candidate priced and the search on all of them (what it ran before the pruning);
- engines: the speed question's ``solve --serving auto`` under each engine (vLLM, SGLang, TensorRT-LLM), with
  what the disaggregated half ended with (``optimal``, or ``feasible`` and its gap where the default work limit
  stopped it): acceptance 5 names the default engine, and users run all three;
- rate (acceptance 3): ``--rate 20 --ttft-ms 2000 --tpot-ms 50`` for Llama-3.1-70B on 8x8xH200, the
  disaggregated search against brute force over the same candidates.

Run: ``python -m benchmarks.disagg_solve [speed|parts|engines|rate]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from typing import TypeVar

from shardplan.solver.cli.inputs import ProblemArgs, build_problem
from shardplan.solver.cost import evaluate as cost_evaluate
from shardplan.solver.cost.disagg import decode_step, prefill_step, resolve_profile
from shardplan.solver.disagg import brute
from shardplan.solver.disagg.prune import pruned_pools
from shardplan.solver.disagg.search import build_pools, fewest_gpus, max_throughput, max_throughput_from, target_units
from shardplan.solver.disagg.serving import colocated_throughput, throughput_problem
from shardplan.solver.optimise import Deadline

T = TypeVar("T")
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


ENGINES = ("vllm", "sglang", "trtllm")


def engines() -> None:
    for cluster, gpus in (("2x8xH200", 16), ("64x8xH200", 512)):
        for engine in ENGINES:
            argv = ["solve", "--serving", "auto", "--model", "qwen3-235b-a22b", "--cluster", cluster, *ASKED,
                    "--engine", engine, "--json"]
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "shardplan.solver.cli", *argv], capture_output=True,
                                  check=False)
            wall = time.perf_counter() - start
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            disagg = json.loads(done.stdout)["modes"]["disagg"] if done.returncode == 0 else {}
            gap = f", gap {disagg['gap']:.1%}" if disagg.get("gap") is not None else ""
            print(f"auto, qwen3-235b-a22b, {cluster} ({gpus} GPUs), {engine}: {wall:.1f} s wall, {cpu:.1f} s CPU, "
                  f"exit {done.returncode}, disaggregated {disagg.get('status')}{gap}")


def _cpu(run: Callable[[], T]) -> tuple[float, T]:
    """(CPU s, result) of ``run()``."""
    start = time.process_time()
    out = run()
    return time.process_time() - start, out


def _clear_prices() -> None:
    """Forget memoised worker prices and memory limits, so each phase pays for its own."""
    prefill_step.cache_clear()
    decode_step.cache_clear()
    cost_evaluate._MAX_BATCH.clear()  # max_batch's memo has no public clear


def _parts(cluster: str) -> None:
    problem = throughput_problem(build_problem(ProblemArgs(
        model="qwen3-235b-a22b", cluster=cluster, isl=4000, osl=500, ttft_ms=2000, tpot_ms=50)))
    profile = resolve_profile(problem)
    colocated_s, _ = _cpu(partial(colocated_throughput, problem, None))
    _clear_prices()
    pruned_s, (pools, first) = _cpu(partial(pruned_pools, problem, profile))
    search_s, found = _cpu(partial(max_throughput_from, pools, first, Deadline(None)))
    _clear_prices()
    full_s, full = _cpu(partial(build_pools, problem, profile))
    full_search_s, again = _cpu(partial(max_throughput, full, Deadline(None)))
    assert found.choice is not None and again.choice is not None
    same = (pools.prefill[found.choice.prefill], pools.decode[found.choice.decode], found.choice.x, found.choice.y) \
        == (full.prefill[again.choice.prefill], full.decode[again.choice.decode], again.choice.x, again.choice.y)
    print(f"{cluster}: colocated solve {colocated_s:.2f} s CPU")
    print(f"  pruned: candidates {pruned_s:.2f} s (kept {len(pools.prefill)} prefill of {len(full.prefill)}, "
          f"{len(pools.decode)} decode of {len(full.decode)}), search {search_s:.2f} s, {found.proposals} proposals")
    print(f"  every candidate: pricing {full_s:.2f} s, search {full_search_s:.2f} s, {again.proposals} proposals; "
          f"same deployment: {same}")


def parts() -> None:
    for cluster in ("2x8xH200", "64x8xH200"):
        _parts(cluster)


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
          f"{found.proposals} proposals); brute force: {pools.gpus(best[0]) if best else None} GPUs ({brute_s:.1f} s); "
          f"same deployment: {best is not None and found.choice == best[0]}")


def main() -> None:
    """The question on the command line (``speed`` without one); ``--help`` prints the module's text."""
    questions = {"speed": speed, "parts": parts, "engines": engines, "rate": rate}
    parser = argparse.ArgumentParser(prog="python -m benchmarks.disagg_solve", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("question", nargs="?", choices=sorted(questions), default="speed")
    questions[parser.parse_args().question]()


if __name__ == "__main__":
    main()
