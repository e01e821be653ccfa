"""The command path's packed round trips (engine/store/wire.py) on a real redis-server.

serve's inbox read and its appends go to Redis packed by hiredis, one write per round trip,
past redis-py's per-call work.  What they send is what redis-py sends; each reply comes back in
its place (an error reply as its ResponseError); a connection that fails is dropped and the
next round trip connects afresh; the read and the appends give what redis-py's path gives, on
RESP3 (redis-py's default) and RESP2; a client the module cannot serve keeps redis-py's path.
On this module's own redis-server: it flushes the scripts and kills clients.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.connection import Connection

from engine.config import load_config
from engine.match.commands import Ready
from engine.service import inbox as inbox_mod
from engine.service.client import GatewayClient
from engine.service.inbox import InboxConsumer
from engine.service.service import MatchService
from engine.service.shuffle import seeded_random, seeded_server_seeds
from engine.service.state_cache import StateCache
from engine.store import keys, wire
from engine.store.redis_store import RedisEventStore
from tests.conftest import RedisServer, own_redis_server

pytestmark = pytest.mark.redis


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    yield from own_redis_server()  # SCRIPT FLUSH and CLIENT KILL are server-wide


@pytest.mark.parametrize("args", [
    ("XACK", "sk:{b3}:inbox", "sk-service", b"17-0", "18-1"),
    ("EVALSHA", "f" * 40, 2, b"k1", "k2", "m", "7", "", 3, b"\x00\xff\x81", "\u96d9\u6263"),
    ("XREADGROUP", b"GROUP", "g", "c", b"COUNT", "10", b"BLOCK", "500", b"STREAMS", "a", "b", ">", ">"),
])
def test_a_packed_command_is_what_redis_py_sends(args: tuple[Any, ...]) -> None:
    assert wire.pack(*args) == b"".join(Connection().pack_command(*args))


def test_a_value_redis_py_would_refuse_is_refused() -> None:
    with pytest.raises(redis.DataError):
        wire.pack("SET", "k", object())


def test_a_plain_client_is_served_and_the_others_keep_redis_py(redis_server: RedisServer) -> None:
    import fakeredis

    plain = redis_server.client()
    assert wire.usable(plain)
    assert wire.usable(redis_server.client(protocol=2))
    assert not wire.usable(redis_server.client(decode_responses=True))
    assert not wire.usable(redis_server.client(single_connection_client=True))
    assert not wire.usable(redis.Redis(connection_pool=redis.BlockingConnectionPool.from_url(redis_server.url)))
    assert not wire.usable(fakeredis.FakeRedis(server=fakeredis.FakeServer()))
    assert not wire.usable(object())


def test_the_replies_come_in_order_with_an_error_in_its_place(real_redis) -> None:
    r = real_redis
    r.set("plain", "v")
    replies = wire.round_trip(r, [wire.pack("SET", "a", "1"), wire.pack("XACK", "plain", "g", "1-0"),
                                  wire.pack("INCR", "a")])
    assert replies[0] is True or replies[0] == b"OK"
    assert isinstance(replies[1], redis.ResponseError) and "WRONGTYPE" in str(replies[1])
    assert replies[2] == 2
    assert wire.round_trip(r, [wire.pack("GET", "a")]) == [b"2"]  # the connection was left clean


def test_a_thread_keeps_one_connection_and_gives_it_back_when_it_ends(real_redis) -> None:
    r = real_redis
    pool = r.connection_pool
    mine = wire.round_trip(r, [wire.pack("CLIENT", "ID")])[0]
    assert wire.round_trip(r, [wire.pack("CLIENT", "ID")])[0] == mine  # kept between round trips
    assert len(pool._in_use_connections) == 1
    theirs: list[Any] = []
    t = threading.Thread(target=lambda: theirs.append(wire.round_trip(r, [wire.pack("CLIENT", "ID")])[0]))
    t.start()
    t.join()
    assert theirs and theirs[0] != mine  # a thread of its own: a connection of its own ...
    assert len(pool._in_use_connections) == 1  # ... back in the pool once that thread ended
    assert r.ping()  # the pool hands it out again
    r.execute_command("CLIENT", "KILL", "ID", mine)  # closed by the server while kept: connects afresh
    again = wire.round_trip(r, [wire.pack("CLIENT", "ID")])[0]
    assert again != mine and wire.round_trip(r, [wire.pack("CLIENT", "ID")])[0] == again


def test_a_connection_lost_mid_round_trip_raises_and_the_next_one_connects_afresh(real_redis) -> None:
    r = real_redis
    first = wire.round_trip(r, [wire.pack("CLIENT", "ID")])[0]
    with pytest.raises(redis.ConnectionError):  # the server closes the connection before the PING's reply
        wire.round_trip(r, [wire.pack("QUIT"), wire.pack("PING")])
    assert not r.connection_pool._in_use_connections  # dropped and given back
    second = wire.round_trip(r, [wire.pack("CLIENT", "ID")])[0]
    assert second != first
    assert wire.round_trip(r, [wire.pack("PING")])[0] in (True, b"PONG")


@pytest.mark.parametrize("protocol", [3, 2])
def test_the_read_of_several_streams_gives_what_redis_py_gives(redis_server: RedisServer, monkeypatch,
                                                                protocol: int) -> None:
    r = redis_server.client(protocol=protocol)
    streams = [keys.inbox_key(b) for b in (1, 2, 3)]
    got: dict[bool, Any] = {}
    for direct in (True, False):
        r.flushdb()
        consumers = [InboxConsumer(r, None, f"c{direct}", stream=s, group=f"g{direct}") for s in streams]
        for k, s in enumerate(streams[:2]):
            r.xadd(s, {"c": f"cmd{k}".encode(), "reply_to": b"sk:reply:x"}, id=f"{5 + k}-0")
        monkeypatch.setattr(wire, "usable", lambda _client, _d=direct: _d)
        by_stream = inbox_mod._read_together(consumers, consumers, None, 10)
        assert by_stream is not None
        got[direct] = by_stream
        # the acknowledgements go with the next read, in the same round trip
        consumers[0]._unsent_acks.append(by_stream[streams[0]][0][0])
        assert inbox_mod._read_together(consumers, consumers, None, 10) == {}
        assert int(r.xpending(streams[0], f"g{direct}")["pending"]) == 0
        assert int(r.xpending(streams[1], f"g{direct}")["pending"]) == 1
    assert got[True] == got[False] == {
        streams[0]: [(b"5-0", {b"c": b"cmd0", b"reply_to": b"sk:reply:x"})],
        streams[1]: [(b"6-0", {b"c": b"cmd1", b"reply_to": b"sk:reply:x"})],
    }


def _service(r: Any) -> tuple[MatchService, RedisEventStore]:
    clock = iter(range(1_000_000, 10**12, 1000))
    store = RedisEventStore(r)
    return MatchService(store, lambda: next(clock), seeded_random(3), state_cache=StateCache(),
                        server_seeds=seeded_server_seeds(3)), store


def test_an_append_after_the_scripts_were_flushed_loads_the_script_and_runs_once(real_redis) -> None:
    r = real_redis
    svc, store = _service(r)
    assert wire.usable(store.client)
    lobby = GatewayClient(r, inbox="sk:setup", ops="sk:setup")
    setup = InboxConsumer(r, svc, "t", stream="sk:setup")
    for mid in ("w1", "w2"):
        lobby.create_match(mid, load_config("points").to_record())
        for p in "ab":
            lobby.sit(mid, mid + p)
    while setup.run_once(block_ms=None, count=50):
        pass
    version = svc.load_state("w1").version
    r.script_flush()  # one append alone
    out = svc.execute(Ready(command_id="r-a", match_id="w1", player="w1a"))
    assert out.accepted and not out.duplicate and out.state.version == version + 1
    r.script_flush()  # a round of two appends in one write: NOSCRIPT for each, loaded, sent again
    results = svc.execute_many([Ready(command_id="r-b", match_id="w1", player="w1b"),
                                Ready(command_id="r-c", match_id="w2", player="w2a")])
    for mid, res in zip(("w1", "w2"), results):
        assert not isinstance(res, Exception) and res.accepted and not res.duplicate
        assert len(store.load(mid)) == res.state.version
    again = svc.execute(Ready(command_id="r-a", match_id="w1", player="w1a"))
    assert again.duplicate  # the first run after the flush counted once


def test_riders_go_in_the_same_write_and_their_blocking_reply_waits_on_a_connection_of_their_own(real_redis) -> None:
    r = real_redis
    r.delete("ride")
    r.xgroup_create("ride", "g", id="0", mkstream=True)
    mine = wire.round_trip(r, [wire.pack("CLIENT", "ID")])[0]
    rider = wire.Rider(r, [wire.pack("CLIENT", "ID"), wire.pack("XREADGROUP", "GROUP", "g", "c", "BLOCK", "5000",
                                                                 "STREAMS", "ride", ">")])
    assert rider.boards(r)
    assert wire.round_trips([(r, [wire.pack("SET", "ridden", "1")])], rider) == [[b"OK"]]  # its own replies only
    assert rider.sent and rider.in_flight is not None and not rider.boards(r)  # taken once
    # the thread's next round trip takes another connection: the rider's read blocks on its own
    other = wire.round_trip(r, [wire.pack("CLIENT", "ID"), wire.pack("GET", "ridden")])
    assert other[0] != mine and other[1] == b"1"
    r.xadd("ride", {"f": "v"})
    ids, read = rider.in_flight.finish()
    assert ids == mine  # the riders went on the thread's connection, after the commands
    stream = read[b"ride"] if isinstance(read, dict) else dict(read)[b"ride"]
    assert stream[0][1] == [b"f", b"v"]
    with pytest.raises(RuntimeError):
        rider.in_flight.finish()
    # the connection is the thread's again, or back in the pool: nothing is left unread on either
    assert wire.round_trip(r, [wire.pack("PING")])[0] in (True, b"PONG")
    assert r.ping()


def test_an_abandoned_rider_drops_its_connection_so_no_one_reads_its_reply(real_redis) -> None:
    r = real_redis
    r.delete("ride2")
    r.xgroup_create("ride2", "g", id="0", mkstream=True)
    rider = wire.Rider(r, [wire.pack("XREADGROUP", "GROUP", "g", "c", "BLOCK", "2000", "STREAMS", "ride2", ">")])
    wire.round_trips([(r, [wire.pack("PING")])], rider)
    assert rider.in_flight is not None
    rider.in_flight.abandon()
    r.xadd("ride2", {"f": "v"})  # the abandoned read is gone with its connection: it takes nothing
    for _ in range(20):  # every connection of the pool answers its own commands
        assert r.get("nothing-here") is None
        assert wire.round_trip(r, [wire.pack("PING")])[0] in (True, b"PONG")
    assert r.xpending("ride2", "g")["pending"] == 0


def test_a_rider_boards_only_a_round_trip_to_its_own_server(real_redis, redis_server: RedisServer) -> None:
    r = real_redis
    at = r.connection_pool.connection_kwargs
    same = redis.Redis(host=at["host"], port=at["port"], db=at.get("db", 0))
    other_db = redis.Redis(host=at["host"], port=at["port"], db=at.get("db", 0) + 1)
    rider = wire.Rider(r, [wire.pack("PING")])
    assert wire.same_server(same, r) and rider.boards(same)
    assert not wire.same_server(other_db, r) and not rider.boards(other_db)
    assert wire.round_trips([(other_db, [wire.pack("PING")])], rider) == [[b"PONG"]]
    assert not rider.sent  # another server's round trip left it
    out = wire.round_trips([(same, [wire.pack("QUIT"), wire.pack("PING")])], rider)
    assert isinstance(out[0], redis.ConnectionError)  # the server closed it after QUIT: sent, never in flight
    assert rider.sent and rider.in_flight is None
