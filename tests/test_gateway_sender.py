"""gateway/sender.py: many sockets' commands share a pipeline; each hears its own answer."""

from __future__ import annotations

import asyncio
from typing import Any

import fakeredis
import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

from gateway.sender import BATCH, CommandSender


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_concurrent_commands_share_rounds_and_each_gets_its_own_entry_id():
    async def main() -> tuple[CommandSender, list[Any], Any]:
        r = fakeredis.aioredis.FakeRedis()
        sender = CommandSender(r)
        n = BATCH + 50
        ids = await asyncio.gather(*(sender.send(f"s{i % 7}", {"i": str(i)}) for i in range(n)))
        stored = {s: await r.xrange(f"s{s}") for s in range(7)}
        return sender, ids, stored

    sender, ids, stored = run(main())
    assert sender.rounds == 2  # the first round's BATCH, then the 50 queued meanwhile
    by_id = {(s, e_id): f[b"i"].decode() for s, entries in stored.items() for e_id, f in entries}
    assert [by_id[(i % 7, e_id)] for i, e_id in enumerate(ids)] == [str(i) for i in range(len(ids))]  # its own
    for s, entries in stored.items():  # each stream in the order sent
        assert [int(f[b"i"]) for _id, f in entries] == sorted(int(f[b"i"]) for _id, f in entries)


def test_an_idle_gateway_sends_each_command_at_once_alone():
    async def main() -> CommandSender:
        sender = CommandSender(fakeredis.aioredis.FakeRedis())
        for i in range(3):
            await sender.send("s", {"i": str(i)})
        return sender

    assert run(main()).rounds == 3


def test_a_refused_command_raises_in_its_own_socket_only():
    async def main() -> list[Any]:
        r = fakeredis.aioredis.FakeRedis()
        await r.set("not-a-stream", "x")
        sender = CommandSender(r)
        return await asyncio.gather(sender.send("s", {"a": "1"}), sender.send("not-a-stream", {"a": "2"}),
                                    sender.send("s", {"a": "3"}), return_exceptions=True)

    ok1, bad, ok2 = run(main())
    assert isinstance(bad, ResponseError) and "WRONGTYPE" in str(bad)
    assert not isinstance(ok1, Exception) and not isinstance(ok2, Exception)


class _DropsFirstRound:
    """A client whose first pipeline fails as a whole (the connection dropped)."""

    def __init__(self) -> None:
        self.real = fakeredis.aioredis.FakeRedis()
        self.failed = False

    async def first_round(self) -> list[Any]:
        """What the first pipeline's ``execute`` does instead of sending."""
        raise RedisConnectionError("connection lost")

    def pipeline(self, transaction: bool = False) -> Any:
        pipe = self.real.pipeline(transaction=transaction)
        if not self.failed:
            self.failed = True

            async def execute(raise_on_error: bool = True) -> list[Any]:
                return await self.first_round()
            pipe.execute = execute  # type: ignore[method-assign]
        return pipe


async def _a_round_then_one_more(client: _DropsFirstRound) -> tuple[list[Any], Any, list[Any]]:
    """Three sockets' commands in the client's first round, one more after it: what each socket
    was answered, the last one's id, and what the stream holds."""
    sender = CommandSender(client)
    first = await asyncio.gather(*(sender.send("s", {"i": str(i)}) for i in range(3)), return_exceptions=True)
    again = await sender.send("s", {"i": "again"})
    return first, again, await client.real.xrange("s")


def test_a_failed_round_raises_in_every_socket_of_it_and_the_next_round_goes_through():
    first, again, stored = run(_a_round_then_one_more(_DropsFirstRound()))
    assert all(isinstance(x, RedisConnectionError) for x in first)
    assert [f[b"i"] for _id, f in stored] == [b"again"]  # nothing of the failed round half-written
    assert stored[0][0] == again


def test_a_socket_that_stops_waiting_does_not_hold_up_the_others():
    async def main() -> tuple[Any, list[Any]]:
        r = fakeredis.aioredis.FakeRedis()
        sender = CommandSender(r)
        gone = asyncio.ensure_future(sender.send("s", {"who": "gone"}))
        stays = asyncio.ensure_future(sender.send("s", {"who": "stays"}))
        await asyncio.sleep(0)  # both queued, the round under way
        gone.cancel()
        entry = await stays
        with pytest.raises(asyncio.CancelledError):
            await gone
        return entry, await r.xrange("s")

    entry, stored = run(main())
    assert [(i, f[b"who"]) for i, f in stored] == [(entry, b"stays")]  # the one that stopped waiting: not sent


def test_on_a_cluster_each_command_is_its_own_xadd():
    """redis-py's cluster pipeline retries a whole pipeline when one node is away: one master's
    fail-over would fail every shard's commands of the round.  So no pipeline there."""
    from redis.asyncio.cluster import RedisCluster

    sent: list[tuple[str, dict]] = []
    cluster = object.__new__(RedisCluster)  # only its type matters here

    async def xadd(stream: str, fields: dict) -> str:
        sent.append((stream, fields))
        return "1-0"

    cluster.xadd = xadd  # type: ignore[method-assign]

    def no_pipeline(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("a pipeline on a Cluster")

    cluster.pipeline = no_pipeline  # type: ignore[method-assign]

    async def main() -> list[Any]:
        sender = CommandSender(cluster)
        assert not sender.pipelined
        return await asyncio.gather(*(sender.send(f"s{i}", {"i": str(i)}) for i in range(3)))

    assert run(main()) == ["1-0"] * 3 and [s for s, _f in sent] == ["s0", "s1", "s2"]


class _HangsFirstRound(_DropsFirstRound):
    """A client whose first pipeline never answers (a dead connection: the hot client reads
    its replies with no timeout of its own, gateway/app.py ``redis_client(hot=True)``)."""

    async def first_round(self) -> list[Any]:
        await asyncio.Event().wait()  # for ever
        return []


def test_a_round_with_no_answer_fails_its_commands_at_the_round_timeout_and_the_next_goes_through(monkeypatch):
    import gateway.sender

    monkeypatch.setattr(gateway.sender, "ROUND_TIMEOUT_S", 0.05)
    first, again, stored = run(_a_round_then_one_more(_HangsFirstRound()))
    assert all(isinstance(x, TimeoutError) for x in first)  # each socket hears it, none waits for ever
    assert [f[b"i"] for _id, f in stored] == [b"again"] and stored[0][0] == again
