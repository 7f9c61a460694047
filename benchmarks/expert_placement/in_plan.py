"""What a placement changes in a plan's prediction: one layout priced with the greedy placement and with
``place_experts`` (``python -m benchmarks.expert_placement.in_plan``).

Each row pins a layout (attention DP over the EP ranks, a fixed batch) with Zipf(1.0) routing and ``K``
redundant slots per GPU, and prints both placements' worst max/mean and the predicted TPOT and output
tokens/s; "uniform" is the same layout with uniform routing and no redundant slot, for reference.
"""

from __future__ import annotations

from shardplan.solver.cli.inputs import ProblemArgs, build_problem, layout_from_pins
from shardplan.solver.placement import greedy_placement
from shardplan.solver.placement.plan import place_and_price, place_experts_in_budget

ROWS = (  # (model, cluster, EP ranks, batch, redundant slots per GPU)
    ("deepseek-v3", "2x8xH200", 16, 4096, 1),
    ("deepseek-v3", "8x8xH200", 64, 8192, 1),
    ("qwen3-235b-a22b", "4x8xH100", 32, 4096, 1),
    ("deepseek-v3", "2x8xH200", 16, 4096, 0),
)


def _problem(model: str, cluster: str, ep: int, batch: int, **kw):
    return build_problem(ProblemArgs(model=model, cluster=cluster, pins={"attn_dp": ep}, batch=batch, **kw))


def main() -> None:
    print(f"{'model':16} {'cluster':9} {'ep':>3} {'batch':>6} {'K':>2} {'greedy':>7} {'ours':>7} "
          f"{'TPOT uniform':>12} {'TPOT greedy':>11} {'TPOT ours':>10} {'tok/s greedy':>12} {'tok/s ours':>10}")
    for model, cluster, ep, batch, spare in ROWS:
        uniform = _problem(model, cluster, ep, batch)
        reference = place_and_price(uniform, layout_from_pins(uniform), place_experts_in_budget)[1]
        problem = _problem(model, cluster, ep, batch, zipf=1.0, redundant_slots=spare)
        layout = layout_from_pins(problem)
        g_layout, greedy, _ = place_and_price(problem, layout, greedy_placement)
        o_layout, ours, _ = place_and_price(problem, layout, place_experts_in_budget)
        print(f"{model:16} {cluster:9} {ep:3d} {batch:6d} {spare:2d} {max(g_layout.moe_load_factor):7.4f} "
              f"{max(o_layout.moe_load_factor):7.4f} {reference.metrics.tpot_ms:9.3f} ms "
              f"{greedy.metrics.tpot_ms:8.3f} ms {ours.metrics.tpot_ms:7.3f} ms "
              f"{greedy.metrics.output_tokens_per_s:12,.0f} {ours.metrics.output_tokens_per_s:10,.0f}", flush=True)


if __name__ == "__main__":
    main()
