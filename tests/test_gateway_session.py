"""One gateway connection (gateway/session.py) against a real Redis, with the orderings that
a loaded machine produces forced on purpose: the lobby seating a table between the moment a
connection reads the player's place and the moment it starts reading their streams, the
engine refusing the gateway's own Sync, the client's own Sync answered after the table moved
on.  The engine is played by a small task that answers the Syncs it finds on ``sk:inbox``
in the engine's own format (docs/PROTOCOL.md §2, ``kind=sync``).

Issue 14 "Reconnect": on connect or reconnect the player at once gets the current view of
their table or match.

The lobby is the engine's (issue 34): the tests write what it writes -- the player's place
``sk:place:{<player>}``, the table's read model, the ``lobby`` entries of the player's stream --
and read what the gateway sends it (the lobby channel ``sk:{b<N>}:lobby``)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import jsonschema
import msgpack
import pytest
from starlette.websockets import WebSocketState

from engine.match.commands import decode_command
from engine.service.channels import OPS, PLAYER
from engine.store import keys
from gateway import channels, session
from gateway.lobby import Lobby
from gateway.metrics import GatewayMetrics
from gateway.rooms import RoomBook
from gateway.schemas_gen import load as load_schema
from gateway.tokens import Identity

pytestmark = [pytest.mark.redis]

WAIT_S = 30.0  # a bound that only stops a broken run from hanging; nothing is timed


class FakeSocket:
    """What :class:`gateway.session.Connection` uses of a Starlette WebSocket."""

    def __init__(self) -> None:
        self.out: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.inbox: asyncio.Queue[str | None] = asyncio.Queue()
        self.application_state = WebSocketState.CONNECTED

    async def send_text(self, text: str) -> None:
        await self.out.put(json.loads(text))

    async def receive(self) -> dict[str, Any]:
        raw = await self.inbox.get()
        if raw is None:
            return {"type": "websocket.disconnect", "code": 1000}
        return {"type": "websocket.receive", "text": raw}

    async def close(self, code: int = 1000, reason: str = "") -> None:
        self.application_state = WebSocketState.DISCONNECTED
        await self.inbox.put(None)

    async def expect(self, pred: Callable[[dict[str, Any]], bool], what: str) -> dict[str, Any]:
        seen: list[dict[str, Any]] = []

        async def find() -> dict[str, Any]:
            while True:
                m = await self.out.get()
                seen.append(m)
                if pred(m):
                    return m
        try:
            return await asyncio.wait_for(find(), WAIT_S)
        except asyncio.TimeoutError:
            pytest.fail(f"never got {what}; got {seen}")


class StreamFake:
    """A fake of the engine's that reads streams in a loop until :meth:`stop`, which ends it
    at its next read (200 ms at most).  It is stopped, never cancelled: on Python 3.11 a
    cancellation that lands as a redis-py command completes can be lost (``asyncio.wait_for``
    returns the result), and a cancelled loop that reads Redis then never ends."""

    def __init__(self) -> None:
        self._stopping = asyncio.Event()

    def running(self) -> bool:
        return not self._stopping.is_set()

    async def stop(self, task: asyncio.Task) -> None:
        self._stopping.set()
        await asyncio.wait_for(task, WAIT_S)


class FakeEngine(StreamFake):
    """Answers each Sync on ``sk:inbox`` like the engine: a ``sync`` entry with the view, or,
    with ``refuse``, a rejection (with the view when the match exists, as the engine does)."""

    def __init__(self, redis: Any, versions: dict[str, int], refuse: bool = False) -> None:
        super().__init__()
        self.redis = redis
        self.versions = versions  # match -> its current version (0: no such match)
        self.refuse = refuse
        self.syncs: list[tuple[str, str, str]] = []  # (match, player, command id) in arrival order

    def view(self, match: str, player: str) -> dict[str, Any]:
        return {"match_id": match, "you": player, "phase": "seating", "version": self.versions[match],
                "hand": [1, 2, 3]}

    async def run(self) -> None:
        positions = {s: "0-0" for s in PLAYER.streams()}  # every bucket's inbox (issue 24 §2)
        while self.running():
            reply = await self.redis.xread(dict(positions), block=200)
            for stream, entries in reply or ():
                for entry_id, fields in entries:
                    positions[stream.decode() if isinstance(stream, bytes) else stream] = entry_id
                    cmd = decode_command(fields[b"c"])
                    if cmd.type != "Sync":
                        continue
                    self.syncs.append((cmd.match_id, cmd.player, cmd.command_id))
                    v = self.versions.get(cmd.match_id, 0)
                    body = {"match_id": cmd.match_id, "command_id": cmd.command_id, "version": v}
                    if v:
                        body["view"] = self.view(cmd.match_id, cmd.player)
                    if self.refuse or not v:
                        fields_out = {"kind": "rejected", "match": cmd.match_id, "command_id": cmd.command_id,
                                      "code": "unknown_match" if not v else "bad_command",
                                      "reason": "refused by the test", "version": v}
                        if v:
                            fields_out["body"] = msgpack.packb(body)
                    else:
                        fields_out = {"kind": "sync", "match": cmd.match_id, "command_id": cmd.command_id,
                                      "version": v, "body": msgpack.packb(body)}
                    await self.redis.xadd(keys.outbox_key(cmd.player), fields_out)


@pytest.fixture
def aredis(redis_server):
    import redis
    import redis.asyncio as aioredis

    url = redis_server.db_url(6)
    with redis.Redis.from_url(url) as c:
        c.flushdb()
    return lambda: aioredis.Redis.from_url(url, socket_timeout=30)


async def _with_connection(aredis, engine_versions: dict[str, int], body: Callable[..., Awaitable[None]],
                           *, refuse: bool = False, place_hook: Callable[..., Awaitable[None]] | None = None,
                           player: str = "alice", role: str = "player") -> None:
    r = aredis()
    rooms = RoomBook.load()
    lobby = Lobby(r, rooms, "gw-test")
    hub = session.Hub(redis=r, secret=b"x" * 32, rooms=rooms, lobby=lobby, gateway_id="gw-test",
                      metrics=GatewayMetrics())
    engine = FakeEngine(r, engine_versions, refuse=refuse)
    engine_task = asyncio.create_task(engine.run())
    if place_hook is not None:
        original, original_quit = lobby.place, lobby.quit

        async def place(p: str):
            got = await original(p)
            await place_hook(lobby)  # what the lobby did meanwhile
            return got

        async def quit(p: str, command_id: str | None = None):
            await place_hook(lobby)  # what the lobby did just before the Leave's step
            return await original_quit(p, command_id)
        lobby.place = place  # type: ignore[method-assign]
        lobby.quit = quit  # type: ignore[method-assign]
    ws = FakeSocket()
    conn = session.Connection(hub, ws, Identity(player, role, None, 4102444800))  # type: ignore[arg-type]
    run = asyncio.create_task(conn.run(None))
    try:
        await body(ws, conn, engine)
    finally:
        try:
            await ws.close()
            await asyncio.wait_for(run, WAIT_S)
        finally:  # whatever the connection's end raised: the fake stopped, never left to a cancellation
            await engine.stop(engine_task)
            await asyncio.wait_for(hub.fanout.aclose(), WAIT_S)  # as the gateway's shutdown does
            await asyncio.wait_for(r.aclose(), WAIT_S)


async def _place(r: Any, player: str, state: str | None, room: str = "points", table: str = "",
                 match: str = "") -> None:
    """The engine's read model of where ``player`` is (None: nowhere)."""
    await r.delete(keys.place_key(player))
    if state is not None:
        await r.hset(keys.place_key(player), mapping={"state": state, "room": room, "table": table,
                                                       "match": match})


async def _table(r: Any, status: str, table: str = "t1", match: str = "t1-1", a: str = "alice",
                 b: str = "bob", room: str = "points") -> None:
    """The engine's read model of a table (and both players' places at it)."""
    await r.hset(keys.table_info_key(table), mapping={"room": room, "a": a, "b": b, "n": match.rpartition("-")[2],
                                                      "match": match, "status": status, "finished": "",
                                                      "escaped": "", "bot_level": ""})
    for p in (a, b):
        await _place(r, p, "table", room, table, match)


async def _note(r: Any, player: str, state: str, room: str = "points", table: str | None = None,
                match: str | None = None, reason: str | None = None, command_id: str | None = None) -> None:
    """A ``lobby`` entry of the player's stream as the engine's lobby writes it, and its notice."""
    m = {"kind": "lobby", "state": state, "room": room, "table": table, "match": match, "reason": reason,
         "bot_level": None, "command_id": command_id}
    await r.xadd(keys.outbox_key(player), {"kind": "lobby", "m": json.dumps(m)})
    await r.spublish(keys.outbox_key(player), "")


async def _close(r: Any, table: str = "t1", requeued: str = "alice") -> None:
    """The engine closes the table (bob left) and queues ``requeued`` again (its note)."""
    await r.hset(keys.table_info_key(table), "status", "closed")
    await _place(r, "bob", None)
    await _place(r, requeued, "queued")
    await _note(r, requeued, "queued", reason="opponent_left")


async def _table_creating(r: Any) -> None:
    """alice and bob paired at t1 (its match t1-1 not created yet)."""
    await _table(r, "creating")


async def _seat(r: Any, table: str = "t1", match: str = "t1-1") -> None:
    """The engine seats the table in ``match``: the read model, then both players' ``seated``."""
    await _table(r, "seated", table, match)
    for p in ("alice", "bob"):
        await _note(r, p, "seated", table=table, match=match)


async def _at_a_seated_table(aredis, engine_versions: dict[str, int], body: Callable[..., Awaitable[None]],
                             **kwargs: Any) -> None:
    """alice and bob seated at t1 (match t1-1), then ``body`` on alice's connection."""
    r = aredis()
    await _table(r, "seated")
    await r.aclose()
    await _with_connection(aredis, engine_versions, body, **kwargs)


def _view_update(match: str) -> Callable[[dict[str, Any]], bool]:
    return lambda m: m["kind"] == "update" and m["match"] == match and m["view"] is not None


def test_a_table_seated_right_after_the_connection_read_the_place_still_gives_the_view(aredis):
    """The lobby seats the table (its ``seated`` note) after the connection read "creating" and
    before it started reading the notes: the player still hears ``seated`` and gets the view."""
    seated_once: list[bool] = []

    async def seat_now(lobby: Lobby) -> None:
        if not seated_once:
            seated_once.append(True)
            await _seat(lobby.redis)

    async def body(ws: FakeSocket, conn: session.Connection, engine: FakeEngine) -> None:
        await ws.expect(lambda m: m["kind"] == "lobby" and m["state"] == "seated" and m["match"] == "t1-1",
                        "seated")
        got = await ws.expect(_view_update("t1-1"), "the view of t1-1")
        assert got["view"]["you"] == "alice" and got["version"] == 3

    async def main() -> None:
        r = aredis()
        await _table_creating(r)
        await r.aclose()
        await _with_connection(aredis, {"t1-1": 3}, body, place_hook=seat_now)

    asyncio.run(main())


def test_seated_once_even_when_the_note_and_the_place_both_say_so(aredis):
    """Seated before the connection read its place but after it took its stream positions:
    one ``seated`` message and one view, not two."""
    async def seat_now(lobby: Lobby) -> None:
        pass

    async def body(ws: FakeSocket, conn: session.Connection, engine: FakeEngine) -> None:
        await ws.expect(_view_update("t1-1"), "the view of t1-1")
        await conn.send({"kind": "welcome", "player": "marker", "role": "player", "room": None,
                         "gateway": "gw-test"})  # everything sent before it is in the queue now
        await ws.expect(lambda m: m["kind"] == "welcome" and m["player"] == "marker", "the marker")
        sent = [m for m in conn_log if m["kind"] in ("lobby", "update")]
        assert [m["kind"] for m in sent] == ["lobby", "update"], sent

    conn_log: list[dict[str, Any]] = []

    async def main() -> None:
        r = aredis()
        await _table_creating(r)
        await r.aclose()

        original_send = session.Connection.send

        async def logging_send(self, message):
            conn_log.append(message)
            await original_send(self, message)

        session.Connection.send = logging_send  # type: ignore[method-assign]
        original_positions = session.Connection._take_positions

        async def positions_then_seat(self):
            await original_positions(self)
            await _seat(self.hub.redis)
        session.Connection._take_positions = positions_then_seat  # type: ignore[method-assign]
        try:
            await _with_connection(aredis, {"t1-1": 3}, body, place_hook=seat_now)
        finally:
            session.Connection.send = original_send  # type: ignore[method-assign]
            session.Connection._take_positions = original_positions  # type: ignore[method-assign]

    asyncio.run(main())


def test_the_gateways_own_sync_refused_still_gives_the_view_the_refusal_carries(aredis, monkeypatch):
    """The engine refuses the connection's Sync but (as it does for every refusal of a seated
    player's command) sends the current view with it: the client gets that view, with no wait
    for the fallback (which is switched off here)."""
    monkeypatch.setattr(session, "GAP_WAIT_S", 10_000.0)

    async def body(ws: FakeSocket, conn: session.Connection, engine: FakeEngine) -> None:
        got = await ws.expect(_view_update("t1-1"), "the view of t1-1")
        assert got["version"] == 5 and got["command_id"] is None

    asyncio.run(_at_a_seated_table(aredis, {"t1-1": 5}, body, refuse=True))


def test_the_clients_own_sync_is_answered_with_an_update_carrying_the_view(aredis):
    """Issue 14: ``Sync`` → an ``update`` with the view and the client's command id, even when
    the table has moved on to its next match before the engine's answer came back."""
    async def body(ws: FakeSocket, conn: session.Connection, engine: FakeEngine) -> None:
        await ws.expect(_view_update("t1-1"), "the first view")
        await ws.inbox.put(json.dumps({"type": "Sync", "command_id": "s1"}))
        got = await ws.expect(lambda m: m["kind"] == "update" and m.get("command_id") == "s1", "the Sync's answer")
        assert got["match"] == "t1-1" and got["view"]["you"] == "alice" and got["version"] == 4
        # the table moves on while the client's next Sync is on its way: the answer still comes
        real_xadd = conn.hub.redis.xadd

        async def xadd_then_move(stream, fields, *a, **kw):
            out = await real_xadd(stream, fields, *a, **kw)
            if stream.endswith(":inbox") and decode_command(fields["c"]).command_id.endswith(":s2"):
                conn.match = "t1-2"
            return out
        conn.hub.redis.xadd = xadd_then_move
        await ws.inbox.put(json.dumps({"type": "Sync", "command_id": "s2"}))
        got = await ws.expect(lambda m: m["kind"] == "update" and m.get("command_id") == "s2", "the second answer")
        assert got["match"] == "t1-1" and got["view"] is not None
        assert [c for _m, _p, c in engine.syncs][-1] == channels.engine_command_id("alice", "s2")

    asyncio.run(_at_a_seated_table(aredis, {"t1-1": 4}, body))


@pytest.mark.parametrize("where, expected", [
    (None, ("removed", None, None, None)),                       # in no room
    ("queued", ("queued", "points", None, None)),                # in the room's queue
    ("creating", ("queued", "points", "t1", None)),              # paired, the table's match not seated yet
])
def test_a_sync_at_no_tables_match_is_answered_where_the_player_is(aredis, where, expected):
    """A Sync with no match to sync gets the ``lobby`` message of where the player is, with the
    Sync's command id: a state and reason the schema allows (never free text)."""
    server = jsonschema.Draft202012Validator(load_schema("server.json"))

    async def body(ws: FakeSocket, conn: session.Connection, engine: FakeEngine) -> None:
        await ws.inbox.put(json.dumps({"type": "Sync", "command_id": "s1"}))
        got = await ws.expect(lambda m: m["kind"] == "lobby" and m.get("command_id") == "s1", "the Sync's answer")
        assert (got["state"], got["room"], got["table"], got["reason"]) == expected
        assert not list(server.iter_errors(got)), got

    async def setup() -> None:
        r = aredis()
        if where == "creating":
            await _table_creating(r)
        else:
            await _place(r, "alice", where)
        await r.aclose()

    asyncio.run(setup())
    asyncio.run(_with_connection(aredis, {}, body))


def test_the_engines_ack_of_a_ready_reaches_the_client_as_ack_with_its_command_id(aredis):
    """Issue 36: a Ready that changes nothing is answered ``{"kind": "ack", "command_id"}``; an ack
    of a command this client did not send is not forwarded."""
    async def body(ws: FakeSocket, conn: session.Connection, engine: FakeEngine) -> None:
        await ws.expect(_view_update("t1-1"), "the first view")
        await ws.inbox.put(json.dumps({"type": "Ready", "command_id": "r1"}))
        await _eventually(lambda: _has_command(conn.hub.redis, "t1-1", ("Ready", "alice")), "the Ready sent")
        out = keys.outbox_key("alice")
        await conn.hub.redis.xadd(out, {"kind": "ack", "match": "t1-1", "command_id": "lobby:x", "version": 4})
        await conn.hub.redis.xadd(out, {"kind": "ack", "match": "t1-1", "version": 4,
                                        "command_id": channels.engine_command_id("alice", "r1")})
        got = await ws.expect(lambda m: m["kind"] == "ack", "the ack")
        assert got == {"kind": "ack", "command_id": "r1"}
        assert channels.engine_command_id("alice", "r1") not in conn.pending  # answered

    asyncio.run(_at_a_seated_table(aredis, {"t1-1": 4}, body))


# -- the lobby's rooms: registered, then named (issue 12 "Rooms are registered, not sent") ------
class FakeOps(StreamFake):
    """Accepts every command on ``sk:ops`` like the engine (AddRoom stored in ``sk:rooms``)."""

    def __init__(self, redis: Any, before_reply: Callable[[Any], Awaitable[None]] | None = None) -> None:
        super().__init__()
        self.redis = redis
        self.commands: list[Any] = []
        self.before_reply = before_reply  # what happens meanwhile, before the engine answers

    async def run(self) -> None:
        from engine.service.rooms import ROOMS_KEY, named

        positions = {s: "0-0" for s in OPS.streams()}  # sk:ops and every bucket's sk:{b<N>}:ops
        while self.running():
            reply = await self.redis.xread(dict(positions), block=200)
            for stream, entries in reply or ():
                for entry_id, fields in entries:
                    positions[stream.decode() if isinstance(stream, bytes) else stream] = entry_id
                    cmd = decode_command(fields[b"c"])
                    self.commands.append(cmd)
                    if cmd.type == "AddRoom":
                        await self.redis.hset(ROOMS_KEY, cmd.name,
                                              json.dumps(named(cmd.name, cmd.config).to_record(), sort_keys=True))
                    if self.before_reply is not None:
                        await self.before_reply(cmd)
                    await self.redis.xadd(fields[b"reply_to"].decode(),
                                          {"kind": "accepted", "command_id": cmd.command_id})


def test_the_lobby_registers_its_file_rooms_once_and_offers_the_registrys(aredis, tmp_path):
    from engine.service.rooms import ROOMS_KEY
    from tests.gateway_support import write_room

    async def main() -> None:
        r = aredis()
        rooms = RoomBook.load([write_room(tmp_path / "quick.toml", "quick", turn_seconds=7)])
        # a room an operator registered elsewhere (shuangkou room add) is offered too
        other = {**rooms.get("points").to_record(), "name": "other", "turn_seconds": 9}
        await r.hset(ROOMS_KEY, "other", json.dumps(other))
        lobby = Lobby(r, rooms, "gw-rooms")
        ops = FakeOps(r)
        tasks = [asyncio.create_task(ops.run())]
        stop = asyncio.Event()
        tasks.append(asyncio.create_task(lobby.run(stop)))
        try:
            await _eventually(lambda: rooms.registered("quick"), "quick registered")
            assert await lobby.register_rooms() == []  # again: nothing to do
        finally:
            stop.set()  # the lobby's own loops end on it (a cancellation only hurries them)
            await ops.stop(tasks[0])
            tasks[1].cancel()
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), WAIT_S)
            await r.aclose()
        types = [c.type for c in ops.commands]
        assert types == ["AddRoom"] and ops.commands[0].name == "quick" and ops.commands[0].replace
        assert rooms.get("other") is not None and rooms.get("other").turn_seconds == 9
        assert rooms.registered("quick") and not rooms.registered("nope")

    asyncio.run(main())


def test_an_operator_command_that_times_out_is_no_longer_waited_for(aredis):
    """A gateway's AddRoom whose reply never comes raises TimeoutError and leaves no waiter
    behind (one per command id would pile up); a reply that comes is matched and forgotten."""
    from engine.match.commands import AddRoom

    async def main() -> None:
        r = aredis()
        lobby = Lobby(r, RoomBook.load(), "gw-t", send_timeout_s=0.05)
        cmd = AddRoom(command_id="gw:add:1", name="quick", config=RoomBook.load().get("points").to_record())
        with pytest.raises(asyncio.TimeoutError):
            await lobby._send_ops(cmd)
        assert lobby.replies._waiting == {}
        stop = asyncio.Event()
        await lobby.replies.start()
        reader = asyncio.create_task(lobby.replies.run(stop))
        lobby.send_timeout_s = 5.0
        sent = asyncio.create_task(lobby._send_ops(cmd))
        await _eventually(lambda: "gw:add:1" in lobby.replies._waiting, "the waiter")
        await r.xadd(lobby.replies.stream, {"command_id": "gw:add:1", "status": "accepted"})
        assert (await sent)["status"] == "accepted" and lobby.replies._waiting == {}
        stop.set()
        await asyncio.gather(reader, return_exceptions=True)
        await r.aclose()

    asyncio.run(main())


def test_a_registry_room_that_does_not_validate_is_not_offered():
    rooms = RoomBook.load()
    bad = {**rooms.get("points").to_record(), "turn_seconds": -1}
    assert rooms.update_registry({"bad": json.dumps(bad), "good": json.dumps(rooms.get("points").to_record())}) \
        == ["good"]
    assert rooms.get("bad") is None and rooms.get("good").name == "good"


def test_a_spectators_sync_gets_the_spectator_view_again_never_a_hand(aredis):
    async def body(ws: FakeSocket, conn: session.Connection, engine: FakeEngine) -> None:
        await ws.inbox.put(json.dumps({"type": "Watch", "match": "t1-1", "command_id": "w1"}))
        first = await ws.expect(_view_update("t1-1"), "the spectator view")
        await ws.inbox.put(json.dumps({"type": "Sync", "command_id": "s1"}))
        again = await ws.expect(lambda m: m["kind"] == "update" and m.get("command_id") == "s1", "the Sync's answer")
        for m in (first, again):
            assert m["view"]["hand"] is None and m["view"]["you"] is None and m["view"]["phase"] == "seating"
        assert engine.syncs[-1][1] == "alice"  # the seated player's view, redacted by the gateway

    asyncio.run(_at_a_seated_table(aredis, {"t1-1": 4}, body, player="watcher", role="spectator"))


def test_a_registry_room_changed_is_offered_changed():
    rooms = RoomBook.load()
    rec = {**rooms.get("points").to_record(), "turn_seconds": 11}
    rooms.update_registry({"r": json.dumps(rec)})
    first = rooms.get("r")
    rooms.update_registry({"r": json.dumps(rec)})
    assert rooms.get("r") is first  # unchanged text: the same validated config
    rooms.update_registry({"r": json.dumps({**rec, "turn_seconds": 12})})
    assert rooms.get("r").turn_seconds == 12
    rooms.update_registry({})
    assert rooms.get("r") is None  # removed from the registry: no longer offered


def test_play_and_pass_of_a_seated_player_skip_the_place_lookup_until_the_lobby_moves_them(aredis):
    """The hot path (issue 24 §5): a seated player's Play and Pass go to the match the last
    lookup found, with no lookup of their own; any lobby note (here the table closing) drops
    it, so the next Play is looked up again and refused ``not_seated``, never sent to the old match."""
    lookups: list[str] = []

    async def count(lobby: Lobby) -> None:
        lookups.append("place")

    async def commands(r: Any, match: str) -> list[str]:
        return [t for t, _p in await _player_commands(r, match)]

    async def body(ws: FakeSocket, conn: session.Connection, engine: FakeEngine) -> None:
        await ws.expect(_view_update("t1-1"), "the view of t1-1")
        await ws.inbox.put(json.dumps({"type": "Ready", "command_id": "r1"}))
        for i, msg in enumerate([{"type": "Play", "cards": [5]}, {"type": "Pass"}, {"type": "Play", "cards": [7]}]):
            await ws.inbox.put(json.dumps({**msg, "command_id": f"h{i}"}))
        r = conn.hub.redis
        while (await commands(r, "t1-1")).count("Play") < 2:
            await asyncio.sleep(0.02)
        before = len(lookups)
        assert await commands(r, "t1-1") == ["Sync", "Ready", "Play", "Pass", "Play"]
        assert before == 2, lookups  # the connection's own and the Ready's: none for Play or Pass
        # bob leaves: the table closes, alice is queued again (a lobby note)
        await _close(r)
        await ws.expect(lambda m: m["kind"] == "lobby" and m["state"] == "queued", "queued again")
        await ws.inbox.put(json.dumps({"type": "Play", "cards": [9], "command_id": "late"}))
        refused = await ws.expect(lambda m: m["kind"] == "rejected" and m["command_id"] == "late", "the refusal")
        assert refused["code"] == "not_seated" and len(lookups) == before + 1
        assert (await commands(r, "t1-1")).count("Play") == 2

    asyncio.run(_at_a_seated_table(aredis, {"t1-1": 3}, body, place_hook=count))


def test_a_lookup_overtaken_by_a_lobby_note_is_not_kept_for_play_and_pass(aredis):
    """The table closes (its note delivered) while a Ready's place lookup is under way: the
    place it found is not kept, so the next Play is looked up again and refused ``not_seated``."""
    state: dict[str, Any] = {}

    async def overtake(lobby: Lobby) -> None:
        conn = state.get("conn")
        if conn is None or not state.get("armed") or state.get("done"):
            return
        state["done"] = True
        seen = conn._notes_seen
        await _close(lobby.redis)
        while conn._notes_seen == seen:  # the note reached the socket before the lookup returns
            await asyncio.sleep(0.01)

    async def body(ws: FakeSocket, conn: session.Connection, engine: FakeEngine) -> None:
        state["conn"] = conn
        await ws.expect(_view_update("t1-1"), "the view of t1-1")
        state["armed"] = True
        await ws.inbox.put(json.dumps({"type": "Ready", "command_id": "r1"}))
        await ws.expect(lambda m: m["kind"] == "lobby" and m["state"] == "queued", "queued again")
        assert state.get("done")
        await ws.inbox.put(json.dumps({"type": "Play", "cards": [9], "command_id": "late"}))
        refused = await ws.expect(lambda m: m["kind"] == "rejected" and m["command_id"] == "late", "the refusal")
        assert refused["code"] == "not_seated"

    asyncio.run(_at_a_seated_table(aredis, {"t1-1": 3}, body, place_hook=overtake))


def test_a_ready_after_the_lobbys_seated_note_goes_to_its_match_without_a_lookup(aredis):
    """The ``seated`` note names the table, which the connection reads once (for the names):
    the Ready that follows goes to that match with no place lookup of its own (under load the
    lookups of every socket's Ready queued for the pool); a later note drops what is known, so
    a Ready after the table closed is looked up again and refused ``not_seated``."""
    lookups: list[str] = []

    async def count(lobby: Lobby) -> None:
        lookups.append("place")

    async def body(ws: FakeSocket, conn: session.Connection, engine: FakeEngine) -> None:
        await ws.expect(lambda m: m["kind"] == "lobby" and m["state"] == "queued", "at a table being created")
        await _seat(conn.hub.redis)
        await ws.expect(lambda m: m["kind"] == "lobby" and m["state"] == "seated" and m["match"] == "t1-1",
                        "seated")
        before = len(lookups)  # the connection's own
        await ws.inbox.put(json.dumps({"type": "Ready", "command_id": "r1"}))
        r = conn.hub.redis
        await _eventually(lambda: _has_command(r, "t1-1", ("Ready", "alice")), "the Ready sent")
        assert len(lookups) == before == 1, lookups
        await _close(r)
        await ws.expect(lambda m: m["kind"] == "lobby" and m["state"] == "queued", "queued again")
        await ws.inbox.put(json.dumps({"type": "Ready", "command_id": "late"}))
        refused = await ws.expect(lambda m: m["kind"] == "rejected" and m["command_id"] == "late", "the refusal")
        assert refused["code"] == "not_seated" and len(lookups) == before + 1
        assert (await _player_commands(r, "t1-1")).count(("Ready", "alice")) == 1

    async def main() -> None:
        r = aredis()
        await _table_creating(r)
        await r.aclose()
        await _with_connection(aredis, {"t1-1": 3}, body, place_hook=count)

    asyncio.run(main())


def test_a_ready_after_the_table_closed_under_it_is_refused_here_never_sent_to_its_match(aredis):
    """bob leaves before the deal: alice's socket sends her the removal, then the lobby closes
    the table and queues her again.  Her Ready right after it is looked up again (the place the
    ``seated`` note gave is dropped with the end of its match) and refused ``not_seated``, even
    while the ``queued`` note has not reached her socket yet."""
    release = asyncio.Event()

    async def body(ws: FakeSocket, conn: session.Connection, engine: FakeEngine) -> None:
        await ws.expect(lambda m: m["kind"] == "lobby" and m["state"] == "queued", "at a table being created")
        r = conn.hub.redis
        await _seat(r)
        await ws.expect(_view_update("t1-1"), "the view of t1-1")
        deliver = conn.subscription.deliver

        async def notes_held(stream: str, entry_id: str, fields: dict) -> None:
            if fields.get(b"kind") == b"lobby":
                await release.wait()
            await deliver(stream, entry_id, fields)
        conn.subscription.deliver = notes_held  # type: ignore[method-assign]
        await _publish_update(r, "alice", "t1-1", 4, {"type": "PlayerRemoved", "player": "bob", "reason": "left"})
        await ws.expect(lambda m: m["kind"] == "update" and m["version"] == 4, "the removal")
        await _close(r)  # the engine's lobby closes the table (its note held back above)
        await ws.inbox.put(json.dumps({"type": "Ready", "command_id": "r2"}))
        refused = await ws.expect(lambda m: m["kind"] == "rejected" and m["command_id"] == "r2", "the refusal")
        assert refused["code"] == "not_seated"
        release.set()
        await ws.expect(lambda m: m["kind"] == "lobby" and m["state"] == "queued", "queued again")
        assert ("Ready", "alice") not in await _player_commands(r, "t1-1")

    async def main() -> None:
        r = aredis()
        await _table_creating(r)
        await r.aclose()
        await _with_connection(aredis, {"t1-1": 3}, body)

    asyncio.run(main())


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else ("" if v is None else str(v))


async def _eventually(check: Callable[[], Any], what: str) -> None:
    """Wait until ``check()`` (or what it returns, awaited) is true; fail after :data:`WAIT_S`."""
    for _ in range(int(WAIT_S / 0.01)):
        got = check()
        if asyncio.iscoroutine(got):
            got = await got
        if got:
            return
        await asyncio.sleep(0.01)
    pytest.fail(f"never {what}")


async def _publish_update(r: Any, player: str, match: str, version: int, *events: dict[str, Any]) -> None:
    """An update of ``match`` at ``version`` in ``player``'s stream, as the engine publishes it
    (the compact body, docs/PROTOCOL.md §2), and its notice."""
    await r.xadd(keys.outbox_key(player), {"kind": "update", "match": match, "command_id": f"engine-{version}",
                                           "version": version, "body": msgpack.packb({"events": list(events)})})
    await r.spublish(keys.outbox_key(player), "")


async def _has_command(r: Any, match: str, command: tuple[str, str]) -> bool:
    return command in await _player_commands(r, match)


async def _player_commands(r: Any, match: str) -> list[tuple[str, str]]:
    stream = channels.stream_for(channels.player_command("Pass", match, "alice", "probe"))
    return [(c.type, c.player) for c in (decode_command(f[b"c"]) for _i, f in await r.xrange(stream))
            if c.match_id == match]


# -- the adapter of the engine's lobby (issue 34 §4) ---------------------------------------------
async def _lobby_commands(r: Any, room: str = "points") -> list[dict[str, Any]]:
    """The commands on the lobby channel of ``room``'s bucket (each entry has one field ``c``)."""
    out = []
    for _id, f in await r.xrange(keys.lobby_inbox_key(keys.room_bucket(room))):
        assert set(f) == {b"c"}, f
        out.append(json.loads(f[b"c"]))
    return out


def test_a_join_goes_to_the_lobby_channel_of_the_rooms_bucket_and_the_engine_answers(aredis):
    """Join → ``XADD sk:{b<N>}:lobby c={"type": "Join", "command_id": <engine id>, "room", "player"}``;
    the gateway checks no balance (the queue refuses ``seat_refused``, R-11.1); the engine's
    ``lobby`` entry reaches the client with the client's own command id."""
    async def body(ws: FakeSocket, conn: session.Connection, engine: FakeEngine) -> None:
        r = conn.hub.redis
        await ws.inbox.put(json.dumps({"type": "Join", "room": "points", "command_id": "j1"}))
        await _eventually(lambda: _lobby_commands(r), "the Join sent")
        assert await _lobby_commands(r) == [{"type": "Join", "command_id": channels.engine_command_id("alice", "j1"),
                                             "room": "points", "player": "alice"}]
        assert channels.engine_command_id("alice", "j1") in conn.pending
        await _place(r, "alice", "queued")
        await _note(r, "alice", "queued", command_id=channels.engine_command_id("alice", "j1"))
        got = await ws.expect(lambda m: m["kind"] == "lobby", "queued")
        assert got == {"kind": "lobby", "state": "queued", "room": "points", "table": None, "match": None,
                       "reason": None, "bot_level": None, "command_id": "j1"}
        assert conn.room == "points" and channels.engine_command_id("alice", "j1") not in conn.pending
        # a message caused by another player's command names no command id of this client
        await _note(r, "alice", "queued", command_id=channels.engine_command_id("bob", "j1"))
        got = await ws.expect(lambda m: m["kind"] == "lobby", "queued again")
        assert got["command_id"] is None

    asyncio.run(_with_connection(aredis, {}, body))


@pytest.mark.parametrize("player, room, token_room, code", [
    ("alice", "nope", None, "unknown_room"),  # not in the room book
    ("alice", "points", "wealth", "not_allowed"),  # a token limited to another room
    ("al{ice}", "points", None, "not_allowed"),  # a hash tag in the player id (issue 24 §2)
])
def test_a_join_the_gateway_refuses_is_never_sent(aredis, player, room, token_room, code):
    async def body(ws: FakeSocket, conn: session.Connection, engine: FakeEngine) -> None:
        conn.identity = Identity(player, "player", token_room, 4102444800)  # type: ignore[call-arg]
        await ws.inbox.put(json.dumps({"type": "Join", "room": room, "command_id": "j1"}))
        got = await ws.expect(lambda m: m["kind"] == "rejected", "the refusal")
        assert (got["code"], got["command_id"]) == (code, "j1")
        for name in ("points", "nope", "wealth"):
            assert await _lobby_commands(conn.hub.redis, name) == []

    asyncio.run(_with_connection(aredis, {}, body))


def test_a_leave_goes_to_the_room_of_the_players_place_and_nowhere_is_not_seated(aredis):
    """Leave → the lobby channel of the room the place names (queued, or at a table: the engine
    decides it there); a player who is nowhere is refused ``not_seated`` and nothing is sent."""
    async def body(ws: FakeSocket, conn: session.Connection, engine: FakeEngine) -> None:
        r = conn.hub.redis
        await ws.inbox.put(json.dumps({"type": "Leave", "command_id": "l0"}))
        got = await ws.expect(lambda m: m["kind"] == "rejected", "the refusal")
        assert (got["code"], got["command_id"]) == ("not_seated", "l0")
        assert await _lobby_commands(r) == [] and await _lobby_commands(r, "wealth") == []
        await _place(r, "alice", "queued", room="wealth")
        await ws.inbox.put(json.dumps({"type": "Leave", "command_id": "l1"}))
        await _eventually(lambda: _lobby_commands(r, "wealth"), "the Leave sent")
        await _table(r, "seated", room="points")
        await ws.inbox.put(json.dumps({"type": "Leave", "command_id": "l2"}))
        await _eventually(lambda: _lobby_commands(r, "points"), "the second Leave sent")
        assert [await _lobby_commands(r, x) for x in ("wealth", "points")] == [
            [{"type": "Leave", "command_id": channels.engine_command_id("alice", "l1"), "room": "wealth",
              "player": "alice"}],
            [{"type": "Leave", "command_id": channels.engine_command_id("alice", "l2"), "room": "points",
              "player": "alice"}]]
        assert ("Leave", "alice") not in await _player_commands(r, "t1-1")  # never to the match itself

    asyncio.run(_with_connection(aredis, {}, body))


def test_on_connect_a_player_with_a_room_is_present_and_returned_and_at_the_close_the_grace_starts(aredis):
    """Presence (R-13.4): on connect ``ZADD sk:{r:<room>}:presence`` {player: now + slack + grace}
    and ``Returned`` (id ``gw:returned:<player>:<hex>``); at the socket's close {player: now + grace}."""
    grace = int(1000 * RoomBook.load().get("points").reconnect_grace_seconds)
    marks: dict[str, int] = {}

    async def body(ws: FakeSocket, conn: session.Connection, engine: FakeEngine) -> None:
        r = conn.hub.redis
        await ws.expect(_view_update("t1-1"), "the view")
        due = await r.zscore(keys.presence_key("points"), "alice")
        assert marks["before"] + session.HEARTBEAT_SLACK_MS + grace <= due <= session.now_ms() \
            + session.HEARTBEAT_SLACK_MS + grace
        (returned,) = await _lobby_commands(r)
        assert (returned["type"], returned["room"], returned["player"]) == ("Returned", "points", "alice")
        assert returned["command_id"].startswith("gw:returned:alice:") and len(returned["command_id"]) > 18
        marks["closing"] = session.now_ms()

    async def main() -> None:
        r = aredis()
        await _table(r, "seated")
        marks["before"] = session.now_ms()
        await _with_connection(aredis, {"t1-1": 3}, body)
        due = await r.zscore(keys.presence_key("points"), "alice")
        assert marks["closing"] + grace <= due <= session.now_ms() + grace
        await r.aclose()

    asyncio.run(main())


def test_a_player_who_is_nowhere_sends_no_returned_and_no_presence(aredis):
    async def body(ws: FakeSocket, conn: session.Connection, engine: FakeEngine) -> None:
        await ws.expect(lambda m: m["kind"] == "welcome", "the welcome")
        assert conn.room is None
        await conn.hub.lobby.present({})  # a heartbeat with nobody in a room writes nothing

    async def main() -> None:
        await _with_connection(aredis, {}, body)
        r = aredis()
        assert await _lobby_commands(r) == [] and await r.exists(keys.presence_key("points")) == 0
        await r.aclose()

    asyncio.run(main())


def test_the_heartbeat_pushes_the_grace_of_each_connected_player_in_their_room(aredis):
    async def body(ws: FakeSocket, conn: session.Connection, engine: FakeEngine) -> None:
        r = conn.hub.redis
        await ws.expect(lambda m: m["kind"] == "lobby" and m["state"] == "queued", "queued")
        await r.delete(keys.presence_key("wealth"))
        stop = asyncio.Event()
        beat = asyncio.create_task(conn.hub.heartbeat(stop))
        await _eventually(lambda: r.zscore(keys.presence_key("wealth"), "alice"), "the heartbeat")
        stop.set()
        await beat
        assert await r.zscore(keys.presence_key("points"), "alice") is None

    async def main() -> None:
        r = aredis()
        await _place(r, "alice", "queued", room="wealth")
        await r.aclose()
        await _with_connection(aredis, {}, body)

    asyncio.run(main())


def test_a_settled_entry_and_a_cooldown_refusal_reach_the_client(aredis):
    """``settled`` is forwarded as the engine wrote it (with the names); a refused Join comes back
    as a ``rejected`` entry with ``match`` "" and reaches the client with its own command id and
    ``retry_after_ms``; another player's refusal never does."""
    async def body(ws: FakeSocket, conn: session.Connection, engine: FakeEngine) -> None:
        r = conn.hub.redis
        await ws.expect(_view_update("t1-1"), "the view")
        settled = {"kind": "settled", "match": "t1-1", "scores": {"alice": 4, "bob": -4},
                   "breakdown": {"alice": {"kou": 1}}, "balances": {"alice": 1004}}
        await r.xadd(keys.outbox_key("alice"), {"kind": "settled", "m": json.dumps(settled)})
        got = await ws.expect(lambda m: m["kind"] == "settled", "settled")
        assert {k: got[k] for k in settled} == settled and "names" in got  # the players named (gateway/names.py)
        for who in ("bob", "alice"):
            await r.xadd(keys.outbox_key("alice"), {"kind": "rejected", "match": "", "code": "cooldown",
                                                    "reason": "wait", "retry_after_ms": 4000,
                                                    "command_id": channels.engine_command_id(who, "j9")})
        got = await ws.expect(lambda m: m["kind"] == "rejected", "the refusal")
        assert (got["command_id"], got["code"], got["retry_after_ms"], got["match"]) == ("j9", "cooldown", 4000, None)

    asyncio.run(_at_a_seated_table(aredis, {"t1-1": 3}, body))


@pytest.mark.parametrize("moved", [True, False])
def test_a_spectator_follows_the_table_to_its_next_match_and_nowhere_else(aredis, moved):
    """A spectator of t1-1 reads alice's stream.  When the table moves on to t1-2 (the next hand
    of a series, the next match at a table), t1-2's updates reach that stream: the socket now
    watches t1-2 (its spectator view, then its updates).  An update of a match the table has not
    moved to (another table's, or before the read model says so) is still dropped.  Before, the
    spectator stayed on the finished t1-1 for good."""
    async def body(ws: FakeSocket, conn: session.Connection, engine: FakeEngine) -> None:
        r = conn.hub.redis
        await ws.inbox.put(json.dumps({"type": "Watch", "match": "t1-1", "command_id": "w1"}))
        await ws.expect(_view_update("t1-1"), "the spectator view of t1-1")
        if moved:
            await _table(r, "seated", "t1", "t1-2")
        await _publish_update(r, "alice", "t9-1", 2, {"type": "Passed", "seq": 2, "player": "carol"})
        await _publish_update(r, "alice", "t1-2", 5, {"type": "Passed", "seq": 5, "player": "bob"})
        await _publish_update(r, "alice", "t1-1", 5, {"type": "Passed", "seq": 5, "player": "bob"})  # a marker
        got = await ws.expect(lambda m: m["kind"] == "update" and (m["match"] != "t1-1" or m["version"] == 5),
                              "the next update")
        if moved:
            assert got["match"] == "t1-2" and got["view"] is not None
            assert got["view"]["hand"] is None and got["view"]["you"] is None  # the spectator view
            assert conn.watching == conn.match == "t1-2"
            assert engine.syncs[-1][:2] == ("t1-2", "alice")
        else:
            assert (got["match"], got["version"]) == ("t1-1", 5) and conn.watching == "t1-1"

    asyncio.run(_at_a_seated_table(aredis, {"t1-1": 4, "t1-2": 4, "t9-1": 2}, body, player="watcher",
                                   role="spectator"))


async def _t1_1_ends_behind_a_gap(r: Any) -> None:
    """t1-1's update 4 never reaches alice's stream (fenced out); 5 and 6, the finish with its
    view, do; then the table's read model moves on to t1-2."""
    await _publish_update(r, "alice", "t1-1", 5, {"type": "Passed", "seq": 5, "player": "bob"})
    end = {"events": [{"type": "MatchFinished", "seq": 6}],
           "view": {"match_id": "t1-1", "you": "alice", "phase": "finished", "version": 6, "hand": []}}
    await r.xadd(keys.outbox_key("alice"), {"kind": "update", "match": "t1-1", "command_id": "engine-6",
                                            "version": 6, "body": msgpack.packb(end)})
    await _table(r, "seated", "t1", "t1-2")


@pytest.mark.parametrize("moved_by", ["seated_note", "update"])
def test_a_player_moved_to_the_next_match_gets_the_end_of_the_one_before_from_behind_a_gap_first(aredis, moved_by,
                                                                                                 monkeypatch):
    """alice has t1-1's view at 3.  Its update 4 never reaches her stream (its publication was
    fenced out: 5 and 6 were written first), so 5 and 6, the finish with its view, wait behind
    the gap; t1-2's seated note (or, the note lost, t1-2's first update) comes before the gap's
    wait ends.  The end of t1-1 reaches her before she is told she is seated at t1-2.  Before,
    the socket moved on and dropped what it held of t1-1 and the view it asked for: she never
    got the end of the match she played."""
    monkeypatch.setattr(session, "GAP_WAIT_S", 10_000.0)  # the gap outlasts a loaded machine: no resync

    async def body(ws: FakeSocket, conn: session.Connection, engine: FakeEngine) -> None:
        r = conn.hub.redis
        await ws.expect(_view_update("t1-1"), "the view of t1-1")
        await _t1_1_ends_behind_a_gap(r)
        if moved_by == "seated_note":
            await _note(r, "alice", "seated", table="t1", match="t1-2")
        else:
            await _publish_update(r, "alice", "t1-2", 1, {"type": "MatchCreated", "seq": 1})
        got: list[dict[str, Any]] = []
        await ws.expect(lambda m: got.append(m) or (m["kind"] == "lobby" and m["match"] == "t1-2"), "seated at t1-2")
        assert [(m["match"], m["version"], m["view"]["phase"]) for m in got if m["kind"] == "update"] == [
            ("t1-1", 6, "finished")], got

    asyncio.run(_at_a_seated_table(aredis, {"t1-1": 3, "t1-2": 2}, body))


def test_a_spectator_following_the_table_gets_the_end_of_the_match_before_from_behind_a_gap_first(aredis,
                                                                                                  monkeypatch):
    """The spectator's case of the test above: watching t1-1 (its view at 3), t1-1's 5 and 6, the
    finish, wait behind the gap when t1-2's first update reaches the stream it reads and the
    socket follows the table (``follow``).  The end of t1-1 goes out before anything of t1-2."""
    monkeypatch.setattr(session, "GAP_WAIT_S", 10_000.0)  # the gap outlasts a loaded machine: no resync

    async def body(ws: FakeSocket, conn: session.Connection, engine: FakeEngine) -> None:
        r = conn.hub.redis
        await ws.inbox.put(json.dumps({"type": "Watch", "match": "t1-1", "command_id": "w1"}))
        await ws.expect(_view_update("t1-1"), "the spectator view of t1-1")
        await _t1_1_ends_behind_a_gap(r)
        await _publish_update(r, "alice", "t1-2", 1, {"type": "MatchCreated", "seq": 1})
        got: list[dict[str, Any]] = []
        await ws.expect(lambda m: got.append(m) or (m["kind"] == "update" and m["match"] == "t1-2"), "t1-2")
        ends = [(m["match"], m["version"], m["view"]["phase"], m["view"]["you"]) for m in got[:-1] if m["kind"] == "update"]
        assert ends == [("t1-1", 6, "finished", None)], got
        assert conn.watching == "t1-2"

    asyncio.run(_at_a_seated_table(aredis, {"t1-1": 3, "t1-2": 2}, body, player="watcher", role="spectator"))


def test_a_spectator_never_gets_the_lobby_messages_of_the_player_whose_stream_it_reads(aredis):
    async def body(ws: FakeSocket, conn: session.Connection, engine: FakeEngine) -> None:
        r = conn.hub.redis
        await ws.inbox.put(json.dumps({"type": "Watch", "match": "t1-1", "command_id": "w1"}))
        await ws.expect(_view_update("t1-1"), "the spectator view")
        await _note(r, "alice", "removed", reason="left")
        await r.xadd(keys.outbox_key("alice"), {"kind": "settled", "m": json.dumps(
            {"kind": "settled", "match": "t1-1", "scores": {}, "breakdown": {}, "balances": {"alice": 5}})})
        await _publish_update(r, "alice", "t1-1", 5)
        await ws.expect(lambda m: m["kind"] == "update" and m["version"] == 5, "the next update")
        assert not [m for m in list(ws.out._queue) if m["kind"] in ("lobby", "settled")]  # type: ignore[attr-defined]

    asyncio.run(_at_a_seated_table(aredis, {"t1-1": 4}, body, player="watcher", role="spectator"))


def test_a_join_of_a_file_room_not_registered_yet_registers_it_first(aredis, tmp_path):
    """``gateway --room FILE``: the engine knows rooms by name, so a Join of a file room the
    registry does not hold yet (the gateway just started) sends AddRoom, then the Join."""
    from tests.gateway_support import write_room

    async def main() -> None:
        r = aredis()
        rooms = RoomBook.load([write_room(tmp_path / "quick.toml", "quick", turn_seconds=7)])
        lobby = Lobby(r, rooms, "gw-join")
        ops = FakeOps(r)
        await lobby.replies.start()
        stop = asyncio.Event()
        tasks = [asyncio.create_task(ops.run()), asyncio.create_task(lobby.replies.run(stop))]
        try:
            await asyncio.wait_for(lobby.join("alice", "quick", "j1"), WAIT_S)
            assert [c.type for c in ops.commands] == ["AddRoom"] and rooms.registered("quick")
            assert [c["type"] for c in await _lobby_commands(r, "quick")] == ["Join"]
            await lobby.join("bob", "quick", "j2")
            assert len(ops.commands) == 1  # registered once
        finally:
            stop.set()  # the lobby's own loops end on it (a cancellation only hurries them)
            await ops.stop(tasks[0])
            tasks[1].cancel()
            await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), WAIT_S)
            await r.aclose()

    asyncio.run(main())


def test_a_join_the_lobbys_model_refuses_is_bad_command_and_the_socket_stays(aredis):
    """A token subject longer than the lobby's player ids (100): the Join is refused
    ``bad_command`` here, nothing is sent, and the socket goes on."""
    long = "p" * 120

    async def body(ws: FakeSocket, conn: session.Connection, engine: FakeEngine) -> None:
        await ws.inbox.put(json.dumps({"type": "Join", "room": "points", "command_id": "j1"}))
        got = await ws.expect(lambda m: m["kind"] == "rejected", "the refusal")
        assert (got["code"], got["command_id"]) == ("bad_command", "j1")
        await ws.inbox.put(json.dumps({"type": "Leave", "command_id": "l1"}))
        got = await ws.expect(lambda m: m["kind"] == "rejected" and m["command_id"] == "l1", "the Leave's refusal")
        assert got["code"] == "not_seated" and await _lobby_commands(conn.hub.redis) == []

    asyncio.run(_with_connection(aredis, {}, body, player=long))


def test_a_socket_handed_its_players_clock_update_leaves_a_receipt_and_its_close_says_so(aredis):
    """Issue 35 §4: the timers pause a clock whose update no gateway handed to the player's
    socket (a gateway killed or restarting).  The gateway receipts the updates that start the
    player's clock (their turn, or the ready clock) once sent on the socket, not the others';
    the player's own close on a live gateway says ``closed`` (their clocks then run as usual)."""
    from engine.service.receipts import decode
    from gateway import protocol

    r_check = aredis()

    async def body(ws: FakeSocket, conn: session.Connection, engine: FakeEngine) -> None:
        await ws.expect(_view_update("t1-1"), "the view of t1-1")
        receipts = conn.hub.receipts
        theirs = {"phase": "playing", "turn": "bob", "deadline_ms": 5_000}
        await conn.send(protocol.update("t1-1", 7, [], None, None, brief=theirs))
        await receipts.flush()
        assert await r_check.get(keys.receipt_key("alice")) is None  # bob's clock: nothing
        mine = {"phase": "playing", "turn": "alice", "deadline_ms": 9_000}
        await conn.send(protocol.update("t1-1", 8, [], None, None, brief=mine))
        await ws.expect(lambda m: m.get("version") == 8, "the update of alice's turn")
        await receipts.flush()
        state, _at, version, match = decode(await r_check.get(keys.receipt_key("alice")))
        assert (state, version, match) == ("open", 8, "t1-1")
        await ws.inbox.put(None)  # the player closes the socket; the gateway lives on
        while not conn.closed:
            await asyncio.sleep(0.01)
        await receipts.flush()
        state, _at, _v, match = decode(await r_check.get(keys.receipt_key("alice")))
        assert (state, match) == ("closed", "t1-1")

    async def main() -> None:
        await _at_a_seated_table(aredis, {"t1-1": 3}, body)
        await r_check.aclose()

    asyncio.run(main())


def test_seen_puts_the_clients_word_in_the_receipt_and_a_version_never_sent_is_refused(aredis):
    """Issue 35 §4: the client acknowledges what it read (``Seen``).  The receipt of a socket that
    acknowledges names what it acknowledged and this gateway's instance; an acknowledgement of a
    version this socket was not sent (ahead of what it got, or of a match it was not sent) is
    refused ``bad_command`` and leaves the receipt as it was; an older match's is ignored."""
    from engine.service.receipts import read
    from gateway import protocol

    r_check = aredis()

    async def receipt() -> Any:
        await conn_ref[0].hub.receipts.flush()
        return read(await r_check.get(keys.receipt_key("alice")))

    conn_ref: list[session.Connection] = []

    async def body(ws: FakeSocket, conn: session.Connection, engine: FakeEngine) -> None:
        conn_ref.append(conn)
        await ws.expect(_view_update("t1-1"), "the view of t1-1")
        await ws.inbox.put(json.dumps({"type": "Seen", "version": 3, "match": "t1-1"}))  # the view read
        mine = {"phase": "playing", "turn": "alice", "deadline_ms": 9_000}
        await conn.send(protocol.update("t1-1", 8, [], None, None, brief=mine))
        await ws.expect(lambda m: m.get("version") == 8, "the update of alice's turn")
        got = await receipt()
        assert (got.state, got.version, got.match, got.acked, got.gateway) == (
            "open", 8, "t1-1", 3, conn.hub.receipts.instance)  # handed over, not read yet
        for bad, cid in (({"version": 9, "match": "t1-1"}, "ahead"), ({"version": 1, "match": "t9-9"}, "other"),
                         ({"version": -1}, "negative")):
            await ws.inbox.put(json.dumps({"type": "Seen", "command_id": cid, **bad}))
            refused = await ws.expect(lambda m, cid=cid: m["kind"] == "rejected" and m["command_id"] == cid,
                                      f"the refusal of {cid}")
            assert refused["code"] == "bad_command"
        assert (await receipt()).acked == 3  # the refusals changed nothing
        handed_at = got.at_ms
        await ws.inbox.put(json.dumps({"type": "Seen", "version": 8, "match": "t1-1", "command_id": "read8"}))
        for _ in range(200):  # the message is handled in the background: wait for its receipt
            got = await receipt()
            if got.acked == 8:
                break
            await asyncio.sleep(0.01)
        assert (got.acked, got.version, got.at_ms) == (8, 8, handed_at)  # the hand-over time is kept
        assert not any(m.get("command_id") == "read8" for m in list(ws.out._queue))  # Seen has no answer

    async def main() -> None:
        await _at_a_seated_table(aredis, {"t1-1": 3}, body)
        await r_check.aclose()

    asyncio.run(main())


def test_a_spectator_may_not_send_seen(aredis):
    async def body(ws: FakeSocket, conn: session.Connection, engine: FakeEngine) -> None:
        await ws.inbox.put(json.dumps({"type": "Watch", "match": "t1-1", "command_id": "w1"}))
        await ws.expect(_view_update("t1-1"), "the spectator view")
        await ws.inbox.put(json.dumps({"type": "Seen", "version": 4, "match": "t1-1", "command_id": "s1"}))
        got = await ws.expect(lambda m: m["kind"] == "rejected", "the refusal")
        assert (got["code"], got["command_id"]) == ("not_allowed", "s1")
        assert conn.hub.receipts._due == {}

    asyncio.run(_at_a_seated_table(aredis, {"t1-1": 4}, body, player="watcher", role="spectator"))


def test_a_gateway_writes_its_liveness_beat_and_a_zero_when_it_stops(aredis):
    """The beat the timers read (``sk:seen:gw:{<instance>}``): the time while the gateway runs, 0
    once it stops (its sockets close: what it handed over unread was not read)."""
    from gateway.receipts import Receipts

    async def main() -> None:
        r = aredis()
        receipts = Receipts(r)
        stop = asyncio.Event()
        task = asyncio.create_task(receipts.beat(stop))
        key = keys.gateway_beat_key(receipts.instance)
        for _ in range(500):
            if await r.get(key) is not None:
                break
            await asyncio.sleep(0.01)
        assert int(await r.get(key)) > 0 and 0 < await r.pttl(key)
        stop.set()
        await asyncio.wait_for(task, WAIT_S)
        assert await r.get(key) == b"0"
        assert Receipts(r).instance != receipts.instance  # a restarted gateway is another instance
        await r.aclose()

    asyncio.run(main())


def test_a_receipt_redis_refused_is_written_at_the_next_flush_unless_a_newer_one_came():
    """Receipts are written in the background (gateway/receipts.py): one Redis refused stays
    due for the next flush; a newer receipt of the same player replaces it."""
    import redis as redis_mod

    from engine.service.receipts import decode
    from gateway.receipts import Receipts

    class Pipe:
        def __init__(self, store: "Store") -> None:
            self.store, self.calls = store, []

        def set(self, key: str, value: str, px: int) -> None:
            self.calls.append((key, value))

        async def execute(self, raise_on_error: bool = True) -> list:
            out: list = []
            for key, value in self.calls:
                if key in self.store.refuse:
                    out.append(redis_mod.ConnectionError("node away"))
                else:
                    self.store.data[key] = value
                    out.append(True)
            return out

    class Store:
        def __init__(self) -> None:
            self.data: dict[str, str] = {}
            self.refuse: set[str] = set()

        def pipeline(self, transaction: bool = False) -> Pipe:
            return Pipe(self)

    store = Store()
    receipts = Receipts(store)
    mine = {"kind": "update", "match": "m", "version": 4, "brief": {"phase": "playing", "turn": "a", "deadline_ms": 1}}

    async def main() -> None:
        store.refuse.add(keys.receipt_key("a"))
        receipts.delivered("a", mine)
        receipts.delivered("b", {**mine, "brief": {**mine["brief"], "turn": "b"}})
        await receipts.flush()
        assert keys.receipt_key("a") not in store.data and decode(store.data[keys.receipt_key("b")])[2] == 4
        store.refuse.clear()
        await receipts.flush()  # a's, written now
        assert decode(store.data[keys.receipt_key("a")])[:1] == ("open",)
        store.refuse.add(keys.receipt_key("a"))
        receipts.delivered("a", {**mine, "version": 6})
        await receipts.flush()
        receipts.closed("a", "m")  # newer than the refused one: it replaces it
        store.refuse.clear()
        await receipts.flush()
        assert decode(store.data[keys.receipt_key("a")])[0] == "closed"

    asyncio.run(main())


# -- a ``seated`` note lost in a fail-over (issue 35 §4) --------------------------------------------
def test_an_update_of_the_tables_next_match_with_no_seated_note_announces_it_and_gives_the_view(aredis):
    """The table moved on to t1-2 but its ``seated`` note never reached alice's stream (a master
    took the entry and lost it in a fail-over); the match's next update (a paused ready clock's)
    does: the socket tells her she is seated at t1-2, sends the view, and her Ready goes there.
    Before, the update of a match no note had announced was dropped, and the ready clock removed
    a player who never heard of the match."""
    async def body(ws: FakeSocket, conn: session.Connection, engine: FakeEngine) -> None:
        await ws.expect(_view_update("t1-1"), "the view of t1-1")
        r = conn.hub.redis
        await _table(r, "seated", "t1", "t1-2")  # the read models moved on; the note is lost
        await _publish_update(r, "alice", "t1-2", 4, {"type": "ClockExtended", "seq": 4, "kind": "ready",
                                                      "by_ms": 5000, "reason": "undelivered"})
        got = await ws.expect(lambda m: m["kind"] == "lobby" and m["state"] == "seated", "seated at t1-2")
        assert (got["table"], got["match"], got["command_id"]) == ("t1", "t1-2", None)
        view = await ws.expect(_view_update("t1-2"), "the view of t1-2")
        assert view["view"]["you"] == "alice" and conn.match == "t1-2"
        await ws.inbox.put(json.dumps({"type": "Ready", "command_id": "r2"}))
        await _eventually(lambda: _has_command(r, "t1-2", ("Ready", "alice")), "the Ready sent to t1-2")

    asyncio.run(_at_a_seated_table(aredis, {"t1-1": 3, "t1-2": 4}, body))


@pytest.mark.parametrize("after", ["announced", "note_lost", "closed"])
def test_a_late_seated_of_a_match_the_table_moved_past_never_takes_the_socket_back(aredis, after):
    """alice's table moved on from t1-1 through t1-2 to t1-3; then a ``seated`` of t1-2 reaches
    her stream (a feed entry handled again late, by a follower that had lost its bucket).  It
    is not forwarded and the socket never goes to t1-2: dropped when t1-3 was announced, or
    when the table closed; when t1-3's own note was lost, it announces t1-3 (the table's
    current match).  Before, the socket's match went back to t1-2 and alice was told so."""
    async def body(ws: FakeSocket, conn: session.Connection, engine: FakeEngine) -> None:
        await ws.expect(_view_update("t1-1"), "the view of t1-1")
        r = conn.hub.redis
        await _table(r, "seated", "t1", "t1-3")
        if after == "announced":
            await _note(r, "alice", "seated", table="t1", match="t1-3")
            await ws.expect(lambda m: m["kind"] == "lobby" and m["state"] == "seated", "seated at t1-3")
            await ws.expect(_view_update("t1-3"), "the view of t1-3")
        elif after == "closed":
            await r.hset(keys.table_info_key("t1"), "status", "closed")
        await _note(r, "alice", "seated", table="t1", match="t1-2")  # the late one
        nxt, v = ("t1-1", 4) if after == "closed" else ("t1-3", 5)  # a marker the socket forwards
        await _publish_update(r, "alice", nxt, v, {"type": "Passed", "seq": v, "player": "bob"})
        got = await ws.expect(lambda m: m["kind"] in ("lobby", "update"), "the next message")
        if after == "note_lost":  # announced as the table's current match, with its view
            assert (got["kind"], got["state"], got["match"], got["command_id"]) == ("lobby", "seated", "t1-3", None)
            await ws.expect(_view_update("t1-3"), "the view of t1-3")
            assert conn.match == "t1-3"
        elif after == "announced":
            assert (got["kind"], got["match"], got["version"]) == ("update", "t1-3", 5)
            assert conn.match == "t1-3"
        else:  # the table closed: nothing announced, the socket's match as it was
            assert (got["kind"], got["match"], got["version"]) == ("update", "t1-1", 4)
            assert conn.match == "t1-1"

    asyncio.run(_at_a_seated_table(aredis, {"t1-1": 3, "t1-2": 4, "t1-3": 4}, body))


def test_a_late_already_seated_answer_of_a_closed_table_still_answers_the_join(aredis):
    """alice's Join was answered ``seated`` ``already_seated`` at t1-2, but the entry reaches the
    socket after the table closed: it is not forwarded (the socket never goes back to t1-2) and
    her Join is answered ``rejected`` ``stale`` with its own command id.  Before, the answer was
    dropped with the note, and a client that matches answers by ``command_id`` waited for good."""
    async def body(ws: FakeSocket, conn: session.Connection, engine: FakeEngine) -> None:
        await ws.expect(_view_update("t1-1"), "the view of t1-1")
        r = conn.hub.redis
        await _table(r, "seated", "t1", "t1-3")
        await r.hset(keys.table_info_key("t1"), "status", "closed")
        await ws.inbox.put(json.dumps({"type": "Join", "room": "points", "command_id": "j1"}))
        await _eventually(lambda: "j1" in json.dumps(list(conn.pending)), "the Join sent")
        conn.room = None  # the player's room as the socket last heard it (removed): a dropped note keeps it
        for _ in range(2):  # the answer, and a copy of it handled again (a fail-over): answered once
            await _note(r, "alice", "seated", table="t1", match="t1-2", reason="already_seated",
                        command_id=channels.engine_command_id("alice", "j1"))
        await _publish_update(r, "alice", "t1-1", 4, {"type": "Passed", "seq": 4, "player": "bob"})  # a marker
        got = await ws.expect(lambda m: m["kind"] in ("lobby", "rejected", "update"), "the Join's answer")
        assert (got["kind"], got["code"], got["command_id"], got["match"]) == ("rejected", "stale", "j1", None)
        assert "t1-2" not in json.dumps(got) and conn.match == "t1-1"
        got = await ws.expect(lambda m: m["kind"] in ("lobby", "rejected", "update"), "the next message")
        assert (got["kind"], got["match"], got["version"]) == ("update", "t1-1", 4), got  # the copy: nothing
        assert conn.room is None

    asyncio.run(_at_a_seated_table(aredis, {"t1-1": 3, "t1-2": 4, "t1-3": 4}, body))


def test_an_update_of_a_match_not_the_players_tables_is_still_dropped(aredis):
    """An unannounced update of a match the player's table is not at (another table's, or the
    table's finished match) is not forwarded and announces nothing; it is looked up once."""
    lookups: list[str] = []

    async def body(ws: FakeSocket, conn: session.Connection, engine: FakeEngine) -> None:
        await ws.expect(_view_update("t1-1"), "the view of t1-1")
        r = conn.hub.redis
        original = conn.hub.lobby.table_of_match

        async def counted(match: str):
            lookups.append(match)
            return await original(match)
        conn.hub.lobby.table_of_match = counted  # type: ignore[method-assign]
        await _table(r, "seated", "t9", "t9-1", a="carol", b="dave")
        for v in (2, 3):
            await _publish_update(r, "alice", "t9-1", v, {"type": "Passed", "seq": v, "player": "carol"})
        await _publish_update(r, "alice", "t1-1", 4, {"type": "Passed", "seq": 4, "player": "bob"})
        got = await ws.expect(lambda m: m["kind"] in ("update", "lobby"), "the next message")
        assert (got["kind"], got["match"], got["version"]) == ("update", "t1-1", 4), got
        assert conn.match == "t1-1" and lookups == ["t9-1"]

    asyncio.run(_at_a_seated_table(aredis, {"t1-1": 3}, body))


def test_an_update_of_the_next_match_while_the_table_is_being_created_is_asked_about_again(aredis):
    """The first updates of the next match come before the table's read model says it is seated
    (``creating``): nothing is announced yet, and a later update, once the table is seated (its
    note lost), announces it."""
    async def body(ws: FakeSocket, conn: session.Connection, engine: FakeEngine) -> None:
        await ws.expect(_view_update("t1-1"), "the view of t1-1")
        r = conn.hub.redis
        await _table(r, "creating", "t1", "t1-2")
        await _publish_update(r, "alice", "t1-2", 2, {"type": "PlayerSeated", "seq": 2, "player": "alice"})
        await _publish_update(r, "alice", "t1-1", 4, {"type": "Passed", "seq": 4, "player": "bob"})
        got = await ws.expect(lambda m: m["kind"] in ("update", "lobby"), "the next message")
        assert (got["kind"], got["match"]) == ("update", "t1-1") and conn.match == "t1-1", got
        await _table(r, "seated", "t1", "t1-2")
        await _publish_update(r, "alice", "t1-2", 4, {"type": "ClockExtended", "seq": 4, "kind": "ready",
                                                      "by_ms": 5000, "reason": "undelivered"})
        got = await ws.expect(lambda m: m["kind"] == "lobby", "seated at t1-2")
        assert (got["state"], got["match"]) == ("seated", "t1-2")
        await ws.expect(_view_update("t1-2"), "the view of t1-2")

    asyncio.run(_at_a_seated_table(aredis, {"t1-1": 3, "t1-2": 4}, body))


def test_a_sync_with_a_version_is_answered_with_an_ack_after_the_updates(aredis):
    """``Sync`` with a version gets the updates after it, in order, and then an ``ack`` naming
    it, so a client can stop waiting for its answer; with no update after it, the view is
    asked for and the ack follows the request."""
    async def body(ws: FakeSocket, conn: session.Connection, engine: FakeEngine) -> None:
        r = conn.hub.redis
        await ws.expect(_view_update("t1-1"), "the first view")
        for v in (5, 6):
            await _publish_update(r, "alice", "t1-1", v, {"type": "Passed", "seq": v, "player": "bob"})
            await ws.expect(lambda m, v=v: m["kind"] == "update" and m["version"] == v, f"update {v}")
        await ws.inbox.put(json.dumps({"type": "Sync", "version": 4, "match": "t1-1", "command_id": "s3"}))
        got = [await ws.expect(lambda m: m["kind"] in ("update", "ack"), "the Sync's answer") for _ in range(3)]
        assert [(m["kind"], m.get("version"), m.get("command_id")) for m in got] == \
            [("update", 5, None), ("update", 6, None), ("ack", None, "s3")], got
        await ws.inbox.put(json.dumps({"type": "Sync", "version": 2, "match": "t1-1", "command_id": "s4"}))
        await ws.expect(lambda m: m["kind"] == "ack" and m["command_id"] == "s4", "the second Sync's ack")

    asyncio.run(_at_a_seated_table(aredis, {"t1-1": 4}, body))


def test_a_sync_with_a_version_drops_nothing_the_socket_had_not_handed_on_yet(aredis):
    """``Sync`` with a version replays the updates after it and leaves the socket reading where it
    was: an entry of the player's stream not handed on yet (here ``settled``, written while the
    fan-out held the socket back) still reaches the client after the Sync's ack."""
    async def body(ws: FakeSocket, conn: session.Connection, engine: FakeEngine) -> None:
        r = conn.hub.redis
        await ws.expect(_view_update("t1-1"), "the first view")
        sub = conn.subscription
        sub.backlogged = lambda: True  # type: ignore[method-assign]  # the fan-out reads nothing for it
        settled = {"kind": "settled", "match": "t1-1", "scores": {"alice": 4, "bob": -4}}
        await r.xadd(keys.outbox_key("alice"), {"kind": "settled", "m": json.dumps(settled)})
        await r.spublish(keys.outbox_key("alice"), "")
        await ws.inbox.put(json.dumps({"type": "Sync", "version": 3, "match": "t1-1", "command_id": "s4"}))
        await ws.expect(lambda m: m["kind"] == "ack" and m["command_id"] == "s4", "the Sync's ack")
        del sub.backlogged  # the fan-out may read for it again
        sub.fanout.mark(sub, keys.outbox_key("alice"))
        got = await ws.expect(lambda m: m["kind"] == "settled", "the settled entry written before the Sync")
        assert got["scores"] == settled["scores"]

    asyncio.run(_at_a_seated_table(aredis, {"t1-1": 3}, body))


def test_a_sync_off_a_table_is_answered_by_the_lobby_message_naming_it(aredis):
    async def body(ws: FakeSocket, conn: session.Connection, engine: FakeEngine) -> None:
        await ws.inbox.put(json.dumps({"type": "Sync", "command_id": "s4"}))
        got = await ws.expect(lambda m: m["kind"] == "lobby" and m.get("command_id") == "s4", "the lobby answer")
        assert got["match"] is None

    asyncio.run(_with_connection(aredis, {}, body))


@pytest.mark.parametrize("stale", ["queued", None])
def test_a_place_written_late_over_the_seat_does_not_refuse_the_seated_players_commands(aredis, stale):
    """A place read model that says ``queued``, or nothing, under a seated player's seat (lost
    in a fail-over, or written unfenced by an older release: engine/store/place.lua fences
    it now).  The table's read model (fenced: engine/store/table_info.lua) still has them seated
    at the match their socket was seated at, so their Play goes there instead of being refused
    ``not_seated`` for the rest of the match (docs/RELIABILITY.md "Findings")."""

    async def body(ws: FakeSocket, conn: session.Connection, engine: FakeEngine) -> None:
        await ws.expect(_view_update("t1-1"), "the view of t1-1")
        r = conn.hub.redis
        await _place(r, "alice", stale)  # the late write
        seen = conn._notes_seen
        await _note(r, "alice", "seated", table="t1", match="t1-1")  # any note: the next Play looks up again
        await _eventually(lambda: conn._notes_seen > seen, "the note read")
        await ws.inbox.put(json.dumps({"type": "Play", "cards": [5], "command_id": "p1"}))
        await _eventually(lambda: _has_command(r, "t1-1", ("Play", "alice")), "the Play sent to t1-1")
        # the table closed: refused, the place read model or not
        await r.hset(keys.table_info_key("t1"), "status", "closed")
        await _note(r, "alice", "removed", reason="opponent_left")
        await ws.expect(lambda m: m["kind"] == "lobby" and m["state"] == "removed", "removed")
        await ws.inbox.put(json.dumps({"type": "Play", "cards": [7], "command_id": "p2"}))
        refused = await ws.expect(lambda m: m["kind"] == "rejected" and m["command_id"] == "p2", "the refusal")
        assert refused["code"] == "not_seated"
        assert [c for c in await _player_commands(r, "t1-1") if c[0] == "Play"] == [("Play", "alice")]

    asyncio.run(_at_a_seated_table(aredis, {"t1-1": 3}, body))


def test_a_table_that_no_longer_seats_the_player_is_no_way_round_a_place(aredis):
    """The table read model has other players (the socket's match was of a table the player
    left): the player's command is refused ``not_seated``, never sent to that match."""

    async def body(ws: FakeSocket, conn: session.Connection, engine: FakeEngine) -> None:
        await ws.expect(_view_update("t1-1"), "the view of t1-1")
        r = conn.hub.redis
        await _table(r, "seated", "t1", "t1-1", a="carol", b="bob")
        await _place(r, "alice", None)
        seen = conn._notes_seen
        await _note(r, "alice", "removed", reason="left")
        await _eventually(lambda: conn._notes_seen > seen, "the note read")
        await ws.inbox.put(json.dumps({"type": "Play", "cards": [5], "command_id": "p1"}))
        refused = await ws.expect(lambda m: m["kind"] == "rejected" and m["command_id"] == "p1", "the refusal")
        assert refused["code"] == "not_seated"
        assert ("Play", "alice") not in await _player_commands(r, "t1-1")

    asyncio.run(_at_a_seated_table(aredis, {"t1-1": 3}, body))
