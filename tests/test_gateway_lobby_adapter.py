"""The gateway's lobby adapter (gateway/lobby.py) and its bots (gateway/bots.py) against a real
redis-server, on the contract with the engine's lobby (issue 34 §4, docs/ARCHITECTURE.md):
the commands it XADDs to the lobby channel, the place and table reads, the presence writes, the
metrics' waiting counts, the bot offers, the bot seats read with the ``sk-bots`` group, and a bot
that gets ready on its ``seated`` and stops on its ``removed``."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import msgpack
import pytest

from engine.match.commands import decode_command
from engine.store import keys
from gateway import channels
from gateway.bots import OFFER_TTL_S, BotDriver
from gateway.fanout import Fanout
from gateway.lobby import Lobby, Place, Table, returned_command_id
from gateway.rooms import RoomBook

pytestmark = [pytest.mark.redis]

WAIT_S = 30.0  # a bound that only stops a broken run from hanging; nothing is timed


@pytest.fixture
def aredis(redis_server):
    import redis
    import redis.asyncio as aioredis

    url = redis_server.db_url(7)
    with redis.Redis.from_url(url) as c:
        c.flushdb()
    return lambda: aioredis.Redis.from_url(url, socket_timeout=30)


def _run(aredis, body) -> None:
    async def main() -> None:
        r = aredis()
        try:
            await body(r, Lobby(r, RoomBook.load(), "gw-a"))
        finally:
            await r.aclose()
    asyncio.run(main())


async def _commands(r: Any, room: str) -> list[dict[str, Any]]:
    return [json.loads(f[b"c"]) for _i, f in await r.xrange(keys.lobby_inbox_key(keys.room_bucket(room)))]


def test_join_leave_and_returned_are_one_json_field_on_the_rooms_bucket_channel(aredis):
    async def body(r: Any, lobby: Lobby) -> None:
        await lobby.join("alice", "points", "j1")
        assert await lobby.quit("alice", "l1") is False  # nowhere: nothing sent
        await r.hset(keys.place_key("alice"), mapping={"state": "queued", "room": "points"})
        assert await lobby.quit("alice", "l1") is True
        await lobby.came_back("alice", "points")
        await lobby.came_back("alice", None)  # no room: nothing
        stream = keys.lobby_inbox_key(keys.room_bucket("points"))
        assert [set(f) for _i, f in await r.xrange(stream)] == [{b"c"}] * 3
        join, leave, returned = await _commands(r, "points")
        assert join == {"type": "Join", "command_id": channels.engine_command_id("alice", "j1"), "room": "points",
                        "player": "alice"}
        assert leave == {**join, "type": "Leave", "command_id": channels.engine_command_id("alice", "l1")}
        assert returned["type"] == "Returned" and returned["command_id"].startswith("gw:returned:alice:")
        assert channels.client_command_id("alice", returned["command_id"]) is None  # never a client's id
        assert returned_command_id("alice") != returned_command_id("alice")

    _run(aredis, body)


def test_the_channel_is_the_room_buckets(aredis):
    """Each room's commands go to the bucket of the room (crc32 of its name): its queue's owner."""
    async def body(r: Any, lobby: Lobby) -> None:
        rooms = ["points", "wealth", "beginners", "vip"]
        for room in rooms:
            await lobby.join("p", room, room)
        for room in rooms:
            assert [c["room"] for c in await _commands(r, room)] == [x for x in rooms
                                                                    if keys.room_bucket(x) == keys.room_bucket(room)]

    _run(aredis, body)


def test_a_malformed_command_is_refused_before_it_is_sent(aredis):
    from engine.match.errors import BadCommand

    async def body(r: Any, lobby: Lobby) -> None:
        with pytest.raises(BadCommand):
            await lobby.send("Join", "points", "x" * 101, "c")  # a player id longer than the model's
        with pytest.raises(BadCommand):
            await lobby.send("Dance", "points", "alice", "c")
        assert await _commands(r, "points") == []

    _run(aredis, body)


def test_place_and_table_are_read_from_the_engines_read_models(aredis):
    async def body(r: Any, lobby: Lobby) -> None:
        assert await lobby.place("alice") == Place("")
        await r.hset(keys.place_key("alice"), mapping={"state": "queued", "room": "wealth"})
        assert await lobby.place("alice") == Place("queued", "wealth")
        info = {"room": "points", "a": "alice", "b": "bot-1", "n": "2", "match": "tabc-2", "status": "between",
                "finished": "tabc-2", "escaped": "", "bot_level": "hard"}
        await r.hset(keys.table_info_key("tabc"), mapping=info)
        await r.hset(keys.place_key("alice"), mapping={"state": "table", "room": "points", "table": "tabc",
                                                       "match": "tabc-2"})
        table = Table("tabc", "points", ("alice", "bot-1"), 2, "tabc-2", "between", "tabc-2", "", "hard")
        assert await lobby.place("alice") == Place("table", "points", table)
        assert await lobby.table("tabc") == table
        assert await lobby.table_of_match("tabc-2") == table
        assert await lobby.table_of_match("nope-1") is None and await lobby.table("") is None
        await r.hset(keys.table_info_key("tabc"), "status", "closed")
        assert await lobby.place("alice") == Place("", "points")  # the engine moves the player next

    _run(aredis, body)


def test_presence_is_one_sorted_set_per_room_and_waiting_the_queues_read_model(aredis):
    async def body(r: Any, lobby: Lobby) -> None:
        await lobby.present({"alice": ("points", 10), "bob": ("wealth", 20), "carol": ("points", 30)})
        assert await r.zrange(keys.presence_key("points"), 0, -1, withscores=True) == [(b"alice", 10), (b"carol", 30)]
        assert await r.zrange(keys.presence_key("wealth"), 0, -1, withscores=True) == [(b"bob", 20)]
        await lobby.present({"alice": ("points", 40)})
        assert await r.zscore(keys.presence_key("points"), "alice") == 40  # pushed forward
        await r.hset(keys.queue_info_key("points"), "waiting", 3)
        assert await lobby.waiting(["points", "wealth"]) == {"points": 3, "wealth": 0}
        assert lobby.grace_ms_of("points") == int(1000 * lobby.rooms.get("points").reconnect_grace_seconds)

    _run(aredis, body)


def test_a_bot_gateway_offers_bots_with_a_ttl_and_the_rooms_wait_and_level(aredis):
    async def body(r: Any, lobby: Lobby) -> None:
        driver = BotDriver(lobby, r, None, level="hard")  # type: ignore[arg-type]
        await driver.offer(["points", "wealth"])
        for room in ("points", "wealth"):
            offer = json.loads(await r.get(keys.bot_offer_key(room)))
            assert offer == {"after_ms": driver.wait_ms_of(room), "level": driver.level_of(room)}
            assert 0 < await r.ttl(keys.bot_offer_key(room)) <= OFFER_TTL_S
        await driver.withdraw(["wealth"])  # a gateway stopping takes its offers back
        assert await r.exists(keys.bot_offer_key("wealth")) == 0 and await r.exists(keys.bot_offer_key("points"))

    _run(aredis, body)


def test_each_seated_bot_is_taken_by_one_gateway_and_acknowledged(aredis):
    async def body(r: Any, lobby: Lobby) -> None:
        one = BotDriver(lobby, r, None)  # type: ignore[arg-type]
        two = BotDriver(lobby, r, None)  # type: ignore[arg-type]
        started: list[tuple[str, str, str | None, str | None]] = []
        one.start = lambda bot, room=None, match=None: started.append(("one", bot, room, match))  # type: ignore[method-assign]
        two.start = lambda bot, room=None, match=None: started.append(("two", bot, room, match))  # type: ignore[method-assign]
        assert await one.take_seats(["points"], "gw-1") == []  # the group made (MKSTREAM), nothing yet
        stream = keys.bot_seats_key("points")
        for n in (1, 2):
            await r.xadd(stream, {"bot": f"bot-{n}", "table": f"t{n}", "match": f"t{n}-1", "level": "easy"})
        assert await two.take_seats(["points", "wealth"], "gw-2") == ["bot-1", "bot-2"]
        assert await one.take_seats(["points"], "gw-1") == []  # each bot once
        assert started == [("two", "bot-1", "points", "t1-1"), ("two", "bot-2", "points", "t2-1")]
        pending = await r.xpending(stream, keys.BOTS_GROUP)
        assert pending["pending"] == 0  # acknowledged after starting

    _run(aredis, body)


def test_a_bot_gets_ready_on_its_seated_and_stops_on_its_removed(aredis):
    """The bot reads its own stream ``sk:out:{<bot>}``: a ``seated`` lobby entry → a Ready in
    that match (one id per match: a second is the engine's duplicate); a ``removed`` → it stops."""
    async def body(r: Any, lobby: Lobby) -> None:
        fanout = Fanout(r, sweep_s=0.05)
        driver = BotDriver(lobby, r, fanout, think_s=0)
        bot = "bot-ab12"
        out = keys.outbox_key(bot)
        m = {"kind": "lobby", "state": "seated", "room": "points", "table": "t1", "match": "t1-1", "reason": None,
             "bot_level": "normal", "command_id": None}
        await r.xadd(out, {"kind": "lobby", "m": json.dumps(m)})
        try:
            driver.start(bot, "points", "t1-1")
            inbox = channels.stream_for(channels.player_command("Ready", "t1-1", bot, "x"))

            async def readies() -> list[Any]:
                return [c for c in (decode_command(f[b"c"]) for _i, f in await r.xrange(inbox))
                        if c.type == "Ready" and c.player == bot]
            for _ in range(int(WAIT_S / 0.02)):
                if await readies():
                    break
                await asyncio.sleep(0.02)
            (ready,) = await readies()
            assert ready.match_id == "t1-1" and ready.command_id == channels.lobby_command_id("t1-1", "bot", "ready")
            # seated in the match's own update too: the same Ready id again (a duplicate)
            await r.xadd(out, {"kind": "update", "match": "t1-1", "command_id": "e", "version": 2,
                               "body": msgpack.packb({"events": [{"type": "PlayerSeated", "player": bot,
                                                                  "seat": 1, "seq": 2}]})})
            await r.xadd(out, {"kind": "lobby", "m": json.dumps({**m, "state": "removed", "reason": "table_closed"})})
            await asyncio.wait_for(driver.tasks[bot], WAIT_S) if bot in driver.tasks else None
            assert bot not in driver.tasks
            assert {c.command_id for c in await readies()} == {ready.command_id}
        finally:
            await fanout.aclose()

    _run(aredis, body)


def test_one_player_over_their_join_table_limit_spends_nothing_of_their_address(aredis):
    """JoinTable attempts count per player (2 here) and per address (5): a player over their own
    limit is refused without counting for the address, so the others behind it (a NAT, a proxy
    not named ``--trusted-proxy``) keep their attempts (the security review of 2026-12-06: 31
    wrong codes of one player refused everyone at the address for a minute)."""
    async def body(r: Any, lobby: Lobby) -> None:
        # (player, allowed?) in order, all from 10.0.0.9
        steps = [("mallory", True), ("mallory", True), *[("mallory", False)] * 30,
                 ("ann", True), ("ann", True), ("bob", True), ("bob", False), ("ann", False)]
        for player, allowed in steps:
            wait = await lobby.join_allowed(player, "10.0.0.9", 2, 5, 60)
            assert (wait == 0) == allowed, (player, wait)
            assert wait == 0 or 0 < wait <= 60_000
        assert int(await r.get(keys.join_attempts_key("a:10.0.0.9"))) == 6  # 5 allowed, bob's 6th refused
    _run(aredis, body)
