"""``shuangkou gateway --bots``: an empty seat is filled with a bot after a few seconds.

A player who has waited :data:`BOT_AFTER_S` alone in a room's queue is seated at a table
with a bot (``bot-<n>``; lobby.lua ``bot``).  The bot is a player without a socket,
driven by the gateway that seated it: it gets ready for every match of its table and
plays its own turns at its level (``--bot-level``, or the room config's ``bot_level``;
engine/tools/bot.py, docs/BOTS.md).  It decides from what its update stream shows it --
its own hand, the plays, the opponent's card count (:class:`engine.tools.view.ViewFolder`)
-- exactly as a person at the table would; the gateway never reads a match stream.  It
never waits in a queue (when its opponent leaves, it leaves too).  If that gateway stops,
the bot stops acting: the ready timer (R-13.2) or the turn timer (R-13.1, then
trusteeship) take over, as for any absent player.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError

from engine.config import RoomConfig
from engine.store import keys
from engine.tools.bot import Bot
from engine.tools.levels import DEFAULT_LEVEL, LEVELS
from engine.tools.view import ViewFolder
from gateway import channels, outbox
from gateway.lobby import Lobby, notes_key

log = logging.getLogger("shuangkou.gateway.bots")

BOT_AFTER_S = 3.0
DEFAULT_PAUSE_S = 0.5  # a bot's pause before it plays when its room is unknown (RoomConfig's default)


class BotDriver:
    """Seats and drives the bots of one gateway.  ``level``: the default bot level (a
    room's ``bot_level`` overrides it); ``rooms``: the room configs by name."""

    def __init__(self, lobby: Lobby, player_redis: Any, note_redis: Any, level: str = DEFAULT_LEVEL,
                 rooms: dict[str, RoomConfig] | None = None, seed: int | None = None):
        if level not in LEVELS:
            raise ValueError(f"unknown bot level {level!r} (one of {', '.join(LEVELS)})")
        self.lobby = lobby
        self.player_redis = player_redis
        self.note_redis = note_redis
        self.level = level
        self.rooms = rooms or {}
        self.rng = random.Random(seed)
        self.tasks: dict[str, asyncio.Task] = {}

    def level_of(self, room: str) -> str:
        """The level of a bot seated in ``room``: the room's ``bot_level``, else the default."""
        cfg = self.rooms.get(room)
        return (cfg.bot_level if cfg is not None else None) or self.level

    async def fill(self, rooms: list[str]) -> None:
        """Seat a bot opposite every player who waited long enough (called by the lobby sweep)."""
        for room in rooms:
            level = self.level_of(room)
            out = await self.lobby.bot_for(room, int(BOT_AFTER_S * 1000), level)
            if out:
                table, bot = out
                self.start(bot, room)
                self.lobby.spawn_drive(table)

    def start(self, bot: str, room: str | None = None) -> None:
        if bot not in self.tasks:
            level = self.level_of(room) if room is not None else self.level
            player = Bot(level, random.Random(self.rng.getrandbits(64)))
            config = self.rooms.get(room) if room is not None else None
            self.tasks[bot] = asyncio.get_running_loop().create_task(self._play(bot, player, config))
            self.tasks[bot].add_done_callback(lambda _t: self.tasks.pop(bot, None))

    async def _send(self, ctype: str, match: str, bot: str, tag: str, **fields: Any) -> None:
        command = channels.player_command(ctype, match, bot, channels.lobby_command_id(match, "bot", tag), **fields)
        await self.player_redis.xadd(channels.PLAYER_STREAM, channels.entry(command))

    async def _turn(self, bot: str, player: Bot, match: str, folder: ViewFolder) -> None:
        """Play the bot's turn after the room's trustee pause (a person sees the table move at
        the pace trusteeship plays, never at machine speed); a search runs off the event loop."""
        cfg = folder.config
        await asyncio.sleep(cfg.trustee_delay_seconds if cfg is not None else DEFAULT_PAUSE_S)
        view = folder.view()
        play = await asyncio.to_thread(player.choose, view)
        tag = f"s{folder.seq}"  # one command per position: a redelivered update sends the same id
        if play is None:
            await self._send("Pass", match, bot, tag)
        else:
            await self._send("Play", match, bot, tag, cards=list(play.cards))

    async def _play(self, bot: str, player: Bot, config: RoomConfig | None) -> None:
        positions = {notes_key(bot): "0-0", keys.outbox_key(bot): "0-0"}
        folders: dict[str, ViewFolder] = {}
        try:
            while True:
                reply = await self.player_redis.xread(positions, count=100, block=5000)
                for stream_name, entries in reply or ():
                    stream = stream_name.decode() if isinstance(stream_name, bytes) else stream_name
                    for entry_id, fields in entries:
                        positions[stream] = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
                        if stream == notes_key(bot):
                            note = json.loads(fields.get(b"m", fields.get("m")))
                            if note.get("kind") != "lobby":
                                continue
                            if note["state"] == "seated":
                                await self._send("Ready", note["match"], bot, "ready")
                            elif note["state"] in ("queued", "removed"):
                                await self.lobby.dequeue(bot, "bot")
                                return
                            continue
                        e = outbox.parse_entry(entry_id, fields)
                        if e.kind != "update" or not e.events:
                            continue
                        folder = folders.setdefault(e.match, ViewFolder(bot, config))
                        moved = False
                        for event in e.events:
                            before = folder.seq
                            folder.apply(event)
                            moved = moved or folder.seq != before
                        if folder.finished:
                            folders.pop(e.match, None)
                        elif moved and folder.my_turn:
                            await self._turn(bot, player, e.match, folder)
        except asyncio.CancelledError:
            raise
        except (ConnectionError, RedisConnectionError) as exc:  # Redis went away (a shutdown): no traceback
            log.warning("bot %s stopped: Redis connection lost (%s)", bot, exc)
        except Exception:
            log.exception("bot %s stopped", bot)
