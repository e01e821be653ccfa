"""``shuangkou gateway --bots``: an empty seat is filled with a bot after a few seconds.

Who gets a bot is the engine's room queue's decision (a queue timer, engine/lobby): a gateway
with ``--bots`` only offers bots and plays those seated.  Every :data:`OFFER_EVERY_S` it sets
each room's offer ``sk:{r:<room>}:bots:offer`` (JSON ``{"after_ms", "level"}``: a player who
waited ``after_ms`` alone gets a bot of ``level``; it expires after :data:`OFFER_TTL_S`, so a
room whose bot gateways are all gone seats no more bots), and reads the bots the queues seated
from ``sk:{r:<room>}:bots:seats`` (consumer group ``sk-bots``, one consumer per gateway: each
bot is played by one gateway).  The bot is a player without a socket,
driven by the gateway that took it: it gets ready for every match of its table and plays
its own turns at its level (``--bot-level easy|normal|hard``, or the room config's
``bot_level``; engine/tools/bot.py, docs/BOTS.md) from what a player sees -- its own update
stream folded into a :class:`engine.tools.view.PlayerView` (its hand, the plays, the play in
front, the opponent's card count, the bombs) -- after thinking a human time (``--bot-think SECONDS``:
each move waits a random 40–100 % of it; the default 2.5 s gives 1–2.5 s; 0 plays at once).
When its picture has no hand it plays what the trustee would (R-13.3); when its picture of
the match fails (a refused move), it hands the seat to the engine's trustee (R-13.5) for the
rest of the match.  It never waits in a queue (when its table closes the engine removes it
and the bot stops).  If that gateway stops, the bot stops acting: the ready timer
(R-13.2) or the turn timer then take over, as for any absent player.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from dataclasses import dataclass, field
from typing import Any

from engine.store import keys
from engine.tools.bot import Bot
from engine.tools.levels import DEFAULT_LEVEL, LEVELS
from engine.tools.view import ViewFolder
from gateway import channels, outbox
from gateway.fanout import Fanout
from gateway.lobby import Lobby
from gateway.reader import Subscription

log = logging.getLogger("shuangkou.gateway.bots")

BOT_AFTER_S = 3.0
OFFER_EVERY_S = 2.0  # how often a --bots gateway renews the rooms' bot offers
OFFER_TTL_S = 10  # an offer not renewed for this long is gone: no more bots in that room
SEATS_POLL_S = 0.5  # how often the rooms' bot seats are read
BOT_THINK_S = 2.5  # the longest a bot thinks over a move (``--bot-think``)
MAX_REFUSED = 2  # refused moves in a match before the bot hands its seat to the trustee


@dataclass
class BotTable:
    """What the bot knows of its current match, from its own update stream (a player's view)."""

    match: str
    seat: int | None = None
    hand: list[int] = field(default_factory=list)
    turn: str | None = None
    last: Any = None  # the CardsPlayed event to beat (None: the bot leads)
    version: int = 0
    playing: bool = False
    refused: int = 0
    trustee: bool = False
    #: the same updates folded into the bot's PlayerView (the level bots decide from it)
    folder: ViewFolder | None = None

    def fold(self, bot: str, version: int | None, events: list[dict[str, Any]], view: dict[str, Any] | None) -> None:
        """Take an update: its view when it has one, else its events (as a player folds them)."""
        if version is not None:
            self.version = max(self.version, version)
        if self.folder is not None:
            for e in events:
                self.folder.apply(e)
        if view is not None:
            self.playing = view.get("phase") == "playing"
            self.turn = view.get("turn")
            self.hand = list((view.get("hand") or {}).get("ids") or [])
            lp = view.get("last_play")
            self.last = None if lp is None else {"player": lp["player"], "cards": lp["cards"],
                                                 "kind": lp["reading"]["kind"], "rank": lp["reading"]["rank"]}
            for i, st in enumerate(view.get("seats") or []):
                if st and st.get("player") == bot:
                    self.seat = i
            if any(st and st.get("player") == bot and st.get("trustee") for st in view.get("seats") or []):
                self.trustee = True
            return
        players: dict[int, str] = {}
        for e in events:
            t = e.get("type")
            if t == "PlayerSeated":
                players[int(e["seat"])] = e["player"]
                if e["player"] == bot:
                    self.seat = int(e["seat"])
            elif t == "HandDealt" and self.seat is not None:
                self.hand = list((e.get("hands") or [None, None])[self.seat] or [])
                self.playing, self.last = True, None
                self.turn = bot if e.get("first") == self.seat else "?"
            elif t == "CardsPlayed":
                if e["player"] == bot:
                    self.hand = [c for c in self.hand if c not in e["cards"]]
                reading = e.get("reading") or {}
                self.last = {"player": e["player"], "cards": e["cards"], "kind": reading.get("kind"),
                             "top": reading.get("top")}
                self.turn = "?" if e["player"] == bot else bot
            elif t == "Passed":
                self.last = None
                self.turn = "?" if e["player"] == bot else bot
            elif t == "TrusteeshipStarted" and e.get("player") == bot:
                self.trustee = True
            elif t == "MatchFinished":
                self.playing = False
                self.turn = None


def _str(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def bot_move(table: BotTable, heavenly: Any = "top", chain_bomb_twos: bool = True) -> dict[str, Any] | None:
    """The bot's move on its turn: the trustee's choice (R-13.3) for its hand and the play in
    front -- ``{"type": "Play", "cards": [...]}`` / ``{"type": "Pass"}`` -- or None when
    its picture has no hand.

    >>> bot_move(BotTable("m", seat=0, hand=[0, 1, 4], turn="b", playing=True))
    {'type': 'Play', 'cards': [0], 'reading_kind': 'single', 'reading_rank': '3'}
    >>> bot_move(BotTable("m", hand=[0], last={"player": "x", "cards": [40], "kind": "single", "top": 10}))
    {'type': 'Pass'}
    """
    from engine.rules.classify import interpretations
    from engine.rules.moves import trustee_choice

    if not table.hand:
        return None
    prev = None
    if table.last is not None:
        for r in interpretations(table.last["cards"], heavenly, chain_bomb_twos=chain_bomb_twos):
            if r.kind == table.last["kind"] and (r.top == table.last.get("top") or r.rank == table.last.get("rank")):
                prev = r
                break
        if prev is None:
            return None
    play = trustee_choice(table.hand, prev, heavenly, chain_bomb_twos=chain_bomb_twos)
    if play is None:
        return {"type": "Pass"}
    return {"type": "Play", "cards": list(play.cards), "reading_kind": play.combo.kind,
            "reading_rank": play.combo.rank}


class BotDriver:
    """Seats and drives the bots of one gateway.  ``level``: the bots' level where the room
    config sets no ``bot_level``; ``seed``: the bots' generators (None: unpredictable)."""

    def __init__(self, lobby: Lobby, player_redis: Any, fanout: Fanout,
                 think_s: float = BOT_THINK_S, level: str = DEFAULT_LEVEL, seed: int | None = None):
        if level not in (*LEVELS, "trustee"):
            raise ValueError(f"unknown bot level {level!r} (one of {', '.join(LEVELS)}, or trustee)")
        self.level = level
        self.rng = random.Random(seed)
        self.lobby = lobby
        self.fanout = fanout
        self.player_redis = player_redis  # the player channel (the bots' commands) and their streams
        self.think_s = max(0.0, float(think_s))
        self.tasks: dict[str, asyncio.Task] = {}
        self._groups: set[str] = set()  # rooms whose seats group exists

    def level_of(self, room: str | None) -> str:
        """The level of a bot seated in ``room``: the room's ``bot_level``, else the default."""
        cfg = self.lobby.rooms.get(room) if room else None
        return (cfg.bot_level if cfg is not None else None) or self.level

    def wait_ms_of(self, room: str | None) -> int:
        """How long a player waits alone before a bot sits opposite them: :data:`BOT_AFTER_S`, and
        in a ranked room at least its ``match_max_wait_seconds`` (a bot never pre-empts the
        widening window, docs/RANKED.md)."""
        cfg = self.lobby.rooms.get(room) if room else None
        wait = BOT_AFTER_S
        if cfg is not None and getattr(cfg, "ranked", False):
            wait = max(wait, cfg.match_max_wait_seconds)
        return int(wait * 1000)

    async def offer(self, rooms: list[str]) -> None:
        """Offer bots in ``rooms``: ``SET sk:{r:<room>}:bots:offer {"after_ms", "level"} EX`` :data:`OFFER_TTL_S`."""
        for room in rooms:
            offer = {"after_ms": self.wait_ms_of(room), "level": self.level_of(room)}
            await self.lobby.redis.set(keys.bot_offer_key(room), json.dumps(offer), ex=OFFER_TTL_S)

    async def withdraw(self, rooms: list[str]) -> None:
        """Take the offers back (``DEL``; a gateway stopping: no bot is seated that nobody would
        play; another ``--bots`` gateway offers again within :data:`OFFER_EVERY_S`)."""
        for room in rooms:
            await self.lobby.redis.delete(keys.bot_offer_key(room))

    async def take_seats(self, rooms: list[str], consumer: str) -> list[str]:
        """Start playing each bot the rooms' queues seated and no gateway took yet (XREADGROUP
        ``sk-bots`` as ``consumer``, then XACK); returns the bots started."""
        started: list[str] = []
        for room in rooms:  # one slot per room: one read each
            stream = keys.bot_seats_key(room)
            if room not in self._groups:
                try:
                    await self.lobby.redis.xgroup_create(stream, keys.BOTS_GROUP, id="0", mkstream=True)
                except Exception as exc:
                    if "BUSYGROUP" not in str(exc):
                        raise
                self._groups.add(room)
            got = await self.lobby.redis.xreadgroup(keys.BOTS_GROUP, consumer, {stream: ">"}, count=50)
            for _stream, entries in got or ():
                for entry_id, fields in entries:
                    f = {_str(k): _str(v) for k, v in fields.items()}
                    if f.get("bot"):
                        self.start(f["bot"], room, f.get("match") or None)
                        started.append(f["bot"])
                    await self.lobby.redis.xack(stream, keys.BOTS_GROUP, entry_id)
        return started

    async def run(self, stop: asyncio.Event, rooms: Any, consumer: str) -> None:
        """Offer bots every :data:`OFFER_EVERY_S` and take the seated ones every
        :data:`SEATS_POLL_S` until ``stop``; ``rooms()``: the rooms served (read each round)."""
        offered = 0.0
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            try:
                names = list(rooms())
                if loop.time() - offered >= OFFER_EVERY_S:
                    await self.offer(names)
                    offered = loop.time()
                await self.take_seats(names, consumer)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis away: next round
                log.warning("bots: %s", exc or type(exc).__name__)
            try:
                await asyncio.wait_for(stop.wait(), SEATS_POLL_S)
            except asyncio.TimeoutError:
                pass

    def start(self, bot: str, room: str | None = None, match: str | None = None) -> None:
        """Play ``bot`` (seated in ``room``, its first match ``match``) until the engine removes it."""
        if bot not in self.tasks:
            self.tasks[bot] = asyncio.get_running_loop().create_task(self._play(bot, room))
            self.tasks[bot].add_done_callback(lambda _t: self.tasks.pop(bot, None))

    async def _send(self, ctype: str, match: str, bot: str, tag: str, **fields: Any) -> None:
        command = channels.player_command(ctype, match, bot, channels.lobby_command_id(match, "bot", tag), **fields)
        await self.player_redis.xadd(channels.stream_for(command), channels.entry(command))

    def _think(self) -> float:
        return random.uniform(0.4 * self.think_s, self.think_s)

    async def _move(self, bot: str, table: BotTable, room: str | None) -> None:
        """Think, then play (or pass) -- unless the match moved on meanwhile (a newer version)."""
        version = table.version
        await asyncio.sleep(self._think())
        if table.version != version or table.turn != bot or not table.playing or table.trustee:
            return
        cfg = self.lobby.rooms.get(room or "") if room else None
        move = await self._level_move(table, room)
        if move is None:
            move = bot_move(table, cfg.heavenly_bomb if cfg else "top", cfg.chain_bomb_twos if cfg else True)
        if move is None:
            table.trustee = True
            await self._send("RequestTrustee", table.match, bot, "trustee")
            return
        kind = move.pop("type")
        await self._send(kind, table.match, bot, f"v{version}", expected_version=version, **move)

    async def _level_move(self, table: BotTable, room: str | None) -> dict[str, Any] | None:
        """The level bot's move from the bot's PlayerView (a search runs off the event loop),
        or None when the view disagrees with the table's picture (then the trustee's choice)."""
        folder = table.folder
        if folder is None or not folder.my_turn or sorted(folder.hand) != sorted(table.hand):
            return None
        if folder.config is None and room:
            folder.config = self.lobby.rooms.get(room)
        player = Bot(self.level_of(room), random.Random(self.rng.getrandbits(64)))
        play = await asyncio.to_thread(player.choose, folder.view())
        if play is None:
            return {"type": "Pass"}
        return {"type": "Play", "cards": list(play.cards), "reading_kind": play.combo.kind,
                "reading_rank": play.combo.rank}

    async def _play(self, bot: str, at: str | None = None) -> None:
        """Read the bot's stream ``sk:out:{<bot>}`` (through the gateway's fan-out) until the
        engine removes it: ready for each match (on its ``seated``, or once seated in the match),
        and on its turn a move after thinking (:meth:`_move`)."""
        tables: dict[str, BotTable] = {}
        room: list[str | None] = [at]
        mover: list[asyncio.Task | None] = [None]
        done = asyncio.Event()

        async def deliver(stream: str, entry_id: str, fields: dict) -> None:
            e = outbox.parse_entry(entry_id, fields)
            if e.kind == "lobby":
                note = e.body
                if note.get("state") == "seated" and note.get("match"):
                    room[0] = note.get("room") or room[0]
                    await self._send("Ready", str(note["match"]), bot, "ready")
                elif note.get("state") == "removed":
                    done.set()
                return
            if e.kind == "update" and any(x.get("type") == "PlayerSeated" and x.get("player") == bot
                                          for x in e.events):
                await self._send("Ready", e.match, bot, "ready")  # the same id: one Ready per match
            table = tables.setdefault(e.match, BotTable(e.match, folder=ViewFolder(bot)))
            if e.kind == "rejected":
                if e.code == "stale":
                    return  # the update that moved the table is on its way: the bot moves again then
                table.refused += 1
                if table.refused >= MAX_REFUSED and not table.trustee:
                    table.trustee = True  # its picture is wrong: the trustee plays on
                    await self._send("RequestTrustee", e.match, bot, "trustee")
                return
            if e.kind != "update":
                return
            table.fold(bot, e.version, e.events, e.view)
            if mover[0] is not None and not mover[0].done():
                mover[0].cancel()
            if table.playing and table.turn == bot and not table.trustee:
                mover[0] = asyncio.get_running_loop().create_task(self._move(bot, table, room[0]))
            for m in [m for m, t in tables.items() if not t.playing and m != e.match]:
                tables.pop(m, None)  # finished matches of this table: forgotten

        streams = [keys.outbox_key(bot)]
        reading = Subscription(self.fanout, self.player_redis, deliver, done.is_set, bot)
        await reading.take(streams, at=dict.fromkeys(streams, "0-0"))
        reading.start()
        try:
            await done.wait()
        finally:
            reading.stop()
            if mover[0] is not None:
                mover[0].cancel()
