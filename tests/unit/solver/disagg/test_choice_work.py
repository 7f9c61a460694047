"""The disaggregated enumeration counts listing and ordering each pair's choices as work (``CHOICE_WORK``):
it had counted only the exact checks, so on 8192x8xH200 (DeepSeek-V3) each pair's 4,096 choices cost 0.5 s
of CPU the default work limit never saw, and `enumerate --serving disagg` took 43.6 s (13.3 s after)."""

from __future__ import annotations

from shardplan.solver.disagg.frontier import DisaggEnumeration, pair_choices
from shardplan.solver.search_base import CHOICE_WORK
from tests.factory import problem


def test_the_first_pairs_choices_are_counted_as_work() -> None:
    run = DisaggEnumeration(problem("llama-3.1-8b", "4xH100", objective="throughput"), limit=1)
    first = len(pair_choices(run.pools, 0, 0))
    assert len(list(run)) == 1 and first > 1
    assert run.deadline.work_done >= CHOICE_WORK * first
