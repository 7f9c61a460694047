"""Every rule, three ways: in force on a feasible problem; a forced violation is infeasible and the
explanation names the rule; forced compliance is feasible (STYLE.md, "Each rule's tests")."""

from __future__ import annotations

import pytest

from shardplan.models.errors import InfeasibleError
from shardplan.rules.base import Kind
from shardplan.rules.catalog import CATALOG, check_plan, errors_of, get_rule
from shardplan.solver.optimise import solve
from tests.factory import problem

# rule id: (base problem, violating changes, complying changes)
TRIOS = {
    "GPU-001": (dict(model="llama-3.1-8b", cluster="8xH100"), dict(dp=2, tp=8), dict(dp=1, tp=8)),
    "PP-001": (dict(model="llama-3.1-8b", cluster="4xH100"), dict(stages="0:0,0:32"), dict(stages="0:16,16:32")),
    "ALN-001": (dict(model="qwen3-30b-a3b", cluster="8xH100"), dict(attn_dp=3), dict(attn_dp=4)),
    "DP-001": (dict(model="llama-3.1-8b", cluster="4xH100"), dict(attn_dp=2), dict(attn_dp=1)),
    "TP-001": (dict(model="llama-3.1-8b", cluster="4xH100"), dict(tp=3), dict(tp=4)),
    "TP-002": (dict(model="llama-4-scout", cluster="8xH200"), dict(tp=5), dict(tp=8)),
    "TP-003": (dict(model="llama-3.1-8b", cluster="2x8xH100"), dict(tp=16), dict(tp=8)),
    "TP-004": (dict(model="llama-3.1-8b", cluster="4xH100"), dict(sp=3), dict(sp=2)),
    "SP-001": (dict(model="llama-3.1-8b", cluster="8xH100", isl=4), dict(sp=8), dict(sp=2)),
    "EP-001": (dict(model="mixtral-8x7b", cluster="8xH100"), dict(ep=16), dict(ep=8)),
    "EP-002": (
        dict(model="qwen3-30b-a3b", cluster="8xH100"), dict(expert_tp=2), dict(expert_tp=2, allow=["expert-tp"])
    ),
    "EP-003": (dict(model="mixtral-8x7b", cluster="2x8xH100"), dict(ep=16), dict(ep=16, allow=["expert-replication"])),
    "MEM-001": (dict(model="llama-3.1-8b", cluster="4xH100"), dict(mem_cap_gib=5.0), dict(mem_cap_gib=40.0)),
    "BAT-001": (dict(model="llama-3.1-8b", cluster="4xH100", batch=8), dict(max_batch=4), dict(max_batch=8)),
    "SLA-001": (dict(model="llama-3.1-8b", cluster="4xH100"), dict(ttft_ms=0.001), dict(ttft_ms=100000.0)),
    "SLA-002": (dict(model="llama-3.1-8b", cluster="4xH100"), dict(tpot_ms=0.001), dict(tpot_ms=100000.0)),
}

ENFORCING = [r.id for r in CATALOG if r.kind is not Kind.ADVISORY]


def test_every_enforcing_rule_has_a_trio():
    assert sorted(TRIOS) == sorted(ENFORCING)


def _clean(plan):
    assert errors_of(check_plan(plan)) == []


@pytest.mark.parametrize("rule_id", sorted(TRIOS))
def test_trivially_feasible(rule_id):
    base, _, _ = TRIOS[rule_id]
    p = problem(**base)
    plan = solve(p)
    _clean(plan)


@pytest.mark.parametrize("rule_id", sorted(TRIOS))
def test_forced_violation_is_infeasible_and_named(rule_id):
    base, bad, _ = TRIOS[rule_id]
    with pytest.raises(InfeasibleError) as err:
        solve(problem(**base, **bad))
    named = [rule for rule, _ in err.value.conflicts]
    assert rule_id in named, err.value.conflicts


@pytest.mark.parametrize("rule_id", sorted(TRIOS))
def test_forced_compliance_is_feasible(rule_id):
    base, _, good = TRIOS[rule_id]
    plan = solve(problem(**base, **good))
    _clean(plan)
    rule = get_rule(rule_id)
    assert rule.check(plan) == []


def test_a_default_rule_switched_off_no_longer_binds():
    p = problem(model="llama-3.1-8b", cluster="2x8xH100", tp=16, allow=["tp-across-domains"])
    assert solve(p).layout.tp == 16


def test_advisory_rules_warn_without_constraining():
    plan = solve(problem(model="llama-3.1-8b", cluster="4xH100", sp=2, dp=2))
    warnings = {d.rule for d in check_plan(plan) if d.severity == "warning"}
    assert {"SP-002", "DP-002"} <= warnings


def test_memory_conflict_quotes_the_numbers():
    with pytest.raises(InfeasibleError) as err:
        solve(problem(model="deepseek-v3", cluster="8xH100"))
    message = dict(err.value.conflicts)["MEM-001"]
    assert "GiB per GPU" in message and "short" in message


def test_tp_conflict_quotes_the_numbers():
    with pytest.raises(InfeasibleError) as err:
        solve(problem(model="llama-3.1-70b", cluster="8xH100", tp=3))
    assert dict(err.value.conflicts)["TP-001"] == "tp(3) does not divide heads(64)"


def test_a_pin_no_stage_can_hold_names_the_gpu_count():
    with pytest.raises(InfeasibleError) as err:
        solve(problem(model="llama-3.1-8b", cluster="4xH100", sp=8))
    assert "GPU-001" in dict(err.value.conflicts)
