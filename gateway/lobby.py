"""The gateway's side of the lobby: an adapter, no lobby logic (issue 34 §4; docs/ARCHITECTURE.md).

The lobby runs in the engine (engine/lobby, run by ``shuangkou serve``).  This module only

* sends a player's ``Join`` and ``Leave``, and the gateway's ``Returned`` (the player has a
  socket again), to the lobby channel of the room's bucket
  (``XADD sk:{b<N>}:lobby c=<the command's JSON>``, :func:`engine.store.keys.lobby_inbox_key`);
* reads where the engine has a player (``sk:place:{<player>}``) and a table's read model
  (``sk:{b<N>}:t:<table>:info``), and the ledger's balances (the browser's room list);
* pushes each connected player's reconnect grace forward (``ZADD sk:{r:<room>}:presence``):
  the engine sweeps it and decides the grace's end (GraceExpired);
* registers the ``--room FILE`` rooms (``AddRoom`` on the operator channel) and reads the
  room registry again every :data:`ROOMS_REFRESH_S`.

What the lobby tells a player (``lobby`` and ``settled`` messages) arrives on the player's own
stream ``sk:out:{<player>}`` in order with the match's updates (gateway/resync.py forwards it).
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

from engine.lobby.commands import parse_lobby_command
from engine.match.errors import BadCommand
from engine.store import keys
from gateway import channels
from gateway.rooms import RoomBook
from projections.ledger import balance_key

log = logging.getLogger("shuangkou.gateway.lobby")

ROOMS_REFRESH_S = 2.0  # how often the registry is read again (and the sweep hook runs: bot offers)
DEFAULT_GRACE_S = 10.0  # the reconnect grace of a player whose room is unknown here


def _s(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else ("" if v is None else str(v))


def now_ms() -> int:
    return int(time.time() * 1000)


def table_of_match_id(match: str) -> str:
    """The table of a match ``<table>-<n>``.

    >>> table_of_match_id("t0123456789ab-3")
    't0123456789ab'
    """
    return match.rpartition("-")[0]


def returned_command_id(player: str) -> str:
    """The id of a gateway's ``Returned``: ``gw:returned:<player>:<random hex>`` (every
    connection its own; never a client's ``p<len>:`` id)."""
    return f"gw:returned:{player}:{secrets.token_hex(8)}"


@dataclass(frozen=True)
class Table:
    """A table's read model (``status``: creating | seated | between | closed)."""

    id: str
    room: str
    players: tuple[str, str]
    n: int
    match: str
    status: str
    finished: str
    escaped: str
    bot_level: str | None = None  # the level of the table's bot (``gateway --bots``), None: no bot

    @classmethod
    def parse(cls, table_id: str, raw: dict) -> Table | None:
        """The table from its hash (``HGETALL``), None when it has no match (no such table).

        >>> Table.parse("t1", {b"room": b"points", b"a": b"x", b"b": b"y", b"n": b"2", b"match": b"t1-2",
        ...                    b"status": b"between"}).status
        'between'
        >>> Table.parse("t1", {}) is None
        True
        """
        f = {_s(k): _s(v) for k, v in raw.items()}
        if not f.get("match"):
            return None
        return cls(table_id, f.get("room", ""), (f.get("a", ""), f.get("b", "")), int(f.get("n") or 1),
                   f["match"], f.get("status", ""), f.get("finished", ""), f.get("escaped", ""),
                   f.get("bot_level") or None)

    def moved_past(self, match: str) -> bool:
        """True when ``match`` is one of this table's matches before its current one.

        >>> t = Table.parse("t1", {b"n": b"3", b"match": b"t1-3", b"status": b"seated"})
        >>> t.moved_past("t1-2"), t.moved_past("t1-3"), t.moved_past("t9-1"), t.moved_past("t1-x")
        (True, False, False, False)
        """
        table, _, n = match.rpartition("-")
        return table == self.id and n.isascii() and n.isdigit() and int(n) < self.n


@dataclass(frozen=True)
class Place:
    """Where a player is in the lobby: ``state`` '' (nowhere), ``queued`` or ``table``; ``room``:
    the room of the place (also kept for a table that closed, until the engine moves the player)."""

    state: str
    room: str | None = None
    table: Table | None = None


class ReplyWaiter:
    """Waits for the engine's replies (``sk:reply:<gateway>``) to the gateway's operator commands."""

    def __init__(self, redis: Any, stream: str):
        self.redis = redis
        self.stream = stream
        self._waiting: dict[str, asyncio.Future] = {}
        self._last = "$"

    async def start(self) -> None:
        last = await self.redis.xrevrange(self.stream, count=1)
        self._last = _s(last[0][0]) if last else "0-0"

    def expect(self, command_id: str) -> asyncio.Future:
        fut = self._waiting.get(command_id)
        if fut is None or fut.done():
            fut = asyncio.get_running_loop().create_future()
            self._waiting[command_id] = fut
        return fut

    def forget(self, command_id: str, fut: asyncio.Future) -> None:
        """Stop waiting with ``fut`` (its reply came, or its wait ended without one)."""
        if self._waiting.get(command_id) is fut:
            del self._waiting[command_id]

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                reply = await self.redis.xread({self.stream: self._last}, count=100, block=1000)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis away: wait and retry
                log.warning("reading %s failed: %s", self.stream, exc)
                await asyncio.sleep(0.5)
                continue
            for _stream, entries in reply or ():
                for entry_id, fields in entries:
                    self._last = _s(entry_id)
                    f = {_s(k): _s(v) for k, v in fields.items()}
                    fut = self._waiting.pop(f.get("command_id", ""), None)
                    if fut is not None and not fut.done():
                        fut.set_result(f)


class Lobby:
    """The lobby adapter of one gateway process.  ``redis``: the lobby's Redis user
    (``--lobby-redis``: the lobby channel, presence and bot keys, places, tables, the ledger,
    the operator channel for AddRoom)."""

    def __init__(self, redis: Any, rooms: RoomBook, gateway_id: str, *, send_timeout_s: float = 15.0,
                 buckets: int = keys.DEFAULT_BUCKETS):
        self.redis = redis
        self.rooms = rooms
        self.gateway_id = gateway_id
        self.buckets = buckets
        self.replies = ReplyWaiter(redis, keys.ops_reply_key(f"gw-{gateway_id}"))
        self.send_timeout_s = send_timeout_s
        self._registering = asyncio.Lock()
        #: called every :data:`ROOMS_REFRESH_S` (``shuangkou gateway --bots``: the bot offers)
        self.on_sweep: Callable[[], Awaitable[None]] | None = None

    # -- reading --------------------------------------------------------------------------
    async def table(self, table_id: str) -> Table | None:
        """The table's read model, None when there is none."""
        if not table_id:
            return None
        return Table.parse(table_id, await self.redis.hgetall(keys.table_info_key(table_id, self.buckets)))

    async def place(self, player: str) -> Place:
        """Where the engine has ``player``: queued in a room, at a table that is not closed, or
        nowhere (``Place("")``, with the room when the place still names a closed table)."""
        raw = {_s(k): _s(v) for k, v in (await self.redis.hgetall(keys.place_key(player))).items()}
        state, room = raw.get("state", ""), raw.get("room") or None
        if state == "table":
            t = await self.table(raw.get("table", ""))
            if t is not None and t.status != "closed":
                return Place("table", t.room or room, t)
            return Place("", room)
        if state == "queued":
            return Place("queued", room)
        return Place("")

    async def spectators_allowed(self, table_id: str) -> bool:
        """Whether a table may be watched: a public table always; a private table's (its series
        has the table's id, issue 39) only when its owner allowed spectators."""
        from engine.lobby.series_events import SeriesCreated, decode_stored_event

        first = await self.redis.xrange(keys.series_keys(table_id, self.buckets)[0], count=1)
        if not first:
            return True
        fields = first[0][1]
        e = decode_stored_event(fields[b"e"] if b"e" in fields else fields["e"])
        return not isinstance(e, SeriesCreated) or bool(e.options.spectators)

    async def table_of_match(self, match: str) -> Table | None:
        """The table of ``match`` (``<table>-<n>``), None when there is none."""
        return await self.table(table_of_match_id(match))

    async def balance(self, player: str, mode: str) -> int:
        v = await self.redis.hget(balance_key(mode), player)
        return 0 if v is None else int(v)

    async def waiting(self, rooms: Iterable[str]) -> dict[str, int]:
        """Players waiting in each room's queue (the queue's read model), for the metrics."""
        names = list(rooms)
        out: dict[str, int] = {}
        for room in names:  # one slot per room: no pipeline across them on a Cluster
            v = await self.redis.hget(keys.queue_info_key(room), "waiting")
            out[room] = int(v) if v not in (None, b"", "") else 0
        return out

    # -- the lobby channel ----------------------------------------------------------------
    async def send(self, ctype: str, room: str, player: str, command_id: str) -> str:
        """XADD one player command (``Join`` | ``Leave`` | ``Returned``) to the lobby channel of
        ``room``'s bucket; returns the stream it went to."""
        body = {"type": ctype, "command_id": command_id, "room": room, "player": player}
        parse_lobby_command(body)  # a malformed one is refused here (BadCommand), never sent
        stream = keys.lobby_inbox_key(keys.room_bucket(room, self.buckets))
        await self.redis.xadd(stream, {"c": json.dumps(body, ensure_ascii=False)})
        return stream

    async def send_series(self, player: str, client_id: str, msg: Any, room_only: str | None = None) -> str:
        """XADD a player's private table command (CreateTable, JoinTable, CancelTable,
        RequestEnd, VoteEnd: gateway/protocol.py) to a lobby channel: a CreateTable to its
        room's bucket's, a JoinTable to its code's bucket's, the others to the player's
        bucket's.  Any replica's lobby thread may run any series command (the series' appends
        are checked against its version); the channel only spreads the work.  ``room_only``:
        the token's room, which a JoinTable carries (the engine refuses a table of another)."""
        body: dict[str, Any] = {"type": msg.type, "command_id": channels.engine_command_id(player, client_id),
                                "player": player}
        if msg.type == "CreateTable":
            if msg.room in self.rooms.files and not self.rooms.registered(msg.room):
                await self.register_rooms()  # as for a Join: the engine knows rooms by name
            body.update(room=msg.room, hands=msg.hands, spectators=msg.spectators, bots=msg.bots)
            route = msg.room
        elif msg.type == "JoinTable":
            body["code"] = msg.code.upper()
            if room_only is not None:  # the token's room: a table of another room is refused
                body["room"] = room_only
            route = body["code"]
        else:
            route = player
            if msg.type == "VoteEnd":
                body["agree"] = msg.agree
        stream = keys.lobby_inbox_key(keys.bucket_of(route, self.buckets))
        await self.redis.xadd(stream, {"c": json.dumps(body, ensure_ascii=False)})
        return stream

    async def series_resync(self, player: str) -> list[dict[str, Any]]:
        """What a (re)connecting player of a private table's series gets again: its totals, an
        open vote, or the owner's unclaimed table (engine/service/series_notes.py ``resync``)."""
        from engine.lobby.series import replay_series
        from engine.service.series_notes import resync
        from engine.lobby.series_events import decode_stored_event

        series = _s(await self.redis.get(keys.player_series_key(player)))
        if not series:
            return []
        stream = keys.series_keys(series, self.buckets)[0]
        events = [decode_stored_event(f[b"e"] if b"e" in f else f["e"]) for _id, f in await self.redis.xrange(stream)]
        return resync(replay_series(series, events), player)

    async def join_allowed(self, player: str, address: str | None, per_player: int, per_address: int,
                           window_s: int) -> int:
        """Count one JoinTable attempt of ``player`` and of ``address`` (a fixed window of
        ``window_s`` seconds, in Redis: every gateway counts the same); 0 when allowed, else the
        ms until the window ends (``rate_limited``).  Wrong codes count like right ones.  An
        attempt over the player's own limit is not counted for the address: one player never
        spends the budget of the others behind the same address."""
        return await self._attempts([(f"p:{player}", per_player), (f"a:{address}" if address else "", per_address)],
                                    window_s)

    async def create_allowed(self, player: str, per_player: int, window_s: int) -> int:
        """Count one CreateTable of ``player`` as :meth:`join_allowed` counts a JoinTable."""
        return await self._attempts([(f"c:{player}", per_player)], window_s)

    async def _attempts(self, counters: list[tuple[str, int]], window_s: int) -> int:
        """Count one attempt on each of ``counters`` in turn (``""``: none), up to the first
        over its limit: the ms until its window ends, else 0."""
        for who, limit in counters:
            if not who:
                continue
            key = keys.join_attempts_key(who)
            pipe = self.redis.pipeline(transaction=True)  # one key: one slot
            pipe.execute_command("INCR", key)  # redis-py's incr() sends INCRBY, which the lobby user lacks
            pipe.expire(key, window_s, nx=True)
            pipe.pttl(key)
            n, _set, ttl = await pipe.execute()
            if int(n) > limit:
                return int(ttl) if int(ttl) > 0 else window_s * 1000
        return 0

    async def join(self, player: str, room: str, client_id: str) -> None:
        """``player``'s Join of ``room`` (the engine's queue decides it and answers on the player's
        stream: ``lobby queued|seated``, or a ``rejected`` such as ``cooldown``).  A ``--room FILE``
        room the registry does not hold yet is registered first (the engine knows rooms by name)."""
        if room in self.rooms.files and not self.rooms.registered(room):
            await self.register_rooms()
        await self.send("Join", room, player, channels.engine_command_id(player, client_id))

    async def quit(self, player: str, client_id: str) -> bool:
        """``player``'s Leave, to the room of their place (the engine decides it wherever the
        player is).  False, and nothing sent, when the player is nowhere."""
        raw = {_s(k): _s(v) for k, v in (await self.redis.hgetall(keys.place_key(player))).items()}
        room = raw.get("room")
        if not raw.get("state") or not room:
            return False
        await self.send("Leave", room, player, channels.engine_command_id(player, client_id))
        return True

    async def came_back(self, player: str, room: str | None) -> None:
        """A player connected again, with a place in ``room``: ``Returned`` (the engine sends a
        Reconnect into the match if their grace had ended)."""
        if room:
            try:
                await self.send("Returned", room, player, returned_command_id(player))
            except BadCommand as exc:  # a player id the lobby's model refuses: it has no place anyway
                log.warning("no Returned for %r: %s", player[:120], exc)

    # -- presence (reconnect grace) -------------------------------------------------------
    def grace_ms_of(self, room: str | None) -> int:
        """The room's reconnect grace in ms (:data:`DEFAULT_GRACE_S` for a room unknown here)."""
        cfg = self.rooms.get(room) if room else None
        return int(1000 * (cfg.reconnect_grace_seconds if cfg is not None else DEFAULT_GRACE_S))

    async def grace_ms(self, place: Place) -> int:
        return self.grace_ms_of(place.room)

    async def present(self, due: dict[str, tuple[str, int]]) -> None:
        """Each player's grace end: ``{player: (room, due ms)}`` → ``ZADD sk:{r:<room>}:presence``
        (one ZADD per room)."""
        by_room: dict[str, dict[str, int]] = {}
        for player, (room, at) in due.items():
            if room:
                by_room.setdefault(room, {})[player] = int(at)
        for room, entries in by_room.items():
            await self.redis.zadd(keys.presence_key(room), entries)

    # -- rooms ----------------------------------------------------------------------------
    async def _send_ops(self, command: Any) -> dict[str, str]:
        fut = self.replies.expect(command.command_id)
        try:
            await self.redis.xadd(channels.stream_for(command), channels.entry(command, self.replies.stream))
            return await asyncio.wait_for(fut, self.send_timeout_s)
        finally:
            self.replies.forget(command.command_id, fut)

    async def register_rooms(self) -> list[str]:
        """Register the ``--room FILE`` rooms the registry does not hold with the same config
        (``AddRoom`` on the operator channel); returns the names the engine refused."""
        async with self._registering:
            return await self._register_rooms()

    async def _register_rooms(self) -> list[str]:
        await self.rooms.refresh(self.redis)
        refused = []
        for name, cfg in sorted(self.rooms.files.items()):
            if self.rooms.registered(name):
                continue
            command = channels.add_room(name, cfg.to_record(), self.gateway_id)
            reply = await self._send_ops(command)
            if reply.get("kind") not in ("accepted", "duplicate"):
                log.error("room %s: the engine refused to register it: %s", name, reply.get("reason"))
                refused.append(name)
        if len(refused) < len(self.rooms.files):
            await self.rooms.refresh(self.redis)
        return refused

    async def run(self, stop: asyncio.Event) -> None:
        """The replies to AddRoom, and every :data:`ROOMS_REFRESH_S` the room registry again (rooms
        registered meanwhile are offered; the ``--room FILE`` rooms it lacks are registered) and
        :attr:`on_sweep`."""
        await self.replies.start()
        reader = asyncio.get_running_loop().create_task(self.replies.run(stop))
        try:
            while not stop.is_set():
                try:
                    await self.register_rooms()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # Redis away, or no reply yet: next time
                    log.warning("room registry: %s", exc or type(exc).__name__)
                if self.on_sweep is not None:
                    try:
                        await self.on_sweep()
                    except asyncio.CancelledError:
                        raise
                    except Exception as exc:
                        log.warning("lobby sweep failed: %s", exc)
                try:
                    await asyncio.wait_for(stop.wait(), ROOMS_REFRESH_S)
                except asyncio.TimeoutError:
                    pass
        finally:
            reader.cancel()
