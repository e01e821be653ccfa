"""``expected_version`` means "the table as I saw it" (issue 26 §4, docs/PROTOCOL.md §1).

A command is ``stale`` only when the table moved after the version it names: a play, a pass
(a turn change), the deal, a seating or a removal, the finish (a phase change) --
:data:`engine.match.evolve.MOVES_TABLE`.  Events that do not move the table (a ready mark,
trusteeship started or ended, a disconnect or a reconnect, an escape under the trustee
policy) leave a decision taken before them valid.  Both directions, as tables: each step
happens after the player saw version ``v``, then the player's command names ``v``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from engine.rules.cards import parse_cards
from engine.match.commands import (
    CancelTrustee,
    Deal,
    Disconnect,
    Escape,
    Leave,
    Pass,
    Play,
    Ready,
    Reconnect,
    RequestTrustee,
    Sit,
)
from engine.match.errors import StaleCommand
from engine.match.events import (
    CardsPlayed,
    HandDealt,
    MatchCreated,
    MatchFinished,
    Passed,
    PlayerDisconnected,
    PlayerEscaped,
    PlayerReady,
    PlayerReconnected,
    PlayerRemoved,
    PlayerSeated,
    TrusteeshipEnded,
    TrusteeshipStarted,
    TurnTimedOut,
)
from engine.match.evolve import MOVES_TABLE
from engine.match.state import MatchState, decode_state, encode_state
from tests.test_decide import M, dealt

HANDS = ("3 3 5 7 9", "4 4 6 8 10")  # a (seat 0) leads


def _play_low(m: M, player: str) -> None:
    m.do(Play, player=player, cards=(min(m.state.seat(m.state.seat_of(player)).hand),))


# (what happens after a saw version v, the events it appends) -- the table stays: a's move on v stands
STAYS: list[tuple[str, Callable[[M], None], Callable[[M], None]]] = [
    ("the opponent asks for trusteeship (TrusteeshipStarted)", lambda m: None,
     lambda m: m.do(RequestTrustee, player="b")),
    ("the opponent cancels trusteeship (TrusteeshipEnded)", lambda m: m.do(RequestTrustee, player="b"),
     lambda m: m.do(CancelTrustee, player="b")),
    ("the opponent disconnects (PlayerDisconnected, TrusteeshipStarted)", lambda m: None,
     lambda m: m.do(Disconnect, player="b")),
    ("the opponent reconnects (PlayerReconnected)", lambda m: m.do(Disconnect, player="b"),
     lambda m: m.do(Reconnect, player="b")),
    ("the opponent escapes under the trustee policy (PlayerEscaped, TrusteeshipStarted)", lambda m: None,
     lambda m: m.do(Escape, player="b")),
]

# ... the table moves: a's move on v is stale
MOVES: list[tuple[str, Callable[[M], None], Callable[[M], None]]] = [
    ("a play (CardsPlayed, the turn moves)", lambda m: None, lambda m: _play_low(m, "a")),
    ("a pass ends the trick (Passed)", lambda m: _play_low(m, "a"), lambda m: m.do(Pass, player="b")),
]


def _match() -> M:
    m = dealt(*HANDS, escape_policy="trustee")
    assert m.state.current_player == "a"
    return m


def _after(before: Callable[[M], None], step: Callable[[M], None]) -> tuple[M, int]:
    """A match where a saw version ``seen`` (after ``before``), then ``step`` happened."""
    m = _match()
    before(m)
    seen = m.state.version
    step(m)
    assert m.state.version > seen  # something was appended
    return m, seen


@pytest.mark.parametrize("what,before,step", STAYS, ids=[s[0] for s in STAYS])
def test_events_that_leave_the_table_do_not_make_a_move_stale(what, before, step) -> None:
    m, seen = _after(before, step)
    if m.state.current_player != "a":  # a, on turn, still plays on the table seen
        pytest.fail(f"{what} moved the turn")
    events = m.do(Play, player="a", cards=(min(m.state.seat(0).hand),), expected_version=seen)
    assert isinstance(events[0], CardsPlayed)


@pytest.mark.parametrize("what,before,step", MOVES, ids=[s[0] for s in MOVES])
def test_events_that_move_the_table_make_a_command_stale(what, before, step) -> None:
    m, seen = _after(before, step)
    for cmd in (Pass, RequestTrustee):  # whoever sends it, whatever it is
        for who in ("a", "b"):
            assert isinstance(m.no(cmd, player=who, expected_version=seen), StaleCommand), (what, cmd, who)


def test_before_the_deal_a_ready_mark_is_no_move_but_a_seating_and_the_deal_are() -> None:
    m = M(seat=False)
    m.do(Sit, player="a")
    seen = m.state.version
    m.do(Sit, player="b")  # a seating moves the table
    assert isinstance(m.no(Ready, player="a", expected_version=seen), StaleCommand)
    seen = m.state.version
    m.do(Ready, player="b")  # a ready mark does not
    m.do(Leave, player="a", expected_version=seen)
    assert isinstance(m.history[-1], PlayerRemoved)

    m = M()
    m.do(Ready, player="a")
    seen = m.state.version
    m.do(Ready, player="b")
    ids = parse_cards(" ".join(HANDS).split())
    m.do(Deal, hands=(tuple(ids[:5]), tuple(ids[5:])), first=0)  # the deal: a phase change
    assert isinstance(m.no(Play, player="a", cards=(m.state.seat(0).hand[0],), expected_version=seen),
                      StaleCommand)


def test_a_version_the_match_has_not_reached_is_stale() -> None:
    m = _match()
    assert isinstance(m.no(Pass, player="a", expected_version=m.state.version + 1), StaleCommand)


def test_a_version_older_than_the_last_table_move_names_it() -> None:
    m = _match()
    seen = m.state.version
    _play_low(m, "a")
    moved = m.state.version
    m.do(RequestTrustee, player="a")
    err = m.no(RequestTrustee, player="b", expected_version=seen)
    assert f"the table moved at version {moved}, after version {seen}" in err.reason


# every event type, which side of the line it is on (docs/PROTOCOL.md lists the same)
@pytest.mark.parametrize("event_type,moves", [
    (MatchCreated, True), (PlayerSeated, True), (PlayerRemoved, True), (HandDealt, True),
    (CardsPlayed, True), (Passed, True), (MatchFinished, True),
    (PlayerReady, False), (TurnTimedOut, False), (TrusteeshipStarted, False), (TrusteeshipEnded, False),
    (PlayerDisconnected, False), (PlayerReconnected, False), (PlayerEscaped, False),
])
def test_which_events_move_the_table(event_type, moves) -> None:
    assert (event_type in MOVES_TABLE) is moves


def test_the_table_version_survives_a_snapshot_and_an_old_snapshot_is_strict() -> None:
    m = _match()
    m.do(RequestTrustee, player="b")
    s = m.state
    assert s.table_version < s.version
    assert decode_state(encode_state(s)).table_version == s.table_version
    import msgpack

    old = msgpack.unpackb(encode_state(s), raw=False)
    del old["table_version"]  # written before the table version existed
    assert decode_state(msgpack.packb(old)).table_version == s.version
    assert MatchState(match_id="x").table_version == 0
