"""Expert placement benchmark: greedy vs ``place_experts`` vs the proven lower bound.

Cases: DeepSeek-V3 (256 experts, 58 MoE layers) and Qwen3-235B-A22B (128 experts, 94 MoE layers), both
top-8, on 32, 64, 144 and 256 GPUs; uniform, Zipf(0.5) and Zipf(1.0) loads; three slot budgets:

- none:  slots = ceil(E / G)      (E not divisible by G leaves ceil(E/G)*G - E spare slots; they are used)
- 32:    slots = ceil((E + 32) / G)  (the fewest slots per GPU giving at least 32 redundant slots)
- 1/GPU: slots = ceil(E / G) + 1

Per case, over all layers: the worst layer's max/mean for greedy and ours, the bound (as max/mean) of
the layer with the largest gap, that gap, the status and the wall time of ``place_experts``.
Then the timed case: all 58 DeepSeek-V3 layers on 256 GPUs with one redundant slot per GPU, sequential
and with a two-process pool.
"""

from __future__ import annotations

import argparse
import math
import time
from concurrent.futures import ProcessPoolExecutor

from shardplan.models import get_model
from shardplan.models.load_profile import ExpertLoadProfile, uniform_profile, zipf_profile
from shardplan.solver.placement import check_placement, greedy_placement, place_experts

MODELS = (("DeepSeek-V3", "deepseek-v3"), ("Qwen3-235B", "qwen3-235b-a22b"))
GPU_COUNTS = (32, 64, 144, 256)
SHAPES = (("uniform", None), ("zipf0.5", 0.5), ("zipf1.0", 1.0))
BATCH_TOKENS = 4096  # tokens per step; each is routed to top-k experts


def slot_budgets(experts: int, gpus: int) -> list[tuple[str, int]]:
    return [
        ("none", math.ceil(experts / gpus)),
        ("32", math.ceil((experts + 32) / gpus)),
        ("1/GPU", math.ceil(experts / gpus) + 1),
    ]


def make_profile(experts: int, layers: list[int], top_k: int, exponent: float | None) -> ExpertLoadProfile:
    tokens = BATCH_TOKENS * top_k
    if exponent is None:
        return uniform_profile(experts, layers, tokens)
    return zipf_profile(experts, layers, exponent, tokens, seed=0)


def run_case(profile: ExpertLoadProfile, gpus: int, slots: int, time_limit: float) -> dict:
    greedy = greedy_placement(profile, gpus, slots)
    ours = place_experts(profile, gpus, slots, time_limit_s=time_limit)
    violations = check_placement(ours, profile) + check_placement(greedy, profile)
    ours_r, greedy_r = ours.max_over_mean(profile), greedy.max_over_mean(profile)
    bound_r = ours.bound_over_mean(profile)
    # One ratio per MoE layer in each list, so they must pair up exactly.
    gaps = [max(0.0, o / b - 1) if b > 0 else 0.0 for o, b in zip(ours_r, bound_r, strict=True)]  # -1e-16 is rounding
    worst = max(range(len(gaps)), key=gaps.__getitem__)
    return {
        "greedy": max(greedy_r), "ours": max(ours_r), "bound": bound_r[worst], "gap": 100 * max(gaps, default=0.0),
        "status": ours.status, "time": ours.solve_time_s, "violations": len(violations),
        "worse": sum(o > g * (1 + 1e-12) for o, g in zip(ours_r, greedy_r, strict=True)),
    }


def _place_one(args):
    profile, gpus, slots = args
    return place_experts(profile, gpus, slots)


def timed_case(pool_workers: int) -> None:
    spec = get_model("deepseek-v3")
    layers = list(spec.moe.layers)
    experts, gpus = spec.moe.num_experts, 256
    slots = math.ceil(experts / gpus) + 1
    print(f"\nTimed: DeepSeek-V3, {len(layers)} MoE layers, {experts} experts on {gpus} GPUs, {slots} slots/GPU")
    for name, exponent in SHAPES:
        profile = make_profile(experts, layers, spec.moe.experts_per_token, exponent)
        start = time.perf_counter()
        placed = place_experts(profile, gpus, slots)
        wall = time.perf_counter() - start
        worst = max(placed.max_over_mean(profile))
        print(f"  {name:8} sequential {wall:6.2f} s  max/mean {worst:.6f}  {placed.status}")
        if pool_workers > 1:
            parts = [(ExpertLoadProfile(num_experts=experts, layers=(layer,), loads=(row,)), gpus, slots)
                     for layer, row in zip(profile.layers, profile.loads, strict=True)]
            start = time.perf_counter()
            with ProcessPoolExecutor(max_workers=pool_workers) as pool:
                results = list(pool.map(_place_one, parts))
            wall = time.perf_counter() - start
            print(f"  {name:8} {pool_workers}-process pool {wall:6.2f} s  (same placements: "
                  f"{all(r.layers[0] == placed.layers[i] for i, r in enumerate(results))})")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.expert_placement", description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=0, help="use only the first N MoE layers (0 = all)")
    parser.add_argument("--time-limit", type=float, default=10.0, help="place_experts time_limit_s per case")
    parser.add_argument("--pool", type=int, default=2, help="processes for the pool timing (1 = skip)")
    args = parser.parse_args()
    header = (f"{'model':11} {'GPUs':>4} {'loads':8} {'redund.':7} {'slots':>5} {'greedy':>8} {'ours':>8} "
              f"{'bound':>8} {'gap %':>6} {'status':8} {'time s':>7}")
    print("max/mean of the worst layer; bound = lower bound / mean of the layer with the largest gap")
    print(header)
    print("-" * len(header))
    problems = 0
    for label, preset in MODELS:
        spec = get_model(preset)
        layers = list(spec.moe.layers)[: args.layers or None]
        experts = spec.moe.num_experts
        for gpus in GPU_COUNTS:
            for shape, exponent in SHAPES:
                profile = make_profile(experts, layers, spec.moe.experts_per_token, exponent)
                for budget, slots in slot_budgets(experts, gpus):
                    row = run_case(profile, gpus, slots, args.time_limit)
                    problems += row["violations"] + row["worse"]
                    print(f"{label:11} {gpus:4d} {shape:8} {budget:7} {slots:5d} {row['greedy']:8.4f} "
                          f"{row['ours']:8.4f} {row['bound']:8.4f} {row['gap']:6.2f} {row['status']:8} "
                          f"{row['time']:7.2f}", flush=True)
    print(f"\ncheck_placement violations + layers worse than greedy: {problems}")
    timed_case(args.pool)


if __name__ == "__main__":
    main()
