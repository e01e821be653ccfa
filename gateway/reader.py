"""Subscription and reader: which streams one socket reads, from where, and the reading.

A :class:`Subscription` holds the socket's positions (the id of the last entry it has handed
on from each stream it reads: the player's own stream (updates, lobby messages) and the
session stream, or a spectator's one seated player's update stream).  The gateway's one reader
(gateway/fanout.py) reads those streams when a notice says they have news and queues the
entries here; the subscription hands every new entry, in stream order and once, to the
socket's ``deliver`` callback (gateway/session.py's ``Connection.deliver``).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from engine.store import keys
from gateway import outbox
from gateway.fanout import Fanout

log = logging.getLogger("shuangkou.gateway")

Deliver = Callable[[str, str, dict], Awaitable[None]]

BACKLOG = 300  # entries queued for a socket before the fan-out reads it no further (a slow client)


class Subscription:
    """The positions of one socket (or bot) and the queue of what the gateway's fan-out read
    for it; a small task of its own hands the entries to ``deliver`` (no Redis call waits here)."""

    def __init__(self, fanout: Fanout, redis: Any, deliver: Deliver, closed: Callable[[], bool], label: str):
        self.fanout = fanout
        self.redis = redis
        self.deliver = deliver
        self.closed = closed  # the socket is gone: stop handing on
        self.label = label  # who reads (for the log)
        self.positions: dict[str, str] = {}  # stream -> the id of the last entry handed on
        self._cursor: dict[str, str] = {}  # stream -> the id of the last entry read
        self._generation = 0
        self._queue: deque[tuple[int, str, str, dict]] = deque()
        self._ready = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._running = False
        self._held_back = False  # the fan-out skipped us for a backlog: say when it is handed on

    def upto(self, stream: str) -> str:
        """The id handed on up to in ``stream`` ("+" when it is not read)."""
        return self.positions.get(stream, "+")

    async def take(self, streams: list[str], at: dict[str, str] | None = None) -> None:
        """Read ``streams`` from now on: after their newest entry, or after the ids in ``at``."""
        at = dict(at or {})
        missing = [s for s in streams if s not in at]
        if len(missing) == 1:
            at[missing[0]] = await outbox.last_id(self.redis, missing[0])
        elif missing:  # one round trip, the streams in the order given
            pipe = self.redis.pipeline(transaction=False)
            for s in missing:
                pipe.xrevrange(s, count=1)
            for s, last in zip(missing, await pipe.execute()):
                at[s] = outbox.entry_id(last[0][0]) if last else "0-0"
        self.positions = {s: at[s] for s in streams}

    def start(self) -> None:
        self._running = True
        self._reset()
        self._task = asyncio.get_running_loop().create_task(self._hand_on())
        self.fanout.add(self)

    def restart(self) -> None:
        """The positions changed: read from them (what was read from the old ones is dropped)."""
        if self._running:
            self._reset()
            self.fanout.update(self)

    def stop(self) -> None:
        if self._running:
            self._running = False
            self.fanout.remove(self)
        if self._task is not None:
            self._task.cancel()

    def _reset(self) -> None:
        self._generation += 1
        self._cursor = dict(self.positions)
        self._queue.clear()

    # -- what the fan-out calls (gateway/fanout.py ``Reading``) ---------------------------
    def streams(self) -> list[str]:
        return list(self._cursor)

    def cursor(self, stream: str) -> str | None:
        return self._cursor.get(stream)

    def generation(self) -> int:
        return self._generation

    def backlogged(self) -> bool:
        if len(self._queue) >= BACKLOG:
            self._held_back = True
            return True
        return False

    def received(self, stream: str, entries: list[tuple[str, dict]]) -> None:
        self._cursor[stream] = entries[-1][0]
        self._queue.extend((self._generation, stream, i, f) for i, f in entries)
        self._ready.set()

    async def _hand_on(self) -> None:
        while not self.closed():
            if not self._queue:
                self._ready.clear()
                if self._held_back:
                    self._held_back = False
                    self.fanout.kick()
                await self._ready.wait()
                continue
            gen, stream, entry_id, fields = self._queue.popleft()
            if gen != self._generation or stream not in self.positions:
                continue  # read from positions since set anew
            if keys.stream_pos(entry_id) <= keys.stream_pos(self.positions[stream]):
                continue  # already handed on (the positions only move forward)
            self.positions[stream] = entry_id
            try:
                await self.deliver(stream, entry_id, fields)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("could not relay %s %s", stream, entry_id)
