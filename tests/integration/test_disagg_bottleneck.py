"""What sets a disaggregated deployment's rate (robust16: ``solve --serving disagg`` said ``decode`` and
``evaluate --serving disagg`` of its pools, at its concurrency, ``concurrency``, every figure equal).

Both commands price through ``cost.disagg.steady_state``, the one place the label is decided. They
differed because the evaluated decode pool left out the batch limit solve gave it (``max_batch``): with the
limit the decode pool runs at it and more requests in flight cannot raise the rate (``decode``); without it
the same requests in flight leave the pool below its top and one more raises the rate (``concurrency``).
Both labels hold by the definition, checked here as what it means: the concurrency is named exactly when
one more request in flight raises the rate. The human view now prints each pool as ``--prefill/--decode``
take it, batch limit included, and evaluating that gives solve's label and figures."""

from __future__ import annotations

import json
import re

import pytest

from shardplan.solver.cli.inputs import ProblemArgs, build_problem
from shardplan.solver.cli.pools import disagg_layout
from shardplan.solver.cost.disagg import evaluate_disagg
from shardplan.solver.outputs.report import pool_spec
from tests.integration.test_cli_disagg import run

WORKLOAD = ["--model", "llama-3.1-8b", "--cluster", "8xH100", "--isl", "3000", "--osl", "300", "--tpot-ms", "30"]


def test_evaluating_solves_pools_gives_its_bottleneck_and_figures(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["solve", *WORKLOAD, "--serving", "disagg", "--time-limit", "30", "--json"], capsys)
    assert code == 0, err
    solved = json.loads(out)
    pools = ["--prefill", pool_spec(solved["prefill"]), "--decode", pool_spec(solved["decode"])]
    code, out, err = run(["evaluate", *WORKLOAD, "--serving", "disagg", *pools, "--batch",
                          str(solved["metrics"]["batch"]), "--json"], capsys)
    assert code == 0, err
    assert json.loads(out)["metrics"] == solved["metrics"]


def test_the_human_view_prints_pools_evaluate_takes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["solve", *WORKLOAD, "--serving", "disagg", "--time-limit", "30"], capsys)
    assert code == 0, err
    specs = dict(re.findall(r"\(--(prefill|decode) (\S+)\)", out))
    assert set(specs) == {"prefill", "decode"} and "batch=" in specs["decode"]


def _rate_and_label(concurrency: int, decode: str) -> tuple[float, str]:
    problem = build_problem(ProblemArgs(model="llama-3.1-8b", cluster="8xH100", isl=3000, osl=300, batch=concurrency))
    prediction = evaluate_disagg(problem, disagg_layout(problem, "workers=2", decode)).prediction
    return prediction.throughput_rps, prediction.bottleneck


@pytest.mark.parametrize("decode", ["workers=1,tp=2,batch=278", "workers=1,tp=2", "workers=1,tp=2,batch=64"])
def test_the_concurrency_is_named_exactly_when_one_more_request_raises_the_rate(decode: str) -> None:
    labels = set()
    for c in [*range(1, 12), *range(60, 70), *range(270, 300), 400, 1000]:
        rate, label = _rate_and_label(c, decode)
        more, _ = _rate_and_label(c + 1, decode)
        labels.add(label)
        if label == "concurrency":
            assert more > rate * (1 + 1e-12), (c, label)
        else:
            assert more == pytest.approx(rate, rel=1e-12), (c, label)
    assert "concurrency" in labels and labels - {"concurrency"}  # both sides of the boundary were seen


def test_at_solves_concurrency_the_limit_decides_the_label() -> None:
    """At 299 in flight the decode pool runs at 278 sequences with or without the limit (same rate); with it,
    decode sets the rate, without it the concurrency does (300 in flight would raise it). 297 before the decode
    worker's admission (its scheduler's rounds before the first token) entered each request's time."""
    limited = _rate_and_label(299, "workers=1,tp=2,batch=278")
    free = _rate_and_label(299, "workers=1,tp=2")
    assert limited[1] == "decode" and free[1] == "concurrency"
    assert limited[0] == pytest.approx(free[0], rel=1e-9)
