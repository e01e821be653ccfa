"""gateway/fanout.py: a fan-out round with no answer is given up at ``ROUND_TIMEOUT_S`` and its
streams are read again (the hot client reads replies with no timeout of its own,
gateway/app.py ``redis_client(hot=True)``); entries still arrive once each, in order."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import gateway.fanout
from gateway.fanout import Fanout
from gateway.reader import Subscription
from tests.test_gateway_sender import _HangsFirstRound


class _Client:
    """The fan-out's view of a client: ``real``'s, but for what a subclass changes."""

    real: Any

    def pubsub(self) -> Any:
        return self.real.pubsub()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


class _HangsFirstRead(_Client, _HangsFirstRound):
    """A client whose first XREAD pipeline never answers (a dead connection)."""


def _collect(n: int) -> tuple[list[bytes], asyncio.Event, Any]:
    """The ``n`` field of what a subscription hands on, and an event set once ``n`` are in."""
    got: list[bytes] = []
    done = asyncio.Event()

    async def deliver(_stream: str, _id: str, fields: dict) -> None:
        got.append(fields[b"n"])
        if len(got) == n:
            done.set()
    return got, done, deliver


def test_a_read_round_with_no_answer_is_given_up_and_read_again(monkeypatch):
    monkeypatch.setattr(gateway.fanout, "ROUND_TIMEOUT_S", 0.05)

    async def main() -> tuple[list[bytes], bool]:
        client = _HangsFirstRead()
        for i in range(3):
            await client.real.xadd("sk:out:{p}", {"n": str(i)})
        fanout = Fanout(client, sweep_s=3600.0)
        got, done, deliver = _collect(3)
        sub = Subscription(fanout, client, deliver, done.is_set, "p")
        await sub.take(["sk:out:{p}"], at={"sk:out:{p}": "0-0"})
        sub.start()
        try:
            await asyncio.wait_for(done.wait(), 30)
        finally:
            sub.stop()
            await fanout.aclose()
        return got, client.failed

    got, hung = asyncio.run(main())
    assert hung and got == [b"0", b"1", b"2"]  # the hung round given up, then read once, in order


class _CountsRounds(_Client):
    """A client that counts the fan-out's read pipelines."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.rounds = 0

    def pipeline(self, transaction: bool = False) -> Any:
        self.rounds += 1
        return self.real.pipeline(transaction=transaction)


@pytest.mark.redis
def test_a_refused_stream_does_not_hold_up_those_read_with_it_nor_spin_the_reader(real_redis, redis_server):
    """One XREAD holds many sockets' streams on a single node: a key of another type (WRONGTYPE,
    a real redis-server's refusal; fakeredis raises instead) fails that whole XREAD.  Its streams
    are then read alone: the good ones at once, the refused one at the sweeps only (no busy loop)."""
    import redis.asyncio as aioredis

    async def main() -> tuple[list[bytes], int, int]:
        client = _CountsRounds(aioredis.Redis.from_url(redis_server.url))
        await client.real.set("sk:out:{bad}", "not a stream")
        for i in range(2):
            await client.real.xadd("sk:out:{good}", {"n": str(i)})
        fanout = Fanout(client, sweep_s=3600.0)
        got, done, deliver = _collect(2)

        async def never(*_a: Any) -> None:
            raise AssertionError("nothing to hand on from a refused stream")

        good = Subscription(fanout, client, deliver, done.is_set, "good")
        bad = Subscription(fanout, client, never, done.is_set, "bad")
        await good.take(["sk:out:{good}"], at={"sk:out:{good}": "0-0"})
        await bad.take(["sk:out:{bad}"], at={"sk:out:{bad}": "0-0"})
        good.start()
        bad.start()
        try:
            await asyncio.wait_for(done.wait(), 30)
            settled = client.rounds
            await asyncio.sleep(0.3)  # a spinning reader would send round after round meanwhile
            later = client.rounds
        finally:
            good.stop()
            bad.stop()
            await fanout.aclose()
            await client.real.aclose()
        return got, settled, later

    got, settled, later = asyncio.run(main())
    assert got == [b"0", b"1"]
    assert settled <= 3 and later == settled  # together, then each alone; then nothing until a sweep
