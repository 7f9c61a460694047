"""An ep that only SGLang's reading of tp gives (tp over the whole worker, robust16): the one-line error
says how to spell that layout here, and the spelling it suggests is accepted and means that layout. Degrees
that no reading makes consistent get no suggestion."""

from __future__ import annotations

import json

import pytest

from shardplan.solver.cli.inputs import per_group_tp
from tests.integration.test_cli_disagg import run  # main(argv) in-process: (exit code, stdout, stderr)

DSV3 = ["--model", "deepseek-v3", "--cluster", "8x8xH200"]
DISAGG = [*DSV3, "--serving", "disagg", "--prefill", "workers=1,tp=8"]


@pytest.mark.parametrize("decode,meant", [
    ("workers=1,tp=8,attn_dp=8,ep=8", "workers=1,attn_dp=8,ep=8"),  # DESIGN.md's example, read as SGLang's
    ("workers=2,tp=8,attn_dp=4,ep=8", "workers=2,tp=2,attn_dp=4,ep=8"),
    ("ep=16,attn_dp=2,tp=16,workers=1", "ep=16,attn_dp=2,tp=8,workers=1"),  # the pool's own order kept
])
def test_the_sglang_reading_is_suggested_in_the_pool_spelling(decode: str, meant: str,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["evaluate", *DISAGG, "--decode", decode, "--json"], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("shardplan: error: decode ep: ")
    assert err.rstrip().endswith(f"did you mean {meant}? tp is per attention group")
    # The suggestion is valid input: the decode worker then has tp x attn_dp GPUs (the SGLang worker's) and ep.
    code, out, err = run(["evaluate", *DISAGG, "--decode", meant, "--json"], capsys)
    assert code in (0, 1), err
    degrees = json.loads(out)["decode"]["degrees"]
    given = dict(part.split("=") for part in decode.split(","))
    assert degrees["ep"] == int(given["ep"])
    assert degrees["tp"] * degrees["attn_dp"] == int(given["tp"])


def test_the_colocated_flags_get_the_flag_spelling(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["evaluate", *DSV3, "--tp", "8", "--attn-dp", "4", "--ep", "8"], capsys)
    assert code == 2
    assert err.rstrip().endswith("did you mean --tp 2? tp is per attention group")


@pytest.mark.parametrize("decode", [
    "workers=1,tp=8,attn_dp=8,ep=16",  # neither reading gives ep 16
    "workers=1,tp=8,attn_dp=3,ep=8",  # attn_dp does not divide tp
    "workers=1,tp=4,attn_dp=1,ep=8",  # one attention group: tp is the worker's under both readings
])
def test_no_suggestion_where_no_reading_fits(decode: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["evaluate", *DISAGG, "--decode", decode], capsys)
    assert code == 2 and err.count("\n") == 1
    assert "did you mean" not in err


def test_per_group_tp_against_the_gpu_count() -> None:
    """Brute force over small degrees: a suggestion exists exactly when some per-group tp t gives a stage of
    t x sp x attn_dp GPUs = tp x sp GPUs (the SGLang worker's) whose ep is the given one."""
    for tp in range(1, 17):
        for sp in (1, 2):
            for attn_dp in range(1, 17):
                for expert_tp in (1, 2):
                    for ep in range(1, 33):
                        fits = [t for t in range(1, tp + 1) if t * attn_dp == tp and attn_dp > 1
                                and t * sp * attn_dp == ep * expert_tp]
                        assert per_group_tp(tp, sp, attn_dp, expert_tp, ep) == (fits[0] if fits else None)
