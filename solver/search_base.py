"""What every search shares: its deadline, what it returns, and the check of its --allow switches.

No solver here: the integer-batch search (``batch_search.py``) runs without OR-Tools, whose import
(with pandas and numpy) is a large share of a short command's start-up; the CP-SAT search
(``cpsat_search.py``) and ``optimise.py`` build on these.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from shardplan.models.errors import SolverLimitError
from shardplan.rules.catalog import check_allow
from shardplan.rules.layout import Layout
from shardplan.rules.problem import Problem
from shardplan.solver.cost.disagg import steady_states
from shardplan.solver.cost.evaluate import evaluations, round_pricings
from shardplan.solver.oracle import Candidate, Oracle
from shardplan.solver.tables import Tables

STEP_LIMIT_S = 1.0  # budget of one improvement step under --time-limit, before it is settled without an objective
# The same in CP-SAT's deterministic time, for every search the clock does not bound. Without --time-limit
# the answer is proven either way; in work the path to it is the same on every machine too (a Dinkelbach
# step scaled to stay in 64 bits, ``cpsat_search.Ratio.target``, depends on where the path went). Measured
# on gpt-oss-120b, 32x8xB200, --batch 32 (the same plan each time): 1 s wall steps 8.1 s of CPU at load 6;
# work steps of 0.1 / 0.2 / 0.5 units 10.8 / 10.1 / 16.1 s at load 8-9 (a 1 s step had done 0.6-0.75).
STEP_WORK = 0.2
PREP_GRACE_S = 0.5  # how far past the deadline the cost tables may still finish (Deadline.check)
NODE_WORK = 1e-4  # work of one branch-and-bound node: about its CPU seconds (6.6-9e-5 s measured per node)
WORK_FLOOR = 1e-3  # the least deterministic time a solve is given: enough to read the model and say UNKNOWN
# The work of the pure-Python loops, about their CPU seconds as NODE_WORK is a node's: an exact check of a
# deployment or a plan (judge every rule) is CHECK_WORK, and each ``evaluate`` call its pricing makes
# EVALUATE_WORK (a disaggregated check prices a decode pool at many batches: 0.13 s and ~25 evaluations a
# check on Kimi-K2 14x72xGB200, 3-5 ms an evaluation; benchmarks/fuzz/README.md, 2026-11-27; those rounds are
# now priced alone, ROUND_WORK below). Counted
# (``Deadline.checking``) where those loops run: the disaggregated walk, seed, questions and enumeration, the
# colocated enumeration's plans; so a work limit cuts them at the same place at any load. Each disaggregated
# steady state solved is STEADY_WORK more (``cost.disagg.steady_state``): on Qwen3-235B-A22B, 64x8xH200,
# SGLang, TTFT 2 s, the walk's 5,389 checks made 181,000 of them, 74 s of CPU, and with their ``evaluate``
# calls memoised were counted as 7.6 units (2026-12-07).
CHECK_WORK = 1e-3
EVALUATE_WORK = 4e-3
STEADY_WORK = 4e-4
# A decode worker's round priced alone (``cost.evaluate.decode_round_ns``: a disaggregated check's steady states
# ask it at each batch they try, and it prices no prefill, memory or breakdown): its batch searches took 0.15-0.18
# ms of CPU per round on Qwen3-30B-A3B and Mixtral-8x22B over 64x8xH200 and Kimi-K2 over 14x72xGB200 (2026-12-08).
# Counted as an ``evaluate`` call, the checks of Qwen3-30B-A3B on 64x8xH200 under SGLang were 15.3 units for 3.1 s
# of CPU, and the default work limit ended that search short of its proof.
ROUND_WORK = 2e-4
# Listing and ordering one (x, y) choice of a pair in the disaggregated enumeration (``frontier.py``): up to
# 4,096 a pair, 0.5 s of CPU on 8192x8xH200 (DeepSeek-V3) against one exact check of ~0.07 units, so the
# default work limit let `enumerate --serving disagg` there run past 120 s.
CHOICE_WORK = 1e-4
# The solutions one CP-SAT solve may find, and the work a solve stopped there has done. CP-SAT's deterministic
# time hardly counts a search that finds solution after solution without a conflict: a disaggregated question
# on 8192x8xH100 (Llama-3.1-8B) raised its rate by one unit per solution, 31,739 solutions in 10 s of wall clock
# and 0.05 units, eight times over, so the default work limit took 63 s there and over 120 s on 131072x8xH100.
# A plan search's solve finds at most 4 (every preset example and benchmark case measured, 2026-11-28), and
# the first 1,000 of that crawl took 0.08 s, about SOLUTION_WORK each (as NODE_WORK is a node's).
MOST_SOLUTIONS = 1000
SOLUTION_WORK = 1e-4
# The work ``solve`` and ``enumerate`` get without --time-limit or --work-limit (``--work-limit 0``: none, a
# search to the end): above every case that proves today, so those print the same bytes, and low enough that
# the searches that did not end (benchmarks/fuzz/README.md, 2026-11-27) end in about a minute.
DEFAULT_WORK_LIMIT = 15.0

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


def units_of_work(amount: float) -> str:
    """``amount`` as a message names it: "1 unit of work", "0.5 units of work", "15 units of work"."""
    return f"{amount:g} unit{'' if amount == 1 else 's'} of work"


class Deadline:
    """The limit of a whole search: wall-clock seconds (``--time-limit``), or work.

    Work is CP-SAT's deterministic time plus the branch and bound's nodes at ``NODE_WORK`` each: the
    same on every machine and at every load, so a search bounded by work alone ends at the same place
    and prints the same bytes (the runner-up without --time-limit). The work done is counted either
    way (``work_done``), so a later search can be given a multiple of an earlier one's.
    """

    def __init__(self, time_limit_s: float | None, work_limit: float | None = None):
        self.limit_s = time_limit_s
        self.end = None if time_limit_s is None else time.perf_counter() + time_limit_s
        self.work_limit = work_limit
        self.work_done = 0.0

    def passed(self) -> bool:
        return self.by_work() or (self.end is not None and time.perf_counter() >= self.end)

    def spend(self, work: float) -> None:
        """Count ``work`` units done (a CP-SAT solve's deterministic time, branch-and-bound nodes)."""
        self.work_done += work

    @contextmanager
    def checking(self) -> Iterator[None]:
        """Count the exact check inside as work: ``CHECK_WORK``, ``EVALUATE_WORK`` per ``evaluate``, ``ROUND_WORK``
        per decode round priced alone and ``STEADY_WORK`` per disaggregated steady state."""
        before, rounds, states = evaluations(), round_pricings(), steady_states()
        try:
            yield
        finally:
            self.spend(CHECK_WORK + EVALUATE_WORK * (evaluations() - before) + ROUND_WORK * (round_pricings() - rounds)
                       + STEADY_WORK * (steady_states() - states))

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Stop the clock inside: for loading a search's code on its first use (OR-Tools, about 0.4 s in a new
        process), which is not searching. A process that loaded it before, as the MCP server does at start, never
        pays it, and a --time-limit shorter than the import left the command line no plan where the server had one."""
        started = time.perf_counter()
        try:
            yield
        finally:
            if self.end is not None:
                self.end += time.perf_counter() - started

    def by_work(self) -> bool:
        """Whether the work limit, not the clock, is what ended the search (``passed`` and no plan proven)."""
        return self.work_limit is not None and self.work_done >= self.work_limit

    def work_left(self) -> float | None:
        """The work a CP-SAT solve may still do (None: unbounded)."""
        if self.work_limit is None:
            return None
        return max(WORK_FLOOR, self.work_limit - self.work_done)

    def step_work(self) -> float | None:
        """Work budget of one improvement step, unless only the clock bounds the search (``step``): the
        steps, not only the answer, are then the same on every machine and at every load."""
        if self.end is not None and self.work_limit is None:
            return None
        left = self.work_left()
        return STEP_WORK if left is None else min(STEP_WORK, left)

    def _work_ended(self) -> bool:
        """Whether a message names the work limit: it is what ended the search, or the only limit given.
        With both given, the one that ran out first is named (as ``solve --serving auto``'s status does)."""
        return self.by_work() or (self.limit_s is None and self.work_limit is not None)

    def within(self) -> str:
        """The limit that ended the search, as a message names it: "5 s", "1 unit of work" or "10 units of work"."""
        if self._work_ended():
            assert self.work_limit is not None  # _work_ended says so
            return units_of_work(self.work_limit)
        return f"{self.limit_s:g} s"

    def no_plan(self, what: str = "plan") -> str:
        """The one line a search cut short before any ``what`` says (names the option, as bad input does)."""
        if self._work_ended():
            return f"work-limit: no {what} found within {self.within()} (--work-limit 0 searches to the end)"
        return f"time-limit: no {what} found within {self.within()}"

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
        """Wall-clock budget of one improvement step: only under a wall-clock limit (``step_work``)."""
        left = self.remaining()
        return None if left is None else min(STEP_LIMIT_S, left)


def check_switches(problem: Problem) -> None:
    """Every --allow switch must name a rule that can be turned off."""
    check_allow(problem.allow)
