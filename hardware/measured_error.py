"""How far the engine profiles' predictions fell from measured runs under load: the error bars a plan carries.

``measured_error.json`` holds, per serving mode (one pool, or disaggregated pools) and engine, the median
relative error of TTFT and TPOT over the serving runs of ``benchmarks/accuracy/data/serving_points.csv``, each
run priced as ``shardplan evaluate`` prices it with the engine's default profile for the run's GPU. It is
written by ``python -m benchmarks.accuracy.measured_error --write`` and a test keeps it equal to what the
benchmark computes from today's code, so the figures a plan quotes are the ones measured. Nothing here
computes a prediction; it only holds and finds the figures.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeFloat, PositiveInt

from shardplan.hardware.profile import Engine

MEASURED_ERROR_FILE = Path(__file__).parent / "measured_error.json"

Serving = Literal["colocated", "disagg"]


class ErrorFigure(BaseModel):
    """The median of a metric's relative error, predicted / measured - 1, over an engine's runs."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    median_abs: NonNegativeFloat = Field(description="median |predicted / measured - 1|: half the runs were closer")
    median: float = Field(description="median of predicted / measured - 1: below 0, predictions ran low (fast)")


def in_band(low: int, high: int | None, in_flight: int) -> bool:
    """Whether ``in_flight`` requests fall in the band ``low``..``high`` (both ends included; ``high`` None: open)."""
    return low <= in_flight and (high is None or in_flight <= high)


class BandError(BaseModel):
    """The error over an engine's runs at one band of requests in flight (the error grows with load)."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    low: PositiveInt = Field(description="fewest requests in flight over the instance or deployment in the band")
    high: PositiveInt | None = Field(description="most requests in flight in the band; None: no upper end")
    runs: PositiveInt = Field(description="runs measured in the band")
    ttft: ErrorFigure = Field(description="time to first token")
    tpot: ErrorFigure = Field(description="time per output token after the first")

    def holds(self, in_flight: int) -> bool:
        return in_band(self.low, self.high, in_flight)


class EngineError(BaseModel):
    """An engine's measured error in one serving mode, and what it was measured on."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    runs: PositiveInt = Field(description="serving runs priced, each measurement once")
    gpus: tuple[str, ...] = Field(description="GPU presets the runs were measured on, sorted")
    ttft: ErrorFigure = Field(description="time to first token")
    tpot: ErrorFigure = Field(description="time per output token after the first")
    bands: tuple[BandError, ...] = Field(description="the same per band of requests in flight, bands with runs only")

    def band_of(self, in_flight: int) -> BandError | None:
        """The band holding ``in_flight`` requests, or None where no run was measured at such a load."""
        return next((b for b in self.bands if b.holds(in_flight)), None)


class MeasuredErrors(BaseModel):
    """The stored figures: per serving mode, per engine."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    source: str = Field(description="the command that wrote the figures, and the runs they are over")
    colocated: dict[Engine, EngineError] = Field(description="one pool per replica (`--serving colocated`)")
    disagg: dict[Engine, EngineError] = Field(description="separate prefill and decode pools (`--serving disagg`)")

    def of(self, engine: Engine, serving: Serving) -> EngineError | None:
        """The figures of ``engine`` in ``serving`` mode; None where no run of it was measured."""
        return (self.colocated if serving == "colocated" else self.disagg).get(engine)


@cache
def measured_errors() -> MeasuredErrors:
    """The figures stored with the package (read once)."""
    return MeasuredErrors.model_validate(json.loads(MEASURED_ERROR_FILE.read_text(encoding="utf-8")))


__all__ = [
    "MEASURED_ERROR_FILE", "BandError", "EngineError", "ErrorFigure", "MeasuredErrors", "Serving", "in_band",
    "measured_errors",
]
