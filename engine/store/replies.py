"""The one way our Lua scripts answer: field/value pairs, never positional lists.

Every script of the engine (engine/store/*.lua, the ledger's, the timer dispatcher's) replies
``{name, value, name, value, ...}``; :func:`fields` reads such a reply by name.

>>> fields([b"status", b"ok", b"version", 7])
{'status': b'ok', 'version': 7}
>>> fields([b"status"])
Traceback (most recent call last):
...
redis.exceptions.ResponseError: not a field/value reply: [b'status']
"""

from __future__ import annotations

from typing import Any

import redis


def fields(reply: Any) -> dict[str, Any]:
    """A script's field/value reply as a dict, the names decoded, the values as Redis sent
    them; a reply of another shape is a ResponseError (a script of another version)."""
    if not isinstance(reply, (list, tuple)) or len(reply) % 2:
        raise redis.ResponseError(f"not a field/value reply: {reply!r}"[:200])
    return {(k.decode("utf-8") if isinstance(k, bytes) else str(k)): v for k, v in zip(reply[::2], reply[1::2])}
