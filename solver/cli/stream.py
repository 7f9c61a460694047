"""``enumerate``'s output as the layouts arrive: each row is printed (``--jsonl``) or spooled to a
temporary file (``--json``) when it is found and then dropped, so memory holds only what the end needs:
the frontier's rows, the fastest and the busiest row for the terminal view, and for ``--report`` one
small point per layout (its scatter).

``--jsonl`` prints one row per line and a last ``{"type": "frontier", "count", "pareto", "partial"}``
line. ``--json`` keeps its one object, ``{"count", "pareto": [indices], "plans": [rows, each with its
"pareto" mark], "partial"}``: the marks are known only at the end, so the rows wait on disk and are
copied out then, one at a time. ``partial`` is true when the enumeration stopped before visiting every
layout (its time limit, ``--limit``, or Ctrl-C).
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from typing import IO, Any

import click

from shardplan.models.files import json_text
from shardplan.solver.enumerate import Frontier
from shardplan.solver.held_sigint import deferred_sigint

# The fields of a row the HTML report's scatter and frontier table read (report.enumeration_report).
POINT_FIELDS = ("index", "degrees", "num_gpus", "metrics")


@dataclass
class Kept:
    """What the end of an enumeration needs of the rows already printed."""

    with_points: bool  # keep each row's scatter point (the HTML report)
    count: int = 0
    frontier: Frontier = field(default_factory=Frontier)
    frontier_rows: dict[int, dict[str, Any]] = field(default_factory=dict)
    fastest: dict[str, Any] | None = None  # least e2e, then most tokens/s; the first of equals
    busiest: dict[str, Any] | None = None  # most tokens/s; the first of equals
    points: list[dict[str, Any]] = field(default_factory=list)

    def add(self, row: dict[str, Any]) -> None:
        e2e_ms, tokens_per_s = row["metrics"]["e2e_ms"], row["metrics"]["output_tokens_per_s"]
        joined, beaten = self.frontier.add(row["index"], e2e_ms, tokens_per_s)
        for index in beaten:
            del self.frontier_rows[index]
        if joined:
            self.frontier_rows[row["index"]] = row
        if self.fastest is None or (e2e_ms, -tokens_per_s) < _speed(self.fastest):
            self.fastest = row
        if self.busiest is None or tokens_per_s > self.busiest["metrics"]["output_tokens_per_s"]:
            self.busiest = row
        if self.with_points:
            self.points.append({k: row[k] for k in POINT_FIELDS})
        self.count += 1

    @property
    def pareto(self) -> list[int]:
        return self.frontier.indices

    def marks(self) -> list[bool]:
        """Per kept point, whether it is on the frontier (the report's colours)."""
        front = set(self.pareto)
        return [p["index"] in front for p in self.points]


def _speed(row: dict[str, Any]) -> tuple[float, float]:
    return row["metrics"]["e2e_ms"], -row["metrics"]["output_tokens_per_s"]


class Printer:
    """Prints rows in the chosen format as they come (or spools them, for ``--json``), and the end."""

    def __init__(self, mode: str):
        self.mode = mode  # "json", "jsonl" or "table"
        self.spool: IO[str] | None = tempfile.TemporaryFile("w+", encoding="utf-8") if mode == "json" else None

    def add(self, row: dict[str, Any], kept: Kept) -> None:
        """Print the row and keep what the end needs of it, together (``deferred_sigint``)."""
        with deferred_sigint():
            self.row(row)
            kept.add(row)

    def row(self, row: dict[str, Any]) -> None:
        line = json_text(row, separators=(",", ":"))
        if self.mode == "jsonl":
            click.echo(line)
        elif self.spool is not None:
            self.spool.write(line + "\n")

    def finish(self, kept: Kept, partial: bool) -> None:
        summary = {"count": kept.count, "pareto": kept.pareto, "partial": partial}
        if self.mode == "jsonl":
            click.echo(json_text({"type": "frontier", **summary}, separators=(",", ":")))
        elif self.spool is not None:
            self._copy_out(summary)
        else:
            rows = sorted(kept.frontier_rows.values(), key=_speed)
            # Lazily on purpose: rich costs about 0.06 s of CPU to import, and --json output never uses it.
            from shardplan.solver.cli import views as cli_views

            cli_views.print_enumeration(kept.count, rows, kept.fastest, kept.busiest, partial)

    def _copy_out(self, summary: dict[str, Any]) -> None:
        """The ``--json`` object: count and frontier first, then the spooled rows with their marks, then
        ``partial``; written row by row, as ``json_text(..., indent=2)`` lays the object out."""
        assert self.spool is not None
        front = set(summary["pareto"])
        head = {"count": summary["count"], "pareto": summary["pareto"]}
        click.echo(json_text(head, indent=2)[:-2] + ',\n  "plans": [', nl=False)
        self.spool.seek(0)
        for n, line in enumerate(self.spool):
            row = json.loads(line)
            row["pareto"] = row["index"] in front
            text = json_text(row, indent=2).replace("\n", "\n    ")
            click.echo(("," if n else "") + "\n    " + text, nl=False)
        click.echo(("\n  " if summary["count"] else "") + '],\n  "partial": ' + json_text(summary["partial"]) + "\n}")
        self.spool.close()
