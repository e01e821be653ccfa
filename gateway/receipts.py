"""Delivery receipts: when a player's socket was actually handed the update that started their
clock (issue 35 §4), for the timers (workers/runtime.py ``clock_pause``).

A turn or ready clock must not run out while the player could not have acted.  The timers see
when an update reached the player's stream (``sk:out:{<player>}``); a receipt says when a
gateway handed it to the player's socket, so a clock also pauses while the gateway that holds
the socket was dead or restarting (the update was in the stream, nobody delivered it).

The receipt is one string per player, ``sk:seen:{<player>}`` (:func:`engine.store.keys.receipt_key`,
the player's hash tag; its format: engine/service/receipts.py), ``open`` after a socket was
sent an update, ``closed`` once the player's own socket closed on a live gateway (the
ordinary reconnect grace runs then, not a pause).  Only the updates that start a clock of this
player are receipted (the brief has a deadline and it is the player's turn, or the match is not
being played yet: the ready clock).  Receipts are written in the background, coalesced per
player, every :data:`FLUSH_S`; a receipt that could not be written (Redis away) is retried with
the next flush while no newer one replaced it.  A gateway that is killed writes nothing: its
players' receipts stay ``open`` at the last version delivered, which is what the timers read
as "not delivered".

A receipt says the update was handed to the socket, not that the client read it.  A client
that acknowledges what it read (``Seen``, docs/PROTOCOL.md) closes that gap: its socket's
receipts carry the version it acknowledged and this process's instance, and the process
writes a liveness beat (:meth:`Receipts.beat`, ``sk:seen:gw:{<instance>}``) every
:data:`~engine.service.receipts.BEAT_MS`.  An update handed over and not acknowledged when
the beat stops (the gateway was killed or restarted) is read by the timers as undelivered
(engine/service/receipts.py ``handed_at``); while the beat goes on, the handing-over counts.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from typing import Any

from engine.service.receipts import BEAT_MS, BEAT_TTL_MS, TTL_MS, encode, starts_clock
from engine.store import keys
from engine.store.connect import is_cluster

log = logging.getLogger("shuangkou.gateway")

FLUSH_S = 0.05  # how often the receipts collected are written


def now_ms() -> int:
    return int(time.time() * 1000)


class Receipts:
    """The receipts of one gateway process: :meth:`delivered` and :meth:`closed` note them
    (no Redis call), :meth:`run` writes them."""

    def __init__(self, redis: Any):
        self.redis = redis
        self.instance = secrets.token_hex(8)  # this process: a restarted gateway is another one
        self._due: dict[str, str] = {}  # player -> the receipt to write
        self._wake = asyncio.Event()
        self.written = 0  # receipts written (tests)

    def delivered(self, player: str, message: dict[str, Any], acked: int | None = None
                  ) -> tuple[int, int, str] | None:
        """``message`` was sent on ``player``'s socket: receipt it when it starts their clock;
        ``acked``: the version of its match the socket's client acknowledged (None: this
        socket never sent ``Seen``).  Returns ``(at_ms, version, match)`` receipted, or None."""
        if not starts_clock(player, message):
            return None
        handed = (now_ms(), int(message.get("version") or 0), str(message.get("match") or ""))
        self._note(player, handed, acked)
        return handed

    def acknowledged(self, player: str, handed: tuple[int, int, str], acked: int) -> None:
        """The socket's client acknowledged ``acked`` of the match of its last receipt
        ``handed``: the receipt again, with the client's word."""
        self._note(player, handed, acked)

    def _note(self, player: str, handed: tuple[int, int, str], acked: int | None) -> None:
        at, version, match = handed
        self._due[player] = encode("open", at, version, match, acked, self.instance if acked is not None else None)
        self._wake.set()

    def closed(self, player: str, match: str | None) -> None:
        """The player's own socket closed (the gateway lives on): their clocks run as usual."""
        self._due[player] = encode("closed", now_ms(), 0, match or "")
        self._wake.set()

    async def flush(self) -> None:
        """Write what was noted (a receipt that fails stays due unless a newer one came)."""
        due, self._due = self._due, {}
        if not due:
            return
        items = list(due.items())
        if is_cluster(self.redis):  # each SET on its own (a cluster pipeline retries as a whole)
            results = await asyncio.gather(*(self.redis.set(keys.receipt_key(p), v, px=TTL_MS) for p, v in items),
                                           return_exceptions=True)
        else:
            pipe = self.redis.pipeline(transaction=False)
            for p, v in items:
                pipe.set(keys.receipt_key(p), v, px=TTL_MS)
            try:
                results = await pipe.execute(raise_on_error=False)
            except Exception as exc:  # the connection: every one of them
                results = [exc] * len(items)
        for (p, v), r in zip(items, results):
            if isinstance(r, BaseException):
                self._due.setdefault(p, v)
                log.debug("could not write %s's receipt: %s", p, r)
            else:
                self.written += 1

    async def beat(self, stop: asyncio.Event) -> None:
        """This process's liveness beat (``sk:seen:gw:{<instance>}``: the time, every
        :data:`BEAT_MS`) until ``stop``; then a beat of 0 (the sockets are being closed: an
        update handed over and not acknowledged was not read)."""
        key = keys.gateway_beat_key(self.instance)
        while not stop.is_set():
            try:
                await self.redis.set(key, str(now_ms()), px=BEAT_TTL_MS)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("liveness beat not written: %s", exc)
            try:
                await asyncio.wait_for(stop.wait(), BEAT_MS / 1000)
            except asyncio.TimeoutError:
                pass
        try:
            await asyncio.wait_for(self.redis.set(key, "0", px=BEAT_TTL_MS), 1.0)
        except Exception as exc:  # it expires anyway
            log.debug("last beat not written: %s", exc)

    async def run(self, stop: asyncio.Event) -> None:
        """Write the receipts noted, every :data:`FLUSH_S` while there are some, until ``stop``."""
        while not stop.is_set():
            await self._wake.wait()
            self._wake.clear()
            try:
                await self.flush()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("receipts not written: %s", exc)
            await asyncio.sleep(FLUSH_S)
            if self._due:
                self._wake.set()
