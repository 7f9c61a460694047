"""Expert placement for MoE inference: which EP rank hosts which experts, balanced on routing loads,
with a proven lower bound per layer. ``place_experts`` is the entry point; see ``place.py``."""

from shardplan.rules.expert_placement import ExpertPlacement, LayerPlacement
from shardplan.rules.experts import check_placement
from shardplan.solver.placement.bounds import layer_lower_bound
from shardplan.solver.placement.export import placement_to_json, sglang_expert_location, trtllm_initial_assignments
from shardplan.solver.placement.place import greedy_placement, place_experts

__all__ = [
    "ExpertPlacement", "LayerPlacement", "check_placement", "greedy_placement", "layer_lower_bound",
    "place_experts", "placement_to_json", "sglang_expert_location", "trtllm_initial_assignments",
]
