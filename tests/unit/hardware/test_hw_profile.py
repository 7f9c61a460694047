"""Calibration profiles: which profile prices a GPU and engine, and profile files as ``--profile`` reads them."""

from __future__ import annotations

import json
import os

import pytest

from shardplan.hardware import get_gpu
from shardplan.hardware.profile import (
    DEFAULT_ENGINE,
    ENGINES,
    PROFILE_DIR,
    get_profile,
    list_profiles,
    load_profile_file,
    profile_for_gpu,
)
from shardplan.models import SpecError


def test_every_stored_profile_names_its_engine_or_none_and_loads():
    names = {p.name for p in list_profiles()}
    assert names == {path.stem for path in PROFILE_DIR.glob("*.json")}
    for p in list_profiles():
        assert p.engine in (*ENGINES, None)
        if p.fit_rows is not None:  # a fitted profile says how well: an error in [0, 1)
            assert p.fit_median_abs_error is not None and 0 <= p.fit_median_abs_error < 1


def test_each_gpu_has_one_default_profile_and_each_gpu_and_engine_at_most_one_engine_profile():
    gpus, engines = set(), set()
    for p in list_profiles():
        assert not (p.default and p.engine_default), p.name  # a hardware profile or an engine's, not both
        if p.default:
            assert p.gpu not in gpus, p.gpu
            gpus.add(p.gpu)
        if p.engine_default:
            assert p.engine is not None and (p.gpu, p.engine) not in engines, p.name
            engines.add((p.gpu, p.engine))


@pytest.mark.parametrize("engine", ENGINES)
def test_the_engine_profile_is_preferred_and_otherwise_the_gpu_keeps_its_own(engine):
    for gpu in ("H100-SXM", "H200-SXM", "L40S"):
        chosen = profile_for_gpu(gpu, engine)
        own = [p for p in list_profiles() if p.engine_default and p.gpu == gpu and p.engine == engine]
        if own:
            assert chosen == own[0]
        else:  # no profile of this engine for the GPU: composed on the GPU's own fields, never another GPU's
            default = next(p for p in list_profiles() if p.default and p.gpu == gpu)
            assert chosen.gpu == gpu and chosen.name == f"{default.name}+{engine}" and chosen.engine == engine


def test_default_engine_is_one_of_the_engines_and_an_unknown_gpu_falls_back_to_a_generic_profile():
    assert DEFAULT_ENGINE in ENGINES
    assert profile_for_gpu("No-Such-GPU").gpu == "*"


def test_a_profile_file_round_trips(tmp_path):
    stored = get_profile("h100-sxm")
    path = tmp_path / "p.json"
    path.write_text(json.dumps(stored.model_dump()))
    assert load_profile_file(path) == stored


@pytest.mark.parametrize(("gpu", "read"), [("H100-SXM", "H100-SXM"), ("nvidia h100", "H100-SXM"), ("*", "*"),
                                           ("h20", "H20")])
def test_a_profile_files_gpu_is_read_as_its_presets_name(tmp_path, gpu, read):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(get_profile("h100-sxm").model_dump() | {"gpu": gpu}))
    assert load_profile_file(path).gpu == read


@pytest.mark.parametrize("gpu", ["H999", "", "H100-SXM-81GB"])
def test_a_profile_file_of_a_gpu_no_preset_holds_is_a_spec_error_naming_the_field(tmp_path, gpu):
    """It was accepted, and a plan said only that the profile was fitted on 'H999': no fit writes such a name (the
    fitter names a preset, ``generic`` any GPU), so it is a typo or a made-up file."""
    path = tmp_path / "p.json"
    path.write_text(json.dumps(get_profile("h100-sxm").model_dump() | {"gpu": gpu}))
    with pytest.raises(SpecError) as err:
        load_profile_file(path)
    assert err.value.field == "profile gpu"
    assert err.value.reason.startswith(f"{path}: {gpu!r} is not a known GPU; known: H100-SXM, ")
    assert "MI300X" in err.value.reason and err.value.reason.endswith(", or '*' for any")


def test_every_stored_profile_names_a_preset_gpu_or_any():
    for p in list_profiles():
        assert p.gpu == "*" or get_gpu(p.gpu).name == p.gpu, p.name


@pytest.mark.parametrize(
    "content, word",
    [
        (b"\xff\xfe not utf-8", "is UTF-16 text (its byte-order mark says so); save it as UTF-8"),
        (b'{"name": "\xe9"}', "is not UTF-8 text"),
        (b"{", "not valid JSON"),
        (b'{"name": "x"}', "gpu"),
        (b'{"name": "x", "name": "y"}', "repeats the key 'name'"),
        (b'{"name": "\\ud800"}', "half of a UTF-16 surrogate pair"),
        (None, "cannot read"),
    ],
)
def test_a_bad_profile_file_is_a_spec_error_naming_the_problem(tmp_path, content, word):
    path = tmp_path / "p.json"
    if content is not None:
        path.write_bytes(content)
    with pytest.raises(SpecError) as err:
        load_profile_file(path)
    assert word in str(err.value)


@pytest.mark.parametrize("path, reason", [("a\x00b.json", "is not a path"), ("fifo", "is not a regular file")])
def test_a_profile_path_that_is_no_regular_file_is_a_spec_error(tmp_path, monkeypatch, path, reason):
    """A NUL byte in the path raised ValueError (an internal error to a library caller); a FIFO is refused before it
    is opened, so the read cannot block."""
    monkeypatch.chdir(tmp_path)
    if path == "fifo":
        os.mkfifo(path)
    with pytest.raises(SpecError) as err:
        load_profile_file(path)
    assert err.value.field == "profile" and reason in err.value.reason


@pytest.mark.parametrize("value", ["Infinity", "NaN", "-Infinity"])
def test_a_non_finite_factor_in_a_profile_file_is_a_spec_error_naming_the_field(tmp_path, value):
    # Python's json reads Infinity and NaN; priced with them, a time became inf and the CLI crashed
    # converting it to integer ns (fuzz seed 905: attention_fixed_us Infinity, exit 3).
    fields = get_profile("h100-sxm").model_dump()
    fields["attention_fixed_us"] = "__VALUE__"
    text = json.dumps(fields).replace('"__VALUE__"', value)
    path = tmp_path / "p.json"
    path.write_text(text)
    with pytest.raises(SpecError) as err:
        load_profile_file(path)
    assert "attention_fixed_us" in str(err.value) and "finite" in str(err.value)
