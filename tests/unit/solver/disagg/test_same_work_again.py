"""A disaggregated search's work counts its ``evaluate`` calls (search_base.Deadline); the worker prices are
memoised, so before ``forget_worker_prices`` a second, identical search in the same process (the MCP server, a
library caller) found them priced, counted less work and could end somewhere else under the same work limit.
Each search now starts from empty memos: the same work, and the same answer, every time."""

from __future__ import annotations

from shardplan.solver.disagg.frontier import DisaggEnumeration
from shardplan.solver.disagg.serving import solve_disagg
from shardplan.solver.optimise import Deadline
from tests.factory import problem
from tests.unit.solver.disagg.test_bound import CUT, WORK


def test_the_same_search_twice_in_one_process_counts_the_same_work_and_ends_at_the_same_deployment() -> None:
    p = problem(**CUT[1], objective="throughput")
    runs = []
    for _ in range(2):
        deadline = Deadline(None, WORK)
        outcome = solve_disagg(p, None, deadline)
        runs.append((deadline.work_done, outcome.result.choice, outcome.result.proven))
    assert runs[0] == runs[1]
    assert runs[0][1] is not None and not runs[0][2]  # the limit, not a proof, ended it: where it matters


def test_the_same_enumeration_twice_in_one_process_counts_the_same_work() -> None:
    p = problem(**CUT[1], objective="throughput")
    runs = []
    for _ in range(2):
        enumeration = DisaggEnumeration(p, limit=3)
        rows = [plan.prediction.metrics.output_tokens_per_s_per_gpu for plan in enumeration]
        runs.append((enumeration.deadline.work_done, rows))
    assert runs[0] == runs[1] and runs[0][1]
