"""One way to connect to the event store's Redis, single node or Cluster (issue 24 §1).

Every process (``serve``, the workers, the gateway, every CLI command) takes a
Redis URL (``--redis`` / ``SK_REDIS_URL``) and calls :func:`connect` (or
:func:`connect_async` in the gateway).  The kind of deployment is detected from
the node itself, with no flag: ``cluster_enabled:1`` in ``INFO cluster`` gives a
redis-py :class:`~redis.cluster.RedisCluster` (or
:class:`redis.asyncio.cluster.RedisCluster`), anything else a plain
:class:`redis.Redis`.  Any node of a Cluster will do: the client discovers the
others (``CLUSTER SLOTS``) and follows MOVED/ASK itself.

A node that is down, a URL that names no Redis (an HTTP server, a closed port)
or a malformed URL raise :class:`RedisUnavailable`: one readable line, which
the command line prints with exit code 2 (no traceback).

dramatiq's broker is *not* connected here: it stays a single Redis
(docs/OPERATIONS.md), whatever the store is.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING, Any, Union

import redis
import redis.exceptions as rex

if TYPE_CHECKING:
    import redis.asyncio as aioredis
    from redis.cluster import RedisCluster

    SyncClient = Union[redis.Redis, RedisCluster]
    AsyncClient = Union[aioredis.Redis, "aioredis.cluster.RedisCluster"]

__all__ = ["RedisUnavailable", "connect", "connect_async", "is_cluster", "node_client", "probe", "refresh_slots", "replica_acks_default"]

#: how long the first contact with a node may take before it counts as down
PROBE_TIMEOUT_S = 5.0

log = logging.getLogger("shuangkou.store")


class RedisUnavailable(Exception):
    """The URL names no reachable Redis (down, not Redis, malformed): one readable line."""


def probe(url: str, *, option: str = "--redis") -> bool:
    """True when ``url``'s node runs in cluster mode; raises :class:`RedisUnavailable` otherwise unreachable.

    One short-lived connection: PING, then ``INFO cluster``.  A node whose ACL
    forbids INFO is taken as a single node only if ``CLUSTER INFO`` fails too.
    """
    try:
        client = redis.Redis.from_url(url, socket_timeout=PROBE_TIMEOUT_S,
                                      socket_connect_timeout=PROBE_TIMEOUT_S)
    except ValueError as exc:
        raise RedisUnavailable(f"{option} {url!r} is not a Redis URL: {exc}") from None
    try:
        try:
            client.ping()
        except rex.AuthenticationError as exc:
            raise RedisUnavailable(f"cannot log in to {_safe(url)}: {exc}") from None
        except rex.TimeoutError as exc:
            if "reading" in str(exc):  # connected, but no reply: something listens that is not Redis
                raise RedisUnavailable(f"{_safe(url)} does not answer as a Redis server (no reply in "
                                       f"{PROBE_TIMEOUT_S:g} s)") from None
            raise RedisUnavailable(f"cannot reach {_safe(url)}: {_reason(exc)}") from None
        except (rex.ConnectionError, OSError) as exc:
            raise RedisUnavailable(f"cannot reach {_safe(url)}: {_reason(exc)}") from None
        except rex.RedisError as exc:  # a reply that is not Redis's (an HTTP server, …)
            if "SELECT is not allowed in cluster mode" in str(exc):
                raise RedisUnavailable(f"{_safe(url)} is a Redis Cluster node, and a Cluster has database 0 "
                                       f"only: end the URL with /0") from None
            raise RedisUnavailable(f"{_safe(url)} does not answer as a Redis server: {exc}") from None
        return _cluster_enabled(client)
    finally:
        client.close()


def _cluster_enabled(client: redis.Redis) -> bool:
    try:
        info = client.info("cluster")
        return bool(int(info.get("cluster_enabled", 0)))
    except rex.NoPermissionError:
        pass
    except rex.ResponseError:
        return False
    try:  # INFO not granted to this user: CLUSTER INFO answers only on a cluster node
        client.execute_command("CLUSTER INFO")
        return True
    except rex.RedisError:
        return False


def connect(url: str, *, option: str = "--redis", **kwargs: Any) -> SyncClient:
    """A client for the Redis (single node or Cluster) at ``url`` that answered; bytes replies.

    ``kwargs`` go to the client (``max_connections``, ``socket_timeout``, …).
    Raises :class:`RedisUnavailable` (one line) when nothing usable answers.
    """
    if probe(url, option=option):
        from redis.cluster import RedisCluster

        try:
            cluster = RedisCluster.from_url(url, **{"require_full_coverage": False, **kwargs})
        except (rex.RedisError, OSError) as exc:
            raise RedisUnavailable(f"cannot join the Redis Cluster at {_safe(url)}: {_reason(exc)}") from None
        local_stream_keys(cluster.commands_parser, asynchronous=False)
        return cluster
    return redis.Redis.from_url(url, **kwargs)


def connect_async(url: str, *, option: str = "--redis", **kwargs: Any) -> AsyncClient:
    """The asyncio counterpart of :func:`connect` (the gateway): the same detection, done once, synchronously.

    The returned client connects lazily, as ``redis.asyncio`` clients do; a
    Cluster client discovers the slots on its first command.
    """
    if probe(url, option=option):
        from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

        cluster = AsyncRedisCluster.from_url(url, **{"require_full_coverage": False, **kwargs})
        local_stream_keys(cluster.commands_parser, asynchronous=True)
        return cluster
    import redis.asyncio as aioredis

    return aioredis.Redis.from_url(url, **kwargs)


#: commands whose keys redis-py would ask the server for (``COMMAND GETKEYS``: "movable keys")
#: before each call, one round trip more and a hot default node: XREAD / XREADGROUP (their keys
#: follow STREAMS), and the scripts (their keys follow ``numkeys``), which a Cluster pipeline
#: resolves through the parser for every call
_STREAMS_COMMANDS = frozenset({"xread", "xreadgroup"})
_SCRIPT_COMMANDS = frozenset({"eval", "evalsha", "eval_ro", "evalsha_ro"})


def local_keys(args: tuple[Any, ...]) -> list[Any] | None:
    """The keys of an XREAD / XREADGROUP (the first half after ``STREAMS``) or a script call
    (the ``numkeys`` after the script), read off the arguments; None for any other command, or
    one whose arguments do not parse (the server's ``COMMAND GETKEYS`` then answers).

    The options are read as Redis reads them (``GROUP`` takes two arguments, ``COUNT`` and
    ``BLOCK`` one, ``NOACK`` none), so a group or consumer named ``streams`` is not taken
    for the keyword.

    >>> local_keys(("XREADGROUP", "GROUP", "g", "c", "COUNT", 10, "STREAMS", "a", "b", ">", ">"))
    ['a', 'b']
    >>> local_keys(("XREADGROUP", "GROUP", "streams", "STREAMS", "BLOCK", 5, "STREAMS", "k", ">"))
    ['k']
    >>> local_keys(("EVAL", "return 1", 2, "k1", "k2", "arg")), local_keys((b"EVALSHA", "f00", 0))
    (['k1', 'k2'], [])
    >>> local_keys(("GET", "k")) is None, local_keys(("XREAD", "COUNT", 1, "STREAMS", "a")) is None
    (True, True)
    """
    if not args:
        return None
    name = _word(args[0]).lower()
    if name in _SCRIPT_COMMANDS:
        if len(args) < 3:
            return None
        n = int(args[2])
        return list(args[3:3 + n])
    if name not in _STREAMS_COMMANDS:
        return None
    takes = {"COUNT": 1, "BLOCK": 1, "NOACK": 0}
    if name == "xreadgroup":
        takes["GROUP"] = 2
    at = 1
    while at < len(args):
        word = _word(args[at]).upper()
        if word == "STREAMS":
            rest = list(args[at + 1:])
            return rest[:len(rest) // 2] if rest and len(rest) % 2 == 0 else None
        if word not in takes:
            return None
        at += 1 + takes[word]
    return None


def _word(arg: Any) -> str:
    return arg.decode(errors="replace") if isinstance(arg, bytes) else str(arg)


def local_stream_keys(parser: Any, *, asynchronous: bool) -> None:
    """Teach a Cluster client's command parser the keys of XREAD/XREADGROUP and the script calls
    (:func:`local_keys`: no COMMAND GETKEYS round trip).  :func:`connect`, :func:`connect_async`
    and every other Cluster client the processes build (the gateway's ``GatedCluster``) do."""
    original = parser.get_keys

    if asynchronous:
        async def get_keys_async(*args: Any) -> Any:
            keys = local_keys(args)
            return keys if keys is not None else await original(*args)

        parser.get_keys = get_keys_async
        return

    def get_keys(redis_conn: Any, *args: Any) -> Any:
        keys = local_keys(args)
        return keys if keys is not None else original(redis_conn, *args)

    parser.get_keys = get_keys


def is_cluster(client: object) -> bool:
    """True for a redis-py Cluster client (sync or asyncio).  A plain ``redis.Redis`` is told
    apart at once: ``isinstance`` against the Cluster classes walks their protocol bases."""
    if type(client) is redis.Redis:
        return False
    from redis.cluster import RedisCluster

    if isinstance(client, RedisCluster):
        return True
    try:
        from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
    except ImportError:  # pragma: no cover
        return False
    return isinstance(client, AsyncRedisCluster)


#: what redis-py's Cluster client follows or retries on its own (a slot moved or moving, a node
#: away, the Cluster down mid-fail-over): a call sent straight to a node (:func:`node_client`)
#: that ends so goes again through the Cluster client, after :func:`refresh_slots`
CLUSTER_RETRIED: tuple[type[Exception], ...] = (rex.ConnectionError, rex.TimeoutError, rex.MovedError,
                                               rex.AskError, rex.TryAgainError, rex.ClusterDownError)


def node_client(client: Any, key: Any, cluster: bool | None = None) -> Any:
    """The plain ``redis.Redis`` of the node serving ``key``'s slot, by a Cluster client's own
    slot map (no round trip); ``client`` itself when it is no Cluster (``cluster``: what
    :func:`is_cluster` said of it, if asked already); None when the map has no node for the
    slot (the Cluster client's own path then finds one)."""
    if not (is_cluster(client) if cluster is None else cluster):
        return client
    try:
        node = client.get_node_from_key(key)
    except rex.SlotNotCoveredError:
        return None
    return client.get_redis_connection(node)


def refresh_slots(client: Any, exc: BaseException) -> bool:
    """After ``exc`` from a node a Cluster client's slot map pointed to: when it is transient
    (MOVED, the node away, CLUSTERDOWN: :func:`engine.store.redis_errors.is_transient`) ask the
    Cluster for its slots again, so the next lookup of a key's node finds it anew, and say True
    (the caller forgets any node it kept); ASK and TRYAGAIN (a slot moving: the map still holds)
    say True without asking.  False, and nothing asked, for a plain client or an error
    of the request.  A refresh that fails (the Cluster mid-fail-over) is left to the next."""
    from engine.store.redis_errors import is_transient

    if not is_cluster(client) or not is_transient(exc):
        return False
    if isinstance(exc, (rex.AskError, rex.TryAgainError)) and not isinstance(exc, rex.MovedError):
        return True  # a slot moving (MovedError is an AskError too): the map still holds
    try:
        client.nodes_manager.initialize()
    except Exception as err:  # the next failure asks again
        log.debug("could not refresh the Cluster's slots after %s: %s", type(exc).__name__, err)
    return True


def replica_acks_default() -> int:
    """``$SK_REPLICA_ACKS`` (0 when unset): the replicas a write waits for (issue 24 §4).
    Without it the processes take the topology's default (issue 35 §3):
    :func:`engine.store.replicas.resolve_replica_acks`."""
    raw = os.environ.get("SK_REPLICA_ACKS", "").strip()
    if not raw:
        return 0
    try:
        n = int(raw)
    except ValueError:
        raise RedisUnavailable(f"SK_REPLICA_ACKS must be a whole number, got {raw!r}") from None
    if n < 0:
        raise RedisUnavailable(f"SK_REPLICA_ACKS must be 0 or more, got {n}")
    return n


def _safe(url: str) -> str:
    """``url`` without its password."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    cred, _, host = rest.rpartition("@")
    user = cred.split(":", 1)[0]
    return f"{scheme}://{user + '@' if user else ''}{host}"


def _reason(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]
