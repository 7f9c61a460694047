"""The planner's small scenario matrix: dense and MoE presets, both objectives, 4 to 32 GPUs.

Small enough for the brute-force oracle to finish in seconds (it scores every integer batch, so the
throughput scenarios cap the engine's batch limit, except one on a single GPU where memory binds); the benchmark
(benchmarks/solve_vs_bruteforce) runs the larger ones.
"""

from __future__ import annotations

SCENARIOS = [
    dict(model="llama-3.1-8b", cluster="4xH100", objective="latency"),
    dict(model="llama-3.1-8b", cluster="4xH100", objective="throughput", max_batch=96),
    dict(model="llama-3.1-8b", cluster="1xH100", objective="throughput"),
    dict(model="llama-3.1-8b", cluster="4xH100", objective="latency", batch=8),
    dict(model="llama-3.1-70b", cluster="8xH100", objective="latency"),
    dict(model="llama-3.1-70b", cluster="8xH100", objective="throughput", max_batch=64),
    dict(
        model="llama-3.1-70b", cluster="8xH100", objective="throughput", mem_cap_gib=60.0, tpot_ms=60.0, max_batch=128
    ),
    dict(model="mixtral-8x7b", cluster="8xH100", objective="latency"),
    dict(model="mixtral-8x7b", cluster="8xH100", objective="throughput", max_batch=48),
    dict(model="qwen3-30b-a3b", cluster="2x8xH100", objective="latency"),
    dict(model="gpt-oss-120b", cluster="4xH100", objective="throughput", max_batch=64),
    dict(model="deepseek-v3", cluster="4x8xH200", objective="latency"),
]


def scenario_id(s: dict) -> str:
    return "-".join(str(v) for v in s.values())
