"""Bisection on a target load, for heuristics (the lowest target they reach) and bounds (the highest
target a test proves out of reach). Neither assumes the test is monotone in the target: each keeps only
results it has seen, so what it returns is valid whatever the bisection does."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

_Result = TypeVar("_Result")


def lowest_reached(attempt: Callable[[float], _Result | None], lo: float, hi: float, steps: int,
                   rel: float) -> _Result | None:
    """``attempt(target)`` at the lowest target in ``[lo, hi]`` where it succeeds (``hi`` first; None if
    even that fails, or if ``hi`` is not above 0: a split of subnormal loads may round every GPU's to 0,
    leaving no target to reach and one to divide by)."""
    if hi <= 0:
        return None
    found = attempt(hi)
    if found is None:
        return None
    for _ in range(steps):
        mid = (lo + hi) / 2
        if hi - lo <= rel * hi or not lo < mid < hi:  # no float between them (subnormal loads: mid rounds to 0)
            break
        tried = attempt(mid)
        if tried is None:
            lo = mid
        else:
            hi, found = mid, tried
    return found


def highest_proven(proves: Callable[[float], bool], proven: float, feasible: float, steps: int = 40,
                   rel: float = 1e-8) -> float:
    """The largest target ``proves`` rules out between ``proven`` (a valid bound) and ``feasible`` (a
    reached load), keeping "``lo`` is proven"; ``proven`` itself if ``proves`` cannot rule it out. The
    default ``rel`` is finer than place.OPTIMAL_TOLERANCE, so a met bound reads as optimal."""
    if feasible <= proven or proven > 0 and not proves(proven):  # a bound of 0 needs no proof (nor divides by it)
        return proven
    lo, hi = proven, feasible
    for _ in range(steps):
        mid = (lo + hi) / 2
        if not lo < mid < hi:
            break
        if proves(mid):
            lo = mid
        else:
            hi = mid
        if hi - lo <= rel * hi:
            break
    return lo
