"""Issue 12's agreement matrix: 30 scenarios, 1 to 4,096 GPUs, dense and MoE, both objectives, with and
without TTFT/TPOT limits and memory caps.

Two checks per scenario, each against something the solver does not share:

- ``agreement``: ``solve`` against the brute force (``Oracle.optimum``: every layout the rules allow x
  every integer batch 1 .. attn_dp x the engine's limit, priced as evaluate prices it, boundaries by an
  exact programme over layer prefixes). Exact: integer ns for
  latency, the tokens/e2e ratio cross-multiplied for throughput. Brute force has to finish at 4,096
  GPUs, so the spaces are honest but bounded: small models, or an engine batch limit (``max_batch``)
  that keeps the integer batches few. No degree is pinned here.
- ``pinned``: ``solve`` with every degree and boundary of its own plan pinned, against ``evaluate``
  of that layout at every integer batch the engine's limit allows (attn_dp x max_batch sequences per
  replica), keeping those ``evaluate`` finds no violation in: the best of them must be solve's batch and
  tokens/s (latency: the given batch and its e2e).
"""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

from shardplan.models import InfeasibleError
from shardplan.rules.catalog import check_plan, errors_of
from shardplan.rules.layout import Layout
from shardplan.rules.plan import Plan
from shardplan.rules.problem import Objective, Problem
from shardplan.solver.cli.inputs import ProblemArgs, build_problem
from shardplan.solver.cost.evaluate import resolve_profile
from shardplan.solver.optimise import solve
from shardplan.solver.oracle import Candidate, Oracle
from shardplan.solver.placement.plan import place_and_price
from shardplan.solver.space import BatchOption, SearchSpace
from shardplan.solver.tables import build_tables

# (label, ProblemArgs fields). GPU counts 1 .. 4,096; "tp"/"ms" limits and memory caps in about half.
MATRIX: list[dict[str, Any]] = [
    dict(model="llama-3.1-8b", cluster="1xH100", objective="latency"),
    dict(model="llama-3.1-8b", cluster="1xH100", objective="throughput", max_batch=256),
    dict(model="llama-3.1-8b", cluster="2xH100", objective="throughput", tpot_ms=15.0, max_batch=128),
    dict(model="mistral-7b", cluster="4xH100", objective="latency", ttft_ms=100.0),
    dict(model="qwen3-30b-a3b", cluster="8xH100", objective="throughput", max_batch=64),
    dict(model="mixtral-8x7b", cluster="8xH100", objective="latency", tpot_ms=10.0),
    dict(model="llama-3.1-70b", cluster="8xH100", objective="throughput", mem_cap_gib=60.0, ttft_ms=2000.0,
         max_batch=64),
    dict(model="gpt-oss-120b", cluster="8xH200", objective="latency", batch=16),
    dict(model="llama-3.1-8b", cluster="2x8xH100", objective="throughput", ttft_ms=300.0, tpot_ms=20.0, max_batch=64),
    dict(model="qwen3-30b-a3b", cluster="2x8xH100", objective="latency"),
    dict(model="llama-3.1-70b", cluster="4x8xH100", objective="latency", tpot_ms=20.0),
    dict(model="mixtral-8x7b", cluster="4x8xH100", objective="throughput", max_batch=32),
    dict(model="qwen3-32b", cluster="8x8xH100", objective="throughput", tpot_ms=30.0, max_batch=32),
    dict(model="deepseek-v3", cluster="8x8xH200", objective="latency"),
    dict(model="llama-3.1-8b", cluster="16x8xH100", objective="throughput", mem_cap_gib=30.0, max_batch=32),
    dict(model="gpt-oss-120b", cluster="16x8xH100", objective="throughput", ttft_ms=500.0, max_batch=32),
    dict(model="llama-3.1-70b", cluster="32x8xH100", objective="throughput", max_batch=32),
    dict(model="qwen3-30b-a3b", cluster="32x8xH200", objective="latency", batch=8, tpot_ms=30.0),
    dict(model="mixtral-8x7b", cluster="64x8xH100", objective="throughput", tpot_ms=25.0, max_batch=16),
    dict(model="llama-3.1-8b", cluster="64x8xH100", objective="latency", ttft_ms=80.0, mem_cap_gib=40.0),
    dict(model="qwen3-235b-a22b", cluster="64x8xH200", objective="latency"),
    dict(model="llama-3.1-70b", cluster="128x8xH100", objective="latency", batch=32, tpot_ms=40.0),
    dict(model="gpt-oss-120b", cluster="128x8xH200", objective="throughput", max_batch=16),
    dict(model="llama-3.1-8b", cluster="256x8xH100", objective="throughput", tpot_ms=12.0, max_batch=32),
    dict(model="mixtral-8x7b", cluster="256x8xH100", objective="latency"),
    dict(model="llama-3.1-8b", cluster="512x8xH100", objective="throughput", max_batch=16),
    dict(model="llama-3.1-70b", cluster="512x8xH100", objective="throughput", max_batch=64),
    dict(model="mixtral-8x7b", cluster="512x8xH100", objective="throughput", ttft_ms=1000.0, tpot_ms=30.0,
         max_batch=32),
    dict(model="qwen3-30b-a3b", cluster="512x8xH200", objective="latency", mem_cap_gib=50.0),
    dict(model="deepseek-v3", cluster="512x8xH200", objective="throughput", tpot_ms=50.0, max_batch=8),
]


def scenario_id(s: dict[str, Any]) -> str:
    return "-".join(f"{k}={v}" if k not in ("model", "cluster", "objective") else str(v) for k, v in s.items())


def problem_of(scenario: dict[str, Any], pins: dict[str, Any] | None = None) -> Problem:
    return build_problem(ProblemArgs(**scenario, pins=pins or {}, allow=_allow_for(pins)))


def _allow_for(pins: dict[str, Any] | None) -> tuple[str, ...]:
    return ("expert-tp",) if pins and pins.get("expert_tp", 1) > 1 else ()


class Timeout(Exception):
    pass


def _alarm(_signum: int, _frame: Any) -> None:
    raise Timeout


def brute_force(oracle: Oracle, budget_s: float | None = None) -> Candidate | None:
    """The oracle's exact optimum (None: nothing is feasible); Timeout past ``budget_s`` (whole seconds)."""
    if budget_s:
        signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(max(1, round(budget_s)))
    try:
        return oracle.optimum()
    finally:
        if budget_s:
            signal.alarm(0)


def same_optimum(oracle: Oracle, plan: Plan, best: Candidate) -> bool:
    """Exact: latency in integer ns; throughput as the ratio tokens / e2e_ns cross-multiplied, the plan's
    layout scored by the oracle on the same integer tables (its batch and boundaries as the plan has them)."""
    if oracle.problem.objective is Objective.LATENCY:
        return plan.objective_value == best.e2e_ns
    ours = oracle_score(oracle, plan.layout)
    return ours is not None and ours.tokens * best.e2e_ns == best.tokens * ours.e2e_ns


def oracle_score(oracle: Oracle, layout: Layout) -> Candidate | None:
    """The oracle's candidate for exactly ``layout`` (a decided batch: any integer, as evaluate runs it);
    None when the layout is outside its space or breaks memory or a limit there."""
    S = layout.pp
    shape = next((o for o in oracle.shapes() if (o.tp, o.sp, o.attn_dp, o.expert_tp)
                  == (layout.tp, layout.sp, layout.attn_dp, layout.expert_tp)), None)
    if shape is None or not 1 <= layout.batch <= oracle.space.replica_batch_limit(layout.attn_dp):
        return None
    option = next(oracle.options(shape, S)) if not oracle.space.decides_batch else (
        BatchOption.for_batch(S, layout.attn_dp, layout.batch))
    bounds = tuple(a for a, _ in layout.stages) + (layout.stages[-1][1],)
    scored = oracle._score_fixed(shape, option, S, bounds)
    if not scored:
        return None
    dmax, pmax, _ = scored[0]
    cand, load = oracle.evaluate_combo(shape, option, S, layout.dp, bounds, dmax, pmax)
    return cand if oracle.within_limits(load) else None


def oracle_of(problem: Problem) -> Oracle:
    return Oracle(build_tables(problem, SearchSpace(problem, resolve_profile(problem))))


def pins_of(layout: Layout) -> dict[str, Any]:
    """Every degree and boundary of ``layout``, as the CLI's pin flags carry them."""
    pins: dict[str, Any] = dict(dp=layout.dp, pp=layout.pp, tp=layout.tp, sp=layout.sp, attn_dp=layout.attn_dp,
                                stages=layout.stages)
    if layout.expert_tp > 1:
        pins["expert_tp"] = layout.expert_tp
    return pins


def pin_flags(layout: Layout, model_is_moe: bool) -> list[str]:
    """``pins_of`` as command-line flags (``--ep`` too for an MoE model)."""
    flags = [f"--{k.replace('_', '-')}" for k in ("dp", "pp", "tp", "sp", "attn_dp")]
    values = [layout.dp, layout.pp, layout.tp, layout.sp, layout.attn_dp]
    out = [x for f, v in zip(flags, values, strict=True) for x in (f, str(v))]
    out += ["--stages", ",".join(f"{a}:{b}" for a, b in layout.stages)]
    if model_is_moe:
        out += ["--ep", str(layout.ep)]
    if layout.expert_tp > 1:
        out += ["--expert-tp", str(layout.expert_tp), "--allow", "expert-tp"]
    return out


@dataclass(frozen=True)
class Judged:
    """``evaluate`` of one layout at one batch: its prediction's figures and whether it breaks anything."""

    batch: int
    e2e_ns: int
    tokens_per_s: float
    violations: tuple[str, ...]


def judge(problem: Problem, layout: Layout) -> Judged:
    """What ``shardplan evaluate`` computes for ``layout``: experts placed, priced, every rule checked."""
    placed, prediction, experts = place_and_price(problem, layout)
    plan = Plan(problem=problem, layout=placed, prediction=prediction, status="evaluated", experts=experts)
    m = prediction.metrics
    return Judged(layout.batch, round(m.e2e_ms * 1e6), m.output_tokens_per_s,
                  tuple(sorted({d.rule for d in errors_of(check_plan(plan))})))


def engine_batches(problem: Problem, layout: Layout) -> range:
    """Sequences per replica the engine can run: its limit per attention group, times the groups."""
    limit = problem.max_batch or resolve_profile(problem).max_batch
    return range(1, layout.attn_dp * limit + 1)


def evaluate_best(problem: Problem, layout: Layout) -> Judged | None:
    """``evaluate``'s best batch for ``layout``: throughput, the most tokens/s over every batch the
    engine allows that breaks no rule or limit (ties: the smaller batch); latency, the problem's batch."""
    if problem.objective is Objective.LATENCY or problem.workload.batch is not None:
        one = judge(problem, layout.model_copy(update={"batch": problem.workload.batch or 1}))
        return None if one.violations else one
    best: Judged | None = None
    for b in engine_batches(problem, layout):
        j = judge(problem, layout.model_copy(update={"batch": b}))
        if "MEM-001" in j.violations:  # memory only grows with the batch: nothing larger fits
            break
        if not j.violations and (best is None or j.tokens_per_s > best.tokens_per_s):
            best = j
    return best


def problem_flags(scenario: dict[str, Any]) -> list[str]:
    """The scenario as ``shardplan`` command-line flags."""
    return [x for k, v in scenario.items() for x in (f"--{k.replace('_', '-')}", str(v))]


def cli_pinned(scenario: dict[str, Any], layout: Layout, model_is_moe: bool, batch: int) -> bool:
    """The same check through the console script, as a user runs it: ``shardplan solve`` with every pin and
    ``shardplan evaluate`` of that layout at evaluate's best ``batch`` print the same batch and figures
    in their JSON, and evaluate finds no violation."""
    flags = problem_flags(scenario) + pin_flags(layout, model_is_moe) + ["--json"]
    solved = _run_json(["solve", *flags])
    evaluated = _run_json(["evaluate", *flags, *([] if "batch" in scenario else ["--batch", str(batch)])])
    keys = ("batch", "e2e_ms", "output_tokens_per_s", "ttft_ms", "tpot_ms")
    return not evaluated["violations"] and all(solved["metrics"][k] == evaluated["metrics"][k] for k in keys) and (
        solved["degrees"] == evaluated["degrees"] and solved["stages"] == evaluated["stages"])


def _run_json(args: list[str]) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "shardplan.solver.console", *args], capture_output=True, text=True,
                          check=False)
    if not done.stdout.strip():
        return {"violations": [done.stderr.strip()], "metrics": {}, "degrees": None, "stages": None}
    data: dict[str, Any] = json.loads(done.stdout)
    data.setdefault("violations", [])
    return data


@dataclass(frozen=True)
class Row:
    scenario: dict[str, Any]
    gpus: int
    status: str
    value: float
    unit: str
    solve_s: float
    brute: Candidate | None
    brute_s: float | None  # None: timed out
    agree: bool | None
    pinned_status: str
    pinned_batch: int | None
    evaluate_batch: int | None
    pinned_agree: bool | None
    cli_agree: bool | None  # None: not run
    pinned_s: float
    layout: Layout | None

    @property
    def scenario_osl(self) -> int:
        return int(self.scenario.get("osl", 256))


def run_scenario(scenario: dict[str, Any], budget_s: float | None = None, cli: bool = True) -> Row:
    """Both checks of one scenario (``cli``: the pinned check through the console script as well)."""
    p = problem_of(scenario)
    latency = p.objective is Objective.LATENCY
    started = time.perf_counter()
    try:
        plan: Plan | None = solve(p)
    except InfeasibleError:  # a result too: the brute force must find nothing either
        plan = None
    solve_s = time.perf_counter() - started
    started = time.perf_counter()
    brute_s: float | None
    try:
        oracle = oracle_of(p)
        best = brute_force(oracle, budget_s)
        brute_s = time.perf_counter() - started
        agree: bool | None = (best is None) if plan is None else (best is not None and same_optimum(oracle, plan, best))
    except Timeout:
        best, brute_s, agree = None, None, None
    if plan is None:
        return Row(scenario, p.cluster.num_gpus, "infeasible", math.nan, "ms" if latency else "tok/s", solve_s, best,
                   brute_s, agree, "-", None, None, None, None, 0.0, None)
    m = plan.prediction.metrics
    value, unit = (m.e2e_ms, "ms") if latency else (m.output_tokens_per_s, "tok/s")
    started = time.perf_counter()
    pinned = solve(problem_of(scenario, pins_of(plan.layout)))
    judged = evaluate_best(p, plan.layout)
    pinned_agree = judged is not None and same_as_evaluated(pinned, judged, latency) and (
        bare(pinned.layout) == bare(plan.layout))
    cli_agree = cli_pinned(scenario, plan.layout, p.model.is_moe, judged.batch) if cli and judged else None
    return Row(scenario, p.cluster.num_gpus, plan.status, value, unit, solve_s, best, brute_s, agree,
               pinned.status, pinned.layout.batch, judged.batch if judged else None, pinned_agree, cli_agree,
               time.perf_counter() - started, plan.layout)


def same_as_evaluated(pinned: Plan, judged: Judged, latency: bool) -> bool:
    """The pinned plan's batch and objective are evaluate's best (latency to the ns, tokens/s to the float)."""
    m = pinned.prediction.metrics
    same_value = round(m.e2e_ms * 1e6) == judged.e2e_ns if latency else m.output_tokens_per_s == judged.tokens_per_s
    return pinned.layout.batch == judged.batch and same_value


def bare(layout: Layout) -> Layout:
    """The layout without its expert-load factors (placement detail, not a decision the pins carry)."""
    return layout.model_copy(update={"moe_load_factor": None})


# The pinned check on layouts the matrix's optima do not reach: pipelines and attention groups whose
# batch the engine's limit or an SLA cuts between multiples of S x attn_dp. (scenario, pins) pairs.
PROBES: list[tuple[dict[str, Any], dict[str, Any]]] = [
    (dict(model="llama-3.1-8b", cluster="4xH100", objective="throughput", max_batch=45),
     dict(dp=1, pp=3, tp=1, sp=1, attn_dp=1)),
    (dict(model="llama-3.1-70b", cluster="8xH100", objective="throughput", max_batch=63),
     dict(dp=1, pp=2, tp=4, sp=1, attn_dp=1)),
    (dict(model="mixtral-8x7b", cluster="8xH100", objective="throughput", max_batch=21, tpot_ms=40.0),
     dict(dp=1, pp=2, tp=1, sp=1, attn_dp=4)),
    (dict(model="mixtral-8x7b", cluster="8xH100", objective="throughput", max_batch=64, tpot_ms=20.0),
     dict(dp=1, pp=1, tp=1, sp=1, attn_dp=8)),
]


@dataclass(frozen=True)
class Probe:
    layout: Layout
    tokens_per_s: float
    evaluated: Judged | None
    agree: bool


def run_probe(scenario: dict[str, Any], pins: dict[str, Any]) -> Probe:
    """``solve`` with ``pins`` (its boundaries then pinned too) against ``evaluate``'s best batch of that layout."""
    first = solve(problem_of(scenario, pins))
    pinned = solve(problem_of(scenario, pins_of(first.layout)))
    judged = evaluate_best(problem_of(scenario), bare(pinned.layout))
    agree = judged is not None and same_as_evaluated(pinned, judged, latency=False)
    return Probe(bare(pinned.layout), pinned.prediction.metrics.output_tokens_per_s, judged, agree)
