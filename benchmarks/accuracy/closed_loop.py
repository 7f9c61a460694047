"""``python -m benchmarks.accuracy.closed_loop``: two checks of how a closed-loop run shares its steps between
prefill and decode (README, "SGLang's scheduler rule and the closed loop's cycle, 2026-11-27"). Tried, not taken.

**The cycle.** ``under_load`` prices TPOT as the decode round plus the other C - 1 requests' prefill spread over
OSL tokens: Little's law with a user's cycle taken as OSL x TPOT. The cycle is TTFT + OSL x TPOT, so the prompts
that arrive while a request decodes are (C - 1) x OSL x TPOT / (TTFT + OSL x TPOT), fewer where TTFT is a large
part of the cycle (short outputs). ``cycle_share`` is that fixed point in integers; ``--cycle`` prices every run
with it (the profiles as stored, nothing refit) beside the stored form; ``--refit`` applies it and reruns the
repo's own commands (``serving --refit``, ``disagg --write-same-die-profiles``, ``accuracy --brief``), which
**rewrite hardware/profiles/*.json** (restore them with ``git checkout hardware/profiles``). It is not in
``evaluate``: the solver's encoding (``solver/encode.py``) mirrors ``under_load`` exactly, and this form needs a
product of TTFT and TPOT (and TTFT bounded from both sides), which the encoding does not have.

**SGLang's scheduler rule.** SGLang (no mixed chunk by default) runs a batch of the waiting prompts, up to its
token budget, before any decode step. ``--scheduler`` prices SGLang's named-version runs (the TTFT fit's runs) by
that rule alone, with only the fixed cost per request fitted, in two limits: arrivals spread over the steady
state (the prompt waits for the step in progress and its own batch, which holds the prompts that arrived during
that step), and a discrete-event run of the rule for C clients sending ``--requests`` uniform requests each, all
starting at once. Step times are the model's: one prompt's prefill at C = 1, the chunk's per-prompt time for a
batch, the decode round at C.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import shardplan.solver.cost.evaluate as evaluate_module
from benchmarks.accuracy.serving import ServingRun, load_runs, names_its_version
from shardplan.hardware.profile import profile_for_gpu
from shardplan.solver.cost.evaluate import ServingStack, UnderLoad
from shardplan.solver.placement.plan import place_and_price

BANDS = ((2, 16), (17, 64), (65, 128), (129, 100_000))
SGLANG_BUDGET = 8192  # --chunked-prefill-size under 160 GB of HBM (server_args.py), the profiles' max_num_tokens


def cycle_share(ttft_ns: int, round_ns: int, slowest_chunk_ns: int, batch: int, osl: int, chunk: int) -> int:
    """The other requests' prefill per token when a user's cycle is TTFT + OSL x TPOT: the least s >= 0 with
    chunk x s x (ttft + osl x (round + s)) >= (C - 1) x slowest chunk x (round + s); with ttft = 0 it is the
    stored ceil((C - 1) x slowest chunk / (OSL x chunk)).

    >>> cycle_share(0, 10, 40, 3, 5, 1), cycle_share(50, 10, 40, 3, 5, 1)
    (16, 11)
    """
    work = (batch - 1) * slowest_chunk_ns

    def enough(s: int) -> bool:
        return chunk * s * (ttft_ns + osl * (round_ns + s)) >= work * (round_ns + s)

    a = work / chunk
    b = ttft_ns + osl * round_ns - a
    s = max(0, math.ceil((-b + math.sqrt(b * b + 4 * osl * a * round_ns)) / (2 * osl)) - 2)
    while not enough(s):
        s += 1
    while s > 0 and enough(s - 1):
        s -= 1
    return s


def _under_load_cycle(stored: Callable[..., UnderLoad]) -> Callable[..., UnderLoad]:
    def priced(
        prefill_ns: int, round_ns: int, slowest_chunk_ns: int, batch: int, osl: int, chunk: int, steps: int,
        stack: ServingStack,
    ) -> UnderLoad:
        load = stored(prefill_ns, round_ns, slowest_chunk_ns, batch, osl, chunk, steps, stack)
        if batch <= 1:
            return load
        share = cycle_share(load.ttft_ns, round_ns, slowest_chunk_ns, batch, osl, chunk)
        tpot = round_ns + share
        return UnderLoad(load.decode_step_ns, share, load.own_prefill_ns, load.wait_ns, load.queue_ns,
                         load.overhead_ns, load.ttft_ns, tpot, load.ttft_ns + (osl - 1) * tpot)
    return priced


@contextmanager
def cycle_in_evaluate() -> Iterator[None]:
    """``evaluate`` prices TPOT with the cycle's share while the block runs."""
    stored = evaluate_module.under_load
    evaluate_module.under_load = _under_load_cycle(stored)
    try:
        yield
    finally:
        evaluate_module.under_load = stored


def _median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def tpot_errors(runs: Sequence[ServingRun]) -> list[float]:
    return [place_and_price(r.problem, r.layout)[1].metrics.tpot_ms / r.tpot_ms - 1 for r in runs]


def print_cycle(runs: Sequence[ServingRun]) -> None:
    stored = tpot_errors(runs)
    with cycle_in_evaluate():
        cycled = tpot_errors(runs)
    print("TPOT, the profiles as stored (nothing refit): stored share / the cycle's share, median |error| (bias)")
    groups: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(runs):
        groups[r.engine].append(i)
        if r.engine == "sglang" and r.problem.model.name == "meta-llama/Llama-3.1-8B" and r.problem.workload.osl <= 100:
            groups["sglang Llama-3.1-8B, OSL 100"].append(i)
    groups["all"] = list(range(len(runs)))
    for name, idx in groups.items():
        a, b = [stored[i] for i in idx], [cycled[i] for i in idx]
        print(f"  {name:30s} {len(idx):4d} runs  {_median([abs(e) for e in a]):6.1%} ({_median(a):+.1%})  ->  "
              f"{_median([abs(e) for e in b]):6.1%} ({_median(b):+.1%})")


@dataclass(frozen=True)
class Steps:
    """One run's step times as the model prices them (ms)."""

    run: ServingRun
    modelled_ttft: float
    one_prompt: float  # one prompt's prefill, at C = 1 (less the fixed cost)
    per_prompt: float  # the chunk's time per prompt
    chunk: int
    round: float
    overhead: float


def steps(run: ServingRun) -> Steps:
    layout, pred, _ = place_and_price(run.problem, run.layout)
    _, one, _ = place_and_price(run.problem, run.layout.model_copy(update={"batch": 1}))
    overhead = profile_for_gpu(run.problem.cluster.gpu.name, "sglang").request_overhead_ms
    chunk_ms = sum(s.prefill_ms + s.send_prefill_ms for s in pred.stages)
    return Steps(run, pred.metrics.ttft_ms, one.metrics.ttft_ms - overhead, chunk_ms / pred.prefill_chunk,
                 pred.prefill_chunk, pred.metrics.decode_step_ms, overhead)


def steady_state(s: Steps) -> float:
    """TTFT less the fixed cost with arrivals spread (rate from the run's measured cycle): the rest of the step in
    progress (a decode round, or a prefill batch a share rho of the time) and the prompt's own batch, which holds
    the prompts that arrived during that step."""
    rate = s.run.concurrency / _cycle_ms(s.run)
    rho = min(1.0, rate * s.one_prompt)
    return (1 - rho) * s.round / 2 + rho * s.one_prompt / 2 + max(s.one_prompt, (1 + rate * s.round) * s.per_prompt)


def waves(s: Steps, requests: int) -> float:
    """Mean TTFT less the fixed cost of a discrete-event run of the rule: C clients, ``requests`` uniform requests
    each, all starting at once; a prefill batch of the waiting prompts (FCFS, up to the token budget) whenever one
    waits, else a decode round of every running request."""
    wl, clients = s.run.problem.workload, s.run.layout.batch
    per_batch = max(1, SGLANG_BUDGET // wl.isl)
    now, sent = 0.0, dict.fromkeys(range(clients), 0.0)
    left = dict.fromkeys(range(clients), requests - 1)
    waiting: list[tuple[float, int]] = [(0.0, c) for c in range(clients)]
    running: list[list[int]] = []
    ttfts: list[float] = []
    while waiting or running:
        ready = sorted(w for w in waiting if w[0] <= now)
        if ready:
            batch = ready[:per_batch]
            for w in batch:
                waiting.remove(w)
            now += max(s.one_prompt, len(batch) * s.per_prompt)
            for _, c in batch:
                ttfts.append(now - sent[c])
                running.append([wl.osl - 1, c])
            continue
        if not running:
            now = min(waiting)[0]
            continue
        now += s.round
        for item in running:
            item[0] -= 1
        for item in [i for i in running if i[0] <= 0]:
            running.remove(item)
            c = item[1]
            if left[c] > 0:
                left[c] -= 1
                sent[c] = now
                waiting.append((now, c))
    return statistics.mean(ttfts)


def _band_cells(named: Sequence[Steps], errors: Sequence[float]) -> str:
    """Median |error| (median signed error) per concurrency band."""
    cells = []
    for lo, hi in BANDS:
        band = [e for s, e in zip(named, errors, strict=True) if lo <= s.run.concurrency <= hi]
        top = hi if hi < BANDS[-1][1] else ""
        cells.append(f"c {lo}-{top} {_median([abs(e) for e in band]):.0%} ({_median(band):+.0%})")
    return "  ".join(cells)


def print_scheduler(runs: Sequence[ServingRun], requests: int) -> None:
    named = [steps(r) for r in runs if r.engine == "sglang" and names_its_version(r.engine_version)]
    started = time.monotonic()
    limits = {"steady state": [steady_state(s) for s in named],
              f"waves ({requests} requests per client)": [waves(s, requests) for s in named]}
    print(f"SGLang's scheduler rule alone on its {len(named)} named-version runs, the fixed cost per request the only "
          f"fitted field (grid 0-500 ms); the stored model for comparison ({time.monotonic() - started:.0f} s):")
    for name, core in limits.items():
        fixed = min(range(0, 501, 5), key=lambda f: _median(
            [abs((c + f) / s.run.ttft_ms - 1) for s, c in zip(named, core, strict=True)]))
        err = [(c + fixed) / s.run.ttft_ms - 1 for s, c in zip(named, core, strict=True)]
        print(f"  {name:30s} fixed {fixed:3d} ms  |TTFT| {_median([abs(e) for e in err]):5.1%}  "
              + _band_cells(named, err))
    stored = [s.modelled_ttft / s.run.ttft_ms - 1 for s in named]
    print(f"  {'stored model (k fitted)':30s} {'':13s} |TTFT| {_median([abs(e) for e in stored]):5.1%}  "
          + _band_cells(named, stored))
    per_round = [s.run.concurrency * s.round / _cycle_ms(s.run) for s in named]
    busy = [s.run.concurrency * s.one_prompt / _cycle_ms(s.run) for s in named]
    print(f"  arrivals per decode round: median {_median(per_round):.3f}, max {max(per_round):.2f}; prefill busy "
          f"share (rate x one prompt): median {_median(busy):.2f}")


def _cycle_ms(run: ServingRun) -> float:
    """A client's measured cycle: TTFT and the rest of its output."""
    return run.ttft_ms + (run.problem.workload.osl - 1) * run.tpot_ms


def refit_with_cycle() -> None:
    from benchmarks.accuracy import __main__ as accuracy
    from benchmarks.accuracy import disagg, serving

    with cycle_in_evaluate():
        serving.main(["--refit"])
        disagg.main(["--write-same-die-profiles"])
        accuracy.main(["--brief"])


def holdout_with_cycle() -> None:
    from benchmarks.accuracy import serving

    with cycle_in_evaluate():
        serving.main(["--holdout"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.accuracy.closed_loop", description=__doc__.split("\n\n")[0])
    ap.add_argument("--cycle", action="store_true", help="TPOT with the cycle's share beside the stored one")
    ap.add_argument("--scheduler", action="store_true", help="SGLang's TTFT by its scheduler rule alone")
    ap.add_argument("--requests", type=int, default=10, help="requests per client of the simulated run (10)")
    ap.add_argument("--refit", action="store_true",
                    help="apply the cycle's share and rerun the refit commands: REWRITES hardware/profiles/*.json")
    ap.add_argument("--holdout", action="store_true",
                    help="serving --holdout with the cycle's share (the held-out fits refit in memory; writes nothing)")
    args = ap.parse_args(argv)
    if args.holdout:
        holdout_with_cycle()
        return 0
    if args.refit:
        refit_with_cycle()
        return 0
    runs, _ = load_runs()
    if args.cycle or not args.scheduler:
        print_cycle(runs)
    if args.scheduler or not args.cycle:
        print_scheduler(runs, args.requests)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
