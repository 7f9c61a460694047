"""``bound.pair_rates``, the colocated ``--rate`` search's bound per (shape, stage count), held to brute force:
the same floats as ``pair_bounds``' scan of every integer batch (so the pairs' order and the stop, hence the
answer, are main's), ``fewest_gpus_bounds``' list (each pair searched only until its GPUs are known) the one
the scan gives, and the bounds never below the pair's best plan over every batch and every boundary. The fewest
GPUs ``colocated_rate`` finds from them equal the brute force's on these cases: tests/unit/solver/disagg/
test_search.py ``test_colocated_fewest_gpus_for_a_rate_equal_brute_force``."""

from __future__ import annotations

import pytest

from shardplan.solver import bound
from shardplan.solver.cost.evaluate import resolve_profile
from shardplan.solver.disagg.serving import fewest_gpus_bounds, one_replica_of, replicas_for, throughput_problem
from shardplan.solver.enumerate import candidate_pairs
from shardplan.solver.oracle import Oracle
from shardplan.solver.space import SearchSpace
from shardplan.solver.tables import build_tables
from tests.factory import problem

# Limits that bind and that do not, a dense and a MoE model, a pipeline pinned, prompts short enough that the
# prefill chunk grows over many microbatches (scored one by one) and long enough that it never does.
CASES = [
    dict(model="llama-3.1-8b", cluster="4xH100", isl=2000, osl=200, ttft_ms=2000, tpot_ms=30),
    dict(model="llama-3.1-8b", cluster="2x4xH100", isl=4000, osl=300, ttft_ms=400, tpot_ms=20),  # TTFT binds
    dict(model="llama-3.1-8b", cluster="4xH100", isl=8000, osl=50),  # memory binds
    dict(model="qwen3-30b-a3b", cluster="2xH100", isl=16000, osl=1000),
    dict(model="llama-3.1-8b", cluster="4xL40S", isl=16000, osl=200, pp=2),
    dict(model="llama-3.1-8b", cluster="2xH100", isl=256, osl=300, tpot_ms=25),  # chunks grow to 32 prompts
]


def case_id(case) -> str:
    return f"{case['model']}-{case['cluster']}-{case['isl']}"


def _oracle(case) -> Oracle:
    """One replica at the throughput objective, as ``fewest_gpus_bounds`` asks."""
    p = throughput_problem(problem(**case))
    p = p.model_copy(update={"pins": p.pins.model_copy(update={"dp": 1})})
    return Oracle(build_tables(p, SearchSpace(p, resolve_profile(p))))


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_pair_rates_are_the_scan_of_every_batch(case) -> None:
    scan = {pair: b.objective for pair, b in bound.pair_bounds(_oracle(case)).items() if b.objective is not None}
    oracle = _oracle(case)
    assert oracle.space.decides_batch
    assert bound.pair_rates(oracle) == scan  # the same floats, not merely close
    assert scan


@pytest.mark.parametrize("case", [CASES[0], CASES[1], CASES[3], CASES[5]], ids=case_id)
def test_fewest_gpus_bounds_are_the_scans(case) -> None:
    """``fewest_gpus_bounds`` stops each pair's search once its GPUs are known: the list (so the order the
    pairs are searched in and where the search stops) is the one the scan's maxima give, at rates that need
    one replica, several, and more than the cluster holds."""
    p = problem(**case)
    scan = {pair: b.objective for pair, b in bound.pair_bounds(_oracle(case)).items() if b.objective is not None}
    assert scan
    for rate_rps in (0.05, 0.5, 2.0, 8.0, 30.0, 60.0, 1000.0):
        expected = []
        for shape, stages in candidate_pairs(throughput_problem(p)):
            top = scan.get((shape, stages))
            if top is not None and top > 0:
                gpus = replicas_for(rate_rps, top / p.workload.osl) * stages * shape.gpus
                if gpus <= p.cluster.num_gpus:
                    expected.append((gpus, shape, stages))
        assert fewest_gpus_bounds(p, rate_rps) == sorted(expected), rate_rps


@pytest.mark.parametrize("case", CASES[:2] + CASES[5:], ids=case_id)
def test_pair_rates_are_never_below_the_pairs_best_plan(case) -> None:
    """The brute force of each pair: its best plan over every integer batch and every boundary."""
    rates = bound.pair_rates(_oracle(case))
    p = problem(**case)
    checked = 0
    for shape, stages in candidate_pairs(throughput_problem(p)):
        pinned = one_replica_of(p, shape, stages)
        best = Oracle(build_tables(pinned, SearchSpace(pinned, resolve_profile(pinned)))).optimum()
        if best is None:
            continue
        exact = best.tokens * p.workload.osl * 1e9 / best.e2e_ns
        assert (shape, stages) in rates and rates[(shape, stages)] >= exact * (1 - 1e-12), (shape, stages)
        checked += 1
    assert checked > 0


# A dense and a MoE model, NVLink and PCIe links between stages (the sends), the chunk growing and not.
PREMISE_CASES = [CASES[1], dict(model="qwen3-30b-a3b", cluster="4xH100", isl=1000, osl=500), CASES[4], CASES[5]]


@pytest.mark.parametrize("case", PREMISE_CASES, ids=case_id)
def test_the_premises_of_the_range_bound(case) -> None:
    """What ``_PairRate``'s proof takes from the tables, on every microbatch up to 64 and then every 16th: the
    decode sum (layers, ends, sends after any stage count) and a prompt's chunk steps never fall as the
    microbatch grows; from the largest chunk on, the chunk, its activation bytes and the prefill sum (with
    its sends) are one value."""
    oracle = _oracle(case)
    p, t = oracle.problem, oracle.t
    for o in oracle.shapes():
        top = oracle.space.replica_batch_limit(o.attn_dp)
        cap = bound.prefill_chunk(p, t.profile or bound.resolve_profile(p), top)
        micros = [m for m in range(1, top + 1) if m <= 64 or m % 16 == 0]
        sums = [(bound._Sums.of_entry(oracle, t.step(o, m)[0]), t.step(o, m)[1]) for m in micros]
        for (a, _), (b, _) in zip(sums, sums[1:], strict=False):
            assert b.decode >= a.decode and b.steps >= a.steps, o
            assert all(y >= x for x, y in zip(a.sends_decode, b.sends_decode, strict=True)), o
        fixed = {(s.chunk, act, s.prefill, tuple(s.sends_prefill)) for m, (s, act) in zip(micros, sums, strict=True)
                 if m >= cap}
        assert len(fixed) <= 1, o
