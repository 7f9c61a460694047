"""validate_dag and fix_dag read an inline DAG as strictly as a DAG file: what a file is refused for, the
object is refused for with the same reason (models.files.parse_json), the field named ``dag``."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from shardplan.models import SpecError
from shardplan.solver.dag import build_dag
from shardplan.solver.dag.export import to_json_data
from shardplan.solver.mcp import tools
from shardplan.solver.mcp.safety import Root, TimeLimits
from shardplan.solver.mcp.schemas import DagInput, FixDagInput
from tests.unit.solver.dag.plans import small_dense


@pytest.fixture(scope="module")
def dag_data() -> dict[str, Any]:
    return to_json_data(build_dag(small_dense(), "logical"))


def _nan(data: dict[str, Any]) -> None:
    data["nodes"][0]["est_us"] = float("nan")


def _infinite(data: dict[str, Any]) -> None:
    data["nodes"][0]["est_us"] = float("inf")


def _deep(data: dict[str, Any]) -> None:
    data["graph"]["note"] = json.loads("[" * 64 + "]" * 64)  # 66 levels with the graph and the DAG object


@pytest.mark.parametrize("spoil", [_nan, _infinite, _deep])
@pytest.mark.parametrize("tool,model", [(tools.validate_dag, DagInput), (tools.fix_dag, FixDagInput)])
def test_an_inline_dag_is_refused_as_the_same_dag_in_a_file(tmp_path: Path, dag_data, spoil, tool, model) -> None:
    session = tools.Session(Root(str(tmp_path)), TimeLimits())
    spoilt = copy.deepcopy(dag_data)
    spoil(spoilt)
    (tmp_path / "d.json").write_text(json.dumps(spoilt))  # Python writes NaN and Infinity; strict readers refuse
    with pytest.raises(SpecError) as from_file:
        tool(model.model_validate({"path": "d.json"}), session)
    with pytest.raises(SpecError) as inline:
        tool(model.model_validate({"dag": spoilt}), session)
    file_reason = from_file.value.reason.replace(str(tmp_path / "d.json"), "the dag")
    assert (inline.value.field, inline.value.reason) == ("dag", file_reason)


def test_an_inline_dag_within_the_bounds_is_validated(tmp_path: Path, dag_data) -> None:
    session = tools.Session(Root(str(tmp_path)), TimeLimits())
    data = tools.validate_dag(DagInput.model_validate({"dag": dag_data}), session)
    assert data["valid"] and data["file"] is None
