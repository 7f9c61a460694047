"""CP-SAT against a plain enumeration of the same space and the same integer costs.

    python -m benchmarks.solve_vs_bruteforce            # the scenario matrix + process timings
    python -m benchmarks.solve_vs_bruteforce --quick    # small scenarios only
    python -m benchmarks.solve_vs_bruteforce --budget 30  # brute-force seconds per scenario
    python -m benchmarks.solve_vs_bruteforce --processes-only  # the whole-process timings alone
    python -m benchmarks.solve_vs_bruteforce --matrix   # issue 12's 30 scenarios, 1 to 4,096 GPUs (matrix.py)

For each scenario: CP-SAT's status, objective and time; the brute force's optimum and time (or
"timeout" past the budget); whether they agree exactly; the model's size. Then the acceptance
timings: the whole ``shardplan solve`` process (the console script's module), median of 5 runs, with
the median CPU time the process used (user + system: on a shared machine the wall clock also counts
the time other jobs held the cores) and the load average when the runs began.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

from shardplan.rules.problem import Objective
from shardplan.solver.cli.inputs import ProblemArgs, build_problem
from shardplan.solver.cost.evaluate import resolve_profile
from shardplan.solver.encode import build_model
from shardplan.solver.optimise import solve
from shardplan.solver.oracle import Oracle
from shardplan.solver.space import SearchSpace
from shardplan.solver.tables import build_tables

from .matrix import MATRIX, PROBES, bare, run_probe, run_scenario, scenario_id

MODELS = ["llama-3.1-8b", "llama-3.1-70b", "mixtral-8x7b", "qwen3-235b-a22b", "deepseek-v3"]
CLUSTERS = ["8xH100", "4x8xH200", "64x8xH200", "512x8xH200"]
QUICK_CLUSTERS = ["8xH100", "4x8xH200"]
OBJECTIVES = ["latency", "throughput"]

PROCESS_CASES = [
    ("Llama-3.1-70B 8xH100 latency", ["--model", "llama-3.1-70b", "--cluster", "8xH100"], 1.0),
    ("Llama-3.1-70B 8xH100 throughput",
     ["--model", "llama-3.1-70b", "--cluster", "8xH100", "--objective", "throughput"], 1.0),
    ("DeepSeek-V3 4x8xH200 throughput (uneven stages, batch decided)",
     ["--model", "deepseek-v3", "--cluster", "4x8xH200", "--objective", "throughput"], 2.0),
    ("DeepSeek-V3 512x8xH200 latency", ["--model", "deepseek-v3", "--cluster", "512x8xH200"], 5.0),
    ("DeepSeek-V3 512x8xH200 throughput",
     ["--model", "deepseek-v3", "--cluster", "512x8xH200", "--objective", "throughput"], 5.0),
]


class Timeout(Exception):
    pass


def brute_force(problem, budget_s: float):
    """The oracle's exact optimum, or Timeout past the budget."""
    started = time.perf_counter()
    oracle = Oracle(build_tables(problem, SearchSpace(problem, resolve_profile(problem))))
    best, visited = None, 0
    for cand in oracle.feasible(exact=True):
        visited += 1
        if cand.better_than(best, problem.objective):
            best = cand
        if time.perf_counter() - started > budget_s:
            raise Timeout(visited)
    return best, time.perf_counter() - started, visited


def value_of(problem, cand) -> float:
    if problem.objective is Objective.LATENCY:
        return cand.e2e_ns / 1e6
    return cand.tokens * problem.workload.osl * 1e9 / cand.e2e_ns


def run_matrix(clusters: list[str], budget: float) -> None:
    header = f"{'model':16} {'cluster':11} {'objective':10} {'status':8} {'objective value':>16} {'cp-sat s':>8} " \
             f"{'brute s':>8} {'layouts':>7} {'ratio':>6} {'agree':>5} {'vars':>6} {'cons':>6}"
    print(header)
    print("-" * len(header))
    for model in MODELS:
        for cluster in clusters:
            for objective in OBJECTIVES:
                problem = build_problem(ProblemArgs(model=model, cluster=cluster, objective=objective))
                started = time.perf_counter()
                try:
                    plan = solve(problem)
                    status = plan.status
                    m = plan.prediction.metrics
                    value = m.e2e_ms if objective == "latency" else m.output_tokens_per_s
                except Exception as exc:  # an infeasible scenario is a result too
                    status, value = type(exc).__name__[:8], float("nan")
                cp_time = time.perf_counter() - started
                proto = build_model(problem).enc.cp.Proto()
                size = (len(proto.variables), len(proto.constraints))
                try:
                    best, bf_time, visited = brute_force(problem, budget)
                    if best is None:  # both must find the problem infeasible
                        agree = "yes" if status.startswith("Infeas") else "NO"
                    else:
                        bf_value = value_of(problem, best)
                        agree = "yes" if abs(bf_value - value) <= 1e-9 * max(1.0, abs(value)) else "NO"
                    bf_cell, ratio = f"{bf_time:8.2f}", f"{bf_time / cp_time:6.1f}"
                except Timeout as t:
                    bf_cell, ratio, agree, visited = " timeout", "     -", "    -", t.args[0]
                unit = "ms" if objective == "latency" else "tok/s"
                print(
                    f"{model:16} {cluster:11} {objective:10} {status:8} {value:13.1f} {unit:>2} {cp_time:8.2f} "
                    f"{bf_cell} {visited:7d} {ratio} {agree:>5} {size[0]:6d} {size[1]:6d}",
                    flush=True,
                )


def run_agreement_matrix(budget: float) -> None:
    """Issue 12's 30 scenarios: solve against brute force, and solve pinned against evaluate's best batch."""
    print(f"{'#':>2} {'gpus':>5} {'scenario':72} {'status':8} {'solve value':>17} {'solve s':>7} {'brute value':>17} "
          f"{'brute s':>7} {'agree':>5} | "
          f"{'pinned':7} {'batch':>6} {'eval b':>6} {'agree':>5} {'cli':>4} {'pin+eval s':>10}")
    agreed = pinned_agreed = feasible = 0
    for i, scenario in enumerate(MATRIX, 1):
        row = run_scenario(scenario, budget)
        if row.brute is None:
            brute_cell = "timeout" if row.brute_s is None else "infeasible"
        elif row.unit == "ms":
            brute_cell = f"{row.brute.e2e_ns / 1e6:14.1f} ms"
        else:
            brute_cell = f"{row.brute.tokens * row.scenario_osl * 1e9 / row.brute.e2e_ns:11.0f} tok/s"
        agree = "-" if row.agree is None else ("yes" if row.agree else "NO")
        pinned = "-" if row.layout is None else ("yes" if row.pinned_agree else "NO")  # infeasible: no layout
        cli = "-" if row.cli_agree is None else ("yes" if row.cli_agree else "NO")
        agreed += bool(row.agree)
        pinned_agreed += bool(row.pinned_agree and row.cli_agree)
        feasible += row.layout is not None
        brute_s = "-" if row.brute_s is None else f"{row.brute_s:.2f}"
        print(f"{i:2d} {row.gpus:5d} {scenario_id(scenario)[:72]:72} {row.status:8} {row.value:11.1f} {row.unit:>5} "
              f"{row.solve_s:7.2f} {brute_cell:>17} {brute_s:>7} {agree:>5} | {row.pinned_status:7} "
              f"{row.pinned_batch or 0:6d} {row.evaluate_batch or 0:6d} {pinned:>5} {cli:>4} {row.pinned_s:10.2f}",
              flush=True)
        if row.layout is not None:
            print(f"   {bare(row.layout)}", flush=True)
    print(f"\nsolve = brute force: {agreed} of {len(MATRIX)}; pinned solve = evaluate's best (in process and "
          f"through the CLI's JSON): {pinned_agreed} of the {feasible} feasible")
    run_pinned_probes()


def run_pinned_probes() -> None:
    """The pinned check on pipelines and attention groups whose best batch is not at the engine's limit."""
    print("\nPinned probes: solve with every degree and boundary pinned against evaluate's best batch")
    print(f"{'scenario':60} {'layout':48} {'solve b':>7} {'tok/s':>9} {'eval b':>6} {'tok/s':>9} {'agree':>5}")
    for scenario, pins in PROBES:
        probe = run_probe(scenario, pins)
        lay, ev = probe.layout, probe.evaluated
        shape = f"dp={lay.dp} pp={lay.pp} tp={lay.tp} attn_dp={lay.attn_dp} stages={list(lay.stages)}"
        print(f"{scenario_id(scenario)[:60]:60} {shape[:48]:48} {lay.batch:7d} {probe.tokens_per_s:9.1f} "
              f"{ev.batch if ev else 0:6d} {ev.tokens_per_s if ev else 0.0:9.1f} {'yes' if probe.agree else 'NO':>5}",
              flush=True)


def run_processes(repeats: int = 5) -> None:
    print("\nWhole `shardplan solve` process, median of", repeats, "runs; load average", os.getloadavg()[0])
    print(f"{'case':66} {'median s':>9} {'cpu s':>6} {'target s':>9}")
    for label, args, target in PROCESS_CASES:
        times, cpu = [], []
        for _ in range(repeats):
            used = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            subprocess.run([sys.executable, "-m", "shardplan.solver.console", "solve", *args, "--json"],
                           check=True, stdout=subprocess.DEVNULL)
            times.append(time.perf_counter() - started)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append(after.ru_utime - used.ru_utime + after.ru_stime - used.ru_stime)
        print(f"{label:66} {statistics.median(times):9.2f} {statistics.median(cpu):6.2f} {target:9.1f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small clusters only")
    parser.add_argument("--budget", type=float, default=60.0, help="brute-force seconds per scenario")
    parser.add_argument("--no-processes", action="store_true", help="skip the whole-process timings")
    parser.add_argument("--matrix", action="store_true",
                        help="issue 12's 30-scenario agreement matrix (1 to 4,096 GPUs) instead")
    parser.add_argument("--processes-only", action="store_true", help="only the whole-process timings")
    args = parser.parse_args()
    if args.matrix:
        run_agreement_matrix(args.budget)
        return
    if not args.processes_only:
        run_matrix(QUICK_CLUSTERS if args.quick else CLUSTERS, args.budget)
    if not args.no_processes:
        run_processes()


if __name__ == "__main__":
    main()
