"""Composed profiles, checked by leaving one GPU out: what prices an engine on a GPU it has no profile of.

``python -m benchmarks.accuracy.compose`` takes each engine profile fitted on runs under load (SGLang on H200 and
B200; vLLM and TensorRT-LLM on H100, H200 and B200), pretends it does not exist, builds the profile
``hardware/compose.py`` would compose from what is left, and prices that engine's colocated runs on that GPU (the
runs ``serving.py`` prices) with it, beside (a) the engine's own fitted profile and (b) today's fallback, the GPU's
default (table) profile. Out of sample means:

- the behaviour fields (``compose.BEHAVIOUR_FIELDS``) come from the engine's fitted profiles of its *other* GPUs,
  and the three TTFT fields among them are fitted again (``ttft_fit.fit_ttft``, as ``serving.py --refit-ttft``
  fits them) on the engine's named-version runs of those GPUs only: the stored ones were fitted on every GPU's
  runs, the held-out GPU's included;
- the step fields (``compose.STEP_FIELDS``), where a candidate takes them from the engine, are the median of the
  engine's other GPUs' fitted ones (each fitted on its own GPU's runs only);
- nothing is fitted on the held-out runs.

Candidates (named in the table; each is behaviour fields from the engine, the rest from a base):
- ``table``: the GPU's default (table) profile as the base;
- ``table+steps``: the same with the engine's step fields too;
- ``sibling``: another engine's profile of the GPU as the base (``compose.BASE_ORDER``), with the operator terms
  (KV stream, attention kernel fixed time, MoE costs, full-width passes) an engine fit starts from and that
  engine's step fields;
- ``sibling+steps``: the same with the engine's step fields.

The rule, fixed before the table was first printed: a candidate beats the fallback if its median |TTFT| and its
median |TPOT| over every held-out run (pooled) are both below the fallback's; of those, the one with the least
sum of the two is taken, and the table candidate (the only one a GPU without any engine profile can have) is
taken for such GPUs only if it beats the fallback by the same rule. Nothing is written.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import cast

from benchmarks.accuracy.serving import engine_runs, load_runs, names_its_version
from shardplan.hardware.compose import (
    BEHAVIOUR_FIELDS,
    SEPARATOR,
    STEP_FIELDS,
    base_for,
    compose_on,
    fitted_engine_profiles,
)
from shardplan.hardware.profile import Engine, Profile, get_profile, list_profiles, profile_for_gpu
from shardplan.solver.cost.calibration.engine_fit import EngineRun
from shardplan.solver.cost.calibration.ttft_fit import TtftRun, fit_ttft, ttft_run
from shardplan.solver.cost.evaluate import evaluate

REFERENCES = ("own", "fallback")
CANDIDATES = ("table", "table+steps", "sibling", "sibling+steps")
# A GPU with no stored profile at all (a preset without measurements, H20, H800, MI300X, or a GPU a user describes)
# is priced with the generic profile; ``generic+behaviour`` is the engine's behaviour on it, judged against it.
GENERIC = ("generic", "generic+behaviour")


@dataclass(frozen=True)
class Cell:
    """One profile's errors on one held-out group: predicted / measured - 1 of each run's TTFT and TPOT."""

    ttft: list[float]
    tpot: list[float]


def errors(runs: Sequence[EngineRun], profile: Profile) -> Cell:
    predicted = [evaluate(r.problem, r.layout, profile).metrics for r in runs]
    return Cell([m.ttft_ms / r.ttft_ms - 1 for m, r in zip(predicted, runs, strict=True)],
                [m.tpot_ms / r.tpot_ms - 1 for m, r in zip(predicted, runs, strict=True)])


def median_abs(values: Sequence[float]) -> float:
    return statistics.median(abs(v) for v in values) if values else float("nan")


def ttft_runs_per_gpu(groups: dict[tuple[str, str], list[EngineRun]]) -> dict[tuple[str, str], list[TtftRun]]:
    """Per (engine, GPU), the named-version runs each priced with the engine's stored profile of that GPU less its
    TTFT fields: what ``serving.py --refit-ttft`` fits on, kept apart per GPU so one GPU can be left out."""
    out = {}
    for (engine, gpu), runs in groups.items():
        profile = profile_for_gpu(gpu, cast(Engine, engine))
        out[(engine, gpu)] = [ttft_run(r, profile) for r in runs if names_its_version(r.version)]
    return out


def held_out_sources(engine: str, gpu: str, profiles: Sequence[Profile],
                     ttft: dict[tuple[str, str], list[TtftRun]]) -> list[Profile]:
    """The engine's fitted profiles of its other GPUs, their TTFT fields fitted again on those GPUs' runs only."""
    sources = fitted_engine_profiles(engine, profiles, without_gpu=gpu)
    train = [r for (e, g), runs in ttft.items() if e == engine and g != gpu for r in runs]
    fields = fit_ttft(train)
    update = {"ttft_queue_share": fields.share, "ttft_wait_steps": fields.wait_steps,
              "request_overhead_ms": fields.overhead_ms}
    return [p.model_copy(update=update) for p in sources]


def candidates(engine: str, gpu: str, profiles: Sequence[Profile], sources: Sequence[Profile]) -> dict[str, Profile]:
    """Each candidate composition of ``engine`` on ``gpu`` from ``profiles`` (the engine's profile of the GPU left
    out) and ``sources`` (the engine's other GPUs' profiles, out of sample)."""
    table = next(p for p in profiles if p.default and p.gpu == gpu)
    sibling = base_for(gpu, engine, profiles)
    assert sibling is not None and sibling.engine_default, f"{gpu} has no other engine's profile"
    name = f"{table.name}{SEPARATOR}{engine}"
    steps = (*BEHAVIOUR_FIELDS, *STEP_FIELDS)
    return {
        "table": compose_on(table, engine, sources, BEHAVIOUR_FIELDS, name),
        "table+steps": compose_on(table, engine, sources, steps, name),
        "sibling": compose_on(sibling, engine, sources, BEHAVIOUR_FIELDS, name),
        "sibling+steps": compose_on(sibling, engine, sources, steps, name),
    }


def generic_pair(engine: str, sources: Sequence[Profile]) -> dict[str, Profile]:
    """The generic profile, and the engine's behaviour on it: what a GPU without any stored profile is priced with
    today and the composition ``hardware/compose.py`` makes for it. The generic profile's fields are medians over
    the GPUs' table profiles, the held-out GPU's among them, so this judges the behaviour fields only."""
    generic = get_profile("generic")
    return {"generic": generic,
            "generic+behaviour": compose_on(generic, engine, sources, BEHAVIOUR_FIELDS, f"generic{SEPARATOR}{engine}")}


def leave_one_gpu_out(
    groups: dict[tuple[str, str], list[EngineRun]], profiles: Sequence[Profile]
) -> dict[tuple[str, str], dict[str, Cell]]:
    """Per held-out (engine, GPU): each reference's and candidate's errors on its runs."""
    ttft = ttft_runs_per_gpu(groups)
    out = {}
    for (engine, gpu), runs in groups.items():
        own = profile_for_gpu(gpu, cast(Engine, engine))
        if not (own.engine_default and own.engine == engine):
            continue
        rest = [p for p in profiles if p is not own]
        sources = held_out_sources(engine, gpu, rest, ttft)
        priced = {"own": own, "fallback": next(p for p in rest if p.default and p.gpu == gpu),
                  **candidates(engine, gpu, rest, sources), **generic_pair(engine, sources)}
        out[(engine, gpu)] = {name: errors(runs, p) for name, p in priced.items()}
    return out


def pooled(results: dict[tuple[str, str], dict[str, Cell]], column: str, pick: Callable[[Cell], list[float]]
           ) -> float:
    return median_abs([e for cells in results.values() for e in pick(cells[column])])


def beats(results: dict[tuple[str, str], dict[str, Cell]], column: str, reference: str) -> bool:
    """Whether ``column``'s pooled median |TTFT| and |TPOT| are both below ``reference``'s."""
    return all(pooled(results, column, pick) < pooled(results, reference, pick)
               for pick in (lambda c: c.ttft, lambda c: c.tpot))


def chosen(results: dict[tuple[str, str], dict[str, Cell]]) -> tuple[str | None, bool]:
    """The rule of the module's docstring: the candidate taken where a GPU has another engine's profile (None:
    none beats the fallback), and whether the table candidate is taken where it has none."""

    def total(column: str) -> float:
        return pooled(results, column, lambda c: c.ttft) + pooled(results, column, lambda c: c.tpot)

    winners = sorted((c for c in CANDIDATES if beats(results, c, "fallback")), key=total)
    return (winners[0] if winners else None), beats(results, "table", "fallback")


def generic_taken(results: dict[tuple[str, str], dict[str, Cell]]) -> bool:
    """The same rule for GPUs without any stored profile: the engine's behaviour on the generic profile is taken if
    it beats the generic profile's own."""
    return beats(results, "generic+behaviour", "generic")


def print_results(results: dict[tuple[str, str], dict[str, Cell]]) -> None:
    columns = (*REFERENCES, *CANDIDATES, *GENERIC)
    print("leave one GPU out: each engine profile left out and composed from the rest; median |TTFT| / |TPOT| "
          "on the engine's colocated runs of that GPU")
    print(f"  {'engine':7s} {'GPU':9s} {'runs':>4s}  " + "  ".join(f"{c:>15s}" for c in columns))
    for (engine, gpu), cells in results.items():
        n = len(cells["own"].ttft)
        print(f"  {engine:7s} {gpu:9s} {n:4d}  " + "  ".join(
            f"{median_abs(cells[c].ttft):6.1%} /{median_abs(cells[c].tpot):6.1%}" for c in columns))
    n = sum(len(cells["own"].ttft) for cells in results.values())
    print(f"  {'pooled':17s} {n:4d}  " + "  ".join(
        f"{pooled(results, c, lambda x: x.ttft):6.1%} /{pooled(results, c, lambda x: x.tpot):6.1%}" for c in columns))
    winner, table = chosen(results)
    generic = "taken" if generic_taken(results) else "not taken"
    print(f"taken (both pooled medians below the fallback's, least sum): {winner or 'none: no candidate beats it'}; "
          f"for GPUs without another engine's profile, table: {'taken' if table else 'not taken'}; "
          f"for GPUs without any stored profile, generic+behaviour: {generic}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.accuracy.compose", description=__doc__.split("\n\n")[0])
    ap.parse_args(argv)
    runs, _ = load_runs()
    print_results(leave_one_gpu_out(engine_runs(runs), list_profiles()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
