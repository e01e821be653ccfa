"""Which Redis failures are *transient* (retry with back-off) and which are *permanent*.

A transient failure says nothing about the message or the settlement being
handled: the server is out of memory, loading, busy running a script,
read-only (a replica after a fail-over), failing over (MASTERDOWN, TRYAGAIN,
CLUSTERDOWN), or the connection dropped.  Retrying the same work later
succeeds once Redis recovers, so it must never be dead-lettered or parked.

redis-py (≥ 5) turns several error prefixes into exception classes and drops
the prefix from the message (``OutOfMemoryError("command not allowed when used
memory > 'maxmemory'.")``), so a check on the message text alone misses them:
:func:`is_transient` looks at both the class and the text.

>>> import redis
>>> is_transient(redis.exceptions.OutOfMemoryError("command not allowed when used memory > 'maxmemory'."))
True
>>> is_transient(redis.ResponseError("BUSY Redis is busy running a script."))
True
>>> is_transient(redis.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"))
False
>>> is_transient(ValueError("not a Redis error"))
False
"""

from __future__ import annotations

#: error-reply prefixes of a server that cannot serve now (the text redis-py keeps for some)
TRANSIENT_PREFIXES = ("OOM", "READONLY", "LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN",
                      "NOREPLICAS", "MISCONF", "NOPERM")
#: what an OOM refusal says once redis-py dropped its prefix (also inside a script's error)
_TRANSIENT_TEXT = ("used memory > 'maxmemory'", "-oom ", "oom command not allowed", "busy redis is busy",
                   "loading redis is loading")


def _transient_classes() -> tuple[type[BaseException], ...]:
    try:
        import redis.exceptions as rx
    except ImportError:  # pragma: no cover - redis is a dependency
        return (OSError,)
    names = ("ConnectionError", "TimeoutError", "BusyLoadingError", "ReadOnlyError", "OutOfMemoryError",
             "MasterDownError", "TryAgainError", "ClusterDownError", "NoPermissionError")
    return (OSError, *(getattr(rx, n) for n in names if hasattr(rx, n)))


_CLASSES = _transient_classes()


def is_transient(exc: BaseException) -> bool:
    """True for a failure of Redis's state or of the connection (retry), False otherwise.

    NOPERM counts as transient: a missing ACL right is the deployment's fault, fixed by
    the operator, never the message's (parking every settlement for it would be wrong).
    """
    if isinstance(exc, _CLASSES):
        return True
    try:
        import redis
    except ImportError:  # pragma: no cover
        return False
    if not isinstance(exc, redis.RedisError):
        return False
    text = str(exc).lstrip()
    if text.upper().startswith(TRANSIENT_PREFIXES):
        return True
    low = text.lower()
    return any(t in low for t in _TRANSIENT_TEXT)


class Backoff:
    """Capped exponential back-off: ``next()`` gives 0.05, 0.1, 0.2, … up to ``cap`` seconds.

    >>> b = Backoff(first=0.1, cap=0.3)
    >>> [b.next() for _ in range(4)], b.reset(), b.next()
    ([0.1, 0.2, 0.3, 0.3], None, 0.1)
    """

    def __init__(self, first: float = 0.05, cap: float = 5.0):
        self.first = first
        self.cap = cap
        self._delay = first

    def next(self) -> float:
        d = self._delay
        self._delay = min(self._delay * 2, self.cap)
        return min(d, self.cap)

    def reset(self) -> None:
        self._delay = self.first
