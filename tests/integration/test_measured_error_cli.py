"""Plans quote their engine's measured error (``measured_error`` in the JSON, one line in the terminal): the
figures stored for the plan's engine and serving mode, and none where they would not describe the plan."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.integration.test_cli_disagg import run

LLAMA_8B = ["--model", "llama-3.1-8b", "--isl", "1000", "--osl", "100", "--no-runner-up"]


def as_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code, out, _ = run([*argv, "--json"], capsys)
    assert code == 0
    data: dict[str, Any] = json.loads(out)
    return data


def same_quote(found: dict[str, Any], expected: dict[str, Any]) -> bool:
    """Equal, ``at_median_error`` to 0.01 ms: the test divides the JSON's metrics (rounded to 4 decimals), the plan
    its own."""
    close = all(abs(found["at_median_error"][k] - v) < 0.01 for k, v in expected["at_median_error"].items())
    strip = {"at_median_error": None}
    return close and {**found, **strip} == {**expected, **strip}


def stored(mode: str, engine: str) -> dict[str, Any]:
    from shardplan.hardware.measured_error import MEASURED_ERROR_FILE

    figures: dict[str, Any] = json.loads(MEASURED_ERROR_FILE.read_text(encoding="utf-8"))[mode][engine]
    return figures


def quoted(figures: dict[str, Any], in_flight: int, metrics: dict[str, Any],
           limits: tuple[float | None, float | None] = (None, None)) -> dict[str, Any]:
    """What a plan at ``in_flight`` requests quotes of an engine's stored figures: the whole, the band that holds
    ``in_flight`` (found here by hand: the bands' ends are inclusive, the last one open), and the plan's TTFT and TPOT
    were they off as the band's median run (measured = predicted / (1 + error)), against the (TTFT, TPOT) limits."""
    holding = [b for b in figures["bands"] if b["low"] <= in_flight and (b["high"] is None or in_flight <= b["high"])]
    band = holding[0] if holding else None
    basis = band or figures
    at_median = {"ttft_ms": round(metrics["ttft_ms"] / (1 + basis["ttft"]["median"]), 3),
                 "tpot_ms": round(metrics["tpot_ms"] / (1 + basis["tpot"]["median"]), 3)}
    over = [k for k, limit in zip(("ttft_ms", "tpot_ms"), limits, strict=True) if limit and at_median[k] > limit]
    whole = {k: v for k, v in figures.items() if k != "bands"}
    return {**whole, "in_flight": in_flight, "band": band, "at_median_error": at_median, "over_limit": over}


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_a_colocated_plan_quotes_its_engines_one_pool_figures(engine, capsys):
    data = as_json(["solve", *LLAMA_8B, "--cluster", "8xH100", "--engine", engine, "--batch", "64"], capsys)
    found = data["measured_error"]
    figures = stored("colocated", engine)
    assert data["metrics"]["batch"] == 64 and found["band"] is not None and found["band"]["low"] == 17
    assert same_quote(found, {"serving": "colocated", "engine": engine, "gpu_measured": "H100-SXM" in figures["gpus"],
                              **quoted(figures, 64, data["metrics"])})


def test_a_load_no_run_was_measured_at_says_so(capsys):
    # The one-pool runs were measured at 2 or more requests in flight: a latency plan at batch 1 has no band.
    data = as_json(["solve", *LLAMA_8B, "--cluster", "8xH100", "--engine", "vllm"], capsys)
    assert data["metrics"]["batch"] == 1 and data["measured_error"]["band"] is None
    code, out, _ = run(["solve", *LLAMA_8B, "--cluster", "8xH100", "--engine", "vllm"], capsys)
    assert code == 0 and "no run at 1 in flight" in out


def test_the_terminal_line_carries_the_same_figures(capsys):
    figures = stored("colocated", "sglang")
    code, out, _ = run(["solve", *LLAMA_8B, "--cluster", "8xH200", "--engine", "sglang"], capsys)
    assert code == 0
    line = next(x for x in out.splitlines() if "measured error" in x)
    assert f"SGLang, one pool, on {figures['runs']} runs" in line
    assert f"TTFT {figures['ttft']['median_abs']:.0%}, TPOT {figures['tpot']['median_abs']:.0%}" in line


def test_a_gpu_no_run_was_measured_on_is_said(capsys):
    data = as_json(["solve", *LLAMA_8B, "--cluster", "8xL40S", "--engine", "vllm"], capsys)
    assert data["profile"] == "l40s+vllm" and data["measured_error"]["gpu_measured"] is False
    code, out, _ = run(["solve", *LLAMA_8B, "--cluster", "8xL40S", "--engine", "vllm"], capsys)
    assert code == 0 and "none on this GPU" in out


def test_a_gpu_priced_with_another_gpus_profiles_is_not_called_measured(capsys):
    # H800 is priced with H100's profiles (the same die, a slower NVLink); no run was measured on it.
    data = as_json(["solve", *LLAMA_8B, "--cluster", "8xH800", "--engine", "vllm"], capsys)
    assert data["profile"] == "h100-sxm-vllm" and "H100-SXM" in data["measured_error"]["gpus"]
    assert data["measured_error"]["gpu_measured"] is False


def test_a_profile_named_by_the_user_gets_no_figures(capsys):
    # The figures are of the engines' default profiles: an older generation's or a table profile's plans are not
    # what they measured.
    for profile in ("h100-sxm", "h100-sxm-trtllm-0.14"):
        data = as_json(["solve", *LLAMA_8B, "--cluster", "8xH100", "--profile", profile], capsys)
        assert data["profile"] == profile and data["measured_error"] is None
    code, out, _ = run(["solve", *LLAMA_8B, "--cluster", "8xH100", "--profile", "h100-sxm"], capsys)
    assert code == 0 and "measured error" not in out


def test_naming_the_engines_default_profile_keeps_the_figures(capsys):
    data = as_json(["solve", *LLAMA_8B, "--cluster", "8xH100", "--engine", "trtllm", "--profile",
                    "h100-sxm-trtllm"], capsys)
    assert data["measured_error"] is not None and data["measured_error"]["engine"] == "trtllm"


def test_a_disaggregated_plan_quotes_the_disaggregated_figures(capsys):
    data = as_json(["evaluate", *LLAMA_8B[:-1], "--cluster", "8xH100", "--engine", "trtllm", "--serving", "disagg",
                    "--prefill", "workers=2,tp=2", "--decode", "workers=1,tp=4", "--batch", "16"], capsys)
    figures = stored("disagg", "trtllm")
    assert data["metrics"]["batch"] == 16  # requests in flight over the deployment
    assert same_quote(data["measured_error"], {"serving": "disagg", "engine": "trtllm",
                                               "gpu_measured": "H100-SXM" in figures["gpus"],
                                               **quoted(figures, 16, data["metrics"])})
    code, out, _ = run(["evaluate", *LLAMA_8B[:-1], "--cluster", "8xH100", "--engine", "trtllm", "--serving", "disagg",
                     "--prefill", "workers=2,tp=2", "--decode", "workers=1,tp=4", "--batch", "16"], capsys)
    assert code == 0 and f"TensorRT-LLM, disaggregated, on {figures['runs']} runs" in out


def test_a_limit_the_plan_would_break_off_as_the_median_run_is_said(capsys):
    # TensorRT-LLM's disaggregated TTFT ran a median 54 % fast at 2-16 in flight: a TTFT limit 20 % above this
    # deployment's prediction is kept as predicted and broken at the median error.
    pools = ["--cluster", "8xH100", "--engine", "trtllm", "--serving", "disagg", "--prefill", "workers=2,tp=2",
             "--decode", "workers=1,tp=4", "--batch", "16"]
    free = as_json(["evaluate", *LLAMA_8B[:-1], *pools], capsys)
    limit = round(free["metrics"]["ttft_ms"] * 1.2)
    data = as_json(["evaluate", *LLAMA_8B[:-1], *pools, "--ttft-ms", str(limit)], capsys)
    figures = stored("disagg", "trtllm")
    found = data["measured_error"]
    assert data["violations"] == []  # within the limit as predicted
    assert same_quote(found, {"serving": "disagg", "engine": "trtllm", "gpu_measured": "H100-SXM" in figures["gpus"],
                              **quoted(figures, 16, data["metrics"], (limit, None))})
    assert found["over_limit"] == ["ttft_ms"] and found["at_median_error"]["ttft_ms"] > limit
    code, out, _ = run(["evaluate", *LLAMA_8B[:-1], *pools, "--ttft-ms", str(limit)], capsys)
    assert code == 0 and "off as its median run, TTFT would be" in out and "over the limit" in out


def test_auto_marks_each_mode_whose_plan_would_break_a_limit_at_the_median_error(capsys):
    # The modes' errors differ: each row of the both-modes table says so where its own measured_error breaks a limit.
    argv = ["solve", "--model", "llama-3.1-70b", "--weights-dtype", "fp8", "--cluster", "8xH200", "--engine", "trtllm",
            "--isl", "4000", "--osl", "500", "--ttft-ms", "2000", "--tpot-ms", "50", "--serving", "auto"]
    data = as_json(argv, capsys)
    code, out, _ = run(argv, capsys)
    rows = out.split("both modes:")[1].splitlines()
    assert code == 0
    for mode in ("colocated", "disagg"):
        found = data["modes"][mode]["measured_error"]
        row = next(r for r in rows if r.strip().startswith(mode))
        assert ("over its limit at the median error" in row) == bool(found["over_limit"])
        if "ttft_ms" in found["over_limit"]:
            assert f"TTFT would be {found['at_median_error']['ttft_ms']:,.0f} ms" in row.split("median error")[1]
    assert data["modes"]["disagg"]["measured_error"]["over_limit"] == ["ttft_ms"]  # 1,952 ms planned, 2,407 at it
