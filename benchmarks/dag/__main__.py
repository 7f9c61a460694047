"""Execution DAG benchmark: build and validate time, node and edge counts, critical-path error.

Cases: dense and MoE plans from 8 to 4,096 GPUs. Up to 32 GPUs the plans are solved (``solve``);
beyond, solving a 4,096-GPU problem takes minutes, so the layout is given and priced with
``evaluate`` (the DAG only needs a plan). Each plan is built at both detail levels; the table shows
nodes, edges, whether replicas were folded into one node, the best of ``--repeat`` build and
validate times, and the relative error of the prefill and decode critical paths against the plan's
TTFT and TPOT. Targets: DeepSeek-V3 on 4x8xH200 built and validated in <= 1 s (logical) and <= 10 s
(expanded); a 4,096-GPU logical DAG under 100,000 nodes.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field

from shardplan.rules.layout import Layout
from shardplan.rules.plan import Plan
from shardplan.solver.cli.inputs import ProblemArgs, build_problem
from shardplan.solver.cost.evaluate import evaluate
from shardplan.solver.dag import build_dag, check_dag, critical_path_us
from shardplan.solver.optimise import solve


@dataclass(frozen=True)
class Case:
    name: str
    model: str
    cluster: str
    objective: str = "latency"
    layout: dict | None = field(default=None)  # None: solve; else Layout.even(..., **layout)
    slow: bool = False  # skipped by --quick


CASES = (
    Case("Llama-3.1-8B 8xH100 thr", "llama-3.1-8b", "8xH100", "throughput"),
    Case("Mixtral-8x7B 8xH100 thr", "mixtral-8x7b", "8xH100", "throughput"),
    Case("Llama-3.1-70B 4x8xH100 thr", "llama-3.1-70b", "4x8xH100", "throughput"),
    Case("DeepSeek-V3 4x8xH200 lat", "deepseek-v3", "4x8xH200", "latency"),
    Case("DeepSeek-V3 4x8xH200 thr", "deepseek-v3", "4x8xH200", "throughput"),
    Case("Llama-3.1-405B 16x8xH100", "llama-3.1-405b", "16x8xH100", layout=dict(dp=2, pp=8, tp=8, batch=64)),
    Case("DeepSeek-V3 64x8xH200", "deepseek-v3", "64x8xH200", layout=dict(dp=4, pp=4, attn_dp=32, batch=512)),
    Case("Llama-3.1-70B 512x8xH100", "llama-3.1-70b", "512x8xH100", layout=dict(dp=128, pp=4, tp=8, batch=64)),
    Case("DeepSeek-V3 512x8xH200 dp16", "deepseek-v3", "512x8xH200", layout=dict(dp=16, pp=4, attn_dp=64, batch=1024)),
    Case("DeepSeek-V3 512x8xH200 dp1", "deepseek-v3", "512x8xH200", layout=dict(pp=16, tp=8, attn_dp=32, batch=1024),
         slow=True),
)


def make_plan(case: Case) -> Plan:
    problem = build_problem(ProblemArgs(model=case.model, cluster=case.cluster, objective=case.objective))
    if case.layout is None:
        return solve(problem)
    kw = dict(case.layout)
    layout = Layout.even(problem.model.num_layers, kw.pop("pp", 1), **kw)
    return Plan(problem=problem, layout=layout, prediction=evaluate(problem, layout), status="evaluated")


def describe(plan: Plan) -> str:
    d = plan.layout.degrees()
    ep = d["ep"] if plan.problem.model.is_moe else 1
    return f"dp{d['dp']} pp{d['pp']} tp{d['tp']} ag{d['attn_dp']} ep{ep} b{plan.layout.batch}"


def best_of(repeat: int, func):
    best, out = float("inf"), None
    for _ in range(repeat):
        t = time.perf_counter()
        out = func()
        best = min(best, time.perf_counter() - t)
    return best, out


def run(case: Case, detail: str, plan: Plan, repeat: int) -> dict:
    build_s, dag = best_of(repeat, lambda: build_dag(plan, detail))
    check_s, found = best_of(repeat, lambda: check_dag(dag))
    m = plan.prediction.metrics
    return {
        "case": case.name, "gpus": plan.layout.num_gpus, "layout": describe(plan), "detail": detail,
        "nodes": dag.number_of_nodes(), "edges": dag.number_of_edges(), "folded": dag.graph["folded"],
        "build_s": build_s, "check_s": check_s, "violations": len(found),
        "ttft_err": critical_path_us(dag, "prefill") / (plan.prediction.prefill_ms * 1e3) - 1,
        "tpot_err": critical_path_us(dag, "decode") / (m.decode_step_ms * 1e3) - 1,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip the slow case (a 177,000-node expanded DAG)")
    parser.add_argument("--repeat", type=int, default=3, help="best of this many timings for DAGs under 20,000 nodes")
    args = parser.parse_args()
    header = ("case", "GPUs", "layout", "detail", "nodes", "edges", "folded", "build s", "check s", "total s",
              "violations", "TTFT err", "TPOT err")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for case in CASES:
        if args.quick and case.slow:
            continue
        plan = make_plan(case)
        for detail in ("logical", "expanded"):
            small = plan.layout.num_gpus <= 512 or detail == "logical"
            r = run(case, detail, plan, args.repeat if small else 1)
            print(
                f"| {r['case']} | {r['gpus']} | {r['layout']} | {detail} | {r['nodes']:,} | {r['edges']:,} | "
                f"{'yes' if r['folded'] else 'no'} | {r['build_s']:.3f} | {r['check_s']:.3f} | "
                f"{r['build_s'] + r['check_s']:.3f} | {r['violations']} | "
                f"{r['ttft_err']:+.1e} | {r['tpot_err']:+.1e} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
