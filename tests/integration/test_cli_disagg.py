"""``shardplan evaluate --serving disagg``: the JSON contract, violations and exit 1, bad input in one line
and exit 2, and the colocated path untouched by the new options."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from shardplan.hardware.profile import ENGINES, profile_for_gpu
from shardplan.solver.cli.main import main

LLAMA_8B = ["--model", "llama-3.1-8b", "--isl", "1000", "--osl", "100"]
POOLS = ["--serving", "disagg", "--prefill", "workers=2,tp=2", "--decode", "workers=1,tp=4"]


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def evaluate_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code, out, err = run(["evaluate", *argv, "--json"], capsys)
    assert err == ""
    return code, json.loads(out)


def test_the_json_carries_both_pools_and_the_metrics_at_the_concurrency(capsys: pytest.CaptureFixture[str]) -> None:
    code, data = evaluate_json([*LLAMA_8B, "--cluster", "2x8xH100", *POOLS, "--batch", "32"], capsys)
    assert code == 0 and data["violations"] == []
    assert data["serving"] == "disagg" and data["num_gpus"] == 8
    assert data["prefill"]["workers"] == 2 and data["prefill"]["degrees"]["tp"] == 2
    assert data["prefill"]["gpus"] == [0, 3] and data["decode"]["gpus"] == [4, 7]
    assert data["decode"]["stages"] == [{"index": 0, "layers": [0, 32], "gpus": [4, 5, 6, 7]}]
    m = data["metrics"]
    assert m["batch"] == 32
    for key in ("ttft_ms", "tpot_ms", "e2e_ms", "output_tokens_per_s", "output_tokens_per_s_per_gpu",
                "output_tokens_per_s_per_user"):
        assert m[key] > 0
    assert m["output_tokens_per_s"] == pytest.approx(32 * 100 / (m["e2e_ms"] / 1e3), rel=0.01)  # Little's law
    assert m["output_tokens_per_s_per_gpu"] == pytest.approx(m["output_tokens_per_s"] / 8, rel=1e-3)
    assert m["output_tokens_per_s_per_user"] == pytest.approx(1000 / m["tpot_ms"], rel=1e-3)
    assert data["kv_transfer"]["bytes_per_prompt"] == 1000 * 131072


def test_same_input_same_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["evaluate", *LLAMA_8B, "--cluster", "2x8xH100", *POOLS, "--batch", "64", "--json"]
    assert run(argv, capsys)[1] == run(argv, capsys)[1]


def test_violations_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    code, data = evaluate_json([*LLAMA_8B, "--cluster", "1x4xH100", *POOLS, "--tpot-ms", "0.1"], capsys)
    assert code == 1
    rules = [v["rule"] for v in data["violations"]]
    assert "DIS-001" in rules and "SLA-002" in rules


BAD = [
    (["--prefill", "workers=0,tp=2"], "prefill workers"),
    (["--prefill", "tp=two"], "prefill tp"),
    (["--prefill", "colour=red"], "prefill colour"),
    (["--prefill", "tp=2,tp=4"], "prefill tp"),
    (["--prefill", "tp"], "prefill"),
    (["--decode", "tp=4,stages=0:10,10:20"], "decode stages"),
    (["--decode", "tp=4,ep=2"], "decode ep"),
    (["--decode", "tp=4,pp=2,stages=0:32"], "decode"),
    (["--decode", "tp=4,batch=0"], "decode batch"),
]


@pytest.mark.parametrize("change,field", BAD, ids=[f for _, f in BAD])
def test_bad_pool_values_name_the_field_and_exit_2(
    change: list[str], field: str, capsys: pytest.CaptureFixture[str]
) -> None:
    pools = {"--prefill": "workers=1,tp=2", "--decode": "tp=4"}
    pools[change[0]] = change[1]
    argv = ["evaluate", *LLAMA_8B, "--serving", "disagg", *(x for kv in pools.items() for x in kv)]
    code, out, err = run(argv, capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"shardplan: error: {field}")


@pytest.mark.parametrize("argv,field", [
    (["--serving", "disagg", "--prefill", "tp=2"], "decode"),
    (["--serving", "disagg", "--tp", "2", "--prefill", "tp=2", "--decode", "tp=2"], "tp"),
    (["--prefill", "tp=2"], "prefill"),
    (["--serving", "both"], "Invalid value for '--serving'"),
])
def test_options_that_do_not_go_together_exit_2(argv: list[str], field: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["evaluate", *LLAMA_8B, *argv], capsys)
    assert code == 2 and out == "" and field in err and err.count("\n") == 1


def test_colocated_is_the_default_and_unchanged(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["evaluate", *LLAMA_8B, "--cluster", "8xH100", "--tp", "2", "--json"]
    plain = run(base, capsys)
    explicit = run([*base, "--serving", "colocated"], capsys)
    assert plain == explicit and plain[0] == 0
    assert "serving" not in json.loads(plain[1])


def test_a_pool_batch_limit_is_a_key(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*LLAMA_8B, "--cluster", "2x8xH100", "--serving", "disagg", "--prefill", "workers=2,tp=2",
            "--decode", "workers=1,tp=4,batch=4", "--batch", "64"]
    code, data = evaluate_json(argv, capsys)
    assert code == 0 and data["decode"]["batch"] == 4 and data["metrics"]["bottleneck"] == "decode"


def test_the_dag_is_written_and_validates(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "plan.json"
    argv = ["evaluate", *LLAMA_8B, "--cluster", "8xH100", *POOLS, "--batch", "8", "--dag", str(path)]
    code, out, _ = run(argv, capsys)
    assert code == 0 and f"wrote {path}" in out
    code, out, _ = run(["validate", str(path), "--json"], capsys)
    assert code == 0 and json.loads(out)["valid"] is True


def test_emit_prints_the_launch_script(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["evaluate", *LLAMA_8B, "--cluster", "8xH100", *POOLS, "--emit", "trtllm"], capsys)
    assert code == 0 and out.startswith("# TensorRT-LLM") and "trtllm-serve disaggregated" in out


def test_dag_and_emit_need_disagg_here(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    code, out, err = run(["evaluate", *LLAMA_8B, "--dag", str(tmp_path / "x.json")], capsys)
    assert code == 2 and out == "" and "dag" in err and not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("engine", ENGINES)
def test_the_json_names_the_engine_and_the_profile_that_priced_it(
        engine: str, capsys: pytest.CaptureFixture[str]) -> None:
    # DESIGN.md's contract lists `profile` and `engine` among the keys every plan's JSON carries; the
    # disaggregated JSON named the profile only. The profile is the engine's own for the GPU.
    code, data = evaluate_json([*LLAMA_8B, "--cluster", "2x8xH100", *POOLS, "--batch", "32", "--engine", engine],
                               capsys)
    assert code == 0
    assert data["engine"] == engine
    assert data["profile"] == profile_for_gpu("H100-SXM", engine).name
    assert "solve_time_s" in data and data["solve_time_s"] is None  # nothing solved, as colocated evaluate says


@pytest.mark.parametrize("batch", [1, 64, 2000])
def test_the_ttft_parts_printed_add_up_to_the_ttft(batch: int, capsys: pytest.CaptureFixture[str]) -> None:
    # TTFT = e2e - (OSL - 1) x TPOT = the serving stack's fixed cost per request + waiting + prefill + KV
    # transfer (+ re-layout) + the decode worker's admission (solver/cost/disagg.py). The human line and the
    # JSON named every part but the serving stack (h100-sxm-vllm's request_overhead_ms, 81 ms), so what they
    # printed summed to 81 ms short of the TTFT they printed (of its 96.6 ms TTFT at one request in flight).
    argv = [*LLAMA_8B, "--cluster", "2x8xH100", *POOLS, "--batch", str(batch)]
    code, data = evaluate_json(argv, capsys)
    assert code == 0
    m, kv = data["metrics"], data["kv_transfer"]
    assert m["request_overhead_ms"] == profile_for_gpu("H100-SXM", "vllm").request_overhead_ms == 81.0
    parts = (m["request_overhead_ms"], m["waiting_ms"], data["prefill"]["prefill_ms"], kv["transfer_ms"],
             kv["relayout_ms"], m["admission_ms"])
    assert sum(parts) == pytest.approx(m["ttft_ms"], abs=1e-3)
    code, out, _ = run(["evaluate", *argv], capsys)
    line = next(x for x in out.splitlines() if x.strip().startswith("TTFT"))
    shown = re.search(r"TTFT ([\d.]+) ms \(serving stack ([\d.]+), waiting ([\d.]+), prefill ([\d.]+), "
                      r"KV transfer ([\d.]+) over \w+, decode admission ([\d.]+)\)", line)
    assert shown is not None, line
    total, *pieces = (float(x) for x in shown.groups())
    assert sum(pieces) == pytest.approx(total, abs=0.2)  # five parts, each rounded to 0.1 ms (KV to 0.01)
