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
from functools import cache
from typing import Any

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
