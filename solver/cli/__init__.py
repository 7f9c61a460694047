"""The ``shardplan`` command line: entry point (``main``), views, input parsing, DAG validation."""

from __future__ import annotations

import sys

EXIT_INTERRUPTED = 130  # as solver/cli/main.py: 128 + SIGINT


def main(argv: list[str] | None = None) -> None:
    """The ``shardplan`` script. The command line's modules (OR-Tools, pydantic, the cost model: about a
    second) are imported here, not when this package is, so that a Ctrl-C during that start-up ends as one
    that comes later does: one line and 130, not a traceback and death by the signal."""
    try:
        from shardplan.solver.cli.main import main as run  # lazy on purpose: see above
    except KeyboardInterrupt:
        print("shardplan: interrupted", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    run(argv)


__all__ = ["main"]
