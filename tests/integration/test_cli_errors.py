"""Bad invocations: one line on stderr, exit 2 for bad input and 1 for an infeasible problem, never a
traceback, nothing on stdout and no file written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BAD_INPUT, INFEASIBLE = 2, 1
LLAMA_8B = ["--model", "llama-3.1-8b", "--cluster", "1xH100"]

CASES = [
    # (id, arguments, exit code, a word the message must contain)
    ("unknown-model", ["solve", "--model", "no-such-model"], BAD_INPUT, "unknown model"),
    ("malformed-config", ["solve", "--model", "{bad_json}"], BAD_INPUT, "not valid JSON"),
    ("config-missing-fields", ["solve", "--model", "{thin_json}"], BAD_INPUT, "num_attention_heads"),
    ("missing-config-file", ["solve", "--model", "{missing_json}"], BAD_INPUT, "cannot read"),
    ("unknown-gpu", ["solve", "--cluster", "8xB999"], BAD_INPUT, "unknown GPU"),
    ("zero-gpus", ["solve", "--cluster", "0xH100"], BAD_INPUT, "positive"),
    ("banana-cluster", ["solve", "--cluster", "banana"], BAD_INPUT, "cannot read"),
    ("too-many-per-node", ["solve", "--cluster", "2x16xH100"], BAD_INPUT, "at most 8"),
    ("negative-isl", ["solve", "--isl", "-5"], BAD_INPUT, "isl"),
    ("isl-not-a-number", ["solve", "--isl", "abc"], BAD_INPUT, "not a valid integer"),
    ("context-too-long", ["solve", "--isl", "200000"], BAD_INPUT, "context"),
    ("zero-batch", ["solve", "--batch", "0"], BAD_INPUT, "batch"),
    ("negative-mem-cap", ["solve", "--mem-cap-gib", "-1"], BAD_INPUT, "mem-cap-gib"),
    ("infinite-mem-cap", ["solve", "--mem-cap-gib", "inf"], BAD_INPUT, "finite"),
    ("nan-tpot", ["solve", "--tpot-ms", "nan"], BAD_INPUT, "tpot-ms"),
    ("unknown-objective", ["solve", "--objective", "fastest"], BAD_INPUT, "objective"),
    ("unknown-allow", ["solve", "--allow", "nonsense"], BAD_INPUT, "unknown switch"),
    # evaluate runs no search, which was the only place the switch was checked: priced as if not given (exit 0)
    ("evaluate-unknown-allow", ["evaluate", *LLAMA_8B, "--allow", "nonsense"], BAD_INPUT, "unknown switch"),
    ("evaluate-disagg-unknown-allow", ["evaluate", "--model", "llama-3.1-8b", "--cluster", "8xH100", "--serving",
                                       "disagg", "--prefill", "workers=1", "--decode", "workers=1", "--allow", "x"],
     BAD_INPUT, "unknown switch"),
    # TensorRT-LLM needs CUDA: a plan with its launch commands for an AMD GPU could never run (exit 0 before)
    ("trtllm-on-amd", ["solve", "--model", "llama-3.1-8b", "--cluster", "1xMI300X", "--engine", "trtllm"], BAD_INPUT,
     "engine: TensorRT-LLM runs on NVIDIA GPUs only; MI300X is an AMD GPU"),
    ("evaluate-disagg-trtllm-on-amd", ["evaluate", "--model", "llama-3.1-8b", "--cluster", "8xMI300X", "--serving",
                                       "disagg", "--prefill", "workers=1", "--decode", "workers=1", "--emit", "trtllm"],
     BAD_INPUT, "engine: TensorRT-LLM runs on NVIDIA GPUs only"),
    ("malformed-stages", ["solve", "--stages", "0-30"], BAD_INPUT, "START:END"),
    ("stages-not-covering", ["evaluate", *LLAMA_8B, "--stages", "0:10,10:20"], BAD_INPUT, "cover"),
    ("zero-tp", ["solve", "--tp", "0"], BAD_INPUT, "tp"),
    # expert-tp on a dense model: a plan or pool printed "expert_tp": 2, a degree nothing in it has (exit 0)
    ("dense-expert-tp", ["solve", "--model", "llama-3.1-8b", "--cluster", "2xH100", "--tp", "2", "--expert-tp", "2",
                         "--allow", "expert-tp"], BAD_INPUT, "expert-tp: meta-llama/Llama-3.1-8B has no MoE layers"),
    ("dense-pool-expert-tp", ["evaluate", "--model", "llama-3.1-8b", "--cluster", "8xH100", "--serving", "disagg",
                              "--prefill", "workers=1,tp=2,expert_tp=2", "--decode", "workers=1", "--allow",
                              "expert-tp"], BAD_INPUT, "prefill expert-tp: meta-llama/Llama-3.1-8B has no MoE"),
    ("nonsense-weights-dtype", ["solve", "--weights-dtype", "nonsense"], BAD_INPUT, "unknown dtype"),
    ("fp4-kv-cache", ["solve", "--kv-dtype", "fp4"], BAD_INPUT, "not supported"),
    # an empty dtype was read as none given: the checkpoint's weights, a 16-bit cache, exit 0
    ("empty-weights-dtype", ["evaluate", *LLAMA_8B, "--weights-dtype", ""], BAD_INPUT, "weights-dtype: unknown dtype"),
    ("empty-kv-dtype", ["evaluate", *LLAMA_8B, "--kv-dtype", ""], BAD_INPUT, "kv-dtype: unknown dtype"),
    ("unknown-profile", ["solve", "--profile", "nonexistent"], BAD_INPUT, "unknown profile"),
    ("unknown-engine", ["solve", "--emit", "tgi"], BAD_INPUT, "--emit"),
    ("unknown-engine-option", ["evaluate", *LLAMA_8B, "--engine", "tgi"], BAD_INPUT, "--engine"),
    ("emit-other-engine", ["solve", *LLAMA_8B, "--engine", "vllm", "--emit", "sglang"], BAD_INPUT, "--engine vllm"),
    ("profile-file-not-json", ["evaluate", *LLAMA_8B, "--profile", "{bad_json}"], BAD_INPUT, "not valid JSON"),
    ("profile-file-not-a-profile", ["evaluate", *LLAMA_8B, "--profile", "{thin_json}"], BAD_INPUT, "profile name"),
    ("report-into-missing-dir", ["solve", "--report", "{missing_dir}/plan.html"], BAD_INPUT, "does not exist"),
    ("enumerate-report-into-missing-dir", ["enumerate", *LLAMA_8B, "--report", "{missing_dir}/x.html"], BAD_INPUT,
     "does not exist"),
    ("report-is-a-directory", ["solve", "--report", "{tmp}"], BAD_INPUT, "directory"),
    # realpath("") is the current folder: calibrate wrote its profiles there (exit 0), --dag said "is a directory"
    ("calibrate-out-empty", ["calibrate", "{bad_json}", "--out", ""], BAD_INPUT, "out: an empty path"),
    ("dag-empty", ["solve", *LLAMA_8B, "--dag", ""], BAD_INPUT, "dag: an empty path"),
    ("zero-time-limit", ["solve", "--time-limit", "0"], BAD_INPUT, "time-limit"),
    ("negative-work-limit", ["solve", "--work-limit", "-1"], BAD_INPUT, "work-limit"),
    ("work-limit-not-a-number", ["solve", "--work-limit", "abc"], BAD_INPUT, "--work-limit"),
    ("enumerate-nan-work-limit", ["enumerate", "--work-limit", "nan"], BAD_INPUT, "work-limit"),
    ("zero-enumerate-limit", ["enumerate", "--limit", "0"], BAD_INPUT, "limit"),
    ("unknown-option", ["solve", "--frobnicate"], BAD_INPUT, "No such option"),
    # an option given twice: click kept the last value (tp 8 planned, exit 0); test_repeated_options.py has more
    ("repeated-option", ["solve", "--tp", "4", "--tp", "8"], BAD_INPUT, "tp: given 2 times"),
    ("repeated-flag-pair", ["solve", *LLAMA_8B, "--runner-up", "--no-runner-up", "--report", "{tmp}/plan.html"],
     BAD_INPUT, "runner-up: given 2 times"),
    ("unknown-command", ["plan-it"], BAD_INPUT, "No such command"),
    ("no-command", [], BAD_INPUT, "command: none given; one of calibrate,"),  # was the whole --help on one line
    ("empty-rule-id", ["rules", "", "--json"], BAD_INPUT, "unknown rule ''"),  # printed GPU-001, exit 0
    ("infeasible-memory", ["solve", "--model", "llama-3.1-70b", "--cluster", "1xH100"], INFEASIBLE, "MEM-001"),
    ("infeasible-with-emit-and-report", ["solve", "--model", "llama-3.1-70b", "--cluster", "1xH100", "--emit", "vllm",
                                         "--report", "{tmp}/plan.html"], INFEASIBLE, "MEM-001"),
    ("infeasible-ttft", ["solve", *LLAMA_8B, "--ttft-ms", "0.001"], INFEASIBLE, "SLA-001"),
    ("infeasible-pin", ["solve", "--tp", "3"], INFEASIBLE, "TP-001"),
    ("infeasible-enumeration", ["enumerate", *LLAMA_8B, "--mem-cap-gib", "1"], INFEASIBLE, "MEM-001"),
]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, str]:
    files = tmp_path_factory.mktemp("inputs")
    (files / "bad.json").write_text('{"architectures": ["LlamaForCausalLM"], "hidden_size": ')
    (files / "thin.json").write_text('{"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 4}')
    return {
        "bad_json": str(files / "bad.json"),
        "thin_json": str(files / "thin.json"),
        "missing_json": str(files / "absent" / "config.json"),
        "missing_dir": str(files / "no" / "such" / "dir"),
    }


@pytest.mark.parametrize("case_id, args, code, word", CASES, ids=[c[0] for c in CASES])
def test_bad_invocation_is_one_line_and_an_exit_code(tmp_path, inputs, case_id, args, code, word):
    work = tmp_path / "cwd"
    work.mkdir()
    values = {**inputs, "tmp": str(work)}
    argv = [a.format(**values) for a in args]
    env = {k: v for k, v in os.environ.items() if k != "SHARDPLAN_DEBUG"}
    done = subprocess.run([sys.executable, "-m", "shardplan.solver.cli", *argv], capture_output=True, text=True,
                          cwd=work, env=env, timeout=300)
    lines = done.stderr.splitlines()
    assert done.returncode == code, (done.returncode, done.stderr)
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("shardplan: ") and "Traceback" not in done.stderr
    assert "internal error" not in lines[0]
    assert word in lines[0], lines[0]
    assert done.stdout == ""
    assert list(Path(work).iterdir()) == []  # wrote nothing


def test_at_least_fifteen_cases():
    assert len(CASES) >= 15
    assert {code for _, _, code, _ in CASES} == {BAD_INPUT, INFEASIBLE}
