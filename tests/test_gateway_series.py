"""Private tables end to end (issue 39): a real redis-server, ``shuangkou serve`` in each
deployment, a ``shuangkou gateway``, clients on real WebSockets (every frame validated against
gateway/schemas/).  CreateTable → a code; JoinTable by it → both seated; hands with Ready and
the trustee (R-13.5, trustee delay 0) → ``settled.series``; the final standings; a vote that
passes; the refusals with their codes; a reconnect's tally and open vote."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tests.gateway_support import Client, kind, lobby, ready_and_play, start_stack

pytestmark = [pytest.mark.redis, pytest.mark.worker, pytest.mark.slow]

ROOMS: dict[str, dict[str, Any]] = {
    "friends": {"trustee_delay_seconds": 0.0},
    "brieftable": {"trustee_delay_seconds": 0.0, "private_join_seconds": 1},
}


@pytest.fixture(scope="module")
def stack(redis_server, tmp_path_factory, deployment):
    s = start_stack(redis_server.db_url(4), redis_server.db_url(5), tmp_path_factory.mktemp("gws"), ROOMS,
                    deployment)
    try:
        s.start_gateway("A")
        yield s
    finally:
        s.stop()


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def series(state: str) -> Any:
    return lambda m: m.get("kind") == "series" and m.get("state") == state


async def connect(stack: Any, player: str) -> Client:
    c = await Client.connect(stack.gateways[0].url, stack.token(player), player)
    await c.expect(kind("welcome"))
    return c


async def open_table(stack: Any, owner: str, friend: str, hands: int = 4,
                     room: str = "friends") -> tuple[Client, Client, dict[str, Any], str]:
    ca, cb = await connect(stack, owner), await connect(stack, friend)
    await ca.send({"type": "CreateTable", "command_id": "ct1", "room": room, "hands": hands,
                   "spectators": False, "bots": False})
    created = await ca.expect(kind("private_table"), what="the table's code")
    assert created["state"] == "created" and created["command_id"] == "ct1" and created["hands"] == hands
    assert len(created["code"]) == 6 and created["link"] == f"/t/{created['code']}"
    await cb.send({"type": "JoinTable", "command_id": "jt1", "code": created["code"].lower()})
    sa = await ca.expect(lobby("seated"), what="seated")
    sb = await cb.expect(lobby("seated"), what="seated")
    assert sa["match"] == sb["match"] == f"{created['series_id']}-1"
    return ca, cb, created, sa["match"]


def test_a_series_of_four_hands_with_a_running_tally_and_its_standings(stack) -> None:
    async def main() -> None:
        ca, cb, created, match = await open_table(stack, "fr-ann", "fr-bob")
        sid = created["series_id"]
        totals = {"fr-ann": 0, "fr-bob": 0}
        for n in range(1, 5):
            match = f"{sid}-{n}"
            sa, sb = await asyncio.gather(ready_and_play(ca, match), ready_and_play(cb, match))
            for p, v in sa["scores"].items():
                totals[p] += v
            assert sa["series"] == sb["series"] == {"series_id": sid, "hand": n, "hands": 4, "totals": totals}
            if n < 4:
                for c in (ca, cb):
                    nxt = await c.expect(lobby("seated"), what="the next hand")
                    assert nxt["match"] == f"{sid}-{n + 1}"
        for c in (ca, cb):
            removed = await c.expect(lobby("removed"), what="the table's close")
            assert removed["reason"] == "series_over"
            done = [m for m in c.received if m["kind"] == "series" and m["state"] == "finished"]
            assert len(done) == 1 and done[0]["reason"] == "completed"
            assert done[0]["standings"]["totals"] == totals and len(done[0]["standings"]["per_hand"]) == 4
        await ca.close(), await cb.close()

    run(main())


def test_a_vote_to_end_that_passes_between_hands_dissolves_the_series(stack) -> None:
    async def main() -> None:
        ca, cb, created, match = await open_table(stack, "vo-ann", "vo-bob")
        await asyncio.gather(ready_and_play(ca, match), ready_and_play(cb, match))
        await ca.expect(lobby("seated"), what="hand 2")
        await cb.expect(lobby("seated"), what="hand 2")
        await ca.send({"type": "RequestEnd", "command_id": "re1"})
        asked = await cb.expect(series("vote"), what="the vote")
        assert asked["by"] == "vo-ann" and asked["deadline_ms"] > 0 and asked["command_id"] is None
        mine = await ca.expect(series("vote"), what="the vote")
        assert mine["command_id"] == "re1"
        # a reconnect gets the tally and the open vote again
        await cb.close()
        cb = await connect(stack, "vo-bob")
        tally = await cb.expect(series("tally"), what="the tally again")
        assert tally["hand"] == 1 and tally["series_id"] == created["series_id"]
        again = await cb.expect(series("vote"), what="the open vote again")
        assert again["by"] == "vo-ann"
        await cb.send({"type": "VoteEnd", "command_id": "ve1", "agree": True})
        for c in (ca, cb):
            passed = await c.expect(series("vote_passed"), what="the vote's outcome")
            assert passed["by"] == "vo-bob"
            done = await c.expect(series("finished"), what="the end")
            assert done["reason"] == "dissolved" and len(done["standings"]["per_hand"]) == 1
            removed = await c.expect(lobby("removed"), what="the table's close")
            assert removed["reason"] == "series_over"
        await ca.close(), await cb.close()

    run(main())


def test_the_refusals_have_their_own_codes(stack) -> None:
    async def main() -> None:
        def refused(code: str) -> Any:
            return lambda m: m.get("kind") == "rejected" and m.get("code") == code

        # a full table
        ca, cb, created, _match = await open_table(stack, "rf-ann", "rf-bob")
        # a spectator may watch only where the owner allowed it
        spy = await Client.connect(stack.gateways[0].url, stack.token("rf-spy", role="spectator"), "rf-spy")
        await spy.expect(kind("welcome"))
        await spy.send({"type": "Watch", "command_id": "w1", "match": _match})
        assert (await spy.expect(refused("not_allowed"), what="no spectators"))["command_id"] == "w1"
        await spy.close()
        # a token for one room joins no table of another (SECURITY.md: the token's room claim)
        cr = await Client.connect(stack.gateways[0].url, stack.token("rf-roy", room="brieftable"), "rf-roy")
        await cr.expect(kind("welcome"))
        cz = await connect(stack, "rf-zoe")
        await cz.send({"type": "CreateTable", "command_id": "ctz", "room": "friends", "hands": 4})
        cz_code = (await cz.expect(kind("private_table")))["code"]
        await cr.send({"type": "JoinTable", "command_id": "j-room", "code": cz_code})
        r = await cr.expect(refused("not_allowed"), what="a table of another room")
        assert r["command_id"] == "j-room" and cz_code not in r["reason"]
        await cr.send({"type": "CreateTable", "command_id": "c-room", "room": "friends", "hands": 4})
        r = await cr.expect(refused("not_allowed"), what="a table opened in another room")
        assert r["command_id"] == "c-room" and "brieftable" in r["reason"]
        await cr.send({"type": "CreateTable", "command_id": "c-none", "room": "nosuchroom", "hands": 4})
        assert (await cr.expect(refused("unknown_room"), what="no such room"))["command_id"] == "c-none"
        await cr.close()
        spy2 = await Client.connect(stack.gateways[0].url, stack.token("rf-spy2", role="spectator", room="brieftable"),
                                    "rf-spy2")
        await spy2.expect(kind("welcome"))
        await spy2.send({"type": "Watch", "command_id": "w2", "match": _match})
        r = await spy2.expect(refused("not_allowed"), what="a match of another room")
        assert r["command_id"] == "w2" and "brieftable" in r["reason"]
        await spy2.close()
        await cz.send({"type": "CancelTable", "command_id": "xz"})
        await cz.expect(series("finished"))
        await cz.close()
        cc = await connect(stack, "rf-cat")
        await cc.send({"type": "JoinTable", "command_id": "j-full", "code": created["code"]})
        r = await cc.expect(refused("table_full"), what="table_full")
        assert r["command_id"] == "j-full" and created["code"] not in r["reason"]
        # an unknown code
        await cc.send({"type": "JoinTable", "command_id": "j-none", "code": "ZZZZZ2"})
        assert (await cc.expect(refused("unknown_table"), what="unknown_table"))["command_id"] == "j-none"
        # a cancelled table
        cd = await connect(stack, "rf-dan")
        await cd.send({"type": "CreateTable", "command_id": "ct", "room": "friends", "hands": 8})
        c2 = await cd.expect(kind("private_table"))
        await cd.send({"type": "CancelTable", "command_id": "x1"})
        done = await cd.expect(series("finished"))
        assert done["reason"] == "cancelled"
        await cc.send({"type": "JoinTable", "command_id": "j-gone", "code": c2["code"]})
        await cc.expect(refused("table_cancelled"), what="table_cancelled")
        # an expired table: nobody joined within the room's private_join_seconds
        ce = await connect(stack, "rf-eve")
        await ce.send({"type": "CreateTable", "command_id": "ct", "room": "brieftable", "hands": 4})
        c3 = await ce.expect(kind("private_table"))
        done = await ce.expect(series("finished"), what="the join time's end")
        assert done["reason"] == "not_joined"
        await cc.send({"type": "JoinTable", "command_id": "j-late", "code": c3["code"]})
        await cc.expect(refused("table_expired"), what="table_expired")
        # too many attempts: wrong codes count
        cf = await connect(stack, "rf-fay")
        for i in range(10):
            await cf.send({"type": "JoinTable", "command_id": f"g{i}", "code": f"QQQQQ{i % 8 + 2}"})
            await cf.expect(refused("unknown_table"), what="a wrong code's refusal")
        await cf.send({"type": "JoinTable", "command_id": "g-last", "code": "QQQQQ9"})
        limited = await cf.expect(refused("rate_limited"), what="rate_limited")
        assert limited["command_id"] == "g-last" and limited["retry_after_ms"] > 0
        # too many tables opened (each keeps its series until archived): 5 a minute a player
        cg = await connect(stack, "rf-gus")
        for i in range(5):
            await cg.send({"type": "CreateTable", "command_id": f"o{i}", "room": "friends", "hands": 4})
            await cg.expect(kind("private_table"), what="a table opened")
            await cg.send({"type": "CancelTable", "command_id": f"x{i}"})
            await cg.expect(series("finished"), what="its cancel")
        await cg.send({"type": "CreateTable", "command_id": "o-last", "room": "friends", "hands": 4})
        limited = await cg.expect(refused("rate_limited"), what="the sixth table refused")
        assert limited["command_id"] == "o-last" and limited["retry_after_ms"] > 0 and "tables" in limited["reason"]
        for c in (ca, cb, cc, cd, ce, cf, cg):
            await c.close()

    run(main())
