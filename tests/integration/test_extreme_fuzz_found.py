"""What the extremes campaign found (benchmarks/fuzz/README.md, 2026-11-27): valid inputs on big clusters
ran 4-40x past --time-limit because work before any search never looked at the deadline. Each piece of work
now asks a deadline between its steps; a deadline already past (Deadline(-1): its grace over too) shows
that without any timing. The campaign's inputs themselves run in ``tests/fuzz`` (FOUND_EXTREMES)."""

from __future__ import annotations

import pytest

from shardplan.models.errors import SolverLimitError
from shardplan.solver import batch_search
from shardplan.solver.cost.disagg import engine_profile
from shardplan.solver.cost.evaluate import resolve_profile
from shardplan.solver.disagg.frontier import DisaggEnumeration
from shardplan.solver.disagg.prune import pruned_pools
from shardplan.solver.disagg.workers import worker_layouts
from shardplan.solver.optimise import Deadline
from shardplan.solver.oracle import Oracle
from shardplan.solver.space import SearchSpace
from shardplan.solver.tables import build_tables
from tests.factory import problem


def _past() -> Deadline:
    return Deadline(-1.0)  # ended a second ago: its check raises at once


def test_worker_layouts_ask_the_deadline_before_each() -> None:
    p = problem("qwen3-30b-a3b", "2x8xH100")
    every = list(worker_layouts(p, "decode", engine_profile(p)))
    calls: list[int] = []

    def check() -> None:
        calls.append(1)
        if len(calls) == 3:
            raise SolverLimitError("time-limit: test")

    with pytest.raises(SolverLimitError):
        list(worker_layouts(p, "decode", engine_profile(p), check))
    assert len(every) > 3 and len(calls) == 3


def test_the_disaggregated_pools_stop_at_a_past_deadline() -> None:
    """18x72xGB200, ISL 2: pricing every worker layout took 8 s past --time-limit 0.5 (solve) and 20 s
    (enumerate) before any search started."""
    p = problem("mixtral-8x7b", "8xH100", objective="throughput")
    with pytest.raises(SolverLimitError):
        pruned_pools(p, engine_profile(p), _past())
    run = DisaggEnumeration(p, limit=1, time_limit_s=-1.0)  # a partial enumeration of nothing, not an error
    assert (run.pools.prefill, run.pools.decode, list(run), run.partial) == ([], [], [], True)


def test_the_integer_batch_roots_stop_at_a_past_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 2-token prompt gives a root per prefill chunk size: 174,000 nodes priced (15 s) before the search's
    first deadline check, past --time-limit 0.5. Now the roots ask it per (shape, stage count): none is
    priced past the deadline."""
    p = problem("mixtral-8x7b", "8xH100", objective="throughput", isl=2, osl=500)
    space = SearchSpace(p, resolve_profile(p), ranges=False)
    deadline = _past()
    tables = build_tables(p, space, lazy=True)
    pushed: list[int] = []
    real_push = batch_search._Branching.push

    def push(self, *args, **kw) -> None:  # type: ignore[no-untyped-def]
        pushed.append(1)
        real_push(self, *args, **kw)

    monkeypatch.setattr(batch_search._Branching, "push", push)
    with pytest.raises(SolverLimitError):
        batch_search.best_integer_batch(Oracle(tables), deadline.passed, deadline.check)
    assert pushed == []
