"""Expert placement for every MoE layer: the public entry points ``place_experts`` and ``greedy_placement``.

Per layer (layers are independent and solved one after another, deterministically):

1. The greedy baseline (``greedy.py``) — the result is never worse than it.
2. ``E <= (S - 1) G + 1`` (one redundant slot per GPU is enough): one group filled exactly to the mean
   (``fill.py``); the mean is the lower bound, so the layer is optimal. ``S = 1``: the greedy's
   water-filling is exact.
3. Otherwise several groups are needed (``groups.py``): LPT over groups with local search, the
   bin-covering split (``covering.py``), with two slots the partner/pair cover, and the greedy's
   copies with LP-optimal shares (``shares.py``); the best wins. Lower bounds from ``bounds.py``; if
   the gap stays open, CP-SAT (``cpsat.py``) proves or improves small layers and layers without a
   spare slot, within the time budget.
4. Free slots are padded with zero-share copies so engines that need every slot mapped get a full map.

With ``gpus_per_node`` the objective is hierarchical: experts are first balanced over nodes (a node is
one "GPU" with the slots of all its GPUs), then each node's share is balanced over its GPUs.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence

from shardplan.models.errors import SpecError
from shardplan.models.load_profile import ExpertLoadProfile
from shardplan.rules.expert_placement import ExpertPlacement, LayerPlacement
from shardplan.solver.placement.bounds import layer_lower_bound
from shardplan.solver.placement.covering import cover_split
from shardplan.solver.placement.fill import Pieces, fill_group, fits_in_one_group
from shardplan.solver.placement.greedy import greedy_layer
from shardplan.solver.placement.groups import Group, best_lpt_groups, improve, pair_cover, realize, reallocate

OPTIMAL_TOLERANCE = 1e-6  # relative: a layer within this of its bound counts as optimal
_SMALL_LAYER = 12  # experts: up to this, CP-SAT's exact split can prove optimality quickly


def place_experts(
    profile: ExpertLoadProfile,
    num_gpus: int,
    slots_per_gpu: int,
    *,
    gpus_per_node: int | None = None,
    time_limit_s: float = 10.0,
    workers: int = 1,
) -> ExpertPlacement:
    """Place every MoE layer's experts on ``num_gpus`` EP ranks with ``slots_per_gpu`` slots each.

    Minimises each layer's most-loaded GPU (with ``gpus_per_node``: its most-loaded node first), proves
    a lower bound per layer, and never does worse than ``greedy_placement``. ``time_limit_s`` caps the
    CP-SAT work over all layers (as deterministic time, so the result does not depend on machine
    speed); ``workers`` is the CP-SAT worker count (1 or 2 on a small machine).

    >>> from shardplan.models.load_profile import ExpertLoadProfile
    >>> p = ExpertLoadProfile(num_experts=3, layers=(0,), loads=((6.0, 3.0, 3.0),))
    >>> placed = place_experts(p, 2, 2)
    >>> placed.status, placed.max_over_mean(p)
    ('optimal', [1.0])
    """
    _check_sizes(profile, num_gpus, slots_per_gpu, gpus_per_node)
    start = time.perf_counter()
    per_layer = max(time_limit_s, 0.0) / len(profile.layers)
    layers: list[LayerPlacement] = []
    bounds: list[float] = []
    optimal = True
    for layer, loads in zip(profile.layers, profile.loads, strict=True):
        if gpus_per_node and gpus_per_node < num_gpus:
            pieces, bound = _solve_hierarchical(loads, num_gpus, slots_per_gpu, gpus_per_node, per_layer, workers)
        else:
            pieces, bound = solve_layer(loads, num_gpus, slots_per_gpu, per_layer, workers)
        placed = _to_layer(layer, _pad(pieces, loads, slots_per_gpu), loads)
        optimal &= placed.max_load(loads) <= bound * (1 + OPTIMAL_TOLERANCE)
        layers.append(placed)
        bounds.append(bound)
    return ExpertPlacement(
        num_gpus=num_gpus,
        slots_per_gpu=slots_per_gpu,
        layers=tuple(layers),
        lower_bounds=tuple(bounds),
        status="optimal" if optimal else "feasible",
        solve_time_s=time.perf_counter() - start,
    )


def greedy_placement(profile: ExpertLoadProfile, num_gpus: int, slots_per_gpu: int) -> ExpertPlacement:
    """The greedy baseline for every layer: equal shares, flat over the GPUs (no node level), instant."""
    _check_sizes(profile, num_gpus, slots_per_gpu, None)
    start = time.perf_counter()
    layers: list[LayerPlacement] = []
    bounds: list[float] = []
    optimal = True
    for layer, loads in zip(profile.layers, profile.loads, strict=True):
        gpu_experts, bound, met = _greedy_layer_placed(tuple(loads), num_gpus, slots_per_gpu)
        optimal &= met
        layers.append(LayerPlacement(layer=layer, gpu_experts=gpu_experts))
        bounds.append(bound)
    return ExpertPlacement(num_gpus, slots_per_gpu, tuple(layers), tuple(bounds),
                           "optimal" if optimal else "feasible", time.perf_counter() - start)


@functools.lru_cache(maxsize=256)  # a few MB at most: uniform routing needs one entry per (ep, slots)
def _greedy_layer_placed(loads: tuple[float, ...], num_gpus: int, slots: int,
                         ) -> tuple[tuple[tuple[tuple[int, float], ...], ...], float, bool]:
    """One layer's greedy placement as (per GPU, its (expert, share) slots), its proven lower bound, and
    whether it meets that bound. A function of the loads alone: under uniform routing every layer of
    every stage of every layout an enumeration places has the same loads (11,280 greedy layers were 12 of
    40 s of a Qwen3-235B enumeration on 16x8xA100)."""
    placed = _to_layer(0, greedy_layer(loads, num_gpus, slots), loads)
    achieved = placed.max_load(loads)
    bound = layer_lower_bound(loads, num_gpus, slots, feasible=achieved)
    return placed.gpu_experts, bound, achieved <= bound * (1 + OPTIMAL_TOLERANCE)


def _check_sizes(profile: ExpertLoadProfile, num_gpus: int, slots: int, gpus_per_node: int | None) -> None:
    if not isinstance(num_gpus, int) or num_gpus < 1:
        raise SpecError("num_gpus", f"expected a positive integer, got {num_gpus!r}")
    if not isinstance(slots, int) or slots < 1:
        raise SpecError("slots_per_gpu", f"expected a positive integer, got {slots!r}")
    if slots * num_gpus < profile.num_experts:
        raise SpecError(
            "slots_per_gpu",
            f"{num_gpus} GPUs x {slots} slots = {slots * num_gpus} < {profile.num_experts} experts; "
            f"need at least {-(-profile.num_experts // num_gpus)} slots per GPU",
        )
    if gpus_per_node is not None and (gpus_per_node < 1 or num_gpus % gpus_per_node):
        raise SpecError("gpus_per_node", f"{gpus_per_node} does not divide {num_gpus} GPUs")


def solve_layer(loads: Sequence[float], num_gpus: int, slots: int, det_time: float = 0.0,
                workers: int = 1) -> tuple[Pieces, float]:
    """Pieces per GPU (expert, tokens) of one layer and a proven lower bound on its max load."""
    greedy = best = greedy_layer(loads, num_gpus, slots)
    best_max = _max(best)
    total = sum(loads)
    if total <= 0:
        return best, 0.0
    if slots >= 2 and fits_in_one_group(len(loads), num_gpus, slots):
        filled = fill_group(list(enumerate(loads)), num_gpus, slots)
        # Both reach the mean up to rounding; keep the greedy when rounding favours it.
        return (filled if _max(filled) < best_max else best), total / num_gpus
    if slots == 1:
        return best, layer_lower_bound(loads, num_gpus, slots)
    start_bound = layer_lower_bound(loads, num_gpus, slots)

    def offer(pieces: Pieces | None) -> None:
        nonlocal best, best_max
        if pieces is not None and _max(pieces) < best_max * (1 - 1e-12):
            best, best_max = pieces, _max(pieces)

    split = best_lpt_groups(loads, num_gpus, slots, reference=start_bound)
    if split is not None:
        improve(split, loads, slots)
        reallocate(split, loads, num_gpus, slots)
        offer(realize(split, loads, slots))
    covers = [cover_split(loads, num_gpus, start_bound, best_max, slots)]
    if slots == 2:
        covers.append(pair_cover(loads, num_gpus, start_bound, best_max))
    for cover in covers:
        if cover is not None:
            offer(realize(cover, loads, slots))
    if len(loads) < slots * num_gpus:  # with copies to re-share
        # Lazily on purpose: OR-Tools' LP solver loads only for layers with copies (see _cpsat_phase).
        from shardplan.solver.placement.shares import reshare

        offer(reshare(loads, [[e for e, _ in gpu] for gpu in greedy]))
    bound = layer_lower_bound(loads, num_gpus, slots, feasible=best_max)
    if best_max > bound * (1 + OPTIMAL_TOLERANCE) and det_time > 0:
        bound, pieces = _cpsat_phase(loads, num_gpus, slots, split, bound, det_time, workers)
        offer(pieces)
    return best, bound


def _cpsat_phase(
    loads: Sequence[float], num_gpus: int, slots: int, hint: list[Group] | None, bound: float, det_time: float,
    workers: int,
) -> tuple[float, Pieces | None]:
    """CP-SAT's bound and placement for a layer the heuristics left within a gap, where it is quick:
    small layers (exact split) and layers without a spare slot (whole experts)."""
    # Lazily on purpose: OR-Tools' CP-SAT (it imports pandas and numpy) is a large share of a short
    # command's start-up, and most placements end before this phase.
    from shardplan.solver.placement import cpsat

    if len(loads) <= _SMALL_LAYER:
        result = cpsat.exact_split(loads, num_gpus, slots, hint, det_time, workers)
    elif len(loads) == slots * num_gpus:
        result = cpsat.assign_whole(loads, num_gpus, slots, hint, det_time, workers)
    else:
        return bound, None
    pieces = realize(result.groups, loads, slots) if result.groups else None
    return max(bound, result.bound), pieces


def _solve_hierarchical(
    loads: Sequence[float], num_gpus: int, slots: int, per_node: int, det_time: float, workers: int
) -> tuple[Pieces, float]:
    """Balance nodes first (a node = one GPU with the slots of all its GPUs), then GPUs in each node."""
    nodes = num_gpus // per_node
    # With a spare slot per GPU the nodes take at most (S-1) * per_node + 1 experts each, so that each
    # node can in turn be balanced exactly over its GPUs.
    node_slots = (slots - 1) * per_node + 1 if fits_in_one_group(len(loads), num_gpus, slots) else slots * per_node
    node_pieces, _ = solve_layer(loads, nodes, node_slots, det_time / 2, workers)
    out: Pieces = []
    for node in node_pieces:
        experts = [e for e, _ in node]
        inner, _ = solve_layer([w for _, w in node], per_node, slots, det_time / (2 * nodes), workers)
        out.extend([[(experts[i], w) for i, w in gpu] for gpu in inner])
    bound = layer_lower_bound(loads, num_gpus, slots, feasible=_max(out))
    greedy = greedy_layer(loads, num_gpus, slots)
    if _node_key(greedy, per_node) < _node_key(out, per_node):
        out = greedy
    return out, bound


def _node_key(pieces: Pieces, per_node: int) -> tuple[float, float]:
    gpu = [sum(w for _, w in p) for p in pieces]
    node = [sum(gpu[i:i + per_node]) for i in range(0, len(gpu), per_node)]
    return (round(max(node), 9), round(max(gpu), 9))


def _max(pieces: Pieces) -> float:
    return max((sum(w for _, w in gpu) for gpu in pieces), default=0.0)


def _pad(pieces: Pieces, loads: Sequence[float], slots: int) -> Pieces:
    """Fill free slots with zero-share copies of the experts with the highest load per copy."""
    copies = [0] * len(loads)
    for gpu in pieces:
        for e, _ in gpu:
            copies[e] += 1
    order = sorted(range(len(loads)), key=lambda e: (-loads[e] / max(copies[e], 1), e))
    out: Pieces = []
    for gpu in pieces:
        gpu = list(gpu)
        have = {e for e, _ in gpu}
        for e in order:
            if len(gpu) >= slots:
                break
            if e not in have:
                gpu.append((e, 0.0))
                have.add(e)
        out.append(gpu)
    return out


def _to_layer(layer: int, pieces: Pieces, loads: Sequence[float]) -> LayerPlacement:
    """Turn token amounts into shares (fractions of each expert's tokens), GPU slots ordered by expert."""
    served = [0.0] * len(loads)
    copies = [0] * len(loads)
    for gpu in pieces:
        for e, w in gpu:
            served[e] += w
            copies[e] += 1
    gpus: list[tuple[tuple[int, float], ...]] = []
    for gpu in pieces:
        merged: dict[int, float] = {}
        for e, w in gpu:
            merged[e] = merged.get(e, 0.0) + w
        gpus.append(tuple(
            (e, w / served[e] if served[e] > 0 else 1.0 / copies[e]) for e, w in sorted(merged.items())
        ))
    return LayerPlacement(layer=layer, gpu_experts=tuple(gpus))
