"""``apply(state, event) -> state`` for the queue and the table: one small function per
event type, each returning the fields it changes, no checks (decide made them).  Every
event stamps ``version`` (its seq) and ``last_ts``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, overload

from engine.match.frozen import evolve
from engine.lobby.events import (
    AwayNoted,
    BotSeated,
    CooldownStarted,
    LeaveDeferred,
    LeaveNoted,
    LeaveRequested,
    LeftWithTable,
    LobbyEvent,
    MatchDealt,
    MatchEnded,
    MatchSeated,
    MatchSettled,
    NextMatchOffered,
    PlayerAway,
    PlayerBack,
    PlayerLeftQueue,
    PlayerQueued,
    PlayerReadied,
    TableClosed,
    TableOpened,
    TablePaired,
    TableReleased,
)
from engine.lobby.state import Cooldown, Placed, QueueState, TableState, Waiting

Changes = dict[str, Any]
_QUEUE: dict[type[LobbyEvent], Callable[[Any, QueueState], Changes]] = {}
_TABLE: dict[type[LobbyEvent], Callable[[Any, TableState], Changes]] = {}


@overload
def apply(state: QueueState, event: LobbyEvent) -> QueueState: ...
@overload
def apply(state: TableState, event: LobbyEvent) -> TableState: ...


def apply(state: QueueState | TableState, event: LobbyEvent) -> QueueState | TableState:
    """The state after ``event`` (an event of the other aggregate's kind changes nothing but
    the envelope; decide never produces one)."""
    if isinstance(state, QueueState):
        qh = _QUEUE.get(type(event))
        return evolve(state, version=event.seq, last_ts=event.ts, **(qh(event, state) if qh else {}))
    th = _TABLE.get(type(event))
    return evolve(state, version=event.seq, last_ts=event.ts, **(th(event, state) if th else {}))


def _queue(t: type[LobbyEvent]) -> Callable[[Callable[[Any, QueueState], Changes]],
                                            Callable[[Any, QueueState], Changes]]:
    def register(fn: Callable[[Any, QueueState], Changes]) -> Callable[[Any, QueueState], Changes]:
        _QUEUE[t] = fn
        return fn
    return register


def _table(t: type[LobbyEvent]) -> Callable[[Callable[[Any, TableState], Changes]],
                                            Callable[[Any, TableState], Changes]]:
    def register(fn: Callable[[Any, TableState], Changes]) -> Callable[[Any, TableState], Changes]:
        _TABLE[t] = fn
        return fn
    return register


def _without(items: tuple[str, ...], player: str) -> tuple[str, ...]:
    return tuple(x for x in items if x != player)


# ---- the queue ----------------------------------------------------------------------

def _unwait(s: QueueState, *players: str) -> tuple[Waiting, ...]:
    return tuple(w for w in s.waiting if w.player not in players)


def _place(s: QueueState, table: str, *pairs: tuple[str, int]) -> tuple[Placed, ...]:
    new = {p.player: p for p in s.placed}
    ratings = {w.player: w.rating for w in s.waiting}
    for player, since in pairs:
        new[player] = Placed(player, table, since, rating=ratings.get(player))
    return tuple(new[k] for k in sorted(new))


@_queue(PlayerQueued)
def _queued(e: PlayerQueued, s: QueueState) -> Changes:
    waiting = _unwait(s, e.player) + (Waiting(e.player, e.since, e.rating),)
    # oldest Join first: a requeued player goes back to the place their wait gives them
    return {"waiting": tuple(sorted(waiting, key=lambda w: w.since)),
            "placed": tuple(p for p in s.placed if p.player != e.player)}


@_queue(PlayerLeftQueue)
def _left_queue(e: PlayerLeftQueue, s: QueueState) -> Changes:
    return {"waiting": _unwait(s, e.player)}


@_queue(TablePaired)
def _paired(e: TablePaired, s: QueueState) -> Changes:
    since = {w.player: w.since for w in s.waiting}
    return {"waiting": _unwait(s, *e.players), "tables": s.tables + 1,
            "placed": _place(s, e.table, *((p, since.get(p, e.ts)) for p in e.players))}


@_queue(BotSeated)
def _bot_seated(e: BotSeated, s: QueueState) -> Changes:
    w = s.waiting_of(e.player)
    return {"waiting": _unwait(s, e.player), "tables": s.tables + 1,
            "placed": _place(s, e.table, (e.player, w.since if w else e.ts))}


@_queue(LeaveRequested)
def _leave_requested(e: LeaveRequested, s: QueueState) -> Changes:
    return {"placed": tuple(evolve(p, leaving=True) if p.player == e.player else p for p in s.placed)}


@_queue(AwayNoted)
def _away_noted(e: AwayNoted, s: QueueState) -> Changes:
    return {"placed": tuple(evolve(p, away=e.away) if p.player == e.player else p for p in s.placed)}


@_queue(TableReleased)
def _released(e: TableReleased, s: QueueState) -> Changes:
    return {"placed": tuple(p for p in s.placed if p.table != e.table)}


@_queue(LeftWithTable)
def _left_with_table(e: LeftWithTable, s: QueueState) -> Changes:
    return {"placed": tuple(p for p in s.placed if p.player != e.player)}


@_queue(CooldownStarted)
def _cooldown(e: CooldownStarted, s: QueueState) -> Changes:
    cut = e.forget_before
    new = {p: c for p, c in s.cooldowns if cut is None or c.until > cut}
    new[e.player] = Cooldown(e.leaves, e.until)
    return {"cooldowns": tuple(sorted(new.items()))}


# ---- the table ----------------------------------------------------------------------

@_table(TableOpened)
def _opened(e: TableOpened, s: TableState) -> Changes:
    return {"room": e.room, "players": e.players, "bot": e.bot, "bot_level": e.bot_level, "n": 1,
            "match": e.match, "status": "creating", "ready_ms": e.ready_ms, "grace_ms": e.grace_ms, "private": e.private}


@_table(MatchSeated)
def _seated(e: MatchSeated, s: TableState) -> Changes:
    return {"status": "seated", "seated_at": e.ts}


@_table(PlayerReadied)
def _readied(e: PlayerReadied, s: TableState) -> Changes:
    return {"ready": _without(s.ready, e.player) + (e.player,)}


@_table(MatchDealt)
def _dealt(e: MatchDealt, s: TableState) -> Changes:
    return {"dealt": True, "ever_dealt": True}


@_table(LeaveDeferred)
def _deferred(e: LeaveDeferred, s: TableState) -> Changes:
    return {"quit": _without(s.quit, e.player) + (e.player,)}


@_table(LeaveNoted)
def _noted(e: LeaveNoted, s: TableState) -> Changes:
    return {"leaving": _without(s.leaving, e.player) + (e.player,)}


@_table(PlayerAway)
def _away(e: PlayerAway, s: TableState) -> Changes:
    return {"away": _without(s.away, e.player) + (e.player,)}


@_table(PlayerBack)
def _back(e: PlayerBack, s: TableState) -> Changes:
    return {"away": _without(s.away, e.player)}


@_table(MatchEnded)
def _ended(e: MatchEnded, s: TableState) -> Changes:
    # a finish: between two matches until the settlement; an end before the deal closes the
    # table in the same decision (TableClosed follows)
    # whoever left during a finished match (their Leave or Escape went to it) leaves at the settlement
    return {"status": "between", "escaper": e.escaper, "quit": (),
            "leaving": s.leaving + tuple(p for p in s.quit if p not in s.leaving)}


@_table(MatchSettled)
def _settled(e: MatchSettled, s: TableState) -> Changes:
    return {}


@_table(NextMatchOffered)
def _next(e: NextMatchOffered, s: TableState) -> Changes:
    return {"n": s.n + 1, "match": e.match, "status": "creating", "ready": (), "dealt": False,
            "seated_at": None, "away": (), "quit": (), "leaving": (), "escaper": None}


@_table(TableClosed)
def _closed(e: TableClosed, s: TableState) -> Changes:
    return {"status": "closed", "close_reason": e.reason, "removed": e.removed}
