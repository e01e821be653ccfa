"""A fast ``dataclasses.replace`` for the frozen, slotted state values.

``dataclasses.replace`` re-runs ``__init__`` with keyword processing for every
field; folding events calls it on every event, so replay speed (docs/ARCHITECTURE.md
"Event sourcing": "Replaying a stream = folding apply over it") is bound by it.  :func:`evolve`
builds the copy directly, field by field, with a function generated once per
class.  It performs no validation — neither does ``replace`` for these classes,
which have no ``__post_init__``.

>>> from dataclasses import dataclass
>>> @dataclass(frozen=True, slots=True)
... class P:
...     x: int
...     y: int = 0
>>> evolve(P(1, 2), y=5)
P(x=1, y=5)
>>> evolve(P(1), z=3)
Traceback (most recent call last):
...
TypeError: P has no field 'z'
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
_BUILDERS: dict[type, Callable[..., Any]] = {}


def _builder(cls: type) -> Callable[..., Any]:
    if dataclasses.fields(cls) and any(f.init is False for f in dataclasses.fields(cls)):
        raise TypeError(f"{cls.__name__}: evolve needs every field in __init__")
    if hasattr(cls, "__post_init__"):
        raise TypeError(f"{cls.__name__}: evolve would skip __post_init__")
    names = [f.name for f in dataclasses.fields(cls)]
    lines = ["def build(o, changes):", "    n = new(cls)"]
    lines += [f"    put(n, {name!r}, o.{name})" for name in names]
    lines += ["    for k, v in changes.items():",
              "        if k not in fields:",
              "            raise TypeError(f'{cls.__name__} has no field {k!r}')",
              "        put(n, k, v)",
              "    return n"]
    namespace: dict[str, Any] = {"new": object.__new__, "put": object.__setattr__, "cls": cls,
                                 "fields": frozenset(names)}
    exec("\n".join(lines), namespace)  # noqa: S102 - generated from the class's own field names
    return namespace["build"]  # type: ignore[no-any-return]


def evolve(obj: T, **changes: Any) -> T:
    """A copy of the frozen dataclass ``obj`` with ``changes`` (like ``dataclasses.replace``)."""
    cls = obj.__class__
    build = _BUILDERS.get(cls)
    if build is None:
        build = _BUILDERS[cls] = _builder(cls)
    return build(obj, changes)  # type: ignore[no-any-return]
