"""What the fuzz campaign of the serving flags found (benchmarks/fuzz/README.md, 2026-11-24), each input
reproduced: a rate so small it rounded to no replica, a pool value ``int()`` refuses, ``--max-batch``
that the disaggregated search ignored while its check enforced it, and the colocated ``--rate`` bounds
(one oracle per pair) that ignored ``--time-limit``."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from shardplan.rules.problem import resolve_profile
from shardplan.solver.bound import pair_bounds, table_bound
from shardplan.solver.cli.inputs import ProblemArgs, build_problem
from shardplan.solver.cost.disagg import engine_profile
from shardplan.solver.disagg.brute import choices
from shardplan.solver.disagg.deploy import Pools
from shardplan.solver.disagg.frontier import PAIR_CHOICES, pair_choices
from shardplan.solver.disagg.search import seed
from shardplan.solver.disagg.serving import throughput_problem
from shardplan.solver.disagg.workers import decode_workers, prefill_workers
from shardplan.solver.enumerate import candidate_pairs
from shardplan.solver.optimise import Deadline
from shardplan.solver.oracle import Oracle
from shardplan.solver.space import SearchSpace
from shardplan.solver.tables import build_tables
from tests.integration.test_cli_disagg import run

LLAMA_8B = ["--model", "llama-3.1-8b", "--cluster", "8xH100"]


def solve_json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code, out, err = run(["solve", *argv, "--json"], capsys)
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("serving", ["colocated", "auto"])
def test_a_vanishing_rate_takes_one_replica_not_none(serving: str, capsys) -> None:
    """``--rate 1e-300``: ceil(rate / a replica's rate) was 0 replicas, a plan of no GPUs (ZeroDivisionError,
    exit 3). Any positive rate needs at least one replica."""
    data = solve_json(["--serving", serving, "--rate", "1e-300", *LLAMA_8B], capsys)
    plan = data["modes"]["colocated"] if serving == "auto" else data
    assert plan["degrees"]["dp"] == 1 and plan["num_gpus"] >= 1
    assert plan["metrics"]["output_tokens_per_s"] > 0


@pytest.mark.parametrize("value", ["²", "³", "¹"])
def test_a_superscript_digit_in_a_pool_is_bad_input(value: str, capsys) -> None:
    """``str.isdigit`` takes superscripts, which ``int`` refuses: exit 3 before; now one line naming the key."""
    code, _, err = run(["evaluate", "--serving", "disagg", *LLAMA_8B, "--prefill", f"workers=1,tp={value}",
                        "--decode", "workers=1"], capsys)
    assert code == 2
    assert err.strip().splitlines() == [f"shardplan: error: prefill tp: must be a positive integer, got '{value}'"]


def test_decimal_digits_of_other_scripts_are_read_as_their_values(capsys) -> None:
    """Arabic-Indic and fullwidth digits are read as the numbers they are, as the other flags read them."""
    code, out, _ = run(["evaluate", "--serving", "disagg", *LLAMA_8B, "--prefill", "workers=٢,tp=１",
                        "--decode", "workers=1,tp=2", "--batch", "8", "--json"], capsys)
    data = json.loads(out)
    assert code in (0, 1) and data["prefill"]["workers"] == 2 and data["decode"]["gpus_per_worker"] == 2


def per_group_batches(plan: dict[str, Any]) -> tuple[int, int, int]:
    """(prefill chunk, decode batch per attention group, decode batch limit per attention group)."""
    decode_groups = plan["decode"]["degrees"]["attn_dp"]
    return (plan["prefill"]["chunk"], -(-plan["decode"]["batch"] // decode_groups),
            -(-plan["decode"]["max_batch"] // decode_groups))


@pytest.mark.parametrize("limit", [1, 4])
def test_max_batch_bounds_both_pools_of_the_disaggregated_search(limit: int, capsys) -> None:
    """``--max-batch 1`` made the search offer decode workers of 341 sequences that BAT-001 then refused one
    deployment at a time: 26 s and a false "infeasible". The search now offers only batches within the
    limit per attention group, so a deployment exists and keeps every rule (status optimal: no violation)."""
    plan = solve_json(["--serving", "disagg", "--max-batch", str(limit), *LLAMA_8B], capsys)
    chunk, running, most = per_group_batches(plan)
    assert plan["status"] == "optimal"
    assert chunk <= limit and running <= most <= limit


def test_a_max_batch_the_plan_does_not_reach_changes_nothing(capsys) -> None:
    """An independent check that the limit is applied, not merely capped on output: at the chosen decode
    worker's own batch limit the same deployment stays best (other candidates can only lose capacity)."""
    free = solve_json(["--serving", "disagg", *LLAMA_8B], capsys)
    chunk, _, most = per_group_batches(free)
    limited = solve_json(["--serving", "disagg", "--max-batch", str(max(most, chunk)), *LLAMA_8B], capsys)
    for key in ("num_gpus", "metrics"):
        if key == "metrics":
            assert limited[key]["output_tokens_per_s_per_gpu"] == free[key]["output_tokens_per_s_per_gpu"]
        else:
            assert limited[key] == free[key]
    for role in ("prefill", "decode"):
        assert limited[role]["workers"] == free[role]["workers"]
        assert limited[role]["degrees"] == free[role]["degrees"]


def test_pair_bounds_equal_one_excluding_oracle_per_pair() -> None:
    """The colocated ``--rate`` search bounds every (shape, stages) pair. It built one oracle per pair that
    excluded all the others (minutes on 512 GPUs, no deadline looked at); the one pass must give each pair
    exactly what that oracle's ``table_bound`` gave."""
    problem = throughput_problem(build_problem(ProblemArgs(model="qwen3-30b-a3b", cluster="4xH100", pins={})))
    single = problem.model_copy(update={"pins": problem.pins.model_copy(update={"dp": 1})})
    tables = build_tables(single, SearchSpace(single, resolve_profile(single)))
    pairs = candidate_pairs(problem)
    bounds = pair_bounds(Oracle(tables))
    assert len(pairs) > 3
    for pair in pairs:
        alone = table_bound(Oracle(tables, excluded=[p for p in pairs if p != pair]))
        found = bounds.get(pair)
        assert (None if found is None else found.objective) == alone.objective
        assert (None if found is None else found.e2e_floor_ns) == alone.e2e_floor_ns


def test_an_enumeration_the_time_limit_stops_before_any_deployment_is_not_infeasible(capsys) -> None:
    """Under a TTFT limit few deployments keep, ``enumerate --serving disagg --time-limit`` stopped with no
    deployment and said "infeasible" (exit 1): nothing was proven. It is the time limit's line (exit 2),
    as for colocated enumerate."""
    # 95 ms: the prefill layouts whose lone prompt (from 9.9 ms) with the serving stack (81 ms) keeps it are
    # candidates, so there is a search to cut (at 50 ms none is, and the answer is infeasible at once). Since
    # a deployment may be held below its full rate (``Pools.served``) the first pairs have one at a single
    # request in flight, found within 0.5 s; 0.05 s stops the enumeration while it prices the candidates.
    code, _, err = run(["enumerate", "--serving", "disagg", "--model", "llama-3.1-8b", "--cluster", "2x8xH100",
                        "--ttft-ms", "95", "--limit", "3", "--time-limit", "0.05"], capsys)
    assert code == 2
    assert err.strip().splitlines() == ["shardplan: error: time-limit: no deployment found within 0.05 s"]


def pools_of(cluster: str) -> Pools:
    problem = throughput_problem(build_problem(ProblemArgs(model="llama-3.1-8b", cluster=cluster, pins={})))
    profile = engine_profile(problem)
    return Pools(problem, profile, prefill_workers(problem, profile), decode_workers(problem, profile))


def test_a_pair_lists_every_worker_count_on_a_small_cluster() -> None:
    pools = pools_of("8xH100")
    for i, k in [(0, 0), (len(pools.prefill) - 1, len(pools.decode) - 1)]:
        every = [c for c in choices(pools) if (c.prefill, c.decode) == (i, k) and pools.rate(c) > 0]
        assert sorted(pair_choices(pools, i, k)) == sorted(every)


def test_a_pair_on_a_huge_cluster_lists_a_bounded_number_of_worker_counts() -> None:
    """4096x8xH200 with 1-GPU workers: 32,768 x 32,768 counts, which filled 12 GB before the time limit was
    looked at. The bounded list fits the cluster, and for each decode count keeps the fewest prefill
    workers that keep up with it (the per-GPU best of that row when nothing refuses it)."""
    pools = pools_of("4096x8xH200")
    k = next(j for j, d in enumerate(pools.decode) if d.gpus == 1)
    i = next(j for j, p in enumerate(pools.prefill) if p.gpus == 1)
    kept = pair_choices(pools, i, k)
    last_y = max(c.y for c in kept)  # rows are added whole until the list reaches PAIR_CHOICES
    assert 0 < len([c for c in kept if c.y != last_y]) < PAIR_CHOICES <= len(kept)
    n = pools.problem.cluster.num_gpus
    p, d = pools.prefill[i], pools.decode[k]
    for c in kept:
        assert pools.end_gpu(c) <= n
    for y in {c.y for c in kept}:
        keeps_up = min(-(-y * d.capacity_units // p.capacity_units), (n - y * d.gpus) // p.gpus)
        assert min(c.x for c in kept if c.y == y) == max(1, keeps_up)


ONE_GPU = "fit the cluster's 1 GPU together"


@pytest.mark.parametrize(("extra", "tail"), [([], ONE_GPU), (["--rate", "5"], ONE_GPU + " and sustain 5 requests/s")])
def test_no_room_for_two_pools_says_so_and_names_a_rate_only_when_one_was_asked(extra, tail, capsys) -> None:
    """One GPU holds no two pools. The line said "at the rate asked" also when no --rate was given."""
    code, _, err = run(["solve", "--serving", "disagg", "--model", "llama-3.1-8b", "--cluster", "1xH100", *extra],
                       capsys)
    assert code == 1
    line = f"shardplan: infeasible: DIS-001: disagg: no prefill pool and decode pool {tail}"
    assert err.strip().splitlines() == [line]


def test_the_seed_stops_at_the_deadline() -> None:
    """The seed's exact checks (up to 256, each a bisection over the requests in flight) ran past --time-limit
    0.5 on 18x72xGB200 (27 s whole process). Past the deadline it proposes nothing and checks nothing."""
    pools = pools_of("8xH100")
    assert seed(pools) is not None
    late = pools_of("8xH100")
    passed = Deadline(1e-9)
    time.sleep(1e-6)
    assert seed(late, passed) is None
    assert late.refused == {}
