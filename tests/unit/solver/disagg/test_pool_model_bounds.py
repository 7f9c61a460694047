"""The disaggregated search's CP-SAT questions stay valid on the largest clusters (robust16). On 65536x8xH100
(524,288 GPUs) the tie-break's rank (GPUs x order span, ~3e21) and the per-GPU rows (rate bound x an
incumbent's GPUs) passed 64 bits: CP-SAT called the models invalid and the search stopped unproven."""

from __future__ import annotations

import itertools
from fractions import Fraction

import pytest

from shardplan.solver.cost.disagg import engine_profile
from shardplan.solver.disagg.deploy import Choice
from shardplan.solver.disagg.model import PoolModel
from shardplan.solver.disagg.search import (
    Accepted,
    _any_better,
    _as_good_and_earlier,
    _better_than,
    _tie_ahead,
    build_pools,
    per_gpu_terms,
)
from tests.factory import problem


@pytest.fixture(scope="module")
def huge() -> PoolModel:
    p = problem("llama-3.1-8b", "65536x8xH100", objective="throughput")
    return PoolModel(build_pools(p, engine_profile(p)))


def test_every_question_is_a_valid_model_on_524288_gpus(huge: PoolModel) -> None:
    n = huge.pools.problem.cluster.num_gpus
    per_gpu = max(w.capacity_units // w.gpus for w in huge.pools.decode)  # what an incumbent can reach
    for g0 in (1, 346, n // 2, n):
        best = Accepted(Choice(0, 0, 1, 1), None, g0 * per_gpu, g0)  # type: ignore[arg-type]
        questions = (_any_better(huge, best.rate_units, g0), _better_than(huge, best.rate_units, g0),
                     _as_good_and_earlier(huge, best), _tie_ahead(huge, huge.new_capacity(), best))
        assert [q.validate() for q in questions] == ["", "", "", ""], g0


class _Bounds:
    """What ``per_gpu_terms`` reads of a model."""

    def __init__(self, top_rate: int, num_gpus: int) -> None:
        self.top_rate = top_rate
        self.pools = type("P", (), {"problem": problem("llama-3.1-8b", f"{num_gpus}xH100")})()


@pytest.mark.parametrize("top_rate,num_gpus", [(10**6, 8), (10**15, 4096), (5 * 10**15, 1 << 16)])
def test_scaled_terms_are_never_below_the_ratio_and_fit(top_rate: int, num_gpus: int) -> None:
    m = _Bounds(top_rate, num_gpus)
    for g0, r0 in itertools.product((1, 7, 346, num_gpus), (1, 999, 10**9, 10**12 + 7)):
        if r0 > g0 * top_rate:
            continue  # no deployment reaches it
        r1, g1, exact = per_gpu_terms(m, r0, g0)  # type: ignore[arg-type]
        assert Fraction(r1, g1) >= Fraction(r0, g0)  # a deployment that beats r1/g1 beats r0/g0
        fits = g0 * top_rate + r0 * num_gpus <= 1 << 61
        assert exact == fits and (not exact or (r1, g1) == (r0, g0))
        assert g1 * top_rate + r1 * num_gpus <= 1 << 61
