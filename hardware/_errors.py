"""Turn pydantic's ``ValidationError`` into our ``SpecError``.

Pydantic catches any ``ValueError`` raised inside a validator (``SpecError`` is one) and wraps it
in a ``ValidationError``; callers of ``hardware`` should only ever have to catch ``SpecError``.
Private to ``hardware``: the only thing imported from our other packages is ``SpecError``.
"""

from __future__ import annotations

from pydantic import ValidationError

from shardplan.models.errors import SpecError


def as_spec_error(exc: ValidationError, field: str) -> SpecError:
    """The ``SpecError`` a validator raised, or a new one naming ``field`` and pydantic's location."""
    first = exc.errors()[0]
    inner = (first.get("ctx") or {}).get("error")
    if isinstance(inner, SpecError):
        return inner
    where = ".".join(str(part) for part in first.get("loc", ()))
    reason = first.get("msg", "invalid value")
    return SpecError(f"{field}.{where}" if where else field, reason)
