"""Binding constraints, the runner-up, and the HTML report's content (the browser test renders it)."""

from __future__ import annotations

import re

import pytest

from shardplan.solver.cli.inputs import ProblemArgs, build_problem
from shardplan.solver.optimise import solve
from shardplan.solver.outputs.plan_json import plan_dict
from shardplan.solver.outputs.report import (
    binding_constraints,
    enumeration_report,
    metric_text,
    plan_report,
    pools_brief,
    runner_up,
)


def solved(**kw):
    return solve(build_problem(ProblemArgs(**kw)))


def by_name(findings):
    return {f.constraint: f for f in findings}


def test_memory_and_gpu_count_bind_a_throughput_plan():
    plan = solved(model="llama-3.1-8b", cluster="2xH100", objective="throughput")
    found = by_name(binding_constraints(plan))
    assert found["memory"].status == "binds" and "is the limit" in found["memory"].message
    assert found["gpus"].status == "binds"
    assert [f.status for f in binding_constraints(plan)][0] == "binds"  # binding ones first


def test_a_tpot_limit_that_stops_the_batch_binds():
    plan = solved(model="llama-3.1-8b", cluster="2xH100", objective="throughput", tpot_ms=15)
    found = by_name(binding_constraints(plan))
    assert found["tpot"].status == "binds"
    assert plan.prediction.metrics.tpot_ms <= 15
    assert found["memory"].status == "slack"


def test_latency_plan_slack_and_pins():
    # 150 ms: the bare prefill and the default vLLM profile's 82 ms fixed cost per request fit well inside it.
    plan = solved(model="llama-3.1-8b", cluster="2xH100", ttft_ms=150, pins={"tp": 1})
    found = binding_constraints(plan)
    statuses = {f.constraint: f.status for f in found}
    assert statuses["ttft"] == "slack" and statuses["memory"] == "slack"
    assert any(f.status == "pinned" and "--tp 1" in f.message for f in found)


def test_runner_up_has_another_shape_and_is_no_better():
    for kw in (dict(model="llama-3.1-8b", cluster="2xH100"),
               dict(model="llama-3.1-8b", cluster="2xH100", objective="throughput")):
        plan = solved(**kw)
        ru = runner_up(plan, time_limit_s=20)
        # Both are proven: the throughput one by the same integer-batch search as the plan's.
        assert ru.plan is not None and ru.proven
        a, b = plan.layout, ru.plan.layout
        assert (a.tp, a.sp, a.attn_dp, a.expert_tp, a.pp) != (b.tp, b.sp, b.attn_dp, b.expert_tp, b.pp)
        ma, mb = plan.prediction.metrics, ru.plan.prediction.metrics
        if plan.problem.objective.value == "latency":
            assert mb.e2e_ms >= ma.e2e_ms - 1e-6
        else:
            assert mb.output_tokens_per_s <= ma.output_tokens_per_s + 1e-6
        assert ru.lines[0].startswith("runner-up: ") and len(ru.lines) >= 2
        assert ru.to_dict()["found"] is True


def test_runner_up_when_no_other_shape_exists():
    # One GPU: the only shape is the winner's.
    plan = solved(model="llama-3.1-8b", cluster="1xH100", pins={"pp": 1})
    ru = runner_up(plan)
    assert ru.plan is None and "no other replica shape" in ru.lines[0]


def test_plan_report_is_self_contained_and_carries_the_numbers():
    plan = solved(model="llama-3.1-8b", cluster="2xH100", objective="throughput")
    data = plan_dict(plan.problem, plan.layout, plan.prediction, status=plan.status, solve_time_s=plan.solve_time_s)
    page = plan_report(plan, data, binding_constraints(plan), runner_up(plan))
    assert not re.search(r"\{\{(TITLE|BODY|PLOTLY_JS)\}\}", page)
    assert not re.search(r"<script[^>]*\ssrc=|<link\s|<img[^>]*\ssrc=\"http", page)  # nothing fetched at view time
    text = metric_text(data["metrics"])
    for key in ("ttft", "tpot", "tokens_per_s", "tokens_per_s_per_gpu"):
        assert f'id="metric-{key}">{text[key]}<' in page
    for div in ("fig-memory", "fig-time-prefill", "fig-time-decode"):
        assert f'id="{div}"' in page
    assert "Binding constraints" in page and "runner-up: " in page
    assert "<details" in page and "Execution DAG" in page


def test_enumeration_report_has_the_frontier():
    from shardplan.solver.enumerate import enumerate_plans, pareto_front

    problem = build_problem(ProblemArgs(model="llama-3.1-8b", cluster="2xH100"))
    plans = list(enumerate_plans(problem))
    rows = [{"index": i, **plan_dict(problem, p.layout, p.prediction, status="feasible")} for i, p in enumerate(plans)]
    marks = pareto_front(plans)
    page = enumeration_report(problem, rows, marks)
    assert f'id="plan-count">{len(plans)}<' in page
    assert f'id="pareto-count">{sum(marks)}<' in page and 'id="fig-pareto"' in page


@pytest.mark.parametrize("value, expected", [(1234.56, "1,234.6 ms"), (0.04, "0.0 ms")])
def test_metric_text(value, expected):
    m = {"ttft_ms": value, "tpot_ms": 1.0, "decode_step_ms": 1.0, "e2e_ms": 1.0, "output_tokens_per_s": 1.0,
         "output_tokens_per_s_per_gpu": 1.0, "output_tokens_per_s_per_user": 1000.0, "batch": 1}
    assert metric_text(m)["ttft"] == expected


def test_a_disaggregated_plan_s_pools_in_one_line_name_a_batch_limit_where_one_is_set() -> None:
    """Two decode candidates of one layout at different batch limits, held at the same requests in flight, give
    rows that differ only there: the line names the limit (hand-written pools)."""
    def pool(workers: int, max_batch: int | None, **degrees: int) -> dict[str, object]:
        return {"workers": workers, "max_batch": max_batch,
                "degrees": {"pp": 1, "tp": 1, "sp": 1, "attn_dp": 1, **degrees}}

    plan = {"prefill": pool(1, None, sp=4), "decode": pool(2, 64, tp=2)}
    assert pools_brief(plan) == "prefill 1x(sp=4) decode 2x(tp=2,batch=64)"
    plan["decode"] = pool(1, None)
    assert pools_brief(plan) == "prefill 1x(sp=4) decode 1x(1 GPU)"
