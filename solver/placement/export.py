"""Placements as JSON for serving engines' expert-location loaders.

``placement_to_json`` is shardplan's own document (``format: shardplan.expert_placement/1``):

    {"format": "shardplan.expert_placement/1",
     "num_gpus": G, "slots_per_gpu": S, "num_physical_experts": G * S,
     "layers": [3, 4, ...],                           # MoE layer indices, one row per entry below
     "physical_to_logical_map": [[e, e, ...], ...],   # [layer][physical slot] -> logical expert id
     "shares": [[f, f, ...], ...],                    # [layer][physical slot] -> share of that expert's tokens
     "lower_bounds": [...], "status": "optimal" | "feasible"}

Physical slots are GPU-major: slot ``g * S + i`` is slot ``i`` of EP rank ``g``. An empty slot is -1 with
share 0 (``place_experts`` fills every slot when there are at least ``S`` experts, so engines that need a
full map get one). The shares of one expert over its slots sum to 1; a router that splits an expert's
tokens by these shares reaches the planned per-GPU loads.

Engines read narrower formats, produced by the two helpers below:

- SGLang ``--init-expert-location FILE.json`` passes the file's keys as arguments, so the file must hold
  only ``{"physical_to_logical_map": [[...]]}`` with one row per *model* layer (dense layers included);
  ``num_physical_experts`` must be divisible by the EP size. Its dispatcher picks among a logical
  expert's copies by itself (a copy on the same GPU, else a fair random choice), so it does not use the
  shares: with SGLang the copies of an expert get about equal traffic.
- TensorRT-LLM ``moe_config.load_balancer.initial_global_assignments`` takes ``{layer: [expert id per
  slot]}`` and ``num_slots`` (slots over all ranks).
"""

from __future__ import annotations

from typing import Any

from shardplan.models.errors import SpecError
from shardplan.rules.expert_placement import ExpertPlacement, PlanPlacement

FORMAT = "shardplan.expert_placement/1"


def placement_to_json(placement: ExpertPlacement) -> dict[str, Any]:
    """The placement as a JSON-ready dict (format in the module docstring)."""
    slots = placement.slots_per_gpu
    return {
        "format": FORMAT,
        "num_gpus": placement.num_gpus,
        "slots_per_gpu": slots,
        "num_physical_experts": placement.num_gpus * slots,
        "layers": [p.layer for p in placement.layers],
        "physical_to_logical_map": [p.physical_to_logical(slots) for p in placement.layers],
        "shares": [[round(s, 12) for s in p.slot_shares(slots)] for p in placement.layers],
        "lower_bounds": list(placement.lower_bounds),
        "status": placement.status,
    }


def sglang_expert_location(placement: ExpertPlacement, num_layers: int, num_experts: int) -> dict[str, Any]:
    """``{"physical_to_logical_map": ...}`` for SGLang's ``--init-expert-location``.

    Rows cover all ``num_layers`` model layers; a layer without a placement (dense) gets the trivial map
    ``slot % num_experts``, which SGLang never reads for a dense layer.
    """
    slots = placement.slots_per_gpu
    physical = placement.num_gpus * slots
    rows = [[slot % num_experts for slot in range(physical)] for _ in range(num_layers)]
    for placed in placement.layers:
        if not 0 <= placed.layer < num_layers:
            raise SpecError("num_layers", f"layer {placed.layer} is outside the model's {num_layers} layers")
        row = placed.physical_to_logical(slots)
        if -1 in row:
            raise SpecError("slots_per_gpu", f"layer {placed.layer} has empty slots; SGLang needs every slot mapped")
        rows[placed.layer] = row
    return {"physical_to_logical_map": rows}


def trtllm_initial_assignments(placement: ExpertPlacement) -> dict[str, Any]:
    """``{"num_slots": ..., "initial_global_assignments": {layer: [expert per slot]}}`` for TensorRT-LLM."""
    slots = placement.slots_per_gpu
    assignments: dict[int, list[int]] = {}
    for placed in placement.layers:
        row = placed.physical_to_logical(slots)
        if -1 in row:
            raise SpecError("slots_per_gpu",
                            f"layer {placed.layer} has empty slots; TensorRT-LLM needs every slot mapped")
        assignments[placed.layer] = row
    return {"num_slots": placement.num_gpus * slots, "initial_global_assignments": assignments}


def plan_placement_to_json(experts: PlanPlacement) -> dict[str, Any]:
    """The full map for ``--experts-out``: ``placement_to_json`` over every MoE layer of the model
    (one row per MoE layer, one entry per physical slot, slot ``g * S + i`` = slot ``i`` of EP
    rank ``g`` of the layer's stage), plus where each stage's EP ranks are."""
    whole = experts.whole()
    doc = placement_to_json(whole)
    ratios = experts.max_over_mean()
    doc.update({
        "routing": experts.routing,
        "method": experts.method,
        "redundant_slots": experts.redundant_slots,
        "max_over_mean": [ratios[p.layer] for p in whole.layers],
        "stage_of_layer": [experts.stage_of(p.layer).index for p in whole.layers],
        "stages": [{"index": st.index, "ep_rank_gpus": [list(g) for g in st.ep_rank_gpus]} for st in experts.stages],
        "replicas": experts.replicas,
        "gpus_per_replica": experts.gpus_per_replica,
        "replica_gpu_offset": "replica r runs the same map on GPU ids + r * gpus_per_replica",
    })
    return doc
