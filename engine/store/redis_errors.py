"""Which Redis failures are transient (the server's state) and which are the message's.

redis-py strips the error prefix when it maps it to a class: an ``OOM …`` reply
becomes ``OutOfMemoryError("command not allowed when used memory > 'maxmemory'.")``,
``READONLY`` a ``ReadOnlyError``, ``LOADING`` a ``BusyLoadingError``,
``MASTERDOWN`` a ``MasterDownError``, ``TRYAGAIN`` a ``TryAgainError``,
``CLUSTERDOWN`` a ``ClusterDownError`` (redis-py's ``EXCEPTION_CLASSES``).  Replies
it has no class for (``BUSY``, ``NOREPLICAS``, ``MISCONF``) keep their prefix.
So a check of the message text alone misses most of them: :func:`is_transient`
checks both the class and the prefix.

>>> import redis
>>> is_transient(redis.exceptions.OutOfMemoryError("command not allowed when used memory > 'maxmemory'."))
True
>>> is_transient(redis.ResponseError("BUSY Redis is busy running a script."))
True
>>> is_transient(redis.ResponseError("BUSYGROUP Consumer Group name already exists"))
False
>>> is_transient(redis.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"))
False
"""

from __future__ import annotations

import redis
import redis.exceptions as rex

#: error classes that say nothing about the command or message being written: the
#: server is out of memory, read-only, loading, failing over, or the process lacks a
#: permission an operator must grant; retry with backoff, never dead-letter for them
TRANSIENT_CLASSES: tuple[type[BaseException], ...] = (
    rex.ConnectionError, rex.TimeoutError, rex.BusyLoadingError, rex.ReadOnlyError,
    rex.OutOfMemoryError, rex.TryAgainError, rex.ClusterDownError, rex.MasterDownError,
    rex.MovedError, rex.AskError, rex.NoPermissionError, rex.AuthenticationError,
    OSError,
)

#: the same as reply prefixes (fakeredis, other clients, replies redis-py has no class for)
TRANSIENT_PREFIXES = ("OOM", "READONLY", "LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN",
                      "NOREPLICAS", "MISCONF", "MOVED", "ASK", "NOPERM", "NOAUTH")

#: the text of an OOM reply once redis-py has removed its prefix
_OOM_TEXT = "command not allowed when used memory"


def is_transient(exc: BaseException) -> bool:
    """True when ``exc`` is a Redis (or socket) failure worth retrying unchanged."""
    if isinstance(exc, TRANSIENT_CLASSES):
        return True
    if not isinstance(exc, redis.RedisError):
        return False
    message = str(exc).lstrip()
    first = message.split(None, 1)[0].upper() if message else ""
    return first in TRANSIENT_PREFIXES or _OOM_TEXT in message
