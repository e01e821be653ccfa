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
>>> is_transient(redis.ResponseError("BUSYGROUP Consumer Group name already exists"))
False
>>> is_transient(redis.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"))
False
>>> is_transient(ValueError("not a Redis error"))
False
"""

from __future__ import annotations

from engine.store.redis_errors import TRANSIENT_PREFIXES, is_transient  # one classification (hardenA's)

__all__ = ["TRANSIENT_PREFIXES", "Backoff", "is_transient"]


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
