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
>>> is_transient(redis.ResponseError("UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)"))
True

A pipeline's error reply is annotated by redis-py (``Command # N (…) of pipeline caused error:``
before the reply); the reply decides:

>>> is_transient(redis.ResponseError("Command # 2 (WAIT 1 2000) of pipeline caused error: UNBLOCKED force unblock"))
True
>>> is_transient(redis.ResponseError("Command # 1 (XADD k * a) of pipeline caused error: WRONGTYPE Operation"))
False
>>> is_transient(redis.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"))
False

A Cluster client that cannot refresh its slots mid-fail-over is transient too; its
argument errors are not:

>>> is_transient(redis.exceptions.RedisClusterException("startup_nodes could not agree on a valid slots cache: x"))
True
>>> is_transient(redis.exceptions.RedisClusterException("Invalid args in command: ('GET',)"))
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
    rex.SlotNotCoveredError, rex.ClusterError,  # a Cluster mid-fail-over; retries run out
    OSError,
)

#: what redis-py's Cluster client raises (a ``RedisClusterException``, not a ``RedisError``)
#: when its view of the slots cannot be refreshed during a fail-over: no node answered, the
#: nodes disagree on an owner, a failed master's slots are not covered yet.  Its other
#: messages (bad arguments, a command Cluster mode lacks) are the caller's: permanent.
CLUSTER_REFRESH_TEXTS = ("cannot be connected", "not covered", "could not agree")

#: what a Redis call raises other than a bug: redis-py's errors and its Cluster client's own
#: (``except REDIS_FAILURES``, then :func:`is_transient` decides whether to retry)
REDIS_FAILURES: tuple[type[BaseException], ...] = (redis.RedisError, rex.RedisClusterException)


def is_outage(exc: BaseException) -> bool:
    """A failure of Redis itself, not of the one request: a ``RedisError`` (as before), or a
    Cluster client's error that :func:`is_transient` retries.  A Cluster client's permanent
    error (bad arguments) is the request's, like any other exception."""
    return isinstance(exc, redis.RedisError) or (isinstance(exc, rex.RedisClusterException) and is_transient(exc))

#: the same as reply prefixes (fakeredis, other clients, replies redis-py has no class for)
#: (``UNBLOCKED``: a blocking read, e.g. XREAD BLOCK, on a master that became a replica: a
#: fail-over, or a SIGSTOPped or cut-off master rejoining; read again, from the new master)
TRANSIENT_PREFIXES = ("OOM", "READONLY", "LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN",
                      "NOREPLICAS", "MISCONF", "MOVED", "ASK", "NOPERM", "NOAUTH", "UNBLOCKED")

#: how redis-py's pipelines annotate the error reply of their ``N``-th command
#: (``Command # N (WAIT 1 2000) of pipeline caused error: UNBLOCKED …``): the reply follows
PIPELINE_NOTE = " of pipeline caused error: "

#: the text of an OOM reply once redis-py has removed its prefix
_OOM_TEXT = "command not allowed when used memory"


def is_transient(exc: BaseException) -> bool:
    """True when ``exc`` is a Redis (or socket) failure worth retrying unchanged."""
    if isinstance(exc, TRANSIENT_CLASSES):
        return True
    if isinstance(exc, rex.RedisClusterException):
        if "cannot be connected" in str(exc) and exc.__cause__ is not None:
            return is_transient(exc.__cause__)  # nothing answered, or a node is no Cluster node at all
        return any(t in str(exc) for t in CLUSTER_REFRESH_TEXTS)
    if not isinstance(exc, redis.RedisError):
        return False
    message = str(exc).lstrip()
    if message.startswith("Command # ") and PIPELINE_NOTE in message:  # the server's reply follows
        message = message.split(PIPELINE_NOTE, 1)[1].lstrip()
    first = message.split(None, 1)[0].upper() if message else ""
    return first in TRANSIENT_PREFIXES or _OOM_TEXT in message
