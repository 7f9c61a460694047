"""TTFT under load per engine: the serving-stack fields of an engine profile, fitted to that engine's
closed-loop runs.

``evaluate`` prices TTFT at concurrency C as the prompt's own prefill and the decode rounds its chunk
steps carry, plus three terms of the serving stack (``evaluate.under_load``):

- ``ttft_wait_steps`` (w, 0-16): scheduler iterations between a prompt's arrival and its first token
  beyond its own chunk steps, priced at a decode round each: half a step on arrival (0.5) plus what
  the engine adds before the first token leaves it (an overlapped scheduler's step, a context request's
  first generation step, the streaming of the token).
- ``ttft_queue_share`` (k, 0-0.5): the share of the other C - 1 prompts in flight whose prefill a new
  prompt waits behind. Arrivals spread evenly over the cycle give 0; a wave in which every request
  arrives with all the others (the start of a closed-loop run: C requests at once) makes the j-th of
  them wait for j - 1, a mean of (C - 1) / 2, so 0.5. A run of r requests per client whose first wave
  is such a burst, the later arrivals staggered by it (fixed ISL and OSL keep them so), gives about
  1 / (2r): ``BURST_QUEUE_SHARE`` = 0.05 for the ten requests per client of the usual genai-perf /
  aiperf recipe (``--request-count`` 10 x the concurrency). A steady-state queue (Kingman's
  rho / (1 - rho) x prefill, rho = C x prefill per prompt / cycle) cannot stand in for it: at the
  runs' prefill utilisation (a few per cent at 1k/8k) it is milliseconds where the measured TTFT grows
  by tenths of a second (benchmarks/accuracy/README.md, "TTFT: the shape of the error").
- ``request_overhead_ms`` (0-500 ms): the fixed cost per request outside the engine's steps (HTTP
  front end, tokenisation, scheduling, the first token's way back).

Which two are fitted follows the engine's policy (``fitted_fields``), one set per engine over all its
GPUs, the step physics (TPOT fields, hardware profile) held fixed:
- an engine whose prefill **mixes with decode** (vLLM, TensorRT-LLM): w and the fixed cost; k is the
  recipe's burst share. Its first token waits for the iterations its scheduler runs, which the fit reads.
- an engine whose prefill **does not mix** (``prefill_mixes_with_decode`` false: SGLang's prefill-first
  scheduler): k and the fixed cost; w is half a step (a prompt waits only for the decode step in
  progress, then runs in a prefill batch of its own). It pays its whole batch, min(p, 1 + k x (C - 1))
  prompts (``TtftRun.core_ms``), so k carries the batch as well as the burst.

TTFT is linear in w, k (piecewise, not mixing) and the fixed cost, so the fit is an exhaustive grid
over both free ranges minimising the mean |log(predicted / measured)| (least absolute deviations: a
run with a start-up outlier of seconds moves it no more than any other run).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from shardplan.hardware.profile import Profile
from shardplan.solver.cost.calibration.engine_fit import EngineRun
from shardplan.solver.cost.calibration.fit import at_an_end
from shardplan.solver.cost.evaluate import evaluate, slots_held

TTFT_FIELDS: tuple[str, ...] = ("ttft_queue_share", "ttft_wait_steps", "request_overhead_ms")
TTFT_BOUNDS: dict[str, tuple[float, float]] = {
    "ttft_queue_share": (0.0, 0.5), "ttft_wait_steps": (0.0, 16.0), "request_overhead_ms": (0.0, 500.0),
}
BURST_QUEUE_SHARE = 0.05  # 1 / (2 x 10 requests per client): the recipe's burst, not fitted where w is
ARRIVAL_WAIT_STEPS = 0.5  # half a decode step on arrival, not fitted where k is
# Grid steps: the integer model's units (a thousandth of the share, a tenth of a step) and a millisecond.
GRID_STEP: dict[str, float] = {"ttft_queue_share": 0.001, "ttft_wait_steps": 0.1, "request_overhead_ms": 1.0}


def fitted_fields(mixes: bool) -> tuple[str, str]:
    """The two fields fitted for an engine whose prefill mixes with decode (``mixes``) or does not."""
    return ("ttft_wait_steps" if mixes else "ttft_queue_share", "request_overhead_ms")


@dataclass(frozen=True)
class TtftFields:
    """One engine's serving-stack fields."""

    share: float  # ttft_queue_share
    wait_steps: float  # ttft_wait_steps
    overhead_ms: float  # request_overhead_ms


@dataclass(frozen=True)
class TtftRun:
    """One run's TTFT as the cost model prices it without the serving-stack fields, and what was measured:
    predicted TTFT = ``base_ms`` + w x ``round_ms`` + k x ``queue_unit_ms`` (+ the batch, not mixing) +
    overhead (up to the integer nanoseconds)."""

    base_ms: float  # own prefill and, mixing under load, the chunk steps' decode rounds
    queue_unit_ms: float  # (C - 1) x slowest chunk stage / prompts per chunk
    measured_ms: float
    model: str
    concurrency: int
    own_ms: float = 0.0  # the prompt's share of its chunk (prefill / p), which a non-mixing engine multiplies
    chunk: int = 1  # p, the prompts per chunk: the largest prefill batch
    mixes: bool = True  # prefill_mixes_with_decode of the profile
    round_ms: float = 0.0  # a decode round under load (0 at C = 1: nothing to wait for)
    source: str = ""  # the measurement's origin, for leave-one-source-out
    # C / slots held (``evaluate.slots_held``): above 1 only where the engine reserves whole sequences and C of them
    # do not fit. The slot wait is (C - held) / held of the held batch's end-to-end, whose TTFT carries the fields,
    # so every field's term enters C / held times (``base_ms`` holds the rest of that wait).
    slot_factor: float = 1.0

    def core_ms(self, share: float, wait_steps: float) -> float:
        """TTFT without the fixed cost: where prefill does not mix with decode the prompt's batch holds
        min(p, 1 + share x (C - 1)) prompts instead of its own share."""
        held = self.concurrency / self.slot_factor
        extra = 0.0 if self.mixes else self.own_ms * (min(self.chunk, 1 + share * (held - 1)) - 1)
        return self.base_ms + self.slot_factor * (wait_steps * self.round_ms + share * self.queue_unit_ms + extra)


def ttft_run(run: EngineRun, profile: Profile) -> TtftRun:
    """``run`` priced with ``profile`` less its serving-stack fields."""
    bare = profile.model_copy(update={"ttft_queue_share": 0.0, "request_overhead_ms": 0.0, "ttft_wait_steps": 0.0})
    pred = evaluate(run.problem, run.layout, bare)
    held = slots_held(run.problem, run.layout, profile)  # the batch the steps are priced at
    slowest_ms = max(s.prefill_ms + s.send_prefill_ms for s in pred.stages)
    unit = (held - 1) * slowest_ms / pred.prefill_chunk
    own_ms = sum(s.prefill_ms + s.send_prefill_ms for s in pred.stages) / pred.prefill_chunk
    round_ms = pred.metrics.decode_step_ms if held > 1 else 0.0
    return TtftRun(pred.metrics.ttft_ms, unit, run.ttft_ms, run.model, run.layout.batch, own_ms,
                   pred.prefill_chunk, profile.prefill_mixes_with_decode, round_ms, run.origin,
                   run.layout.batch / held)


def predicted_ms(run: TtftRun, fields: TtftFields) -> float:
    return run.core_ms(fields.share, fields.wait_steps) + run.slot_factor * fields.overhead_ms


def _grid(field: str, step: float) -> list[float]:
    lo, hi = TTFT_BOUNDS[field]
    return [lo + i * step for i in range(round((hi - lo) / step) + 1)]


def _fields(mixes: bool, free: float, overhead_ms: float) -> TtftFields:
    if mixes:
        return TtftFields(BURST_QUEUE_SHARE, free, overhead_ms)
    return TtftFields(free, ARRIVAL_WAIT_STEPS, overhead_ms)


def fit_ttft(runs: Sequence[TtftRun]) -> TtftFields:
    """The fields minimising the mean |log(predicted / measured)| over ``runs`` (one engine: all mix or
    none does), its two free ones (``fitted_fields``) on a grid of their ranges (ties: the smaller free
    field, then the smaller overhead)."""
    assert runs, "fit_ttft needs runs"
    mixes = runs[0].mixes
    free_name, over_name = fitted_fields(mixes)
    logs = [math.log(r.measured_ms) for r in runs]

    factors = [r.slot_factor for r in runs]

    def loss(free: float, overhead: float, cores: list[float]) -> float:
        return sum(abs(math.log(c + f * overhead) - m) for c, f, m in zip(cores, factors, logs, strict=True))

    def cores(free: float) -> list[float]:
        f = _fields(mixes, free, 0.0)
        return [r.core_ms(f.share, f.wait_steps) for r in runs]

    best: tuple[float, float, float] | None = None
    for free in _grid(free_name, GRID_STEP[free_name] * 5):
        at = cores(free)
        for overhead in _grid(over_name, GRID_STEP[over_name] * 5):
            value = loss(free, overhead, at)
            if best is None or value < best[0] - 1e-12:
                best = (value, free, overhead)
    assert best is not None
    # Refine at the fine steps around the coarse optimum.
    _, f0, o0 = best
    for free in (f0 + i * GRID_STEP[free_name] for i in range(-5, 6)):
        if not TTFT_BOUNDS[free_name][0] <= free <= TTFT_BOUNDS[free_name][1]:
            continue
        at = cores(free)
        for overhead in (o0 + i * GRID_STEP[over_name] for i in range(-5, 6)):
            if not TTFT_BOUNDS[over_name][0] <= overhead <= TTFT_BOUNDS[over_name][1]:
                continue
            value = loss(free, overhead, at)
            if value < best[0] - 1e-12:
                best = (value, free, overhead)
    return _fields(mixes, round(best[1], 3), round(best[2], 1))


def errors(runs: Sequence[TtftRun], fields: TtftFields) -> list[float]:
    return [predicted_ms(r, fields) / r.measured_ms - 1 for r in runs]


def median_abs(values: Sequence[float]) -> float:
    return statistics.median(abs(v) for v in values) if values else float("nan")


def _leave_one_out(runs: Sequence[TtftRun], key: Callable[[TtftRun], str]) -> list[float]:
    """Each group's TTFT errors (groups by ``key``) with the fields fitted on the engine's other groups."""
    out: list[float] = []
    for group in sorted({key(r) for r in runs}):
        train = [r for r in runs if key(r) != group]
        if train:
            out += errors([r for r in runs if key(r) == group], fit_ttft(train))
    return out


def leave_one_model_out(runs: Sequence[TtftRun]) -> list[float]:
    """Each model's TTFT errors with the fields fitted on the engine's other models."""
    return _leave_one_out(runs, lambda r: r.model)


def leave_one_source_out(runs: Sequence[TtftRun]) -> list[float]:
    """Each source's (measurement origin's) TTFT errors with the fields fitted on the engine's other sources."""
    return _leave_one_out(runs, lambda r: r.source)


BANDS: tuple[tuple[str, int, float], ...] = (("2-16", 2, 16), ("17-128", 17, 128), (">128", 129, math.inf))


def leave_one_band_out(runs: Sequence[TtftRun]) -> dict[str, list[float]]:
    """Each concurrency band's TTFT errors with the two fields fitted on the other bands."""
    out: dict[str, list[float]] = {}
    for name, lo, hi in BANDS:
        test = [r for r in runs if lo <= r.concurrency <= hi]
        train = [r for r in runs if not lo <= r.concurrency <= hi]
        if test and train:
            out[name] = errors(test, fit_ttft(train))
    return out


def at_bound(field: str, value: float) -> bool:
    return at_an_end(value, *TTFT_BOUNDS[field])


def with_ttft_fields(
    profile: Profile, fields: TtftFields, runs: int, error: float,
    fitted_by: str = "benchmarks/accuracy/serving.py --refit-ttft",
    runs_note: str = "on every GPU whose engine version the source names (one set per engine)",
) -> Profile:
    """``profile`` carrying the engine's serving-stack fields, its source saying which were fitted (by
    ``fitted_by``, on the engine's ``runs`` runs ``runs_note``)."""
    free = " and ".join(fitted_fields(profile.prefill_mixes_with_decode))
    if profile.prefill_mixes_with_decode:
        fixed = f"ttft_queue_share {BURST_QUEUE_SHARE:g} (the recipe's burst: 1 / (2 x 10 requests per client))"
    else:
        fixed = f"ttft_wait_steps {ARRIVAL_WAIT_STEPS:g} (half a step on arrival)"
    note = (f"; TTFT under load: {free} fitted by {fitted_by}: least absolute deviations of log(predicted/measured) "
            f"TTFT over the engine's {runs} runs {runs_note}, median |TTFT error| on them {error:.1%}; {fixed}")
    source = profile.source.split("; ttft_queue_share and request_overhead_ms fitted")[0].split("; TTFT under load:")[0]
    return profile.model_copy(update={
        "ttft_queue_share": fields.share, "ttft_wait_steps": fields.wait_steps,
        "request_overhead_ms": fields.overhead_ms, "source": source + note,
    })
