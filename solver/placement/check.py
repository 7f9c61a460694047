"""Independent checks of a placement against its profile: the rules any placement must keep.

Returns human-readable violations and never repairs anything; shares with the solver only the data types.
"""

from __future__ import annotations

import math

from shardplan.models.load_profile import ExpertLoadProfile
from shardplan.solver.placement.result import ExpertPlacement

SHARE_TOLERANCE = 1e-6


def check_placement(placement: ExpertPlacement, profile: ExpertLoadProfile) -> list[str]:
    """Violations of: one placement per profile layer; every expert hosted at least once; at most
    ``slots_per_gpu`` experts per GPU; copies of one expert on distinct GPUs; shares of each expert
    non-negative and summing to 1; the lower bound not above the achieved load. Empty when all hold.
    """
    found: list[str] = []
    placed_layers = [p.layer for p in placement.layers]
    if placed_layers != list(profile.layers):
        found.append(f"layers {placed_layers} do not match the profile's {list(profile.layers)}")
    if len(placement.lower_bounds) != len(placement.layers):
        found.append(f"{len(placement.lower_bounds)} lower bounds for {len(placement.layers)} layers")
    if placement.status not in ("optimal", "feasible"):
        found.append(f"unknown status {placement.status!r}")
    wanted = set(profile.layers)
    for placed, bound in zip(placement.layers, placement.lower_bounds):
        if placed.layer not in wanted:
            continue
        loads = profile.layer_loads(placed.layer)
        found.extend(_check_layer(placed, loads, placement.num_gpus, placement.slots_per_gpu, bound))
    return found


def _check_layer(placed, loads, num_gpus: int, slots: int, bound: float) -> list[str]:
    layer = placed.layer
    found: list[str] = []
    if placed.num_gpus != num_gpus:
        found.append(f"layer {layer}: {placed.num_gpus} GPUs, expected {num_gpus}")
    num_experts = len(loads)
    share_sum = [0.0] * num_experts
    for g, gpu in enumerate(placed.gpu_experts):
        if len(gpu) > slots:
            found.append(f"layer {layer}: GPU {g} hosts {len(gpu)} experts, more than {slots} slots")
        ids = [e for e, _ in gpu]
        if len(ids) != len(set(ids)):
            found.append(f"layer {layer}: GPU {g} hosts expert {_first_repeat(ids)} twice")
        for e, share in gpu:
            if not 0 <= e < num_experts:
                found.append(f"layer {layer}: GPU {g} hosts unknown expert {e}")
                continue
            if not (math.isfinite(share) and share >= 0):
                found.append(f"layer {layer}: GPU {g} has share {share} for expert {e}")
                continue
            share_sum[e] += share
    hosted = {e for gpu in placed.gpu_experts for e, _ in gpu}
    for e in range(num_experts):
        if e not in hosted:
            found.append(f"layer {layer}: expert {e} is not hosted")
        elif abs(share_sum[e] - 1.0) > SHARE_TOLERANCE:
            found.append(f"layer {layer}: shares of expert {e} sum to {share_sum[e]:.9f}, not 1")
    achieved = placed.max_load(loads)
    if bound > achieved * (1 + 1e-9) + 1e-9:
        found.append(f"layer {layer}: lower bound {bound:.6g} above the achieved max load {achieved:.6g}")
    return found


def _first_repeat(ids: list[int]) -> int:
    seen: set[int] = set()
    for e in ids:
        if e in seen:
            return e
        seen.add(e)
    return -1
