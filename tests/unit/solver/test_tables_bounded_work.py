"""The cost tables' work stays bounded on huge clusters (issue 14): forbidden EP degrees are never placed,
uniform routing's load factor has a closed form where its placement grew with the EP degree, and a
time limit holds on a million-GPU cluster."""

from __future__ import annotations

import math

import pytest

from shardplan.models.load_profile import uniform_profile
from shardplan.solver import tables as tables_module
from shardplan.solver.cli.main import main
from shardplan.solver.cost.evaluate import resolve_profile
from shardplan.solver.cost.stage import shape_of
from shardplan.solver.placement.plan import best_placement
from shardplan.solver.space import SearchSpace
from shardplan.solver.tables import build_tables, uniform_load_factor
from tests.factory import problem


def _placed_factor(experts: int, ep: int, slots: int) -> float:
    profile = uniform_profile(experts, (0,), float(experts))
    return max(1.0, best_placement(profile, ep, slots).imbalance(profile, 0))


@pytest.mark.parametrize(("experts", "ep", "slots", "expected"), [
    (8, 8, 1, 1.0),  # one expert per rank
    (8, 4, 2, 1.0),  # ep divides the experts
    (8, 12, 1, 1.5),  # 4 experts have 2 copies, 4 have 1: the top rank serves a whole expert, mean 8/12
    (8, 20, 1, 1.25),  # floor(20/8) = 2 copies at least: half an expert against a mean of 8/20
    (8, 12, 2, 1.0),  # a spare slot: the experts laid end to end and cut into 12 equal pieces
    (8, 7, 2, 1.0),  # E = (S - 1) ep + 1: one group, filled to the mean
    (8, 3, 3, None),  # 9 slots, one expert split: a rank with 3 whole experts, 9/8 (only a placement says)
])
def test_closed_form_by_hand(experts, ep, slots, expected):
    assert uniform_load_factor(experts, ep, slots) == expected


def test_the_case_left_to_the_placement_is_the_one_worked_by_hand():
    assert _placed_factor(8, 3, 3) == pytest.approx(9 / 8)


def test_closed_form_agrees_with_the_placement_routine():
    compared = 0
    for experts in range(1, 17):
        for ep in range(1, 41):
            for redundant in range(3):
                slots = math.ceil(experts / ep) + redundant
                closed = uniform_load_factor(experts, ep, slots)
                if closed is None:
                    assert redundant == 0 and experts % ep and ep < experts  # the cheap case: ep x S < 2E
                    continue
                assert closed == pytest.approx(_placed_factor(experts, ep, slots), rel=1e-9), (experts, ep, slots)
                compared += 1
    assert compared > 1500


def _placed_degrees(monkeypatch, prob) -> tuple[set[int], set[int]]:
    """(EP degrees the tables placed experts for, EP degrees of the search space's shapes)."""
    placed: set[int] = set()

    def recording(profile, ep, slots, **kw):
        placed.add(ep)
        return best_placement(profile, ep, slots, **kw)

    monkeypatch.setattr(tables_module, "best_placement", recording)
    space = SearchSpace(prob, resolve_profile(prob))
    build_tables(prob, space)
    return placed, {shape.ep for shape in space.shapes}


def test_forbidden_ep_degrees_get_no_placement(monkeypatch):
    # Mixtral's 8 experts on 32 GPUs under skewed routing: EP-003 forbids ep above 8, so those shapes
    # are never placed (their placement grew with ep and can never be in a plan).
    placed, degrees = _placed_degrees(monkeypatch, problem(model="mixtral-8x7b", cluster="4x8xH100", zipf=1.2))
    assert max(degrees) > 8  # the space does offer them
    assert placed and max(placed) <= 8


def test_allowed_replication_still_places_wide_degrees(monkeypatch):
    prob = problem(model="mixtral-8x7b", cluster="4x8xH100", zipf=1.2, allow=("expert-replication",))
    placed, degrees = _placed_degrees(monkeypatch, prob)
    assert {d for d in degrees if d > 8} <= placed


def test_a_million_gpu_stage_holds_ranges_not_id_tuples():
    prob = problem(model="mixtral-8x7b", cluster="1xH100")
    stage = shape_of(prob.model, 1 << 20, 1, 1, 1 << 20, 1)
    assert isinstance(stage.stage_group, range) and len(stage.stage_group) == 1 << 20


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of the CLI run in-process."""
    code = 0
    try:
        main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 3
    out = capsys.readouterr()
    return code, out.out, out.err


def test_huge_cluster_without_replication_is_solved(capsys):
    # The fuzz suite's hang (past 60 s, 2.1 GB): Mixtral on 865,416 GPUs, every layout pinned small.
    code, out, err = _run(["solve", "--model", "mixtral-8x7b", "--cluster", "865416 x H100", "--tp", "1", "--pp", "1",
                           "--dp", "1", "--no-runner-up", "--json"], capsys)
    assert code == 0, err
    assert '"status": "optimal"' in out


def test_time_limit_on_a_huge_cluster_with_skewed_replicated_experts(capsys):
    # Every EP degree up to 865,416 is allowed and placed layer by layer: the limit ends it with a plan
    # (feasible, with its gap) or with the one line saying none was found.
    code, out, err = _run(["solve", "--model", "mixtral-8x7b", "--cluster", "865416 x H100", "--zipf", "1.2",
                           "--allow", "expert-replication", "--no-runner-up", "--time-limit", "1", "--json"], capsys)
    if code == 0:
        assert '"status": "feasible"' in out or '"status": "optimal"' in out
    else:
        assert code == 2
        assert err.strip().splitlines() == ["shardplan: error: time-limit: no plan found within 1 s"]
