"""``enumerate --serving auto``: both serving modes' candidates in one stream and one frontier.

The colocated layouts come first (``enumerate --objective throughput``'s: each layout at the batch that
gives it the most tokens/s within the TTFT and TPOT limits, every replica count), then the disaggregated
deployments (``enumerate --serving disagg``'s: each pair of pool candidates at its best worker counts),
numbered on from the colocated ones. Every row carries ``serving`` (``colocated`` or ``disagg``), and the
frontier is the Pareto frontier of tokens/s per GPU against tokens/s per user over both: where on the
per-user axis each mode wins, the question ``solve --serving auto`` answers for one point.

``--limit`` counts rows of both modes together; ``--time-limit`` is shared as ``solve --serving auto``
shares it (colocated half, the disaggregated deployments what colocated left). Output as ``enumerate
--serving disagg`` gives it: ``--jsonl`` one row per line then ``{"type": "frontier", "count", "pareto",
"partial"}``; ``--json`` ``{"count", "pareto", "plans", "partial"}``, each plan marked; a table otherwise.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from itertools import chain
from typing import Any

import click

from shardplan.models import InfeasibleError, SolverLimitError
from shardplan.models.files import json_text
from shardplan.rules.catalog import check_plan, errors_of
from shardplan.rules.plan import Plan
from shardplan.rules.problem import Problem
from shardplan.solver.cli.outputs import OutputFiles
from shardplan.solver.cli.results import infeasible_dict
from shardplan.solver.cli.serving import disagg_rows, end_of_frontier, mode_budget_s, no_deployment
from shardplan.solver.disagg.frontier import DisaggEnumeration
from shardplan.solver.disagg.serving import throughput_problem
from shardplan.solver.enumerate import Enumeration, Frontier
from shardplan.solver.optimise import Deadline
from shardplan.solver.outputs import report
from shardplan.solver.outputs.plan_json import plan_dict
from shardplan.solver.placement.plan import place_and_price


class BothModes:
    """The rows of both modes as found, the shared frontier, and what stopped it. After the iteration
    ``partial`` says whether either mode stopped before its last candidate; ``colocated`` and ``disagg``
    are the two enumerations (``disagg`` None when ``limit`` was used up before it started)."""

    def __init__(self, problem: Problem, limit: int | None, time_limit_s: float | None,
                 work_limit: float | None = None):
        self.problem = throughput_problem(problem)
        self.limit, self.time_limit_s, self.work_limit = limit, time_limit_s, work_limit
        # The whole enumeration's clock, and an explanation's after it; each mode gets the whole work limit
        # (as ``solve --serving auto``'s modes do): the colocated rows are then colocated enumerate's.
        self.deadline = Deadline(time_limit_s, work_limit)
        self.count = 0
        self.frontier = Frontier()  # least first value, most second: per user negated, per GPU
        self.partial = True
        self.colocated: Enumeration | None = None
        self.disagg: DisaggEnumeration | None = None

    def __iter__(self) -> Iterator[dict[str, Any]]:
        started = time.monotonic()
        budget_s = mode_budget_s(self.time_limit_s, 0.0, 2)
        self.colocated = Enumeration(self.problem, time_limit_s=budget_s, work_limit=self.work_limit)
        colocated_deadline = Deadline(budget_s)  # the colocated share of the clock (its work: ``colocated``'s own)
        for plan in self.colocated:
            # lazily: each smaller batch is priced in turn, as work of the colocated enumeration
            for each in chain((plan,), smaller_batches(plan, self.colocated.deadline)):
                if self._full():
                    return  # partial: the rest of the colocated plans and every deployment not visited
                if colocated_deadline.passed():
                    break
                yield self._numbered({"serving": "colocated",
                                      **plan_dict(each.problem, each.layout, each.prediction, status="feasible")})
            if colocated_deadline.passed():
                break  # the colocated share of the time is spent (``colocated.partial`` stays true): on to the pools
        left = None if self.limit is None else self.limit - self.count
        if left is not None and left <= 0:
            return  # partial: the deployments were never visited
        self.disagg = DisaggEnumeration(self.problem, left,
                                        mode_budget_s(self.time_limit_s, time.monotonic() - started, 1),
                                        self.work_limit)
        for row in disagg_rows(self.disagg):
            yield self._numbered({k: v for k, v in row.items() if k != "index"})
        self.partial = self.colocated.partial or self.disagg.partial

    def cut_by_work(self) -> bool:
        """Whether the work limit ended either mode's enumeration."""
        return any(run is not None and run.deadline.by_work() for run in (self.colocated, self.disagg))

    def no_plan(self) -> str:
        """The line an enumeration a limit stopped before any row says, naming the limit that did: the work
        limit when it ended a mode's enumeration (each mode counts its own work), else the whole run's."""
        deadline = Deadline(None, self.work_limit) if self.cut_by_work() else self.deadline
        return deadline.no_plan("layout or deployment")

    def _full(self) -> bool:
        return self.limit is not None and self.count >= self.limit

    def _numbered(self, row: dict[str, Any]) -> dict[str, Any]:
        m = row["metrics"]
        self.frontier.add(self.count, -m["output_tokens_per_s_per_user"], m["output_tokens_per_s_per_gpu"])
        numbered = {"index": self.count, **row}
        self.count += 1
        return numbered

    def infeasible(self) -> InfeasibleError:
        """Why neither mode has a plan: each mode's conflicting rules, each message naming its mode (as
        ``solve --serving auto`` says it)."""
        # Lazily on purpose: explaining builds CP-SAT models, and OR-Tools loads only when needed; loading it is
        # not search time (``Deadline.paused``).
        with self.deadline.paused():
            from shardplan.solver.explain import explain

        assert self.disagg is not None, "no rows and no deployments visited: only a limit of 0, refused"
        conflicts = [(rule, f"colocated: {message}") for rule, message in explain(self.problem, deadline=self.deadline)]
        conflicts += [(rule, f"disagg: {message}") for rule, message in no_deployment(self.disagg).conflicts]
        return InfeasibleError(conflicts)


def both_modes_dict(rows: list[dict[str, Any]], run: BothModes) -> dict[str, Any]:
    """``enumerate --serving auto --json``'s object: count, the frontier's indices, every row marked."""
    pareto = run.frontier.indices
    plans = [{**row, "pareto": row["index"] in pareto} for row in rows]
    return {"count": run.count, "pareto": pareto, "plans": plans, "partial": run.partial}


def smaller_batches(plan: Plan, deadline: Deadline) -> Iterator[Plan]:
    """The plan's layout at each power-of-two batch below its own, largest first, each placed, priced and
    judged as ``evaluate`` does, kept when it breaks no rule: the colocated layouts' points towards the
    per-user end of the frontier, as the decode pools' smaller batches are for the deployments
    (``decode_workers(smaller_batches=True)``). Its stage boundaries stay those of its own batch. Each is
    an exact check counted on ``deadline`` (the colocated enumeration's), and none is made past it: they
    were not counted, and on 8192x8xH200 (DeepSeek-V3, up to ten smaller batches a plan, each placed and
    checked) `enumerate --serving auto` ran past 200 s under the default work limit."""
    batch = 1 << max(0, (plan.layout.batch - 1).bit_length() - 1)  # the largest power of two below it
    while batch < plan.layout.batch and batch >= 1 and not deadline.passed():
        with deadline.checking():
            layout, prediction, experts = place_and_price(plan.problem,
                                                          plan.layout.model_copy(update={"batch": batch}))
            smaller = Plan(problem=plan.problem, layout=layout, prediction=prediction, status="feasible",
                           experts=experts)
            kept = not errors_of(check_plan(smaller))
        if kept:
            yield smaller
        batch //= 2


def enumerate_both(problem: Problem, as_json: bool, jsonl: bool, limit: int | None, time_limit_s: float | None,
                   report_path: str | None, outputs: OutputFiles, work_limit: float | None = None) -> None:
    """``enumerate --serving auto`` (module docstring). Nothing feasible in either mode is infeasible
    (exit 1, both modes' rules named); a time limit that passes before any row is the limit's error."""
    run = BothModes(problem, limit, time_limit_s, work_limit)
    rows: list[dict[str, Any]] = []
    modes: list[str] = []  # each row's mode, for the table's frontier line
    for row in run:
        modes.append(row["serving"])
        if jsonl:
            click.echo(json_text(row, separators=(",", ":")))
        if as_json or report_path:
            rows.append(row)
        if not (as_json or jsonl):
            click.echo(f"{row['index']:>4}  {row['serving']:<9}  {_row_text(row)}")
    if run.count == 0:
        if run.partial and (time_limit_s is not None or run.cut_by_work()):
            raise SolverLimitError(run.no_plan())
        exc = run.infeasible()
        if as_json:
            click.echo(json_text(infeasible_dict(run.problem, exc), indent=2))
        raise exc
    pareto = run.frontier.indices
    end_of_frontier(problem, rows, pareto, run.count, run.partial, jsonl, as_json, report_path, outputs,
                    lambda: both_modes_dict(rows, run),
                    f"{run.count} plans{' (partial)' if run.partial else ''}; frontier of tokens/s/GPU against "
                    "tokens/s/user: " + ", ".join(f"{i} ({modes[i]})" for i in pareto))


def _row_text(row: dict[str, Any]) -> str:
    m = row["metrics"]
    return (f"{row['num_gpus']:>5} GPUs  {m['output_tokens_per_s_per_gpu']:>9,.1f} tokens/s/GPU  "
            f"{m['output_tokens_per_s_per_user']:>7,.1f} tokens/s/user  TTFT {m['ttft_ms']:,.0f} ms  "
            f"TPOT {m['tpot_ms']:.1f} ms  {report.shape_brief(row)}")


__all__ = ["BothModes", "both_modes_dict", "enumerate_both", "smaller_batches"]
