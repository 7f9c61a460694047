"""Every stored problem still solves to the stored plan (all fields but timing)."""

from __future__ import annotations

import json

import pytest

from tests.regression.problems import PROBLEMS
from tests.regression.runner import EXPECTED_DIR, run_solve


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_solve_json_matches_the_stored_plan(name: str) -> None:
    expected = json.loads((EXPECTED_DIR / f"{name}.json").read_text())
    exit_code, output = run_solve(PROBLEMS[name])
    assert exit_code == expected["exit_code"]
    assert json.loads(output)["output"] == expected["output"]
