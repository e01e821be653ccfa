"""Round trips of packed commands on a plain Redis: the command path's read and append.

redis-py's ``execute_command`` and pipelines spend more of serve's CPU per round trip than
the socket itself does: each argument checked and packed again, a pipeline object, the
observability records, the response callbacks.  The command path sends the same few
commands for every player command (the inbox read, the append script), so it sends them
here: :func:`pack` is what redis-py sends (hiredis packs both, byte for byte), packed once
where the arguments repeat (the read of a stream set); :func:`round_trip` writes a round
trip's commands with one send on a connection of the client's own pool (the calling
thread's, kept between its round trips) and reads one reply per command with that
connection's parser.

* The replies are the server's as the connection's parser reads them (no response
  callbacks): an XREADGROUP is ``{stream: [[id, [field, value, …]], …]}`` on RESP3
  (redis-py's default), ``[[stream, [[id, […]], …]], …]`` on RESP2, or None; an error
  reply is its :class:`redis.ResponseError` (``NoScriptError``, …) in its place, as a
  pipeline's ``execute(raise_on_error=False)`` gives it.
* A connection that fails is dropped and given back to the pool (its next user connects
  afresh) and the error raised, after the connection's own retry policy, as
  ``execute_command`` does.
* Only for a client :func:`usable` says it serves: a ``redis.Redis`` (not a Cluster, not
  fakeredis) with bytes replies and hiredis; the callers keep redis-py's path for any other.
* :func:`round_trips` may take another layer's commands (a :class:`Rider`: serve's next
  inbox read on a Cluster) after one node's own in the same write and leave their replies
  on the connection (:class:`InFlight`) -- a blocking read waits there while the thread
  goes on with other round trips on another connection of the pool.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Sequence
from typing import Any

import redis
from redis.connection import Connection, ConnectionPool, SSLConnection, UnixDomainSocketConnection
from redis.exceptions import ResponseError

import hiredis

__all__ = ["InFlight", "Rider", "by_node", "checked", "pack", "round_trip", "round_trips", "same_server", "usable"]

_CONNECTIONS = (Connection, UnixDomainSocketConnection, SSLConnection)
#: plain clients asked already, and the answer (a client is asked once)
_USABLE: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


def usable(client: Any) -> bool:
    """True when :func:`round_trip` may serve ``client``: a plain ``redis.Redis`` with
    redis-py's own pool (not the blocking one) and connections, bytes replies, hiredis to
    pack and parse, and no client-side cache."""
    if type(client) is not redis.Redis:
        return False
    ok = _USABLE.get(client)
    if ok is None:
        ok = _USABLE[client] = _usable(client)
    return ok


def _usable(client: Any) -> bool:
    if type(client) is not redis.Redis or client.connection is not None:
        return False
    pool = client.connection_pool
    if type(pool) is not ConnectionPool or pool.connection_class not in _CONNECTIONS:
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


class _Lease:
    """A connection a thread keeps for its round trips; back to its pool when the thread
    ends (its thread-local state goes) or the round trip fails."""

    __slots__ = ("pool", "conn", "pid", "__weakref__")

    def __init__(self, pool: Any) -> None:
        self.pool = weakref.ref(pool)  # not kept alive by its thread's leases
        self.conn = pool.get_connection()
        self.pid = os.getpid()

    def give_back(self) -> None:
        pool, self.pid = self.pool(), -1
        if pool is not None:
            pool.release(self.conn)

    def __del__(self) -> None:
        try:
            if self.pid == os.getpid():
                self.give_back()
        except Exception:  # pragma: no cover - a pool (or the interpreter) being torn down
            pass


class _Leases(threading.local):
    """Each thread's connection per pool."""

    def __init__(self) -> None:
        self.of: weakref.WeakKeyDictionary[Any, _Lease] = weakref.WeakKeyDictionary()


_LEASES = _Leases()

#: what ends one client's round trip in :func:`round_trips` (not the others')
_FAILURES = (redis.ConnectionError, redis.TimeoutError, OSError)


def _lease(client: Any) -> tuple[Any, _Lease]:
    """The calling thread's connection of ``client``'s pool, fresh if the server closed it
    or left data on it."""
    pool = client.connection_pool
    leases = _LEASES.of
    lease = leases.get(pool)
    if lease is None or lease.pid != os.getpid():
        lease = leases[pool] = _Lease(pool)
    conn = lease.conn
    try:
        stale = conn.can_read()  # data left on it ...
    except (redis.ConnectionError, redis.TimeoutError, OSError):  # ... or closed by the server
        stale = True
    if stale:
        conn.disconnect()  # connects afresh
    return leases, lease


def _drop(leases: Any, lease: _Lease) -> None:
    """A failed round trip: whatever is left on the connection unread must not reach the
    pool's next user."""
    lease.conn.disconnect()
    pool = lease.pool()
    if pool is not None and leases.get(pool) is lease:
        del leases[pool]
    lease.give_back()


def round_trip(client: Any, commands: Sequence[bytes]) -> list[Any]:
    """Send the packed ``commands`` in one write and read their replies, in order (an error
    reply in its place, as its ResponseError).

    The calling thread keeps one connection of ``client``'s pool for its round trips (taken
    from the pool on its first, given back when the thread ends): the pool's bookkeeping
    per call is spared, not its check that nothing is left to read on the connection (data
    left, or closed by the server: it connects afresh).  A connection error or timeout
    drops the connection, gives it back to the pool (after the connection's retry policy:
    none unless the client was given one) and is raised."""
    leases, lease = _lease(client)
    conn = lease.conn
    try:
        return conn.retry.call_with_retry(lambda: _send_read(conn, commands),  # type: ignore[no-any-return]
                                          lambda _error: conn.disconnect())
    except BaseException:
        _drop(leases, lease)
        raise


def checked(client: Any, commands: Sequence[bytes]) -> list[Any]:
    """:func:`round_trip`, its first error reply raised: for a round trip whose commands stand
    or fall together."""
    replies = round_trip(client, commands)
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


class InFlight:
    """The replies of a :class:`Rider`'s commands, still on their connection: nobody else's until
    :meth:`finish` reads them or :meth:`abandon` (or the garbage collector) drops it."""

    __slots__ = ("_lease", "_n")

    def __init__(self, lease: _Lease, n: int) -> None:
        self._lease: _Lease | None = lease
        self._n = n

    def finish(self) -> list[Any]:
        """The riders' replies, in order (an error reply in its place), waited for as long as
        they take (a blocking read's, its BLOCK); the connection then goes back to the calling
        thread when it holds none of that pool, else to the pool.  A failure drops the
        connection and raises; a second call raises RuntimeError."""
        lease, self._lease = self._lease, None
        if lease is None:
            raise RuntimeError("the riders' replies were read or dropped already")
        try:
            replies = _read(lease.conn, self._n)
        except BaseException:
            lease.conn.disconnect()
            lease.give_back()
            raise
        pool = lease.pool()
        if pool is not None and lease.pid == os.getpid() and _LEASES.of.get(pool) is None:
            _LEASES.of[pool] = lease  # the thread's connection again: no trip through the pool
        else:
            lease.give_back()
        return replies

    def abandon(self) -> None:
        """Drop the connection unread (its replies must reach no one) and give it back."""
        lease, self._lease = self._lease, None
        if lease is not None:
            lease.conn.disconnect()
            lease.give_back()

    def __del__(self) -> None:
        try:
            self.abandon()
        except Exception:  # pragma: no cover - a pool (or the interpreter) being torn down
            pass


class Rider:
    """Commands that ride on the next round trip another layer makes to ``server`` (a plain
    client of that Redis): the round trip that :meth:`boards` takes them after its own
    commands (:func:`round_trips`) and sets :attr:`in_flight`, where their replies wait.
    :attr:`sent` says they may have reached the server (set before the write: a round trip
    that fails after it may have run them)."""

    __slots__ = ("server", "commands", "in_flight", "sent")

    def __init__(self, server: Any, commands: Sequence[bytes]) -> None:
        self.server = server
        self.commands = list(commands)
        self.in_flight: InFlight | None = None
        self.sent = False

    def boards(self, client: Any) -> bool:
        """Whether a round trip on ``client`` takes the riders: none took them yet, ``client``
        reaches the same server, and :func:`round_trip` serves it."""
        return not self.sent and same_server(client, self.server) and usable(client)


def same_server(a: Any, b: Any) -> bool:
    """Whether two plain clients reach one server (the same client, or pools that connect
    alike: host, port, socket path, database, user)."""
    if a is b:
        return True
    pa, pb = getattr(a, "connection_pool", None), getattr(b, "connection_pool", None)
    if pa is None or pb is None:
        return False
    if pa is pb:
        return True
    ka, kb = pa.connection_kwargs, pb.connection_kwargs
    return pa.connection_class is pb.connection_class and all(
        ka.get(k) == kb.get(k) for k in ("host", "port", "path", "db", "username"))


def round_trips(calls: Sequence[tuple[Any, Sequence[bytes]]], rider: Rider | None = None) -> list[list[Any] | Exception]:
    """:func:`round_trip` to several clients at once (a Cluster's nodes): every client's
    commands written first, then each one's replies read, so the servers work side by side.
    ``rider``: taken by the first client it :meth:`~Rider.boards`, after that client's
    commands; their replies are left on the connection, which is the rider's now
    (:attr:`Rider.in_flight`): a blocking read waits there while the calling thread's next
    round trips take another connection of the pool.

    Per client: its replies, or the connection error or timeout that ended its round trip
    (its connection dropped, as :func:`round_trip` does; the others go on).  No retry (a
    Cluster's node clients have none: the Cluster client decides).  Each client at most once
    (ValueError otherwise: its round trips would share one connection)."""
    if len({id(client.connection_pool) for client, _c in calls}) < len(calls):
        raise ValueError("round_trips: a client (connection pool) named twice")
    sent: list[tuple[Any, _Lease] | Exception] = []
    out: list[list[Any] | Exception] = []
    riding: _Lease | None = None
    try:
        for client, commands in calls:
            try:
                leased = _lease(client)
            except _FAILURES as exc:  # no connection to be had
                sent.append(exc)
                continue
            sent.append(leased)
            write = list(commands)
            if rider is not None and riding is None and rider.boards(client):
                riding = leased[1]
                del leased[0][client.connection_pool]  # the rider's connection now
                rider.sent = True
                write += rider.commands
            try:
                leased[1].conn.send_packed_command([write[0] if len(write) == 1 else b"".join(write)])
            except _FAILURES as exc:
                _drop(*leased)
                sent[-1] = exc
        for (_client, commands), at in zip(calls, sent):
            if isinstance(at, Exception):
                out.append(at)
                continue
            try:
                out.append(_read(at[1].conn, len(commands)))
            except _FAILURES as exc:
                _drop(*at)
                out.append(exc)
                continue
            if at[1] is riding:
                assert rider is not None
                rider.in_flight = InFlight(riding, len(rider.commands))
    except BaseException:  # anything else: no connection keeps replies left unread
        for left in sent[len(out):]:
            if not isinstance(left, Exception):
                _drop(*left)
        raise
    return out


def _send_read(conn: Any, commands: Sequence[bytes]) -> list[Any]:
    conn.send_packed_command([commands[0] if len(commands) == 1 else b"".join(commands)])
    return _read(conn, len(commands))


def _read(conn: Any, n: int) -> list[Any]:
    replies: list[Any] = []
    for _ in range(n):
        try:
            replies.append(conn.read_response())
        except ResponseError as exc:
            replies.append(exc)
    return replies


def by_node(client: Any, commands: Sequence[tuple[Any, ...]], routes: Sequence[Any],
            rider: Rider | None = None) -> list[Any] | None:
    """``commands`` packed, one round trip per node holding some of them (``routes[i]``: the key
    that places ``commands[i]``; a plain client is one node), every node's commands written
    before any node's replies are read; the replies in order, as :func:`round_trip` gives them.
    None, and nothing sent, when a node's client is not :func:`usable`: the caller keeps
    redis-py's path.

    * A NOSCRIPT reply to an EVALSHA is left in its place: the caller may send that script
      again (by EVAL), after the round's later commands had run; a caller to whom that order
      matters sends EVAL (engine.service.publish.Publisher.write).
    * On a Cluster, the commands of a node that answered MOVED, ASK or TRYAGAIN or whose round
      trip failed (:data:`~engine.store.connect.CLUSTER_RETRIED`): the slots are asked again
      (:func:`~engine.store.connect.refresh_slots`) and those commands go through the Cluster
      client's pipeline, which follows redirections and retries; what that pipeline raises is
      raised.
    * On a plain client a connection failure raises, as :func:`round_trip`.
    * ``rider`` (a Cluster's): taken by the round trip of the node it names, after that
      node's commands (:func:`round_trips`)."""
    from engine.store.connect import CLUSTER_RETRIED, is_cluster, node_client, refresh_slots

    if not commands:
        return []
    cluster = is_cluster(client)
    nodes: dict[Any, Any] = {}
    groups: dict[int, tuple[Any, list[int]]] = {}
    for i, key in enumerate(routes):
        node = nodes.get(key)
        if node is None:
            node = nodes[key] = node_client(client, key, cluster)
            if node is None or not usable(node):
                return None
        group = groups.get(id(node))
        if group is None:
            group = groups[id(node)] = (node, [])
        group[1].append(i)
    packed = [pack(*c) for c in commands]
    calls = [(node, [packed[i] for i in idxs]) for node, idxs in groups.values()]
    results: list[list[Any] | Exception] = (round_trips(calls, rider) if cluster
                                             else [round_trip(client, calls[0][1])])
    out: list[Any] = [None] * len(commands)
    again: set[int] = set()  # on a Cluster: through its own pipeline
    failure: Exception | None = None
    for (node, idxs), result in zip(groups.values(), results):
        if isinstance(result, Exception):  # that node's round trip failed (a Cluster's: round_trips)
            if not isinstance(result, CLUSTER_RETRIED):
                raise result
            failure = failure or result
            again.update(idxs)
            continue
        for i, reply in zip(idxs, result):
            out[i] = reply
        if cluster:
            for i in idxs:
                if isinstance(out[i], CLUSTER_RETRIED):
                    failure = failure or out[i]
                    again.add(i)
    if again:
        assert failure is not None
        refresh_slots(client, failure)
        pipe = client.pipeline(transaction=False)
        order = sorted(again)
        for i in order:
            pipe.execute_command(*commands[i])
        for i, reply in zip(order, pipe.execute(raise_on_error=False)):
            out[i] = reply
    return out
