"""``HashOnce``: the hash pydantic gives a frozen model, computed once per instance and never carried over."""

from __future__ import annotations

import copy
import gc
import pickle

from pydantic import BaseModel

from shardplan.hardware.cluster import parse_cluster
from shardplan.models import get_model
from shardplan.models.frozen import _HASHES, by_identity
from shardplan.rules.layout import Layout
from shardplan.rules.problem import Problem, Workload


def pydantic_hash(model: BaseModel) -> int:
    """What pydantic's own hash of a frozen model is: the hash of its field values, in order (the value
    itself for one field)."""
    values = tuple(model.__dict__[name] for name in type(model).model_fields)
    return hash(values[0] if len(values) == 1 else values)


def test_same_value_as_pydantics_hash() -> None:
    model = get_model("deepseek-v3")
    layout = Layout.even(61, 2, tp=8, batch=4)
    assert hash(model) == pydantic_hash(model)
    assert hash(layout) == hash(layout) == pydantic_hash(layout)


def test_a_copy_with_other_fields_hashes_its_own_fields() -> None:
    layout = Layout.even(61, 2, tp=8, batch=4)
    hash(layout)
    other = layout.model_copy(update={"batch": 5})
    assert hash(other) == pydantic_hash(other) != hash(layout)
    back = other.model_copy(update={"batch": 4})
    assert back == layout and hash(back) == hash(layout)
    assert back.__dict__.keys() == layout.__dict__.keys()  # nothing stored on the instance


def test_pickled_and_copied_problems_hash_alike() -> None:
    problem = Problem(model=get_model("llama-3.1-8b"), cluster=parse_cluster("8xH100"), workload=Workload(isl=100))
    for twin in (pickle.loads(pickle.dumps(problem)), copy.deepcopy(problem)):
        assert twin == problem and hash(twin) == hash(problem)


def test_an_instance_that_dies_leaves_no_entry() -> None:
    gc.collect()
    before = len(_HASHES)
    hash(Layout.even(8, 1, batch=3))
    gc.collect()
    assert len(_HASHES) == before


def test_by_identity_reuses_a_result_only_for_the_same_objects():
    calls = []

    @by_identity(kept=2)
    def total(row: tuple[float, ...], scale: int) -> float:
        calls.append(row)
        return sum(row) * scale

    row, twin = tuple([1.0, 2.0]), tuple([1.0, 2.0])
    assert row == twin and row is not twin
    assert total(row, 1000) == total(row, 10**3) == 3000.0 and len(calls) == 1  # scalars match by value
    assert total(twin, 1000) == 3000.0 and len(calls) == 2  # an equal, distinct row is another key
    assert total(row, 1) == 3.0 and len(calls) == 3  # past kept=2: everything dropped, then this one kept
    assert total(row, 1000) == 3000.0 and len(calls) == 4
