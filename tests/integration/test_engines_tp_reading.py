"""Degrees in the engines' reading of tp (tp over the whole stage, as SGLang's ``--tp 8 --dp 8
--enable-dp-attention`` and TensorRT-LLM's ``tp_size`` with attention DP count it), such as the DESIGN.md
contract's own ``--decode workers=1,tp=8,attn_dp=8,ep=8``: where only that reading makes the degrees
consistent they are taken in it, with a one-line note on stderr, and the result is byte for byte the one
of shardplan's own spelling (tp per attention group). Degrees no reading makes consistent stay bad input."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shardplan.solver.cli.inputs import per_group_tp
from tests.integration.test_cli_disagg import run  # main(argv) in-process: (exit code, stdout, stderr)

DSV3 = ["--model", "deepseek-v3", "--cluster", "8x8xH200"]
DISAGG = [*DSV3, "--serving", "disagg", "--prefill", "workers=1,tp=8", "--batch", "64"]


def _untimed(out: str) -> dict[str, Any]:
    """The JSON result without its timing fields (the only bytes two runs may differ in)."""
    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k != "solve_time_s"}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value
    return strip(json.loads(out))


@pytest.mark.parametrize("engines,ours", [
    ("workers=1,tp=8,attn_dp=8,ep=8", "workers=1,attn_dp=8,ep=8"),  # DESIGN.md's example
    ("workers=2,tp=8,attn_dp=4,ep=8", "workers=2,tp=2,attn_dp=4,ep=8"),
    ("ep=16,attn_dp=2,tp=16,workers=1", "ep=16,attn_dp=2,tp=8,workers=1"),
])
def test_a_pool_in_the_engines_spelling_is_the_same_worker(engines: str, ours: str,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["evaluate", *DISAGG, "--decode", engines, "--json"], capsys)
    assert code in (0, 1), err
    given = dict(part.split("=") for part in engines.split(","))
    assert err.count("\n") == 1 and err.startswith("shardplan: note: decode pool: ")
    assert f"{given['tp']} GPUs per stage" in err
    code_ours, out_ours, err_ours = run(["evaluate", *DISAGG, "--decode", ours, "--json"], capsys)
    assert (code_ours, err_ours) == (code, "")
    assert _untimed(out) == _untimed(out_ours)
    degrees = json.loads(out)["decode"]["degrees"]
    assert degrees["ep"] == int(given["ep"]) and degrees["tp"] * degrees["attn_dp"] == int(given["tp"])


def test_the_colocated_flags_read_the_same_way_in_solve_and_evaluate(capsys: pytest.CaptureFixture[str]) -> None:
    engines, ours = ["--tp", "8", "--attn-dp", "4", "--ep", "8"], ["--tp", "2", "--attn-dp", "4", "--ep", "8"]
    code, out, err = run(["evaluate", *DSV3, *engines, "--json"], capsys)
    assert code == 0 and "tp 2 in each attention group" in err
    assert _untimed(out) == _untimed(run(["evaluate", *DSV3, *ours, "--json"], capsys)[1])
    # The pins the solver sees are the same too: the pinned solve's plan is the layout evaluate priced.
    code, solved, _ = run(["solve", *DSV3, *engines, "--json"], capsys)
    assert code == 0
    assert json.loads(solved)["degrees"] == json.loads(out)["degrees"]


def test_a_spelling_that_already_fits_gets_no_note(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["evaluate", *DISAGG, "--decode", "workers=1,attn_dp=8,ep=8", "--json"], capsys)
    assert code in (0, 1) and err == ""


@pytest.mark.parametrize("decode", [
    "workers=1,tp=8,attn_dp=8,ep=16",  # neither reading gives ep 16
    "workers=1,tp=8,attn_dp=3,ep=8",  # attn_dp does not divide tp
    "workers=1,tp=4,attn_dp=1,ep=8",  # one attention group: tp is the worker's under both readings
])
def test_degrees_no_reading_makes_consistent_are_bad_input(decode: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["evaluate", *DISAGG, "--decode", decode], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("shardplan: error: decode ep: ")


@pytest.mark.parametrize("argv", [
    ["evaluate", "--model", "deepseek-v3", "--cluster", "4xH100", "--tp", "8", "--attn-dp", "8", "--ep", "8"],
    ["evaluate", *DSV3, "--serving", "disagg", "--prefill", "workers=1,tp=8", "--decode",
     "workers=1,tp=8,attn_dp=8,ep=8,stages=0:5"],
])
def test_bad_input_stays_one_line_without_the_note(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """The reading is taken before a later check finds the input bad (a cluster too small, stages that miss layers):
    the note waits for a result, so bad input's stderr is its one error line."""
    code, out, err = run(argv, capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and err.startswith("shardplan: error: ")


def test_evaluates_verdict_keeps_the_note(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["evaluate", "--model", "deepseek-v3", "--cluster", "8xH200", "--tp", "8", "--attn-dp", "8",
                        "--ep", "8", "--batch", "100000"], capsys)
    assert code == 1 and err.startswith("shardplan: note: tp 8 with attn_dp 8 and ep 8") and err.count("\n") == 1


def test_per_group_tp_against_the_gpu_count() -> None:
    """Brute force over small degrees: a reading exists exactly when some per-group tp t gives a stage of
    t x sp x attn_dp GPUs = tp x sp GPUs (the engines' worker) whose ep is the given one."""
    for tp in range(1, 17):
        for sp in (1, 2):
            for attn_dp in range(1, 17):
                for expert_tp in (1, 2):
                    for ep in range(1, 33):
                        fits = [t for t in range(1, tp + 1) if t * attn_dp == tp and attn_dp > 1
                                and t * sp * attn_dp == ep * expert_tp]
                        assert per_group_tp(tp, sp, attn_dp, expert_tp, ep) == (fits[0] if fits else None)
