"""redis-py's asyncio Cluster client with a bounded number of connections that waits.

Its per-node pools refuse a connection past ``max_connections`` (``MaxConnectionsError``)
where a single node's ``BlockingConnectionPool`` waits for one.  :class:`GatedCluster` lets
at most ``max_connections - 2`` commands and pipelines be in flight at once, so no node's pool
is ever asked for more (each holds one connection of a node at a time; the notice
subscription holds one per node, gateway/fanout.py): a command past the bound waits its turn.
A command the client sends while it already holds its turn (a pipeline's redirected
command, sent again on its own) does not wait again.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from redis.asyncio.cluster import ClusterPipeline, RedisCluster
from redis.exceptions import RedisClusterException

from engine.store.connect import local_stream_keys

_holding: contextvars.ContextVar[bool] = contextvars.ContextVar("sk_gated_holding", default=False)


class GatedCluster(RedisCluster):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # XREAD/XREADGROUP and script keys read off the arguments, not asked of a node first
        local_stream_keys(self.commands_parser, asynchronous=True)
        self.gate = asyncio.Semaphore(max(1, int(kwargs.get("max_connections") or 2**31) - 2))

    @asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        """One command's (or pipeline's) turn: wait for it unless this task holds one already."""
        if _holding.get():
            yield
            return
        async with self.gate:
            token = _holding.set(True)
            try:
                yield
            finally:
                _holding.reset(token)

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        async with self.turn():
            return await super().execute_command(*args, **kwargs)

    def pipeline(self, transaction: Any | None = None, shard_hint: Any | None = None) -> ClusterPipeline:
        if shard_hint:
            raise RedisClusterException("shard_hint is deprecated in cluster mode")
        return GatedPipeline(self, transaction)  # type: ignore[abstract]  # redis-py leaves _event_dispatcher abstract in its stubs only


class GatedPipeline(ClusterPipeline):
    async def execute(self, raise_on_error: bool = True, allow_redirections: bool = True) -> list[Any]:
        client = self.cluster_client
        assert isinstance(client, GatedCluster)
        async with client.turn():
            return await super().execute(raise_on_error, allow_redirections)
