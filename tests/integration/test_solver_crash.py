"""Issue 14's crash: a memory cap of 1e9 GiB overflowed CP-SAT's 2^62 in MEM-001's rows, the model was
invalid, and reading its empty solution crashed OR-Tools (SIGSEGV), looped, or raised TypeError."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

REPRODUCER = ["solve", "--model", "llama-3.1-8b", "--cluster", "8xH100", "--mem-cap-gib", "1e9", "--json"]


@pytest.mark.parametrize("run", range(3))
def test_a_huge_memory_cap_solves_like_no_cap(run: int) -> None:
    cmd = [sys.executable, "-m", "shardplan.solver.cli", *REPRODUCER]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    capped = json.loads(result.stdout)
    assert capped["status"] == "optimal"
    roomy = subprocess.run([*cmd[:-2], "1e4", "--json"], capture_output=True, text=True, timeout=120)
    assert json.loads(roomy.stdout)["degrees"] == capped["degrees"]
    assert json.loads(roomy.stdout)["metrics"] == capped["metrics"]


@pytest.mark.parametrize("flag", ["--tpot-ms", "--ttft-ms"])
def test_limits_past_64_bits_bind_nothing(flag: str) -> None:
    base = [sys.executable, "-m", "shardplan.solver.cli", "solve", "--model", "llama-3.1-8b", "--cluster", "2xH100",
            "--objective", "throughput", "--json"]
    huge = subprocess.run([*base, flag, "1e13"], capture_output=True, text=True, timeout=120)
    plain = subprocess.run(base, capture_output=True, text=True, timeout=120)
    assert huge.returncode == 0, huge.stderr
    assert json.loads(huge.stdout)["metrics"] == json.loads(plain.stdout)["metrics"]


def test_an_infeasible_32768_gpu_problem_is_explained_not_crashed() -> None:
    """robust16: the explanation's encoding overflowed 64 bits on 4096x8xH200 (exit 3, TypeError from
    CP-SAT's Domain) after the search had proven the TPOT limit unreachable. Exit 1 naming the limit's rule,
    whether or not the time limit let it narrow the set."""
    cmd = [sys.executable, "-m", "shardplan.solver.cli", "solve", "--model", "qwen3-30b-a3b", "--cluster",
           "4096x8xH200", "--objective", "throughput", "--tpot-ms", "5", "--isl", "128", "--osl", "2",
           "--mem-cap-gib", "20", "--time-limit", "5", "--json"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 1, result.stderr
    assert "SLA-002" in [c["rule"] for c in json.loads(result.stdout)["conflict"]]
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
