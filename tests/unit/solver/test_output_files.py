"""OutputFiles' temporaries are removed by discard_all, for a process that ends without leaving its ``with``."""

from __future__ import annotations

from pathlib import Path

from shardplan.solver.cli.outputs import OutputFiles, discard_all


def test_discard_all_removes_every_live_commands_temporaries_and_leaves_committed_files(tmp_path: Path) -> None:
    # The MCP server ends at once on SIGTERM (os._exit), so a call's 'with OutputFiles' never discards: two
    # calls in flight, one with a temporary written, one already committed.
    pending, done = OutputFiles(), OutputFiles()
    pending.add("dag", tmp_path / "plan.json")
    done.add("report", tmp_path / "plan.html")
    Path(pending.temp("dag")).write_text("{}")
    Path(done.temp("report")).write_text("<html>")
    done.commit()
    assert any(p.name.startswith(".plan.json.") for p in tmp_path.iterdir())
    discard_all()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.html"]
