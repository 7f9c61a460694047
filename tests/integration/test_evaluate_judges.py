"""evaluate judges the layout it prices: every broken rule or limit is in ``violations`` and the exit is 1."""

from __future__ import annotations

import json

import pytest

from shardplan.solver.cli import main
from shardplan.solver.optimise import solve
from tests.factory import problem


def _evaluate(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict]:
    with pytest.raises(SystemExit) as stop:
        main(["evaluate", "--model", "llama-3.1-70b", "--cluster", "8xH100", *args, "--json"])
    return int(stop.value.code or 0), json.loads(capsys.readouterr().out)


def test_a_tp_the_rules_reject_is_a_violation(capsys: pytest.CaptureFixture[str]) -> None:
    code, data = _evaluate(capsys, "--tp", "3")
    assert code == 1 and "TP-001" in [v["rule"] for v in data["violations"]]


def test_a_broken_tpot_limit_is_a_violation(capsys: pytest.CaptureFixture[str]) -> None:
    code, data = _evaluate(capsys, "--tp", "8", "--batch", "64", "--tpot-ms", "10")
    assert code == 1 and [v["rule"] for v in data["violations"]] == ["SLA-002"]
    assert data["metrics"]["tpot_ms"] > 10


def test_a_layout_that_keeps_every_rule_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        main(["evaluate", "--model", "llama-3.1-70b", "--cluster", "8xH100", "--tp", "8", "--batch", "64", "--json"])
        code = 0
    except SystemExit as stop:
        code = int(stop.code or 0)
    assert code == 0 and json.loads(capsys.readouterr().out)["violations"] == []


def test_a_batch_over_the_engine_limit_is_a_violation(capsys: pytest.CaptureFixture[str]) -> None:
    # 100 sequences in one attention group, against an engine limit of 64: BAT-001 with both numbers.
    code, data = _evaluate(capsys, "--tp", "8", "--batch", "100", "--max-batch", "64")
    violations = {v["rule"]: v["message"] for v in data["violations"]}
    assert code == 1 and list(violations) == ["BAT-001"]
    assert "100" in violations["BAT-001"] and "64" in violations["BAT-001"]


def test_a_batch_at_the_engine_limit_is_not(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        main(["evaluate", "--model", "llama-3.1-70b", "--cluster", "8xH100", "--tp", "8", "--batch", "64",
              "--max-batch", "64", "--json"])
        code = 0
    except SystemExit as stop:
        code = int(stop.code or 0)
    assert code == 0 and json.loads(capsys.readouterr().out)["violations"] == []


def test_solve_refuses_a_fixed_batch_over_the_engine_limit(capsys: pytest.CaptureFixture[str]) -> None:
    # A dense model has one attention group per replica: a batch of 100 cannot run under a limit of 64,
    # so solve is infeasible and names the rule (exit 1), as evaluate does.
    with pytest.raises(SystemExit) as stop:
        main(["solve", "--model", "llama-3.1-70b", "--cluster", "8xH100", "--batch", "100", "--max-batch", "64",
              "--json"])
    assert stop.value.code == 1
    assert "BAT-001" in capsys.readouterr().out


def test_solve_spreads_a_fixed_batch_over_attention_groups_to_keep_the_limit() -> None:
    # An MoE model may split the batch over attention groups: 100 sequences at 64 per group need two.
    plan = solve(problem(model="mixtral-8x7b", cluster="8xH100", batch=100, max_batch=64))
    assert -(-100 // plan.layout.attn_dp) <= 64
