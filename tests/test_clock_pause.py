"""Issue 35 §4: clocks that stop during outages.  A turn or ready clock does not run out
while the player could not have acted: their update reached them late (or not yet), or the
match's writes could not be confirmed.  The timer then appends ExtendClock instead of the
timeout: ClockExtended moves the deadline (the brief's too) and is published; the timeout
comes at the moved deadline.  The domain stays pure: the delay is the command's, recorded
in the event, and replay gives the same deadline."""

from __future__ import annotations

import random
from typing import Any

import fakeredis
import pytest
import redis

from engine.match.commands import ExtendClock, Play, Ready
from engine.match.decide import Context, decide_and_apply
from engine.match.errors import StaleCommand
from engine.match.events import ClockExtended, PlayerRemoved, TurnTimedOut
from engine.match.replay import replay
from engine.store import keys
from projections.views import brief
from tests.test_workers import T0, Match, cfg
from workers import runtime as rt_mod
from workers.clock import FakeClock
from workers.embedded import EmbeddedTimers

NOREPLICAS = redis.ResponseError("NOREPLICAS 0 of 1 replica(s) acknowledged {b1} within 2000 ms")


@pytest.fixture
def timers():
    clock = FakeClock(T0)
    with EmbeddedTimers("fakeredis", clock=clock, rng=random.Random(3), deal_on_ready=False,
                        publish="gateway") as t:
        t.runtime.clock_pause_min_ms = rt_mod.CLOCK_PAUSE_MIN_MS  # the system clock's setting
        yield t, clock


class Publications:
    """When each (player, version) update reached the player, for ``published_at`` (the real
    one reads the streams' entry ids, Redis's wall clock, which a test's fake clock is not:
    test_published_at_reads_the_first_entry_at_the_version checks it).  An update not in
    the table was published at once: at the time of the state given to :meth:`prompt`."""

    def __init__(self) -> None:
        self.at: dict[tuple[str, int], int | None] = {}
        self.default = 0

    def __setitem__(self, key: tuple[str, int], value: int | None) -> None:
        self.at[key] = value

    def prompt(self, state: Any) -> None:
        self.default = int(state.last_ts)

    def __call__(self, _client: Any, player: str, _match_id: str, version: int,
                 _since: int | None = None) -> int | None:
        return self.at.get((player, version), self.default)


@pytest.fixture
def published(monkeypatch) -> Publications:
    table = Publications()
    monkeypatch.setattr(rt_mod, "published_at", table)
    return table


def _on_turn(state) -> str:
    return state.seats[state.turn].player


# ---- the domain ------------------------------------------------------------------------------

def test_extend_clock_moves_the_turn_deadline_and_not_the_table(timers):
    t, _clock = timers
    m = Match(t, cfg(turn_seconds=15)).start()
    s = m.state()
    cmd = ExtendClock(command_id="x1", match_id="m1", version=s.version, by_ms=7_000, reason="unpublished")
    events, new = decide_and_apply(s, cmd, Context(now_ms=s.last_ts + 1))
    assert [type(e) for e in events] == [ClockExtended]
    assert (events[0].kind, events[0].by_ms, events[0].reason) == ("turn", 7_000, "unpublished")
    assert new.deadline().at_ms == s.deadline().at_ms + 7_000
    assert new.table_version == s.table_version  # a Play decided on the table before it stays valid
    assert replay(list(m.events()) + events).deadline() == new.deadline()  # recorded: replay agrees
    with pytest.raises(StaleCommand):  # set for another version: stale, like a timeout
        decide_and_apply(new, cmd, Context(now_ms=s.last_ts + 2))


def test_extend_clock_moves_the_ready_deadline(timers):
    t, _clock = timers
    m = Match(t, cfg(ready_seconds=20))
    m.seat_players(ready=("a",))
    s = m.state()
    assert s.deadline().kind == "ready"
    cmd = ExtendClock(command_id="x1", match_id="m1", version=s.version, by_ms=3_000, reason="unconfirmed")
    events, new = decide_and_apply(s, cmd, Context(now_ms=s.last_ts + 1))
    assert events[0].kind == "ready" and new.deadline().at_ms == s.deadline().at_ms + 3_000


# ---- the timers ------------------------------------------------------------------------------

def test_an_update_published_late_pauses_the_turn_clock_and_charges_no_timeout(timers, published):
    t, clock = timers
    m = Match(t, cfg(turn_seconds=15)).start()
    t.lose_pending_timers()
    s = m.state()
    d = s.deadline()
    published[(_on_turn(s), s.version)] = s.last_ts + 20_000  # reached the player 20 s late
    clock.set(d.at_ms)
    assert rt_mod.fire("m1", d.version, "turn", t.runtime) == "extended"
    after = m.state()
    [ext] = m.events(after=s.version)
    assert isinstance(ext, ClockExtended) and (ext.by_ms, ext.reason) == (20_000, "unpublished")
    assert after.deadline().at_ms == d.at_ms + 20_000
    assert brief(after)["deadline_ms"] == d.at_ms + 20_000  # the player sees the moved clock
    assert not any(isinstance(e, TurnTimedOut) for e in m.events())
    # the paused clock reached the players: the update the worker published carries it
    out = t.store.client.xrevrange(keys.outbox_key(_on_turn(s)), count=1)
    assert out and int(out[0][1][b"version"]) == after.version
    # at the moved deadline the player had the whole turn: the clock runs out as usual
    published.prompt(after)
    clock.set(after.deadline().at_ms)
    assert rt_mod.fire("m1", after.version, "turn", t.runtime) == "committed"
    assert isinstance(m.events(after=after.version)[0], TurnTimedOut)


def test_an_update_never_published_by_the_deadline_charges_no_timeout(timers, published):
    """The publication was delayed past the deadline (still not there when the clock ran out):
    the clock is moved to now + what was left, and the update with the paused clock goes out."""
    t, clock = timers
    m = Match(t, cfg(turn_seconds=15)).start()
    t.lose_pending_timers()
    s = m.state()
    d = s.deadline()
    published[(_on_turn(s), s.version)] = None
    clock.set(d.at_ms + 500)
    assert rt_mod.fire("m1", d.version, "turn", t.runtime) == "extended"
    [ext] = m.events(after=s.version)
    assert isinstance(ext, ClockExtended) and ext.by_ms == d.at_ms + 500 - s.last_ts
    assert m.state().deadline().at_ms == d.at_ms + ext.by_ms


def test_a_prompt_update_lets_the_clock_run_out(timers, published):
    t, clock = timers
    m = Match(t, cfg(turn_seconds=15)).start()
    t.lose_pending_timers()
    s = m.state()
    d = s.deadline()
    published[(_on_turn(s), s.version)] = s.last_ts + rt_mod.CLOCK_PAUSE_MIN_MS  # within the tolerance
    clock.set(d.at_ms)
    assert rt_mod.fire("m1", d.version, "turn", t.runtime) == "committed"
    assert isinstance(m.events(after=s.version)[0], TurnTimedOut)


def test_a_late_update_whose_moved_deadline_passed_too_lets_the_clock_run_out(timers, published):
    """Published 5 s late, but the timer fires 30 s after the deadline: the player had the
    whole turn after the update reached them."""
    t, clock = timers
    m = Match(t, cfg(turn_seconds=15)).start()
    t.lose_pending_timers()
    s = m.state()
    d = s.deadline()
    published[(_on_turn(s), s.version)] = s.last_ts + 5_000
    clock.set(d.at_ms + 30_000)
    assert rt_mod.fire("m1", d.version, "turn", t.runtime) == "committed"


def test_the_ready_clock_pauses_for_an_unready_player_told_late(timers, published):
    t, clock = timers
    m = Match(t, cfg(ready_seconds=20))
    m.seat_players(ready=("a",))
    t.lose_pending_timers()
    s = m.state()
    d = s.deadline()
    published[("b", s.table_version)] = s.last_ts + 9_000  # b, not ready yet, saw their seat 9 s late
    clock.set(d.at_ms)
    assert rt_mod.fire("m1", d.version, "ready", t.runtime) == "extended"
    assert m.state().deadline().at_ms == d.at_ms + 9_000
    assert not any(isinstance(e, PlayerRemoved) for e in m.events())
    m.ok(Ready, player="b")  # b acts within the moved clock: both ready, nobody removed
    assert all(seat is not None and seat.ready for seat in m.state().seats)


class _Acks:
    """A store's replica waiter whose node cannot confirm writes while ``down``."""

    def __init__(self) -> None:
        self.down = False
        self.n = 1

    def confirm(self, _keys: Any) -> None:
        if self.down:
            raise NOREPLICAS


def test_writes_that_cannot_be_confirmed_charge_no_timeout_and_give_a_fresh_clock(timers, published):
    """The match's master cannot confirm writes (NOREPLICAS) when the turn clock runs out: no
    timeout is written; once it can again, the player gets a fresh turn clock (their command
    sent during the outage is still pending and comes first)."""
    t, clock = timers
    m = Match(t, cfg(turn_seconds=15)).start()
    t.lose_pending_timers()
    acks = t.store.replica_acks = _Acks()
    s = m.state()
    d = s.deadline()
    published.prompt(s)
    acks.down = True
    for k in range(3):  # the deadline is tried again and again during the outage
        clock.set(d.at_ms + 1_000 * k)
        with pytest.raises(redis.ResponseError, match="NOREPLICAS"):
            rt_mod.fire("m1", d.version, "turn", t.runtime)
    assert m.state().version == s.version  # nothing written
    acks.down = False
    clock.set(d.at_ms + 40_000)  # the outage is over
    assert rt_mod.fire("m1", d.version, "turn", t.runtime) == "extended"
    [ext] = m.events(after=s.version)
    assert isinstance(ext, ClockExtended) and ext.reason == "unconfirmed"
    assert m.state().deadline().at_ms == d.at_ms + 40_000 + 15_000  # a fresh turn from now
    # the player's move, sent during the outage, is decided now on the table it saw
    state = m.state()
    i = state.turn
    card = sorted(state.seats[i].hand)[0]
    out = m.cmd(Play, player=state.seats[i].player, cards=[card], expected_version=s.version)
    assert out.rejection is None, out.rejection
    assert not any(isinstance(e, TurnTimedOut) for e in m.events())


def test_timer_commands_are_refused_on_the_command_channels():
    from engine.service.channels import OPS, PLAYER

    cmd = ExtendClock(command_id="c", match_id="m", version=3, by_ms=5, reason="unpublished")
    assert PLAYER.refusal(cmd) is not None and OPS.refusal(cmd) is not None


# ---- reading the publication time ----------------------------------------------------------

def test_published_at_reads_the_first_entry_at_the_version():
    client = fakeredis.FakeRedis()
    out = keys.outbox_key("a")
    client.xadd(out, {"kind": "update", "match": "m1", "version": 4}, id="1000-0")
    client.xadd(out, {"kind": "update", "match": "m1", "version": 6}, id="2000-0")
    client.xadd(out, {"kind": "update", "match": "other", "version": 9}, id="2500-0")
    client.xadd(out, {"kind": "update", "match": "m1", "version": 6}, id="3000-0")  # a re-publication
    client.xadd(out, {"kind": "update", "match": "m1", "version": 7}, id="4000-0")
    assert rt_mod.published_at(client, "a", "m1", 6) == 2000
    assert rt_mod.published_at(client, "a", "m1", 7) == 4000
    assert rt_mod.published_at(client, "a", "m1", 8) is None
    assert rt_mod.published_at(client, "b", "m1", 1) is None
    assert rt_mod.published_at(client, "a", "other", 9) == 2500
    assert rt_mod.published_at(client, "a", "m1", 6, since_ms=4500) == 3000  # read from 2.5 s before


def _answers(client, player: str, match: str, version: int, n: int, from_ms: int) -> None:
    """``n`` answers to the player's own Syncs: entries of the match at ``version``, 10 ms apart."""
    for i in range(n):
        client.xadd(keys.outbox_key(player), {"kind": "sync", "match": match, "version": version},
                    id=f"{from_ms + 10 * i}-0", maxlen=200, approximate=False)


@pytest.fixture(params=["fakeredis", pytest.param("redis", marks=pytest.mark.redis)])
def streams(request):
    if request.param == "fakeredis":
        return fakeredis.FakeRedis()
    return request.getfixturevalue("real_redis")


def test_the_players_own_syncs_after_the_update_never_make_it_late(streams):
    """The player on turn floods their own stream with Sync answers of the same version: read
    newest first, the update fell out of the entries read and the first answer read stood for
    it, a pause of the player's own making (about 3× their clock; the security review of
    2026-12-06).  Read from the version's time, the update is the first entry at it."""
    client = streams
    client.xadd(keys.outbox_key("a"), {"kind": "update", "match": "m1", "version": 5}, id="100000-0")
    client.xadd(keys.outbox_key("a"), {"kind": "update", "match": "m1", "version": 6}, id="100020-0")
    _answers(client, "a", "m1", 6, 150, from_ms=101_000)
    assert rt_mod.published_at(client, "a", "m1", 6, since_ms=100_010) == 100_020
    assert rt_mod.published_at(client, "a", "m1", 7, since_ms=100_010) is None  # read to the end, by pages


def test_a_stream_turned_over_since_the_version_counts_as_published_in_time(streams):
    """More than the stream's cap written since the version (a flood of Sync answers or
    views) trims the update: when it came is not known, so it came in time (no pause to buy).
    Never written, on a stream that kept all it had: not published (None)."""
    client = streams
    client.xadd(keys.outbox_key("a"), {"kind": "update", "match": "m1", "version": 6}, id="100020-0")
    _answers(client, "a", "m1", 6, 250, from_ms=101_000)
    assert client.xlen(keys.outbox_key("a")) == 200
    assert rt_mod.published_at(client, "a", "m1", 6, since_ms=100_010) == 100_010
    assert rt_mod.published_at(client, "a", "m1", 7, since_ms=100_010) == 100_010
    client.xadd(keys.outbox_key("b"), {"kind": "update", "match": "m1", "version": 5}, id="100000-0")
    assert rt_mod.published_at(client, "b", "m1", 6, since_ms=100_010) is None


def test_a_clock_pauses_once_in_a_row_when_nothing_reaches_the_player(timers, published):
    """Publishing is broken, not late: the update carrying the paused clock does not reach the
    player either.  The clock pauses once, then runs out: no match waits for ever."""
    t, clock = timers
    m = Match(t, cfg(turn_seconds=15)).start()
    t.lose_pending_timers()
    s = m.state()
    player = _on_turn(s)
    published[(player, s.version)] = None
    published[(player, s.version + 1)] = None
    clock.set(s.deadline().at_ms)
    assert rt_mod.fire("m1", s.version, "turn", t.runtime) == "extended"
    after = m.state()
    clock.set(after.deadline().at_ms)
    assert rt_mod.fire("m1", after.version, "turn", t.runtime) == "committed"
    assert isinstance(m.events(after=after.version)[0], TurnTimedOut)


# ---- the gateway's delivery receipts -----------------------------------------------------------

def _receipt(t, player: str, state: str, at_ms: int, version: int, match: str = "m1") -> None:
    from engine.service.receipts import encode

    t.store.client.set(keys.receipt_key(player), encode(state, at_ms, version, match))


def test_an_update_no_gateway_delivered_by_the_deadline_charges_no_timeout(timers, published):
    """The update reached the player's stream at once, but the gateway holding their socket died:
    their receipt still names the version before.  The clock pauses (``undelivered``) until now +
    what was left, and once the new gateway hands the update over, the player has a whole turn
    (the pauses in a row within the room's reconnect grace)."""
    t, clock = timers
    m = Match(t, cfg(turn_seconds=5, reconnect_grace_seconds=10)).start()
    t.lose_pending_timers()
    s = m.state()
    player = _on_turn(s)
    published.prompt(s)  # in the player's stream at once
    _receipt(t, player, "open", s.last_ts - 3_000, s.version - 1)  # the gateway's last word
    clock.set(s.deadline().at_ms + 200)
    assert rt_mod.fire("m1", s.version, "turn", t.runtime) == "extended"
    [ext] = m.events(after=s.version)
    assert isinstance(ext, ClockExtended) and (ext.reason, ext.by_ms) == ("undelivered", 5_200)
    after = m.state()
    assert brief(after)["deadline_ms"] == s.deadline().at_ms + 5_200  # the player sees the moved clock
    # the new gateway hands the player both updates 4 s after the pause: a whole turn from then
    _receipt(t, player, "open", ext.ts + 4_000, after.version)
    published.prompt(after)
    clock.set(after.deadline().at_ms)
    assert rt_mod.fire("m1", after.version, "turn", t.runtime) == "extended"
    [again] = m.events(after=after.version)
    assert (again.reason, again.by_ms) == ("undelivered", 4_000)
    final = m.state()
    _receipt(t, player, "open", again.ts + 10, final.version)  # handed over at once
    published.prompt(final)
    clock.set(final.deadline().at_ms)
    assert rt_mod.fire("m1", final.version, "turn", t.runtime) == "committed"
    assert isinstance(m.events(after=final.version)[0], TurnTimedOut)


def test_an_update_delivered_late_pauses_by_its_lateness_and_a_prompt_one_does_not(timers, published):
    t, clock = timers
    m = Match(t, cfg(turn_seconds=15)).start()
    t.lose_pending_timers()
    s = m.state()
    player = _on_turn(s)
    published.prompt(s)
    _receipt(t, player, "open", s.last_ts + rt_mod.CLOCK_PAUSE_MIN_MS, s.version)  # within the tolerance
    clock.set(s.deadline().at_ms)
    assert rt_mod.fire("m1", s.version, "turn", t.runtime) == "committed"

    m2 = Match(t, cfg(turn_seconds=15), mid="m2").start()
    t.lose_pending_timers()
    s2 = m2.state()
    player2 = _on_turn(s2)
    published.prompt(s2)
    _receipt(t, player2, "open", s2.last_ts + 6_000, s2.version, "m2")  # its gateway restarted: 6 s late
    clock.set(s2.deadline().at_ms)
    assert rt_mod.fire("m2", s2.version, "turn", t.runtime) == "extended"
    [ext] = m2.events(after=s2.version)
    assert (ext.reason, ext.by_ms) == ("undelivered", 6_000)
    assert m2.state().deadline().at_ms == s2.last_ts + 6_000 + 15_000  # a whole turn from the delivery


@pytest.mark.parametrize("why", ["closed", "no receipt"])
def test_a_player_who_left_or_reads_no_gateway_is_charged_as_before(timers, published, why):
    """The player's own socket closed on a live gateway (``closed``), or they read their stream
    themselves (no receipt): the update was published at once, the clock runs out as usual."""
    t, clock = timers
    m = Match(t, cfg(turn_seconds=15)).start()
    s = m.state()
    player = _on_turn(s)
    if why == "closed":
        _receipt(t, player, "closed", s.last_ts + 100, 0)
    t.lose_pending_timers()
    s = m.state()
    published.prompt(s)
    d = s.deadline()
    assert d.kind == "turn"
    clock.set(d.at_ms)
    assert rt_mod.fire("m1", d.version, "turn", t.runtime) == "committed"
    assert not any(isinstance(e, ClockExtended) for e in m.events())


def test_the_ready_clock_pauses_while_no_gateway_delivers_the_table(timers, published):
    t, clock = timers
    m = Match(t, cfg(ready_seconds=20))
    m.seat_players(ready=("a",))
    t.lose_pending_timers()
    s = m.state()
    published.prompt(s)
    _receipt(t, "b", "open", s.last_ts - 60_000, 9, "the-match-before")
    clock.set(s.deadline().at_ms)
    assert rt_mod.fire("m1", s.version, "ready", t.runtime) == "extended"
    [ext] = m.events(after=s.version)
    assert (ext.kind, ext.reason) == ("ready", "undelivered")
    assert not any(isinstance(e, PlayerRemoved) for e in m.events())


def test_the_ready_clock_counts_from_the_seat_through_the_other_players_late_ready(timers, published):
    """Both seated, no gateway can hand b the table, and a's Ready is decided only after b's
    ready deadline (an outage held it): the clock b was never shown pauses from its start,
    not from a's Ready, and b is not removed."""
    t, clock = timers
    m = Match(t, cfg(ready_seconds=20))
    m.seat_players(ready=())
    seated = m.state()
    published[("b", seated.table_version)] = seated.last_ts  # in b's stream at once
    _receipt(t, "b", "open", seated.last_ts - 60_000, 9, "the-match-before")
    clock.set(seated.deadline().at_ms + 5_000)
    m.ok(Ready, player="a")
    t.lose_pending_timers()
    s = m.state()
    assert s.deadline().at_ms == seated.deadline().at_ms  # the ready clock ran on
    assert rt_mod.fire("m1", s.version, "ready", t.runtime) == "extended"
    [ext] = m.events(after=s.version)
    assert (ext.kind, ext.reason, ext.by_ms) == ("ready", "undelivered", clock() - seated.last_ts)
    assert not any(isinstance(e, PlayerRemoved) for e in m.events())


def test_the_other_players_ready_buys_no_pause(timers, published):
    """b was handed the table and then a's Ready before the deadline: b saw their seat in
    time, so a's later update moves nothing and the clock runs out."""
    t, clock = timers
    m = Match(t, cfg(ready_seconds=20))
    m.seat_players(ready=())
    seated = m.state()
    published[("b", seated.table_version)] = seated.last_ts
    clock.set(seated.last_ts + 9_000)
    m.ok(Ready, player="a")
    s = m.state()
    published.prompt(s)
    _receipt(t, "b", "open", s.last_ts + 50, s.version)  # a's Ready handed to b at once
    t.lose_pending_timers()
    clock.set(s.deadline().at_ms)
    assert rt_mod.fire("m1", s.version, "ready", t.runtime) == "committed"
    assert not any(isinstance(e, ClockExtended) for e in m.events())
    assert any(isinstance(e, PlayerRemoved) and e.player == "b" for e in m.events())


@pytest.mark.parametrize("receipt", ["open", "closed"], ids=["their-gateway-died", "they-closed-their-socket"])
def test_the_ready_clock_of_players_away_since_the_seat_pauses_only_for_a_dead_gateway(timers, published, receipt):
    """Both seated while the gateway holding their sockets was dead (CI's nemesis, kill_process:
    the table's next match created 4 s into a 14.6 s outage); the room's reconnect grace ran out
    before the ready deadline, so the engine knew both disconnected when the clock ran out.
    Their receipts still name the match before on the dead gateway: the clock pauses
    (``undelivered``) and nobody is removed.  A player who closed their own socket on a live
    gateway (``closed``) is charged as before."""
    from engine.match.commands import Disconnect

    t, clock = timers
    m = Match(t, cfg(ready_seconds=10, reconnect_grace_seconds=10))
    m.seat_players(ready=())
    seated = m.state()
    for p in ("a", "b"):
        published[(p, seated.table_version)] = seated.last_ts  # in their streams at once
        _receipt(t, p, receipt, seated.last_ts - 4_000, 9, "the-match-before")
    clock.set(seated.last_ts + 9_600)
    m.ok(Disconnect, player="a")
    m.ok(Disconnect, player="b")
    t.lose_pending_timers()
    s = m.state()
    assert not any(seat.connected for seat in s.seats)
    clock.set(s.deadline().at_ms + 100)
    if receipt == "closed":
        assert rt_mod.fire("m1", s.version, "ready", t.runtime) == "committed"
        assert {e.player for e in m.events() if isinstance(e, PlayerRemoved)} == {"a", "b"}
        return
    assert rt_mod.fire("m1", s.version, "ready", t.runtime) == "extended"
    [ext] = m.events(after=s.version)
    assert (ext.kind, ext.reason, ext.by_ms) == ("ready", "undelivered", clock() - seated.last_ts)
    assert not any(isinstance(e, PlayerRemoved) for e in m.events())


@pytest.mark.parametrize("changes, now, expected", [
    ([], {"a"}, {"a"}),                                      # no change since: as now
    ([("off", "b", 4)], {"a"}, {"a", "b"}),                  # away since the start
    ([("off", "b", 3)], {"a"}, {"a"}),                       # away at the start itself
    ([("on", "b", 4)], {"a", "b"}, {"a"}),                   # back since: away at the start
    ([("on", "b", 4), ("off", "b", 5)], {"a"}, {"a"}),       # away at the start, back, away again
    ([("off", "b", 4), ("on", "b", 5)], {"a", "b"}, {"a", "b"}),
], ids=["none", "away-since", "away-at-start", "back-since", "back-then-away", "away-then-back"])
def test_who_was_connected_when_the_clock_started(changes, now, expected):
    from engine.match.events import PlayerDisconnected, PlayerReconnected

    kinds = {"off": PlayerDisconnected, "on": PlayerReconnected}
    events = [kinds[k](match_id="m1", seq=seq, ts=seq, command_id=f"c{seq}", player=p) for k, p, seq in changes]
    assert rt_mod.connected_at_start(events, 3, now) == expected


def _fire_until_charged(t, m, clock, published, before=None) -> int:
    """Publish each turn's update (``before(state)`` first, if given), let its clock run out
    until a timeout is charged (at most 10 rounds); the milliseconds paused on the way."""
    paused = 0
    for _ in range(10):
        s = m.state()
        published.prompt(s)
        if before is not None:
            before(s)
        clock.set(s.deadline().at_ms)
        result = rt_mod.fire("m1", s.version, "turn", t.runtime)
        if result == "committed":
            return paused
        assert result == "extended"
        paused += m.events(after=s.version)[0].by_ms
    raise AssertionError(f"no timeout charged after 10 pauses ({paused} ms)")


def test_pauses_in_a_row_stop_after_the_reconnect_grace(timers, published):
    """The player's gateway is gone for good (nothing is ever delivered): the clock pauses
    again and again for at most the room's reconnect grace, then it runs out."""
    t, clock = timers
    m = Match(t, cfg(turn_seconds=5, reconnect_grace_seconds=12)).start()
    t.lose_pending_timers()
    player = _on_turn(m.state())
    _receipt(t, player, "open", 0, 0, "the-match-before")
    paused = _fire_until_charged(t, m, clock, published)
    assert 12_000 <= paused < 12_000 + 5_000 + 1, paused
    assert rt_mod.paused_in_a_row(t.store, "m1", m.state().version) == 0  # the timeout ended the run


def test_receipt_format_doctests():
    import doctest

    from engine.service import receipts

    assert doctest.testmod(receipts).failed == 0


def test_a_receipt_the_worker_may_not_read_leaves_the_publication_rule(timers, published, monkeypatch):
    """An ACL from before receipts (NOPERM on ``sk:seen:*``): the clock runs on the publication
    rule alone, it never stops the timers."""
    t, clock = timers
    m = Match(t, cfg(turn_seconds=15)).start()
    t.lose_pending_timers()
    s = m.state()
    published.prompt(s)
    real_get = t.store.client.get

    def get(key):
        if b"seen" in (key if isinstance(key, bytes) else key.encode()):
            raise redis.exceptions.NoPermissionError("NOPERM this user has no permissions to access one of the keys")
        return real_get(key)

    monkeypatch.setattr(t.store.client, "get", get)
    clock.set(s.deadline().at_ms)
    assert rt_mod.fire("m1", s.version, "turn", t.runtime) == "committed"


# ---- the client's acknowledgement (Seen) against a gateway that died -------------------------

def _acked_receipt(t, player: str, at_ms: int, version: int, acked: int | None, gateway: str = "gw1",
                   state: str = "open", match: str = "m1") -> None:
    from engine.service.receipts import encode

    t.store.client.set(keys.receipt_key(player), encode(state, at_ms, version, match, acked,
                                                        gateway if acked is not None else None))


#: (case, the receipt's acknowledged version relative to the deadline's, its state, the handing
#: gateway's beat relative to the deadline (None: none), what the timer does)
ACK_RULE = [
    ("no acknowledgements, gateway gone: as before", None, "open", None, "committed"),
    ("acknowledged, gateway gone: the client read it", 0, "open", None, "committed"),
    ("acknowledged a later version, gateway gone", 1, "open", None, "committed"),
    ("not acknowledged, gateway beating: a quiet client is charged", -1, "open", -200, "committed"),
    ("not acknowledged, gateway gone (killed, restarted)", -1, "open", None, "extended"),
    ("not acknowledged, gateway's beat stale", -1, "open", -3_000, "extended"),
    ("not acknowledged, gateway shut down (beat 0)", -1, "open", "zero", "extended"),
    ("never acknowledged on this socket yet (acked 0), gateway gone", "zero", "open", None, "extended"),
    ("the player's own socket closed: the grace's business", -1, "closed", None, "committed"),
]


@pytest.mark.parametrize("case,acked,state,beat,expected", ACK_RULE, ids=[c[0] for c in ACK_RULE])
def test_an_update_handed_over_and_never_acknowledged_by_a_dead_gateway_pauses(timers, published, case, acked,
                                                                                state, beat, expected):
    """Issue 35 §4: a receipt says the update was handed to the socket, the client's ``Seen``
    that it was read.  Handed over promptly (within the tolerance), not acknowledged, by a gateway
    whose liveness beat stopped: undelivered, the clock pauses; every other case runs out."""
    t, clock = timers
    m = Match(t, cfg(turn_seconds=15)).start()
    t.lose_pending_timers()
    s = m.state()
    player = _on_turn(s)
    published.prompt(s)
    ack = None if acked is None else (0 if acked == "zero" else s.version + acked)
    _acked_receipt(t, player, s.last_ts + 10, s.version, ack, state=state)
    deadline = s.deadline().at_ms
    if beat is not None:
        t.store.client.set(keys.gateway_beat_key("gw1"), "0" if beat == "zero" else str(deadline + beat))
    clock.set(deadline)
    assert rt_mod.fire("m1", s.version, "turn", t.runtime) == expected
    if expected == "extended":
        [ext] = m.events(after=s.version)
        assert isinstance(ext, ClockExtended) and (ext.reason, ext.by_ms) == ("undelivered", deadline - s.last_ts)
    else:
        assert isinstance(m.events(after=s.version)[0], TurnTimedOut)


def test_a_quiet_client_whose_gateway_died_pauses_at_most_the_reconnect_grace(timers, published):
    """The acknowledgement cannot pause a clock for ever: a socket that acknowledged once and then
    kept quiet, its gateway gone, pauses for at most the room's reconnect grace, then is charged."""
    t, clock = timers
    m = Match(t, cfg(turn_seconds=5, reconnect_grace_seconds=12)).start()
    t.lose_pending_timers()
    player = _on_turn(m.state())
    paused = _fire_until_charged(  # each update handed to the socket, never read
        t, m, clock, published, before=lambda s: _acked_receipt(t, player, s.last_ts + 10, s.version, s.version - 1))
    assert 12_000 <= paused < 12_000 + 5_000 + 1, paused


RECEIPT_READS = [
    ("open|5|3|m", ("open", 5, 3, "m", None, None)),
    ("open+|5|3|2|gw|m|x", ("open", 5, 3, "m|x", 2, "gw")),
    ("closed+|5|3|2|gw|m", ("closed", 5, 3, "m", 2, "gw")),
    ("open+|5|3|two|gw|m", None),
    ("open+|5|3|m", None),
    ("shut|5|3|m", None),
]


@pytest.mark.parametrize("raw,expected", RECEIPT_READS)
def test_receipts_read_back_with_and_without_the_acknowledgement(raw, expected):
    from engine.service.receipts import read

    got = read(raw.encode())
    assert (None if got is None else tuple(got)) == expected
