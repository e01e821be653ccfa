"""The gateway end to end: a real redis-server, ``shuangkou serve`` (with a dramatiq worker, or
alone: every test runs in both deployments) and ``shuangkou gateway`` processes, clients on real WebSockets (the ``websockets`` library).
Every message sent and received is validated against gateway/schemas/ (tests/gateway_support.py).

Matches finish quickly because both players ask for the trustee (R-13.5) in rooms whose
trustee delay is 0; nothing here waits for a clock to assert on it."""

from __future__ import annotations

import asyncio
import json
import signal
import time
import urllib.request
from typing import Any

import pytest

from engine.store import keys
from tests.gateway_support import Client, Closed, kind, lobby, ready_and_play, seat_of, start_stack
from tests.processes import stop_group

pytestmark = [pytest.mark.redis, pytest.mark.worker, pytest.mark.slow]

#: the churn room's ready clock (R-13.2).  It runs from the match's creation and must outlast a
#: join-then-leave cycle on a loaded CI machine (the lobby's CreateMatch + 2 Sits, the seated
#: notice, the client's Leave), or it wins the race and removes both players ``not_ready``
#: (legitimate, but not the Leave path this test checks); 2 s left little margin
CHURN_READY_S = 10
#: the least time one join-then-leave cycle takes: its 2 commands (Join, Leave) from one socket stay
#: under the gateway's default 20 commands a second (issue 23, docs/SECURITY.md).  Unpaced, the
#: cycles ran at ~25 a second (50 commands a second): the burst of 40 ran out around cycle 20-34,
#: the gateway refused a Join (no seat) or a Leave ``rate_limited`` -- and a refused Leave left the
#: ready clock to remove the players ``not_ready``: the two CI failures
CHURN_CYCLE_S = 0.15
ROOMS: dict[str, dict[str, Any]] = {
    "pairs": {"trustee_delay_seconds": 0.0},
    "grace": {"trustee_delay_seconds": 0.0, "reconnect_grace_seconds": 120, "turn_seconds": 120},
    "brief": {"trustee_delay_seconds": 0.0, "reconnect_grace_seconds": 1},
    "tabs": {"trustee_delay_seconds": 0.0},
    "imp": {"trustee_delay_seconds": 0.0},
    "watch": {"trustee_delay_seconds": 0.0},
    "kill": {"trustee_delay_seconds": 0.0},
    "hasty": {"trustee_delay_seconds": 0.0, "ready_seconds": 1},
    "term": {"trustee_delay_seconds": 0.0},
    "solo": {"trustee_delay_seconds": 0.0},
    # no leave cooldown (issue 34): each cycle leaves before the deal and joins again at once
    "churn": {"trustee_delay_seconds": 0.0, "ready_seconds": CHURN_READY_S, "leave_cooldown_seconds": 0},
    "quits": {"trustee_delay_seconds": 0.0},
    "away": {"trustee_delay_seconds": 0.0, "ready_seconds": 1, "reconnect_grace_seconds": 1},
    "metered": {"trustee_delay_seconds": 0.0},
    "resume": {"trustee_delay_seconds": 0.0},
    "named": {"trustee_delay_seconds": 0.0},
}
#: how long after its deadline a timer may fire in these stacks (the sweeper's grace; serve alone: 500 ms)
GRACE_S = 2.0


@pytest.fixture(scope="module")
def stack(redis_server, tmp_path_factory, deployment):
    """The whole stack, once per deployment (tests.gateway_support.DEPLOYMENTS)."""
    s = start_stack(redis_server.db_url(2), redis_server.db_url(3), tmp_path_factory.mktemp("gw"), ROOMS,
                    deployment)
    try:
        s.start_gateway("A")
        yield s
    finally:
        s.stop()


def run(coro):
    return asyncio.run(coro)


async def seat_pair(url_a: str, url_b: str, stack, a: str, b: str, room: str) -> tuple[Client, Client, str]:
    ca = await Client.connect(url_a, stack.token(a), a)
    cb = await Client.connect(url_b, stack.token(b), b)
    for c in (ca, cb):
        await c.expect(kind("welcome"))
        await c.send({"type": "Join", "room": room})
    sa = await ca.expect(lobby("seated"), what="seated")
    sb = await cb.expect(lobby("seated"), what="seated")
    assert sa["match"] == sb["match"] and sa["table"] == sb["table"] and sa["room"] == room
    return ca, cb, sa["match"]


def ledger_balance(stack, player: str) -> int:
    import redis

    from projections.ledger import balance_key

    with redis.Redis.from_url(stack.store_url) as r:
        v = r.hget(balance_key("points"), player)
    return 0 if v is None else int(v)


def match_events(stack, match: str) -> list[Any]:
    import redis

    from engine.store.redis_store import RedisEventStore

    with redis.Redis.from_url(stack.store_url) as r:
        return list(RedisEventStore(r).load(match))


def test_pairing_full_match_next_match_and_settlement_with_ledger_balances(stack):
    """Join → paired at a table → a full match → settled (balances = the ledger) → the table
    offers the next match to the same two (R-11: hand after hand at one table)."""
    gw = stack.gateways[0]

    async def main() -> None:
        ca, cb, m1 = await seat_pair(gw.url, gw.url, stack, "pa-alice", "pa-bob", "pairs")
        s1a, s1b = await asyncio.gather(ready_and_play(ca, m1), ready_and_play(cb, m1))
        assert s1a["scores"] == s1b["scores"] and sum(s1a["scores"].values()) == 0
        assert set(s1a["balances"]) == {"pa-alice"} and set(s1b["balances"]) == {"pa-bob"}  # own balance only
        assert s1a["balances"]["pa-alice"] == ledger_balance(stack, "pa-alice") == s1a["scores"]["pa-alice"]
        assert s1b["balances"]["pa-bob"] == ledger_balance(stack, "pa-bob") == s1b["scores"]["pa-bob"]
        n2a = await ca.expect(lobby("seated"), what="the next match")
        n2b = await cb.expect(lobby("seated"), what="the next match")
        m2 = n2a["match"]
        for c in (ca, cb):  # the next match's view comes with it, before anyone acts
            first = await c.expect(lambda x: x["kind"] == "update" and x["match"] == m2, what="the next view")
            assert first["view"]["phase"] == "seating" and seat_of(first["view"], c.name) is not None
        assert m2 == n2b["match"] != m1 and n2a["table"] == n2b["table"] == await_table(ca, m1)
        s2a, s2b = await asyncio.gather(ready_and_play(ca, m2), ready_and_play(cb, m2))
        for s, p in ((s2a, "pa-alice"), (s2b, "pa-bob")):
            assert s["balances"][p] == ledger_balance(stack, p) == s1a["scores"][p] + s2a["scores"][p]
        # every update of a match reached each player once, in order (no gap, no duplicate)
        for c in (ca, cb):
            versions = [m["version"] for m in c.received if m["kind"] == "update" and m["match"] == m1]
            assert versions == sorted(set(versions))
            seqs = [e["seq"] for m in c.received if m["kind"] == "update" and m["match"] == m1 for e in m["events"]]
            assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
            # a player never receives a card of the opponent's hand before it is played
            hands = [e for m in c.received if m["kind"] == "update" for e in m["events"] if e["type"] == "HandDealt"]
            assert hands and all(sum(h is not None for h in e["hands"]) == 1 for e in hands)
            # the brief's hand (issue 36) is the player's own: never a card outside its dealt hand
            mine = {c for e in hands if e["match_id"] == m1 for h in e["hands"] if h is not None for c in h}
            briefs = [m["brief"] for m in c.received if m["kind"] == "update" and m["match"] == m1]
            assert any(b["hand"] for b in briefs) and all(set(b["hand"] or ()) <= mine for b in briefs)
        await ca.close()
        await cb.close()

    run(main())


def await_table(c: Client, match: str) -> str:
    return next(m["table"] for m in c.received if m["kind"] == "lobby" and m.get("match") == match)


def test_reconnect_within_grace_changes_nothing_and_resumes_without_gap(stack):
    gw = stack.gateways[0]

    async def main() -> None:
        ca, cb, m = await seat_pair(gw.url, gw.url, stack, "gr-alice", "gr-bob", "grace")
        await ca.send({"type": "Ready"})
        await cb.send({"type": "Ready"})
        dealt = await ca.expect(lambda x: x["kind"] == "update" and x["view"] and x["view"]["phase"] == "playing")
        seen = dealt["version"]
        await ca.close()  # the socket drops …
        await cb.send({"type": "RequestTrustee"})  # … and the match moves on meanwhile
        await cb.expect(lambda x: x["kind"] == "update" and any(e["type"] == "TrusteeshipStarted"
                                                                  for e in x["events"]))
        # … and comes back within the grace window (10 s) with the last version it saw
        ca2 = await Client.connect(gw.url, stack.token("gr-alice"), "gr-alice", version=seen)
        await ca2.expect(kind("welcome"))
        await ca2.expect(lobby("seated"))
        first = await ca2.expect(kind("update"))
        assert first["match"] == m and first["events"] and first["events"][0]["seq"] == seen + 1
        await ca2.send({"type": "RequestTrustee"})
        versions = [first["version"]]
        while True:
            x = await ca2.recv()
            if x["kind"] == "update" and x["match"] == m:
                versions.append(x["version"])
            if x["kind"] == "settled":
                break
        assert versions == sorted(set(versions))
        types = [type(e).__name__ for e in match_events(stack, m)]
        assert "PlayerDisconnected" not in types and "MatchFinished" in types
        # a plain reconnect (no version) gets the current view at once
        await ca2.close()
        ca3 = await Client.connect(gw.url, stack.token("gr-alice"), "gr-alice", auth_message=True)
        await ca3.expect(kind("welcome"))
        cur = await ca3.expect(kind("update"))
        assert cur["view"] is not None and cur["view"]["you"] == "gr-alice"
        await ca3.close()
        await cb.close()

    run(main())


def test_a_reconnect_with_the_version_of_the_match_before_misses_nothing_of_the_next(stack):
    """client.js keeps the last version it read until an update of another match comes, and gives
    it when it reconnects: a socket that drops between a match's end and the next match's first
    update comes back with ``?version=`` of the match before.  The gateway must not take it for
    the next match's (it dropped that match's updates up to it: no deal, a clock never seen)."""
    gw = stack.gateways[0]

    async def main() -> None:
        ca, cb, m1 = await seat_pair(gw.url, gw.url, stack, "rv-alice", "rv-bob", "resume")
        await asyncio.gather(ready_and_play(ca, m1), ready_and_play(cb, m1))
        last = max(m["version"] for m in ca.received if m["kind"] == "update" and m["match"] == m1)
        m2 = (await ca.expect(lobby("seated"), what="the next match"))["match"]
        await ca.close()
        ca2 = await Client.connect(gw.url, stack.token("rv-alice"), "rv-alice", version=last)
        await ca2.expect(kind("welcome"))
        assert (await ca2.expect(lobby("seated")))["match"] == m2
        view = await ca2.expect(lambda x: x["kind"] == "update" and x["match"] == m2, what="the view")
        assert view["version"] < last  # the next match is not as far on as the one before
        for c in (ca2, cb):
            await c.send({"type": "Ready", "command_id": f"ready-{m2}"})
        dealt = await ca2.expect(lambda x: x["kind"] == "update" and x["match"] == m2 and any(
            e["type"] == "HandDealt" for e in x["events"]), timeout_s=30, what="the deal of the next match")
        assert dealt["version"] < last
        for c in (ca2, cb):
            await c.send({"type": "RequestTrustee"})
        for c in (ca2, cb):
            await c.expect(lambda x: x["kind"] == "settled" and x["match"] == m2, what="the next match settled")
        versions = [m["version"] for m in ca2.received if m["kind"] == "update" and m["match"] == m2]
        assert versions == sorted(set(versions))
        seqs = [e["seq"] for m in ca2.received if m["kind"] == "update" and m["match"] == m2 for e in m["events"]]
        assert seqs == list(range(seqs[0], versions[-1] + 1)) and seqs[0] <= view["version"] + 1  # no gap
        await ca2.close()
        await cb.close()

    run(main())


@pytest.mark.parametrize("auth_message", [False, True], ids=["query", "auth-message"])
def test_a_resume_version_of_another_match_gets_the_current_view(stack, auth_message):
    """``?version=N&match=M`` (or ``Auth.version`` with ``Auth.match``): N is applied only when M
    is the table's match; of another match, the socket gets the current view, not the updates
    after N (without ``match``, N would be taken for the current match's)."""
    gw = stack.gateways[0]

    async def main() -> None:
        a, b = f"nm-alice-{int(auth_message)}", f"nm-bob-{int(auth_message)}"
        ca, cb, m = await seat_pair(gw.url, gw.url, stack, a, b, "named")
        for c in (ca, cb):
            await c.send({"type": "Ready", "command_id": f"ready-{m}"})
        dealt = await ca.expect(lambda x: x["kind"] == "update" and x["match"] == m and any(
            e["type"] == "HandDealt" for e in x["events"]), what="the deal")
        await ca.close()
        resumed = []
        for match in ("t000000000000-1", m):
            c = await Client.connect(gw.url, stack.token(a), a, version=dealt["events"][0]["seq"] - 1, match=match,
                                     auth_message=auth_message)
            await c.expect(kind("welcome"))
            assert (await c.expect(lobby("seated")))["match"] == m
            resumed.append(await c.expect(lambda x: x["kind"] == "update" and x["match"] == m, what="the resume"))
            await c.close()
        other, same = resumed
        assert other["events"] == [] and other["view"]["you"] == a and other["version"] == dealt["version"]
        assert same["events"] == dealt["events"] and same["version"] == dealt["version"]  # after the version given
        await cb.close()

    run(main())


def test_reconnect_after_grace_is_a_disconnect_then_a_reconnect(stack):
    gw = stack.gateways[0]

    async def main() -> None:
        ca, cb, m = await seat_pair(gw.url, gw.url, stack, "br-alice", "br-bob", "brief")
        await ca.send({"type": "Ready"})
        await cb.send({"type": "Ready"})
        await ca.expect(lambda x: x["kind"] == "update" and x["view"] and x["view"]["phase"] == "playing")
        await ca.close()
        gone = await cb.expect(lambda x: x["kind"] == "update" and any(
            e["type"] == "PlayerDisconnected" and e["player"] == "br-alice" for e in x["events"]),
            what="alice's Disconnect after the grace window")
        assert any(e["type"] == "TrusteeshipStarted" and e["player"] == "br-alice" and e["reason"] == "disconnect"
                   for e in gone["events"])  # R-13.4: trustee to the end
        ca2 = await Client.connect(gw.url, stack.token("br-alice"), "br-alice")
        await cb.expect(lambda x: x["kind"] == "update" and any(
            e["type"] == "PlayerReconnected" and e["player"] == "br-alice" for e in x["events"]))
        await cb.send({"type": "RequestTrustee"})
        await cb.expect(lambda x: x["kind"] == "settled" and x["match"] == m)
        await ca2.expect(lambda x: x["kind"] == "settled" and x["match"] == m)
        await ca2.close()
        await cb.close()

    run(main())


def test_second_tab_wins_and_the_first_is_closed_with_a_reason(stack):
    gw = stack.gateways[0]

    async def main() -> None:
        t1 = await Client.connect(gw.url, stack.token("tab-alice"), "tab-alice")
        await t1.expect(kind("welcome"))
        await t1.send({"type": "Join", "room": "tabs"})
        await t1.expect(lobby("queued"))
        t2 = await Client.connect(gw.url, stack.token("tab-alice"), "tab-alice")
        await t2.expect(kind("welcome"))
        closed = await t1.closed()
        assert closed.code == 4409 and "newer connection" in closed.reason
        st = await t2.expect(kind("lobby"))
        assert st["state"] == "queued" and st["room"] == "tabs"
        await t2.send({"type": "Leave"})
        left = await t2.expect(lobby("removed"))
        assert left["reason"] == "left"
        await t2.close()

    run(main())


def test_impersonation_and_non_player_commands_are_refused_and_never_forwarded(stack):
    import redis

    from engine.match.commands import decode_command

    gw = stack.gateways[0]

    async def main() -> list[str]:
        ca, cb, m = await seat_pair(gw.url, gw.url, stack, "im-alice", "im-bob", "imp")
        forged = [
            ({"type": "Ready", "player": "im-bob", "command_id": "f1"}, "not_allowed"),
            ({"type": "Escape", "player": "im-bob", "command_id": "f2"}, "not_allowed"),
            ({"type": "Play", "player": "im-bob", "text": "3", "command_id": "f3"}, "not_allowed"),
            ({"type": "Disconnect", "player": "im-bob", "command_id": "f4"}, "not_allowed"),
            ({"type": "Disconnect", "command_id": "f5"}, "not_allowed"),
            ({"type": "TurnTimeout", "version": 3, "command_id": "f6"}, "not_allowed"),
            ({"type": "Sit", "balance": 2000000, "command_id": "f7"}, "not_allowed"),
            ({"type": "CreateMatch", "config": {}, "command_id": "f8"}, "not_allowed"),
            ({"type": "Ready", "match_id": "other-match", "command_id": "f9"}, "not_allowed"),
            ({"type": "Deal", "command_id": "f10"}, "not_allowed"),
            ({"type": "Play", "text": "3", "cards": [1], "command_id": "f11"}, "bad_command"),
        ]
        for msg, code in forged:
            await ca.send(msg, validate=False)
            r = await ca.expect(kind("rejected"))
            assert (r["command_id"], r["code"]) == (msg["command_id"], code), r
        await ca.send({"type": "Watch", "match": m, "command_id": "w1"})
        r = await ca.expect(kind("rejected"))
        assert r["code"] == "not_allowed"
        await ca.send({"type": "Ready", "player": "im-alice", "command_id": "own"})  # naming oneself is fine
        u = await ca.expect(lambda x: x["kind"] == "update" and x["command_id"] == "own")
        assert any(e["type"] == "PlayerReady" and e["player"] == "im-alice" for e in u["events"])
        await ca.close()
        await cb.close()
        return [m]

    (m,) = run(main())
    with redis.Redis.from_url(stack.store_url) as r:
        from engine.service.channels import PLAYER

        sent = [decode_command(f[b"c"]) for s in PLAYER.streams() for _id, f in r.xrange(s) if b"c" in f]
    mine = [c for c in sent if c.match_id == m and getattr(c, "player", None) == "im-bob"]
    assert all(not c.command_id.startswith("p8:im-alice") for c in mine)
    assert not [c for c in sent if c.command_id.endswith((":f1", ":f2", ":f3", ":f4", ":f5", ":f9"))]
    types = [type(e).__name__ for e in match_events(stack, m)]
    assert types.count("PlayerReady") == 1 and "PlayerEscaped" not in types


@pytest.mark.parametrize("how", ["missing", "bad_signature", "expired", "garbage", "auth_message_expired",
                                 "first_message_not_auth", "first_message_binary", "lives_for_years"])
def test_bad_expired_and_missing_tokens_close_4401(stack, how):
    import jwt

    gw = stack.gateways[0]

    async def main() -> Closed:
        if how == "missing":
            c = await Client.connect(gw.url, None, "x")
            await c.send({"type": "Join", "room": "pairs"})
        elif how == "bad_signature":
            c = await Client.connect(gw.url, jwt.encode({"sub": "x", "role": "player", "exp": 4102444800},
                                                        b"another-secret-0123456789abcdef0123", "HS256"), "x")
        elif how == "expired":
            c = await Client.connect(gw.url, jwt.encode({"sub": "x", "role": "player", "exp": 1000}, _secret(),
                                                        "HS256"), "x")
        elif how == "garbage":
            c = await Client.connect(gw.url, "not.a.token", "x")
        elif how == "lives_for_years":  # rightly signed, exp beyond the default --token-max-lifetime (30 days)
            c = await Client.connect(gw.url, jwt.encode({"sub": "x", "role": "player", "exp": 4102444800}, _secret(),
                                                        "HS256"), "x")
        elif how == "auth_message_expired":
            c = await Client.connect(gw.url, jwt.encode({"sub": "x", "exp": 1000}, _secret(), "HS256"), "x",
                                     auth_message=True)
        elif how == "first_message_binary":  # the Auth itself, in a binary frame
            c = await Client.connect(gw.url, None, "x")
            await c.ws.send(json.dumps({"type": "Auth", "token": stack.token("x")}).encode())
        else:
            c = await Client.connect(gw.url, None, "x")
            await c.send({"type": "Ready"})
        return await c.closed()

    closed = run(main())
    assert closed.code == 4401 and closed.reason


def test_hostile_frames_are_typed_rejections_and_no_token_reaches_the_log(stack):
    """A reviewer's findings: 5,000-deep JSON and a lone surrogate in ``command_id`` used to
    drop the socket (1006); a refusal with no usable id had ``command_id: null``; the log held
    every ``?token=``; an Auth message naming another player was welcomed as the token's."""
    gw = stack.gateways[0]
    token = stack.token("hf-alice")
    encoded = stack.token("hf-carol")

    async def main() -> tuple[list[dict[str, Any]], Closed]:
        c = await Client.connect(gw.url, token, "hf-alice")
        await c.expect(kind("welcome"))
        got = []
        for raw in ('{"type":"Join","room":"pairs","x":' + "[" * 5000 + "]" * 5000 + "}",
                    '{"type":"Join","room":"pairs","command_id":"\\ud800"}',
                    "not json at all", b'{"type":"Sync"}'):  # the last one in a binary frame
            await c.ws.send(raw)
            got.append(await c.expect(kind("rejected")))
        await c.send({"type": "Join", "room": "no-such-room", "command_id": "still-here"})  # still open
        got.append(await c.expect(lambda m: m.get("command_id") == "still-here"))
        await c.close()
        other = await Client.connect(gw.url, None, "hf-alice")  # no token yet: the first message is Auth
        await other.ws.send(json.dumps({"type": "Auth", "token": token, "player": "hf-bob"}))
        import websockets

        # the query's name percent-encoded: the gateway reads it as token= (the security review of 2026-12-06)
        async with websockets.connect(f"{gw.url}?tok%65n={encoded}") as raw:
            assert json.loads(await raw.recv())["kind"] == "welcome"
        return got, await other.closed()

    got, closed = run(main())
    deep, surrogate, garbage, binary, alive = got
    assert (deep["code"], deep["reason"]) == ("bad_command", "JSON nested too deeply")
    assert surrogate["code"] == "bad_command" and "surrogate" in surrogate["reason"]
    assert garbage["code"] == "bad_command"
    assert binary["code"] == "bad_command" and "text frame" in binary["reason"]  # and the socket stays open
    assert all(isinstance(r["command_id"], str) and r["command_id"] for r in (deep, surrogate, garbage, binary))
    assert alive["kind"] == "rejected"
    assert closed.code == 4401 and "another player" in closed.reason
    log = gw.err.read_text(errors="replace") + gw.out.read_text(errors="replace")
    assert "token=<redacted>" in log and "tok%65n=<redacted>" in log  # the connections were logged …
    for t in (token, encoded):
        assert t not in log and t.split(".")[2] not in log  # … without their tokens


def _secret() -> bytes:
    from tests.gateway_support import SECRET

    return SECRET


def test_a_spectator_watches_live_and_never_receives_a_hand(stack):
    gw = stack.gateways[0]

    async def main() -> None:
        ca, cb, m = await seat_pair(gw.url, gw.url, stack, "wa-alice", "wa-bob", "watch")
        spec = await Client.connect(gw.url, stack.token("wa-fan", role="spectator"), "wa-fan")
        await spec.expect(kind("welcome"))
        await spec.send({"type": "Join", "room": "watch"})
        assert (await spec.expect(kind("rejected")))["code"] == "not_allowed"
        await spec.send({"type": "Ready"})
        assert (await spec.expect(kind("rejected")))["code"] == "not_allowed"
        await spec.send({"type": "Watch", "match": "no-such-match"})
        assert (await spec.expect(kind("rejected")))["code"] == "unknown_match"
        await spec.send({"type": "Watch", "match": m})
        await spec.expect(kind("update"))
        sa, sb = await asyncio.gather(ready_and_play(ca, m), ready_and_play(cb, m))
        await spec.expect(lambda x: x["kind"] == "update" and x["view"] and x["view"]["phase"] == "finished",
                          what="the end of the match")
        updates = [x for x in spec.received if x["kind"] == "update"]
        assert any(e["type"] == "HandDealt" for x in updates for e in x["events"])
        assert any(e["type"] == "CardsPlayed" for x in updates for e in x["events"])
        # the cards played up to each version, from the match's own stream: a spectator's copy may
        # skip updates (a gap its resync closes with a view), never show a card not played yet
        plays = [(e.seq, set(e.cards)) for e in match_events(stack, m) if type(e).__name__ == "CardsPlayed"]
        shown = None  # the version the spectator's copy is at: in order, and a gap only with a view
        for x in updates:
            assert x["match"] == m, x  # the watched match alone: the table does not move on here
            seqs = [e["seq"] for e in x["events"]]
            assert x["view"] is not None or (shown is not None and seqs and seqs[0] == shown + 1), (shown, x)
            shown = x["version"]
            played = {c for seq, cards in plays if seq <= x["version"] for c in cards}
            assert x["brief"]["hand"] is None  # a spectator's brief holds no hand (issue 36)
            assert {c for p in x["brief"]["trick_plays"] for c in p["cards"]} <= played
            v = x["view"]
            if v is not None:
                assert v["hand"] is None and v["you"] is None and "opponent" not in v
                assert set(v["table_ids"]) <= played
            for e in x["events"]:
                if e["type"] == "HandDealt":
                    assert e["hands"] == [None, None] and e["lead_card"] is None and e["set_aside"] is None
        await spec.close()
        await ca.close()
        await cb.close()

    run(main())


def test_ready_timer_removes_the_unready_player_and_requeues_the_other(stack):
    """R-13.2: not ready in time → removed from the table and the room; the other waits again."""
    gw = stack.gateways[0]

    async def main() -> None:
        ca, cb, m = await seat_pair(gw.url, gw.url, stack, "ha-alice", "ha-bob", "hasty")
        await ca.send({"type": "Ready"})
        removed = await cb.expect(lobby("removed"), what="bob's removal")
        assert removed["reason"] == "not_ready" and removed["room"] == "hasty"
        back = await ca.expect(lobby("queued"), what="alice back in the queue")
        assert back["room"] == "hasty"
        await ca.send({"type": "Leave"})
        await ca.expect(lobby("removed"))
        await ca.close()
        await cb.close()

    run(main())


@pytest.mark.parametrize("back", ["at_once", "after_the_grace"])
def test_players_away_when_their_match_is_abandoned_are_not_held_at_its_table(stack, back):
    """Both players close their sockets before the Ready: the ready clock abandons the match
    (R-13.2) while no socket reads its update.  The engine's lobby learns the end from the
    match's feed (never from a socket) and closes the table; the players come back at once
    (within their grace) or after it, their first Join is refused ``cooldown`` (a removal not
    ready before the deal cools as a leave does), and their Join after it queues them again
    and pairs them at a new match."""
    gw = stack.gateways[0]
    players = (f"aw-{back}-alice", f"aw-{back}-bob")

    async def main() -> None:
        ca, cb, m = await seat_pair(gw.url, gw.url, stack, *players, "away")
        await ca.close()
        await cb.close()
        deadline = time.monotonic() + 60
        while not any(type(e).__name__ == "MatchAbandoned" for e in match_events(stack, m)):
            assert time.monotonic() < deadline, "the ready clock did not abandon the match"
            await asyncio.sleep(0.2)
        while any(t.get("match") == m and t.get("status") != "closed"
                  for t in lobby_tables(stack, "away").values()):
            assert time.monotonic() < deadline, "the lobby left the table of an abandoned match open"
            await asyncio.sleep(0.2)
        if back == "after_the_grace":
            await asyncio.sleep(1.5)  # their reconnect grace (1 s in "away") runs out meanwhile
        back_ = []
        for p in players:
            c = await Client.connect(gw.url, stack.token(p), p)
            await c.expect(kind("welcome"))
            await c.send({"type": "Join", "room": "away", "command_id": f"j-{p}"})
            # removed not ready before the deal: the room's leave cooldown first (SECURITY.md 39)
            cooled = await c.expect(lambda x: x.get("command_id") == f"j-{p}", what=f"{p}'s Join answered")
            assert (cooled["kind"], cooled["code"]) == ("rejected", "cooldown"), cooled
            back_.append((c, p, cooled["retry_after_ms"]))
        await asyncio.sleep(max(wait for _c, _p, wait in back_) / 1000 + 0.2)
        for c, p, _wait in back_:
            await c.send({"type": "Join", "room": "away"})
        seated = [await c.expect(lobby("seated"), what=f"{p} seated again") for c, p, _w in back_]
        assert seated[0]["match"] == seated[1]["match"] != m, seated
        for c, _p, _w in back_:
            await c.send({"type": "Leave"})
            await c.expect(lobby("removed"))
            await c.close()

    run(main())


def test_a_gateway_killed_mid_match_players_resume_through_another(stack):
    gw_a = stack.gateways[0]
    gw_b = stack.start_gateway("B")

    async def main() -> None:
        victim = stack.start_gateway("victim")
        ca, cb, m = await seat_pair(victim.url, victim.url, stack, "ki-alice", "ki-bob", "kill")
        await ca.send({"type": "Ready"})
        await cb.send({"type": "Ready"})
        va = await ca.expect(lambda x: x["kind"] == "update" and x["view"] and x["view"]["phase"] == "playing")
        vb = await cb.expect(lambda x: x["kind"] == "update" and x["view"] and x["view"]["phase"] == "playing")
        stop_group(victim.proc, signal.SIGKILL)
        for c in (ca, cb):
            assert (await c.closed()).code != 1000  # the connection broke, nobody closed it
        na = await Client.connect(gw_b.url, stack.token("ki-alice"), "ki-alice", version=va["version"])
        nb = await Client.connect(gw_a.url, stack.token("ki-bob"), "ki-bob", version=vb["version"])
        for c in (na, nb):
            await c.expect(lobby("seated"))
            await c.send({"type": "RequestTrustee"})
        sa = await na.expect(lambda x: x["kind"] == "settled" and x["match"] == m)
        sb = await nb.expect(lambda x: x["kind"] == "settled" and x["match"] == m)
        assert sa["scores"] == sb["scores"]
        for c in (na, nb):
            versions = [x["version"] for x in c.received if x["kind"] == "update" and x["match"] == m]
            assert versions == sorted(set(versions))
        types = [type(e).__name__ for e in match_events(stack, m)]
        assert "PlayerDisconnected" not in types  # both came back within the grace window
        await na.close()
        await nb.close()

    try:
        run(main())
    finally:
        stop_group(gw_b.proc)


def test_sigterm_closes_sockets_1001_and_sends_no_disconnect(stack):
    gw = stack.start_gateway("term")

    async def main() -> str:
        ca, cb, m = await seat_pair(gw.url, gw.url, stack, "te-alice", "te-bob", "term")
        await ca.send({"type": "Ready"})
        await cb.send({"type": "Ready"})
        await ca.expect(lambda x: x["kind"] == "update" and x["view"] and x["view"]["phase"] == "playing")
        gw.proc.send_signal(signal.SIGTERM)
        for c in (ca, cb):
            closed = await c.closed()
            assert closed.code == 1001 and "shutting down" in closed.reason
        na = await Client.connect(stack.gateways[0].url, stack.token("te-alice"), "te-alice")
        nb = await Client.connect(stack.gateways[0].url, stack.token("te-bob"), "te-bob")
        for c in (na, nb):
            await c.expect(lobby("seated"))
            await c.send({"type": "RequestTrustee"})
        for c in (na, nb):
            await c.expect(lambda x: x["kind"] == "settled" and x["match"] == m)
            await c.close()
        return m

    m = run(main())
    assert gw.proc.wait(timeout=30) == 0
    assert "PlayerDisconnected" not in [type(e).__name__ for e in match_events(stack, m)]


def test_healthz_and_metrics(stack):
    gw = stack.gateways[0]
    health = json.loads(urllib.request.urlopen(gw.http + "/healthz", timeout=5).read())
    assert health["status"] == "ok"

    async def one_round_trip() -> None:
        c = await Client.connect(gw.url, stack.token("me-alice"), "me-alice")
        await c.expect(kind("welcome"))
        await c.send({"type": "Ready", "command_id": "x"})
        await c.expect(kind("rejected"))
        await c.close()
        bad = await Client.connect(gw.url, "nope", "bad")
        await bad.closed()
        # a command the engine answers: its round trip is measured (the test alone saw none)
        ca, cb, _match = await seat_pair(gw.url, gw.url, stack, "me-m1", "me-m2", "metered")
        await ca.send({"type": "Ready", "command_id": "r1"})
        await ca.expect(lambda m: m.get("kind") == "update" and m.get("command_id") == "r1", what="Ready's update")
        for c in (ca, cb):
            await c.send({"type": "Leave"})
            await c.close()

    run(one_round_trip())
    body = urllib.request.urlopen(gw.http + "/metrics", timeout=5).read().decode()
    samples = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.rpartition(" ")
            samples[k] = float(v)
    assert samples['shuangkou_gateway_messages_in_total{type="Ready"}'] >= 1
    assert samples['shuangkou_gateway_messages_out_total{kind="welcome"}'] >= 1
    assert samples['shuangkou_gateway_auth_failures_total{reason="invalid"}'] >= 1
    assert 'shuangkou_gateway_connections{role="player"}' in samples
    assert sum(v for k, v in samples.items() if k.startswith("shuangkou_gateway_command_round_trip_seconds_count")) >= 1


def test_bots_fill_an_empty_seat_and_play_hand_after_hand(stack):
    """``--bots --bot-level hard``: alone in the queue for a few seconds → a bot sits opposite
    (playing its own turns at its level from its own view after ``--bot-think``; the lobby
    names its level, issue 27); in a room
    registered after the gateway started (``shuangkou room add``) too."""
    import subprocess
    import sys

    from tests.gateway_support import ROOT, write_room

    from tests.processes import wait_for

    gw = stack.start_gateway("bots", "--bots", "--bot-think", "0.2", "--bot-level", "hard")
    later = write_room(stack.tmp / "later.toml", "later", trustee_delay_seconds=0.0, bot_level="easy")
    added = subprocess.run([sys.executable, "-m", "shuangkou", "room", "add", str(later), "--redis", stack.store_url],
                           cwd=ROOT, env=stack.env(), capture_output=True, text=True, timeout=60)
    assert added.returncode == 0, added.stdout + added.stderr

    async def main() -> None:
        c = await Client.connect(gw.url, stack.token("so-alice"), "so-alice")
        await c.expect(kind("welcome"))
        await c.send({"type": "Join", "room": "solo"})
        await c.expect(lobby("queued"))
        seated = await c.expect(lobby("seated"), what="a bot opposite")
        view = (await c.expect(lambda x: x["kind"] == "update" and x["match"] == seated["match"]))["view"]
        opponent = next(s["player"] for s in view["seats"] if s and s["player"] != "so-alice")
        assert opponent.startswith("bot-")
        assert seated["bot_level"] == "hard"
        bot_moves: list[str] = []
        await c.send({"type": "Ready", "command_id": f"ready-{seated['match']}"})
        asked = False
        while True:  # alice hands her seat to the trustee; the bot plays its own turns
            m = await c.recv()
            if m["kind"] == "update" and m["match"] == seated["match"]:
                bot_moves += [e.get("by", "player") for e in m["events"] if e["type"] in ("CardsPlayed", "Passed")
                              and e["player"] == opponent]
                if not asked and m["view"] and m["view"]["phase"] == "playing":
                    await c.send({"type": "RequestTrustee"})
                    asked = True
            if m["kind"] == "settled" and m["match"] == seated["match"]:
                s1 = m
                break
        assert set(s1["scores"]) == {"so-alice", opponent}
        assert "player" in bot_moves and "trustee" not in bot_moves and "timeout" not in bot_moves, bot_moves
        nxt = await c.expect(lobby("seated"), what="the next match against the bot")
        assert nxt["table"] == seated["table"] and nxt["match"] != seated["match"]
        await c.send({"type": "Leave"})
        gone = await c.expect(lobby("removed"))
        assert gone["reason"] == "left"
        await c.close()
        # a bot is never left seated alone: it leaves the match and the table with the person
        wait_for(lambda: not undealt(stack, [nxt["match"]]), 30 + GRACE_S + 60, "the bot's match is still open")
        evs = match_events(stack, nxt["match"])
        assert type(evs[-1]).__name__ == "MatchAbandoned", [type(e).__name__ for e in evs]
        assert lobby_tables(stack, "solo")[nxt["table"]]["status"] == "closed"
        assert bot_place(stack, opponent) == {}  # not back in the queue, not at a table
        # the registered room: the gateway serves it (re-read every few seconds) and fills it too
        r = await Client.connect(gw.url, stack.token("so-rita"), "so-rita")
        await r.expect(kind("welcome"))
        while True:
            await r.send({"type": "Join", "room": "later"})
            m = await r.expect(lambda x: x["kind"] == "lobby" or x["kind"] == "rejected", what="join later")
            if m["kind"] == "lobby":
                break
            await asyncio.sleep(0.5)  # not served yet: the lobby has not re-read the registry
        seated = await r.expect(lobby("seated"), what="a bot opposite in the registered room")
        assert seated["bot_level"] == "easy"  # the room's bot_level overrides --bot-level
        view = (await r.expect(lambda x: x["kind"] == "update" and x["match"] == seated["match"]))["view"]
        assert any(s and s["player"].startswith("bot-") for s in view["seats"])
        await r.close()

    try:
        run(main())
    finally:
        stop_group(gw.proc)


def lobby_tables(stack, room: str) -> dict[str, dict[str, str]]:
    """Every table of ``room`` with its fields: the engine lobby's read models
    (``sk:{bN}:t:<table>:info``, engine/store/keys.py ``table_info_key``)."""
    import redis

    out = {}
    with redis.Redis.from_url(stack.store_url, decode_responses=True) as r:
        for key in r.scan_iter("sk:{b*}:t:*:info"):
            fields = r.hgetall(key)
            if fields.get("room") == room:
                out[key.split(":t:", 1)[1].rsplit(":", 1)[0]] = fields
    return out


def undealt(stack, matches) -> dict[str, str]:
    """The matches among ``matches`` that are neither dealt nor over: their phase."""
    from engine.match.replay import replay

    out = {}
    for m in matches:
        evs = match_events(stack, m)
        phase = replay(evs, match_id=m).phase if evs else "missing"
        if phase in ("new", "seating"):
            out[m] = phase
    return out


def test_fifty_join_then_leave_cycles_leave_no_open_table_and_no_undealt_match(stack):
    """Issue 22 §6: a player joins, is seated opposite the one waiting, leaves before the deal;
    50 times.  Each table closes at once (the one who stays goes back to the queue), each match
    ends with MatchAbandoned (no settlement), none is left undealt past ready_seconds + grace."""
    from tests.processes import wait_for

    gw = stack.gateways[0]
    cycles = 50

    async def main() -> None:
        stay = await Client.connect(gw.url, stack.token("ch-stay"), "ch-stay")
        await stay.expect(kind("welcome"))
        await stay.send({"type": "Join", "room": "churn"})
        await stay.expect(lobby("queued"))
        c = await Client.connect(gw.url, stack.token("ch-move"), "ch-move")
        await c.expect(kind("welcome"))
        for i in range(cycles):
            started = time.monotonic()
            await c.send({"type": "Join", "room": "churn"})
            seated = await c.expect(lobby("seated"), what=f"cycle {i}: seated")
            await stay.expect(lambda m, t=seated["table"]: m.get("kind") == "lobby" and m.get("state") == "seated"
                              and m.get("table") == t, what=f"cycle {i}: the one waiting seated")
            await c.send({"type": "Leave"})
            gone = await c.expect(lobby("removed"), what=f"cycle {i}: removed")
            assert gone["reason"] == "left" and gone["table"] == seated["table"]
            back = await stay.expect(lobby("queued"), what=f"cycle {i}: back in the queue")
            assert back["reason"] == "opponent_left"
            await asyncio.sleep(max(0.0, started + CHURN_CYCLE_S - time.monotonic()))
        assert not [m for m in c.received + stay.received if m.get("kind") == "rejected"]
        await c.close()
        await stay.send({"type": "Leave"})
        await stay.expect(lobby("removed"))
        await stay.close()

    run(main())
    tables = lobby_tables(stack, "churn")
    assert len(tables) == cycles
    assert {t: f["status"] for t, f in tables.items() if f["status"] != "closed"} == {}  # 0 open tables
    matches = sorted(f["match"] for f in tables.values())
    # every match ends: the leaver's Leave, then the stayer's, empty it (MatchAbandoned "left"); the
    # ready clock (ready_seconds + the grace) bounds what any other order leaves behind
    wait_for(lambda: not undealt(stack, matches), CHURN_READY_S + GRACE_S + 60,
             f"undealt matches: {undealt(stack, matches)}")
    for m in matches:
        evs = match_events(stack, m)
        last = evs[-1]
        assert type(last).__name__ == "MatchAbandoned", (m, [type(e).__name__ for e in evs])
        assert not any(type(e).__name__ in ("HandDealt", "MatchFinished") for e in evs)
        assert ledger_settlement(stack, m) is None  # nothing settled, no ledger entry


def ledger_settlement(stack, match: str):
    import redis

    from projections.ledger import RedisLedger

    with redis.Redis.from_url(stack.store_url) as r:
        return RedisLedger(r).settlement(match)


def test_a_player_who_leaves_at_the_settlement_closes_the_table(stack):
    """After a settlement the table offers the next match; a player who leaves at the settlement
    leaves the room, the other goes back to the queue, and no match is left waiting."""
    from tests.processes import wait_for

    gw = stack.gateways[0]

    async def main() -> tuple[str, str]:
        ca, cb, m1 = await seat_pair(gw.url, gw.url, stack, "qu-alice", "qu-bob", "quits")
        await asyncio.gather(ready_and_play(ca, m1), ready_and_play(cb, m1))
        await ca.send({"type": "Leave"})  # at the settlement: the next match is being offered, or seated
        gone = await ca.expect(lobby("removed"), what="alice removed")
        assert gone["reason"] == "left"
        back = await cb.expect(lobby("queued"), what="bob back in the queue")
        assert back["reason"] == "opponent_left"
        await cb.send({"type": "Leave"})
        await cb.expect(lobby("removed"))
        await ca.close()
        await cb.close()
        return m1, gone["table"]

    m1, table = run(main())
    t = lobby_tables(stack, "quits")[table]
    assert t["status"] == "closed"
    later = [f"{table}-{n}" for n in range(2, int(t["n"]) + 1)]  # a next match, if it was created
    wait_for(lambda: not undealt(stack, later), 30 + GRACE_S + 60, f"undealt: {undealt(stack, later)}")
    for m in later:
        evs = match_events(stack, m)
        assert not evs or type(evs[-1]).__name__ == "MatchAbandoned", [type(e).__name__ for e in evs]


def bot_place(stack, bot: str) -> dict[str, str]:
    import redis

    with redis.Redis.from_url(stack.store_url, decode_responses=True) as r:
        from engine.service.lobby_notes import PLACE_FIELDS

        return {k: v for k, v in r.hgetall(keys.place_key(bot)).items() if k in PLACE_FIELDS}
