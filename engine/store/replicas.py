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
then.  At N = 0 (the default) nothing is sent.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import redis.exceptions as rex

from engine.store.connect import is_cluster

DEFAULT_TIMEOUT_MS = 2_000


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
    return f"sk:{tag_of(key)}:acks"


class _Waiter:
    """What both waiters share: the count, the timeout, one key per hash tag, the verdict."""

    def __init__(self, client: Any, n: int, timeout_ms: int = DEFAULT_TIMEOUT_MS):
        if n < 0:
            raise ValueError(f"replica acks must be 0 or more, got {n}")
        self.client = client
        self.n = n
        self.timeout_ms = timeout_ms
        self.waits = 0  # WAIT calls sent (bench/cluster.py, tests)

    def _one_per_tag(self, keys: Iterable[str | bytes]) -> list[str]:
        """A key of each distinct hash tag of ``keys`` (none at all when n is 0)."""
        if self.n <= 0:
            return []
        by_tag: dict[str, str] = {}
        for k in keys:
            key = k.decode() if isinstance(k, bytes) else k
            by_tag.setdefault(tag_of(key), key)
        return list(by_tag.values())

    def _verdict(self, key: str, got: Any) -> None:
        self.waits += 1
        if int(got) < self.n:
            raise rex.ResponseError(f"NOREPLICAS {int(got)} of {self.n} replica(s) acknowledged "
                                    f"{tag_of(key)} within {self.timeout_ms} ms")


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
        try:
            _, got = pipe.execute()
        except rex.ResponseError as exc:
            if str(exc).startswith("MOVED") and is_cluster(self.client):
                self.client.nodes_manager.initialize()  # the slot moved (a fail-over): learn where
            raise
        self._verdict(key, got)


class AsyncReplicaAcks(_Waiter):
    """The asyncio counterpart of :class:`ReplicaAcks` (the gateway's lobby, ``SK_REPLICA_ACKS``).

    The INCR and the WAIT go out as one pipeline on one connection of the node holding
    the key: a plain client's pipeline takes one connection; on a Cluster they are sent
    to the key's node directly (redis-py's cluster pipeline would route the keyless WAIT
    elsewhere).
    """

    async def confirm(self, keys: Iterable[str | bytes]) -> None:
        """One INCR + WAIT per distinct hash tag of ``keys``; NOREPLICAS when too few acknowledged."""
        for key in self._one_per_tag(keys):
            self._verdict(key, await (self._cluster_one(key) if is_cluster(self.client) else self._single_one(key)))

    async def _single_one(self, key: str) -> int:
        pipe = self.client.pipeline(transaction=False)
        pipe.execute_command("INCR", marker_key(key))  # INCR, not redis-py's INCRBY: the ACL users have +incr
        pipe.execute_command("WAIT", self.n, self.timeout_ms)
        _, got = await pipe.execute()
        return int(got)

    async def _cluster_one(self, key: str) -> int:
        from contextlib import nullcontext

        from redis.asyncio.cluster import PipelineCommand

        client = self.client
        await client.initialize()  # a no-op once the slots are known
        node = client.get_node_from_key(key)
        commands = [PipelineCommand(0, "INCR", marker_key(key)),
                    PipelineCommand(1, "WAIT", self.n, self.timeout_ms)]
        turn = client.turn() if hasattr(client, "turn") else nullcontext()  # gateway/gated.py's bound
        async with turn:
            await node.execute_pipeline(commands)
        for c in commands:
            if isinstance(c.result, BaseException):
                if str(c.result).startswith("MOVED"):
                    await client.nodes_manager.initialize()  # the slot moved (a fail-over): learn where
                raise c.result
        got: Any = commands[1].result
        return int(got)
