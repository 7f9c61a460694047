"""A frozen pydantic model whose hash is computed once per instance.

The cost model memoises on frozen specs (``ModelSpec``, ``Problem``, ``Layout``, ``Profile``, ...), and
pydantic's hash of a frozen model hashes every field again on every lookup: a ``Problem`` hashes its
model, cluster, profile and any expert-load table, tens of thousands of times per solve. ``HashOnce``
keeps pydantic's hash, to the same value (the hash of the tuple of the field values, so sets and dicts
of models keep their order) and the same equality, and remembers it for the instance's life.

The remembered hash lives outside the instance, keyed by ``id`` and dropped when the instance dies (a
weak reference's callback): stored on the instance it would be carried by ``model_copy`` (which copies
``__dict__`` and then updates fields) and by pickling, into an object whose fields, or whose process's
string hashes, differ. Pydantic forbids assigning a field of a frozen model, so a remembered hash
cannot go stale while its instance lives.
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Callable
from functools import cache, wraps
from typing import Any, TypeVar

from pydantic import BaseModel

# _HASHES[id(instance)]: (its hash, the weak reference whose callback removes this entry when it dies).
_HASHES: dict[int, tuple[int, weakref.ref[Any]]] = {}


@cache
def _field_values(cls: type[BaseModel]) -> Callable[[dict[str, Any]], Any]:
    """What pydantic's generated hash hashes: the field values in declaration order (the value itself
    for a model of one field, ``operator.itemgetter``'s way)."""
    fields = tuple(cls.__pydantic_fields__)
    return operator.itemgetter(*fields) if fields else (lambda _: 0)


def _forget(key: int) -> Callable[[weakref.ref[Any]], None]:
    """The callback that drops instance ``key``'s entry as the instance dies (before its id can be reused)."""

    def drop(_ref: weakref.ref[Any]) -> None:
        _HASHES.pop(key, None)

    return drop


class HashOnce(BaseModel):
    """Mix into a frozen model (before its fields are declared) to hash it once per instance."""

    def __hash__(self) -> int:
        key = id(self)
        known = _HASHES.get(key)
        if known is not None:
            return known[0]
        value = hash(_field_values(type(self))(self.__dict__))
        _HASHES[key] = (value, weakref.ref(self, _forget(key)))
        return value


Result = TypeVar("Result")
_SCALARS = (int, float, str, bool, type(None))


def by_identity(kept: int) -> Callable[[Callable[..., Result]], Callable[..., Result]]:
    """Memoise a function of immutable arguments on their identities (scalars on their values): for arguments
    shared between calls (one stage's placement across an enumeration's replica counts, one row of loads across a
    stage's layers) whose hashing would cost a good part of the call. Up to ``kept`` results, then all are
    dropped; the arguments are kept with their result, so their ids cannot be reused while it is here. Equal but
    distinct arguments miss, which costs only the call."""

    def memoise(function: Callable[..., Result]) -> Callable[..., Result]:
        known: dict[tuple[Any, ...], tuple[tuple[Any, ...], Result]] = {}

        @wraps(function)
        def call(*args: Any) -> Result:
            key = tuple((type(a), a) if isinstance(a, _SCALARS) else id(a) for a in args)
            hit = known.get(key)
            if hit is not None and all(a is b or isinstance(a, _SCALARS) for a, b in zip(hit[0], args, strict=True)):
                return hit[1]
            result = function(*args)
            if len(known) >= kept:
                known.clear()
            known[key] = (args, result)
            return result

        return call

    return memoise
