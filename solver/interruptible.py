"""A CP-SAT solver that Ctrl-C stops: the search ends at once and ``KeyboardInterrupt`` reaches the caller.

By default CP-SAT catches SIGINT itself and ends the search as if its time limit had come, so a Ctrl-C
turned into a normal, unproven answer (``solve`` printed a plan and exited 0), and the handler it put back
afterwards was the system's, so the next Ctrl-C killed the process by the signal, output half written.
Here CP-SAT leaves SIGINT to Python, and the search runs in a worker thread (the solve call releases the
GIL) while the main thread waits, where Python delivers ``KeyboardInterrupt``: the search is stopped,
its end awaited, and the interruption raised on.

``most_solutions``, when set, also stops a search at that many solutions (``capped`` says it did): CP-SAT's
deterministic time hardly counts a search that finds solution after solution without a conflict, each
improving the objective by one unit (a disaggregated question on 65,536 GPUs: 31,739 solutions in 10 s of
wall clock and 0.05 units of deterministic time), so a work limit alone did not bound it.
"""

from __future__ import annotations

import threading

from ortools.sat.python import cp_model
from ortools.sat.python.cp_model_helper import CpSolverStatus

from shardplan.solver.held_sigint import deferred_sigint

POLL_S = 0.05  # how often the waiting thread looks up: Python delivers signals between its waits


class _Counter(cp_model.CpSolverSolutionCallback):
    """Counts a search's solutions and stops it at the ``most``-th (the same place on every run: one worker)."""

    def __init__(self, most: int) -> None:
        super().__init__()
        self.most = most
        self.count = 0

    def on_solution_callback(self) -> None:
        self.count += 1
        if self.count >= self.most:
            self.stop_search()


class InterruptibleSolver(cp_model.CpSolver):
    def __init__(self, most_solutions: int | None = None) -> None:
        super().__init__()
        self.parameters.catch_sigint_signal = False
        self.most_solutions = most_solutions
        self.solutions = 0  # found by the last solve, when most_solutions is set and no callback was given
        self.capped = False  # the last solve stopped at most_solutions

    def solve(
        self, model: cp_model.CpModel, solution_callback: cp_model.CpSolverSolutionCallback | None = None
    ) -> CpSolverStatus:
        outcome: dict[str, CpSolverStatus | BaseException] = {}
        finished = threading.Event()
        counter = None
        if solution_callback is None and self.most_solutions is not None:
            solution_callback = counter = _Counter(self.most_solutions)

        def search() -> None:
            try:
                outcome["status"] = cp_model.CpSolver.solve(self, model, solution_callback)
            except BaseException as exc:  # noqa: BLE001 - handed to the calling thread below
                outcome["error"] = exc
            finally:
                finished.set()

        thread = threading.Thread(target=search, name="cp-sat", daemon=True)
        started = False
        # An Event, not Thread.join: a join that KeyboardInterrupt broke into can return early (CPython 3.11),
        # and a process that exits while the search still runs aborts in OR-Tools' C++.
        try:
            # Started whole, or not at all: a Ctrl-C inside Thread.start (its wait for the new thread) left the
            # search running unstopped while the interruption went on; held back, it is raised here, started known.
            with deferred_sigint():
                thread.start()
                started = True
            while not finished.wait(POLL_S):
                pass
        except KeyboardInterrupt:
            while started and not finished.is_set():  # stopped until it ends: it may not have begun at the first stop
                self.stop_search()
                try:
                    finished.wait(POLL_S)
                except KeyboardInterrupt:
                    pass  # a second Ctrl-C: the search is being stopped already
            raise
        if "error" in outcome:
            raise outcome["error"]  # type: ignore[misc]  # the worker's own exception, re-raised here
        status = outcome["status"]
        assert isinstance(status, CpSolverStatus)
        if counter is not None:
            self.solutions, self.capped = counter.count, counter.count >= counter.most
        return status
