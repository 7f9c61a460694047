"""Random but realistic problems for the promises sweep, and the command line's small helpers.

Every problem is a ``shardplan solve`` argument list a user could type: a preset model, 8-128 GPUs of
H100, H200 or B200 (the four largest models on two nodes or more), ISL and OSL, an engine, a serving mode,
sometimes ``--rate``, TTFT/TPOT limits, a memory cap, FP8 KV cache or weights. A latency objective goes
only with ``--serving colocated`` and no ``--rate`` (the other combinations are bad input by design).
"""

from __future__ import annotations

import random
import subprocess
import sys

SMALL = ["llama-3.1-8b", "mistral-7b", "qwen3-30b-a3b", "mixtral-8x7b", "gpt-oss-120b", "qwen3-32b"]
MID = ["llama-3.1-70b", "llama-3.3-70b", "mixtral-8x22b", "llama-4-scout", "qwen3-235b-a22b", "llama-2-70b"]
BIG = ["deepseek-v3", "llama-3.1-405b", "llama-4-maverick", "kimi-k2"]
FP8_CHECKPOINTS = ("deepseek-v3", "kimi-k2")  # already FP8: --weights-dtype fp8 changes nothing
CLI = [sys.executable, "-m", "shardplan.solver.cli"]


def problem(rng: random.Random) -> list[str]:
    """One problem's ``solve`` arguments (no output options)."""
    nodes = rng.choice([1, 1, 2, 2, 4, 8, 16])
    model = rng.choice(SMALL + MID + (BIG if nodes >= 2 else []))
    args = ["--model", model, "--cluster", f"{nodes}x8x{rng.choice(['H100', 'H200', 'B200'])}",
            "--isl", str(rng.choice([128, 512, 1024, 2000, 4000, 8000])),
            "--osl", str(rng.choice([64, 128, 256, 500, 1000]))]
    serving = rng.choice(["colocated", "colocated", "disagg", "auto"])
    rate = rng.random() < 0.3
    if rate:
        args += ["--rate", str(rng.choice([0.5, 1, 2, 5, 10, 20]))]
    named = not rate or rng.random() < 0.5  # --rate alone plans colocated layouts
    if named:
        args += ["--serving", serving]
    objective = rng.choice(["latency", "throughput", "throughput"])
    if rate or (named and serving != "colocated"):
        objective = "throughput"
    args += ["--objective", objective, "--engine", rng.choice(["vllm", "sglang", "trtllm"])]
    if rng.random() < 0.5:
        args += ["--ttft-ms", str(rng.choice([300, 500, 1000, 2000, 5000]))]
    if rng.random() < 0.5:
        args += ["--tpot-ms", str(rng.choice([10, 20, 30, 50, 100]))]
    if rng.random() < 0.25:
        args += ["--mem-cap-gib", str(rng.choice([40, 60, 100]))]
    if rng.random() < 0.3:
        args += ["--kv-dtype", "fp8"]
    if rng.random() < 0.3 and model not in FP8_CHECKPOINTS:
        args += ["--weights-dtype", "fp8"]
    return args


def problems(seed: int, count: int) -> list[list[str]]:
    rng = random.Random(seed)
    return [problem(rng) for _ in range(count)]


def opt(args: list[str], name: str) -> str | None:
    """The value of option ``name`` in ``args``, or None."""
    return args[args.index(name) + 1] if name in args else None


def without(args: list[str], *names: str) -> list[str]:
    """``args`` less the options ``names`` and their values."""
    out: list[str] = []
    skip = False
    for item in args:
        if skip:
            skip = False
        elif item in names:
            skip = True
        else:
            out.append(item)
    return out


def run(argv: list[str], timeout_s: float = 600) -> tuple[int, str, str]:
    """``shardplan ARGV`` in its own process: exit code, stdout, stderr."""
    done = subprocess.run([*CLI, *argv], capture_output=True, text=True, timeout=timeout_s)
    return done.returncode, done.stdout, done.stderr
