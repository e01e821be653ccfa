"""Quick phrases on a real Redis Cluster (three masters, three replicas on loopback): the two
players' streams ``sk:out:{<player>}`` are on different masters, and a Say still reaches both
(and nothing reaches the match log)."""

from __future__ import annotations

import asyncio

import pytest

from tests.gateway_support import Client, kind, lobby, start_stack
from tests.test_cluster_stack import cluster  # noqa: F401 - the fixture
from tests.test_say import said

pytestmark = [pytest.mark.redis, pytest.mark.worker, pytest.mark.slow]


def _node_of(client, key: str) -> str:
    node = client.get_node_from_key(key)
    return f"{node.host}:{node.port}"


def test_a_say_reaches_both_players_whose_streams_are_on_different_masters(cluster, redis_server,  # noqa: F811
                                                                           tmp_path) -> None:
    from engine.store import keys
    from engine.store.connect import connect
    from engine.store.redis_store import RedisEventStore

    client = connect(cluster.url)
    a = "sc-alice"
    b = next(p for p in (f"sc-bob{k}" for k in range(100))
             if _node_of(client, keys.outbox_key(p)) != _node_of(client, keys.outbox_key(a)))
    stack = start_stack(cluster.url, redis_server.db_url(4), tmp_path, {"clsay": {"trustee_delay_seconds": 0.0}})
    try:
        gw = stack.start_gateway("CS")

        async def main() -> str:
            ca = await Client.connect(gw.url, stack.token(a), a)
            cb = await Client.connect(gw.url, stack.token(b), b)
            for c in (ca, cb):
                await c.expect(kind("welcome"))
                await c.send({"type": "Join", "room": "clsay"})
            m = (await ca.expect(lobby("seated"), what="seated"))["match"]
            await cb.expect(lobby("seated"), what="seated")
            for c in (ca, cb):
                await c.expect(lambda x: x["kind"] == "update" and x["match"] == m, what="the view")
            before = len(list(RedisEventStore(client).load(m)))
            await ca.send({"type": "Say", "phrase": "hurry_up", "command_id": "s1"})
            assert (await cb.expect(said(a, "hurry_up"), what="a's say at b"))["command_id"] is None
            assert (await ca.expect(said(a, "hurry_up"), what="a's own say"))["command_id"] == "s1"
            await cb.send({"type": "Say", "phrase": "emote_laugh"})
            await ca.expect(said(b, "emote_laugh"), what="b's say at a")
            await cb.expect(said(b, "emote_laugh"), what="b's own say")  # both Says were decided
            assert len(list(RedisEventStore(client).load(m))) == before > 0  # nothing in the match log
            await ca.close()
            await cb.close()
            return m

        asyncio.run(main())
    finally:
        stack.stop()
        client.close()
