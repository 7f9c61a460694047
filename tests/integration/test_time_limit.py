"""A time limit that ends the search returns the best plan found so far with a proven bound and its gap,
or one line saying no plan was found (issue 14).

The deadlines here are stand-ins that have already passed (or that end the work before the search at
once), so the path a short ``--time-limit`` takes is exercised without depending on how fast the machine
is. What is checked against an independent reference: the brute-force oracle's exact optimum lies
between the plan's objective and the bound, so the bound is valid and the gap is what it says.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

from shardplan.models.errors import SolverLimitError
from shardplan.rules.catalog import check_plan, errors_of
from shardplan.rules.problem import Objective
from shardplan.solver.bound import table_bound
from shardplan.solver.cli.main import main
from shardplan.solver.cost.evaluate import resolve_profile
from shardplan.solver.cpsat_search import GainBound, _latency_bound
from shardplan.solver.optimise import Deadline, NoPlan, decode, optimise
from shardplan.solver.oracle import Oracle
from shardplan.solver.space import SearchSpace
from shardplan.solver.tables import build_tables
from tests.factory import problem
from tests.integration.scenarios import SCENARIOS, scenario_id

main_module = importlib.import_module("shardplan.solver.cli.main")  # the package's ``main`` is the entry point


class Expired(Deadline):
    """A deadline that passed as the search was about to start: the work before it still finishes."""

    def __init__(self) -> None:
        super().__init__(0.5)

    def passed(self) -> bool:
        return True

    def check(self) -> None:
        pass


class Gone(Deadline):
    """A deadline so short that even the cost tables are cut off."""

    def __init__(self) -> None:
        super().__init__(0.001)

    def check(self) -> None:
        raise SolverLimitError(self.no_plan())


def oracle_for(p):
    return Oracle(build_tables(p, SearchSpace(p, resolve_profile(p))))


def exact_objective(p, candidate) -> float:
    """The oracle candidate's objective in Optimum's units: e2e ns, or output tokens/s (unrounded)."""
    if p.objective is Objective.LATENCY:
        return candidate.e2e_ns
    return candidate.tokens * p.workload.osl * 1e9 / candidate.e2e_ns


@pytest.mark.parametrize("scenario", SCENARIOS, ids=scenario_id)
def test_table_bound_holds_against_brute_force(scenario):
    """The tables' relaxation never promises less than the true optimum can reach."""
    p = problem(**scenario)
    oracle = oracle_for(p)
    best = exact_objective(p, oracle.optimum())
    bound = table_bound(oracle)
    assert bound.objective is not None and bound.e2e_floor_ns is not None
    if p.objective is Objective.LATENCY:
        assert bound.objective <= best
    else:
        assert bound.objective >= best * (1 - 1e-12)
    assert bound.e2e_floor_ns <= min(c.e2e_ns for c in oracle.feasible())


@pytest.mark.parametrize("scenario", SCENARIOS[:8], ids=scenario_id)
def test_expired_deadline_returns_the_incumbent_with_a_valid_gap(scenario):
    p = problem(**scenario)
    result = optimise(p, Expired())
    assert not isinstance(result, NoPlan)
    best = exact_objective(p, oracle_for(p).optimum())
    status = "optimal" if result.proven else "feasible"
    plan = decode(p, result.layout, status, result.objective_value)
    assert errors_of(check_plan(plan)) == []
    if result.proven:  # the bound met the incumbent: it is the optimum
        assert abs(result.objective_value - best) <= 0.5  # objective_value is rounded
        return
    assert result.gap is not None and result.gap > 0
    assert result.bound is not None
    value = result.objective_value
    if p.objective is Objective.LATENCY:
        assert result.bound <= best <= value
        assert result.gap == pytest.approx((value - result.bound) / value, rel=1e-9)
    else:
        assert value <= best + 0.5 and best <= result.bound * (1 + 1e-12)  # value: rounded tokens/s
        # the gap is taken from the unrounded tokens/s: rounding moves it by at most bound x 0.5 / value^2
        assert result.gap == pytest.approx((result.bound - value) / value, abs=result.bound / value**2)


def test_cli_short_limit_reports_feasible_with_gap(capsys, monkeypatch):
    """Through the command line: the expired search prints ``feasible`` with ``bound`` and ``gap``."""
    monkeypatch.setattr(main_module, "Deadline", lambda *_: Expired())  # the command's, which solve() searches with
    main(["solve", "--model", "llama-3.1-70b", "--cluster", "8xH100", "--objective", "throughput",
          "--time-limit", "1", "--json"])  # returns: only a failure exits
    data = json.loads(capsys.readouterr().out)
    assert data["status"] == "feasible"
    assert data["gap"] > 0 and data["bound"] > data["objective_value"]


def test_no_plan_within_the_limit_is_one_line_naming_the_option():
    with pytest.raises(SolverLimitError, match=r"^time-limit: no plan found within 0\.001 s$"):
        optimise(problem(model="llama-3.1-8b", cluster="4xH100"), Gone())


def test_cp_sat_bounds_are_read_only_when_proven():
    """A step stopped in presolve reports a bound of 0.0 (no bound at all); one that searched, a real one.
    Latency: a lower bound on e2e, never above the best plan. Throughput: hand-computed a/c + gain/(c x e2e)."""
    assert _latency_bound(100, 0.0) is None
    assert _latency_bound(100, 42.3) == 43.0  # e2e is an integer: the bound rounds up
    assert _latency_bound(100, 250.0) == 100.0  # nothing better than 100 exists, and 100 itself does
    # a/c = 2/10 tokens per ns, gain 5 over c x e2e floor = 10 x 100: (0.2 + 0.005) x OSL 4 x 1e9
    assert GainBound(2, 10, 5.0).tokens_per_s(100, 4) == pytest.approx(0.205 * 4e9)


# A slow first import of the CP-SAT search, in a process that has not loaded it (the command line's), and a tiny
# --time-limit: the import is not search time. The red team's `plan` call (the MCP server loads OR-Tools at start)
# returned a plan where `solve --time-limit 1e-300` said none was found within it: the import (~0.4 s in a new
# process) had used up the grace the work before the search gets past the deadline.
SLOW_IMPORT = """
import importlib.abc, sys, time
class Slow(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "shardplan.solver.cpsat_search":
            time.sleep(1.0)  # past PREP_GRACE_S (0.5 s) on its own
        return None
sys.meta_path.insert(0, Slow())
from shardplan.solver.cli.main import main
assert "shardplan.solver.cpsat_search" not in sys.modules
main(sys.argv[1:])
"""


def test_a_tiny_time_limit_gives_the_cli_the_plan_the_mcp_server_gives():
    from shardplan.solver.mcp.safety import Root, TimeLimits
    from shardplan.solver.mcp.schemas import PlanInput
    from shardplan.solver.mcp.tools import Session, plan

    args = {"model": "llama-3.1-8b", "cluster": "8xH100"}  # latency, no --batch: the CP-SAT search
    cli = subprocess.run([sys.executable, "-c", SLOW_IMPORT, "solve", "--model", args["model"], "--cluster",
                          args["cluster"], "--time-limit", "1e-300", "--json"], capture_output=True, text=True,
                         timeout=120)
    assert cli.returncode == 0, cli.stderr
    served = plan(PlanInput(**args, time_limit=1e-300), Session(Root(None), TimeLimits()))
    printed = json.loads(cli.stdout)
    assert printed["status"] == served["status"] and printed["degrees"] == served["degrees"]
