"""A socket's catch-up from the version its client gives (gateway/resync.py, docs/PROTOCOL.md
"On (re)connect"), against an in-memory Redis.

``?version=``, ``Auth.version`` and ``Sync.version`` name no match, and client.js keeps the last
version it read until an update of another match comes: a client that dropped between a match's
end and the next one's first update gives the version of the match before.  The gateway took it
for the next match's and dropped every update of it up to that version (the deal and the clock
that starts the player's turn among them).  And where a resume's version and match are read
from (``authenticate``: the query or the Auth message, never one of each).  And the timers: a
gap's and an awaited view's fallback each run on their own (one shared slot per match let
either keep the other from starting)."""

from __future__ import annotations

import asyncio
from typing import Any

import fakeredis
import msgpack
import pytest

from engine.store import keys
from gateway.outbox import OutEntry, parse_entry
from gateway.resync import Resync
from gateway.tokens import TokenPolicy

M = "t1-2"  # the table's next match; the client's version was of t1-1


class _Hub:
    def __init__(self) -> None:
        self.redis = fakeredis.aioredis.FakeRedis()


class _Conn:
    """A player's socket as the resync sees it (gateway/resync.py Receiver)."""

    def __init__(self) -> None:
        self.id, self.hub, self.match, self.source = "c1", _Hub(), M, None
        self.sent: list[dict[str, Any]] = []

    @property
    def is_player(self) -> bool:
        return True

    @property
    def player(self) -> str:
        return "ann"

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    def read_upto(self, stream: str) -> str:
        return "+"

    def track(self, engine_id: str, ctype: str) -> None:
        pass

    def answered(self, engine_id: str) -> None:
        pass

    def ended(self, match: str) -> None:
        pass

    async def adopt(self, match: str) -> bool:
        return False


def _view(version: int) -> dict[str, Any]:
    return {"match_id": M, "version": version, "phase": "seating", "seats": [], "hand": {"ids": []}}


def _update(version: int) -> OutEntry:
    return OutEntry(f"{version}-1", "update", M, "", version,
                    body={"events": [{"seq": version, "type": "PlayerReady"}], "view": _view(version)})


def _sync(resync: Resync, version: int | None) -> OutEntry:
    """The engine's answer to the Sync the socket sent (its command id), with the view at ``version``."""
    body = {} if version is None else {"view": _view(version)}
    return OutEntry(f"{version}-2", "sync", M, resync._awaiting[M], version, body=body)


async def _write(conn: _Conn, versions: range, views: tuple[int, ...] | None = None) -> None:
    """Updates of M at ``versions`` in the player's stream, each with its view (only those in ``views``)."""
    for v in versions:
        body: dict[str, Any] = {"events": [{"seq": v, "type": "PlayerReady"}]}
        if views is None or v in views:
            body["view"] = _view(v)
        await conn.hub.redis.xadd(keys.outbox_key("ann"), {
            "kind": "update", "match": M, "command_id": "", "version": str(v), "body": msgpack.packb(body)})


def _versions(conn: _Conn) -> list[int]:
    return [m["version"] for m in conn.sent if m["kind"] == "update"]


@pytest.mark.parametrize("live", [(), (4, 5)], ids=["nothing-meanwhile", "updates-while-the-view-is-awaited"])
def test_a_version_the_match_has_not_reached_is_not_taken_for_its(live):
    """The client gives version 80 (of the match before); the next match stands at 3: the view
    of 3 goes out, then every update after it (also those that came while the view was awaited)."""

    async def main() -> list[int]:
        conn = _Conn()
        await _write(conn, range(1, 4))
        r = Resync(conn, gap_wait_s=5)
        await r.catch_up(M, 80)
        for v in live:
            await r.on_entry(_update(v))
        await r.on_entry(_sync(r, 3))
        for v in range(max(live, default=3) + 1, 8):
            await r.on_entry(_update(v))
        return _versions(conn)

    assert asyncio.run(main()) == [3, 4, 5, 6, 7]


def test_a_version_of_this_match_still_skips_what_the_client_has():
    """A version the match did reach: the updates after it, none before, none twice."""

    async def main() -> list[int]:
        conn = _Conn()
        await _write(conn, range(1, 7))
        r = Resync(conn, gap_wait_s=5)
        await r.catch_up(M, 4)
        for v in (5, 6, 7):  # 5 and 6 again (read live as well), then a new one
            await r.on_entry(_update(v))
        return _versions(conn)

    assert asyncio.run(main()) == [5, 6, 7]


@pytest.mark.parametrize("named", [True, False])
def test_a_resume_at_the_newest_update_of_its_named_match_sends_nothing_again(named):
    """The client says it has version 6 of this match, the stream's newest update: nothing goes
    out again (PROTOCOL.md: no update twice), only what comes after.  A version that names no
    match may be another match's: then the view is asked for, as before."""

    async def main() -> tuple[list[int], bool]:
        conn = _Conn()
        await _write(conn, range(1, 7))
        r = Resync(conn, gap_wait_s=5)
        await r.catch_up(M, 6, named=named)
        asked = M in r._awaiting
        if asked:
            await r.on_entry(_sync(r, 6))
        await r.on_entry(_update(7))
        return _versions(conn), asked

    sent, asked = asyncio.run(main())
    assert asked != named
    assert sent == ([7] if named else [6, 7])


def test_a_view_at_the_clients_version_sends_nothing_again_after_it():
    """The stream no longer holds the updates after the client's version 5; the view stands at 5:
    it goes out (the socket's own Sync), the updates up to 5 do not."""

    async def main() -> list[int]:
        conn = _Conn()
        r = Resync(conn, gap_wait_s=5)
        await r.catch_up(M, 5)
        await r.on_entry(_update(5))
        await r.on_entry(_sync(r, 5))
        await r.on_entry(_update(5))
        await r.on_entry(_update(6))
        return _versions(conn)

    assert asyncio.run(main()) == [5, 6]


def test_a_sync_refused_without_a_view_leaves_no_unchecked_version_behind():
    """The engine refused the view and gave none: the client's version was never checked, so
    updates go out from there (a duplicate at worst, never a loss)."""

    async def main() -> list[int]:
        conn = _Conn()
        r = Resync(conn, gap_wait_s=5)
        await r.catch_up(M, 80)
        entry = parse_entry(b"9-1", {b"kind": b"rejected", b"match": M.encode(),
                                     b"command_id": r._awaiting[M].encode(), b"code": b"unknown_match"})
        await r.on_entry(entry)
        await r.on_entry(_update(4))
        await r.on_entry(_update(5))
        return _versions(conn)

    assert asyncio.run(main()) == [4, 5]


def test_an_older_view_in_the_stream_does_not_overturn_a_version_the_match_reached():
    """The client has 18, the newest update; the engine does not answer the Sync, and the newest
    view in the stream is 16's: the version stands, and 19 goes out with its events."""

    async def main() -> list[tuple[int, int]]:
        conn = _Conn()
        await _write(conn, range(1, 19), views=(1, 16))
        r = Resync(conn, gap_wait_s=0.01)
        await r.catch_up(M, 18)
        await asyncio.sleep(0.1)  # the Sync's fallback: the stream's newest view
        await r.on_entry(_update(19))
        return [(m["version"], len(m["events"])) for m in conn.sent if m["kind"] == "update"]

    assert asyncio.run(main()) == [(19, 1)]


@pytest.mark.parametrize("held", [(), (3, 4)], ids=["nothing-held", "updates-held"])
def test_a_version_no_view_could_check_is_dropped_without_a_loss(held):
    """The client gives 80; no view comes (the engine does not answer, the stream holds none): the
    updates held meanwhile go out, then the later ones, and a redelivery is dropped again."""

    async def main() -> list[int]:
        conn = _Conn()
        r = Resync(conn, gap_wait_s=0.01)
        await r.catch_up(M, 80)
        for v in held:
            await r.on_entry(_update(v))
        await asyncio.sleep(0.1)  # the Sync's fallback finds no view
        for v in (*range(max(held, default=0) + 1, max(held, default=0) + 4), 2):
            await r.on_entry(_update(v))
        return _versions(conn)

    expected = {(): [1, 2, 3], (3, 4): [3, 4, 5, 6, 7]}[held]
    assert asyncio.run(main()) == expected


def test_a_sync_refused_without_a_view_sends_what_was_held_in_order():
    async def main() -> list[int]:
        conn = _Conn()
        r = Resync(conn, gap_wait_s=5)
        await r.catch_up(M, 80)
        for v in (4, 5):
            await r.on_entry(_update(v))
        entry = parse_entry(b"9-1", {b"kind": b"rejected", b"match": M.encode(),
                                     b"command_id": r._awaiting[M].encode(), b"code": b"unknown_match"})
        await r.on_entry(entry)
        await r.on_entry(_update(6))
        return _versions(conn)

    assert asyncio.run(main()) == [4, 5, 6]


class _Socket:
    """A freshly accepted socket as ``authenticate`` sees it: its query, then its first message."""

    def __init__(self, query: dict[str, str], first: dict[str, Any] | None = None):
        import json

        self.query_params, self._first = query, None if first is None else json.dumps(first)

    async def receive(self) -> dict[str, Any]:
        assert self._first is not None
        return {"type": "websocket.receive", "text": self._first}

    async def close(self, code: int = 1000, reason: str = "") -> None:
        raise AssertionError(f"closed {code} {reason}")


SECRET = b"s" * 32


@pytest.mark.parametrize(("query", "auth", "resume"), [
    ({"version": "7", "match": "t1-1"}, None, (7, "t1-1")),
    ({"version": "7"}, None, (7, None)),
    ({"version": "²"}, None, (None, None)),  # a digit to str.isdigit, not to int()
    ({"version": "9" * 40}, None, (None, None)),
    ({"match": "t1-1"}, {"version": 7}, (7, None)),  # the version and its match from one place
    ({"version": "3", "match": "t1-1"}, {}, (3, "t1-1")),
    ({}, {"version": 7, "match": "t1-2"}, (7, "t1-2")),
    ({}, {"version": 7, "match": ""}, (7, None)),
], ids=["query", "query-no-match", "not-ascii", "too-long", "auth-version-alone", "auth-without-version",
        "auth", "auth-empty-match"])
def test_a_resume_takes_its_version_and_match_from_one_place(query, auth, resume):
    from gateway.session import Resume, authenticate
    from gateway.tokens import mint

    class _Metrics:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"refused: {name}")

    hub = type("Hub", (), {"secret": SECRET, "metrics": _Metrics(), "token_policy": TokenPolicy()})()
    token = mint(SECRET, "ann")
    if auth is None:
        ws = _Socket({**query, "token": token})
    else:
        ws = _Socket(query, {"type": "Auth", "token": token, **auth})
    got = asyncio.run(authenticate(hub, ws))  # type: ignore[arg-type]
    assert got is not None and got[0].player == "ann" and got[1] == Resume(*resume)



async def _caught_up_at_1(gap_wait_s: float) -> tuple[_Conn, Resync]:
    """A socket whose client has version 1 of M (the stream holds only 1): the view asked for on
    connect answered at 1."""
    conn = _Conn()
    await _write(conn, range(1, 2))
    r = Resync(conn, gap_wait_s=gap_wait_s)
    await r.catch_up(M, 1)
    await r.on_entry(_sync(r, 1))
    return conn, r

def test_a_view_asked_for_while_a_gap_timer_runs_still_falls_back_to_the_stream():
    """A gap (3 before 2) starts the gap timer and fills at once; the client then asks for the
    view (``Sync``) and the engine does not answer.  The Sync's fallback still runs: the
    stream's newest view (5) goes out, then what comes after it (6)."""

    async def main() -> list[int]:
        conn, r = await _caught_up_at_1(gap_wait_s=0.05)
        await asyncio.sleep(0.2)  # that Sync's fallback is over
        await r.on_entry(_update(3))  # held: the gap timer runs
        await r.on_entry(_update(2))  # the gap fills: 2, then 3
        await r.request_view(M, "s1")  # the client's Sync, never answered
        await _write(conn, range(2, 6))
        await asyncio.sleep(0.5)
        await r.on_entry(_update(6))
        return _versions(conn)

    assert asyncio.run(main()) == [1, 2, 3, 5, 6]


def test_a_gap_while_an_answered_views_fallback_waits_is_closed_in_the_gap_wait():
    """The view asked for on connect is answered (1); 3 comes before 2, and 2 never comes.  The
    gap's own timer asks for the view, whose fallback (the engine does not answer) sends the
    stream's newest view (3): the fallback of the answered Sync does not stand in for it."""

    async def main() -> list[int]:
        conn, r = await _caught_up_at_1(gap_wait_s=0.05)
        await _write(conn, range(2, 4))
        await r.on_entry(_update(3))
        await asyncio.sleep(0.5)
        return _versions(conn)

    assert asyncio.run(main()) == [1, 3]


def test_a_socket_closed_stops_every_timer_of_its_resync():
    async def main() -> int:
        _conn, r = await _caught_up_at_1(gap_wait_s=5)  # its view's fallback still waits
        await r.on_entry(_update(3))  # a gap: its timer waits
        await r.request_view(M, "s1")
        timers = list(r._timers)
        assert len(timers) == 3
        r.cancel()
        await asyncio.gather(*timers, return_exceptions=True)
        return sum(not t.cancelled() for t in timers) + len(r._timers)

    assert asyncio.run(main()) == 0


def test_a_sync_that_could_not_be_sent_still_falls_back_to_the_stream():
    """The gap's timer asks for the view while Redis refuses the Sync's XADD: the match does not
    wait for an answer that cannot come; the fallback sends the stream's newest view (3)."""
    import redis.exceptions

    async def main() -> list[int]:
        conn, r = await _caught_up_at_1(gap_wait_s=0.05)
        await _write(conn, range(2, 4))
        xadd, fails = conn.hub.redis.xadd, [redis.exceptions.ConnectionError("away")]

        async def refused(*args: Any, **kwargs: Any) -> Any:
            if fails:
                raise fails.pop()
            return await xadd(*args, **kwargs)

        conn.hub.redis.xadd = refused  # type: ignore[method-assign]
        await r.on_entry(_update(3))  # 2 never comes
        await asyncio.sleep(0.5)
        return _versions(conn)

    assert asyncio.run(main()) == [1, 3]


def test_the_fallback_view_of_a_clients_own_sync_names_its_command_id():
    """The engine does not answer the client's ``Sync`` s1: the stream's newest view answers it,
    with s1 (the client stops waiting for it)."""

    async def main() -> list[tuple[int, str | None]]:
        conn, r = await _caught_up_at_1(gap_wait_s=0.02)
        await _write(conn, range(2, 4))
        await r.request_view(M, "s1")
        await asyncio.sleep(0.3)
        return [(m["version"], m["command_id"]) for m in conn.sent]

    assert asyncio.run(main())[-1] == (3, "s1")


def _answering(version: int, client_id: str) -> OutEntry:
    """The update at ``version`` that a command of ann's (``client_id``) made."""
    from gateway import channels

    e = _update(version)
    return OutEntry(e.id, e.kind, e.match, channels.engine_command_id("ann", client_id), version, body=e.body)


def test_a_command_whose_update_a_view_covered_is_answered_with_an_ack_once():
    """ann's Ready made version 4, and a resync view at 6 reached her before that update: she
    sent the Ready again (the same id) and waits.  The update is not sent (she has 6) but she is
    answered: an ack r1.  A second redelivery, and the redelivery of an update she did get with
    its id (r2), answer nothing again."""

    async def main() -> list[tuple[str, Any]]:
        conn = _Conn()
        r = Resync(conn, gap_wait_s=5)
        await r.catch_up(M, None)
        await r.on_entry(_sync(r, 6))
        await r.on_entry(_answering(4, "r1"))
        await r.on_entry(_answering(4, "r1"))
        await r.on_entry(_answering(7, "r2"))
        await r.on_entry(_answering(7, "r2"))
        return [(m["kind"], m.get("version", m["command_id"])) for m in conn.sent]

    assert asyncio.run(main()) == [("update", 6), ("ack", "r1"), ("update", 7)]


def test_a_held_update_a_view_covers_answers_its_command():
    """The update of ann's r1 (5) arrives while the view is awaited; the view comes at 6: the
    update is dropped, and r1 answered with an ack."""

    async def main() -> list[tuple[str, Any]]:
        conn = _Conn()
        r = Resync(conn, gap_wait_s=5)
        await r.catch_up(M, None)
        await r.on_entry(_answering(5, "r1"))  # held for the view
        await r.on_entry(_sync(r, 6))
        return [(m["kind"], m.get("version", m["command_id"])) for m in conn.sent]

    assert asyncio.run(main()) == [("update", 6), ("ack", "r1")]


class _Spectator(_Conn):
    """A spectator's socket reading ann's stream, watching ``t1-1``; it follows the table to
    ``t1-2`` at that match's first update, leaving ``t1-1`` as gateway/session.py ``follow``
    does (the table moved on)."""

    def __init__(self) -> None:
        super().__init__()
        self.match, self.source = "t1-1", "ann"
        self.resync: Resync | None = None

    @property
    def is_player(self) -> bool:
        return False

    async def follow(self, match: str) -> bool:
        if match != "t1-2" or self.resync is None:
            return False
        before, self.match = self.match, match
        await self.resync.left(before)
        return True


def _of(match: str, version: int, phase: str = "playing", view: bool = True) -> OutEntry:
    body: dict[str, Any] = {"events": [{"seq": version, "type": "CardsPlayed", "cards": [version]}]}
    if view:
        body["view"] = {"match_id": match, "version": version, "phase": phase, "seats": [], "hand": None}
    return OutEntry(f"{version}-{match[-1]}", "update", match, "", version, body=body)


@pytest.mark.parametrize("end_view", [True, False], ids=["the-end-with-its-view", "the-end-without-a-view"])
def test_a_spectator_that_follows_the_table_is_shown_the_end_of_the_match_behind_a_gap(end_view):
    """t1-1's update 16 never reached ann's stream (its publication was fenced out: 17 and 18
    were written first); 17 and 18, the finish, wait behind the gap.  t1-2's first update comes
    before the gap's wait ends and the spectator follows the table: t1-1's newest view in the
    stream goes out first, then what of t1-1 follows it, then t1-2.  Before, the held updates
    and the Sync's answer were dropped as no longer current: the spectator never saw t1-1 end."""

    async def main() -> list[tuple[str, int, str | None]]:
        conn = _Spectator()
        written = (_of("t1-1", 15), _of("t1-1", 17), _of("t1-1", 18, "finished", view=end_view))
        for e in written:
            await conn.hub.redis.xadd(keys.outbox_key("ann"), {
                "kind": "update", "match": e.match, "command_id": "", "version": str(e.version),
                "body": msgpack.packb(e.body)})
        r = conn.resync = Resync(conn, gap_wait_s=5)
        for e in written:
            await r.on_entry(e)
        await r.on_entry(_of("t1-2", 1, "seating"))
        r.cancel()
        return [(m["match"], m["version"], (m["view"] or {}).get("phase")) for m in conn.sent
                if m["kind"] == "update"]

    sent = asyncio.run(main())
    shown = [("t1-1", 15, "playing"), ("t1-1", 18, "finished")] if end_view else \
        [("t1-1", 15, "playing"), ("t1-1", 17, "playing"), ("t1-1", 18, None)]  # 17's view, then 18
    assert sent == shown + [("t1-2", 1, "seating")], sent


def test_a_player_moved_on_behind_a_gap_is_answered_for_the_command_the_view_covers():
    """ann played at t1-1 up to 15; 16 was fenced out, and 17 (her own play, r1) and 18, the
    finish, wait behind the gap when she is moved on to t1-2 (``left``).  The newest view, 18,
    goes out; 17 is not sent after it, but r1 is answered: an ack.  Before, ``left`` dropped 17
    and left r1 unanswered."""
    from gateway import channels

    async def main() -> list[tuple[str, Any]]:
        conn = _Conn()
        conn.match = "t1-1"
        mine = _of("t1-1", 17)
        mine = OutEntry(mine.id, mine.kind, mine.match, channels.engine_command_id("ann", "r1"), 17, body=mine.body)
        written = (_of("t1-1", 15), mine, _of("t1-1", 18, "finished"))
        for e in written:
            await conn.hub.redis.xadd(keys.outbox_key("ann"), {
                "kind": "update", "match": e.match, "command_id": e.command_id, "version": str(e.version),
                "body": msgpack.packb(e.body)})
        r = Resync(conn, gap_wait_s=5)
        for e in written:
            await r.on_entry(e)
        conn.match = "t1-2"
        await r.left("t1-1")
        r.cancel()
        return [(m["kind"], m.get("version", m.get("command_id"))) for m in conn.sent]

    assert asyncio.run(main()) == [("update", 15), ("update", 18), ("ack", "r1")]


def test_a_player_moved_on_before_any_view_gets_what_was_held_in_order():
    """ann's socket asked for t1-1's view (no version of it yet) and holds 5 to 7, the finish,
    for it; she is moved on to t1-2 before the view comes, and the stream has none of t1-1's
    updates left to show: 5, 6 and 7 go out in order, as they came."""

    async def main() -> list[tuple[str, Any]]:
        conn = _Conn()
        conn.match = "t1-1"
        r = Resync(conn, gap_wait_s=5)
        await r.catch_up("t1-1", None)
        for v in (5, 6, 7):
            await r.on_entry(_of("t1-1", v, "finished" if v == 7 else "playing"))
        sent_before = len(conn.sent)
        conn.match = "t1-2"
        await r.left("t1-1")
        r.cancel()
        return [(m["match"], m["version"]) for m in conn.sent[sent_before:]]

    assert asyncio.run(main()) == [("t1-1", 5), ("t1-1", 6), ("t1-1", 7)]
