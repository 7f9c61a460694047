"""What every search shares: its deadline, what it returns, and the check of its --allow switches.

No solver here: the integer-batch search (``batch_search.py``) runs without OR-Tools, whose import
(with pandas and numpy) is a large share of a short command's start-up; the CP-SAT search
(``cpsat_search.py``) and ``optimise.py`` build on these.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from shardplan.models.errors import SolverLimitError, SpecError
from shardplan.rules.catalog import SWITCHES, unknown_switches
from shardplan.rules.layout import Layout
from shardplan.rules.problem import Problem
from shardplan.solver.oracle import Candidate, Oracle
from shardplan.solver.tables import Tables

STEP_LIMIT_S = 1.0  # budget of one improvement step before it is settled without an objective
PREP_GRACE_S = 0.5  # how far past the deadline the cost tables may still finish (Deadline.check)

# Where the improvement loop starts: an oracle's candidate on the encoding's tables, or None.
Seed = Callable[[Oracle], Candidate | None]


@dataclass(frozen=True)
class Optimum:
    """The layout a search settled on, whether it is proven optimal, and the objective it reached:
    e2e ns for latency, output tokens/s (rounded) for throughput."""

    layout: Layout
    proven: bool
    objective_value: int
    bound: float | None = None  # when not proven: the best proven bound on the objective, same units
    gap: float | None = None  # when not proven: relative distance of the objective from ``bound``


@dataclass(frozen=True)
class NoPlan:
    """No layout keeps every rule (and the exclusions); the tables searched, for ``explain``."""

    tables: Tables


class Deadline:
    """The wall-clock limit of a whole search."""

    def __init__(self, time_limit_s: float | None):
        self.limit_s = time_limit_s
        self.end = None if time_limit_s is None else time.perf_counter() + time_limit_s

    def passed(self) -> bool:
        return self.end is not None and time.perf_counter() >= self.end

    def no_plan(self) -> str:
        """The one line a search cut short before any plan says (names the option, as bad input does)."""
        return f"time-limit: no plan found within {self.limit_s:g} s"

    def allows(self, cost_s: float) -> bool:
        """Whether at least ``cost_s`` seconds remain (always, without a limit)."""
        return self.end is None or self.end - time.perf_counter() >= cost_s

    def check(self) -> None:
        """Raise SolverLimitError when the work before the search (the cost tables) is still running
        ``PREP_GRACE_S`` past the deadline: a limit a little shorter than that work still returns the
        oracle's plan (the search itself is then skipped), a much shorter one ends at once."""
        if self.end is not None and time.perf_counter() >= self.end + PREP_GRACE_S:
            raise SolverLimitError(self.no_plan())

    def remaining(self) -> float | None:
        return None if self.end is None else max(0.01, self.end - time.perf_counter())

    def step(self) -> float | None:
        """Wall-clock budget of one improvement step."""
        left = self.remaining()
        return STEP_LIMIT_S if left is None else min(STEP_LIMIT_S, left)


def check_switches(problem: Problem) -> None:
    """Every --allow switch must name a rule that can be turned off."""
    bad = unknown_switches(problem.allow)
    if bad:
        raise SpecError("allow", f"unknown switch {bad[0]!r}; known: {', '.join(sorted(SWITCHES))}")
