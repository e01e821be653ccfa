"""``apply(state, event) -> state``: the fold of event sourcing.

One small function per event type (``functools.singledispatch``).  Nothing is
checked here -- :func:`engine.decide.decide` checked it before the event
existed -- and applying an event that decide produced never fails.

After every event apply stamps the envelope (``version`` = the event's seq)
and recomputes the match's deadline from the event's timestamp and the room
config:

* seating, some seated player not ready: ``ready`` at ts + ``ready_seconds``
  (R-13.2); the clock restarts whenever a player sits down;
* playing: ``turn`` at ts + ``turn_seconds`` (R-13.1), or ``trustee`` at ts +
  ``trustee_delay_seconds`` when the player on turn is in trusteeship (any
  reason, an escape under the trustee policy included, R-12.1, R-13.3); the
  clock restarts when the turn moves or its kind changes, and otherwise keeps
  running (an opponent's disconnect does not give the player on turn more time);
* new / finished: no deadline.
"""

from __future__ import annotations

from dataclasses import replace
from functools import singledispatch

from engine.combo import Combo
from engine.config import RoomConfig
from engine.events import (
    CardsPlayed,
    EventBase,
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
from engine.state import Finish, LastPlay, MatchState, Seat


def apply(state: MatchState, event: EventBase) -> MatchState:
    """The state after ``event`` (no checks; see the module docstring for deadlines)."""
    new = _apply(event, state)
    new = replace(new, version=event.seq, last_ts=event.ts)
    return _with_deadline(state, new, event.ts)


def _ms(seconds: float) -> int:
    return int(round(seconds * 1000))


def _with_deadline(old: MatchState, new: MatchState, ts: int) -> MatchState:
    cfg = new.config
    if cfg is None:
        return replace(new, deadline_at=None, deadline_kind=None)
    if new.phase == "seating":
        unready = any(s is not None and not s.ready for s in new.seats)
        if not unready:
            return replace(new, deadline_at=None, deadline_kind=None)
        restarted = (old.deadline_kind != "ready" or old.deadline_at is None
                     or any(o is None and n is not None for o, n in zip(old.seats, new.seats)))
        at = ts + _ms(cfg.ready_seconds) if restarted else old.deadline_at
        return replace(new, deadline_at=at, deadline_kind="ready")
    if new.phase == "playing" and new.turn is not None:
        seat = new.seats[new.turn]
        kind = "trustee" if (seat is not None and seat.trusteed) else "turn"
        moved = (old.phase != "playing" or old.turn != new.turn or old.trick != new.trick
                 or old.trick_plays != new.trick_plays or old.deadline_kind != kind
                 or old.deadline_at is None)
        if moved:
            secs = cfg.trustee_delay_seconds if kind == "trustee" else cfg.turn_seconds
            return replace(new, deadline_at=ts + _ms(secs), deadline_kind=kind)  # type: ignore[arg-type]
        return new
    return replace(new, deadline_at=None, deadline_kind=None)


def _update_seat(state: MatchState, player: str, **changes: object) -> MatchState:
    i = state.seat_of(player)
    if i is None:  # never for events decide produced; stay total anyway
        return state
    return state.with_seat(i, replace(state.seat(i), **changes))  # type: ignore[arg-type]


@singledispatch
def _apply(event: EventBase, state: MatchState) -> MatchState:
    return state  # unknown event types change nothing


@_apply.register
def _(e: MatchCreated, s: MatchState) -> MatchState:
    return replace(s, config=RoomConfig.from_record(e.config), phase="seating")


@_apply.register
def _(e: PlayerSeated, s: MatchState) -> MatchState:
    return s.with_seat(e.seat, Seat(player=e.player, balance=e.balance, level=e.level, base=e.base))


@_apply.register
def _(e: PlayerReady, s: MatchState) -> MatchState:
    return _update_seat(s, e.player, ready=True)


@_apply.register
def _(e: PlayerRemoved, s: MatchState) -> MatchState:
    i = s.seat_of(e.player)
    return s if i is None else s.with_seat(i, None)


@_apply.register
def _(e: HandDealt, s: MatchState) -> MatchState:
    seats = tuple(
        None if seat is None else replace(seat, hand=tuple(sorted(e.hands[i])))
        for i, seat in enumerate(s.seats)
    )
    return replace(s, seats=seats, set_aside=tuple(e.set_aside), phase="playing", turn=e.first,
                   first=e.first, lead_card=e.lead_card, to_beat=None, trick=1, trick_plays=0)


@_apply.register
def _(e: CardsPlayed, s: MatchState) -> MatchState:
    i = s.seat_of(e.player)
    if i is None:
        return s
    seat = s.seat(i)
    gone = set(e.cards)
    combo: Combo = e.reading.combo()
    seat = replace(seat, hand=tuple(c for c in seat.hand if c not in gone), plays=seat.plays + 1,
                   bombs=seat.bombs + ((combo,) if combo.is_bomb else ()))
    s = s.with_seat(i, seat)
    return replace(s, table=s.table + tuple(e.cards), to_beat=LastPlay(i, combo, tuple(e.cards)),
                   turn=1 - i, trick_plays=s.trick_plays + 1, plays_total=s.plays_total + 1)


@_apply.register
def _(e: Passed, s: MatchState) -> MatchState:
    i = s.seat_of(e.player)
    if i is None:
        return s
    # with two players a pass ends the trick; the last player to play leads
    return replace(s, turn=1 - i, to_beat=None, trick=s.trick + 1, trick_plays=0)


@_apply.register
def _(e: TurnTimedOut, s: MatchState) -> MatchState:
    return _update_seat(s, e.player, timeouts=e.count)


@_apply.register
def _(e: TrusteeshipStarted, s: MatchState) -> MatchState:
    return _update_seat(s, e.player, trustee=e.reason)


@_apply.register
def _(e: TrusteeshipEnded, s: MatchState) -> MatchState:
    return _update_seat(s, e.player, trustee=None)


@_apply.register
def _(e: PlayerDisconnected, s: MatchState) -> MatchState:
    return _update_seat(s, e.player, connected=False)


@_apply.register
def _(e: PlayerReconnected, s: MatchState) -> MatchState:
    return _update_seat(s, e.player, connected=True)


@_apply.register
def _(e: PlayerEscaped, s: MatchState) -> MatchState:
    return _update_seat(s, e.player, escaped=True, connected=False)


@_apply.register
def _(e: MatchFinished, s: MatchState) -> MatchState:
    fin = Finish(winner=e.winner, loser=e.loser, kou=e.kou, reason=e.reason,
                 cards_left=tuple(sorted(e.cards_left.items())))
    return replace(s, phase="finished", finished=fin, turn=None)
