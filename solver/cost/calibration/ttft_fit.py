"""TTFT under load per engine: the two serving-stack fields of an engine profile, fitted to that
engine's closed-loop runs.

``evaluate`` prices TTFT at concurrency C as the prompt's own prefill, the decode rounds its chunk
steps carry and half a step on arrival, plus two terms of the serving stack (``evaluate.under_load``):

- ``ttft_queue_share`` (k, 0-0.5): the share of the other C - 1 prompts in flight whose prefill a new
  prompt waits behind. Arrivals spread evenly over the cycle give 0; a wave in which every request
  arrives with all the others (the start of a closed-loop run: C requests at once) makes the j-th of
  them wait for j - 1, a mean of (C - 1) / 2, so 0.5. A run of r requests per client whose first wave
  is such a burst and whose later arrivals are spread by it gives about 1 / (2r): 0.05 for the
  ten requests per client that the usual genai-perf / aiperf recipe sets. The measured TTFT grows
  by about 0.05 of a prompt's prefill per request in flight on every engine (benchmarks/accuracy/
  README.md), whatever the output length: a queue of steady-state arrivals would shrink with it.
- ``request_overhead_ms`` (0-500 ms): the fixed cost per request outside the engine's steps (HTTP
  front end, tokenisation, scheduling, the first token's way back); the AIC-SILICON runs measure
  100-450 ms at four requests in flight where the prefill is priced at tens of milliseconds.

An engine whose prefill does not mix with decode (``prefill_mixes_with_decode`` false: SGLang) also
pays its whole prefill batch, min(p, 1 + k x (C - 1)) prompts (``evaluate.under_load``): TTFT then grows
with k through the batch as well, piecewise linearly (``TtftRun.core_ms``); the grid handles it alike.

Both are the serving stack's, not the GPU's, so one pair is fitted per engine over all its GPUs
(two fields per engine), with the step physics (TPOT fields, hardware profile) held fixed. TTFT is
linear in the two fields, ``ttft = base + k x queue_unit + overhead`` (``TtftRun``), so the fit is an
exhaustive grid over both ranges minimising the mean |log(predicted / measured)| (least absolute
deviations: a run with a start-up outlier of seconds moves it no more than any other run).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from shardplan.hardware.profile import Profile
from shardplan.solver.cost.calibration.engine_fit import AT_BOUND_SHARE, EngineRun
from shardplan.solver.cost.evaluate import evaluate

TTFT_FIELDS: tuple[str, ...] = ("ttft_queue_share", "request_overhead_ms")
TTFT_BOUNDS: dict[str, tuple[float, float]] = {"ttft_queue_share": (0.0, 0.5), "request_overhead_ms": (0.0, 500.0)}
# Grid steps: a thousandth of the share (the integer model's unit) and a millisecond.
SHARE_STEP, OVERHEAD_STEP_MS = 0.001, 1.0


@dataclass(frozen=True)
class TtftRun:
    """One run's TTFT as the cost model prices it without the two fields, and what was measured:
    predicted TTFT = ``base_ms`` + k x ``queue_unit_ms`` + overhead (up to the integer nanoseconds)."""

    base_ms: float  # own prefill, chunk steps' decode rounds, half a step on arrival
    queue_unit_ms: float  # (C - 1) x slowest chunk stage / prompts per chunk
    measured_ms: float
    model: str
    concurrency: int
    own_ms: float = 0.0  # the prompt's share of its chunk (prefill / p), which a non-mixing engine multiplies
    chunk: int = 1  # p, the prompts per chunk: the largest prefill batch
    mixes: bool = True  # prefill_mixes_with_decode of the profile

    def core_ms(self, share: float) -> float:
        """TTFT without the fixed cost, at queue share ``share``: where prefill does not mix with decode
        the prompt's batch holds min(p, 1 + share x (C - 1)) prompts instead of its own share."""
        extra = 0.0 if self.mixes else self.own_ms * (min(self.chunk, 1 + share * (self.concurrency - 1)) - 1)
        return self.base_ms + share * self.queue_unit_ms + extra


def ttft_run(run: EngineRun, profile: Profile) -> TtftRun:
    """``run`` priced with ``profile`` less its serving-stack fields."""
    bare = profile.model_copy(update={"ttft_queue_share": 0.0, "request_overhead_ms": 0.0})
    pred = evaluate(run.problem, run.layout, bare)
    slowest_ms = max(s.prefill_ms + s.send_prefill_ms for s in pred.stages)
    unit = (run.layout.batch - 1) * slowest_ms / pred.prefill_chunk
    own_ms = sum(s.prefill_ms + s.send_prefill_ms for s in pred.stages) / pred.prefill_chunk
    return TtftRun(pred.metrics.ttft_ms, unit, run.ttft_ms, run.model, run.layout.batch, own_ms,
                   pred.prefill_chunk, profile.prefill_mixes_with_decode)


def predicted_ms(run: TtftRun, share: float, overhead_ms: float) -> float:
    return run.core_ms(share) + overhead_ms


def _grid(field: str, step: float) -> list[float]:
    lo, hi = TTFT_BOUNDS[field]
    return [lo + i * step for i in range(round((hi - lo) / step) + 1)]


def fit_ttft(runs: Sequence[TtftRun]) -> tuple[float, float]:
    """(ttft_queue_share, request_overhead_ms) minimising the mean |log(predicted / measured)| over
    ``runs``, on a grid of both ranges (ties: the smaller share, then the smaller overhead)."""
    logs = [math.log(r.measured_ms) for r in runs]
    best: tuple[float, float, float] | None = None
    for share in _grid("ttft_queue_share", SHARE_STEP * 5):
        cores = [r.core_ms(share) for r in runs]
        for overhead in _grid("request_overhead_ms", OVERHEAD_STEP_MS * 5):
            loss = sum(abs(math.log(c + overhead) - m) for c, m in zip(cores, logs, strict=True))
            if best is None or loss < best[0] - 1e-12:
                best = (loss, share, overhead)
    assert best is not None, "fit_ttft needs runs"
    # Refine at the fine steps around the coarse optimum.
    _, s0, o0 = best
    for share in (s0 + i * SHARE_STEP for i in range(-5, 6)):
        if not TTFT_BOUNDS["ttft_queue_share"][0] <= share <= TTFT_BOUNDS["ttft_queue_share"][1]:
            continue
        cores = [r.core_ms(share) for r in runs]
        for overhead in (o0 + i * OVERHEAD_STEP_MS for i in range(-5, 6)):
            if not TTFT_BOUNDS["request_overhead_ms"][0] <= overhead <= TTFT_BOUNDS["request_overhead_ms"][1]:
                continue
            loss = sum(abs(math.log(c + overhead) - m) for c, m in zip(cores, logs, strict=True))
            if loss < best[0] - 1e-12:
                best = (loss, share, overhead)
    return round(best[1], 3), round(best[2], 1)


def errors(runs: Sequence[TtftRun], share: float, overhead_ms: float) -> list[float]:
    return [predicted_ms(r, share, overhead_ms) / r.measured_ms - 1 for r in runs]


def median_abs(values: Sequence[float]) -> float:
    return statistics.median(abs(v) for v in values) if values else float("nan")


def leave_one_model_out(runs: Sequence[TtftRun]) -> list[float]:
    """Each model's TTFT errors with the two fields fitted on the engine's other models."""
    out: list[float] = []
    for model in sorted({r.model for r in runs}):
        train = [r for r in runs if r.model != model]
        if train:
            out += errors([r for r in runs if r.model == model], *fit_ttft(train))
    return out


BANDS: tuple[tuple[str, int, float], ...] = (("2-16", 2, 16), ("17-128", 17, 128), (">128", 129, math.inf))


def leave_one_band_out(runs: Sequence[TtftRun]) -> dict[str, list[float]]:
    """Each concurrency band's TTFT errors with the two fields fitted on the other bands."""
    out: dict[str, list[float]] = {}
    for name, lo, hi in BANDS:
        test = [r for r in runs if lo <= r.concurrency <= hi]
        train = [r for r in runs if not lo <= r.concurrency <= hi]
        if test and train:
            out[name] = errors(test, *fit_ttft(train))
    return out


def at_bound(field: str, value: float) -> bool:
    lo, hi = TTFT_BOUNDS[field]
    margin = AT_BOUND_SHARE * (hi - lo)
    return value <= lo + margin or value >= hi - margin


def with_ttft_fields(profile: Profile, share: float, overhead_ms: float, runs: int, error: float) -> Profile:
    """``profile`` carrying the fitted pair, its source saying so."""
    note = (f"; ttft_queue_share and request_overhead_ms fitted by benchmarks/accuracy/serving.py --refit-ttft: "
            f"least absolute deviations of log(predicted/measured) TTFT over the engine's {runs} runs on every GPU "
            f"whose engine version the source names (one pair per engine), median |TTFT error| on them {error:.1%}")
    source = profile.source.split("; ttft_queue_share and request_overhead_ms fitted")[0] + note
    return profile.model_copy(update={"ttft_queue_share": share, "request_overhead_ms": overhead_ms, "source": source})
