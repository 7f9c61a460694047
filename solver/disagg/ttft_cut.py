"""A floor under a deployment's TTFT in terms the CP-SAT pool model can read: for one prefill and one
decode candidate, the rate per prefill worker above which no deployment keeps the TTFT limit, given
the chunk and batch its pools must at least run at. Each cut only removes deployments the exact check
(``deploy.Pools.feasible_plan``) would refuse, so the search returns the same deployment; it makes far
fewer proposals where most deployments better per GPU than the incumbent break TTFT (on 512 GPUs
every one of the 278 better than the seed does).

**Why the floor holds.** The exact check prices a choice at the fewest requests in flight ``C`` whose
steady state (``cost.disagg.steady_state``) reaches the choice's rate; ``X`` is that state's rate,
``X >= R`` for the rate ``R`` the model gives the choice (the model's ``R`` is at most the choice's
rate, ``Pools.rate``, which is the target). Each pool runs at a chunk or batch that sustains ``X``
(the bisection's answer sustains it, or is the largest, which does); so if ``R`` is above ``x`` times
every smaller chunk's capacity per worker than ``h`` (``R > x a(<h)``), the chunk is at least ``h``,
and if ``R > y b(<j)``, the batch is at least ``j``. The pass and the round grow with the chunk and
the batch (the premise ``workers.DecodeSearch`` takes too; tests check it on every candidate), so the
pass is at least ``pass(h)`` and TPOT at least ``round(j)``. A worker's capacity need not grow with
the batch (it dips by parts per million where the round grows in proportion), so the floors are
maxima over every smaller chunk or batch (``capacity_below``). The state is carried, ``X e2e0 <=
C``, where ``e2e0`` = overhead + queue + pass + transfer + (OSL - 1) rounds, so Little's law gives
``TTFT = C / X - (OSL - 1) round >= overhead + queue + pass + transfer``; the queue is ``share (C -
1) s`` rounded, ``s`` the pool's time per prompt at its largest chunk over x workers
(``cost.disagg.serving_stack_ns``). With
``v = X s`` (the prefill pool's utilisation, at most 1) and ``C >= X (queue + E)``, ``E`` = overhead +
pass(h) + transfer + (OSL - 1) round(j):

    queue (1 - share v) >= share v E - share s - 1/2

and TTFT <= limit means queue <= L' = limit - overhead - pass(h) - transfer, hence

    v <= (L' + share s + 1/2) / (share (E + L'))      with s <= s1 (one worker's time per prompt)

and, as ``v = X s1 / x`` and ``X >= R``: ``R <= x T`` with ``T = v_max / s1`` (rounded up, with slack
for floating point). ``L' < 0`` leaves no rate at all. The transfer is the faster link's (either tier).
tests/unit/solver/disagg hold every deployment the exact check accepts to every cut, and the search
with the cuts to brute force.

Levels: every chunk when there are at most ``MAX_CHUNK_LEVELS`` (else only the lone prompt's), and
decode batches from the candidate's own down, denser near it, where the pools better per GPU run;
fewer levels only loosen the floor, never break it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from shardplan.hardware import Tier
from shardplan.hardware.profile import Profile
from shardplan.rules.problem import Problem
from shardplan.solver.cost.disagg import decode_step, largest_chunk, prefill_step, transfer_ns
from shardplan.solver.cost.evaluate import NS_PER_S
from shardplan.solver.disagg.workers import RATE_UNITS_PER_RPS, DecodeWorker, PrefillWorker

FLOAT_SLACK = 1e-9  # relative: every rounding of the exact check's floats is far below it
NS_SLACK = 2.0  # absolute: integer rounding of the queue (1/2 ns) and of the TTFT limit's comparison
MAX_CHUNK_LEVELS = 8
DECODE_LEVEL_STEPS = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256)  # batches below the candidate's own


@dataclass(frozen=True)
class PairCuts:
    """``R <= x caps[h][j]`` whenever ``R > x chunk_floor[h]`` and ``R > y batch_floor[j]`` (rate units;
    a floor of 0 is no condition; a cap of None is no cut)."""

    chunk_floor: list[int]
    batch_floor: list[int]
    caps: list[list[int | None]]

    def allows(self, x: int, y: int, rate_units: int) -> bool:
        """Whether a deployment of these workers at ``rate_units`` passes every cut (what the model
        enforces; tests hold accepted deployments to it)."""
        for h, pf in enumerate(self.chunk_floor):
            for j, df in enumerate(self.batch_floor):
                cap = self.caps[h][j]
                if cap is not None and rate_units > x * pf and rate_units > y * df and rate_units > x * cap:
                    return False
        return True


def _units_above(rps: float) -> int:
    """Rate units at or above ``rps`` with slack: ``R`` above this many units means the rate is above
    ``rps`` whatever the exact check's floating point does."""
    return math.ceil(rps * RATE_UNITS_PER_RPS * (1 + FLOAT_SLACK))


def chunk_levels(top: int) -> list[int]:
    """Every chunk when there are few; else the chunk of one prompt alone (no chunk condition): the
    floor needs every smaller chunk's capacity, one ``evaluate`` each."""
    return list(range(1, top + 1)) if top <= MAX_CHUNK_LEVELS else [1]


def batch_levels(top: int) -> list[int]:
    return sorted({1, *(top - n for n in DECODE_LEVEL_STEPS if top - n >= 1)})


def capacity_below(levels: list[int], rounds_ns: list[int], osl: int) -> list[float]:
    """For each decode level, at least every smaller batch's requests per second per worker (0 for the
    first): a batch b between two levels ``lo <= b < hi`` has its round at least ``round(lo)``, so its
    capacity ``b / ((OSL - 1) round(b))`` is at most ``(hi - 1) / ((OSL - 1) round(lo))``. The capacity
    itself need not grow with the batch (it dips where the round grows in proportion)."""
    out, top = [0.0], 0.0
    for m in range(1, len(levels)):
        top = max(top, (levels[m] - 1) * NS_PER_S / (max(osl - 1, 1) * rounds_ns[m - 1]))
        out.append(top)
    return out


def pair_cuts(problem: Problem, profile: Profile, p: PrefillWorker, d: DecodeWorker) -> PairCuts | None:
    """The cuts of one pair (module docstring); None when the problem has no TTFT limit or no queue."""
    wl = problem.workload
    share = profile.ttft_queue_share
    if wl.ttft_ms is None or not 0 < share < 1:
        return None
    limit_ns = wl.ttft_ms * 1e6 + NS_SLACK
    overhead_ns = round(profile.request_overhead_ms * 1e6)
    transfer = min(sum(transfer_ns(problem, p.layout, d.layout, tier, profile)) for tier in (Tier.SCALE_UP,
                                                                                             Tier.SCALE_OUT))
    top_chunk = min(largest_chunk(problem, profile), profile.max_batch)
    full = prefill_step(problem, p.layout, top_chunk, profile)
    s1_ns = full.slowest_ns / full.chunk  # one worker's time per prompt at its largest chunk
    chunks = chunk_levels(top_chunk)
    batches = batch_levels(d.batch) if wl.osl > 1 else [1]  # one token: no decode round in the e2e
    prefill_caps = [prefill_step(problem, p.layout, h, profile).capacity_rps(1) for h in chunks]
    chunk_floor = [0 if n == 0 else _units_above(max(prefill_caps[:n])) for n in range(len(chunks))]
    rounds_ns = [decode_step(problem, d.layout, j, profile).round_ns for j in batches]
    batch_floor = [0 if n == 0 else _units_above(rps) for n, rps in enumerate(capacity_below(batches, rounds_ns,
                                                                                             wl.osl))]
    caps: list[list[int | None]] = []
    for h in chunks:
        pass_ns = prefill_step(problem, p.layout, h, profile).pass_ns
        spare_ns = limit_ns - overhead_ns - pass_ns - transfer  # L'
        row: list[int | None] = []
        for round_ns in rounds_ns:
            if spare_ns < 0:
                row.append(-1)  # no rate keeps the limit at this chunk
                continue
            e2e_floor_ns = overhead_ns + pass_ns + transfer + (wl.osl - 1) * round_ns
            v_max = (spare_ns + share * s1_ns + NS_SLACK) / (share * (e2e_floor_ns + spare_ns))
            row.append(_units_above(v_max * NS_PER_S / s1_ns) + 1)
        caps.append(row)
    return PairCuts(chunk_floor, batch_floor, caps)


__all__ = ["PairCuts", "batch_levels", "capacity_below", "chunk_levels", "pair_cuts"]
