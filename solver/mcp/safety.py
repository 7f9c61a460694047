"""What an MCP caller may touch and for how long: the file root and the time limits of a call.

An agent names paths and time limits in its tool calls; nothing it names is trusted. A path is used
only when the server was started with ``--root DIR`` and the path, symlinks resolved, lies inside
that folder. A call's time limit is checked against the server's cap. Every refusal is a
``SpecError`` naming the field, so it reaches the agent as the same one line the CLI prints.
No MCP SDK here: ``shardplan mcp`` checks its options with these before loading the SDK.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from shardplan.models import SpecError

DEFAULT_CALL_TIME_S = 60.0  # a call's computing time when it names none (the server's --time-limit)
MAX_CALL_TIME_S = 600.0  # the most a call may ask for (the server's --max-time-limit)
# Past the solver's own limit, a call still explains an infeasible problem (CP-SAT cores), places
# experts and prices the plan; the call's wall-clock bound leaves this much for that.
FINISH_GRACE_S = 30.0
MAX_ENUMERATE_LIMIT = 1000  # layouts one enumerate call may return: bounds the answer's size


def check_seconds(field: str, seconds: float | None, most_s: float) -> None:
    """A time limit: a finite number of seconds > 0 and at most ``most_s``; None passes (the default)."""
    if seconds is None:
        return
    if not (seconds > 0 and math.isfinite(seconds)):
        raise SpecError(field, f"must be a finite number > 0, got {seconds}")
    if seconds > most_s:
        raise SpecError(field, f"must be at most {most_s:g} s (the server's --max-time-limit), got {seconds:g}")


@dataclass(frozen=True)
class TimeLimits:
    """The server's time limits: what a call gets when it names none, and the most it may ask for."""

    default_s: float = DEFAULT_CALL_TIME_S
    max_s: float = MAX_CALL_TIME_S

    def __post_init__(self) -> None:
        check_seconds("max-time-limit", self.max_s, math.inf)
        check_seconds("time-limit", self.default_s, self.max_s)

    def solver_s(self, asked_s: float | None, field: str = "time-limit") -> float:
        """The solver's time limit for a call that asked for ``asked_s`` (None: the default)."""
        check_seconds(field, asked_s, self.max_s)
        return self.default_s if asked_s is None else asked_s

    @staticmethod
    def wall_s(solver_s: float) -> float:
        """How long a call may take in all, its solver's ``solver_s`` included."""
        return solver_s + FINISH_GRACE_S


class Root:
    """The one folder whose files tools may read and write (``--root DIR``), or none at all."""

    def __init__(self, directory: str | None):
        self.path: str | None = None
        if directory is not None:
            if not directory.strip():
                # realpath("") is the current folder: `--root "$UNSET"` served every file under it.
                raise SpecError("root", "an empty path; name the folder (without --root no file is read or written)")
            resolved = os.path.realpath(directory)
            if not os.path.isdir(resolved):
                raise SpecError("root", f"{directory} is not a directory")
            self.path = resolved

    def resolve(self, path: str, field: str) -> str:
        """``path`` with symlinks resolved, when it lies inside the root (a relative path is taken
        from the root); otherwise ``SpecError(field, ...)``. A file need not exist yet (an output)."""
        shown = repr(path) if len(path) <= 80 else repr(path[:77]) + "..."
        if self.path is None:
            raise SpecError(field, f"{shown}: this server reads and writes no files (start it with --root DIR)")
        if "\0" in path or not path.strip():
            raise SpecError(field, f"{shown} is not a path")
        try:
            os.fsencode(path)  # a lone surrogate (\ud800) no file name holds: realpath raised UnicodeEncodeError
        except UnicodeEncodeError:
            raise SpecError(field, f"{shown} is not a path") from None
        resolved = os.path.realpath(os.path.join(self.path, os.path.expanduser(path)))
        if os.path.commonpath([resolved, self.path]) != self.path:
            raise SpecError(field, f"{shown} is outside --root {self.path}")
        return resolved

    def resolve_optional(self, path: str | None, field: str) -> str | None:
        return None if path is None else self.resolve(path, field)
