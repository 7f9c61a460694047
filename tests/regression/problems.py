"""Stored problems for the regression suite: the README's examples and twenty more.

Each entry is the argument list of one ``shardplan solve --json`` run. Its expected output lives in
``expected/<name>.json``, written by ``python -m tests.regression.record`` from the code as it stood
when the entry was added; the regression test compares every field but the timing ones.
"""

from __future__ import annotations

PROBLEMS: dict[str, list[str]] = {
    # The README's worked examples.
    "readme-default": [],
    "readme-throughput-cap": ["--model", "llama-3.1-70b", "--cluster", "2x8xH100", "--objective", "throughput",
                              "--mem-cap-gib", "60"],
    "readme-infeasible": ["--model", "deepseek-v3", "--cluster", "8xH100"],
    # Twenty more: dense and MoE, both objectives, limits, pins, routing profiles.
    "llama8b-4xh100-latency": ["--model", "llama-3.1-8b", "--cluster", "4xH100"],
    "llama8b-4xh100-throughput": ["--model", "llama-3.1-8b", "--cluster", "4xH100", "--objective", "throughput"],
    "llama8b-4xh100-batch8": ["--model", "llama-3.1-8b", "--cluster", "4xH100", "--batch", "8"],
    "llama70b-8xh100-latency": ["--model", "llama-3.1-70b", "--cluster", "8xH100"],
    "llama70b-8xh100-throughput": ["--model", "llama-3.1-70b", "--cluster", "8xH100", "--objective", "throughput"],
    "llama70b-8xh100-sla": ["--model", "llama-3.1-70b", "--cluster", "8xH100", "--objective", "throughput",
                            "--mem-cap-gib", "60", "--tpot-ms", "60"],
    "llama70b-8xh200-long": ["--model", "llama-3.1-70b", "--cluster", "8xH200", "--objective", "throughput",
                             "--isl", "4000", "--osl", "500", "--tpot-ms", "50"],
    "llama70b-pinned-pp2": ["--model", "llama-3.1-70b", "--cluster", "8xH100", "--tp", "4", "--pp", "2",
                            "--stages", "0:40,40:80"],
    "llama405b-2x8xh100-latency": ["--model", "llama-3.1-405b", "--cluster", "2x8xH100"],
    "mixtral8x7b-8xh100-latency": ["--model", "mixtral-8x7b", "--cluster", "8xH100"],
    "mixtral8x7b-8xh100-throughput": ["--model", "mixtral-8x7b", "--cluster", "8xH100", "--objective", "throughput"],
    "mixtral8x22b-8xh200-throughput": ["--model", "mixtral-8x22b", "--cluster", "8xH200", "--objective",
                                       "throughput"],
    "qwen3-30b-2x8xh100-latency": ["--model", "qwen3-30b-a3b", "--cluster", "2x8xH100"],
    "qwen3-30b-zipf-redundant": ["--model", "qwen3-30b-a3b", "--cluster", "8xH100", "--objective", "throughput",
                                 "--zipf", "1.2", "--redundant-slots", "1"],
    "qwen3-32b-4xh100-ttft": ["--model", "qwen3-32b", "--cluster", "4xH100", "--objective", "throughput",
                              "--ttft-ms", "500"],
    "gpt-oss-120b-4xh100-throughput": ["--model", "gpt-oss-120b", "--cluster", "4xH100", "--objective",
                                       "throughput"],
    "deepseek-v3-4x8xh200-latency": ["--model", "deepseek-v3", "--cluster", "4x8xH200"],
    "deepseek-v3-4x8xh200-throughput": ["--model", "deepseek-v3", "--cluster", "4x8xH200", "--objective",
                                        "throughput"],
    "qwen3-235b-2x8xh200-throughput": ["--model", "qwen3-235b-a22b", "--cluster", "2x8xH200", "--objective",
                                       "throughput", "--isl", "4000", "--osl", "500"],
    "llama4-scout-8xh100-latency": ["--model", "llama-4-scout", "--cluster", "8xH100"],
    "mistral7b-2xa100-throughput": ["--model", "mistral-7b", "--cluster", "2xA100", "--objective", "throughput"],
}
