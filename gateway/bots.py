"""``shuangkou gateway --bots``: an empty seat is filled with the trustee bot after a few seconds.

A player who has waited :data:`BOT_AFTER_S` alone in a room's queue is seated at a table
with a bot (``bot-<n>``; lobby.lua ``bot``).  The bot is a player without a socket,
driven by the gateway that seated it: it gets ready for every match of its table and hands
its seat to the engine's trustee (R-13.3, R-13.5) once the cards are dealt; it never waits in
a queue (when its opponent leaves, it leaves too).  If that gateway stops, the bot stops
acting: the ready timer (R-13.2) or the turn timer then take over, as for any absent player.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from engine.store import keys
from gateway import channels, outbox
from gateway.fanout import Fanout
from gateway.lobby import Lobby, notes_key
from gateway.reader import Subscription

log = logging.getLogger("shuangkou.gateway.bots")

BOT_AFTER_S = 3.0


class BotDriver:
    def __init__(self, lobby: Lobby, player_redis: Any, note_redis: Any, fanout: Fanout):
        self.lobby = lobby
        self.fanout = fanout
        self.player_redis = player_redis
        self.note_redis = note_redis
        self.tasks: dict[str, asyncio.Task] = {}

    async def fill(self, rooms: list[str]) -> None:
        """Seat a bot opposite every player who waited long enough (called by the lobby sweep)."""
        for room in rooms:
            out = await self.lobby.bot_for(room, int(BOT_AFTER_S * 1000))
            if out:
                table, bot = out
                self.start(bot)
                self.lobby.spawn_drive(table)

    def start(self, bot: str) -> None:
        if bot not in self.tasks:
            self.tasks[bot] = asyncio.get_running_loop().create_task(self._play(bot))
            self.tasks[bot].add_done_callback(lambda _t: self.tasks.pop(bot, None))

    async def _send(self, ctype: str, match: str, bot: str, tag: str) -> None:
        command = channels.player_command(ctype, match, bot, channels.lobby_command_id(match, "bot", tag))
        await self.player_redis.xadd(channels.stream_for(command), channels.entry(command))

    async def _play(self, bot: str) -> None:
        """Read the bot's notes and updates (through the gateway's fan-out) until it leaves."""
        asked: set[str] = set()
        done = asyncio.Event()

        async def deliver(stream: str, entry_id: str, fields: dict) -> None:
            if stream == notes_key(bot):
                note = json.loads(fields.get(b"m", fields.get("m")))
                if note.get("kind") != "lobby":
                    return
                if note["state"] == "seated":
                    await self._send("Ready", note["match"], bot, "ready")
                elif note["state"] in ("queued", "removed"):
                    await self.lobby.dequeue(bot, "bot")
                    done.set()
                return
            e = outbox.parse_entry(entry_id, fields)
            if e.kind != "update" or e.match in asked:
                return
            if any(x.get("type") == "HandDealt" for x in e.events):
                asked.add(e.match)
                await self._send("RequestTrustee", e.match, bot, "trustee")

        streams = [notes_key(bot), keys.outbox_key(bot)]
        reading = Subscription(self.fanout, self.player_redis, deliver, done.is_set, bot)
        await reading.take(streams, at=dict.fromkeys(streams, "0-0"))
        reading.start()
        try:
            await done.wait()
        finally:
            reading.stop()
