"""``solve --limits-at median-error``: plans that meet the user's TTFT and TPOT limits were their predictions off as
their engine's median measured run at their load (``solver/limits_at.py``).

Expectations are computed here from the stored figures (``hardware/measured_error.json``) by hand: the band of the
plan's requests in flight, the limit x (1 + the band's median error) to the microsecond below, and the plan's TTFT
off as that median run against the limit given."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from shardplan.models import SolverLimitError
from shardplan.rules.catalog import check_plan, errors_of
from shardplan.rules.problem import GivenLimits
from shardplan.solver import limits_at
from shardplan.solver.cli import serving
from shardplan.solver.cli.inputs import ProblemArgs, build_problem, layout_from_pins
from shardplan.solver.cost.evaluate import evaluate, max_batch
from shardplan.solver.limits_at import MAX_ROUNDS, solve_within
from shardplan.solver.outputs.report import limits_at_text
from shardplan.solver.search_base import Deadline
from tests.integration.test_cli_disagg import run
from tests.integration.test_measured_error_cli import quoted, stored

# One H200, TensorRT-LLM: under a 1 s TTFT the throughput plan runs 255 sequences, the band above 128 in flight, where
# the engine's TTFT predictions ran a median 52 % fast (measured about twice the prediction).
LLAMA_8B = ["solve", "--model", "llama-3.1-8b", "--cluster", "1xH200", "--engine", "trtllm", "--objective",
            "throughput", "--isl", "1000", "--osl", "200", "--ttft-ms", "1000", "--no-runner-up"]


def solved(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code, out, _ = run([*argv, "--json"], capsys)
    assert code == 0
    data: dict[str, Any] = json.loads(out)
    return data


def band_error(figures: dict[str, Any], in_flight: int, metric: str) -> float:
    """The median error of ``metric`` over the runs of the band holding ``in_flight`` (else the whole)."""
    for band in figures["bands"]:
        if band["low"] <= in_flight and (band["high"] is None or in_flight <= band["high"]):
            return float(band[metric]["median"])
    return float(figures[metric]["median"])


def test_a_plan_over_its_limit_at_the_median_error_is_replaced_by_one_within_it(capsys):
    figures = stored("colocated", "trtllm")
    as_predicted = solved(LLAMA_8B, capsys)
    first_batch = as_predicted["metrics"]["batch"]
    assert as_predicted["measured_error"]["over_limit"] == ["ttft_ms"]  # what the option is for
    held_ms = math.floor(round(1000 * (1 + band_error(figures, first_batch, "ttft")) * 1000, 6)) / 1000
    assert held_ms < as_predicted["metrics"]["ttft_ms"]  # the first plan cannot come back

    data = solved([*LLAMA_8B, "--limits-at", "median-error"], capsys)
    assert data["limits_at"] == {"basis": "median-error", "given": {"ttft_ms": 1000.0, "tpot_ms": None},
                                 "held": {"ttft_ms": held_ms, "tpot_ms": None}, "rounds": 1, "stopped": None,
                                 "batch_cap": None}
    assert data["workload"]["ttft_ms"] == held_ms and data["metrics"]["ttft_ms"] <= held_ms
    quote = quoted(figures, data["metrics"]["batch"], data["metrics"], (1000.0, None))
    assert quote["over_limit"] == [] and data["measured_error"]["over_limit"] == []
    assert data["metrics"]["output_tokens_per_s"] <= as_predicted["metrics"]["output_tokens_per_s"]


def test_a_plan_within_its_limits_at_the_median_error_is_the_plan_as_predicted(capsys):
    # 8 in flight: the band where TensorRT-LLM's TTFT predictions ran slow (its runs measured less), so nothing is held.
    argv = [*LLAMA_8B, "--batch", "8"]
    assert band_error(stored("colocated", "trtllm"), 8, "ttft") > 0
    as_predicted = solved(argv, capsys)
    data = solved([*argv, "--limits-at", "median-error"], capsys)
    assert data["limits_at"]["rounds"] == 0 and data["limits_at"]["held"] == data["limits_at"]["given"]
    timing = ("limits_at", "solve_time_s")
    assert {k: v for k, v in data.items() if k not in timing} == {
        k: v for k, v in as_predicted.items() if k not in timing}


def test_without_the_option_a_plan_carries_no_limits_at_key(capsys):
    data = solved(LLAMA_8B, capsys)
    assert "limits_at" not in data and data["workload"]["ttft_ms"] == 1000.0


def test_each_mode_of_auto_meets_the_limits_given_at_its_own_modes_median_error(capsys):
    argv = ["solve", "--model", "llama-3.1-8b", "--cluster", "2x4xH100", "--engine", "trtllm", "--objective",
            "throughput", "--isl", "1000", "--osl", "200", "--ttft-ms", "1000", "--tpot-ms", "50", "--serving", "auto",
            "--limits-at", "median-error"]
    data = solved(argv, capsys)
    for mode, found in data["modes"].items():
        assert found["limits_at"]["given"] == {"ttft_ms": 1000.0, "tpot_ms": 50.0}
        held = found["limits_at"]["held"]
        assert found["metrics"]["ttft_ms"] <= held["ttft_ms"] <= 1000.0
        assert found["metrics"]["tpot_ms"] <= held["tpot_ms"] <= 50.0
        figures = stored(mode, "trtllm")
        assert quoted(figures, found["metrics"]["batch"], found["metrics"], (1000.0, 50.0))["over_limit"] == []


@pytest.mark.parametrize(("extra", "reason"), [
    (["--limits-at", "median-error"], "give one"),
    (["--limits-at", "median-error", "--ttft-ms", "500", "--profile", "h200-sxm"], "another profile"),
    (["--limits-at", "median-error", "--ttft-ms", "500", "--serving", "disagg", "--profile", "h200-sxm"],
     "another profile"),
])
def test_median_error_without_a_limit_or_with_a_profile_of_no_measured_runs_is_bad_input(extra, reason, capsys):
    code, out, err = run(["solve", "--model", "llama-3.1-8b", "--cluster", "1xH200", "--objective", "throughput",
                          *extra], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "limits-at" in err and reason in err and "Traceback" not in err


def test_an_sla_conflict_names_the_limit_given_beside_the_one_held():
    from shardplan.rules.capacity import TpotLimit, TtftLimit

    problem = build_problem(ProblemArgs(model="llama-3.1-8b", cluster="1xH200", ttft_ms=480.0, tpot_ms=50.0))
    held = problem.model_copy(update={"limits_given": GivenLimits(ttft_ms=1000.0, tpot_ms=50.0, rounds=1)})
    assert TtftLimit().conflict_message(held) == ("TTFT must stay within 480 ms (held below the 1000 ms given, at "
                                                  "the engine's median measured error)")
    assert TpotLimit().conflict_message(held) == "TPOT must stay within 50 ms"  # held as given
    assert TtftLimit().conflict_message(problem) == "TTFT must stay within 480 ms"


def test_the_rounds_stop_at_their_cap_even_if_one_made_no_progress(monkeypatch):
    problem = build_problem(ProblemArgs(model="llama-3.1-8b", cluster="1xH200", objective="throughput",
                                        ttft_ms=1000.0))
    solves: list[float | None] = []

    def solve(held):  # a solver whose plan never changes the limits: the worst case the cap is there for
        solves.append(held.workload.ttft_ms)
        return held

    monkeypatch.setattr(limits_at, "next_round", lambda current, plan: current)
    result, stopped = solve_within(problem, solve, lambda held: held)
    assert len(solves) == MAX_ROUNDS and result.limits_given.rounds == 0 and stopped is None


def test_every_round_returns_a_plan_that_passes_every_rule():
    problem = build_problem(ProblemArgs(model="llama-3.1-8b", cluster="1xH200", objective="throughput",
                                        engine="trtllm", isl=1000, osl=200, ttft_ms=1000.0))
    held, plan = limits_at.solve_colocated(problem, Deadline(None, None), "median-error")
    assert not isinstance(plan, Exception)
    assert plan.problem == held and held.limits_given is not None and held.limits_given.rounds == 1
    assert errors_of(check_plan(plan)) == []


def test_the_solve_time_covers_every_round_not_only_the_last(monkeypatch):
    """``solve_time_s`` of a plan solved in rounds is the command's search time: at least the sum of the rounds'
    own (the first round's plan is over the held limit here, so there are two)."""
    problem = build_problem(ProblemArgs(model="llama-3.1-8b", cluster="1xH200", objective="throughput",
                                        engine="trtllm", isl=1000, osl=200, ttft_ms=1000.0))
    rounds: list[float] = []
    real_solve = limits_at.solve

    def timed_solve(held, deadline):
        plan = real_solve(held, deadline=deadline)
        rounds.append(plan.solve_time_s)
        return plan

    monkeypatch.setattr(limits_at, "solve", timed_solve)
    _, plan = limits_at.solve_colocated(problem, Deadline(None, None), "median-error")
    assert not isinstance(plan, Exception) and len(rounds) >= 2
    assert plan.solve_time_s >= sum(rounds)


def test_a_disaggregated_solve_time_covers_every_round(monkeypatch):
    """The same for a mode of ``solve --serving``: Llama-3.1-70B FP8 on 8xH200 under TensorRT-LLM, TTFT 2 s, whose
    disaggregated plan as predicted is over the limit at the median error (two rounds or more)."""
    problem = build_problem(ProblemArgs(model="llama-3.1-70b", weights_dtype="fp8", cluster="8xH200", engine="trtllm",
                                        isl=4000, osl=500, ttft_ms=2000.0, tpot_ms=50.0))
    rounds: list[float] = []
    real_disagg = serving._disagg

    def timed_disagg(held, rate_rps, deadline):
        data = real_disagg(held, rate_rps, deadline)
        rounds.append(data["solve_time_s"])
        return data

    monkeypatch.setattr(serving, "_disagg", timed_disagg)
    result = serving.plan_serving(problem, "disagg", None, None, None, "median-error")
    assert len(rounds) >= 2 and result.data["limits_at"]["rounds"] == len(rounds) - 1
    assert result.data["solve_time_s"] >= sum(rounds) - 0.001 * len(rounds)  # each round's rounded to the ms


def test_a_round_stopped_by_the_work_limit_returns_the_round_before_and_auto_prefers_the_mode_that_meets(capsys):
    # Llama-3.1-70B for 20 requests/s on 8x8xH200 (vLLM, the default engine): the disaggregated deployment of 28
    # GPUs is chosen as predicted, but its TTFT off as the median run is over 2 s, and its next round, at a limit
    # held lower, finds nothing within 0.02 units of work (measured 2026-12-08, a decode round priced alone counting
    # ROUND_WORK: the first round finishes within 0.01, both rounds within 0.05 but not 0.03; 0.2 before); the
    # colocated 48 GPUs meet the limits at their median error.
    argv = ["solve", "--model", "llama-3.1-70b", "--cluster", "8x8xH200", "--rate", "20", "--ttft-ms", "2000",
            "--tpot-ms", "50", "--isl", "4000", "--osl", "500", "--serving", "auto", "--work-limit", "0.02"]
    as_predicted = solved(argv, capsys)
    assert as_predicted["chosen"] == "disagg" and as_predicted["measured_error"]["over_limit"] == ["ttft_ms"]
    data = solved([*argv, "--limits-at", "median-error"], capsys)
    disagg, colocated = data["modes"]["disagg"], data["modes"]["colocated"]
    assert disagg["limits_at"]["stopped"].startswith("the next round, at the limits held lower, was stopped: "
                                                     "work-limit")
    assert disagg["measured_error"]["over_limit"] == ["ttft_ms"] and disagg["num_gpus"] == 28
    assert colocated["limits_at"]["stopped"] is None and colocated["measured_error"]["over_limit"] == []
    assert data["chosen"] == "colocated"


def test_the_rounds_return_the_round_before_when_a_limit_stops_one(monkeypatch):
    problem = build_problem(ProblemArgs(model="llama-3.1-8b", cluster="1xH200", objective="throughput",
                                        ttft_ms=1000.0))
    calls: list[int] = []

    def solve(held):
        calls.append(len(calls))
        if len(calls) == 3:
            raise SolverLimitError("time-limit: no plan found within 2 s")
        return f"round {len(calls)}"

    monkeypatch.setattr(limits_at, "next_round", lambda current, plan: current)
    result, stopped = solve_within(problem, solve, lambda found: found)
    assert result == "round 2" and len(calls) == 3
    assert stopped == "the next round, at the limits held lower, was stopped: time-limit: no plan found within 2 s"


def best_at_the_median_error_by_brute_force(engine: str, ttft_ms: float) -> tuple[int, float]:
    """Llama-3.1-8B on one H200 (one layout): every batch priced, kept where its TTFT is within the limit as predicted
    and off as its band's median run; the batch with the most tokens/s, and those."""
    problem = build_problem(ProblemArgs(model="llama-3.1-8b", cluster="1xH200", engine=engine, objective="throughput",
                                        isl=1000, osl=200, ttft_ms=ttft_ms, pins={"tp": 1}))
    layout = layout_from_pins(problem)
    figures = stored("colocated", engine)
    best: tuple[int, float] | None = None
    for batch in range(1, max_batch(problem, layout) + 1):
        metrics = evaluate(problem, layout.model_copy(update={"batch": batch})).metrics
        off = round(metrics.ttft_ms / (1 + band_error(figures, batch, "ttft")), 3)
        if metrics.ttft_ms <= ttft_ms and off <= ttft_ms and (best is None or metrics.output_tokens_per_s > best[1]):
            best = (batch, metrics.output_tokens_per_s)
    assert best is not None
    return best


@pytest.mark.parametrize(("engine", "ttft_ms", "capped"), [
    ("sglang", 1000, True),  # the rounds hold 666 ms (129+ in flight: -33 %); 128 in flight (+1 %) meets 1 s
    ("sglang", 3000, False), ("trtllm", 1000, False), ("trtllm", 300, False), ("vllm", 300, False),
])
def test_the_plan_held_at_the_median_error_is_the_best_such_plan_by_brute_force(engine, ttft_ms, capped, capsys):
    batch, tokens_per_s = best_at_the_median_error_by_brute_force(engine, ttft_ms)
    data = solved(["solve", "--model", "llama-3.1-8b", "--cluster", "1xH200", "--engine", engine, "--objective",
                   "throughput", "--isl", "1000", "--osl", "200", "--ttft-ms", str(ttft_ms), "--no-runner-up",
                   "--limits-at", "median-error"], capsys)
    assert data["metrics"]["batch"] == batch
    assert data["metrics"]["output_tokens_per_s"] == pytest.approx(tokens_per_s, rel=1e-6)
    assert (data["limits_at"]["batch_cap"] is not None) == capped


@pytest.mark.parametrize(("found", "line"), [
    ({"given": {"ttft_ms": 1000.0, "tpot_ms": None}, "held": {"ttft_ms": 1000.0, "tpot_ms": None}, "rounds": 0,
      "stopped": None, "batch_cap": None},
     "limits held at the median measured error: TTFT 1,000 ms as given (none needed tightening)"),
    ({"given": {"ttft_ms": 2000.0, "tpot_ms": 50.0}, "held": {"ttft_ms": 1078.0, "tpot_ms": 50.0}, "rounds": 2,
      "stopped": None, "batch_cap": None},
     "limits held at the median measured error: TTFT 1,078 ms for the 2,000 given, TPOT 50 ms as given (2 rounds of "
     "tightening)"),
    ({"given": {"ttft_ms": 1000.0, "tpot_ms": None}, "held": {"ttft_ms": 1000.0, "tpot_ms": None}, "rounds": 1,
      "stopped": None, "batch_cap": 128},
     "limits held at the median measured error: TTFT 1,000 ms as given (after 1 round of tightening, a plan with the "
     "engine's batch capped at 128 per attention group, a load whose runs measured closer to the predictions, did "
     "better)"),
    ({"given": {"ttft_ms": 500.0, "tpot_ms": None}, "held": {"ttft_ms": 500.0, "tpot_ms": None}, "rounds": 0,
      "stopped": "the next round, at the limits held lower, was stopped: work-limit: no plan", "batch_cap": None},
     "limits held at the median measured error: TTFT 500 ms as given (0 rounds of tightening done; the next round, at "
     "the limits held lower, was stopped: work-limit: no plan, so this plan is the last round's that finished)"),
])
def test_the_line_under_the_measured_error_says_what_was_held_and_why(found, line):
    assert limits_at_text({"limits_at": {"basis": "median-error", **found}}) == line
    assert limits_at_text({"measured_error": None}) is None
