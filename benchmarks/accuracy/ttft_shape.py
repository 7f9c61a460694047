"""The shape of the TTFT error under load: where it sits, and whether it is bias or scatter.

``python -m benchmarks.accuracy.serving --shape`` prints, per engine, the runs' TTFT error sliced by what
could carry a missing mechanism: the source's campaign, whether it names the engine version, the
concurrency band, ISL, GPU, model, tensor-parallel degree, attention DP and whether every sequence fits
memory. Each slice shows its median |error|, its **bias** (median signed error: a term missing on one side)
and its **scatter** (the median |error| left once the slice's median ratio is divided out: what no term
constant over the slice can remove). Repeats of one configuration the source measured more than once bound
what any model can reach: ``repeat_spread`` is how far such repeats disagree with each other.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Summary:
    """One slice: runs, median |error|, median signed error, median |error| about the slice's median ratio."""

    runs: int
    median_abs: float
    bias: float
    scatter: float


def summarise(errors: Sequence[float]) -> Summary:
    """``errors`` are predicted / measured - 1. Scatter divides each ratio by the slice's median ratio:
    a slice whose every run is 30 % high has bias +30 % and scatter 0.

    >>> summarise([0.5, 0.5, 0.5])
    Summary(runs=3, median_abs=0.5, bias=0.5, scatter=0.0)
    """
    assert errors, "summarise needs errors"
    centre = statistics.median(1 + e for e in errors)
    return Summary(
        len(errors),
        statistics.median(abs(e) for e in errors),
        centre - 1,
        statistics.median(abs((1 + e) / centre - 1) for e in errors),
    )


def by_slice(items: Iterable[tuple[str, float]]) -> dict[str, Summary]:
    """(slice label, error) pairs summarised per label, labels in sorted order."""
    groups: dict[str, list[float]] = defaultdict(list)
    for label, error in items:
        groups[label].append(error)
    return {label: summarise(groups[label]) for label in sorted(groups, key=_natural)}


def _natural(label: str) -> tuple[float, str]:
    """Labels by the first number in them ("c 2-16" before "c 17-128", "tp2" before "tp8"), then by text."""
    found = re.search(r"\d+", label)
    return (float(found.group()) if found else math.inf), label


def repeat_spread(measured: Iterable[tuple[Hashable, float]]) -> tuple[int, float, float]:
    """Configurations measured more than once with different values, from (configuration, measured value)
    pairs: (how many, the median of max / min - 1 over them, and the median |error| of the best single
    prediction per configuration, the geometric mean of its repeats, over every repeat). The second is how
    far two measurements of the same thing disagree; the third a floor for any model on those runs.

    >>> [round(x, 9) for x in repeat_spread([("a", 100.0), ("a", 400.0), ("b", 50.0)])]
    [1, 3.0, 0.75]
    """
    groups: dict[Hashable, list[float]] = defaultdict(list)
    for key, value in measured:
        groups[key].append(value)
    repeated = [v for v in groups.values() if len(v) > 1 and max(v) > min(v)]
    if not repeated:
        return 0, math.nan, math.nan
    spreads = [max(v) / min(v) - 1 for v in repeated]
    floors = []
    for values in repeated:
        centre = math.exp(statistics.fmean(math.log(v) for v in values))
        floors += [abs(centre / v - 1) for v in values]
    return len(repeated), statistics.median(spreads), statistics.median(floors)


class PricedRun(Protocol):
    """What the shape report reads of a priced run (``serving.Priced``)."""

    @property
    def ttft_error(self) -> float: ...


def engine_slices(
    priced: Sequence[PricedRun], slices: dict[str, Callable[[PricedRun], str]]
) -> dict[str, dict[str, Summary]]:
    """Per slice name, the runs' TTFT errors summarised per label of that slice."""
    return {name: by_slice((label(p), p.ttft_error) for p in priced) for name, label in slices.items()}


def print_shape(
    engine: str, priced: Sequence[PricedRun], slices: dict[str, Callable[[PricedRun], str]],
    repeats: tuple[int, float, float],
) -> None:
    """One engine's slices, and how far its repeated configurations disagree."""
    whole = summarise([p.ttft_error for p in priced])
    print(f"  {engine}: {whole.runs} runs, |TTFT| {whole.median_abs:.1%}, bias {whole.bias:+.1%}, "
          f"scatter {whole.scatter:.1%}")
    for name, rows in engine_slices(priced, slices).items():
        cells = "; ".join(f"{label} {s.median_abs:.0%} ({s.runs}, bias {s.bias:+.0%}, scatter {s.scatter:.0%})"
                          for label, s in rows.items())
        print(f"    {name}: {cells}")
    count, spread, floor = repeat_spread_cells(repeats)
    print(f"    repeated configurations (same engine version, model, formats, GPU, layout, workload, concurrency; "
          f"measured again with another TTFT): {count}, median max/min - 1 {spread}, floor of any model on them "
          f"(each repeat priced at their geometric mean) {floor}")


def repeat_spread_cells(repeats: tuple[int, float, float]) -> tuple[int, str, str]:
    count, spread, floor = repeats
    if not count:
        return 0, "-", "-"
    return count, f"{spread:.0%}", f"{floor:.0%}"
