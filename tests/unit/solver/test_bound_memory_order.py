"""``bound.pair_bounds`` stops a (shape, stage count)'s batches at the first that does not fit: sound only if the
relaxation's bytes never fall as the batch grows. Checked on every batch of every pair of small cases where
memory binds inside the engine's batch limit (so the stop is reached). The colocated ``--rate`` search that asks
for these bounds is held to brute force in tests/unit/solver/disagg/test_search.py."""

from __future__ import annotations

import pytest

from shardplan.solver import bound
from shardplan.solver.cost.evaluate import resolve_profile
from shardplan.solver.disagg.serving import throughput_problem
from shardplan.solver.oracle import Oracle
from shardplan.solver.space import SearchSpace
from shardplan.solver.tables import build_tables
from tests.factory import problem

# Each leaves room for some batches and not all: a 70B dense model on two H100s with long prompts, a MoE
# model with attention groups, and a pinned pipeline (microbatches of ceil(batch / stages)).
CASES = [
    dict(model="llama-3.1-70b", cluster="2xH100", isl=8000, osl=500),
    dict(model="qwen3-30b-a3b", cluster="2xH100", isl=16000, osl=1000),
    dict(model="llama-3.1-8b", cluster="4xL40S", isl=16000, osl=200, pp=2),
]


def _oracle(case) -> Oracle:
    p = throughput_problem(problem(**case))
    return Oracle(build_tables(p, SearchSpace(p, resolve_profile(p))))


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c['model']}-{c['cluster']}")
def test_what_fits_is_a_prefix_of_the_batches(case) -> None:
    oracle = _oracle(case)
    assert oracle.space.decides_batch
    stops = 0
    for o in oracle.shapes():
        weights, kv = bound._whole_model_bytes(oracle, o)
        for S in oracle.stage_counts(o):
            fits = [bound._may_fit(oracle, o, opt, S, weights, kv) for opt in oracle.options(o, S)]
            batches = [opt.batch for opt in oracle.options(o, S)]
            assert batches == sorted(batches)
            first_miss = fits.index(False) if False in fits else len(fits)
            assert not any(fits[first_miss:]), f"a larger batch fits after one that does not: {o}, {S} stages"
            stops += first_miss < len(fits)
    assert stops > 0, "memory never bound: the case does not exercise the stop"
