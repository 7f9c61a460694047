"""A Ctrl-C held back until a block is done, then raised: for steps that must happen whole or not at all
(``enumerate`` printing a row and keeping it; a CP-SAT search's thread started, so that it can be stopped).

A handler that notes the signal, not a blocked signal: the process's other threads, CP-SAT's, would still
take it. Python runs signal handlers in the main thread only, so elsewhere the block runs as it is (no
``KeyboardInterrupt`` reaches another thread). A process started with Ctrl-C ignored (a script's background
job, ``cmd &``, where the shell ignores it so that the script's Ctrl-C is not the job's) keeps ignoring it.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def deferred_sigint() -> Iterator[None]:
    """Run the block with a Ctrl-C held back; one that came meanwhile is raised (``KeyboardInterrupt``) once the
    block is done and the previous handler is back."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        yield
        return
    noted: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: noted.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if noted:
        raise KeyboardInterrupt


__all__ = ["deferred_sigint"]
