"""The gateway's fan-out (gateway/fanout.py, issue 24 "Gateway fan-out that does not grow with
its sockets"): one reader per process, woken by the notices every writer of a player's stream
sends (engine/store/keys.py "Notices"), against a real redis-server.

* what the engine's publisher writes reaches each subscription once, in order, by notice
  alone (the periodic sweep is switched off: without the notice nothing would arrive);
* a real ``shuangkou gateway`` holding many sockets holds no more Redis connections than its
  pool (CLIENT LIST, by connection name), and every socket still gets what is written for it.

Nothing is timed: the waits only stop a broken run from hanging."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest

from engine.service.publish import Publisher
from engine.store import keys
from engine.store.base import Write
from gateway import channels
from gateway.app import MAX_REDIS_CONNECTIONS
from gateway.fanout import Fanout
from gateway.reader import Subscription
from tests.gateway_support import start_stack

pytestmark = [pytest.mark.redis]

WAIT_S = 60.0


@pytest.fixture(scope="module")
def local_cluster():
    """Three masters on loopback, no replicas (tests/cluster_support.py)."""
    from tests.cluster_support import start_cluster

    c = start_cluster(masters=3, replicas=0)
    yield c
    c.stop()


@pytest.fixture(params=["single", "cluster"])
def url(request, redis_server):
    """A single node's URL, or any node of a Redis Cluster's (the docs offer both)."""
    if request.param == "cluster":
        return request.getfixturevalue("local_cluster").url
    import redis

    u = redis_server.db_url(7)
    with redis.Redis.from_url(u) as c:
        c.flushdb()
    return u


@pytest.mark.parametrize("before", [0, 3])
def test_published_entries_reach_every_subscription_once_in_order_by_notice_alone(url, before):
    """``before``: entries already in the stream after the positions were taken (read at once)."""
    from engine.store.connect import connect, connect_async

    players = [f"p{i}-{before}-{uuid.uuid4().hex[:6]}" for i in range(5)]  # several slots on a Cluster
    per_player = 30
    publisher = Publisher(connect(url), consumer="test-fanout")

    def write(n_from: int, n_to: int) -> None:
        publisher.write([Write(keys.outbox_key(p), {"kind": "rejected", "n": str(n)}, 1000)
                         for n in range(n_from, n_to) for p in players])

    async def main() -> dict[str, list[int]]:
        r = connect_async(url)
        fanout = Fanout(r, sweep_s=3600.0)  # no sweep: only the notices wake the reader
        got: dict[str, list[int]] = {p: [] for p in players}
        done = asyncio.Event()
        subs = []
        for p in players:
            async def deliver(stream: str, entry_id: str, fields: dict, p: str = p) -> None:
                got[p].append(int(fields[b"n"]))
                if all(len(v) == per_player for v in got.values()):
                    done.set()
            sub = Subscription(fanout, r, deliver, done.is_set, p)
            await sub.take([keys.outbox_key(p)])
            subs.append(sub)
        await asyncio.to_thread(write, 0, before)
        for sub in subs:
            sub.start()
        for n in range(before, per_player, 9):  # in several rounds, as a match would
            await asyncio.to_thread(write, n, min(n + 9, per_player))
        try:
            await asyncio.wait_for(done.wait(), WAIT_S)
        finally:
            for sub in subs:
                sub.stop()
            await fanout.aclose()
            await r.aclose()
        assert fanout.notices > 0
        return got

    got = asyncio.run(main())
    assert got == {p: list(range(per_player)) for p in players}


@pytest.mark.parametrize("mode", ["single", "cluster"])
def test_many_sockets_hold_no_more_redis_connections_than_the_pool(mode, redis_server, tmp_path, request):
    """250 players connected to one gateway: its Redis connections (CLIENT LIST, named
    ``sk-gateway:<id>``) stay within :data:`gateway.app.MAX_REDIS_CONNECTIONS` on every node (one
    blocking read per socket would hold 250), and every socket still gets the entry written for it."""
    import redis
    import websockets

    from engine.store.connect import connect

    n = 250
    if mode == "cluster":
        cluster = request.getfixturevalue("local_cluster")
        store, nodes = cluster.url, [f"redis://127.0.0.1:{p}/0" for p in cluster.masters()]
    else:
        store = redis_server.db_url(4)
        nodes = [store]
    stack = start_stack(store, redis_server.db_url(5), tmp_path, {"fan": {}})
    try:
        gw = stack.start_gateway("fan")

        store_client = connect(stack.store_url)
        for i in range(n):  # each player queued in a room (the engine's read model): presence is pushed
            store_client.hset(keys.place_key(f"f{i}"), mapping={"state": "queued", "room": "points"})

        async def main() -> tuple[int, list[dict[str, Any]]]:
            socks: list[Any] = []
            for i in range(n):
                ws = await websockets.connect(f"{gw.url}?token={stack.token(f'f{i}')}", open_timeout=60)
                assert json.loads(await asyncio.wait_for(ws.recv(), WAIT_S))["kind"] == "welcome"
                socks.append(ws)
            # every socket's greeting is done once its room's presence lists all of them
            async def present() -> None:
                while store_client.zcard(keys.presence_key("points")) < n:
                    await asyncio.sleep(0.1)
            await asyncio.wait_for(present(), WAIT_S)
            held = 0
            for node in nodes:
                with redis.Redis.from_url(node) as c:
                    held = max(held, sum(1 for x in c.client_list() if x.get("name") == "sk-gateway:fan"))
            # a rejection of each player's own command, as the engine publishes it
            Publisher(store_client, consumer="test-fanout").write([
                Write(keys.outbox_key(f"f{i}"), {"kind": "rejected", "match": "m", "code": "bad_command",
                                                 "reason": "test", "command_id":
                                                 channels.engine_command_id(f"f{i}", f"c{i}")}, 200)
                for i in range(n)])

            async def answer(ws: Any) -> dict[str, Any]:
                while True:
                    m = json.loads(await ws.recv())
                    if m["kind"] == "rejected":
                        return m
            try:
                got = await asyncio.wait_for(asyncio.gather(*(answer(ws) for ws in socks)), WAIT_S)
            finally:
                await asyncio.gather(*(ws.close() for ws in socks), return_exceptions=True)
            return held, got

        held, got = asyncio.run(main())
    finally:
        stack.stop()
    assert 0 < held <= MAX_REDIS_CONNECTIONS < n
    assert [m["command_id"] for m in got] == [f"c{i}" for i in range(n)]
    # the sockets ran on uvloop (a dependency; uvicorn's "auto" loop picks it)
    assert "event loop: uvloop" in gw.err.read_text(errors="replace") + gw.out.read_text(errors="replace")


def test_a_slow_socket_is_read_no_further_than_its_backlog_and_loses_nothing(url):
    """A socket that does not take what is read for it: the fan-out stops reading its stream at
    :data:`gateway.reader.BACKLOG` queued entries, and once the socket takes them again every
    entry follows, once and in order."""
    from engine.store.connect import connect, connect_async
    from gateway.reader import BACKLOG

    player = f"slow-{uuid.uuid4().hex[:6]}"
    total = BACKLOG * 2 + 50
    publisher = Publisher(connect(url), consumer="test-fanout")

    async def main() -> tuple[list[int], int]:
        r = connect_async(url)
        fanout = Fanout(r, sweep_s=3600.0)
        got: list[int] = []
        release, done = asyncio.Event(), asyncio.Event()
        queued: list[int] = []

        async def deliver(stream: str, entry_id: str, fields: dict) -> None:
            await release.wait()
            got.append(int(fields[b"n"]))
            if len(got) == total:
                done.set()
        sub = Subscription(fanout, r, deliver, done.is_set, player)
        await sub.take([keys.outbox_key(player)])
        sub.start()
        await asyncio.to_thread(publisher.write, [Write(keys.outbox_key(player), {"kind": "rejected", "n": str(n)},
                                                        total + 10) for n in range(total)])

        async def held_back() -> None:
            while not sub._held_back:  # the fan-out met the full queue and left the rest unread
                await asyncio.sleep(0.05)
            queued.append(len(sub._queue))
        try:
            await asyncio.wait_for(held_back(), WAIT_S)
            release.set()
            await asyncio.wait_for(done.wait(), WAIT_S)
        finally:
            sub.stop()
            await fanout.aclose()
            await r.aclose()
        return got, queued[0]

    got, queued = asyncio.run(main())
    assert BACKLOG <= queued < total
    assert got == list(range(total))


def test_a_socket_whose_redis_fails_is_closed_1013_try_again_with_a_reason():
    """Redis down (or the bounded pool busy past its wait): the socket is told to come back
    (1013, docs/PROTOCOL.md close codes), never left with a traceback and no answer."""
    import socket

    import redis.asyncio as aioredis
    from starlette.testclient import TestClient
    from starlette.websockets import WebSocketDisconnect

    from gateway.app import CLOSE_TRY_AGAIN, GatewaySettings, build_app
    from gateway.rooms import RoomBook
    from gateway.tokens import mint

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    secret = b"s" * 32
    from redis.asyncio.retry import Retry
    from redis.backoff import NoBackoff

    dead = aioredis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=1, retry=Retry(NoBackoff(), 0))
    app = build_app(GatewaySettings("redis://127.0.0.1:%d/0" % port, secret, RoomBook.load(), "gw-dead"), dead)
    with TestClient(app) as client:
        with client.websocket_connect(f"/ws?token={mint(secret, 'alice')}") as ws:
            assert ws.receive_json()["kind"] == "welcome"
            with pytest.raises(WebSocketDisconnect) as closed:
                ws.receive_json()
    assert closed.value.code == CLOSE_TRY_AGAIN and "reconnect" in closed.value.reason
