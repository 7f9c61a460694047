"""ExpertLoadProfile: validation names the field; loaders and synthetic profiles."""

import json

import pytest
from pydantic import ValidationError

from shardplan.models.errors import SpecError
from shardplan.models.load_profile import ExpertLoadProfile, load_profile, uniform_profile, zipf_profile


def _error(**fields) -> SpecError:
    with pytest.raises(SpecError) as caught:
        ExpertLoadProfile(**fields)
    return caught.value


def test_row_of_wrong_length_names_the_row():
    err = _error(num_experts=4, layers=(3, 4), loads=((1.0,) * 4, (1.0,) * 3))
    assert err.field == "loads[1]"
    assert "expected 4 experts, got 3" in err.reason and "layer 4" in err.reason


def test_negative_count_names_the_entry():
    err = _error(num_experts=3, layers=(0, 1, 2), loads=((1.0,) * 3, (1.0,) * 3, (1.0, 2.0, -1.0)))
    assert err.field == "loads[2][2]"
    assert "negative count" in err.reason


def test_a_count_whose_layer_total_would_overflow_is_refused():
    # 128 counts of 1e308 summed to inf: the placement's max/mean load was NaN, printed in the JSON output.
    err = _error(num_experts=128, layers=(3,), loads=((1e308,) * 128,))
    assert err.field == "loads[0][0]" and "above" in err.reason


def test_not_finite_and_layer_order_and_row_count():
    assert _error(num_experts=1, layers=(0,), loads=((float("nan"),),)).field == "loads[0][0]"
    assert _error(num_experts=1, layers=(2, 1), loads=((1.0,), (1.0,))).field == "layers"
    assert _error(num_experts=1, layers=(1, 2), loads=((1.0,),)).field == "loads"
    assert _error(num_experts=1, layers=(), loads=()).field == "layers"


def test_strict_and_frozen():
    profile = uniform_profile(2, [0], 4)
    with pytest.raises(ValidationError):
        profile.num_experts = 3
    with pytest.raises(SpecError):
        ExpertLoadProfile(num_experts=1, layers=(0,), loads=((1.0,),), extra=1)


def test_uniform_shape():
    profile = uniform_profile(8, [3, 4, 6], 64)
    assert profile.layers == (3, 4, 6)
    assert profile.loads == ((8.0,) * 8,) * 3
    assert profile.layer_loads(6) == (8.0,) * 8


def test_zipf_is_deterministic_and_shaped():
    a = zipf_profile(16, [1, 2, 3], 1.0, 1000, seed=7)
    b = zipf_profile(16, [1, 2, 3], 1.0, 1000, seed=7)
    c = zipf_profile(16, [1, 2, 3], 1.0, 1000, seed=8)
    assert a == b and a != c
    assert len(a.loads) == 3 and all(len(row) == 16 for row in a.loads)
    for row in a.loads:
        assert sum(row) == pytest.approx(1000)
        ranked = sorted(row, reverse=True)
        assert ranked[0] / ranked[3] == pytest.approx(4.0)  # popularity ~ 1 / rank
    assert a.loads[0] != a.loads[1]  # ranks are shuffled per layer
    assert zipf_profile(4, [0], 0.0, 8).loads == ((2.0,) * 4,)


def test_synthetic_inputs_are_checked():
    with pytest.raises(SpecError) as caught:
        zipf_profile(4, [0], -1.0, 8)
    assert caught.value.field == "exponent"
    with pytest.raises(SpecError) as caught:
        uniform_profile(4, [0], 0)
    assert caught.value.field == "tokens_per_layer"


def test_json_round_trip(tmp_path):
    path = tmp_path / "counts.json"
    path.write_text(json.dumps({"num_experts": 3, "source": "prod", "layers": {"4": [1, 2, 3], "3": [0, 0, 9]}}))
    profile = load_profile(path, 3, [3, 4])
    assert profile.loads == ((0.0, 0.0, 9.0), (1.0, 2.0, 3.0))
    assert profile.source == "prod"


def test_json_errors(tmp_path):
    path = tmp_path / "counts.json"
    path.write_text(json.dumps({"layers": {"3": [1, 2, 3]}}))
    with pytest.raises(SpecError) as caught:
        load_profile(path, 3, [3, 7])
    assert caught.value.field == "layers" and "missing layer 7" in caught.value.reason
    with pytest.raises(SpecError) as caught:
        load_profile(path, 3, [4])
    assert "layer 3 is not a MoE layer" in caught.value.reason
    path.write_text(json.dumps({"layers": {"3": [1, 2]}}))
    with pytest.raises(SpecError) as caught:
        load_profile(path, 3, [3])
    assert caught.value.field == "layers.3" and "expected 3 experts, got 2" in caught.value.reason
    path.write_text(json.dumps({"layers": {"3": [1, -2, 0]}}))
    with pytest.raises(SpecError) as caught:
        load_profile(path, 3, [3])
    assert caught.value.field == "loads[0][1]"
    path.write_text("{not json")
    with pytest.raises(SpecError):
        load_profile(path, 3, [3])


def test_csv(tmp_path):
    path = tmp_path / "counts.csv"
    path.write_text("layer,expert,tokens\n3,0,5\n3,2,1.5\n4,1,7\n")
    profile = load_profile(path, 3, [3, 4])
    assert profile.loads == ((5.0, 0.0, 1.5), (0.0, 7.0, 0.0))
    path.write_text("layer,expert,tokens\n3,0,5\n3,0,6\n")
    with pytest.raises(SpecError, match="listed twice"):
        load_profile(path, 3, [3])
    path.write_text("layer,expert,tokens\n3,9,5\n")
    with pytest.raises(SpecError, match="outside"):
        load_profile(path, 3, [3])
    path.write_text('layer,expert,tokens\n3,0,"5"\n"3\n",1,1\n3,7,1\n')  # a layer cell over lines 3-4
    with pytest.raises(SpecError, match=r"\.csv:5 expert"):
        load_profile(path, 3, [3])
    path.write_text("layer,expert,tokens\n3,0,5\n")
    with pytest.raises(SpecError, match="missing layer 4"):
        load_profile(path, 3, [3, 4])
    with pytest.raises(SpecError, match="cannot read"):
        load_profile(tmp_path / "absent.csv", 3, [3])


def test_a_stages_rows_equal_the_profile_built_and_validated_from_them():
    whole = zipf_profile(8, [1, 3, 5, 7], 1.2, 8.0, seed=3)
    part = whole.restricted_to((3, 7))
    validated = ExpertLoadProfile(num_experts=8, layers=(3, 7), loads=(whole.loads[1], whole.loads[3]),
                                  source=whole.source)
    assert part == validated and hash(part) == hash(validated)
    assert part.layer_loads(7) == whole.layer_loads(7)


@pytest.mark.parametrize(("layers", "field"), [((3, 4), "layer"), ((7, 3), "layers"), ((3, 3), "layers"),
                                               ((), "layers")])
def test_a_stage_of_layers_not_in_the_profile_or_out_of_order_is_refused(layers, field):
    with pytest.raises(SpecError) as caught:
        zipf_profile(8, [1, 3, 5, 7], 1.2, 8.0, seed=3).restricted_to(layers)
    assert caught.value.field == field


def test_uniform_rows_are_one_validated_row_shared():
    built = uniform_profile(4, [1, 2, 5], 8)
    validated = ExpertLoadProfile(num_experts=4, layers=(1, 2, 5), loads=((2.0,) * 4,) * 3, source="uniform")
    assert built == validated and hash(built) == hash(validated)
    assert built.loads[0] is built.loads[2]  # what lets the placement checks judge the layers once
    for layers in ([2, 1], [1, 1], [-1, 2]):
        with pytest.raises(SpecError) as caught:
            uniform_profile(4, layers, 8)
        assert caught.value.field.startswith("layers")
