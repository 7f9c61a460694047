"""A spinner on stderr while a search runs, so a person at a terminal sees that work goes on, for how
long, and how to bound it. Only on a terminal and never with ``--json``: scripts and agents get exactly
the bytes they got before, and rich is not even imported for them."""

from __future__ import annotations

import sys
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from shardplan.solver.search_base import units_of_work


def searching(what: str, time_limit_s: float | None, quiet: bool,
              work_limit: float | None = None) -> AbstractContextManager[Any]:
    """The context a search runs in: the spinner (``views.working``) when stderr is a terminal and the
    output is for a person, else nothing. ``what`` names the work, e.g. "solving"."""
    if quiet or sys.stderr is None or not sys.stderr.isatty():
        return nullcontext()
    if time_limit_s is not None:
        bound = f"at most {time_limit_s:.1f} s"
    elif work_limit is not None:
        bound = f"at most {units_of_work(work_limit)}; Ctrl-C stops"
    else:
        bound = "Ctrl-C stops; --time-limit S returns the best plan found by then"
    # Lazily on purpose: rich costs about 0.06 s of CPU to import, and only a terminal needs it here.
    from shardplan.solver.cli.views import working

    return working(f"{what} ({bound})")
