"""evaluate judges the layout it prices: every broken rule or limit is in ``violations`` and the exit is 1."""

from __future__ import annotations

import json

import pytest

from shardplan.solver.cli import main


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
