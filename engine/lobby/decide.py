"""``decide(state, command, ctx) -> list[LobbyEvent]`` for a room's queue and a table.

Pure like the match's decide: the clock (``now_ms``), the ids of a new table and of a
bot, the room's registered config, the player's balance and their place in another room
enter only through :class:`LobbyContext` and are recorded in the events.  A refusal
raises a typed :class:`engine.match.errors.Rejected`; the state is never touched.

The queue (``QueueState``):

* ``Join`` → PlayerQueued, then TablePaired when two wait (oldest Joins first).  Refused:
  ``unknown_room`` (no registered config), ``already_placed`` (waiting or seated in another
  room, or a Leave at this room's table still being decided), ``seat_refused`` (a balance
  below the lowest level, R-11.1), ``cooldown`` (the player left a table before its deal
  and the room's leave cooldown runs; ``retry_after_ms``).  A Join from a player who
  already waits or sits in this room changes nothing.
* ``Leave`` → PlayerLeftQueue(left) for a waiting player; LeaveRequested for a player at a
  table (the table decides, :func:`decide` on its state with the same Leave and ``table``
  set); ``not_seated`` when the room does not have the player.
* ``GraceExpired`` / ``Returned``: a waiting player leaves the queue (``disconnected``); at a
  table AwayNoted, handed to the table like a Leave.
* ``QueueTimer`` (``gateway --bots``): BotSeated when the oldest waiting player waited
  ``ctx.bots.after_ms``; ``stale`` when the queue moved since the timer was set or nobody
  waited long enough; ``not_allowed`` without a bot policy.
* Ranked rooms (``ranked = true``) pair by skill (:mod:`engine.lobby.skill`: the closest
  rating of the Join's snapshot inside a window that widens with the wait); ``PairTimer``
  pairs again as the windows widen (nothing when nobody is close enough; ``not_allowed`` in
  a room that is not ranked); the queue timer's bot waits for ``match_max_wait_seconds``.
* ``ReleaseTable`` (a table closed): TableReleased, then each player the table had stay
  waits again (PlayerQueued ``opponent_left``, their Join's time kept) unless their Leave
  or grace had come (LeftWithTable); CooldownStarted for each who left before the table's
  first deal; then pairing.

The leave cooldown: the ``k``-th leave before a deal in a row gives
``min(leave_cooldown_seconds · 2^(k-1), leave_cooldown_max_seconds)``; a player whose last
cooldown ended ``leave_cooldown_max_seconds`` ago starts again at ``k`` = 1 (and the room's next
CooldownStarted forgets the cooldowns that ended :data:`FORGET_COOLDOWN_MS` ago: ``forget_before``);
``leave_cooldown_seconds`` = 0 turns it off.

A table (``TableState``): ``OpenTable`` → TableOpened (status ``creating``);
``ConfirmSeated`` → MatchSeated (``seated``); ``NoteReady`` / ``NoteDealt`` mirror the
match; ``Leave``: while its match is created the table closes now (TableClosed ``left``),
while it runs the engine decides (LeaveDeferred: a Leave before the deal, an Escape after
it), after its finish the settlement closes it (LeaveNoted); ``GraceExpired`` /
``Returned`` → PlayerAway / PlayerBack (a Disconnect / Reconnect in the match, R-13.4);
``MatchEnded`` → a finish waits for the settlement (``between``), an end before the deal
closes the table: the removed leave the room, whoever left into the match leaves with
it, the others stay (back to the queue), a bot leaves; ``Settle`` → MatchSettled, then
TableClosed (an escaper, R-12.1, or a Leave at the settlement) or NextMatchOffered
``<table>-<n+1>``.  Refused: ``bad_command`` (another table), ``unknown_table`` (never
opened), ``table_closed``, ``not_seated`` (not a player of the table), ``stale`` (news of
another match than the table's current one), ``wrong_phase`` (news that does not fit
the table's status).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, overload

from engine.config import RoomConfig
from engine.match.errors import (
    BadCommand,
    NotAllowed,
    NotSeated,
    SeatRefused,
    StaleCommand,
    UnknownRoom,
    WrongPhase,
)
from engine.lobby.commands import (
    CloseTable,
    ConfirmSeated,
    GraceExpired,
    Join,
    Leave,
    LobbyCommand,
    MatchEnded,
    NoteDealt,
    NoteReady,
    OpenTable,
    PairTimer,
    QueueTimer,
    ReleaseTable,
    Returned,
    Settle,
)
from engine.lobby.errors import AlreadyPlaced, Cooldown, TableClosed, UnknownTable
from engine.lobby import events as ev
from engine.lobby.evolve import apply
from engine.lobby.skill import choose_pair, overdue
from engine.lobby.state import QueueState, TableState

#: the doubling of the leave cooldown stops growing after this many leaves (2^40 × base)
MAX_DOUBLINGS = 40


@dataclass(frozen=True)
class BotPolicy:
    """``gateway --bots``: a bot of ``level`` opposite a player alone for ``after_ms``."""

    after_ms: int
    level: str = "normal"


@dataclass(frozen=True)
class LobbyContext:
    """What the lobby's decide may know of the world (each recorded in the events it causes).

    ``room``: the room's registered config (Join, OpenTable, ReleaseTable; None: not
    registered); ``balance``: the player's balance in the room's mode (Join, from the
    ledger); ``elsewhere``: the player's place in another room, from the player index
    (Join); ``table_id``: an opaque id for a table this decision may open; ``bot_id`` and
    ``bots`` for the queue timer.
    """

    now_ms: int
    room: RoomConfig | None = None
    balance: int = 0
    elsewhere: str | None = None
    table_id: str | None = None
    bot_id: str | None = None
    bots: BotPolicy | None = None


def _ms(seconds: float) -> int:
    return int(round(seconds * 1000))


#: how long after its end a leave cooldown is forgotten: past the longest
#: ``leave_cooldown_max_seconds`` a room may have (a day), with a day's margin for a replica's
#: clock behind the one that forgot it, so forgetting never changes what a later decide does
FORGET_COOLDOWN_MS = 2 * 86_400_000


def cooldown_ms(cfg: RoomConfig, leaves: int) -> int:
    """The cooldown after the ``leaves``-th leave before a deal in a row.

    >>> from engine.config import load_config
    >>> cfg = load_config("points").model_copy(update={"leave_cooldown_seconds": 5,
    ...                                              "leave_cooldown_max_seconds": 60})
    >>> [cooldown_ms(cfg, k) for k in (1, 2, 3, 4, 5)]
    [5000, 10000, 20000, 40000, 60000]
    """
    base, cap = _ms(cfg.leave_cooldown_seconds), _ms(cfg.leave_cooldown_max_seconds)
    doubled: int = base << min(max(leaves, 1) - 1, MAX_DOUBLINGS)
    return min(doubled, cap)


class _Builder:
    """Collects the events of one decision, applying each so later checks see it."""

    def __init__(self, state: QueueState | TableState, aggregate: str, command: LobbyCommand,
                 ctx: LobbyContext):
        self.state = state
        self.aggregate = aggregate
        self.command = command
        self.ctx = ctx
        self.events: list[ev.LobbyEvent] = []

    def emit(self, cls: type[ev.LobbyEvent], **fields: Any) -> None:
        e = cls(aggregate=self.aggregate, seq=self.state.version + 1, ts=self.ctx.now_ms,
                command_id=self.command.command_id, **fields)
        self.events.append(e)
        self.state = apply(self.state, e)  # type: ignore[arg-type]

    @property
    def queue(self) -> QueueState:
        assert isinstance(self.state, QueueState)
        return self.state

    @property
    def table(self) -> TableState:
        assert isinstance(self.state, TableState)
        return self.state


# ---- public API -----------------------------------------------------------------------

@overload
def decide_and_apply(state: QueueState, command: LobbyCommand,
                     ctx: LobbyContext) -> tuple[list[ev.LobbyEvent], QueueState]: ...
@overload
def decide_and_apply(state: TableState, command: LobbyCommand,
                     ctx: LobbyContext) -> tuple[list[ev.LobbyEvent], TableState]: ...


def decide_and_apply(state: QueueState | TableState, command: LobbyCommand,
                     ctx: LobbyContext) -> tuple[list[ev.LobbyEvent], QueueState | TableState]:
    """:func:`decide` and the state after its events."""
    if isinstance(state, QueueState):
        qh = _QUEUE_HANDLERS.get(type(command))
        if qh is None:
            raise BadCommand(f"{type(command).__name__} is not a command of a room's queue")
        if getattr(command, "room", None) != state.room:
            raise BadCommand(f"command for room {getattr(command, 'room', None)!r} sent to the queue of {state.room!r}")
        b = _Builder(state, ev.queue_aggregate(state.room), command, ctx)
        qh(b, command)
        return b.events, b.state
    th = _TABLE_HANDLERS.get(type(command))
    if th is None:
        raise BadCommand(f"{type(command).__name__} is not a command of a table")
    if getattr(command, "table", None) != state.table:
        raise BadCommand(f"command for table {getattr(command, 'table', None)!r} sent to table {state.table!r}")
    if state.status == "new" and not isinstance(command, OpenTable):
        raise UnknownTable(f"no table {state.table!r}")
    if state.status == "closed":
        raise TableClosed(f"table {state.table} has closed ({state.close_reason})")
    b = _Builder(state, ev.table_aggregate(state.table), command, ctx)
    th(b, command)
    return b.events, b.state


def decide(state: QueueState | TableState, command: LobbyCommand, ctx: LobbyContext) -> list[ev.LobbyEvent]:
    """The events ``command`` causes in the queue or table ``state``, or a :class:`Rejected`."""
    return decide_and_apply(state, command, ctx)[0]


def route(queue: QueueState, player: str) -> str | None:
    """Where the room has ``player``: ``"queue"``, the id of their table, or None.

    >>> route(QueueState(room="r"), "a") is None
    True
    """
    if queue.waiting_of(player) is not None:
        return "queue"
    placed = queue.place_of(player)
    return placed.table if placed is not None else None


# ---- the queue --------------------------------------------------------------------------

_QUEUE_HANDLERS: dict[type[LobbyCommand], Callable[[_Builder, Any], None]] = {}
_TABLE_HANDLERS: dict[type[LobbyCommand], Callable[[_Builder, Any], None]] = {}


def _on(table: dict[type[LobbyCommand], Callable[[_Builder, Any], None]],
        t: type[LobbyCommand]) -> Callable[[Callable[[_Builder, Any], None]], Callable[[_Builder, Any], None]]:
    def register(fn: Callable[[_Builder, Any], None]) -> Callable[[_Builder, Any], None]:
        table[t] = fn
        return fn
    return register


def _pair(b: _Builder) -> None:
    """Seat the two oldest waiting players at a new table (``ctx.table_id``); in a ranked room
    the pair :func:`engine.lobby.skill.choose_pair` picks, if any."""
    q = b.queue
    if len(q.waiting) < 2:
        return
    cfg = b.ctx.room
    fallback = False
    if cfg is not None and cfg.ranked:
        pick = choose_pair(q.waiting, cfg, b.ctx.now_ms)
        if pick is None:
            return
        (a, c), fallback = pick.players, pick.fallback
    else:
        a, c = q.waiting[0].player, q.waiting[1].player
    table = b.ctx.table_id
    if table is None:
        raise BadCommand("two players wait and the context names no table id")
    b.emit(ev.TablePaired, table=table, players=(a, c), match=ev.match_of(table, 1), fallback=fallback)


@_on(_QUEUE_HANDLERS, Join)
def _join(b: _Builder, c: Join) -> None:
    q, cfg, now = b.queue, b.ctx.room, b.ctx.now_ms
    if cfg is None:
        raise UnknownRoom(f"no room {c.room!r}")
    placed = q.place_of(c.player)
    if placed is not None and placed.leaving:
        raise AlreadyPlaced(f"{c.player} is leaving table {placed.table}: join again once it has closed")
    if placed is not None and placed.away:
        raise AlreadyPlaced(f"{c.player} is away from table {placed.table}: come back to it (Returned) first")
    if q.waiting_of(c.player) is not None or placed is not None:
        return  # already here: nothing changes (the gateway tells them where they are)
    if b.ctx.elsewhere is not None:
        raise AlreadyPlaced(f"{c.player} is already in {b.ctx.elsewhere}: leave it first")
    if cfg.seat_level(b.ctx.balance) is None:
        low = cfg.levels[0]
        raise SeatRefused(f"this room needs {low.need} {cfg.mode} for level {low.level} (R-11.1)")
    cd = q.cooldown_of(c.player)
    if cd is not None and now < cd.until:
        wait = cd.until - now
        raise Cooldown(f"{c.player} left a table before its deal, or was not ready in time: join again in "
                       f"{(wait + 999) // 1000} s",
                       retry_after_ms=wait)
    b.emit(ev.PlayerQueued, player=c.player, since=now, reason="joined", rating=c.rating)
    _pair(b)


def _hand_on(b: _Builder, player: str, table: str | None, what: str) -> Any:
    if table is not None:
        raise BadCommand(f"a {what} naming a table goes to that table, not to the queue")
    return b.queue.place_of(player)


@_on(_QUEUE_HANDLERS, Leave)
def _queue_leave(b: _Builder, c: Leave) -> None:
    placed = _hand_on(b, c.player, c.table, "Leave")
    if b.queue.waiting_of(c.player) is not None:
        b.emit(ev.PlayerLeftQueue, player=c.player, reason="left")
    elif placed is not None:
        if not placed.leaving:
            b.emit(ev.LeaveRequested, player=c.player, table=placed.table)
    else:
        raise NotSeated(f"{c.player} is not in room {c.room} (send Join first)")


@_on(_QUEUE_HANDLERS, GraceExpired)
def _queue_grace(b: _Builder, c: GraceExpired) -> None:
    placed = _hand_on(b, c.player, c.table, "GraceExpired")
    if b.queue.waiting_of(c.player) is not None:
        b.emit(ev.PlayerLeftQueue, player=c.player, reason="disconnected")
    elif placed is not None and not placed.away:
        b.emit(ev.AwayNoted, player=c.player, table=placed.table, away=True)


@_on(_QUEUE_HANDLERS, Returned)
def _queue_back(b: _Builder, c: Returned) -> None:
    placed = _hand_on(b, c.player, c.table, "Returned")
    if placed is not None and placed.away:
        b.emit(ev.AwayNoted, player=c.player, table=placed.table, away=False)


@_on(_QUEUE_HANDLERS, QueueTimer)
def _queue_timer(b: _Builder, c: QueueTimer) -> None:
    q, bots, now = b.queue, b.ctx.bots, b.ctx.now_ms
    if bots is None:
        raise NotAllowed("no bots seat players in this deployment (gateway --bots)")
    if c.version != q.version:
        raise StaleCommand(f"the queue moved (version {q.version}) since the timer was set (version {c.version})")
    if not q.waiting or now - q.waiting[0].since < bots.after_ms:
        raise StaleCommand("nobody has waited long enough for a bot")
    cfg = b.ctx.room
    if cfg is not None and cfg.ranked and not overdue(cfg, q.waiting[0], now):
        raise StaleCommand("a ranked room's window is still widening (match_max_wait_seconds)")
    if b.ctx.table_id is None or b.ctx.bot_id is None:
        raise BadCommand("a bot's table needs a table id and a bot id in the context")
    oldest = q.waiting[0]
    b.emit(ev.BotSeated, table=b.ctx.table_id, player=oldest.player, bot=b.ctx.bot_id,
           bot_level=bots.level, match=ev.match_of(b.ctx.table_id, 1), waited_ms=now - oldest.since)


@_on(_QUEUE_HANDLERS, PairTimer)
def _pair_timer(b: _Builder, c: PairTimer) -> None:
    cfg = b.ctx.room
    if cfg is None:
        raise UnknownRoom(f"no room {c.room!r}")
    if not cfg.ranked:
        raise NotAllowed(f"room {c.room} is not ranked: it pairs whoever waits at once")
    _pair(b)


def _cool(b: _Builder, player: str) -> None:
    cfg, now = b.ctx.room, b.ctx.now_ms
    if cfg is None or cfg.leave_cooldown_seconds <= 0:
        return
    prev = b.queue.cooldown_of(player)
    fresh = prev is None or now >= prev.until + _ms(cfg.leave_cooldown_max_seconds)
    leaves = 1 if prev is None or fresh else prev.leaves + 1
    forget = now - FORGET_COOLDOWN_MS
    stale = any(c.until <= forget for p, c in b.queue.cooldowns if p != player)
    b.emit(ev.CooldownStarted, player=player, leaves=leaves, until=now + cooldown_ms(cfg, leaves),
           forget_before=forget if stale else None)


@_on(_QUEUE_HANDLERS, ReleaseTable)
def _release(b: _Builder, c: ReleaseTable) -> None:
    at = b.queue.at_table(c.table)
    if not at:
        return  # released already, or none of its players was ours
    b.emit(ev.TableReleased, table=c.table)
    cooled: list[str] = []
    for p in at:
        if p.player not in c.stayed:
            continue
        if p.leaving:
            b.emit(ev.LeftWithTable, player=p.player, table=c.table, reason="left")
            if not c.dealt:
                cooled.append(p.player)
        elif p.away:
            b.emit(ev.LeftWithTable, player=p.player, table=c.table, reason="disconnected")
        else:
            b.emit(ev.PlayerQueued, player=p.player, since=p.since, reason="opponent_left", rating=p.rating)
    mine = {p.player for p in at}
    for player in dict.fromkeys([*c.left_before_deal, *cooled]):  # each once, in order
        if player in mine:
            _cool(b, player)
    _pair(b)


# ---- the table ---------------------------------------------------------------------------

def _current(t: TableState, match: str) -> None:
    if match != t.match:
        raise StaleCommand(f"table {t.table} is at match {t.match}, not {match}")


#: the removals before a table's first deal that start the leaver's cooldown: a Leave, and the
#: ready clock's (R-13.2), else a player who never readies holds a seat again and again
_COOLED = ("left", "not_ready")


def _close(b: _Builder, removed: list[tuple[str, Any]]) -> None:
    """TableClosed: ``removed`` (with whoever left into the current match) leave the room;
    ``left_before_deal``: those of them who left, or were not ready, before its first deal."""
    t = b.table
    gone = dict(removed)
    for q in t.quit:
        gone.setdefault(q, "left")
    ordered = [(p, gone[p]) for p in t.players if p in gone]
    reason = ordered[0][1] if ordered else "abandoned"
    people = t.people
    b.emit(ev.TableClosed, reason=reason,
           removed=tuple((p, r) for p, r in ordered if p != t.bot),
           stayed=tuple(p for p in people if p not in gone), bot=t.bot, dealt=t.ever_dealt,
           left_before_deal=() if t.ever_dealt else tuple(p for p, r in ordered if r in _COOLED and p != t.bot))


@_on(_TABLE_HANDLERS, OpenTable)
def _open(b: _Builder, c: OpenTable) -> None:
    t, cfg = b.table, b.ctx.room
    if t.status != "new":
        raise BadCommand(f"table {t.table} is open already")
    if cfg is None:
        raise UnknownRoom(f"no room {c.room!r}")
    if c.players[0] == c.players[1]:
        raise BadCommand("a table seats two different players")
    if c.bot is not None and c.bot not in c.players:
        raise BadCommand("the bot must sit at its table")
    if c.match != ev.match_of(c.table, 1):
        raise BadCommand(f"a table's first match is {ev.match_of(c.table, 1)}")
    b.emit(ev.TableOpened, table=c.table, room=c.room, players=c.players, bot=c.bot,
           bot_level=c.bot_level, match=c.match, ready_ms=_ms(cfg.ready_seconds),
           grace_ms=_ms(cfg.reconnect_grace_seconds), private=c.private)


@_on(_TABLE_HANDLERS, ConfirmSeated)
def _confirm(b: _Builder, c: ConfirmSeated) -> None:
    t = b.table
    _current(t, c.match)
    if t.status != "creating":
        raise WrongPhase(f"match {c.match} of table {t.table} is seated already")
    b.emit(ev.MatchSeated, match=c.match)


def _running(t: TableState, match: str, player: str | None = None) -> None:
    _current(t, match)
    if t.status != "seated":
        raise WrongPhase(f"match {match} of table {t.table} is not running (status {t.status})")
    if player is not None and player not in t.players:
        raise NotSeated(f"{player} is not at table {t.table}")


@_on(_TABLE_HANDLERS, NoteReady)
def _note_ready(b: _Builder, c: NoteReady) -> None:
    t = b.table
    _running(t, c.match, c.player)
    if t.dealt:
        raise WrongPhase(f"match {c.match} is dealt already")
    if c.player not in t.ready:
        b.emit(ev.PlayerReadied, player=c.player, match=c.match)


@_on(_TABLE_HANDLERS, NoteDealt)
def _note_dealt(b: _Builder, c: NoteDealt) -> None:
    t = b.table
    _running(t, c.match)
    if not t.dealt:
        b.emit(ev.MatchDealt, match=c.match)


@_on(_TABLE_HANDLERS, Leave)
def _table_leave(b: _Builder, c: Leave) -> None:
    t = b.table
    if c.player not in t.players or c.player == t.bot:
        raise NotSeated(f"{c.player} is not at table {t.table}")
    if c.room != t.room:
        raise BadCommand(f"table {t.table} is in room {t.room}, not {c.room}")
    assert t.match is not None
    if c.player in t.quit or c.player in t.leaving:
        return  # decided already
    if t.status == "creating":
        _close(b, [(c.player, "left")])
    elif t.status == "seated":
        b.emit(ev.LeaveDeferred, player=c.player, match=t.match, escape=t.dealt)
    else:  # between: finished, not yet settled
        b.emit(ev.LeaveNoted, player=c.player, match=t.match)


@_on(_TABLE_HANDLERS, GraceExpired)
def _table_grace(b: _Builder, c: GraceExpired) -> None:
    t = b.table
    if c.player not in t.players:
        raise NotSeated(f"{c.player} is not at table {t.table}")
    if t.status == "seated" and c.player not in t.away:
        assert t.match is not None
        b.emit(ev.PlayerAway, player=c.player, match=t.match)


@_on(_TABLE_HANDLERS, Returned)
def _table_back(b: _Builder, c: Returned) -> None:
    t = b.table
    if c.player not in t.players:
        raise NotSeated(f"{c.player} is not at table {t.table}")
    if t.status == "seated" and c.player in t.away:
        assert t.match is not None
        b.emit(ev.PlayerBack, player=c.player, match=t.match)


@_on(_TABLE_HANDLERS, MatchEnded)
def _match_ended(b: _Builder, c: MatchEnded) -> None:
    t = b.table
    _current(t, c.match)
    if t.status == "between":
        raise WrongPhase(f"match {c.match} of table {t.table} has ended already")
    for p, _r in c.removed:
        if p not in t.players:
            raise NotSeated(f"{p} is not at table {t.table}")
    if c.outcome == "finished":
        if t.status != "seated" or not t.dealt:
            raise WrongPhase(f"match {c.match} was not dealt: it cannot have finished")
        if c.escaper is not None and c.escaper not in t.players:
            raise NotSeated(f"{c.escaper} is not at table {t.table}")
        b.emit(ev.MatchEnded, match=c.match, outcome="finished", escaper=c.escaper)
        return
    if t.dealt:
        raise WrongPhase(f"match {c.match} was dealt: it ends by its finish")
    gone = dict(c.removed)
    removed = list(c.removed) + [(q, "left") for q in t.quit if q not in gone]  # before the fold forgets them
    b.emit(ev.MatchEnded, match=c.match, outcome=c.outcome, removed=c.removed)
    _close(b, removed)


@_on(_TABLE_HANDLERS, Settle)
def _settle(b: _Builder, c: Settle) -> None:
    t = b.table
    _current(t, c.match)
    if t.status != "between":
        raise WrongPhase(f"match {c.match} of table {t.table} has not finished")
    b.emit(ev.MatchSettled, match=c.match, scores=dict(c.scores))
    t = b.table
    removed: list[tuple[str, Any]] = []
    if t.escaper is not None:
        removed.append((t.escaper, "escaped"))
    removed += [(p, "left") for p in t.leaving if p != t.escaper]
    if c.close:
        removed += [(p, "series_over") for p in t.players if p not in dict(removed) and p != t.bot]
        _close(b, removed)
    elif removed:
        _close(b, removed)
    else:
        b.emit(ev.NextMatchOffered, match=ev.match_of(t.table, t.n + 1))


@_on(_TABLE_HANDLERS, CloseTable)
def _close_table(b: _Builder, c: CloseTable) -> None:
    t = b.table
    if not t.private:
        raise BadCommand(f"table {t.table} is not a private table")
    if t.status == "between" or t.dealt:
        raise WrongPhase(f"table {t.table}'s match {t.match} is under way: it ends by its settlement")
    _close(b, [(p, "series_over") for p in t.people])
