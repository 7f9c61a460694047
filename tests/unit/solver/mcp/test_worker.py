"""A call that runs past its bound is answered with an error and the worker takes the next call
(solver/mcp/server.py ``Worker``): behaviour, not speed; the bound is far from the work's length."""

from __future__ import annotations

import threading

import anyio
import pytest

from shardplan.models import SolverLimitError
from shardplan.solver.mcp.server import Worker


def test_a_call_past_its_bound_is_abandoned_and_the_next_one_runs() -> None:
    release = threading.Event()  # holds the first call until the test lets it go

    async def drive() -> tuple[int, int]:
        worker = Worker()
        with pytest.raises(SolverLimitError, match="ran past its bound of 0.1 s"):
            await worker.run(lambda: release.wait(30) and 0, 0.1)
        first = await worker.run(lambda: 41 + 1, 30.0)
        release.set()  # the abandoned thread ends; nothing waits for its answer
        second = await worker.run(lambda: sum(range(4)), 30.0)
        return first, second

    assert anyio.run(drive) == (42, 6)
