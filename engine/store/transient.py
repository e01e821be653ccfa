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

__all__ = ["READ_RETRY_CAP_S", "TRANSIENT_PREFIXES", "Backoff", "is_transient", "read_retry_delay"]


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


#: the longest a command reader waits between tries while Redis fails: a replica promoted in a
#: fail-over is read within this of taking the slots
READ_RETRY_CAP_S = 1.0


def read_retry_delay(exc: BaseException, backoff: Backoff) -> float:
    """How long a stream reader waits after ``exc`` before reading again: ``backoff.first`` after
    a redirection (MOVED or ASK: the slots were asked again, the next read finds the slot's
    node), without advancing the back-off; else ``backoff.next()``.

    >>> import redis
    >>> b = Backoff(first=0.05, cap=READ_RETRY_CAP_S)
    >>> [read_retry_delay(redis.ConnectionError("refused"), b) for _ in range(6)]
    [0.05, 0.1, 0.2, 0.4, 0.8, 1.0]
    >>> read_retry_delay(redis.exceptions.MovedError("5566 127.0.0.1:7001"), b), b.next()
    (0.05, 1.0)
    """
    import redis.exceptions as rex

    if isinstance(exc, rex.AskError):  # MovedError is an AskError
        return backoff.first
    return backoff.next()
