"""One gateway connection (gateway/session.py) against a real Redis, with the orderings that
a loaded machine produces forced on purpose: the lobby seating a table between the moment a
connection reads the player's place and the moment it starts reading their streams, the
engine refusing the gateway's own Sync, the client's own Sync answered after the table moved
on.  The engine is played by a small task that answers the Syncs it finds on ``sk:inbox``
in the engine's own format (docs/PROTOCOL.md §2, ``kind=sync``).

Issue 14 "Reconnect": on connect or reconnect the player at once gets the current view of
their table or match."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

import msgpack
import pytest
from starlette.websockets import WebSocketDisconnect, WebSocketState

from engine.match.commands import decode_command
from engine.service.channels import OPS, PLAYER
from engine.store import keys
from gateway import channels, session
from gateway.lobby import Lobby, notes_key, table_key
from gateway.metrics import GatewayMetrics
from gateway.rooms import RoomBook
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

    async def receive_text(self) -> str:
        raw = await self.inbox.get()
        if raw is None:
            raise WebSocketDisconnect(1000)
        return raw

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


class FakeEngine:
    """Answers each Sync on ``sk:inbox`` like the engine: a ``sync`` entry with the view, or,
    with ``refuse``, a rejection (with the view when the match exists, as the engine does)."""

    def __init__(self, redis: Any, versions: dict[str, int], refuse: bool = False) -> None:
        self.redis = redis
        self.versions = versions  # match -> its current version (0: no such match)
        self.refuse = refuse
        self.syncs: list[tuple[str, str, str]] = []  # (match, player, command id) in arrival order

    def view(self, match: str, player: str) -> dict[str, Any]:
        return {"match_id": match, "you": player, "phase": "seating", "version": self.versions[match],
                "hand": [1, 2, 3]}

    async def run(self) -> None:
        positions = {s: "0-0" for s in PLAYER.streams()}  # every bucket's inbox (issue 24 §2)
        while True:
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
        await ws.close()
        await asyncio.wait_for(run, WAIT_S)
        engine_task.cancel()
        await asyncio.gather(engine_task, return_exceptions=True)
        await r.aclose()


async def _table_creating(lobby: Lobby) -> None:
    """alice and bob paired at t1 (its match t1-1 not created yet)."""
    await lobby._call("join", "points", "alice")
    await lobby._call("join", "points", "bob")


async def _at_a_seated_table(aredis, engine_versions: dict[str, int], body: Callable[..., Awaitable[None]],
                             **kwargs: Any) -> None:
    """alice and bob seated at t1 (match t1-1), then ``body`` on alice's connection."""
    r = aredis()
    lobby = Lobby(r, RoomBook.load(), "setup")
    await _table_creating(lobby)
    assert await lobby._call("seated", "t1", "t1-1") == 1
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
            assert await lobby._call("seated", "t1", "t1-1") == 1

    async def body(ws: FakeSocket, conn: session.Connection, engine: FakeEngine) -> None:
        await ws.expect(lambda m: m["kind"] == "lobby" and m["state"] == "seated" and m["match"] == "t1-1",
                        "seated")
        got = await ws.expect(_view_update("t1-1"), "the view of t1-1")
        assert got["view"]["you"] == "alice" and got["version"] == 3

    async def main() -> None:
        r = aredis()
        lobby = Lobby(r, RoomBook.load(), "setup")
        await _table_creating(lobby)
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
        lobby = Lobby(r, RoomBook.load(), "setup")
        await _table_creating(lobby)
        await r.aclose()

        original_send = session.Connection.send

        async def logging_send(self, message):
            conn_log.append(message)
            await original_send(self, message)

        session.Connection.send = logging_send  # type: ignore[method-assign]
        original_positions = session.Connection._take_positions

        async def positions_then_seat(self):
            await original_positions(self)
            assert await self.hub.lobby._call("seated", "t1", "t1-1") == 1
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
class FakeOps:
    """Accepts every command on ``sk:ops`` like the engine (AddRoom stored in ``sk:rooms``)."""

    def __init__(self, redis: Any, before_reply: Callable[[Any], Awaitable[None]] | None = None) -> None:
        self.redis = redis
        self.commands: list[Any] = []
        self.before_reply = before_reply  # what happens meanwhile, before the engine answers

    async def run(self) -> None:
        from engine.service.rooms import ROOMS_KEY, named

        positions = {s: "0-0" for s in OPS.streams()}  # sk:ops and every bucket's sk:{b<N>}:ops
        while True:
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


def test_the_lobby_registers_its_file_rooms_and_creates_matches_by_room_name(aredis, tmp_path):
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
            await lobby._call("join", "quick", "alice")
            await lobby._call("join", "quick", "bob")
            async def seated() -> None:
                while (await lobby.table("t1")).status != "seated":
                    await asyncio.sleep(0.05)
            await asyncio.wait_for(seated(), WAIT_S)
        finally:
            stop.set()
            tasks[0].cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await r.aclose()
        types = [c.type for c in ops.commands]
        assert types[0] == "AddRoom" and ops.commands[0].name == "quick" and ops.commands[0].replace
        create = next(c for c in ops.commands if c.type == "CreateMatch")
        assert (create.room, create.config) == ("quick", None)  # the name, never the config
        assert types.index("AddRoom") < types.index("CreateMatch")
        assert rooms.get("other") is not None and rooms.get("other").turn_seconds == 9
        assert rooms.registered("quick") and not rooms.registered("nope")
        assert types.count("AddRoom") == 1  # registered once, not on every refresh

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
        await conn.hub.lobby._call("removed", "t1", "t1-1", "bob", "left")
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
        await lobby._call("removed", "t1", "t1-1", "bob", "left")
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
        assert await conn.hub.lobby._call("seated", "t1", "t1-1") == 1
        await ws.expect(lambda m: m["kind"] == "lobby" and m["state"] == "seated" and m["match"] == "t1-1",
                        "seated")
        before = len(lookups)  # the connection's own
        await ws.inbox.put(json.dumps({"type": "Ready", "command_id": "r1"}))
        r = conn.hub.redis
        await _eventually(lambda: _has_command(r, "t1-1", ("Ready", "alice")), "the Ready sent")
        assert len(lookups) == before == 1, lookups
        await conn.hub.lobby._call("removed", "t1", "t1-1", "bob", "left")
        await ws.expect(lambda m: m["kind"] == "lobby" and m["state"] == "queued", "queued again")
        await ws.inbox.put(json.dumps({"type": "Ready", "command_id": "late"}))
        refused = await ws.expect(lambda m: m["kind"] == "rejected" and m["command_id"] == "late", "the refusal")
        assert refused["code"] == "not_seated" and len(lookups) == before + 1
        assert (await _player_commands(r, "t1-1")).count(("Ready", "alice")) == 1

    async def main() -> None:
        r = aredis()
        await _table_creating(Lobby(r, RoomBook.load(), "setup"))
        await r.aclose()
        await _with_connection(aredis, {"t1-1": 3}, body, place_hook=count)

    asyncio.run(main())


@pytest.mark.parametrize("fails", [0, 1], ids=["lobby up", "lobby step failing once"])
def test_the_end_of_a_match_reaches_the_client_first_and_its_next_message_waits_for_the_lobby(aredis, fails):
    """The finish goes out before the lobby's step on it (its Redis calls, queued behind every
    socket's under load, held the last update of each match back by up to half a second); the
    client's Leave on seeing it waits until the lobby has the finish (a failed step is tried
    again first), so it is noted for the settlement (the table closes then), never sent to the
    engine for a match that is over."""
    order: list[str] = []
    gate = asyncio.Event()
    failures = [fails]

    async def body(ws: FakeSocket, conn: session.Connection, engine: FakeEngine) -> None:
        await ws.expect(_view_update("t1-1"), "the view of t1-1")
        lobby = conn.hub.lobby
        observe, quit_, caught_up = lobby.observe, lobby.quit, conn.resync.lobby_caught_up

        async def slow_observe(match: str, events: list[dict[str, Any]]) -> None:
            order.append("observing")
            await gate.wait()
            if failures[0]:
                failures[0] -= 1
                raise ConnectionError("the lobby's Redis is away")
            await observe(match, events)
            order.append("observed")

        async def quit(player: str, command_id: str | None = None) -> Any:
            order.append("leave")
            return await quit_(player, command_id)

        async def waits() -> None:
            order.append("next message waits")
            await caught_up()
        lobby.observe = slow_observe  # type: ignore[method-assign]
        lobby.quit = quit  # type: ignore[method-assign]
        conn.resync.lobby_caught_up = waits  # type: ignore[method-assign]
        r = conn.hub.redis
        await _publish_update(r, "alice", "t1-1", 4, {"type": "MatchFinished", "loser": "bob", "reason": "cards_out"})
        got = await ws.expect(lambda m: m["kind"] == "update" and m["version"] == 4, "the finish")
        assert [e["type"] for e in got["events"]] == ["MatchFinished"]
        assert order == ["observing"]  # sent while the lobby's step waits
        await ws.inbox.put(json.dumps({"type": "Leave", "command_id": "bye"}))
        await _eventually(lambda: "next message waits" in order, "the Leave held back")
        assert "leave" not in order
        gate.set()
        await _eventually(lambda: "leave" in order, "the Leave handled")
        assert order == ["observing", "next message waits"] + ["observing"] * fails + ["observed", "leave"]
        table = await lobby.table("t1")
        assert table is not None and table.finished == "t1-1"

        async def noted() -> bool:  # for the settlement
            return _s(await r.hget(table_key("t1"), "leaving_a")) == "1"
        await _eventually(noted, "the Leave noted")
        assert ("Leave", "alice") not in await _player_commands(r, "t1-1")

    asyncio.run(_at_a_seated_table(aredis, {"t1-1": 3}, body))


def test_a_ready_after_the_table_closed_under_it_is_refused_here_never_sent_to_its_match(aredis):
    """bob leaves before the deal: alice's socket sends her the removal, then the lobby closes
    the table and queues her again.  Her Ready right after it is looked up again (the place the
    ``seated`` note gave is dropped with the end of its match) and refused ``not_seated``, even
    while the ``queued`` note has not reached her socket yet."""
    release = asyncio.Event()

    async def body(ws: FakeSocket, conn: session.Connection, engine: FakeEngine) -> None:
        await ws.expect(lambda m: m["kind"] == "lobby" and m["state"] == "queued", "at a table being created")
        assert await conn.hub.lobby._call("seated", "t1", "t1-1") == 1
        await ws.expect(_view_update("t1-1"), "the view of t1-1")
        deliver = conn.subscription.deliver

        async def notes_held(stream: str, entry_id: str, fields: dict) -> None:
            if stream == notes_key("alice"):
                await release.wait()
            await deliver(stream, entry_id, fields)
        conn.subscription.deliver = notes_held  # type: ignore[method-assign]
        r = conn.hub.redis
        await _publish_update(r, "alice", "t1-1", 4, {"type": "PlayerRemoved", "player": "bob", "reason": "left"})
        await ws.expect(lambda m: m["kind"] == "update" and m["version"] == 4, "the removal")
        await ws.inbox.put(json.dumps({"type": "Ready", "command_id": "r2"}))
        refused = await ws.expect(lambda m: m["kind"] == "rejected" and m["command_id"] == "r2", "the refusal")
        assert refused["code"] == "not_seated"
        release.set()
        await ws.expect(lambda m: m["kind"] == "lobby" and m["state"] == "queued", "queued again")
        assert ("Ready", "alice") not in await _player_commands(r, "t1-1")

    async def main() -> None:
        r = aredis()
        await _table_creating(Lobby(r, RoomBook.load(), "setup"))
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


@pytest.mark.parametrize("case", [
    # the next match was being created at the lookup, and seated before the lobby's leave:
    # the engine decides the Leave (before the deal: PlayerRemoved left), never not_seated
    "creating, then seated",
    # queued at the lookup, paired before the dequeue: the table closes at once, alice leaves
    # the room and bob goes back to the queue
    "queued, then paired",
])
def test_a_leave_overtaken_by_the_lobby_is_never_lost(aredis, case):
    """The CI failure of test_a_player_who_leaves_at_the_settlement_closes_the_table: the
    lobby moved the player between the Leave's place lookup and its transition; the Leave was
    refused ``not_seated`` and the ready clock removed the player ``not_ready`` instead.  The
    Leave is now one lobby step (``quit``) against wherever the lobby has the player then."""
    state: dict[str, Any] = {}

    async def overtake(lobby: Lobby) -> None:
        if not state.get("armed") or state.get("done"):
            return
        state["done"] = True
        if case == "creating, then seated":
            assert await lobby._call("seated", "t1", "t1-1") == 1
        else:
            await lobby._call("join", "points", "bob")

    async def body(ws: FakeSocket, conn: session.Connection, engine: FakeEngine) -> None:
        await ws.expect(lambda m: m["kind"] == "lobby", "where alice is")
        state["armed"] = True
        await ws.inbox.put(json.dumps({"type": "Leave", "command_id": "bye"}))
        if case == "creating, then seated":
            r = conn.hub.redis
            for _ in range(int(WAIT_S / 0.02)):
                if ("Leave", "alice") in await _player_commands(r, "t1-1"):
                    break
                await asyncio.sleep(0.02)
            assert ("Leave", "alice") in await _player_commands(r, "t1-1")
        else:
            gone = await ws.expect(lambda m: m["kind"] == "lobby" and m["state"] == "removed"
                                   or m["kind"] == "rejected", "alice removed")
            assert (gone["kind"], gone.get("reason"), gone.get("table")) == ("lobby", "left", "t1")
            bob = await conn.hub.lobby.place("bob")
            assert bob.state == "queued"
        assert state.get("done")
        assert not [m for m in list(ws.out._queue) if m["kind"] == "rejected"]  # type: ignore[attr-defined]

    async def setup() -> None:
        r = aredis()
        lobby = Lobby(r, RoomBook.load(), "setup")
        if case == "creating, then seated":
            await _table_creating(lobby)
        else:
            await lobby._call("join", "points", "alice")
        await r.aclose()
        await _with_connection(aredis, {"t1-1": 3}, body, place_hook=overtake)

    asyncio.run(setup())


def test_a_table_closed_while_its_match_is_created_leaves_nobody_seated_in_it(aredis):
    """alice leaves while the next match is created (the table closes at once); the match the
    lobby goes on creating gets both players' Leave, so it ends now instead of waiting for its
    ready clock (R-13.2) with alice seated in it."""

    async def main() -> None:
        r = aredis()
        lobby = Lobby(r, RoomBook.load(), "gw-close")

        async def leave_at_bobs_sit(cmd: Any) -> None:
            if cmd.type == "Sit" and cmd.player == "bob":
                assert (await lobby._call("leave", "t1", "t1-1", "alice"))[0] in (b"closed", "closed")

        ops = FakeOps(r, leave_at_bobs_sit)
        stop = asyncio.Event()
        await lobby.replies.start()
        tasks = [asyncio.create_task(ops.run()), asyncio.create_task(lobby.replies.run(stop))]
        try:
            await _table_creating(lobby)
            table = await lobby.table("t1")
            assert table is not None and table.status == "creating"
            assert await asyncio.wait_for(lobby._create(table), WAIT_S)
            assert (await lobby.table("t1")).status == "closed"
            leaves = [p for t, p in await _player_commands(r, "t1-1") if t == "Leave"]
            assert set(leaves) == {"alice", "bob"}
        finally:
            stop.set()
            tasks[0].cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await r.aclose()

    asyncio.run(main())


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
