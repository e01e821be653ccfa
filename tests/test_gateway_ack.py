"""Issue 35 §4, the client's own word: a gateway SIGKILLed after it handed a player the update
of their turn (and wrote its delivery receipt) but before the client read it.  A real stack
(redis-server, ``shuangkou serve``, a dramatiq worker, ``shuangkou gateway`` processes), clients
on real WebSockets.  A client that acknowledges what it read (``Seen``) is not charged the
timeout: the clock pauses (``undelivered``) and the moved deadline reaches it through another
gateway.  A client that never acknowledges is charged as before (the gateway's word alone).

Nothing here is timed: the test waits for the receipt, kills the gateway, and waits for the
timer's answer in the match log."""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Any

import pytest

from engine.store import keys
from tests.gateway_support import DEPLOYMENTS, Client, kind, lobby, start_stack
from tests.processes import stop_group

pytestmark = [pytest.mark.redis, pytest.mark.worker, pytest.mark.slow]

#: long enough for the receipt and the kill to come before the deadline on a loaded machine
TURN_S = 8
ROOMS: dict[str, dict[str, Any]] = {
    "acks": {"turn_seconds": TURN_S, "reconnect_grace_seconds": 60, "trustee_delay_seconds": 0.0},
    "quiet": {"turn_seconds": TURN_S, "reconnect_grace_seconds": 60, "trustee_delay_seconds": 0.0},
}
WAIT_S = 90  # bounds a broken run only


@pytest.fixture(scope="module")
def stack(redis_server, tmp_path_factory):
    s = start_stack(redis_server.db_url(2), redis_server.db_url(3), tmp_path_factory.mktemp("ack"), ROOMS,
                    DEPLOYMENTS[0])
    try:
        s.start_gateway("A")
        yield s
    finally:
        s.stop()


def _starts_clock(player: str, m: dict[str, Any]) -> bool:
    from engine.service.receipts import starts_clock

    return starts_clock(player, m)


def _events_after(stack, match: str, version: int) -> list[Any]:
    import redis

    from engine.store.redis_store import RedisEventStore

    with redis.Redis.from_url(stack.store_url) as r:
        return list(RedisEventStore(r).load(match, after=version))


def _receipt(stack, player: str) -> Any:
    import redis

    from engine.service.receipts import read

    with redis.Redis.from_url(stack.store_url) as r:
        return read(r.get(keys.receipt_key(player)))


async def _until(what: str, fn, timeout_s: float = WAIT_S) -> Any:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        got = fn()
        if got:
            return got
        await asyncio.sleep(0.05)
    raise AssertionError(f"never: {what}")


@pytest.mark.parametrize("room", ["acks", "quiet"])
def test_a_gateway_killed_after_handing_over_the_turn_unread_charges_no_timeout_to_a_client_that_acks(stack, room):
    from engine.match.events import ClockExtended, TurnTimedOut

    acks = room == "acks"

    async def main() -> None:
        victim = stack.start_gateway(f"victim-{room}")
        names = (f"{room}-alice", f"{room}-bob")
        clients = {n: await Client.connect(victim.url, stack.token(n), n) for n in names}
        acking = {n: False for n in names}
        for c in clients.values():
            await c.expect(kind("welcome"))
            await c.send({"type": "Join", "room": room})
        match = (await clients[names[0]].expect(lobby("seated"), what="seated"))["match"]
        await clients[names[1]].expect(lobby("seated"), what="seated")
        for c in clients.values():
            await c.send({"type": "Ready"})
        turn: dict[str, Any] = {}
        for n, c in clients.items():
            while True:  # read, acknowledging as client.js does, until the deal
                m = await c.expect(lambda x: x["kind"] == "update" and x["match"] == match, what="an update")
                brief = m.get("brief") or {}
                playing = brief.get("phase") == "playing" and brief.get("deadline_ms") is not None
                if playing and brief.get("turn") == n:
                    turn = {"player": n, "version": m["version"], "deadline_ms": brief["deadline_ms"]}
                    break  # the update of this player's turn: handed over, never read (no Seen)
                if acks and (not acking[n] or _starts_clock(n, m)):
                    acking[n] = True
                    await c.send({"type": "Seen", "version": m["version"], "match": match})
                if playing:
                    break
        player, v = turn["player"], turn["version"]
        # the hand-over's receipt is written at once; the client's word (its first Seen, read by
        # the gateway after the burst of updates went out) rewrites it a flush later
        receipt = await _until("the receipt of the turn's hand-over" + (", with the client's word" if acks else ""),
                               lambda: (r := _receipt(stack, player)) is not None and r.version >= v
                               and (r.acked is not None or not acks) and r)
        if acks:
            assert receipt.acked is not None and receipt.acked < v and receipt.gateway
        else:
            assert receipt.acked is None
        stop_group(victim.proc, signal.SIGKILL)  # the gateway dies before the client read it
        after = await _until("the timer's answer at the deadline", lambda: _events_after(stack, match, v))
        if not acks:
            assert isinstance(after[0], TurnTimedOut)  # the gateway's word alone: charged as before
            return
        assert isinstance(after[0], ClockExtended), after[0]
        assert (after[0].kind, after[0].reason) == ("turn", "undelivered")
        assert not any(isinstance(e, TurnTimedOut) for e in after)
        # through another gateway, the update again and the moved clock
        back = await Client.connect(stack.gateways[0].url, stack.token(player), player, version=v - 1)
        moved = await back.expect(lambda x: x["kind"] == "update" and x["match"] == match
                                  and (x.get("brief") or {}).get("deadline_ms", 0) > turn["deadline_ms"],
                                  what="the moved deadline")
        await back.send({"type": "Seen", "version": moved["version"], "match": match})
        await back.close()

    asyncio.run(main())
