"""Lobby and tables, in Redis (R-11, R-13.2).

* ``Join`` puts a player in the room's queue; two waiting players whose balances the
  room admits (R-11.1) are seated at a new table.  The table creates its match on the
  operator channel (CreateMatch, then Sit for both, balances from the ledger) and,
  once the engine accepted all three, tells both players ``seated``.
* After each finish and settlement the table tells both players ``settled`` (their
  scores, the breakdown and their new balance from the ledger) and offers the next
  match to the same two (``seated`` again: they send Ready again).
* A player the ready timer removes (R-13.2), who leaves before the deal or who
  escapes leaves the room (``removed``); the other goes back to the queue.

Every transition is one Lua script (gateway/lobby.lua) on keys under the hash tag
``{lobby}``: several gateway processes share the lobby, and a crash loses nothing.
Work a crash could interrupt (creating a match, waiting for its settlement) is
recorded in the ``pending`` set first and done by whichever gateway's
:meth:`Lobby.run` claims it next; every command it sends has a fixed command id,
so doing it twice changes nothing.

The lobby learns what happens in a match from the players' own update streams
(the gateway's resync calls :meth:`Lobby.observe`): it never reads a match stream.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.store.redis_errors import is_transient
from engine.store.replicas import AsyncReplicaAcks
from gateway import channels, outbox
from gateway.rooms import RoomBook
from projections.ledger import SETTLED_KEY, balance_key
from projections.views import breakdown_for

log = logging.getLogger("shuangkou.gateway.lobby")

P = "sk:{lobby}:"
LUA = (Path(__file__).with_name("lobby.lua")).read_text(encoding="utf-8")


def queue_key(room: str) -> str:
    return f"{P}queue:{room}"


def player_key(player: str) -> str:
    return f"{P}player:{player}"


def table_key(table: str) -> str:
    return f"{P}table:{table}"


def match_key(match: str) -> str:
    return f"{P}match:{match}"


def notes_key(player: str) -> str:
    return f"{P}notes:{player}"


#: the sweep's operations: when they find nothing to do they changed nothing (no wait)
IDLE_OPS = frozenset({"claim", "absent"})
#: the operations that only read: nothing to put on the replicas
READ_OPS = frozenset({"away"})
#: the events of a match that the lobby acts on (``Lobby.observe``): a table's match is over
#: for its players after them
END_EVENTS = frozenset({"PlayerRemoved", "MatchFinished", "MatchAbandoned"})
MISSED_END_UPDATES = 5  # the newest updates of a match looked at for its end

ROOMS_REFRESH_S = 2.0  # how often the lobby reads the room registry again
#: how often a table whose players are all away is looked at (its match may end unseen)
AWAY_CHECK_MS = 2_000
#: a gateway that stopped heartbeating is gone after this long (gateway/session.py's
#: HEARTBEAT_SLACK_MS): after an outage of the lobby's Redis, no reconnect grace ends before
#: every gateway had this long, plus the longest grace, to push its players' presence again
RESUME_SLACK_MS = 3_000

PENDING = f"{P}pending"
PRESENCE = f"{P}presence"


def acts_on(events: Iterable[dict[str, Any]]) -> bool:
    """Whether :meth:`Lobby.observe` does anything with these events (an end of the match).

    >>> acts_on([{"type": "CardsPlayed"}]), acts_on([{"type": "CardsPlayed"}, {"type": "MatchFinished"}])
    (False, True)
    """
    return any(e.get("type") in END_EVENTS for e in events)


def disconnected_key(player: str) -> str:
    return f"{P}disconnected:{player}"


def _s(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else ("" if v is None else str(v))


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class Table:
    """A table as stored (``status``: creating | seated | closed)."""

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
        f = {_s(k): _s(v) for k, v in raw.items()}
        if not f.get("match"):
            return None
        return cls(table_id, f.get("room", ""), (f.get("a", ""), f.get("b", "")), int(f.get("n") or 1),
                   f["match"], f.get("status", ""), f.get("finished", ""), f.get("escaped", ""),
                   f.get("bot_level") or None)


@dataclass(frozen=True)
class Place:
    """Where a player is in the lobby: ``state`` '' (nowhere), ``queued`` or ``table``."""

    state: str
    room: str | None = None
    table: Table | None = None


class ReplyWaiter:
    """Waits for the engine's replies (``sk:reply:<gateway>``) to the lobby's commands."""

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
    """The lobby of one gateway process (the state is shared in Redis)."""

    def __init__(self, redis: Any, rooms: RoomBook, gateway_id: str, *, send_timeout_s: float = 15.0,
                 lease_ms: int = 15_000, player_redis: Any = None, replica_acks: int = 0):
        self.redis = redis  # the lobby's own connection (its Redis user: lobby keys, sk:ops, ledger reads)
        #: the player channel's connection (the gateway's user), for Leave / Disconnect / Reconnect
        self.player_redis = player_redis if player_redis is not None else redis
        self.rooms = rooms
        self.gateway_id = gateway_id
        self.replies = ReplyWaiter(redis, f"sk:reply:ops-gw-{gateway_id}")
        self.send_timeout_s = send_timeout_s
        self.lease_ms = lease_ms
        self._script = redis.register_script(LUA)
        #: ``SK_REPLICA_ACKS``: each transition is on N replicas before the lobby acts on it
        self.acks = AsyncReplicaAcks(redis, replica_acks)
        self._kick = asyncio.Event()
        self._driving: set[str] = set()
        self._registering = asyncio.Lock()
        #: called on every sweep (``shuangkou gateway --bots``: seat bots opposite lonely players)
        self.on_sweep: Callable[[], Awaitable[None]] | None = None

    async def _call(self, op: str, *args: Any) -> Any:
        # one {lobby} key declared (the script does not read KEYS): on a Redis Cluster it routes
        # the call to the node of the lobby's slot, where every key the script touches lives.
        # With SK_REPLICA_ACKS=N the transition is on N replicas before anyone acts on it (a
        # reply to the socket, a command to the engine, a table's work): issue 24 §4
        out = await self._script(keys=[f"{P}seq"], args=[op, now_ms(), *args])
        if self.acks.n and op not in READ_OPS and (out or op not in IDLE_OPS):
            try:
                await self.acks.confirm([f"{P}seq"])
            except Exception as exc:  # NOREPLICAS, or the node away: the transition is made, do its work
                log.warning("lobby %s: %s; going on without the replicas' acknowledgement", op, exc)
        return out

    # -- reading --------------------------------------------------------------------------
    async def table(self, table_id: str) -> Table | None:
        return Table.parse(table_id, await self.redis.hgetall(table_key(table_id)))

    async def place(self, player: str) -> Place:
        raw = {_s(k): _s(v) for k, v in (await self.redis.hgetall(player_key(player))).items()}
        state = raw.get("state", "")
        if state == "table" and raw.get("table"):
            t = await self.table(raw["table"])
            if t is not None and t.status != "closed":
                return Place("table", t.room, t)
            return Place("")
        return Place(state, raw.get("room") or None)

    async def table_of_match(self, match: str) -> Table | None:
        t = _s(await self.redis.get(match_key(match)))
        return await self.table(t) if t else None

    async def balance(self, player: str, mode: str) -> int:
        v = await self.redis.hget(balance_key(mode), player)
        return 0 if v is None else int(v)

    # -- player actions -------------------------------------------------------------------
    async def join(self, player: str, room: str) -> tuple[str, str, str]:
        """Queue ``player`` in ``room`` (pairing at once when someone waits); returns the player's
        state: ``joined`` (queued now), or ``queued`` / ``table`` with the room and table
        they were already in."""
        out = [_s(x) for x in await self._call("join", room, player)]
        for t in out[3:]:
            self._spawn_drive(t)
        return out[0], out[1], out[2]

    async def bot_for(self, room: str, waited_ms: int, level: str) -> tuple[str, str] | None:
        """A bot of ``level`` opposite the oldest waiting player of ``room`` who waited
        ``waited_ms``: (table, bot).  The table keeps the level (the lobby's ``bot_level``)."""
        out = [_s(x) for x in await self._call("bot", room, waited_ms, level)]
        return (out[0], out[1]) if len(out) == 2 else None

    def spawn_drive(self, table_id: str) -> None:
        self._spawn_drive(table_id)

    async def dequeue(self, player: str, reason: str) -> bool:
        return bool(await self._call("dequeue", player, reason))

    async def quit(self, player: str) -> Place | None:
        """``player``'s Leave, decided by the lobby in one step wherever it has them now: out of
        the queue, or off a table between two matches (after a finish, before the next match is
        offered: the settle step closes the table instead; while the next match is created: the
        table closes now; the other player goes back to the queue, a bot leaves).  None when that
        is done; else the place whose match the engine decides the Leave in (seated in a match),
        or ``Place("")`` when the player is nowhere."""
        out = [_s(x) for x in await self._call("quit", player)]
        if not out:
            return Place("")
        if out[0] == "noted":
            self._spawn_drive(out[1])
        elif out[0] == "closed":  # whoever stayed leaves the match being created (if it exists yet)
            await self._after_removal(out[2], out[3:], {player})
        elif out[0] == "engine":
            table = await self.table(out[1])
            if table is not None and table.match == out[2]:
                if table.status == "closed":  # closed meanwhile: the player left with it (lobby.lua
                    return None  # quit_<seat>), and the closing step sent their Leave
                return Place("table", table.room, table)
            return await self.place(player)  # moved on meanwhile: the engine decides where it is now
        return None

    # -- what the players' update streams show -------------------------------------------
    async def missed_end(self, player: str, match: str) -> bool:
        """The end of ``match`` that no socket observed (both players away when it was abandoned,
        a player removed or the match finished: nobody's socket read that update): the player's
        newest updates of the match are observed now, as a socket would have (a few: the service
        and the timers publish independently, a later update may come before the end's).  True
        when one ended the match (the player's place may have changed)."""
        for e in await outbox.recent_updates(self.player_redis, player, match, MISSED_END_UPDATES):
            if acts_on(e.events):
                await self.observe(match, e.events)
                return True
        return False

    async def observe(self, match: str, events: list[dict[str, Any]]) -> None:
        """React to a match's events: a removal (R-13.2, a leave) frees the table, a finish
        starts the settle-and-offer-the-next-match step."""
        if not acts_on(events):
            return
        removed = [(e.get("player"), e.get("reason") or "removed") for e in events
                   if e.get("type") == "PlayerRemoved"]
        finished = [e for e in events if e.get("type") == "MatchFinished"]
        abandoned = any(e.get("type") == "MatchAbandoned" for e in events)
        table = await self.table_of_match(match)
        if table is None or table.match != match:
            return
        if removed or abandoned:
            # a removal closes the table (the other player goes back to the queue, a bot leaves);
            # so does the match's end before the deal when the table is still open (the match
            # is over: nobody needs a Leave in it then)
            args: list[str] = []
            for p, reason in removed:
                args += [str(p), str(reason)]
            await self._after_removal(match, [_s(x) for x in await self._call("removed", table.id, match, *args)],
                                      {str(p) for p, _ in removed}, leave=not abandoned)
        if finished:
            f = finished[-1]
            escaper = f.get("loser") if f.get("reason") == "escape" else ""
            if await self._call("finished", table.id, match, escaper or ""):
                self._spawn_drive(table.id)

    async def _after_removal(self, match: str, out: list[str], removed: set[str], leave: bool = True) -> None:
        if "|" not in out:
            return
        cut = out.index("|")
        requeued, made = out[:cut], out[cut + 1:]
        if leave:  # the one who stays leaves the abandoned match (before the deal)
            await self._leave(match, [p for p in requeued if p not in removed])
        for t in made:
            self._spawn_drive(t)

    # -- the work of tables ---------------------------------------------------------------
    def _spawn_drive(self, table_id: str) -> None:
        if table_id in self._driving:
            return
        self._driving.add(table_id)
        task = asyncio.get_running_loop().create_task(self._drive_guarded(table_id))
        task.add_done_callback(lambda _t: self._driving.discard(table_id))

    async def _drive_guarded(self, table_id: str) -> None:
        try:
            await self.drive(table_id)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("table %s: work failed (retried by the pending sweep)", table_id)

    async def drive(self, table_id: str) -> None:
        """Do what the table needs now: create and seat its match, or settle and offer the next."""
        for _ in range(4):  # creating -> seated; finished -> next match -> seated
            table = await self.table(table_id)
            if table is None or table.status == "closed":
                await self.redis.zrem(PENDING, table_id)
                return
            if table.status == "creating":
                if not await self._create(table):
                    return
                continue
            if table.status == "seated" and table.finished == table.match:
                if not await self._settle(table):
                    await self.redis.zadd(PENDING, {table_id: now_ms() + 250})
                    return
                continue
            if table.status == "seated" and await self._call("away", table.id):
                # nobody's socket reads its match: look at its end here, and again later
                if await self._missed_end(table):
                    continue
                await self.redis.zadd(PENDING, {table_id: now_ms() + AWAY_CHECK_MS})
                return
            await self.redis.zrem(PENDING, table_id)
            return

    async def _missed_end(self, table: Table) -> bool:
        """:meth:`missed_end` of the table's match, from either player's update stream."""
        for p in table.players:
            if await self.missed_end(p, table.match):
                return True
        return False

    async def _send_ops(self, command: Any) -> dict[str, str]:
        fut = self.replies.expect(command.command_id)
        await self.redis.xadd(channels.stream_for(command), channels.entry(command, self.replies.stream))
        return await asyncio.wait_for(fut, self.send_timeout_s)

    async def _leave(self, match: str, players: Iterable[str]) -> None:
        """The lobby's Leave of ``players`` in ``match``: one command id per player and match,
        so a second one for the same player is the engine's duplicate."""
        for p in players:
            await self._send_player("Leave", match, p, channels.lobby_command_id(match, "leave", p))

    async def _send_player(self, ctype: str, match: str, player: str, command_id: str) -> None:
        command = channels.player_command(ctype, match, player, command_id)
        await self.player_redis.xadd(channels.stream_for(command), channels.entry(command))

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

    async def _create(self, table: Table) -> bool:
        cfg = self.rooms.get(table.room)
        if cfg is None:
            await self._call("removed", table.id, table.match, table.players[0], "unknown_room",
                             table.players[1], "unknown_room")
            return False
        try:
            if table.room in self.rooms.files and not self.rooms.registered(table.room):
                if table.room in await self.register_rooms():
                    return False
            # the room by its registered name: the engine takes the config from its registry
            reply = await self._send_ops(channels.create_match(table.match, table.room))
            if reply.get("kind") not in ("accepted", "duplicate") and reply.get("code") != "match_exists":
                log.error("table %s: CreateMatch %s refused: %s", table.id, table.match, reply.get("reason"))
                return False
            refused: list[str] = []
            for p in table.players:
                reply = await self._send_ops(channels.sit(table.match, p))
                if reply.get("kind") not in ("accepted", "duplicate"):
                    if reply.get("code") == "seat_refused" and "already seated" in reply.get("reason", ""):
                        continue
                    log.warning("table %s: Sit %s refused: %s", table.id, p, reply.get("reason"))
                    refused += [p, f"seat_refused: {reply.get('reason', '')}"[:200]]
            if refused:
                out = [_s(x) for x in await self._call("removed", table.id, table.match, *refused)]
                await self._after_removal(table.match, out, set(refused[0::2]))
                return False
        except asyncio.TimeoutError:
            log.warning("table %s: no reply from the engine in %.0fs (retried)", table.id, self.send_timeout_s)
            return False
        if not await self._call("seated", table.id, table.match):
            now = await self.table(table.id)
            if now is not None and now.status == "closed" and now.match == table.match:
                # closed while its match was created (a Leave at the settlement): nobody stays
                # seated in it (the stayer's Leave may have gone already: the engine dedupes)
                await self._leave(table.match, table.players)
        return True

    async def _settle(self, table: Table) -> bool:
        raw = await self.redis.hget(SETTLED_KEY, table.match)
        if raw is None:
            return False  # the projection has not settled it yet
        s = json.loads(_s(raw))
        cfg = self.rooms.get(table.room)
        mode = s.get("mode") or (cfg.mode if cfg else "points")
        notes = []
        for p in table.players:
            notes.append(json.dumps({"kind": "settled", "match": table.match, "scores": s.get("scores", {}),
                                     # each player sees their own balance only (issue 12)
                                     "breakdown": breakdown_for(s.get("breakdown", {}), p),
                                     "balances": {p: await self.balance(p, mode)}}))
        out = [_s(x) for x in await self._call("advance", table.id, table.match, *notes)]
        if out and out[0] == "closed":
            await self._after_removal(table.match, out[1:], {table.escaped}, leave=False)
        return True

    def resume_after_outage_ms(self) -> int:
        """How long after the lobby's Redis answers again no reconnect grace ends: the longest
        grace of the rooms plus :data:`RESUME_SLACK_MS` (issue 35 §4: a player cut off by the
        outage gets a whole grace from its end)."""
        graces = [cfg.reconnect_grace_seconds for name in self.rooms.names()
                  if (cfg := self.rooms.get(name)) is not None]
        return int(1000 * max(graces, default=10.0)) + RESUME_SLACK_MS

    async def run(self, stop: asyncio.Event, interval_s: float = 0.2) -> None:
        """Claim due table work (any gateway's, after a crash) and absent players' grace ends.

        After a failed sweep (the lobby's Redis away) the grace ends wait
        :meth:`resume_after_outage_ms` from the first sweep that works again: the presence
        the gateways could not push meanwhile is pushed again first."""
        await self.replies.start()
        reader = asyncio.get_running_loop().create_task(self.replies.run(stop))
        rooms = asyncio.get_running_loop().create_task(self._rooms_loop(stop))
        outage = False
        absent_from = 0.0  # time.monotonic(): no grace ends before it
        try:
            while not stop.is_set():
                try:
                    for t in [_s(x) for x in await self._call("claim", self.lease_ms, 20)]:
                        self._spawn_drive(t)
                    if outage:
                        outage = False
                        absent_from = time.monotonic() + self.resume_after_outage_ms() / 1000
                        log.info("lobby: Redis answers again; reconnect graces resume in %d ms",
                                 self.resume_after_outage_ms())
                    if time.monotonic() >= absent_from:
                        await self._absent()
                    if self.on_sweep is not None:
                        await self.on_sweep()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    outage = outage or is_transient(exc)
                    log.warning("lobby sweep failed: %s", exc)
                try:
                    await asyncio.wait_for(stop.wait(), interval_s)
                except asyncio.TimeoutError:
                    pass
        finally:
            reader.cancel()
            rooms.cancel()

    async def _rooms_loop(self, stop: asyncio.Event) -> None:
        """Read the room registry again every :data:`ROOMS_REFRESH_S` (rooms registered meanwhile
        are offered) and register the ``--room FILE`` rooms it lacks (an engine not up yet)."""
        while not stop.is_set():
            try:
                await self.register_rooms()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis away, or no reply yet: next time
                log.warning("room registry: %s", exc or type(exc).__name__)
            try:
                await asyncio.wait_for(stop.wait(), ROOMS_REFRESH_S)
            except asyncio.TimeoutError:
                pass

    # -- presence (reconnect grace) -------------------------------------------------------
    async def grace_ms(self, place: Place) -> int:
        cfg = self.rooms.get(place.room or "") if place.room else None
        return int(1000 * (cfg.reconnect_grace_seconds if cfg is not None else 10.0))

    async def present(self, due: dict[str, int]) -> None:
        """Heartbeat: each connected player's Disconnect is due at the given ms (pushed back
        while they stay connected)."""
        if due:
            await self.redis.zadd(PRESENCE, due)

    async def _absent(self) -> None:
        out = [_s(x) for x in await self._call("absent", 50)]
        for i in range(0, len(out), 3):
            player, state, table_id = out[i:i + 3]
            if state == "queued":
                await self.dequeue(player, "disconnected")
            elif state == "table" and table_id:
                table = await self.table(table_id)
                if table is None or table.status == "closed":
                    continue
                match = table.match
                await self.redis.set(disconnected_key(player), match, ex=86_400)
                await self._send_player("Disconnect", match, player,
                                        channels.lobby_command_id(match, "disconnect", player, channels.new_id()))
                # its match may now end with nobody's socket to read it: drive() looks
                await self.redis.zadd(PENDING, {table_id: now_ms() + AWAY_CHECK_MS})
                log.info("%s did not come back within the grace window: Disconnect in %s", player, match)

    async def came_back(self, player: str, match: str | None) -> None:
        """A player connected again: if a Disconnect was sent for their current match, Reconnect."""
        was = _s(await self.redis.getdel(disconnected_key(player)))
        if was and match and was == match:
            await self._send_player("Reconnect", match, player,
                                    channels.lobby_command_id(match, "reconnect", player, channels.new_id()))
