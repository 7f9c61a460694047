"""The ``shardplan`` command line: entry point (``main``), views, input parsing, DAG validation."""

from shardplan.solver.cli.main import main

__all__ = ["main"]
