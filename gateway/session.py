"""One WebSocket connection: authenticate, then the socket protocol (the client's messages in,
the server's out).

* The socket is accepted first; the token comes as ``?token=`` or as the first message
  ``{"type": "Auth", "token": …}`` within :data:`AUTH_TIMEOUT_S`.  A missing, bad or
  expired token closes the socket with :data:`CLOSE_UNAUTHORIZED` (4401) and a reason.
* The player of every command is the token's subject; a message naming anyone else is
  refused ``not_allowed`` and never forwarded (gateway/protocol.py).
* A newer connection of the same player (another tab, another gateway) closes this one
  with :data:`CLOSE_REPLACED` and a reason: every connection appends itself to the
  player's session stream and watches it.
* The socket's subscription (gateway/reader.py) reads the player's own stream
  ``sk:out:{<player>}`` and the session stream.  The player's stream carries, in order, the
  match's updates, the player's rejections and what the engine's lobby tells them (``lobby``
  and ``settled`` entries): the socket forwards the lobby's messages (their ``command_id``
  mapped back to the client's), and its resync (gateway/resync.py) the updates of the current
  match once each (by version) and the player's own rejections (their own command ids).
* Join, Leave and, on connect, Returned go to the engine's lobby (gateway/lobby.py, an
  adapter): the gateway decides nothing about the lobby.
* On connect the player at once gets the lobby state and the current view of their match;
  given a last-seen ``version`` (``?version=``, ``Auth.version`` or ``Sync.version``) every
  later update follows instead, with no gap (or, when the stream no longer holds them, one
  resync update with the view) and no duplicate; with its ``match`` (``?match=``, ``Auth.match``,
  ``Sync.match``) only when that is the table's match (:class:`Resume`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from engine.match.errors import BadCommand
from engine.store import keys
from engine.store.connect import is_cluster
from gateway import channels, names, outbox, protocol, say
from gateway.guard import Guard
from gateway.limits import Limits, SubjectBudgets
from gateway.lobby import Lobby, Place, Table, now_ms, table_of_match_id
from gateway.metrics import GatewayMetrics
from gateway.rooms import RoomBook
from gateway.fanout import Fanout
from gateway.reader import Subscription
from gateway.receipts import Receipts
from gateway.sender import CommandSender
from gateway.resync import Resync
from gateway.tokens import Identity, TokenError, TokenPolicy, verify

log = logging.getLogger("shuangkou.gateway")

AUTH_TIMEOUT_S = 5.0
CLOSE_UNAUTHORIZED = 4401
CLOSE_REPLACED = 4409
CLOSE_GOING_AWAY = 1001
HEARTBEAT_S = 1.0
HEARTBEAT_SLACK_MS = 3000  # a gateway that stopped heartbeating is gone after this long
PENDING_TTL_S = 60.0
GAP_WAIT_S = 2.0  # how long an update ahead of a missing one waits before a resync


def _s(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else ("" if v is None else str(v))


#: the commands of a seated player that use the place known from the last lookup (or from the
#: lobby's ``seated`` message): the engine decides them against the match anyway, and any later
#: message of the lobby drops what is known
HOT = frozenset({"Play", "Pass", "Ready"})
#: a table whose match these commands go to: running, or between its finish and its settlement
#: (the engine answers a Ready there with an ack, a Play with a refusal)
AT_TABLE = frozenset({"seated", "between"})
#: the entries of the player's stream that the lobby writes (gateway/outbox.py)
LOBBY_KINDS = frozenset({"lobby", "settled", "private_table", "series"})


def waiting_message(place: Place, command_id: str | None = None) -> dict[str, Any]:
    """The ``lobby`` message of a player at no table's match: ``queued`` in a room's queue, or
    paired at a table whose match is not seated yet (``table`` then names it); in no room,
    ``removed`` with reason null (docs/PROTOCOL.md §8, Sync)."""
    table = place.table
    if place.state == "queued":
        return protocol.lobby("queued", place.room, command_id=command_id)
    if place.state:
        return protocol.lobby("queued", table.room if table else place.room, table.id if table else None,
                              command_id=command_id)
    return protocol.lobby("removed", place.room, command_id=command_id)


@dataclass
class Hub:
    """Everything one gateway process shares between its connections."""

    redis: Any
    secret: bytes
    rooms: RoomBook
    lobby: Lobby
    gateway_id: str
    metrics: GatewayMetrics
    limits: Limits = field(default_factory=Limits)  # sizes and rates per client (gateway/limits.py)
    budgets: SubjectBudgets = field(init=False)  # each token subject's rates, across its sockets
    says: say.SayLimiter = field(default_factory=say.SayLimiter)  # one Say every 3 s a player (gateway/say.py)
    connections: set[Connection] = field(default_factory=set)
    stopping: bool = False
    fanout: Fanout = field(init=False)  # the one reader of every socket's streams (gateway/fanout.py)
    sender: CommandSender = field(init=False)  # the one writer of every socket's commands (gateway/sender.py)
    names: names.NameBook = field(init=False)  # the display names, cached for a few seconds (gateway/names.py)
    receipts: Receipts = field(init=False)  # when a player's socket was handed their clock's update (gateway/receipts.py)

    #: the hot path's own connections, the fan-out's and the sender's (its notices, reads and
    #: the players' commands never queue behind the sockets' other calls in ``redis``'s pool);
    #: None: they share ``redis``
    reader_redis: Any = None
    #: what a token must also satisfy here (gateway/tokens.py TokenPolicy)
    token_policy: TokenPolicy = field(default_factory=TokenPolicy)

    def __post_init__(self) -> None:
        self.budgets = SubjectBudgets(self.limits)
        self.fanout = Fanout(self.reader_redis if self.reader_redis is not None else self.redis)
        # one pipeline at a time on the hot client; on a Cluster each command is its own XADD,
        # as many at once as sockets send: those take the players' larger pool
        hot = self.reader_redis is not None and not is_cluster(self.reader_redis)
        self.sender = CommandSender(self.reader_redis if hot else self.redis)
        self.names = names.NameBook(self.lobby.redis)
        self.receipts = Receipts(self.redis)

    async def heartbeat(self, stop: asyncio.Event) -> None:
        """Keep every connected player's grace end in the future (``sk:{r:<room>}:presence``,
        for each player whose place has a room): the engine ends the grace of the others."""
        while not stop.is_set():
            try:
                now = now_ms()
                due = {c.identity.player: (c.room, now + HEARTBEAT_SLACK_MS + c.grace_ms)
                       for c in list(self.connections) if c.is_player and not c.closed and c.room}
                await self.lobby.present(due)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("heartbeat failed: %s", exc)
            try:
                await asyncio.wait_for(stop.wait(), HEARTBEAT_S)
            except asyncio.TimeoutError:
                pass

    async def close_all(self, code: int, reason: str) -> None:
        self.stopping = True
        await asyncio.gather(*(c.close(code, reason) for c in list(self.connections)), return_exceptions=True)


class Connection:
    """The socket protocol of one connection: who it is, its life cycle, the client's messages
    and what is sent back.  What it reads is its :class:`~gateway.reader.Subscription`'s; what
    it has of its match (gaps, resync, exactly once) its :class:`~gateway.resync.Resync`'s."""

    def __init__(self, hub: Hub, ws: WebSocket, identity: Identity):
        self.hub = hub
        self.ws = ws
        self.identity = identity
        self.id = uuid.uuid4().hex
        self.closed = False
        self.replaced = False
        self.place = Place("")
        self.room: str | None = None  # the room of the player's place (presence goes there)
        self.address: str | None = None  # the client's address (gateway/limits.py client_address)
        #: the seated place :data:`HOT` commands use without a lookup, with the count of lobby
        #: messages delivered when it was looked up: any later one makes it old
        self._seated: tuple[Place, int] | None = None
        self._notes_seen = 0  # lobby messages delivered to this socket
        self.grace_ms = 10_000
        self.match: str | None = None  # the match whose updates this socket gets
        self.watching: str | None = None  # spectators: the watched match
        self.source: str | None = None  # spectators: the seated player whose stream is read
        self.pending: dict[str, tuple[float, str]] = {}  # engine command id -> (sent at, type)
        self._send_lock = asyncio.Lock()
        self._session_id = "0-0"
        self._announced: str | None = None  # the match this socket last told the client it is seated in
        #: the client's acknowledgements (``Seen``): the highest update version sent on this socket
        #: per match (the last few), the version acknowledged of the match of ``_handed`` (None:
        #: this socket never acknowledged), the last update receipted ``(at_ms, version, match)``
        self._sent: dict[str, int] = {}
        self._acks = False
        self._acked: dict[str, int] = {}
        self._handed: tuple[int, int, str] | None = None
        #: matches whose updates came unannounced and are not the player's table's (not looked up again)
        self._not_mine: set[str] = set()
        self.subscription = Subscription(hub.fanout, hub.redis, self.deliver, lambda: self.closed, identity.player)
        self.resync = Resync(self, GAP_WAIT_S)
        self.guard = Guard(self, hub.limits)  # token lifetime and rates (the edge, gateway/guard.py)

    @property
    def is_player(self) -> bool:
        return self.identity.role == "player"

    @property
    def player(self) -> str:
        return self.identity.player

    def read_upto(self, stream: str) -> str:
        return self.subscription.upto(stream)

    # -- sending --------------------------------------------------------------------------
    async def send(self, message: dict[str, Any], table: Table | None = None) -> None:
        """Send ``message`` (``table``: the lobby's table it names, when already read)."""
        if self.closed:
            return
        message = await self._named(message, table)
        update = self.is_player and message.get("kind") == "update"
        if update:  # before the frame goes out: the client's Seen of it may come back at once
            self._will_send(message)
        async with self._send_lock:
            try:
                await self.ws.send_text(protocol.encode(message))
            except (WebSocketDisconnect, RuntimeError, OSError):
                self.closed = True
                return
        if update:
            self._receipt(message)
        self.hub.metrics.message_out(message.get("kind", ""), message.get("code"))

    def _will_send(self, message: dict[str, Any]) -> None:
        """An update goes out: remember its version (a ``Seen`` may name it)."""
        match, version = str(message.get("match") or ""), message.get("version")
        if isinstance(version, int) and match:
            if match not in self._sent and len(self._sent) >= 4:
                self._sent.pop(next(iter(self._sent)))
            self._sent[match] = max(version, self._sent.get(match, 0))

    def _receipt(self, message: dict[str, Any]) -> None:
        """An update went out: receipt it (the clocks run from here, issue 35 §4), with what the
        client acknowledged of its match."""
        match = str(message.get("match") or "")
        acked = self._acked.get(match, 0) if self._acks else None
        handed = self.hub.receipts.delivered(self.player, message, acked)
        if handed is not None:
            self._handed = handed

    def _seen(self, msg: Any) -> None:
        """The client read the updates of its match up to ``msg.version``.  A version this socket
        was not sent, or of a match it was not sent, is refused (a client cannot acknowledge ahead
        of what it got); an older acknowledgement changes nothing.  The last receipt, when it is
        of that match, is written again with the client's word."""
        match = msg.match or (self._handed[2] if self._handed is not None else self.match)
        top = self._sent.get(match or "")
        if top is None or msg.version > top:
            raise protocol.ClientError(protocol.BAD_COMMAND, f"version {msg.version} of that match was not sent "
                                       f"on this socket (Seen acknowledges an update you read)", msg.command_id)
        first = not self._acks
        self._acks = True
        if msg.version <= self._acked.get(match or "", -1) and not first:
            return
        self._acked[match or ""] = max(msg.version, self._acked.get(match or "", 0))
        if len(self._acked) > 4:
            self._acked.pop(next(iter(self._acked)))
        handed = self._handed
        if handed is not None and handed[2] == match:
            self.hub.receipts.acknowledged(self.player, handed, self._acked[match])

    async def _named(self, message: dict[str, Any], table: Table | None = None) -> dict[str, Any]:
        """``message`` with ``names`` ({player: display name}, gateway/names.py) when it names the
        players of a table: the lobby's ``seated`` (its ``table`` read here unless given), a
        ``settled``, an ``update`` with a view."""
        kind = message.get("kind")
        players: list[str] = []
        if kind == "update" and isinstance(message.get("view"), dict):
            players = [s["player"] for s in message["view"].get("seats") or [] if s]
        elif kind == "settled":
            players = list(message.get("scores") or {})
        elif kind == "lobby" and message.get("state") == "seated" and message.get("table"):
            if table is None or table.id != message["table"]:
                table = await self.hub.lobby.table(str(message["table"]))
            players = list(table.players) if table is not None else []
        if not players:
            return message
        try:
            return {**message, "names": await self.hub.names.names_of(players)}
        except Exception as exc:  # names are a nicety: never hold a message back for them
            log.warning("could not read display names: %s", exc)
            return message

    async def reject(self, command_id: str | None, code: str, reason: str, view: dict | None = None) -> None:
        """Send a ``rejected``; one the client gave no usable id for gets a fresh one, as every
        message does (docs/PROTOCOL.md: the gateway fills one in and echoes it back)."""
        await self.send(protocol.rejected(command_id or uuid.uuid4().hex, code, reason, view, self.match))

    async def close(self, code: int, reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            if self.ws.application_state != WebSocketState.DISCONNECTED:
                await self.ws.close(code=code, reason=reason[:120])
        except (RuntimeError, OSError):
            pass

    # -- life cycle -----------------------------------------------------------------------
    async def run(self, resume: Resume | None) -> None:
        hub = self.hub
        r = hub.redis
        hub.connections.add(self)
        hub.metrics.connections.labels(self.identity.role).inc()
        try:
            await self.send(protocol.welcome(self.player, self.identity.role, self.identity.room, hub.gateway_id,
                                             self.identity.expires_at, self.identity.name, limits=hub.limits))
            self.guard.start()  # 4401 at the token's exp, unless renewed (gateway/guard.py)
            if self.is_player:
                await hub.names.remember(self.player, self.identity.name)
                pipe = r.pipeline(transaction=False)  # the entry, and its notice (gateway/fanout.py)
                pipe.xadd(keys.gateway_session_key(self.player), {"conn": self.id, "gw": hub.gateway_id}, maxlen=10,
                          approximate=True)
                pipe.spublish(keys.gateway_session_key(self.player), "")
                added = (await pipe.execute(raise_on_error=False))[0]  # a refused notice only delays
                if isinstance(added, Exception):
                    raise added
                self._session_id = _s(added)
                # the positions first, the place after: whatever the lobby or the engine writes once
                # the place is read (the table seated a moment later, say) reaches the reader
                await self._take_positions()
                self.place = await hub.lobby.place(self.player)
                self.room = self.place.room
                self.grace_ms = await hub.lobby.grace_ms(self.place)
                if self.room:
                    await hub.lobby.present({self.player: (self.room, now_ms() + HEARTBEAT_SLACK_MS + self.grace_ms)})
                    await hub.lobby.came_back(self.player, self.room)  # a Reconnect if the grace had ended
                await self._greet(resume or Resume())
            self.subscription.start()
            await self._receive_loop()
        finally:
            self.closed = True
            self.guard.stop()
            self.subscription.stop()
            self.resync.cancel()
            hub.connections.discard(self)
            hub.metrics.connections.labels(self.identity.role).dec()
            if self.is_player and not self.replaced and not hub.stopping:
                hub.receipts.closed(self.player, self.match)  # the player's own leaving: clocks run on
                try:  # the grace window starts now (a reconnect within it changes nothing)
                    room = (await hub.lobby.place(self.player)).room or self.room
                    if room:
                        await hub.lobby.present({self.player: (room, now_ms() + hub.lobby.grace_ms_of(room))})
                except Exception as exc:
                    log.warning("could not start %s's grace window: %s", self.player, exc)

    async def _take_positions(self) -> None:
        """Where the reader starts: after the newest entry of each of the player's streams."""
        await self.subscription.take([keys.outbox_key(self.player), keys.gateway_session_key(self.player)],
                                     at={keys.gateway_session_key(self.player): self._session_id})

    async def _greet(self, resume: Resume) -> None:
        """The lobby state and the current view (or the updates after the client's version) at
        once; a private table's series: its totals and any open vote again (issue 39)."""
        for note in await self.hub.lobby.series_resync(self.player):
            await self.send(note)
        place = self.place
        table = place.table
        if place.state != "queued" and table is not None and table.status in AT_TABLE:
            self.match = self._announced = table.match
            await self.send(protocol.lobby("seated", table.room, table.id, table.match,
                                           bot_level=table.bot_level))
        elif place.state == "queued" or table is not None:
            await self.send(waiting_message(place))
        if self.match is not None:
            await self.resync.catch_up(self.match, resume.version_for(self.match), named=resume.match == self.match)

    # -- client → server ------------------------------------------------------------------
    async def _receive_loop(self) -> None:
        while not self.closed:
            try:
                raw = await receive_frame(self.ws)
            except WebSocketDisconnect:
                return
            except (RuntimeError, OSError):
                return
            try:
                if raw is None:
                    raise protocol.ClientError(protocol.BAD_COMMAND, "a binary frame: send each message as "
                                               "JSON in a text frame")
                msg = protocol.parse_client_message(raw, self.player, self.hub.limits.max_message_bytes)
            except protocol.ClientError as exc:
                self.hub.metrics.message_in("other")
                if await self.guard.admit("other", exc.command_id):
                    await self.reject(exc.command_id, exc.code, exc.reason)
                continue
            self.hub.metrics.message_in(msg.type)
            if not await self.guard.admit(msg.type, msg.command_id):
                continue
            try:
                await self._handle(msg)
            except protocol.ClientError as exc:
                await self.reject(exc.command_id or msg.command_id, exc.code, exc.reason)

    async def _handle(self, msg: Any) -> None:
        t = msg.type
        if t == "Auth":
            return await self.guard.renew(msg)  # a fresh token for the same player (docs/PROTOCOL.md §8)
        if t == "Watch":
            return await self._watch(msg)
        if t == "Sync" and not self.is_player and self.watching is not None:
            return await self.resync.request_view(self.watching, msg.command_id)  # the spectator view again
        if not self.is_player:
            raise protocol.ClientError(protocol.NOT_ALLOWED, f"a {self.identity.role} token may only Watch",
                                       msg.command_id)
        if t == "Join":
            return await self._join(msg)
        if t == "Seen":
            return self._seen(msg)
        if t == "Sync":
            return await self._sync(msg)
        if t == "Say":
            return await self._say(msg)
        if t == "Leave":
            return await self._leave(msg)
        if t in protocol.SERIES_TYPES:
            return await self._series(msg)
        notes_seen = self._notes_seen  # a lobby message during the lookup below makes its answer old
        known = self._seated
        if t in HOT and known is not None and known[1] == notes_seen:
            place = known[0]
        else:
            place = await self.hub.lobby.place(self.player)
        table = place.table
        if table is None or table.status not in AT_TABLE:
            table = await self._still_seated(place)
            if table is None:
                raise protocol.ClientError(protocol.NOT_SEATED, "you are not seated at a table (send Join first)",
                                           msg.command_id)
            place = Place("table", table.room, table)
        self.place = place
        match = table.match
        self.match = match
        self._know(place, notes_seen)
        fields: dict[str, Any] = {}
        if t == "Play":
            fields = {"cards": msg.cards, "text": msg.text, "reading_kind": msg.reading_kind,
                      "reading_rank": msg.reading_rank}
        if t == "Ready":
            # the player's own entropy for the fair deal, or a random one (docs/FAIRNESS.md)
            fields = {"client_seed": msg.client_seed if msg.client_seed is not None else secrets.token_hex(16)}
        if t in ("Play", "Pass") and msg.expected_version is not None:
            fields["expected_version"] = msg.expected_version  # the engine refuses a stale one (code stale)
        engine_id = channels.engine_command_id(self.player, msg.command_id)
        try:
            command = channels.player_command(t, match, self.player, engine_id, **fields)
        except Exception as exc:  # e.g. bad card notation the engine's model refuses
            raise protocol.ClientError(protocol.BAD_COMMAND, str(exc)[:300], msg.command_id)
        self.track(engine_id, t)
        await self.hub.sender.send(channels.stream_for(command), channels.entry(command))

    async def _still_seated(self, place: Place) -> Table | None:
        """The table of the match this socket was seated at, when its read model still has
        the player at it (seated, or between a finish and its settlement), else None.

        The place read model is fenced (engine/store/place.lua), but a place a master took
        and lost in a fail-over (no replica acknowledgement asked), or one an older release
        wrote unfenced, may still say ``queued``, or nothing, under a player's seat.  The
        table's read model is never written over a later version (engine/store/table_info.lua),
        and a player sits at one table at a time, so while it has them seated their commands
        go to its match rather than being refused ``not_seated`` until the table's next event."""
        if not self.match:
            return None
        table = await self.hub.lobby.table_of_match(self.match)
        if table is None or table.status not in AT_TABLE or self.player not in table.players:
            return None
        log.info("%s: the place read model says %r, the table %s has them seated: going on there", self.player,
                 place.state, table.id)
        return table

    async def adopt(self, match: str) -> bool:
        """An update of ``match``, which no ``seated`` announced to this socket: True once the
        client is told it is seated there (``seated``, as on connect) and caught up, when the
        player's table is at that match (its read model); False for any other match.

        The lobby's ``seated`` note is one entry of the player's stream: an entry a master took
        and lost in a fail-over (written before it could reach a replica) is gone, while the
        match's later updates (a paused clock's, from the timers) reach the stream; without this
        the socket dropped them and the player never heard of the match their clock ran in.  An
        update that merely overtakes its note is announced the same way (the note is then not
        sent again: ``_announced``)."""
        if not self.is_player or match in self._not_mine:
            return False
        table = await self.hub.lobby.table_of_match(match)
        if table is None or self.player not in table.players or table.status == "closed" or table.moved_past(match):
            if len(self._not_mine) >= 64:  # never this player's: not looked up again
                self._not_mine.clear()
            self._not_mine.add(match)
            return False
        if table.match != match or table.status not in AT_TABLE:
            return False  # the table's read model is not there yet (being created): a later update asks again
        if self.match == match:  # a note came meanwhile
            return True
        self._notes_seen += 1  # HOT commands look the place up again
        self._know(Place("table", table.room, table), self._notes_seen)
        log.debug("%s: an update of %s before any seated note: the table is there, announced", self.player, match)
        await self._move_to(match)
        await self.send(protocol.lobby("seated", table.room, table.id, match, bot_level=table.bot_level), table)
        await self.resync.catch_up(match, None)
        return True

    async def _move_to(self, match: str | None) -> None:
        """The socket shows ``match`` from now on, as the ``seated`` its caller sends next tells
        the client; the end of the match before goes out first (``Resync.left``)."""
        left, self.match = self.match, match
        self._announced = match
        if left is not None and left != match:
            await self.resync.left(left)

    async def follow(self, match: str) -> bool:
        """A spectator's: an update of ``match`` on the seated player's stream it reads.  True once
        the socket watches ``match`` (its view asked for) when ``match`` is the watched table's
        current match and the table has moved past the watched one (the next hand of a series,
        the next match at a table); False for any other match, whose updates stay dropped."""
        watched = self.watching
        if watched is None or table_of_match_id(match) != table_of_match_id(watched):
            return False
        table = await self.hub.lobby.table_of_match(match)
        if table is None or table.match != match or not table.moved_past(watched):
            return False
        self.watching = self.match = match
        await self.resync.left(watched)  # the end of the match before goes out first
        await self.resync.request_view(match, None)
        return True

    def ended(self, match: str) -> None:
        """The client was sent an end of ``match`` (gateway/resync.py): HOT commands look the
        place up again (a removal closes the table: ``not_seated`` from here, as before)."""
        known = self._seated
        if known is not None and known[0].table is not None and known[0].table.match == match:
            self._seated = None

    def _know(self, place: Place, notes_seen: int) -> None:
        """The place :data:`HOT` commands use while no later note of the lobby comes: a table
        seated in a match not over (after its finish the place is looked up again)."""
        table = place.table
        seated = table is not None and table.status == "seated" and table.finished != table.match
        self._seated = (place, notes_seen) if seated else None

    async def _leave(self, msg: Any) -> None:
        """The player's Leave, to the engine's lobby (the room of their place): it decides it
        wherever the player is (the queue, a table, a match).  Nowhere: ``not_seated`` here."""
        try:
            sent = await self.hub.lobby.quit(self.player, msg.command_id)
        except BadCommand as exc:
            raise protocol.ClientError(protocol.BAD_COMMAND, str(exc)[:300], msg.command_id) from None
        if not sent:
            raise protocol.ClientError(protocol.NOT_SEATED, "you are not in a room (send Join first)",
                                       msg.command_id)
        self.track(channels.engine_command_id(self.player, msg.command_id), "Leave")

    def track(self, engine_id: str, ctype: str) -> None:
        """A command sent to the engine: its answer's round trip is measured (``answered``)."""
        now = time.monotonic()
        if len(self.pending) > 200:  # commands that never produced an update (bounded memory)
            for k, (at, _t) in list(self.pending.items()):
                if now - at > PENDING_TTL_S:
                    del self.pending[k]
        self.pending[engine_id] = (now, ctype)

    def answered(self, engine_id: str) -> None:
        sent = self.pending.pop(engine_id, None)
        if sent is not None:
            self.hub.metrics.round_trip.labels(sent[1]).observe(time.monotonic() - sent[0])

    async def _join(self, msg: Any) -> None:
        room = msg.room
        if (problem := keys.player_id_problem(self.player)) is not None:  # a hash tag (issue 24 §2)
            raise protocol.ClientError(protocol.NOT_ALLOWED, problem, msg.command_id)
        cfg = self.hub.rooms.get(room)
        if cfg is None:
            raise protocol.ClientError(protocol.UNKNOWN_ROOM, f"no room {room!r} (rooms: "
                                       f"{', '.join(self.hub.rooms.names())})", msg.command_id)
        if self.identity.room is not None and self.identity.room != room:
            raise protocol.ClientError(protocol.NOT_ALLOWED, f"this token is for room {self.identity.room!r}",
                                       msg.command_id)
        # balances and everything else about the seat are the engine's queue's
        try:
            await self.hub.lobby.join(self.player, room, msg.command_id)
        except BadCommand as exc:  # a command the lobby's model refuses (a player id too long, say)
            raise protocol.ClientError(protocol.BAD_COMMAND, str(exc)[:300], msg.command_id) from None
        self.track(channels.engine_command_id(self.player, msg.command_id), "Join")

    async def _series(self, msg: Any) -> None:
        """A private table's command (issue 39), to the engine's lobby; the answer comes on the
        player's stream (``private_table``, ``series``, ``lobby``, or ``rejected`` with its
        code).  JoinTable attempts are limited per player and per address, CreateTables per
        player: ``rate_limited``."""
        if (problem := keys.player_id_problem(self.player)) is not None:
            raise protocol.ClientError(protocol.NOT_ALLOWED, problem, msg.command_id)
        if msg.type == "CreateTable":
            if self.hub.rooms.get(msg.room) is None:
                raise protocol.ClientError(protocol.UNKNOWN_ROOM, f"no room {msg.room!r}", msg.command_id)
            if self.identity.room is not None and self.identity.room != msg.room:
                raise protocol.ClientError(protocol.NOT_ALLOWED, f"this token is for room {self.identity.room!r}",
                                           msg.command_id)
            lim = self.hub.limits
            wait_ms = await self.hub.lobby.create_allowed(self.player, lim.create_table_per_player,
                                                          lim.join_table_window_s)
            if wait_ms:
                self.hub.metrics.refused("create_table_limited")
                await self.send(protocol.rejected(msg.command_id, protocol.RATE_LIMITED, "too many tables opened: "
                                                  "wait before opening another", None, None, wait_ms))
                return
        if msg.type == "JoinTable":
            lim = self.hub.limits
            wait_ms = await self.hub.lobby.join_allowed(self.player, self.address, lim.join_table_per_player,
                                                        lim.join_table_per_address, lim.join_table_window_s)
            if wait_ms:
                self.hub.metrics.refused("join_table_limited")
                await self.send(protocol.rejected(msg.command_id, protocol.RATE_LIMITED, "too many JoinTable "
                                                  "attempts: wait before trying a code again", None, None, wait_ms))
                return
        await self.hub.lobby.send_series(self.player, msg.command_id, msg, self.identity.room)
        self.track(channels.engine_command_id(self.player, msg.command_id), msg.type)

    async def _sync(self, msg: Any) -> None:
        place = await self.hub.lobby.place(self.player)
        self.place = place
        table = place.table
        if table is None or table.status not in AT_TABLE:  # no match to sync: where the player is
            await self.send(waiting_message(place, msg.command_id))
            return
        self.match = table.match
        version = Resume(msg.version, msg.match).version_for(table.match)
        if version is not None:  # the updates after it that the socket handed on; it reads on from there
            self.resync.forget(table.match)
            await self.resync.catch_up(table.match, version, named=msg.match == table.match)
            if msg.command_id:  # the updates after it went out (or the view was asked for): answered
                await self.send(protocol.ack(msg.command_id))
            return
        await self.resync.request_view(table.match, msg.command_id)

    async def _say(self, msg: Any) -> None:
        """A quick phrase or emote (gateway/say.py): a known id, from a player seated at a table,
        at most one every 3 s; the engine checks the seat in the match (a match over: refused)
        and writes it to both players' streams, not to the match log."""
        if not say.known(msg.phrase):
            raise protocol.ClientError(protocol.UNKNOWN_PHRASE, f"not a quick phrase id (one of "
                                       f"{', '.join(say.SAY_IDS)})", msg.command_id)
        place = await self.hub.lobby.place(self.player)
        table = place.table
        if table is None or table.status != "seated":
            raise protocol.ClientError(protocol.NOT_SEATED, "you are not seated at a table: only the players of "
                                       "a match may Say", msg.command_id)
        wait_ms = self.hub.says.take(self.player, time.monotonic())
        if wait_ms:
            self.hub.metrics.refused("say_limited")
            await self.send(protocol.rejected(msg.command_id, protocol.RATE_LIMITED, f"at most one Say every "
                                              f"{self.hub.says.interval_s:g} s", None, table.match, wait_ms))
            return
        engine_id = channels.engine_command_id(self.player, msg.command_id)
        command = channels.player_command("Say", table.match, self.player, engine_id, phrase=msg.phrase)
        self.track(engine_id, "Say")
        await self.hub.sender.send(channels.stream_for(command), channels.entry(command))

    async def _watch(self, msg: Any) -> None:
        if self.is_player:
            raise protocol.ClientError(protocol.NOT_ALLOWED, "players play; Watch needs a spectator token",
                                       msg.command_id)
        table = await self.hub.lobby.table_of_match(msg.match)
        if table is None:
            raise protocol.ClientError(protocol.UNKNOWN_MATCH, f"no match {msg.match!r} at any table",
                                       msg.command_id)
        if self.identity.room is not None and self.identity.room != table.room:
            raise protocol.ClientError(protocol.NOT_ALLOWED, f"this token is for room {self.identity.room!r}",
                                       msg.command_id)
        if self.identity.role != "operator" and not await self.hub.lobby.spectators_allowed(table.id):
            raise protocol.ClientError(protocol.NOT_ALLOWED, "this private table's owner allows no spectators",
                                       msg.command_id)
        self.watching = self.match = msg.match
        self.source = table.players[0]
        await self.subscription.take([keys.outbox_key(self.source)])
        self.resync.forget(msg.match, unseen=True)
        self.subscription.restart()
        await self.resync.request_view(msg.match, None)

    # -- server → client ------------------------------------------------------------------
    async def deliver(self, stream: str, entry_id: str, fields: dict) -> None:
        """One new entry of a stream this socket reads (its subscription's reader calls it)."""
        if self.is_player and stream == keys.gateway_session_key(self.player):
            if _s(fields.get(b"conn", fields.get("conn"))) != self.id:
                self.replaced = True
                await self.close(CLOSE_REPLACED, "replaced by a newer connection of the same player")
            return
        e = outbox.parse_entry(entry_id, fields)
        if e.kind in LOBBY_KINDS:
            if self.is_player and stream == keys.outbox_key(self.player):
                await self._lobby_message(e)
            return  # a spectator never gets what the lobby tells the player it reads
        await self.resync.on_entry(e)

    async def _lobby_message(self, e: outbox.OutEntry) -> None:
        """What the engine's lobby tells the player (a ``lobby`` or ``settled`` entry of their
        stream), forwarded: the ``command_id`` is the client's own (or null); a ``seated`` names
        the players, makes its match the socket's (HOT commands go there) and catches it up.

        A ``seated`` of a match its table has moved past (a feed entry handled late: the table's
        read model, written before the note and never taken back, shows a later match) names
        the table's current match instead while the table still seats the player, and is
        dropped otherwise (the socket's room left as it was): it never takes the socket back to
        a match that is over.  A dropped one that answered a Join this socket is waiting for
        (``already_seated``) is answered ``rejected`` ``stale`` instead: no Join goes unanswered."""
        self._notes_seen += 1  # the lobby moved this player: HOT commands look the place up again
        note = dict(e.body)
        table: Table | None = None
        if note.get("kind") in ("private_table", "series"):
            engine_id = note.get("command_id")
            note["command_id"] = channels.client_command_id(self.player, engine_id) if engine_id else None
            if note["command_id"] is not None:
                self.answered(str(engine_id))
        if note.get("kind") == "lobby":
            engine_id = note.get("command_id")
            note["command_id"] = channels.client_command_id(self.player, engine_id) if engine_id else None
            waited = engine_id is not None and str(engine_id) in self.pending  # this socket's own Join
            if note["command_id"] is not None:
                self.answered(str(engine_id))
            state, room = note.get("state"), note.get("room")
            before = (self.room, self.grace_ms)  # a note dropped below changes nothing
            if state in ("queued", "seated") and room:
                if room != self.room:
                    self.room = room
                    self.grace_ms = self.hub.lobby.grace_ms_of(room)
            elif state == "removed" and room == self.room:
                self.room = None
            if state == "seated":
                if note.get("match") and note.get("match") == self._announced and note["command_id"] is None:
                    return  # the greeting said so already (the entry came after the positions)
                if note.get("table"):  # read once: the names, the place the Ready goes to, a late note
                    table = await self.hub.lobby.table(str(note["table"]))
                    if table is not None and table.moved_past(str(note.get("match") or "")):
                        if table.status not in AT_TABLE or self.player not in table.players:
                            log.info("%s: a seated of %s, which its table has moved past: dropped", self.player,
                                     note.get("match"))
                            self.room, self.grace_ms = before
                            if waited:  # the Join this socket sent is still answered
                                await self.send(protocol.rejected(
                                    note["command_id"], protocol.STALE,
                                    "you were at a table that has moved on since: join again", None, None))
                            return
                        note = {**note, "match": table.match, "bot_level": table.bot_level}
                        if table.match == self._announced and note["command_id"] is None:
                            return
                if table is not None and table.match == note.get("match"):
                    self._know(Place("table", table.room, table), self._notes_seen)
                await self._move_to(note.get("match"))
        await self.send(note, table)
        if note.get("kind") == "lobby" and note.get("state") == "seated" and self.match \
                and not self.resync.has(self.match):
            # the match's first updates came before the table said so: its view now
            await self.resync.catch_up(self.match, None)


@dataclass(frozen=True, slots=True)
class Resume:
    """What a client has of its match: the last ``version`` it read, of ``match`` (None: it did
    not say).  A version of another match than the table's is not applied.

    >>> Resume(8, "t1-2").version_for("t1-3"), Resume(8, "t1-3").version_for("t1-3"), Resume(8).version_for("t1-3")
    (None, 8, 8)
    """

    version: int | None = None
    match: str | None = None

    def version_for(self, match: str) -> int | None:
        return self.version if self.match is None or self.match == match else None


async def receive_frame(ws: Any) -> str | None:
    """The socket's next message: its text, or None for a binary frame (the protocol is JSON in
    text frames, docs/PROTOCOL.md).  A close raises :class:`WebSocketDisconnect`, as Starlette's
    ``receive_text`` does."""
    message = await ws.receive()
    if message["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(message.get("code", 1000), message.get("reason"))
    text = message.get("text")
    return text if isinstance(text, str) else None


def _resume_match(value: object) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= 200 else None


async def authenticate(hub: Hub, ws: WebSocket) -> tuple[Identity, Resume] | None:
    """The identity of a freshly accepted socket and what it resumes, or None after closing it 4401."""
    token = ws.query_params.get("token")
    version: int | None = None
    qv = ws.query_params.get("version")
    if qv is not None and qv.isascii() and qv.isdigit() and len(qv) <= 18:
        version = int(qv)
    match = _resume_match(ws.query_params.get("match"))
    claimed: object = None
    if token is None:
        try:
            raw = await asyncio.wait_for(receive_frame(ws), AUTH_TIMEOUT_S)
        except asyncio.TimeoutError:
            hub.metrics.auth_failures.labels("timeout").inc()
            await ws.close(code=CLOSE_UNAUTHORIZED, reason=f"no token: send ?token= or an Auth message "
                                                           f"within {AUTH_TIMEOUT_S:.0f} s")
            return None
        except (WebSocketDisconnect, RuntimeError):
            return None
        try:
            data = None if raw is None else json.loads(raw)  # None: a binary frame
        except ValueError:
            data = None
        if not isinstance(data, dict) or data.get("type") != "Auth" or not isinstance(data.get("token"), str):
            hub.metrics.auth_failures.labels("missing").inc()
            hub.metrics.refused("before_auth")  # one message before the Auth, and it must be the Auth
            await ws.close(code=CLOSE_UNAUTHORIZED, reason="no token: the first message must be "
                                                           '{"type": "Auth", "token": ...} (a text frame)')
            return None
        token = data["token"]
        claimed = data.get("player")  # optional; it must be the token's subject (gateway/schemas)
        v = data.get("version")
        if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
            version, match = v, _resume_match(data.get("match"))  # both from the Auth
    try:
        identity = verify(hub.secret, token, policy=hub.token_policy)
    except TokenError as exc:
        hub.metrics.auth_failures.labels(exc.code).inc()
        await ws.close(code=CLOSE_UNAUTHORIZED, reason=str(exc)[:120])
        return None
    if claimed is not None and claimed != identity.player:
        hub.metrics.auth_failures.labels("invalid").inc()
        await ws.close(code=CLOSE_UNAUTHORIZED, reason="the Auth message names another player than the token")
        return None
    return identity, Resume(version, match)
