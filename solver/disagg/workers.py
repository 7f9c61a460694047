"""The worker layouts a disaggregated deployment may use, each priced once for its role.

A **prefill candidate** is one worker layout (a stage shape the rules allow, a stage count, even stage
boundaries) at its largest chunk (the engine's token budget over ISL, within its batch limit): its
capacity in prompts per second per worker. A **decode candidate** is a worker layout at its batch ``b``
(the most sequences one worker holds, its ``max_batch``): the largest its memory holds whose round
keeps the TPOT limit (the decode batch that keeps TPOT within its limit, DESIGN.md "Cost model"), and
its capacity in requests per second per worker. A smaller batch limit is not offered: it would only
lower the pool's capacity (a pool that needs less runs at less anyway), never its TPOT bound; the one
thing it could buy, a lower rate and so a shorter prefill chunk for TTFT, fewer prefill workers buy too.
Every price is read from ``solver/cost/disagg.py``'s own
``prefill_step`` and ``decode_step`` (``evaluate`` on one worker), so a deployment built from these
candidates is priced by ``evaluate_disagg`` at exactly these capacities.

Stage boundaries are even (a pool's workers are replicas; the colocated solver's boundary search is
not repeated per pool), and a worker has at most ``MAX_WORKER_GPUS`` GPUs (wide-EP decode workers of
production deployments span up to 64-144 GPUs; 64 keeps a 512-GPU search within its time).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from shardplan.hardware.profile import Profile
from shardplan.rules.base import ShapeRule
from shardplan.rules.catalog import rules_for
from shardplan.rules.disagg import alignment_gpus
from shardplan.rules.layout import Layout
from shardplan.rules.problem import Problem
from shardplan.solver.cost.disagg import decode_step, largest_chunk, prefill_step, role_problem
from shardplan.solver.cost.evaluate import NS_PER_S, max_batch
from shardplan.solver.space import SearchSpace

MAX_WORKER_GPUS = 64
RATE_UNITS_PER_RPS = 1_000_000  # the search compares rates in whole micro-requests per second


def rate_units(rps: float) -> int:
    """A rate in whole micro-requests per second, rounded down (never more than the pool sustains)."""
    return int(rps * RATE_UNITS_PER_RPS)


@dataclass(frozen=True)
class PrefillWorker:
    layout: Layout  # dp 1, batch 1: the shape the pool replicates
    chunk: int  # prompts per step at full load
    pass_ns: int  # one chunk through every stage: the prompt's prefill at full load
    first_pass_ns: int  # one prompt alone: the least prefill any load gives (a bound on TTFT)
    capacity_units: int  # one worker's prompts per second, in rate units

    @property
    def gpus(self) -> int:
        return self.layout.gpus_per_replica


@dataclass(frozen=True)
class DecodeWorker:
    layout: Layout
    batch: int  # the most sequences one worker holds (its engine batch limit)
    round_ns: int
    capacity_units: int  # one worker's finished requests per second at that batch, in rate units

    @property
    def gpus(self) -> int:
        return self.layout.gpus_per_replica


def worker_layouts(problem: Problem, role: str, profile: Profile) -> Iterator[Layout]:
    """Every (shape, stage count) the shape rules allow for ``role``, even stages, at most
    ``MAX_WORKER_GPUS`` GPUs and the cluster's, in the search space's order."""
    space = SearchSpace(role_problem(problem, role, 1), profile)
    judged = role_problem(problem, role, 1)
    shape_rules = [r for r in rules_for(judged) if isinstance(r, ShapeRule)]
    top = min(MAX_WORKER_GPUS, problem.cluster.num_gpus)
    layers = problem.model.num_layers
    for o in space.shapes:
        if any(rule.forbids(judged, o) for rule in shape_rules):
            continue
        for stages in space.stage_values:
            if stages * o.gpus > top or stages > layers:
                continue
            yield Layout.even(layers, stages, tp=o.tp, sp=o.sp, attn_dp=o.attn_dp, expert_tp=o.expert_tp, batch=1)


def prefill_workers(problem: Problem, profile: Profile) -> list[PrefillWorker]:
    """Each prefill layout that holds its largest chunk, priced there (the rate a pool of them reaches);
    a layout whose lone prompt already passes the TTFT limit is left out (no load makes it faster)."""
    ttft_ns = _limit_ns(problem.workload.ttft_ms)
    top = min(largest_chunk(problem, profile), profile.max_batch)
    out = []
    for layout in worker_layouts(problem, "prefill", profile):
        step = prefill_step(problem, layout, top, profile)
        if not step.prediction.fits:  # its memory, priced at that chunk
            continue
        first = prefill_step(problem, layout, 1, profile)
        if ttft_ns is not None and first.pass_ns > ttft_ns:
            continue
        out.append(PrefillWorker(layout, step.chunk, step.pass_ns, first.pass_ns,
                                 rate_units(step.capacity_rps(1))))
    return out


def largest_batch(top: int, keeps: Callable[[int], bool], guess: int) -> int:
    """The largest batch in 1..``top`` that keeps the TPOT limit, 0 if none (the round grows with the
    batch): ``top`` itself when it does; else a bisection whose first probe is ``guess`` (an estimate
    of the answer) and, if the guess keeps the limit, the batch after it, so a good guess ends it in two
    steps."""
    if top < 1 or keeps(top):
        return max(top, 0)
    lo, hi = 0, top - 1  # keeps(lo) (0 stands for none), not keeps(hi + 1)
    probe = min(max(guess, 1), hi)
    if keeps(probe):
        lo = probe
        if probe == hi or not keeps(probe + 1):
            return probe
        lo = probe + 1
    else:
        hi = probe - 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if keeps(mid) else (lo, mid - 1)
    return lo


def affine_guess(top: int, round_one_ns: int, round_top_ns: int, limit_ns: int) -> int:
    """Where the TPOT limit falls if the round grows linearly from batch 1 to ``top`` (it nearly does:
    the weights once, the KV cache per sequence)."""
    if round_top_ns <= round_one_ns:
        return top
    return 1 + (limit_ns - round_one_ns) * (top - 1) // (round_top_ns - round_one_ns)


def decode_workers(problem: Problem, profile: Profile, smaller_batches: bool = False) -> list[DecodeWorker]:
    """Each decode layout at the largest batch its memory holds at ISL + OSL (and the engine's limit)
    whose round keeps the TPOT limit: the pool's capacity (``smaller_batches``: also at each power of two
    below it, the faster rounds ``enumerate`` trades per-GPU throughput for). At run time a pool that needs less runs at
    the smallest batch that sustains the rate (``evaluate_disagg``), so a smaller limit would only
    lower the capacity."""
    tpot_ns = _limit_ns(problem.workload.tpot_ms)
    osl = problem.workload.osl
    out = []
    for layout in worker_layouts(problem, "decode", profile):
        top = min(profile.max_batch, max_batch(role_problem(problem, "decode", 1), layout, profile))

        def keeps(b: int, layout: Layout = layout) -> bool:
            return tpot_ns is None or decode_step(problem, layout, b, profile).round_ns <= tpot_ns

        if top < 1 or not keeps(1):
            continue
        guess = top if tpot_ns is None else affine_guess(
            top, decode_step(problem, layout, 1, profile).round_ns,
            decode_step(problem, layout, top, profile).round_ns, tpot_ns)
        b = largest_batch(top, keeps, guess)
        offered = sorted({b} | ({1 << k for k in range(b.bit_length()) if 1 << k < b} if smaller_batches else set()))
        for batch in offered if b else ():
            step = decode_step(problem, layout, batch, profile)
            per_worker = batch * NS_PER_S / (max(osl - 1, 1) * step.round_ns)
            out.append(DecodeWorker(layout, batch, step.round_ns, rate_units(per_worker)))
    return out


def alignment(layout: Layout, problem: Problem) -> int:
    return alignment_gpus(layout, problem.cluster)


def _limit_ns(ms: float | None) -> int | None:
    return None if ms is None else round(ms * 1e6)


__all__ = [
    "MAX_WORKER_GPUS", "RATE_UNITS_PER_RPS", "DecodeWorker", "PrefillWorker", "alignment", "decode_workers",
    "prefill_workers", "rate_units", "worker_layouts",
]
