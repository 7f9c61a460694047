"""The ``shardplan`` console script: Ctrl-C at any moment ends with one line and exit 130.

Starting a command imports the solver, a large share of a short command's time; a Ctrl-C then used
to print a KeyboardInterrupt traceback from deep inside an import. The handler below is installed
before those imports and ends the process the way the command line does once it runs
(``solver/cli/main.py``: one line, ``shardplan: interrupted``, exit 130); then the command line's own handling
takes over. ``from shardplan.solver.cli import main`` still gives the command line itself. A process started
with Ctrl-C ignored (a script's background job) gets no handler: the signal stays ignored, as the shell asked.
"""

from __future__ import annotations

import signal
import sys
from types import FrameType

EXIT_INTERRUPTED = 130  # 128 + SIGINT, as solver/cli/main.py exits on Ctrl-C


_said = False  # the handler has written its line (and raised SystemExit)


def _interrupted_while_starting(signum: int, frame: FrameType | None) -> None:
    global _said
    sys.stderr.write("shardplan: interrupted\n")
    _said = True
    sys.exit(EXIT_INTERRUPTED)


def main() -> None:
    # Started with Ctrl-C ignored (a script's background job, ``shardplan ... &``): it stays ignored, as the shell
    # asked, during the imports too (putting SIG_IGN back below changes nothing).
    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.SIG_IGN:
        previous = signal.signal(signal.SIGINT, _interrupted_while_starting)
    try:
        # Lazily on purpose: the handler must be in place before the command line's imports start.
        from shardplan.solver.cli.main import main as run_command_line
    except Exception:
        # The handler's SystemExit, raised inside a compiled module's initialiser, comes out as another
        # exception (an ImportError "initialization failed", as the KeyboardInterrupt cli/main.py reads through
        # its causes): a traceback and exit 1. Once the line is written, any exception of the import is that.
        if _said:
            sys.exit(EXIT_INTERRUPTED)
        raise
    signal.signal(signal.SIGINT, previous)
    run_command_line()


if __name__ == "__main__":  # pragma: no cover
    main()
