"""A --profile fitted on another GPU than the cluster's is accepted (users calibrate on one GPU and price a
lookalike with it) and said: a note on stderr beside the result, and ``notes`` in the JSON. It was silent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shardplan.hardware.profile import PROFILE_DIR
from tests.fuzz.cases import Case
from tests.fuzz.harness import run_in_process

NOTE = ("profile h100-sxm-vllm was fitted on H100-SXM, not on this cluster's H200-SXM: its efficiencies and "
        "overheads are applied to H200-SXM's peak rates, bandwidths and memory")
H200 = ["--model", "llama-3.1-8b", "--cluster", "1xH200"]


def _run(tmp_path: Path, argv: list[str], files: dict[str, bytes] | None = None) -> tuple[int, str, str]:
    outcome = run_in_process(Case(argv[0], argv, files or {}), tmp_path)
    return outcome.code, outcome.stdout, outcome.stderr


@pytest.mark.parametrize("argv", [
    ["solve", *H200, "--no-runner-up", "--json"],
    ["evaluate", *H200, "--json"],
    ["evaluate", "--model", "llama-3.1-8b", "--cluster", "2xH200", "--serving", "disagg", "--prefill", "workers=1",
     "--decode", "workers=1", "--json"],
], ids=["solve", "evaluate", "evaluate-disagg"])
def test_a_profile_of_another_gpu_is_noted_in_the_json_and_on_stderr(tmp_path, argv) -> None:
    code, out, err = _run(tmp_path, [*argv, "--profile", "h100-sxm-vllm"])
    assert code == 0 and json.loads(out)["notes"] == [NOTE]
    assert err == f"shardplan: note: {NOTE}\n"


def test_a_profile_file_of_another_gpu_is_noted_beside_the_human_view(tmp_path) -> None:
    profile = (PROFILE_DIR / "h100-sxm-vllm.json").read_bytes()
    argv = ["solve", *H200, "--no-runner-up", "--profile", "{dir}/p.json"]
    code, out, err = _run(tmp_path, argv, {"p.json": profile})
    assert code == 0 and "calibration profile h100-sxm-vllm" in out and err == f"shardplan: note: {NOTE}\n"


# Not vLLM's own H200 profile: its weight stream gets a note of its own for a dense model (test_slow_stream_note.py).
@pytest.mark.parametrize("profile",
                         [["--engine", "trtllm"], ["--profile", "h200-sxm-sglang"], ["--profile", "generic"]],
                         ids=["default", "own-gpu", "any-gpu"])
def test_a_profile_of_the_clusters_gpu_or_of_any_gpu_says_nothing(tmp_path, profile) -> None:
    code, out, err = _run(tmp_path, ["evaluate", *H200, "--json", *profile])
    assert code == 0 and "notes" not in json.loads(out) and err == ""


def test_a_profile_file_of_a_gpu_no_preset_holds_is_bad_input(tmp_path) -> None:
    """A file whose ``gpu`` names no preset ('H999') was priced with a note claiming it was fitted on H999; it is a
    typo or a made-up file, so bad input: one line naming the field and the value, exit 2, no plan."""
    profile = json.loads((PROFILE_DIR / "h100-sxm-vllm.json").read_bytes()) | {"gpu": "H999"}
    argv = ["solve", *H200, "--no-runner-up", "--json", "--profile", "{dir}/p.json"]
    code, out, err = _run(tmp_path, argv, {"p.json": json.dumps(profile).encode()})
    assert code == 2 and out == "" and err.count("\n") == 1
    assert err.startswith("shardplan: error: profile gpu: ") and "p.json: 'H999' is not a known GPU; known: " in err
