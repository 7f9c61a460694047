"""``shardplan validate FILE.json [--json] [--fix --out FIXED.json]``: check a DAG file on its own.

Exit codes: 0 valid, 1 violations (each with its rule ID and node id; after ``--fix``, those that
remain), 2 unreadable or not a shardplan DAG (one line on stderr). ``main.py`` registers the command.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

import click

from shardplan.models.errors import SpecError, printable
from shardplan.models.files import json_text
from shardplan.rules.dag.check import check_dag, rule_ids
from shardplan.rules.dag.fix import Change, fix_dag
from shardplan.solver.cli.once import OnceCommand
from shardplan.solver.cli.outputs import OutputFiles, say_wrote
from shardplan.solver.cli.results import validation_dict

EXIT_INVALID, EXIT_BAD_INPUT = 1, 2


@contextmanager
def _named_out() -> Iterator[None]:
    """The DAG writers name their output ``dag`` (``solve --dag``'s flag); here it is ``--out``, so an error
    about the output file (an unknown extension, a DAG too large to write) names the flag the user set."""
    try:
        yield
    except SpecError as exc:
        if exc.field != "dag":
            raise
        raise SpecError("out", exc.reason) from None


@click.command(cls=OnceCommand)
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
@click.option("--fix", is_flag=True,
              help="repair what has one safe repair (missing collective, KV-cache or pipeline edge)")
@click.option("--out", type=click.Path(dir_okay=False), default=None,
              help="where --fix writes the repaired DAG (.json, .graphml, .dot, .mmd)")
def validate(file: str, as_json: bool, fix: bool, out: str | None) -> None:
    """Check an execution DAG (node-link JSON) against the DAG rules; --fix repairs what it safely can."""
    # Each names its flag as the field ("out: ..."), the one line every bad input gets; a bare "--out needs
    # --fix" named none.
    if out and not fix:
        raise SpecError("out", "is where --fix writes the repaired DAG; give --fix too")
    if fix and not out:
        raise SpecError("fix", "writes the repaired DAG to --out FIXED.json; give --out too")
    # Lazily on purpose: reading and writing DAGs needs networkx (about 0.2 s of CPU to import), and
    # the command line registers this command on every start.
    from shardplan.solver.dag.export import check_writable, read_json, write_graph, writer_for

    changes: list[Change] = []
    with OutputFiles([file]) as outputs:
        outputs.add("out", out)
        if out:
            with _named_out():
                writer_for(out)  # an unknown extension fails before any work
        dag = read_json(file)
        if out:  # that is, --fix: each needs the other (checked above)
            check_writable(dag)
            dag, changes, diagnostics = fix_dag(dag)
            with _named_out():
                write_graph(dag, outputs.temp("out"))
            outputs.commit()
        else:
            diagnostics = check_dag(dag)
    valid = not diagnostics
    if as_json:
        click.echo(json_text(validation_dict(file, dag, diagnostics, out, changes if fix else None), indent=2))
    else:
        # The lines quote the file's own node names and its path: printable, so no name steers the terminal.
        for change in changes:
            click.echo(printable(f"fixed {change}"))
        if fix and out:  # --fix needs --out (checked above)
            say_wrote(out)
        for d in diagnostics:
            click.echo(printable(f"{d.rule} {d.node if d.node is not None else '-'}: {d.message}"))
        summary = f"{file}: {dag.number_of_nodes()} nodes, {dag.number_of_edges()} edges, "
        verdict = "valid" if valid else f"{len(diagnostics)} violations of {', '.join(rule_ids(diagnostics))}"
        click.echo(printable(summary + verdict))
    if not valid:
        # SystemExit, not click's Exit: the entry point runs click with standalone_mode=False, which
        # turns Exit into a return value.
        sys.exit(EXIT_INVALID)
