"""The one exception hierarchy of shardplan.

It lives in ``models`` because that package depends on nothing of ours, so every other package
(hardware, rules, solver) can raise and catch the same classes. The CLI turns ``SpecError`` into
one line on stderr and exit code 2, ``InfeasibleError`` into exit code 1.
"""

from __future__ import annotations


class ShardplanError(Exception):
    """Base class of every error shardplan raises on purpose."""


class SpecError(ShardplanError, ValueError):
    """Bad input: a malformed config, an unknown preset, a value out of range.

    ``field`` names what was wrong, so a message can say where to look.
    """

    def __init__(self, field: str, reason: str):
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")


class InfeasibleError(ShardplanError):
    """The problem has no plan: ``conflicts`` holds (rule id, message) pairs that cannot all hold."""

    def __init__(self, conflicts: list[tuple[str, str]]):
        self.conflicts = conflicts
        text = "; ".join(f"{rule}: {msg}" for rule, msg in conflicts) or "no feasible plan"
        super().__init__(f"infeasible: {text}")


class SolverLimitError(ShardplanError):
    """The time limit ended the search before any plan was found."""


def printable(text: str) -> str:
    """``text`` with every character a terminal acts on written as its Python escape: control characters (ESC
    starts the sequences that recolour, move the cursor or retitle the window; CR overwrites the line), line and
    paragraph separators, and the lone surrogates an undecodable byte of a file name becomes. What a message
    echoes of a user's value or path is then one line of plain text on any terminal.

    >>> printable("a\\x1b[31mb\\rc"), printable("ok.json")
    ('a\\\\x1b[31mb\\\\rc', 'ok.json')
    """
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text)


def quoted(value: object, most: int = 60) -> str:
    """``repr(value)`` cut to ``most`` characters and ``printable``: a value quoted back in an error must not
    flood its one line (an unknown name of 100,000 characters made a 100 kB line), nor steer the terminal.

    >>> quoted("fp8"), quoted("x" * 100, most=10)
    ("'fp8'", "'xxxxxx...")
    """
    text = printable(repr(value))
    return text if len(text) <= most else text[: most - 3] + "..."


def spec_error_from(exc: Exception) -> SpecError:
    """Turn a pydantic ``ValidationError`` into the ``SpecError`` it stands for.

    Pydantic wraps a ``ValueError`` raised inside a validator; when that was one of ours, it is
    returned unchanged, otherwise the first error's location becomes the field.
    """
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return SpecError("input", str(exc))
    first = errors()[0]
    inner = (first.get("ctx") or {}).get("error")
    if isinstance(inner, SpecError):
        return inner
    field = ".".join(str(part) for part in first.get("loc", ())) or "input"
    return SpecError(field, first.get("msg", "invalid"))
