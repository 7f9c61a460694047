"""``python -m shardplan.solver.cli``: the same entry point as the ``shardplan`` script."""

from shardplan.solver.cli.main import main

main()
