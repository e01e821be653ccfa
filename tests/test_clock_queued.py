"""A player's command in the inbox in time is not beaten by the timer (R-13.1, R-13.2; issue 35
§4, docs/WORKERS.md "Clocks that stop during outages").

The timers run TurnTimeout / ReadyTimeout straight through the service, while a player's Play,
Pass or Ready waits in the bucket's inbox ``sk:{b<N>}:inbox`` for the command service (serve) to
take it.  While serve is down, cut off, or handing the bucket over, a command added there before
the deadline is not handled yet: the clock pauses (``unhandled``) instead of charging the player,
and the command is decided when serve takes it.  A command handled already (refused), one added
after the deadline, or another player's does not pause the clock."""

from __future__ import annotations

import random

import pytest

from engine.match.commands import Pass, Play, Ready, encode_command
from engine.match.events import ClockExtended, PlayerRemoved, TurnTimedOut
from engine.service.channels import PLAYER, ChannelService
from engine.service.inbox import InboxConsumer
from engine.store import keys
from tests.test_clock_pause import Publications
from tests.test_workers import T0, Match, cfg
from workers import runtime as rt_mod
from workers.clock import FakeClock
from workers.embedded import EmbeddedTimers


@pytest.fixture
def timers(monkeypatch):
    clock = FakeClock(T0)
    with EmbeddedTimers("fakeredis", clock=clock, rng=random.Random(3), deal_on_ready=False,
                        publish="gateway") as t:
        t.runtime.clock_pause_min_ms = rt_mod.CLOCK_PAUSE_MIN_MS  # the system clock's setting
        table = Publications()  # every update reached its player at once
        monkeypatch.setattr(rt_mod, "published_at", table)
        yield t, clock, table


def _serve(t) -> InboxConsumer:
    """The command service of the match's bucket: its group exists; it runs only when told."""
    return InboxConsumer(t.store.client, ChannelService(t.service, PLAYER), "s1",
                         stream=keys.inbox_key(keys.bucket_of("m1")))


def _queue(t, command, at_ms: int) -> str:
    """XADD ``command`` to its bucket's inbox at ``at_ms`` (the entry id is when it arrived)."""
    return t.store.client.xadd(keys.inbox_key(keys.bucket_of(command.match_id)),
                               {"c": encode_command(command)}, id=f"{at_ms}-0").decode()


def test_a_play_in_the_inbox_before_the_deadline_is_not_beaten_by_the_timeout(timers):
    t, clock, published = timers
    m = Match(t, cfg(turn_seconds=5, reconnect_grace_seconds=10)).start()
    t.lose_pending_timers()
    serve = _serve(t)  # then cut off: it takes nothing
    s = m.state()
    published.prompt(s)
    d = s.deadline()
    player = s.seats[s.turn].player
    card = s.seats[s.turn].hand[0]
    _queue(t, Play(command_id="p1", match_id="m1", player=player, cards=(card,), expected_version=s.version),
           d.at_ms - 2_000)
    clock.set(d.at_ms + 100)
    assert rt_mod.fire("m1", d.version, "turn", t.runtime) == "extended"
    [ext] = m.events(after=s.version)
    assert isinstance(ext, ClockExtended) and ext.reason == "unhandled"
    assert ext.by_ms == d.at_ms + 100 + 5_000 - d.at_ms  # a whole turn from now
    # serve is back: the player's Play is decided, on the table it was decided on
    assert serve.run_once(block_ms=None) == 1
    after = m.events(after=ext.seq)
    assert [e.type for e in after][:1] == ["CardsPlayed"] and after[0].command_id == "p1"
    assert not any(isinstance(e, TurnTimedOut) for e in m.events())


def test_a_pass_queued_in_time_pauses_the_clock_once_more_while_serve_stays_away(timers):
    """The pauses in a row for a command not taken stop after the room's reconnect grace: a
    match whose serve never comes back still ends on its clocks."""
    t, clock, published = timers
    m = Match(t, cfg(turn_seconds=5, reconnect_grace_seconds=10)).start()
    t.lose_pending_timers()
    _serve(t)
    first = m.state()
    card = first.seats[first.turn].hand[0]
    m.ok(Play, player=first.seats[first.turn].player, cards=(card,), expected_version=first.version)
    t.lose_pending_timers()
    s = m.state()
    player = s.seats[s.turn].player
    _queue(t, Pass(command_id="p2", match_id="m1", player=player, expected_version=s.version),
           s.deadline().at_ms - 1)
    reasons = []
    for _ in range(5):
        now = m.state()
        published.prompt(now)
        clock.set(now.deadline().at_ms)
        result = rt_mod.fire("m1", now.version, "turn", t.runtime)
        reasons.append(result)
        if result == "committed":
            break
    assert reasons == ["extended", "extended", "committed"]  # 5 s + 5 s: the 10 s grace


@pytest.mark.parametrize("case", ["refused_before", "after_deadline", "other_player", "other_match"])
def test_a_command_that_cannot_act_in_time_does_not_pause_the_clock(timers, case):
    t, clock, published = timers
    m = Match(t, cfg(turn_seconds=5)).start()
    t.lose_pending_timers()
    serve = _serve(t)
    s = m.state()
    published.prompt(s)
    d = s.deadline()
    seat = s.seats[s.turn]
    other = next(x.player for x in s.seats if x is not None and x.player != seat.player)
    play = dict(command_id="p1", match_id="m1", player=seat.player, cards=(seat.hand[0],),
                expected_version=s.version)
    if case == "refused_before":  # taken and refused in time (a pass on a lead): nothing is left to wait for
        _queue(t, Pass(command_id="p1", match_id="m1", player=seat.player, expected_version=s.version),
               d.at_ms - 2_000)
        assert serve.run_once(block_ms=None) == 1
    elif case == "after_deadline":
        _queue(t, Play(**play), d.at_ms + 1)
    elif case == "other_player":
        _queue(t, Play(**{**play, "player": other}), d.at_ms - 2_000)
    else:
        _queue(t, Play(**{**play, "match_id": "m2"}), d.at_ms - 2_000)
    clock.set(d.at_ms + 100)
    assert rt_mod.fire("m1", d.version, "turn", t.runtime) == "committed"
    assert isinstance(m.events(after=s.version)[0], TurnTimedOut)


def test_a_ready_in_the_inbox_before_the_ready_deadline_is_not_beaten_by_the_ready_timeout(timers):
    t, clock, published = timers
    m = Match(t, cfg(ready_seconds=10))
    m.seat_players(ready=("a",))
    t.lose_pending_timers()
    serve = _serve(t)
    s = m.state()
    published.prompt(s)
    d = s.deadline()
    assert d.kind == "ready"
    _queue(t, Ready(command_id="r1", match_id="m1", player="b"), d.at_ms - 500)
    clock.set(d.at_ms)
    assert rt_mod.fire("m1", d.version, "ready", t.runtime) == "extended"
    assert serve.run_once(block_ms=None) == 1
    assert m.state().seats[1].ready
    assert not any(isinstance(e, PlayerRemoved) for e in m.events())


@pytest.mark.parametrize("taken", [False, True], ids=["waiting", "read_not_acknowledged"])
def test_a_play_behind_a_long_backlog_still_pauses_the_clock(timers, taken):
    """The inbox is read page by page: a Play behind more than a page of other commands (600 of
    the other player's, added earlier) is found, whether serve never read them or read them and
    died before acknowledging."""
    t, clock, published = timers
    m = Match(t, cfg(turn_seconds=5)).start()
    t.lose_pending_timers()
    _serve(t)
    s = m.state()
    published.prompt(s)
    d = s.deadline()
    seat = s.seats[s.turn]
    other = next(x.player for x in s.seats if x is not None and x.player != seat.player)
    for i in range(600):
        _queue(t, Pass(command_id=f"o{i}", match_id="m1", player=other, expected_version=s.version),
               d.at_ms - 3_000 + i)
    _queue(t, Play(command_id="p1", match_id="m1", player=seat.player, cards=(seat.hand[0],),
                   expected_version=s.version), d.at_ms - 1_000)
    if taken:  # serve read every entry, then died
        inbox = keys.inbox_key(keys.bucket_of("m1"))
        assert len(t.store.client.xreadgroup(keys.SERVICE_GROUP, "s1", {inbox: ">"})[0][1]) == 601
    clock.set(d.at_ms + 100)
    assert rt_mod.fire("m1", d.version, "turn", t.runtime) == "extended"
    assert m.events(after=s.version)[0].reason == "unhandled"


@pytest.mark.parametrize("backlog, outcome", [(49, "committed"), (50, "extended")])
def test_a_backlog_as_long_as_the_scan_limit_counts_as_serve_behind(timers, monkeypatch, backlog, outcome):
    """As many unhandled entries by the deadline as the timers read (50 here): serve is that far
    behind, and the clock pauses rather than charge a player whose command may be past them;
    one fewer, none of them the player's, and the timeout is charged."""
    monkeypatch.setattr(rt_mod, "_INBOX_PAGE", 20)
    monkeypatch.setattr(rt_mod, "_INBOX_SCAN_LIMIT", 50)
    t, clock, published = timers
    m = Match(t, cfg(turn_seconds=5)).start()
    t.lose_pending_timers()
    _serve(t)
    s = m.state()
    published.prompt(s)
    d = s.deadline()
    other = next(x.player for x in s.seats if x is not None and x.player != s.seats[s.turn].player)
    for i in range(backlog):
        _queue(t, Pass(command_id=f"o{i}", match_id="m1", player=other, expected_version=s.version),
               d.at_ms - 3_000 + i)
    clock.set(d.at_ms + 100)
    assert rt_mod.fire("m1", d.version, "turn", t.runtime) == outcome
    first = m.events(after=s.version)[0]
    assert isinstance(first, ClockExtended) if outcome == "extended" else isinstance(first, TurnTimedOut)
