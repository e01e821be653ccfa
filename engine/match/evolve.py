"""``apply(state, event) -> state``: the fold of event sourcing.

One small function per event type, each returning the fields it changes.  Nothing is
checked here -- :func:`engine.match.decide.decide` checked it before the event
existed -- and applying an event that decide produced never fails.

After every event apply stamps the envelope (``version`` = the event's seq)
and recomputes the match's deadline from the event's timestamp and the room
config:

* seating, a seat empty or some seated player not ready: ``ready`` at ts +
  ``ready_seconds`` (R-13.2), from the match's creation; the clock restarts whenever a
  player sits down or is removed, so a match nobody completes is abandoned by its
  ReadyTimeout (MatchAbandoned) and a lone ready player is not kept waiting (issue 23 item 8);
* playing: ``turn`` at (the moment the player got the turn) + ``turn_seconds``
  (R-13.1), or ``trustee`` at ts + ``trustee_delay_seconds`` when the player on
  turn is in trusteeship (any reason, an escape under the trustee policy
  included, R-12.1, R-13.3).  The turn clock starts when the turn moves and
  otherwise keeps running: an opponent's disconnect does not give the player
  on turn more time, and neither does asking for trusteeship and cancelling it
  (R-13.5) — the turn deadline comes back where it was;
* ClockExtended (issue 35 §4) moves the running turn or ready clock later by its
  ``by_ms``: the player could not have acted for that long;
* new / finished / abandoned: no deadline.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine.rules.combo import Combo
from engine.config import RoomConfig
from engine.match.events import (
    CardsPlayed,
    ClockExtended,
    EventBase,
    HandDealt,
    MatchAbandoned,
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
from engine.match.frozen import evolve as replace
from engine.match.state import Finish, LastPlay, MatchState, PlayRecord, Seat


Changes = dict[str, Any]

#: the events that move the table (docs/PROTOCOL.md "expected_version"): the creation, a seating
#: or a removal, the deal, a play, a pass (a turn change), the finish (a phase change).  A
#: command's ``expected_version`` is stale only when one of these came after it; the others
#: (PlayerReady, TurnTimedOut, TrusteeshipStarted/Ended, PlayerDisconnected/Reconnected,
#: PlayerEscaped, ClockExtended) leave a decision taken on the table as it was valid.
MOVES_TABLE: tuple[type[EventBase], ...] = (
    MatchCreated, PlayerSeated, PlayerRemoved, HandDealt, CardsPlayed, Passed, MatchFinished,
)
_HANDLERS: dict[type[EventBase], Callable[[Any, MatchState], Changes]] = {}


def apply(state: MatchState, event: EventBase) -> MatchState:
    """The state after ``event`` (no checks; see the module docstring for deadlines)."""
    handler = _HANDLERS.get(type(event))
    changes = handler(event, state) if handler is not None else {}  # unknown types change nothing
    if isinstance(event, MOVES_TABLE):
        changes = {**changes, "table_version": event.seq}
    new = replace(state, version=event.seq, last_ts=event.ts, **changes)
    # the deadline depends on the new state: set it on the fresh copy before anyone sees it
    for name, value in _deadline(state, new, event.ts).items():
        object.__setattr__(new, name, value)
    return new


def _handles(event_type: type[EventBase]) -> Callable[[Callable[[Any, MatchState], Changes]],
                                                     Callable[[Any, MatchState], Changes]]:
    def register(fn: Callable[[Any, MatchState], Changes]) -> Callable[[Any, MatchState], Changes]:
        _HANDLERS[event_type] = fn
        return fn
    return register


def _ms(seconds: float) -> int:
    return int(round(seconds * 1000))


_NO_DEADLINE: dict[str, object] = {"deadline_at": None, "deadline_kind": None, "turn_started_at": None}


def _deadline(old: MatchState, new: MatchState, ts: int) -> dict[str, object]:
    """The deadline fields of the state after an event at ``ts``."""
    cfg = new.config
    if cfg is None:
        return _NO_DEADLINE
    if new.phase == "seating":
        waiting = any(s is None or not s.ready for s in new.seats)  # a seat to fill, a Ready to come
        if not waiting:
            return _NO_DEADLINE  # both ready: the deal follows (or an operator's Deal, fixed deals)
        restarted = (old.deadline_kind != "ready" or old.deadline_at is None
                     or any((o is None) != (n is None) for o, n in zip(old.seats, new.seats)))
        at = ts + _ms(cfg.ready_seconds) if restarted else new.deadline_at  # (ClockExtended moves it)
        return {"deadline_at": at, "deadline_kind": "ready", "turn_started_at": None}
    if new.phase == "playing" and new.turn is not None:
        seat = new.seats[new.turn]
        kind = "trustee" if (seat is not None and seat.trusteed) else "turn"
        moved = (old.phase != "playing" or old.turn != new.turn or old.trick != new.trick
                 or old.trick_plays != new.trick_plays or old.turn_started_at is None)
        started = ts if moved else new.turn_started_at  # (ClockExtended moves it)
        assert started is not None
        if kind == "turn":
            at = started + _ms(cfg.turn_seconds)
        elif moved or old.deadline_kind != "trustee" or old.deadline_at is None:
            at = ts + _ms(cfg.trustee_delay_seconds)
        else:
            at = old.deadline_at
        return {"deadline_at": at, "deadline_kind": kind, "turn_started_at": started}
    return _NO_DEADLINE


def _seats_with(state: MatchState, i: int, seat: Seat | None) -> Changes:
    seats = list(state.seats)
    seats[i] = seat
    return {"seats": (seats[0], seats[1])}


def _update_seat(state: MatchState, player: str, **changes: object) -> Changes:
    i = state.seat_of(player)
    if i is None:  # never for events decide produced; stay total anyway
        return {}
    return _seats_with(state, i, replace(state.seat(i), **changes))


@_handles(MatchCreated)
def _created(e: MatchCreated, s: MatchState) -> Changes:
    return {"config": RoomConfig.from_match_record(e.config), "phase": "seating",
            "commitment": e.commitment, "server_seed": e.server_seed}


@_handles(PlayerSeated)
def _seated(e: PlayerSeated, s: MatchState) -> Changes:
    return _seats_with(s, e.seat, Seat(player=e.player, balance=e.balance, level=e.level, base=e.base))


@_handles(PlayerReady)
def _ready(e: PlayerReady, s: MatchState) -> Changes:
    return _update_seat(s, e.player, ready=True, client_seed=e.client_seed)


@_handles(PlayerRemoved)
def _removed(e: PlayerRemoved, s: MatchState) -> Changes:
    i = s.seat_of(e.player)
    return {} if i is None else _seats_with(s, i, None)


@_handles(HandDealt)
def _dealt(e: HandDealt, s: MatchState) -> Changes:
    seats = tuple(
        None if seat is None else replace(seat, hand=tuple(sorted(e.hands[i])))
        for i, seat in enumerate(s.seats)
    )
    return {"seats": seats, "set_aside": tuple(e.set_aside), "phase": "playing", "turn": e.first,
            "first": e.first, "lead_card": e.lead_card, "to_beat": None, "trick": 1, "trick_plays": 0,
            "client_seeds": None if e.client_seeds is None else (e.client_seeds[0], e.client_seeds[1])}


@_handles(CardsPlayed)
def _played(e: CardsPlayed, s: MatchState) -> Changes:
    i = s.seat_of(e.player)
    if i is None:
        return {}
    seat = s.seat(i)
    gone = set(e.cards)
    combo: Combo = e.reading.combo()
    seat = replace(seat, hand=tuple(c for c in seat.hand if c not in gone), plays=seat.plays + 1,
                   bombs=seat.bombs + ((combo,) if combo.is_bomb else ()))
    return {**_seats_with(s, i, seat), "table": s.table + tuple(e.cards),
            "to_beat": LastPlay(i, combo, tuple(e.cards)), "turn": 1 - i,
            "trick_plays": s.trick_plays + 1, "plays_total": s.plays_total + 1,
            "history": s.history + (PlayRecord(s.trick, i, tuple(e.cards), combo.kind, combo.top, combo.xiang),)}


@_handles(Passed)
def _passed(e: Passed, s: MatchState) -> Changes:
    i = s.seat_of(e.player)
    if i is None:
        return {}
    # with two players a pass ends the trick; the last player to play leads
    return {"turn": 1 - i, "to_beat": None, "trick": s.trick + 1, "trick_plays": 0}


@_handles(TurnTimedOut)
def _timed_out(e: TurnTimedOut, s: MatchState) -> Changes:
    return _update_seat(s, e.player, timeouts=e.count)


@_handles(TrusteeshipStarted)
def _trustee_started(e: TrusteeshipStarted, s: MatchState) -> Changes:
    return _update_seat(s, e.player, trustee=e.reason)


@_handles(TrusteeshipEnded)
def _trustee_ended(e: TrusteeshipEnded, s: MatchState) -> Changes:
    return _update_seat(s, e.player, trustee=None)


@_handles(PlayerDisconnected)
def _disconnected(e: PlayerDisconnected, s: MatchState) -> Changes:
    return _update_seat(s, e.player, connected=False)


@_handles(PlayerReconnected)
def _reconnected(e: PlayerReconnected, s: MatchState) -> Changes:
    return _update_seat(s, e.player, connected=True)


@_handles(PlayerEscaped)
def _escaped(e: PlayerEscaped, s: MatchState) -> Changes:
    return _update_seat(s, e.player, escaped=True, connected=False)


@_handles(ClockExtended)
def _clock_extended(e: ClockExtended, s: MatchState) -> Changes:
    # the turn clock runs from turn_started_at, the ready clock is its deadline: both move
    if e.kind == "turn" and s.turn_started_at is not None:
        return {"turn_started_at": s.turn_started_at + e.by_ms}
    if e.kind == "ready" and s.deadline_at is not None:
        return {"deadline_at": s.deadline_at + e.by_ms}
    return {}


@_handles(MatchFinished)
def _finished(e: MatchFinished, s: MatchState) -> Changes:
    fin = Finish(winner=e.winner, loser=e.loser, kou=e.kou, reason=e.reason,
                 cards_left=tuple(sorted(e.cards_left.items())))
    return {"phase": "finished", "finished": fin, "turn": None}


@_handles(MatchAbandoned)
def _abandoned(e: MatchAbandoned, s: MatchState) -> Changes:
    return {"phase": "abandoned", "abandoned": e.reason, "turn": None}
