"""``--replica-acks N``: a write that accepts a command, settles a match or moves a balance
is on N replicas before anyone is told (issue 24 §4; docs/OPERATIONS.md "Failover").

Redis's ``WAIT N timeout`` waits for the writes *of the connection that sends it*, and a
pooled client writes on whichever connection it takes.  So :meth:`ReplicaAcks.confirm`
sends, on one connection to the node holding the key, a one-key write in the key's own
hash tag (``INCR sk:{tag}:acks``) followed by ``WAIT``: replication is one ordered stream
per master, so a replica that acknowledged that write holds every write the master made
before it -- the append, the settlement, the ledger entry made on other connections.

Fewer than N acknowledgements within the timeout raise a ``NOREPLICAS`` reply error, a
transient error (engine/store/redis_errors.py): the command is not acknowledged, is
redelivered, and its command id makes the re-run a duplicate whose updates are published
then.  At N = 0 nothing is sent.

The default (issue 35 §3, :func:`resolve_replica_acks`): an explicit ``--replica-acks`` or
``SK_REPLICA_ACKS`` wins; otherwise 1 on a Cluster whose every master has a replica
(``CLUSTER SHARDS`` at start), 0 on a single node or a Cluster with a master alone.

Each wait is one node's: a master whose replicas do not answer holds only the writes
made on it (the pipelined appends wait per node, engine/store/redis_store.py).
``on_wait(result, seconds)`` (``result`` ``"ok"`` or ``"noreplicas"``) is called after
each WAIT: serve counts them (``shuangkou_replica_waits_total``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

import redis.exceptions as rex

from engine.store import keys
from engine.store.connect import is_cluster

DEFAULT_TIMEOUT_MS = 2_000

_log = logging.getLogger(__name__)

#: ``on_wait(result, seconds)``: what a waiter reports after each WAIT
WaitHook = Callable[[str, float], None]


def tag_of(key: str) -> str:
    """The hash tag part of ``key`` (``{b3}``), or the key itself when it has none.

    >>> tag_of("sk:{b3}:m:x:events"), tag_of("sk:{ledger}:settled"), tag_of("plain")
    ('{b3}', '{ledger}', 'plain')
    """
    start = key.find("{")
    if start >= 0:
        end = key.find("}", start + 1)
        if end > start + 1:
            return key[start:end + 1]
    return key


def marker_key(key: str) -> str:
    """The counter :meth:`ReplicaAcks.confirm` writes beside ``key`` (same slot)."""
    return keys.acks_marker_key(tag_of(key))


class _Waiter:
    """What both waiters share: the count, the timeout, one key per hash tag, the verdict."""

    def __init__(self, client: Any, n: int, timeout_ms: int = DEFAULT_TIMEOUT_MS):
        if n < 0:
            raise ValueError(f"replica acks must be 0 or more, got {n}")
        self.client = client
        self.n = n
        self.timeout_ms = timeout_ms
        self.waits = 0  # WAIT calls sent (bench/cluster.py, tests)
        self.on_wait: WaitHook | None = None

    def report(self, result: str, seconds: float) -> None:
        """Tell :attr:`on_wait` about one WAIT (its failures are logged, never raised)."""
        if self.on_wait is not None:
            try:
                self.on_wait(result, seconds)
            except Exception:
                _log.exception("the replica-wait hook failed")

    def _one_per_tag(self, keys: Iterable[str | bytes]) -> list[str]:
        """A key of each distinct hash tag of ``keys`` (none at all when n is 0)."""
        if self.n <= 0:
            return []
        by_tag: dict[str, str] = {}
        for k in keys:
            key = k.decode() if isinstance(k, bytes) else k
            by_tag.setdefault(tag_of(key), key)
        return list(by_tag.values())

    def _verdict(self, key: str, got: Any, started: float | None = None) -> None:
        self.waits += 1
        error = self.shortfall(key, got)
        self.report("ok" if error is None else "noreplicas",
                    0.0 if started is None else time.perf_counter() - started)
        if error is not None:
            raise error

    def shortfall(self, key: str, got: Any) -> rex.ResponseError | None:
        """The NOREPLICAS error of a WAIT on ``key``'s node that answered ``got`` (None: enough)."""
        if isinstance(got, BaseException):
            return got if isinstance(got, rex.ResponseError) else rex.ResponseError(f"NOREPLICAS {got}")
        if int(got) < self.n:
            return rex.ResponseError(f"NOREPLICAS {int(got)} of {self.n} replica(s) acknowledged "
                                     f"{tag_of(key)} within {self.timeout_ms} ms")
        return None


class ReplicaAcks(_Waiter):
    """Waits until ``n`` replicas of the nodes holding some keys have every write made so far."""

    def confirm(self, keys: Iterable[str | bytes]) -> None:
        """One INCR + WAIT per distinct hash tag of ``keys``; NOREPLICAS when too few acknowledged."""
        for key in self._one_per_tag(keys):
            self._confirm_one(key)

    def _confirm_one(self, key: str) -> None:
        node = self.client
        if is_cluster(self.client):
            node = self.client.get_redis_connection(self.client.get_node_from_key(key))
        pipe = node.pipeline(transaction=False)
        pipe.execute_command("INCR", marker_key(key))  # INCR, not redis-py's INCRBY: the ACL users have +incr
        pipe.execute_command("WAIT", self.n, self.timeout_ms)
        started = time.perf_counter()
        try:
            _, got = pipe.execute()
        except rex.ResponseError as exc:
            if isinstance(exc, rex.MovedError) and is_cluster(self.client):
                self.client.nodes_manager.initialize()  # the slot moved (a fail-over): learn where
            raise
        self._verdict(key, got, started)


class AsyncReplicaAcks(_Waiter):
    """The asyncio counterpart of :class:`ReplicaAcks` (the gateway's lobby, ``SK_REPLICA_ACKS``).

    The INCR and the WAIT go out as one pipeline on one connection of the node holding
    the key: a plain client's pipeline takes one connection; on a Cluster they are sent
    to the key's node directly (redis-py's cluster pipeline would route the keyless WAIT
    elsewhere), outside the gateway's bound on commands in flight (gateway/gated.py): a
    WAIT on a master whose replicas do not answer holds none of the turns the commands
    for the other masters need (issue 35 §3).

    Waits share rounds, one per hash tag at a time: the callers that arrive while a
    round is out are all answered by the next one (its INCR comes after each of their
    writes, and a replica that acknowledged it holds them all), so a tag never has more
    than one WAIT out and a slow one delays only the callers of that tag.
    """

    def __init__(self, client: Any, n: int, timeout_ms: int = DEFAULT_TIMEOUT_MS):
        super().__init__(client, n, timeout_ms)
        self._queued: dict[str, list[asyncio.Future[None]]] = {}
        self._running: set[str] = set()

    async def confirm(self, keys: Iterable[str | bytes]) -> None:
        """One INCR + WAIT per distinct hash tag of ``keys`` (shared with concurrent callers);
        NOREPLICAS when too few acknowledged."""
        for key in self._one_per_tag(keys):
            await self._in_round(key)

    async def _in_round(self, key: str) -> None:
        tag = tag_of(key)
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        self._queued.setdefault(tag, []).append(fut)
        if tag not in self._running:
            self._running.add(tag)
            loop.create_task(self._rounds(tag, key))
        await fut

    async def _rounds(self, tag: str, key: str) -> None:
        """Rounds of INCR + WAIT on ``tag`` while callers wait; each answers those queued before it."""
        try:
            while self._queued.get(tag):
                batch = self._queued.pop(tag)
                started = time.perf_counter()
                error: BaseException | None
                try:
                    got = await (self._cluster_one(key) if is_cluster(self.client) else self._single_one(key))
                    self.waits += 1
                    error = self.shortfall(key, got)
                    self.report("ok" if error is None else "noreplicas", time.perf_counter() - started)
                except Exception as exc:
                    error = exc
                for f in batch:
                    if f.done():  # its caller went away
                        continue
                    if error is None:
                        f.set_result(None)
                    else:
                        f.set_exception(_copy(error))
        finally:
            self._running.discard(tag)

    async def _single_one(self, key: str) -> int:
        pipe = self.client.pipeline(transaction=False)
        pipe.execute_command("INCR", marker_key(key))  # INCR, not redis-py's INCRBY: the ACL users have +incr
        pipe.execute_command("WAIT", self.n, self.timeout_ms)
        _, got = await pipe.execute()
        return int(got)

    async def _cluster_one(self, key: str) -> int:
        from redis.asyncio.cluster import PipelineCommand

        client = self.client
        await client.initialize()  # a no-op once the slots are known
        node = client.get_node_from_key(key)
        commands = [PipelineCommand(0, "INCR", marker_key(key)),
                    PipelineCommand(1, "WAIT", self.n, self.timeout_ms)]
        # not under gateway/gated.py's bound: one round per tag at a time takes the node's spare connection
        await node.execute_pipeline(commands)
        for c in commands:
            if isinstance(c.result, BaseException):
                if isinstance(c.result, rex.MovedError):
                    await client.nodes_manager.initialize()  # the slot moved (a fail-over): learn where
                raise c.result
        got: Any = commands[1].result
        return int(got)


def _copy(error: BaseException) -> BaseException:
    """A fresh exception like ``error`` for each caller (one object raised in several tasks
    would collect all their tracebacks)."""
    try:
        return type(error)(*error.args)
    except Exception:
        return error


# -- the default (issue 35 §3) -----------------------------------------------------------

def replicas_per_master(client: Any) -> int | None:
    """The fewest replicas any master holding slots has (``CLUSTER SHARDS``; a replica
    counts while its health is ``online`` or ``loading`` (syncing), not ``fail``); None for a single node, or when the node
    refuses the command (an ACL, a Redis before 7.0)."""
    if not is_cluster(client):
        return None
    try:
        node = client.get_redis_connection(client.get_default_node())
        shards = node.execute_command("CLUSTER SHARDS")
    except (rex.RedisError, rex.RedisClusterException, OSError) as exc:
        _log.warning("CLUSTER SHARDS refused (%s): the replicas per master are unknown", exc)
        return None
    fewest: int | None = None
    for shard in shards or ():
        info = _as_dict(shard)
        if not info.get("slots"):
            continue  # a master without slots holds nothing
        replicas = 0
        for raw in info.get("nodes") or ():
            n = _as_dict(raw)
            if _text(n.get("role")) == "replica" and _text(n.get("health")) in ("online", "loading"):
                replicas += 1
        fewest = replicas if fewest is None else min(fewest, replicas)
    return fewest


def resolve_replica_acks(client: Any, explicit: int | None = None, env: str | None = None) -> tuple[int, str]:
    """``(n, why)``: the replica acks in force and where they come from.

    ``explicit`` (a flag) wins, then ``env`` (``$SK_REPLICA_ACKS``, a whole number >= 0;
    ValueError otherwise); else 1 when every master of the Cluster has a replica,
    0 on a single node or when a master has none.

    >>> resolve_replica_acks(None, 2)
    (2, '--replica-acks')
    >>> resolve_replica_acks(None, None, "0")
    (0, 'SK_REPLICA_ACKS')
    >>> resolve_replica_acks(None)
    (0, 'a single node: no replica to wait for')
    """
    if explicit is not None:
        if explicit < 0:
            raise ValueError(f"--replica-acks must be 0 or more, got {explicit}")
        return explicit, "--replica-acks"
    raw = (env or "").strip()
    if raw:
        try:
            n = int(raw)
        except ValueError:
            raise ValueError(f"SK_REPLICA_ACKS must be a whole number, got {raw!r}") from None
        if n < 0:
            raise ValueError(f"SK_REPLICA_ACKS must be 0 or more, got {n}")
        return n, "SK_REPLICA_ACKS"
    if client is None or not is_cluster(client):
        return 0, "a single node: no replica to wait for"
    fewest = replicas_per_master(client)
    if fewest is None:
        return 0, "the Cluster's replicas are unknown (CLUSTER SHARDS refused)"
    if fewest < 1:
        return 0, "a master of the Cluster has no replica"
    return 1, f"every master of the Cluster has a replica (at least {fewest})"


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v or "")


def _as_dict(v: Any) -> dict[str, Any]:
    """A CLUSTER SHARDS entry as a dict with str keys (RESP3 maps or RESP2 flat lists)."""
    if isinstance(v, dict):
        return {_text(k): x for k, x in v.items()}
    items = list(v or ())
    return {_text(items[i]): items[i + 1] for i in range(0, len(items) - 1, 2)}
