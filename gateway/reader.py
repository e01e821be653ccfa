"""Subscription and reader: which streams one socket reads, from where, and the reading.

A :class:`Subscription` holds the socket's positions (the id of the last entry it has taken
from each stream it reads: the player's update stream, the lobby's notes and the session
stream, or a spectator's one seated player's update stream).  Its reader hands every new
entry, in stream order and once, to the socket's ``deliver`` callback
(gateway/session.py's ``Connection.deliver``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from gateway import outbox

log = logging.getLogger("shuangkou.gateway")

Deliver = Callable[[str, str, dict], Awaitable[None]]


def _s(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else ("" if v is None else str(v))


class Subscription:
    def __init__(self, redis: Any, deliver: Deliver, closed: Callable[[], bool], label: str):
        self.redis = redis
        self.deliver = deliver
        self.closed = closed  # the socket is gone: stop reading
        self.label = label  # who reads (for the log)
        self.positions: dict[str, str] = {}
        self._pump: asyncio.Task | None = None

    def upto(self, stream: str) -> str:
        """The id read up to in ``stream`` ("+" when it is not read)."""
        return self.positions.get(stream, "+")

    async def take(self, streams: list[str], at: dict[str, str] | None = None) -> None:
        """Read ``streams`` from now on: after their newest entry, or after the ids in ``at``."""
        at = at or {}
        self.positions = {s: at[s] if s in at else await outbox.last_id(self.redis, s) for s in streams}

    async def skip_to_end(self, stream: str) -> None:
        """Read ``stream`` after its newest entry (what came before is caught up otherwise)."""
        self.positions[stream] = await outbox.last_id(self.redis, stream)

    def start(self) -> None:
        self._pump = asyncio.get_running_loop().create_task(self._pump_loop())

    def restart(self) -> None:
        """The positions changed: read from them."""
        if self._pump is not None:
            self._pump.cancel()
            self.start()

    def stop(self) -> None:
        if self._pump is not None:
            self._pump.cancel()

    async def _pump_loop(self) -> None:
        r = self.redis
        backoff = 0.1
        while not self.closed():
            if not self.positions:
                await asyncio.sleep(1.0)  # a spectator that watches nothing yet
                continue
            try:
                reply = await r.xread(dict(self.positions), count=100, block=5000)
                backoff = 0.1
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("reading streams for %s failed: %s", self.label, exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            for stream_name, entries in reply or ():
                stream = _s(stream_name)
                for entry_id, fields in entries:
                    self.positions[stream] = _s(entry_id)
                    try:
                        await self.deliver(stream, _s(entry_id), fields)
                    except asyncio.CancelledError:
                        raise
                    except Exception:
                        log.exception("could not relay %s %s", stream, _s(entry_id))
                    if self.closed():
                        return
