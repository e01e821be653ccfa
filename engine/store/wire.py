"""Round trips of packed commands on a plain Redis: the command path's read and append.

redis-py's ``execute_command`` and pipelines spend more of serve's CPU per round trip than
the socket itself does: each argument checked and packed again, a pipeline object, the
observability records, the response callbacks.  The command path sends the same few
commands for every player command (the inbox read, the append script), so it sends them
here: :func:`pack` is what redis-py sends (hiredis packs both, byte for byte), packed once
where the arguments repeat (the read of a stream set); :func:`round_trip` writes a round
trip's commands with one send on a connection of the client's own pool and reads one
reply per command with that connection's parser.

* The replies are the server's as the connection's parser reads them (no response
  callbacks): an XREADGROUP is ``{stream: [[id, [field, value, …]], …]}`` on RESP3
  (redis-py's default), ``[[stream, [[id, […]], …]], …]`` on RESP2, or None; an error
  reply is its :class:`redis.ResponseError` (``NoScriptError``, …) in its place, as a
  pipeline's ``execute(raise_on_error=False)`` gives it.
* A connection that fails is dropped (the pool's next user connects afresh) and the error
  raised, after the connection's own retry policy, as ``execute_command`` does.
* Only for a client :func:`usable` says it serves: a ``redis.Redis`` (not a Cluster, not
  fakeredis) with bytes replies and hiredis; the callers keep redis-py's path for any other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis
from redis.connection import BlockingConnectionPool, Connection, ConnectionPool, SSLConnection, \
    UnixDomainSocketConnection
from redis.exceptions import ResponseError

import hiredis

__all__ = ["pack", "round_trip", "usable"]

_POOLS = (ConnectionPool, BlockingConnectionPool)
_CONNECTIONS = (Connection, UnixDomainSocketConnection, SSLConnection)
#: client id -> (the client, whether it is usable): a client is asked once
_USABLE: dict[int, tuple[Any, bool]] = {}


def usable(client: Any) -> bool:
    """True when :func:`round_trip` may serve ``client``: a plain ``redis.Redis`` with a
    pool of redis-py's own connections, bytes replies, hiredis to pack and parse, and no
    client-side cache."""
    known = _USABLE.get(id(client))
    if known is not None and known[0] is client:
        return known[1]
    ok = _usable(client)
    if len(_USABLE) > 256:
        _USABLE.clear()
    _USABLE[id(client)] = (client, ok)
    return ok


def _usable(client: Any) -> bool:
    if type(client) is not redis.Redis or client.connection is not None:
        return False
    pool = client.connection_pool
    if type(pool) not in _POOLS or pool.connection_class not in _CONNECTIONS:
        return False
    kwargs = pool.connection_kwargs
    if kwargs.get("decode_responses"):
        return False
    if kwargs.get("cache") is not None or kwargs.get("cache_config") is not None:
        return False
    from redis.utils import HIREDIS_AVAILABLE

    return bool(HIREDIS_AVAILABLE)


def pack(*args: Any) -> bytes:
    """One command as it goes on the wire (what redis-py's hiredis packer sends).

    >>> pack("XACK", "s", "g", b"1-0")
    b'*4\\r\\n$4\\r\\nXACK\\r\\n$1\\r\\ns\\r\\n$1\\r\\ng\\r\\n$3\\r\\n1-0\\r\\n'
    """
    try:
        return hiredis.pack_command(args)
    except TypeError as exc:  # as redis-py reports a value it cannot send
        raise redis.DataError(str(exc)) from None


def round_trip(client: Any, commands: Sequence[bytes]) -> list[Any]:
    """Send the packed ``commands`` in one write on a connection of ``client``'s pool and
    read their replies, in order (an error reply in its place, as its ResponseError).
    A connection error or timeout drops the connection and is raised (after the
    connection's retry policy: none unless the client was given one)."""
    pool = client.connection_pool
    conn = pool.get_connection()
    try:
        return conn.retry.call_with_retry(lambda: _send_read(conn, commands),  # type: ignore[no-any-return]
                                          lambda _error: conn.disconnect())
    except BaseException:
        conn.disconnect()  # whatever is left on it unread must not reach the pool's next user
        raise
    finally:
        pool.release(conn)


def _send_read(conn: Any, commands: Sequence[bytes]) -> list[Any]:
    conn.send_packed_command([commands[0] if len(commands) == 1 else b"".join(commands)])
    replies: list[Any] = []
    for _ in commands:
        try:
            replies.append(conn.read_response())
        except ResponseError as exc:
            replies.append(exc)
    return replies
