"""gateway/fanout.py: a fan-out round with no answer is given up at ``ROUND_TIMEOUT_S`` and its
streams are read again (the hot client reads replies with no timeout of its own,
gateway/app.py ``redis_client(hot=True)``); entries still arrive once each, in order."""

from __future__ import annotations

import asyncio
from typing import Any

import fakeredis

import gateway.fanout
from gateway.fanout import Fanout
from gateway.reader import Subscription


class _HangsFirstRead:
    """A client whose first XREAD pipeline never answers (a dead connection)."""

    def __init__(self) -> None:
        self.real = fakeredis.aioredis.FakeRedis()
        self.hung = 0

    def pipeline(self, transaction: bool = False) -> Any:
        pipe = self.real.pipeline(transaction=transaction)
        if not self.hung:
            self.hung += 1

            async def execute(raise_on_error: bool = True) -> list[Any]:
                await asyncio.Event().wait()  # for ever
                return []
            pipe.execute = execute  # type: ignore[method-assign]
        return pipe

    def pubsub(self) -> Any:
        return self.real.pubsub()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


def test_a_read_round_with_no_answer_is_given_up_and_read_again(monkeypatch):
    monkeypatch.setattr(gateway.fanout, "ROUND_TIMEOUT_S", 0.05)

    async def main() -> tuple[list[bytes], int]:
        client = _HangsFirstRead()
        for i in range(3):
            await client.real.xadd("sk:out:{p}", {"n": str(i)})
        fanout = Fanout(client, sweep_s=3600.0)
        got: list[bytes] = []
        done = asyncio.Event()

        async def deliver(_stream: str, _id: str, fields: dict) -> None:
            got.append(fields[b"n"])
            if len(got) == 3:
                done.set()

        sub = Subscription(fanout, client, deliver, done.is_set, "p")
        await sub.take(["sk:out:{p}"], at={"sk:out:{p}": "0-0"})
        sub.start()
        try:
            await asyncio.wait_for(done.wait(), 30)
        finally:
            sub.stop()
            await fanout.aclose()
        return got, client.hung

    got, hung = asyncio.run(main())
    assert hung == 1 and got == [b"0", b"1", b"2"]  # the hung round given up, then read once, in order
