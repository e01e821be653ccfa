"""One player's churn cannot keep others from playing (issue 34 §6), through the real stack:
redis-server, ``shuangkou serve`` (the lobby thread), the timers, a real gateway, WebSockets.

A griefer Joins and, once seated, Leaves, as fast as the gateway's rate limit lets one
socket (it never waits on purpose); honest players Join a moment apart and Ready as soon as
they are seated.  Each honest player must be dealt within the room's ``ready_seconds`` + 5 s
of their Join; the griefer's Joins during its cooldown are refused ``cooldown`` with
``retry_after_ms`` (the room's ``leave_cooldown_seconds``, doubled for each leave)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from tests.gateway_support import Client, kind, lobby, start_stack

pytestmark = [pytest.mark.redis, pytest.mark.worker, pytest.mark.slow]

READY_S = 10
ROOMS: dict[str, dict[str, Any]] = {
    "grief": {"trustee_delay_seconds": 0.0, "ready_seconds": READY_S, "leave_cooldown_seconds": 2,
              "leave_cooldown_max_seconds": 60},
}
HONEST = ["hn-ann", "hn-bob", "hn-cat", "hn-dan", "hn-eve", "hn-fay", "hn-gus", "hn-hal"]


@pytest.fixture(scope="module")
def stack(redis_server, tmp_path_factory, deployment):
    s = start_stack(redis_server.db_url(4), redis_server.db_url(5), tmp_path_factory.mktemp("churn"), ROOMS,
                    deployment)
    try:
        s.start_gateway("A")
        yield s
    finally:
        s.stop()


def test_a_griefer_cannot_keep_honest_players_from_a_deal(stack) -> None:
    gw = stack.gateways[0]
    waits: dict[str, float] = {}
    refusals: list[dict[str, Any]] = []
    seatings = [0]

    async def griefer(stop: asyncio.Event) -> None:
        c = await Client.connect(gw.url, stack.token("gr-eve"), "gr-eve")
        await c.expect(kind("welcome"))
        while not stop.is_set():
            await c.send({"type": "Join", "room": "grief"})
            try:
                m = await c.expect(lambda x: (x.get("kind") == "lobby" and x.get("state") in ("queued", "seated"))
                                   or x.get("kind") == "rejected", timeout_s=5, what="an answer to the Join")
            except Exception:
                continue
            if m["kind"] == "rejected":
                if m.get("code") == "cooldown":
                    refusals.append(m)
                await asyncio.sleep(0.06)  # the rate limit's pace: 20 commands a second
                continue
            if m["state"] == "queued":
                try:
                    await c.expect(lobby("seated"), timeout_s=1, what="seated")
                except Exception:
                    pass
            seatings[0] += 1
            await c.send({"type": "Leave"})
            await asyncio.sleep(0.06)
        await c.close()

    async def honest(name: str, delay: float) -> None:
        await asyncio.sleep(delay)
        c = await Client.connect(gw.url, stack.token(name), name)
        await c.expect(kind("welcome"))
        joined = time.monotonic()
        await c.send({"type": "Join", "room": "grief"})
        readied: set[str] = set()
        while True:
            m = await c.recv(timeout_s=READY_S + 30)
            if m.get("kind") == "lobby" and m.get("state") == "seated" and m["match"] not in readied:
                readied.add(m["match"])
                await c.send({"type": "Ready", "command_id": f"ready-{m['match']}"})
            if m.get("kind") == "update" and (m.get("view") or {}).get("phase") == "playing":
                waits[name] = time.monotonic() - joined
                break
        await c.close()

    async def main() -> None:
        stop = asyncio.Event()
        g = asyncio.create_task(griefer(stop))
        await asyncio.sleep(1.0)
        await asyncio.gather(*(honest(n, 1.5 * i) for i, n in enumerate(HONEST)))  # 1.5 s apart: the griefer cools down in between
        stop.set()
        await g

    asyncio.run(main())
    assert set(waits) == set(HONEST)
    assert {n: round(w, 1) for n, w in waits.items() if w > READY_S + 5} == {}
    assert refusals and all(int(r["retry_after_ms"]) > 0 for r in refusals)
    assert seatings[0] >= 2  # it was seated again after a cooldown, and left again
