"""The MCP server's file root and time limits (solver/mcp/safety.py): what an agent's path or time
limit may be, checked on real folders and symlinks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shardplan.models import SpecError
from shardplan.solver.mcp.safety import FINISH_GRACE_S, Root, TimeLimits


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "sub").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.json").write_text("{}")
    os.symlink(outside, root / "escape")  # a folder link inside the root that leads out of it
    os.symlink(root / "sub", root / "inner")  # one that stays inside
    return root, outside


def test_paths_inside_the_root_resolve_relative_or_absolute(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    r = Root(str(root))
    assert r.resolve("sub/a.json", "dag") == str(root.resolve() / "sub" / "a.json")
    assert r.resolve(str(root / "sub" / "a.json"), "dag") == str(root.resolve() / "sub" / "a.json")
    assert r.resolve("inner/a.json", "dag") == str(root.resolve() / "sub" / "a.json")  # link resolved


@pytest.mark.parametrize("path", ["../outside/secret.json", "escape/secret.json", "/etc/passwd", "sub/../../x"])
def test_paths_leading_out_of_the_root_are_refused_naming_the_field(tree: tuple[Path, Path], path: str) -> None:
    root, _ = tree
    with pytest.raises(SpecError, match="is outside --root") as refused:
        Root(str(root)).resolve(path, "model")
    assert refused.value.field == "model"


def test_a_root_named_through_a_symlink_is_the_folder_it_names(tree: tuple[Path, Path]) -> None:
    root, outside = tree
    via_link = Root(str(root / "escape"))  # the root itself is the outside folder, reached by a link
    assert via_link.resolve("secret.json", "path") == str(outside.resolve() / "secret.json")


def test_without_a_root_no_path_is_used() -> None:
    with pytest.raises(SpecError, match="reads and writes no files"):
        Root(None).resolve("a.json", "dag")


def test_not_a_path_and_not_a_folder(tree: tuple[Path, Path]) -> None:
    root, _ = tree
    with pytest.raises(SpecError, match="is not a path"):
        Root(str(root)).resolve("a\0b", "dag")
    with pytest.raises(SpecError, match="is not a directory"):
        Root(str(root / "missing"))


def test_time_limits_default_cap_and_wall() -> None:
    limits = TimeLimits(default_s=10.0, max_s=100.0)
    assert limits.solver_s(None) == 10.0 and limits.solver_s(100.0) == 100.0
    assert limits.wall_s(10.0) == 10.0 + FINISH_GRACE_S
    for bad in (0.0, -1.0, float("nan"), float("inf"), 100.5):
        with pytest.raises(SpecError) as refused:
            limits.solver_s(bad)
        assert refused.value.field == "time-limit"
    with pytest.raises(SpecError):
        TimeLimits(default_s=200.0, max_s=100.0)  # a default above the cap


@pytest.mark.parametrize("directory", ["", " "])
def test_an_empty_root_is_refused_not_read_as_the_current_folder(directory: str) -> None:
    # os.path.realpath("") is the current folder: `shardplan mcp --root "$UNSET"` served every file under it.
    with pytest.raises(SpecError, match="empty path") as refused:
        Root(directory)
    assert refused.value.field == "root"


def test_a_profile_name_stored_or_composed_is_passed_on_as_a_name_not_read_as_a_path(tree: tuple[Path, Path]) -> None:
    from shardplan.solver.mcp.tools import profile_of

    root, _ = tree
    for name in ("h100-sxm-vllm", "h100-sxm+sglang"):
        assert profile_of(name, Root(str(root))) == name
