"""``InterruptibleSolver``: a Ctrl-C stops the search and reaches the caller, also when it lands while the search's
thread is being started."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from ortools.sat.python import cp_model

from shardplan.solver.interruptible import InterruptibleSolver


class _Slow(cp_model.CpSolverSolutionCallback):
    """Takes 10 ms per solution: a search over a million solutions outlasts any test unless it is stopped."""

    def on_solution_callback(self) -> None:
        time.sleep(0.01)


def _long_search() -> tuple[InterruptibleSolver, cp_model.CpModel]:
    model = cp_model.CpModel()
    model.new_int_var(0, 1_000_000, "x")
    solver = InterruptibleSolver()
    solver.parameters.enumerate_all_solutions = True
    return solver, model


def _searching() -> bool:
    return any(t.name == "cp-sat" and t.is_alive() for t in threading.enumerate())


def _ctrl_c_in(seconds: float) -> threading.Timer:
    timer = threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    return timer


def test_a_ctrl_c_during_the_search_stops_it_and_reaches_the_caller() -> None:
    assert threading.current_thread() is threading.main_thread()  # where Python raises KeyboardInterrupt
    solver, model = _long_search()
    timer = _ctrl_c_in(0.3)
    with pytest.raises(KeyboardInterrupt):
        solver.solve(model, _Slow())
    timer.join()
    assert not _searching()


def test_a_ctrl_c_while_the_search_s_thread_starts_stops_it_too(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ctrl-C inside ``Thread.start`` (its wait for the new thread) came out of ``solve`` with the search left
    running, unstopped (a process ending so aborts in OR-Tools' C++); now it is raised once the thread is started,
    and the search is stopped first."""
    assert threading.current_thread() is threading.main_thread()
    start = threading.Thread.start

    def start_then_ctrl_c(thread: threading.Thread) -> None:
        start(thread)
        if thread.name == "cp-sat":
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)  # Python handles the signal here, inside start, as in its wait

    monkeypatch.setattr(threading.Thread, "start", start_then_ctrl_c)
    solver, model = _long_search()
    with pytest.raises(KeyboardInterrupt):
        solver.solve(model, _Slow())
    assert not _searching()
