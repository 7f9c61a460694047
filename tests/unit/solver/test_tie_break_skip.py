"""The tie-break solve is skipped where its objective is a constant: one (shape, stage count) pair with the
replicas pinned, as ``enumerate`` searches each pair. The plan reached is then as good as any, with the same
GPUs, stages and shape; on a Llama-4-Maverick enumeration the skipped solves were 44 of 62 s."""

from __future__ import annotations

from typing import Any

import pytest

from shardplan.solver import cpsat_search
from shardplan.solver.optimise import Deadline, NoPlan, decode, optimise
from tests.factory import problem

PAIR = dict(tp=2, pp=2, sp=1, attn_dp=1, expert_tp=1, dp=1)


def _spy(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    calls: list[Any] = []
    real = cpsat_search.tie_break

    def counting(*args: Any) -> Any:
        calls.append(args)
        return real(*args)

    monkeypatch.setattr(cpsat_search, "tie_break", counting)
    return calls


def test_one_pinned_pair_is_not_tie_broken_and_matches_the_tie_broken_search(monkeypatch: pytest.MonkeyPatch) -> None:
    p = problem("mixtral-8x7b", "8xH100", batch=16, **PAIR)
    tie_broken = optimise(p, Deadline(None))  # every shape in the space: the tie-break runs
    calls = _spy(monkeypatch)
    pinned = optimise(p, Deadline(None), only_pins=True)
    assert not calls
    assert not isinstance(pinned, NoPlan) and not isinstance(tie_broken, NoPlan) and pinned.proven
    assert pinned.objective_value == tie_broken.objective_value  # the same e2e: the pair's optimum
    a, b = pinned.layout, tie_broken.layout
    assert (a.dp, a.pp, a.tp, a.sp, a.attn_dp, a.expert_tp, a.batch) == (b.dp, b.pp, b.tp, b.sp, b.attn_dp,
                                                                        b.expert_tp, b.batch)
    assert decode(p, a, "optimal").prediction.metrics.e2e_ms == pytest.approx(
        decode(p, b, "optimal").prediction.metrics.e2e_ms)


def test_a_search_over_several_shapes_is_tie_broken(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _spy(monkeypatch)
    optimise(problem("mixtral-8x7b", "8xH100", batch=16), Deadline(None))
    assert len(calls) == 1
