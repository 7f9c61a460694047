"""A choice of pools (prefill candidate, decode candidate, x workers, y workers) made into a deployment:
its placement, its integer rate, the concurrency it runs at, and its exact price and check.

- **placement**: ``DisaggLayout.place`` (prefill from GPU 0, decode from the next aligned id); the KV
  cache crosses NVLink only when both pools end inside the first scale-up domain;
- **rate**: the slowest of the prefill pool at its largest chunk, the decode pool at its batch and the
  links, in whole micro-requests per second (``workers.rate_units``), each pool's bound being its
  workers times one worker's (so the CP-SAT model, which multiplies the same integers, and the brute
  force rank deployments identically);
- **concurrency**: the fewest requests in flight at which ``evaluate_disagg`` reaches a target rate
  (the deployment's own rate, or ``--rate``): more would only wait in the prefill queue, raising TTFT
  and nothing else; found by doubling and bisection (the rate grows with the requests in flight);
- **verdict**: ``evaluate_disagg`` at that concurrency and ``check_disagg`` on it (the catalog per pool,
  the pair's DIS- rules, the TTFT and TPOT limits): a deployment is feasible when nothing is broken;
- **served rate** (the per-GPU search's measure, ``Pools.served``): the most a deployment carries within every
  rule. Its full rate where that keeps them; else, where only the TTFT or TPOT limit was broken, the rate at
  the most requests in flight that keep every rule.
  Held below its full rate, the decode pool runs smaller batches and fewer prompts queue at the prefill
  pool, so TTFT and TPOT fall with the requests in flight. Judged only at its full rate, a deployment that
  keeps TTFT just below it was refused whole: on Llama-3.1-405B, 8x8xB200, SGLang, TTFT 500 ms, every
  deployment the search proposed was refused, while ``evaluate`` keeps 3 prefill and 1 decode worker of tp=8
  at 59 requests in flight.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property

from shardplan.hardware import Tier
from shardplan.hardware.profile import Profile
from shardplan.rules.base import Diagnostic
from shardplan.rules.catalog import errors_of
from shardplan.rules.disagg import DisaggLayout, alignment_gpus
from shardplan.rules.disagg_plan import DisaggPlan, check_disagg
from shardplan.rules.problem import Problem
from shardplan.solver.cost.disagg import (
    evaluate_disagg,
    kv_capacity_rps,
    kv_share_bytes,
    kv_transfer,
    same_cache_layout,
    steady_state,
    transfer_ns,
)
from shardplan.solver.disagg.workers import DecodeWorker, PrefillWorker, rate_units
from shardplan.solver.search_base import Deadline

# A target no concurrency reaches is unsustainable: the doubling stops at MAX_CONCURRENCY, or at FILL_MARGIN
# times the decode pool's full batches where those are more (a pool of 69,527 workers at batch 341 holds
# 23.7 million sequences and reaches its rate at twice that: with the fixed 2^24 every deployment that large
# was refused, and the search on 131072x8xH100 proposed one after another past 120 s).
MAX_CONCURRENCY = 1 << 24
FILL_MARGIN = 16


# A plan's TTFT is its floor (``Pools._most_within_floor``) plus any waiting past the unloaded end-to-end,
# which a count of requests in flight has where the rate it carries sits just below a step of the decode batch.
# From the most counts within the floor, at most this many plans are read downwards for the first that keeps
# every rule (on five of the tests' cases, 1,475 deployments held below their full rate: the first plan read
# was it for 1,228, the twelfth at worst).
HELD_SCAN = 64
LIMIT_SLACK_NS = 2.0  # the floor read against the limits with the slack of the exact check's rounding

# The rules that holding a deployment below its full rate can satisfy: its TTFT and TPOT fall with the
# requests in flight; nothing else a refusal names does (placement, weights in memory).
LOAD_RULES = frozenset({"SLA-001", "SLA-002"})


@dataclass(frozen=True, order=True)
class Choice:
    """Indices into the candidate lists and the worker counts."""

    prefill: int
    decode: int
    x: int
    y: int


FewestKey = tuple[int, int, int, Choice]  # (GPUs, -rate, -both pools' capacity, choice): Pools.fewest_gpus_key


@dataclass(frozen=True)
class Served:
    """A deployment at the most rate units it carries within every rule, and its plan there."""

    units: int
    plan: DisaggPlan


class Pools:
    """The candidates of both roles and what a choice of them makes (memoised per pair of layouts)."""

    def __init__(self, problem: Problem, profile: Profile, prefill: list[PrefillWorker],
                 decode: list[DecodeWorker]):
        self.problem, self.profile = problem, profile
        self.prefill, self.decode = prefill, decode
        # Each worker's largest share of a prompt's cache, once (the links' time depends on it).
        self.prefill_share = [kv_share_bytes(problem, w.layout) for w in prefill]
        self.decode_share = [kv_share_bytes(problem, w.layout) for w in decode]
        # refused[rule id]: the first message of each rule a proposed deployment broke (infeasibility's why).
        self.refused: dict[str, str] = {}
        self._kv: dict[tuple[float, float, bool, Tier], int] = {}
        # Read for every deployment a search lists (hundreds of thousands on 512 GPUs), so once per candidate:
        # its GPUs, where a decode worker may start (``alignment_gpus``), and each pair's link by tier.
        self._prefill_gpus = [w.gpus for w in prefill]
        self._decode_gpus = [w.gpus for w in decode]
        self._decode_unit = [alignment_gpus(w.layout, problem.cluster) for w in decode]
        self._pair_kv: dict[tuple[int, int, Tier], int] = {}
        self._served: dict[Choice, Served | None] = {}

    @cached_property
    def decode_layouts(self) -> list[int]:
        """For each decode candidate, the index of its layout among the distinct decode layouts."""
        seen: dict[object, int] = {}
        return [seen.setdefault(d.layout, len(seen)) for d in self.decode]

    def end_gpu(self, c: Choice) -> int:
        """One past the decode pool's last GPU: the prefill pool's GPUs rounded up to the decode
        worker's alignment, plus the decode pool's."""
        unit = self._decode_unit[c.decode]
        start = -(-c.x * self._prefill_gpus[c.prefill] // unit) * unit
        return start + c.y * self._decode_gpus[c.decode]

    def keeping_up(self, i: int, k: int, most: int) -> list[Choice]:
        """Worker counts of the pair (prefill ``i``, decode ``k``), the fewest decode workers first: for each
        y, x from the fewest prefill workers that keep up with the y decode workers (or the cluster's rest)
        to twice that, those that fit the cluster and carry a rate. Whole y rows are listed until at least
        ``most`` are kept (on 4096x8xH200 with 1-GPU workers every y made ~10^8 choices)."""
        n = self.problem.cluster.num_gpus
        p, d = self.prefill[i], self.decode[k]
        kept: list[Choice] = []
        for y in range(1, n // d.gpus + 1):
            fewest = max(1, min(-(-y * d.capacity_units // max(p.capacity_units, 1)), (n - y * d.gpus) // p.gpus))
            row = (Choice(i, k, x, y) for x in range(fewest, 2 * fewest + 1))
            kept += [c for c in row if self.end_gpu(c) <= n and self.rate(c) > 0]
            if len(kept) >= most:
                break
        return kept

    def gpus(self, c: Choice) -> int:
        return c.x * self._prefill_gpus[c.prefill] + c.y * self._decode_gpus[c.decode]

    def tier(self, c: Choice) -> Tier:
        inside = self.end_gpu(c) <= self.problem.cluster.scaleup_domain_gpus
        return Tier.SCALE_UP if inside else Tier.SCALE_OUT

    def kv_units(self, prefill: int, decode: int, tier: Tier) -> int:
        """One worker pair's link rate in rate units (the pool's is min(x, y) times it)."""
        pair = (prefill, decode, tier)
        if pair not in self._pair_kv:
            self._pair_kv[pair] = self._kv_units(prefill, decode, tier)
        return self._pair_kv[pair]

    def _kv_units(self, prefill: int, decode: int, tier: Tier) -> int:
        p, d = self.prefill[prefill].layout, self.decode[decode].layout
        key = (self.prefill_share[prefill], self.decode_share[decode], same_cache_layout(self.problem, p, d),
               tier)  # what the link's time depends on
        if key not in self._kv:
            moved, relayout = transfer_ns(self.problem, p, d, tier, self.profile)
            rps = kv_capacity_rps(1, moved + relayout)
            self._kv[key] = rate_units(rps) if rps != float("inf") else 1 << 62
        return self._kv[key]

    def rate(self, c: Choice) -> int:
        """The deployment's rate in rate units: the slowest pool or link."""
        return min(c.x * self.prefill[c.prefill].capacity_units, c.y * self.decode[c.decode].capacity_units,
                   min(c.x, c.y) * self.kv_units(c.prefill, c.decode, self.tier(c)))

    def per_gpu_key(self, c: Choice) -> tuple[Fraction, int]:
        """A sort key: most rate units per GPU first (exact), then fewest GPUs. A value read once per
        choice, not a comparison: the comparison priced both rates at every step, 2.4 s per seed of
        16,384 choices on 512 GPUs."""
        gpus = self.gpus(c)
        return -Fraction(self.rate(c), gpus), gpus

    def fewest_gpus_key(self, c: Choice) -> FewestKey:
        """``--rate``'s sort key, brute force's order (``brute.fewest_gpus``, ``rate_walk.py``): fewest GPUs, then the
        most capacity (headroom over the rate), then the most in both pools together (``pools_capacity``), then
        ``Choice``'s order."""
        return self.gpus(c), -self.rate(c), -pools_capacity(self, c), c

    def layout(self, c: Choice, concurrency: int) -> DisaggLayout:
        p, d = self.prefill[c.prefill], self.decode[c.decode]
        return DisaggLayout.place(p.layout, c.x, d.layout, c.y, concurrency, self.problem.cluster,
                                  (None, d.batch))

    def concurrency_for(self, c: Choice, target_units: int) -> int | None:
        """The fewest requests in flight at which the deployment's rate reaches ``target_units``
        (None if none up to ``MAX_CONCURRENCY``, or ``FILL_MARGIN`` times its decode pool's batches, does)."""

        # The links' price depends on the pools and their placement, not on the requests in flight: once
        # per choice (its tier reads every GPU id, a third of a 512-GPU search's exact checks).
        kv = kv_transfer(self.problem, self.layout(c, 1), self.profile)

        def reaches(concurrency: int) -> bool:
            layout = self.layout(c, concurrency)
            return rate_units(steady_state(self.problem, layout, kv, self.profile).rate_rps) >= target_units

        hi = max(1, c.y * self.decode[c.decode].batch)
        top = max(MAX_CONCURRENCY, FILL_MARGIN * hi)
        while not reaches(hi):
            if hi >= top:
                return None
            hi = min(2 * hi, top)
        lo = 1
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if reaches(mid) else (mid + 1, hi)
        return lo

    def price(self, c: Choice, target_units: int | None = None) -> DisaggPlan | None:
        """``evaluate_disagg`` of the deployment at the concurrency that reaches ``target_units`` (its
        own rate by default); None if no concurrency does."""
        concurrency = self.concurrency_for(c, self.rate(c) if target_units is None else target_units)
        if concurrency is None:
            return None
        return evaluate_disagg(self.problem, self.layout(c, concurrency), self.profile)

    def feasible_plan(self, c: Choice, target_units: int | None = None) -> DisaggPlan | None:
        """The priced plan when it breaks nothing (placement first: pools past the cluster are not
        priced), else None."""
        plan, errors = self._verdict(c, target_units)
        return None if errors else plan

    def _verdict(self, c: Choice, target_units: int | None = None) -> tuple[DisaggPlan | None, list[Diagnostic]]:
        """The plan priced at ``target_units`` (its own rate by default) and its errors, each rule's first kept
        in ``refused``; no plan when the pools pass the cluster or no concurrency reaches the rate."""
        if self.end_gpu(c) > self.problem.cluster.num_gpus:
            return None, []
        plan = self.price(c, target_units)
        if plan is None:
            self.refused.setdefault("DIS-001", "no number of requests in flight reaches the rate")
            return None, []
        return plan, self._errors(plan)

    def checked_plan(self, c: Choice, deadline: Deadline, target_units: int | None = None) -> DisaggPlan | None:
        """``feasible_plan``, its exact check counted as work against ``deadline`` (search_base.Deadline:
        ``CHECK_WORK`` and each ``evaluate`` it makes), as every search that checks a deployment counts it."""
        with deadline.checking():
            return self.feasible_plan(c, target_units)

    def served(self, c: Choice) -> Served | None:
        """What ``c`` carries within every rule (module docstring), in rate units, memoised: its full rate
        (``Pools.rate``) when ``feasible_plan`` would accept it there; else, when the full rate broke only the
        TTFT or TPOT limit (``LOAD_RULES``), the most requests in flight below the full rate's whose plan keeps
        every rule, at the rate they carry (rounded down); None if none does. The plans' TTFT is not monotone in
        the requests in flight (it wiggles by a few ms where the decode batch steps, so past the first count
        refused larger ones keep the limits again), but its floor is (``_most_within_floor``): the most counts
        within the floor are bisected, and from there down (``HELD_SCAN`` counts at most) the first plan that
        keeps every rule is the one (test_served.py holds it to every count). The rate is not strictly monotone
        in the count either (the decode batch limit steps with it), so a smaller count may carry a hair more:
        0.108 % at most there."""
        if c not in self._served:
            self._served[c] = self._judged(c)
        return self._served[c]

    def checked_served(self, c: Choice, deadline: Deadline) -> Served | None:
        """``served``, its work counted against ``deadline`` as ``checked_plan``'s is."""
        with deadline.checking():
            return self.served(c)

    def _judged(self, c: Choice) -> Served | None:
        """``served`` of a choice not yet judged (the refusals at its full rate kept in ``refused``)."""
        plan, errors = self._verdict(c)
        if plan is None:
            return None
        if not errors:
            return Served(self.rate(c), plan)
        if plan.layout.concurrency <= 1 or any(d.rule not in LOAD_RULES for d in errors):
            return None
        most = self._most_within_floor(c, plan.layout.concurrency - 1)
        for concurrency in range(most, max(0, most - HELD_SCAN), -1):  # the most kept at or below it
            held = evaluate_disagg(self.problem, self.layout(c, concurrency), self.profile)
            if not errors_of(check_disagg(held)) and rate_units(held.prediction.throughput_rps) > 0:
                return Served(rate_units(held.prediction.throughput_rps), held)
        return None

    def _most_within_floor(self, c: Choice, top: int) -> int:
        """The most requests in flight, at most ``top``, whose TTFT floor and TPOT keep the limits (0 if one
        does not): the floor is TTFT less the waiting past the unloaded end-to-end (the serving stack, the
        clump's queue, the pass, the transfer and the admission: ``SteadyState``), which grows with the
        requests in flight (the queue with them, the pass and round with the chunk and batch the rate needs,
        and the rate with them: the premise the TTFT cuts rest on, ``ttft_cut.py``), so a bisection finds it
        exactly; TPOT, the round, grows likewise. The slack only lets a count through to the exact check."""
        wl = self.problem.workload
        kv = kv_transfer(self.problem, self.layout(c, 1), self.profile)
        ttft_ns = None if wl.ttft_ms is None else wl.ttft_ms * 1e6 + LIMIT_SLACK_NS
        tpot_ns = None if wl.tpot_ms is None else wl.tpot_ms * 1e6 + LIMIT_SLACK_NS

        def within(concurrency: int) -> bool:
            state = steady_state(self.problem, self.layout(c, concurrency), kv, self.profile)
            round_ns = state.decode.round_ns if wl.osl > 1 else 0
            return ((ttft_ns is None or state.unloaded_e2e_ns - (wl.osl - 1) * round_ns <= ttft_ns)
                    and (tpot_ns is None or round_ns <= tpot_ns))

        lo, hi = 0, top  # within(lo) (0: none is); the most within is in [lo, hi]
        while lo < hi:
            mid = (lo + hi + 1) // 2
            lo, hi = (mid, hi) if within(mid) else (lo, mid - 1)
        return lo

    def _errors(self, plan: DisaggPlan) -> list[Diagnostic]:
        """The plan's errors, the first message of each rule kept in ``refused``."""
        errors = errors_of(check_disagg(plan))
        for d in errors:
            self.refused.setdefault(d.rule, d.message)
        return errors


def units_ahead(units0: int, gpus0: int, choice0: Choice, gpus: int, c: Choice) -> int:
    """The fewest rate units deployment ``c`` on ``gpus`` GPUs must carry to come before ``choice0`` (``units0``
    on ``gpus0``) in brute force's order of the per-GPU search: more rate per GPU; or as much on fewer GPUs, or
    on as many and earlier in ``Choice``'s order (exact integers)."""
    whole, part = divmod(units0 * gpus, gpus0)
    if (gpus, c) < (gpus0, choice0):
        return whole + (part > 0)  # as much per GPU is enough
    return whole + 1


class Stopped(Exception):
    """``best_served`` gave up: its ``stop`` said so."""


def best_served(pools: Pools, ordered: Iterable[Choice], served: Callable[[Choice], Served | None] | None = None,
                refuses: Callable[[Choice, int], bool] | None = None,
                stop: Callable[[], bool] | None = None) -> tuple[Choice, Served] | None:
    """The choice of ``ordered`` (sorted by ``Pools.per_gpu_key``, ties in ``Choice``'s order) of the most rate
    units per GPU it carries within every rule, the fewest GPUs on a tie, then the first: judged in order
    until none left can come first (a served rate is at most the full one). ``served``: ``Pools.served`` by
    default; ``refuses(c, need)``: True where ``c`` cannot carry ``need`` (a TTFT floor), which spares the
    judgement; ``stop()``: checked before each, raising ``Stopped`` when it says so."""
    judge = served or pools.served
    best: tuple[Choice, Served] | None = None
    for c in ordered:
        if stop is not None and stop():
            raise Stopped
        need = 1 if best is None else units_ahead(best[1].units, pools.gpus(best[0]), best[0], pools.gpus(c), c)
        if pools.rate(c) < need:
            break  # every later one has as little rate per GPU at full load, or as much on as many GPUs or more
        if refuses is not None and refuses(c, need):
            continue
        found = judge(c)
        if found is not None and found.units >= need:
            best = (c, found)
    return best


def pools_capacity(pools: Pools, c: Choice) -> int:
    """Both pools' full rates summed, in rate units: with the deployment's rate (the smaller pool or the
    link) fixed, the more this is, the more headroom the other pool has (``--rate``'s second tie-break)."""
    return c.x * pools.prefill[c.prefill].capacity_units + c.y * pools.decode[c.decode].capacity_units


__all__ = [
    "LOAD_RULES", "MAX_CONCURRENCY", "Choice", "FewestKey", "Pools", "Served", "Stopped", "best_served",
    "pools_capacity", "units_ahead",
]
