"""``cost.disagg.most_carried``: the highest rate a closed loop's requests in flight carry, checked by what defines
it (carried at its own steps, the next float up not) on step functions with hand-placed answers and on the
steady states real deployments solve, against the plain bisection it replaced (never below it, within 10^-15)."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

import shardplan.solver.cost.disagg as cost_disagg
from shardplan.hardware.profile import profile_for_gpu
from shardplan.rules.disagg import DisaggLayout
from shardplan.rules.layout import Layout
from shardplan.solver.cost.disagg import Settled, evaluate_disagg, most_carried
from tests.unit.solver.cost.factory import problem


def bisected(settled: Callable[[float], Settled], top: float, budget: float) -> float:
    """The reference: halve the bracket until it is within 10^-15 of its top (what steady_state did alone)."""
    lo, hi = 0.0, top
    while hi - lo > hi * 1e-15:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if mid * settled(mid)[2] <= budget else (lo, mid)
    return lo


def carried(settled: Callable[[float], Settled], r: float, budget: float) -> bool:
    return r * settled(r)[2] <= budget


class Steps:
    """A step function of the rate: the steps change at ``ends`` (each the last rate of its interval), each
    interval with its own e2e0 (ns, nondecreasing), as ``settled`` answers; the steps are distinct objects."""

    def __init__(self, ends: list[float], e2e_ns: list[int]):
        assert len(e2e_ns) == len(ends) + 1 and e2e_ns == sorted(e2e_ns)
        self.ends, self.e2e_ns = ends, e2e_ns
        self.tokens = [(object(), object()) for _ in e2e_ns]
        self.calls = 0

    def index(self, r: float) -> int:
        return sum(1 for end in self.ends if r > end)

    def settled(self, r: float) -> Settled:
        self.calls += 1
        n = self.index(r)
        prefill, decode = self.tokens[n]
        return prefill, decode, self.e2e_ns[n]  # type: ignore[return-value]

    def segment_end(self, r: float) -> float:
        n = self.index(r)
        return self.ends[n] if n < len(self.ends) else math.inf


# (the steps' ends, their e2e0s, the budget, the answer): each answer worked out by hand
CASES = [
    # one interval: budget / e2e0 = 1e9 / 1e8 = 10 requests/s
    ([], [100_000_000], 1e9, 10.0),
    # the answer inside the second interval: 2e9 / 1.6e8 = 12.5, past the first's end (10)
    ([10.0, 20.0], [100_000_000, 160_000_000, 400_000_000], 2e9, 12.5),
    # the answer at an interval's end: 10 x 1e8 = 1e9 fits a budget of 1.1e9, the next interval's 2e8 does not
    ([10.0], [100_000_000, 200_000_000], 1.1e9, 10.0),
    # many small steps, each a hair longer (step n runs over (8 + n/2, 8.5 + n/2] at e2e0 1e8 + n x 1e6): the
    # answer sits among them, in step 3: 1e9 / 1.03e8 = 9.7087... is in (9.5, 10]; step 4's 1e9 / 1.04e8 =
    # 9.615... is below its start
    ([8.0 + 0.5 * n for n in range(1, 12)], [100_000_000 + n * 1_000_000 for n in range(12)], 1e9, 1e9 / 103e6),
]


@pytest.mark.parametrize(("ends", "e2e_ns", "budget", "answer"), CASES)
def test_the_answer_by_hand_is_carried_and_the_next_float_is_not(ends: list[float], e2e_ns: list[int], budget: float,
                                                                  answer: float) -> None:
    steps = Steps(ends, e2e_ns)
    top = 2 * max([*ends, answer])
    r = most_carried(steps.settled, top, budget, steps.segment_end)
    assert r == pytest.approx(answer, rel=1e-15)
    assert carried(steps.settled, r, budget)
    assert not carried(steps.settled, math.nextafter(r, math.inf), budget)
    assert bisected(steps.settled, top, budget) <= r


def test_an_interval_end_is_found_without_halving_down_to_float_resolution() -> None:
    steps = Steps([10.0], [100_000_000, 200_000_000])
    most_carried(steps.settled, 20.0, 1.1e9, steps.segment_end)
    assert steps.calls < 10  # a bisection to 10^-15 settles about 50 rates


def _deployments() -> list[tuple[object, DisaggLayout]]:
    out = []
    for alias, cluster, isl, osl in [("llama-3.1-8b", "2x8xH100", 1000, 100), ("llama-3.1-70b", "2x8xH100", 4000, 500),
                                     ("qwen3-30b-a3b", "2x8xH100", 2000, 300)]:
        p = problem(alias, cluster, isl=isl, osl=osl)
        for x, ptp, y, dtp in [(1, 1, 1, 1), (2, 2, 1, 4), (3, 1, 2, 2), (1, 4, 2, 4)]:
            for concurrency in (1, 2, 7, 40, 300, 2000):
                layers = p.model.num_layers
                prefill, decode = Layout.even(layers, 1, tp=ptp), Layout.even(layers, 1, tp=dtp)
                out.append((p, DisaggLayout.place(prefill, x, decode, y, concurrency, p.cluster)))
    return out


def test_real_steady_states_are_the_largest_carried_rate_and_never_below_the_bisection(
        monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[Callable[[float], Settled], float, float, float]] = []
    real = cost_disagg.most_carried

    def recording(settled, top, budget, segment_end):  # type: ignore[no-untyped-def]
        r = real(settled, top, budget, segment_end)
        asked.append((settled, top, budget, r))
        return r

    monkeypatch.setattr(cost_disagg, "most_carried", recording)
    profile = profile_for_gpu("H100-SXM")
    for p, layout in _deployments():
        evaluate_disagg(p, layout, profile)  # type: ignore[arg-type]
    assert len(asked) > 20  # the concurrency binds in most of them
    for settled, top, budget, r in asked:
        assert carried(settled, r, budget)
        assert not carried(settled, math.nextafter(r, math.inf), budget)
        reference = bisected(settled, top, budget)
        assert reference <= r <= reference * (1 + 2e-15)
        here, there = settled(r), settled(reference)
        assert here[0] is there[0] and here[1] is there[1]  # the same chunk and batch
