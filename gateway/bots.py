"""``shuangkou gateway --bots``: a person waiting alone gets the trustee bot as opponent.

:class:`BotSeater` looks at the lobby's room queues (``sk:{lobby}:queue:<room>``,
gateway/lobby.lua) twice a second.  When a person has waited alone in a points
room for :data:`BOT_AFTER_S` seconds, it starts one :func:`play_as_bot` client for
that room.  The bot is an ordinary client of this gateway: it connects to the
gateway's own ``/ws`` on the loopback address with a token of its own
(``bot-<hex>``), sends ``Join``, ``Ready`` whenever it is seated (also for the
next match at the same table), and ``RequestTrustee`` once each match is dealt,
so the engine's trusteeship (R-13.3: the smallest legal play) plays for it.
Nothing in the lobby or the engine knows it is a bot.  It leaves when its table
ends (``removed`` or back in the queue) or after :data:`BOT_IDLE_S` seconds
without a message.

Wealth rooms get no bot (a new bot holds no coins, R-11.1).

>>> is_bot("bot-1a2b3c"), is_bot("alice")
(True, False)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from typing import Any

log = logging.getLogger("shuangkou.gateway.bots")

BOT_PREFIX = "bot-"
BOT_AFTER_S = 3.0  # a person waits this long alone before the bot sits down
BOT_IDLE_S = 300.0  # a bot that hears nothing for this long leaves
SCAN_S = 0.5
MAX_BOTS = 50  # bounded: never more bot connections than this per gateway


def is_bot(player: str) -> bool:
    return player.startswith(BOT_PREFIX)


async def play_as_bot(url: str, token: str, room: str, idle_s: float = BOT_IDLE_S) -> str:
    """One bot's life at one table; returns why it stopped."""
    import websockets

    dealt: set[str] = set()
    async with websockets.connect(url, open_timeout=10, close_timeout=2) as ws:
        await ws.send(json.dumps({"type": "Auth", "token": token}))
        await ws.send(json.dumps({"type": "Join", "room": room}))
        seated = False
        while True:
            try:
                raw = await asyncio.wait_for(ws.recv(), idle_s)
            except asyncio.TimeoutError:
                return "idle"
            try:
                msg = json.loads(raw)
            except ValueError:
                continue
            kind = msg.get("kind")
            if kind == "lobby":
                state = msg.get("state")
                if state == "seated":
                    seated = True
                    await ws.send(json.dumps({"type": "Ready"}))
                elif state == "removed" or (state == "queued" and seated):
                    return f"table ended ({msg.get('reason') or state})"
            elif kind == "settled":
                await ws.send(json.dumps({"type": "Ready"}))
            elif kind == "update":
                view = msg.get("view") or {}
                match = view.get("match_id") or msg.get("match")
                if view.get("phase") == "playing" and match not in dealt:
                    dealt.add(match)
                    await ws.send(json.dumps({"type": "RequestTrustee"}))
                elif view.get("phase") in ("seating", "new") and match not in dealt:
                    you = view.get("you")
                    mine = [s for s in view.get("seats") or [] if s and s.get("player") == you]
                    if mine and not mine[0].get("ready"):
                        await ws.send(json.dumps({"type": "Ready"}))


class BotSeater:
    """Watches the room queues and seats a bot beside a person who waits alone."""

    def __init__(self, redis: Any, secret: bytes, rooms: Any, ws_url: str,
                 after_s: float = BOT_AFTER_S):
        self.redis = redis
        self.secret = secret
        self.rooms = rooms
        self.ws_url = ws_url
        self.after_s = after_s
        self.spawned_at: dict[str, float] = {}  # room -> when its last bot was started (monotonic)
        self.running: set[asyncio.Task[Any]] = set()
        self.stopping = lambda: False  # the gateway is shutting down

    def _points_rooms(self) -> list[str]:
        rooms = getattr(self.rooms, "rooms", None) or {}
        return [name for name, cfg in rooms.items() if getattr(cfg, "mode", None) == "points"]

    async def _waiting_person(self, room: str) -> bool:
        from gateway.lobby import player_key, queue_key

        waiting = [w.decode() if isinstance(w, bytes) else w for w in await self.redis.lrange(queue_key(room), 0, 10)]
        people = [w for w in waiting if not is_bot(w)]
        if len(waiting) != 1 or len(people) != 1:
            return False  # nobody, or two already: the lobby pairs them
        since = await self.redis.hget(player_key(people[0]), "since")
        try:
            since_ms = int(since)
        except (TypeError, ValueError):
            return False
        return time.time() * 1000 - since_ms >= self.after_s * 1000

    def _spawn(self, room: str) -> None:
        from gateway.tokens import mint

        player = f"{BOT_PREFIX}{uuid.uuid4().hex[:8]}"
        token = mint(self.secret, player, role="player", ttl_seconds=24 * 3600)

        async def life() -> None:
            try:
                why = await play_as_bot(self.ws_url, token, room)
                log.info("bot %s left %s: %s", player, room, why)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a bot never takes the gateway down
                log.warning("bot %s in %s stopped: %s", player, room, exc)

        task = asyncio.create_task(life(), name=f"bot {player}")
        self.spawned_at[room] = time.monotonic()
        self.running.add(task)
        task.add_done_callback(self.running.discard)
        log.info("bot %s sits down in %s", player, room)

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set() and not self.stopping():
            try:
                for room in self._points_rooms():
                    # one bot joining a room at a time: the last one had time to sit down
                    if time.monotonic() - self.spawned_at.get(room, -1e9) < 2 * self.after_s:
                        continue
                    if len(self.running) < MAX_BOTS and await self._waiting_person(room):
                        self._spawn(room)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("bot seater: %s", exc)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), SCAN_S)
        for t in list(self.running):
            t.cancel()
        await asyncio.gather(*self.running, return_exceptions=True)
