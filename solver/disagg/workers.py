"""The worker layouts a disaggregated deployment may use, each priced once for its role.

A **prefill candidate** is one worker layout (a stage shape the rules allow, a stage count, even stage
boundaries) at its largest chunk (the engine's token budget over ISL, within its batch limit): its
capacity in prompts per second per worker. A **decode candidate** is a worker layout at its batch ``b``
(the most sequences one worker holds, its ``max_batch``): the largest its memory holds whose round
keeps the TPOT limit (the decode batch that keeps TPOT within its limit, DESIGN.md "Cost model"), and
its capacity in requests per second per worker. Under a TTFT limit each layout is also offered at smaller
batch limits (``capped_workers``): a lower capacity carried by fewer requests in flight, so a shorter queue
at the prefill pool.
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
from functools import cached_property

from shardplan.hardware.profile import Profile
from shardplan.rules.base import ShapeRule
from shardplan.rules.catalog import rules_for
from shardplan.rules.disagg import alignment_gpus
from shardplan.rules.layout import Layout
from shardplan.rules.problem import Problem
from shardplan.solver.cost.disagg import (
    PrefillStep,
    decode_step,
    largest_chunk,
    prefill_step,
    request_overhead_ns,
    role_problem,
    worker_memory_limit,
)
from shardplan.solver.cost.evaluate import NS_PER_S
from shardplan.solver.space import SearchSpace

Check = Callable[[], None] | None  # a deadline's check, called between pieces of work (raises once it passed)

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

    @cached_property
    def gpus(self) -> int:  # read for every deployment a search lists: once
        return self.layout.gpus_per_replica


@dataclass(frozen=True)
class DecodeWorker:
    layout: Layout
    batch: int  # the most sequences one worker holds (its engine batch limit)
    round_ns: int
    capacity_units: int  # one worker's finished requests per second at that batch, in rate units

    @cached_property
    def gpus(self) -> int:  # read for every deployment a search lists: once
        return self.layout.gpus_per_replica


def worker_layouts(problem: Problem, role: str, profile: Profile, check: Check = None) -> Iterator[Layout]:
    """Every (shape, stage count) the shape rules allow for ``role``, even stages, at most
    ``MAX_WORKER_GPUS`` GPUs and the cluster's, in the search space's order. ``check`` is called before
    each (a deadline's, which raises once it has passed: pricing every layout of a 9,216-GPU cluster took
    8 s past --time-limit 0.5)."""
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
            if check is not None:
                check()
            yield Layout.even(layers, stages, tp=o.tp, sp=o.sp, attn_dp=o.attn_dp, expert_tp=o.expert_tp, batch=1)


@dataclass(frozen=True)
class PrefillPriced:
    """A prefill layout that holds its largest chunk, priced there: its capacity, not yet its TTFT."""

    layout: Layout
    step: PrefillStep
    capacity_units: int

    @property
    def gpus(self) -> int:
        return self.layout.gpus_per_replica

    def worker(self, problem: Problem, profile: Profile) -> PrefillWorker | None:
        """The candidate, or None when its lone prompt with the serving stack's fixed cost already passes the
        TTFT limit: every TTFT carries both (``cost.disagg.steady_state``; a chunk of more prompts only
        lengthens the pass), so no load or decode worker makes it faster. Without the stack's cost, on 8x8xB200
        under SGLang at 500 ms (176 ms of stack), the candidates best per GPU were layouts whose lone prompt
        took 491 ms: every deployment of them refused, the seed was sought among them only, and the search
        ended at its work limit with no plan."""
        first = prefill_step(problem, self.layout, 1, profile)
        ttft_ns = _limit_ns(problem.workload.ttft_ms)
        if ttft_ns is not None and first.pass_ns + request_overhead_ns(profile) > ttft_ns:
            return None
        return PrefillWorker(self.layout, self.step.chunk, self.step.pass_ns, first.pass_ns, self.capacity_units)


def prefill_priced(problem: Problem, profile: Profile, check: Check = None) -> list[PrefillPriced]:
    """Each prefill layout that holds its largest chunk (its memory priced at that chunk), in
    ``worker_layouts`` order, with the rate a pool of them reaches."""
    top = min(largest_chunk(problem, profile), profile.max_batch)
    out = []
    for layout in worker_layouts(problem, "prefill", profile, check):
        step = prefill_step(problem, layout, top, profile)
        if step.prediction.fits:
            out.append(PrefillPriced(layout, step, rate_units(step.capacity_rps(1))))
    return out


def prefill_workers(problem: Problem, profile: Profile, check: Check = None) -> list[PrefillWorker]:
    """Each prefill layout that holds its largest chunk, priced there (the rate a pool of them reaches);
    a layout whose lone prompt with the serving stack already passes the TTFT limit is left out (no load
    makes it faster)."""
    workers = (priced.worker(problem, profile) for priced in prefill_priced(problem, profile, check))
    return [w for w in workers if w is not None]


def largest_batch_steps(top: int, keeps: Callable[[int], bool], guess: Callable[[], int]) -> Iterator[tuple[int, int]]:
    """The search for the largest batch in 1..``top`` that keeps the TPOT limit (the round grows with the
    batch), one probe of ``keeps`` per step: yields the bracket ``(lo, hi)`` after each, every batch up
    to ``lo`` keeping the limit (0: none known) and every one above ``hi`` breaking it; the last has
    ``lo == hi``, the answer (0 if none). The probes: ``top`` itself; then ``guess()`` (an estimate of
    the answer) and, if it keeps the limit, the batch after it, so a good guess ends it in two steps;
    then bisection. A caller may stop early (``DecodeSearch``) and read a bound from the bracket."""
    if top < 1:
        yield 0, 0
        return
    if keeps(top):
        yield top, top
        return
    lo, hi = 0, top - 1
    yield lo, hi
    probe = min(max(guess(), 1), hi)
    if keeps(probe):
        lo = probe
        yield lo, hi
        if probe == hi or not keeps(probe + 1):
            yield probe, probe
            return
        lo = probe + 1
    else:
        hi = probe - 1
    yield lo, hi
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if keeps(mid) else (lo, mid - 1)
        yield lo, hi


def affine_guess(top: int, round_one_ns: int, round_top_ns: int, limit_ns: int) -> int:
    """Where the TPOT limit falls if the round grows linearly from batch 1 to ``top`` (it nearly does:
    the weights once, the KV cache per sequence)."""
    if round_top_ns <= round_one_ns:
        return top
    return 1 + (limit_ns - round_one_ns) * (top - 1) // (round_top_ns - round_one_ns)


class DecodeSearch:
    """One decode layout's candidate: the largest batch its memory holds at ISL + OSL (and the engine's
    limit) whose round keeps the TPOT limit, searched a probe at a time (``step``), with a bound on the
    capacity it can end at (``bound_units``), so a caller that needs only the candidates able to beat
    something stops searching the others early (``solver/disagg/prune.py``). ``qualifies``: the layout
    holds one sequence and keeps the limit at batch 1 (else it is no candidate)."""

    def __init__(self, problem: Problem, profile: Profile, layout: Layout):
        self.problem, self.profile, self.layout = problem, profile, layout
        self.tpot_ns = _limit_ns(problem.workload.tpot_ms)
        self.top = worker_memory_limit(problem, layout, profile)
        self.qualifies = self.top >= 1 and self.keeps(1)
        self.lo, self.hi = 0, max(self.top, 0)  # the bracket (largest_batch_steps); batch 1 keeps if qualifies
        self._steps = largest_batch_steps(self.top, self.keeps, self._guess)

    @property
    def gpus(self) -> int:
        return self.layout.gpus_per_replica

    def round_ns(self, batch: int) -> int:
        return decode_step(self.problem, self.layout, batch, self.profile).round_ns

    def keeps(self, batch: int) -> bool:
        return self.tpot_ns is None or self.round_ns(batch) <= self.tpot_ns

    def _guess(self) -> int:
        if self.tpot_ns is None:
            return self.top
        return affine_guess(self.top, self.round_ns(1), self.round_ns(self.top), self.tpot_ns)

    @property
    def done(self) -> bool:
        return self.lo == self.hi

    def step(self) -> None:
        """One probe more (nothing once done)."""
        if not self.done:
            self.lo, self.hi = next(self._steps)

    def finish(self) -> int:
        """The largest batch (searched to the end)."""
        while not self.done:
            self.step()
        return self.lo

    def bound_units(self) -> int:
        """At least the capacity the search ends at, in rate units (exactly it once done): the batch is
        at most ``hi`` and its round at least the round at ``max(lo, 1)`` (the round grows with the
        batch), and a worker's capacity grows with its batch and falls with its round."""
        return capacity_units(self.hi, self.round_ns(max(self.lo, 1)), self.problem.workload.osl)

    def worker(self, batch: int | None = None) -> DecodeWorker:
        """The candidate at its largest batch (or at ``batch``)."""
        b = self.finish() if batch is None else batch
        round_ns = self.round_ns(b)
        return DecodeWorker(self.layout, b, round_ns, capacity_units(b, round_ns, self.problem.workload.osl))


def capacity_units(batch: int, round_ns: int, osl: int) -> int:
    """One decode worker's finished requests per second at ``batch`` (its round ``round_ns``), in rate
    units: the first token comes from the prefill worker, the other OSL - 1 are rounds."""
    return rate_units(batch * NS_PER_S / (max(osl - 1, 1) * round_ns))


def decode_searches(problem: Problem, profile: Profile, check: Check = None) -> list[DecodeSearch]:
    """A ``DecodeSearch`` per decode layout that qualifies, in ``worker_layouts`` order, none searched yet."""
    layouts = worker_layouts(problem, "decode", profile, check)
    searches = (DecodeSearch(problem, profile, layout) for layout in layouts)
    return [s for s in searches if s.qualifies]


def batch_caps(batch: int) -> list[int]:
    """The batch limits a decode worker of largest batch ``batch`` is also offered at under a TTFT limit
    (``capped_workers``): each power of two below it, the largest first."""
    return [1 << k for k in range(batch.bit_length() - 1, -1, -1) if 1 << k < batch]


def offers_batch_caps(problem: Problem) -> bool:
    """Whether the decode layouts are also offered at their ``batch_caps`` (``capped_workers``): under a TTFT
    limit, the only place a capped worker can be better."""
    return problem.workload.ttft_ms is not None


def with_batch_caps(problem: Problem, searches: list[DecodeSearch]) -> list[DecodeWorker]:
    """Each layout's candidate at its largest batch, then, where ``offers_batch_caps``, its ``capped_workers``."""
    return [s.worker() for s in searches] + (capped_workers(searches) if offers_batch_caps(problem) else [])


def capped_workers(searches: list[DecodeSearch]) -> list[DecodeWorker]:
    """Each layout's candidate at each of its ``batch_caps``, in the searches' order, listed after every
    candidate at its largest batch (so a tie in brute force's order goes to the uncapped worker).

    **Why a smaller limit is offered under a TTFT limit.** The requests in flight that carry a deployment's
    rate are the rate times a request's life (Little's law), and each finds a share of the others queued at
    the prefill pool (``cost.disagg.serving_stack_ns``: the clump of a closed loop). So TTFT grows with the
    decode pool's capacity: a limit on its batch (SGLang's ``--max-running-requests``, vLLM's
    ``--max-num-seqs``, TensorRT-LLM's ``max_batch_size``) trades rate for TTFT where more prefill workers would
    cost GPUs. When deployments were judged at their full rate only, Llama-3.1-70B FP8 on 8xH200 under SGLang
    at TTFT 2 s reached 217.3 tokens/s per GPU without the caps and 302.7 with them. Since a deployment is also
    judged below its full rate (``deploy.Pools.served``: fewer requests in flight, a finer dial, 392.6 there)
    a capped worker is rarely the answer; it still is where the limit, not the requests admitted, must hold
    the batch down. Without a TTFT limit a capped worker is never better (the same GPUs, at most the rate), and
    for ``--rate`` neither (a pool runs at the batch the rate needs, the same with or without the cap; the
    uncapped twin carries more)."""
    return [s.worker(cap) for s in searches for cap in batch_caps(s.finish())]


def capped_reaching(searches: list[DecodeSearch], reaches: Callable[[DecodeWorker], bool]) -> list[DecodeWorker]:
    """``capped_workers`` that ``reaches`` keeps, in the same order, each judged first at its cap priced at the round
    of batch 1 (the round grows with the batch, so a worker's capacity there is at least its own), so a cap the
    bound already refuses costs no ``evaluate``. ``reaches`` must keep no worse a worker when it refuses a better
    one (a floor on rate per GPU does)."""
    kept = []
    for s in searches:
        osl, first_ns = s.problem.workload.osl, s.round_ns(1)
        for cap in batch_caps(s.finish()):
            if reaches(DecodeWorker(s.layout, cap, first_ns, capacity_units(cap, first_ns, osl))):
                w = s.worker(cap)
                if reaches(w):
                    kept.append(w)
    return kept


def decode_workers(problem: Problem, profile: Profile, smaller_batches: bool = False,
                   check: Check = None, caps: bool = False) -> list[DecodeWorker]:
    """Each decode layout at the largest batch its memory holds at ISL + OSL (and the engine's limit)
    whose round keeps the TPOT limit: the pool's capacity (``smaller_batches``: also at each power of two
    below it, the faster rounds ``enumerate`` trades per-GPU throughput for). At run time a pool that needs
    less runs at the smallest batch that sustains the rate (``evaluate_disagg``). ``caps``: then each
    layout at its ``batch_caps`` too, after all of those (``capped_workers``: what a TTFT limit needs)."""
    out: list[DecodeWorker] = []
    searches = decode_searches(problem, profile, check)
    for search in searches:
        if check is not None:
            check()
        b = search.finish()
        offered = sorted({b, *(batch_caps(b) if smaller_batches else [])})
        out.extend(search.worker(batch) for batch in offered if b)
    return out + (capped_workers(searches) if caps else [])


def alignment(layout: Layout, problem: Problem) -> int:
    return alignment_gpus(layout, problem.cluster)


def _limit_ns(ms: float | None) -> int | None:
    return None if ms is None else round(ms * 1e6)


__all__ = [
    "MAX_WORKER_GPUS", "RATE_UNITS_PER_RPS", "DecodeSearch", "DecodeWorker", "PrefillPriced", "PrefillWorker",
    "alignment", "batch_caps", "capacity_units", "capped_reaching", "capped_workers", "decode_searches",
    "decode_workers", "largest_batch_steps", "offers_batch_caps", "prefill_priced",
    "prefill_workers", "rate_units", "with_batch_caps", "worker_layouts",
]
