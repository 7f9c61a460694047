"""JSON in and out is RFC 8259 JSON: no NaN or ±Infinity. Python's parser accepts them and its writer prints
them as bare words that jq, JSON.parse, Go and serde reject. An input file holding one is bad input naming the
file; every JSON shardplan prints or writes refuses to carry one (``models.files.json_text``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shardplan.models import SpecError
from shardplan.models.files import json_text, parse_json
from tests.fuzz.cases import Case, preset_config
from tests.fuzz.harness import run_in_process


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e400", "-2.5E+999"])
def test_a_non_finite_number_in_an_input_file_names_the_file(number: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_json(f'{{"layers": {{"3": [1.0, {number}]}}}}', "load-profile", "load.json")
    assert str(err.value) == (f"load-profile: load.json holds the number '{number}', which is not finite "
                              "(JSON numbers are finite: RFC 8259 §6)")
    assert parse_json("[1e308, -0.0, 10000000000000000000000]", "x", "x.json")[0] == 1e308  # finite: kept


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_the_json_writer_refuses_a_non_finite_number(value: float) -> None:
    with pytest.raises(ValueError):
        json_text({"metrics": {"tpot_ms": value}})


def test_validate_fix_refuses_a_dag_holding_nan_and_writes_nothing(tmp_path: Path) -> None:
    # It read est_us NaN and wrote it back in the repaired file: "est_us": NaN, which no strict parser reads.
    made = run_in_process(Case("solve", ["solve", "--model", "llama-3.1-8b", "--cluster", "1xH100", "--no-runner-up",
                                         "--dag", "{dir}/d.json"], {}), tmp_path)
    assert made.code == 0, made.stderr
    text = (tmp_path / "d.json").read_text()
    first = json.loads(text)["nodes"][0]["id"]
    dag = json.loads(text)
    dag["nodes"][0]["est_us"] = float("nan")
    dag["edges"].append({**dag["edges"][0], "source": first, "target": first})  # a cycle: --fix has work to do
    argv = ["validate", "{dir}/nan.json", "--fix", "--out", "{dir}/fixed.json"]
    outcome = run_in_process(Case("validate", argv, {"nan.json": json.dumps(dag).encode()}), tmp_path)
    assert outcome.code == 2 and outcome.written == [], (outcome.code, outcome.written)
    assert outcome.stderr == (f"shardplan: error: file: {tmp_path}/nan.json holds the number 'NaN', which is not "
                              "finite (JSON numbers are finite: RFC 8259 §6)\n")


def test_a_config_holding_infinity_is_bad_input(tmp_path: Path) -> None:
    config = json.dumps({**preset_config("llama-3.1-8b"), "rope_theta": float("inf")}).encode()
    argv = ["evaluate", "--model", "{dir}/c.json", "--cluster", "1xH100", "--json"]
    outcome = run_in_process(Case("evaluate", argv, {"c.json": config}), tmp_path)
    assert (outcome.code, outcome.stdout) == (2, "")
    assert outcome.stderr.startswith("shardplan: error: model: ")
    assert "holds the number 'Infinity', which is not finite" in outcome.stderr
