"""A call that runs past its bound is answered with an error, and no later handler runs until the
abandoned one has ended (solver/mcp/server.py ``Worker``): behaviour, not speed; every bound is far
from the work's length, or the work is held by an event the test controls."""

from __future__ import annotations

import threading

import anyio
import pytest

from shardplan.models import SolverLimitError
from shardplan.solver.mcp.server import Worker


def test_a_call_past_its_bound_is_abandoned_and_the_next_waits_for_its_thread() -> None:
    release = threading.Event()  # holds the first call until the test lets it go
    ran = []

    async def drive() -> int:
        worker = Worker()
        with pytest.raises(SolverLimitError, match="ran past its bound of 0.1 s"):
            await worker.run(lambda: release.wait(30) and 0, 0.1)
        # The abandoned handler still runs: the next one does not start beside it, and says why.
        with pytest.raises(SolverLimitError, match="^busy: an earlier call abandoned"):
            await worker.run(lambda: ran.append("second"), 0.1)
        release.set()
        return await worker.run(lambda: 41 + 1, 30.0)

    assert anyio.run(drive) == 42
    assert ran == []  # the call given up while it waited never ran its work


def test_handlers_never_overlap() -> None:
    inside, most = [0], [0]
    lock = threading.Lock()

    def work() -> int:
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        threading.Event().wait(0.05)
        with lock:
            inside[0] -= 1
        return 1

    async def drive() -> int:
        worker = Worker()
        with pytest.raises(SolverLimitError):
            await worker.run(work, 0.01)  # abandoned while its thread still runs
        return sum([await worker.run(work, 30.0) for _ in range(3)])

    assert anyio.run(drive) == 3 and most[0] == 1
