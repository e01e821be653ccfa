"""The players' commands into their channels: every socket's XADD in one pipeline.

A socket's :meth:`CommandSender.send` queues its command and waits for that command's own
answer (the entry id, or the exception Redis gave it).  One task writes what is queued: one
pipeline (no transaction) per round, up to :data:`BATCH` commands, the next round with what
queued meanwhile.  So under load many sockets' commands share a round trip (a pipeline of
10 XADDs costs redis.asyncio about half the CPU of 10 concurrent XADDs, docs/CAPACITY.md),
and an idle gateway sends each command at once, alone.

One socket sends its commands one at a time (it waits for the answer), so their order is
kept; a failure is the failing command's own (or the whole round's, when the connection
dropped), raised in the socket that sent it, as a direct XADD would have.

On a Redis Cluster each command is its own XADD, as before: redis-py's cluster pipeline
retries a whole pipeline when one node is away (closing every node's connections between
tries), so one master's fail-over would fail the commands of every shard in its round.
"""

from __future__ import annotations

import asyncio
from typing import Any

from engine.store.connect import is_cluster
from gateway.fanout import ROUND_TIMEOUT_S

BATCH = 200  # commands per pipeline


class CommandSender:
    def __init__(self, redis: Any):
        self.redis = redis
        self._queue: list[tuple[str, dict, asyncio.Future[Any]]] = []
        self._task: asyncio.Task[None] | None = None
        self.rounds = 0  # pipelines sent (tests, the benchmark)
        self.pipelined = not is_cluster(redis)

    async def send(self, stream: str, fields: dict) -> Any:
        """XADD ``fields`` to ``stream``; the new entry's id (or Redis's exception, raised)."""
        if not self.pipelined:  # a Cluster client: its socket timeout bounds each reply
            return await self.redis.xadd(stream, fields)
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Any] = loop.create_future()
        answer.add_done_callback(_retrieved)
        self._queue.append((stream, fields, answer))
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._write())
        return await answer

    async def _write(self) -> None:
        while self._queue:
            # a socket that stopped waiting (closed meanwhile) sends nothing
            batch = [q for q in self._queue[:BATCH] if not q[2].done()]
            self._queue = self._queue[BATCH:]
            if batch:
                await self._round(batch)

    async def _round(self, batch: list[tuple[str, dict, asyncio.Future[Any]]]) -> None:
        """One pipeline; every command of it is answered, whatever happens (none waits for ever)."""
        replies: list[Any] = []
        failure: BaseException | None = None
        try:
            pipe = self.redis.pipeline(transaction=False)
            for stream, fields, _answer in batch:
                pipe.xadd(stream, fields)
            self.rounds += 1
            async with asyncio.timeout(ROUND_TIMEOUT_S):  # the client reads its replies with none
                replies = await pipe.execute(raise_on_error=False)
        except asyncio.CancelledError:
            for _s, _f, answer in batch + self._queue:
                answer.cancel()
            self._queue = []
            raise
        except Exception as exc:  # the round failed as a whole (the connection, the pool)
            failure = exc
        for i, (_s, _f, answer) in enumerate(batch):
            if answer.done():  # its socket stopped waiting (closed): nothing to tell
                continue
            reply = replies[i] if failure is None else failure
            if isinstance(reply, BaseException):
                answer.set_exception(reply)
            else:
                answer.set_result(reply)


def _retrieved(answer: asyncio.Future[Any]) -> None:
    """Mark an answer's exception as seen: a socket cancelled after its answer was set is no
    "exception was never retrieved" in the log."""
    if not answer.cancelled():
        answer.exception()
