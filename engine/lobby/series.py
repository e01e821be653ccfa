"""A private table's series of hands as an aggregate (issue 39): ``series:<id>``, beside the
table and the queue (docs/ARCHITECTURE.md "The series").  Pure like the rest of
engine/lobby: the clock, the table's code, its table id and a bot's id enter only through
:class:`SeriesContext` and are recorded in the events.

Life of a series (``status``):

* ``open``: CreateTable → SeriesCreated (the owner sits; the code is the context's).  A
  JoinTable with the code → PlayerJoinedSeries (``playing``).  The JoinTimer at
  ``join_deadline`` (the room's ``private_join_seconds``): PlayerJoinedSeries(bot) where the
  owner allowed bots, else SeriesFinished(``not_joined``).  CancelTable by the owner before
  the first deal → SeriesFinished(``cancelled``).
* ``playing``: StartHand (the deal of hand n, a match ``<table>-<n>``) → HandStarted;
  SettleHand (its settlement) → HandSettled, then SeriesFinished: ``escaped`` after an
  escape (R-12), ``dissolved`` when a vote passed during the hand, ``completed`` after the
  last hand.  AbandonSeries (the table closed otherwise) → SeriesFinished(``abandoned``).
* A vote to end: RequestEnd → EndRequested (open until ``deadline``, the room's
  ``end_vote_seconds``; at most :data:`MAX_VOTES` per player per series; against a bot it
  passes at once); VoteEnd from the other player, or the VoteTimer at the deadline
  (agreed) → EndVoted.  Agreed between hands: SeriesFinished(``dissolved``) at once; during a
  hand: the series is ``dissolving`` and ends when that hand is settled.
* ``finished``: nothing more happens (SeriesFinished carries the standings).

The standings (:func:`standings`) are a projection over the settled hands: ``totals`` are
the sums of the hands' settlement scores.

No refusal's reason names the table's code or its owner (a stranger who names the series
learns neither).  Refusals (``code``): ``unknown_table`` (no such series, or a code that is not the
series'), ``table_full``, ``table_expired`` (the join time is over, or it ran out),
``table_cancelled``, ``table_closed`` (the series is over), ``not_owner``,
``table_started`` (a cancel after the first deal), ``no_vote_open``, ``not_your_vote``,
``vote_open``, ``vote_limit``; and the match's ``not_seated`` (not a player of the series),
``wrong_phase`` (a vote before the friend sat; a hand out of turn), ``stale`` (a timer or a
process manager's news that no longer applies), ``unknown_room``, ``already_placed``,
``seat_refused`` (R-11.1), ``bad_command``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from engine.config import RoomConfig
from engine.lobby import series_commands as sc
from engine.lobby import series_events as se
from engine.lobby.events import LobbyEvent
from engine.lobby.errors import (
    AlreadyPlaced,
    NotOwner,
    NotYourVote,
    NoVoteOpen,
    TableCancelled,
    TableClosed,
    TableExpired,
    TableFull,
    TableStarted,
    UnknownTable,
    VoteLimit,
    VoteOpen,
)
from engine.match.errors import (BadCommand, NotAllowed, NotSeated, Rejected, SeatRefused, StaleCommand, UnknownRoom,
                                 WrongPhase)
from engine.match.frozen import evolve

#: the most votes to end one player may start in one series
MAX_VOTES = 3

SeriesStatus = Literal["new", "open", "playing", "finished"]


# ---- state ------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Hand:
    """A settled hand: its number, match, scores, winner and each player's biggest bomb."""

    hand: int
    match: str
    scores: tuple[tuple[str, int], ...]
    winner: str | None = None
    bombs: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class Vote:
    """The open vote: the ``n``-th of the series, asked by ``by``, open until ``deadline``."""

    n: int
    by: str
    deadline: int


@dataclass(frozen=True, slots=True)
class SeriesState:
    series: str
    version: int = 0
    last_ts: int = 0
    status: SeriesStatus = "new"
    owner: str = ""
    room: str = ""
    code: str = ""
    table: str = ""
    hands: int = 0
    spectators: bool = False
    bots: bool = False
    join_deadline: int = 0
    vote_ms: int = 0
    players: tuple[str, ...] = ()  # the owner, then who joined
    bot: str | None = None
    bot_level: str | None = None
    current: str | None = None  # the running hand's match (started, not settled)
    played: tuple[Hand, ...] = ()  # the settled hands, in order
    started: int = 0  # hands started (dealt) so far
    vote: Vote | None = None
    votes: tuple[tuple[str, int], ...] = ()  # votes started per player (sorted by player)
    dissolving: bool = False  # a vote passed during a hand: the series ends at its settlement
    reason: se.FinishReason | None = None
    final: se.Standings | None = None  # the standings SeriesFinished recorded

    @property
    def hand(self) -> int:
        """The number of the running hand, else of the last one started (0: none yet)."""
        return self.started

    def votes_of(self, player: str) -> int:
        return dict(self.votes).get(player, 0)

    def other(self, player: str) -> str | None:
        """The other player of the series (None: nobody joined yet)."""
        rest = [p for p in self.players if p != player]
        return rest[0] if rest else None

    def deadline(self) -> tuple[str, int] | None:
        """The series' next timer: ``("join", at_ms)`` while nobody joined, ``("vote", at_ms)``
        while a vote is open, else None (the timer commands: JoinTimer, VoteTimer)."""
        if self.status == "open":
            return ("join", self.join_deadline)
        if self.status == "playing" and self.vote is not None:
            return ("vote", self.vote.deadline)
        return None

    def totals(self) -> dict[str, int]:
        """Each player's sum of the settled hands' scores (0 before any hand)."""
        out = {p: 0 for p in self.players}
        for h in self.played:
            for p, s in h.scores:
                out[p] = out.get(p, 0) + s
        return out


def standings(state: SeriesState) -> se.Standings:
    """The standings of the settled hands (a projection: ``totals`` are the sums of the hands'
    settlement scores)."""
    per_hand = tuple(se.HandScores(match=h.match, scores=dict(h.scores)) for h in state.played)
    won = {p: 0 for p in state.players}
    for h in state.played:
        if h.winner is not None:
            won[h.winner] = won.get(h.winner, 0) + 1
    by_player = {p: 0 for p in state.players}
    best = se.BiggestBomb()
    for h in state.played:
        for p, x in h.bombs:
            by_player[p] = max(by_player.get(p, 0), x)
            if x > best.xiang:
                best = se.BiggestBomb(player=p, xiang=x, match=h.match, hand=h.hand)
    return se.Standings(totals=state.totals(), per_hand=per_hand, hands_won=won,
                        biggest_bomb=best.model_copy(update={"by_player": by_player}))


def summary(state: SeriesState) -> dict[str, Any]:
    """The series as a ``settled`` message carries it after each hand (``{"series_id", "hand",
    "hands", "totals"}``), and a reconnect's resync."""
    return {"series_id": state.series, "hand": state.hand, "hands": state.hands, "totals": state.totals()}


# ---- apply ------------------------------------------------------------------------------------

Changes = dict[str, Any]
_APPLY: dict[type[se.SeriesEvent], Callable[[Any, SeriesState], Changes]] = {}


def _on_event(t: type[se.SeriesEvent]) -> Callable[[Callable[[Any, SeriesState], Changes]],
                                                   Callable[[Any, SeriesState], Changes]]:
    def register(fn: Callable[[Any, SeriesState], Changes]) -> Callable[[Any, SeriesState], Changes]:
        _APPLY[t] = fn
        return fn
    return register


def apply(state: SeriesState, event: LobbyEvent) -> SeriesState:
    """The state after ``event`` (no checks: decide made them)."""
    fn = _APPLY.get(type(event))  # type: ignore[arg-type]
    return evolve(state, version=event.seq, last_ts=event.ts, **(fn(event, state) if fn else {}))


@_on_event(se.SeriesCreated)
def _created(e: se.SeriesCreated, s: SeriesState) -> Changes:
    return {"status": "open", "owner": e.owner, "room": e.room, "code": e.code, "table": e.table,
            "hands": e.hands, "spectators": e.options.spectators, "bots": e.options.bots,
            "join_deadline": e.join_deadline, "vote_ms": e.vote_ms, "players": (e.owner,)}


@_on_event(se.PlayerJoinedSeries)
def _joined(e: se.PlayerJoinedSeries, s: SeriesState) -> Changes:
    return {"status": "playing", "players": s.players + (e.player,),
            "bot": e.player if e.bot else None, "bot_level": e.bot_level if e.bot else None}


@_on_event(se.HandStarted)
def _started(e: se.HandStarted, s: SeriesState) -> Changes:
    return {"current": e.match, "started": e.hand}


@_on_event(se.HandSettled)
def _settled(e: se.HandSettled, s: SeriesState) -> Changes:
    hand = Hand(e.hand, e.match, tuple(sorted(e.scores.items())), e.winner, tuple(sorted(e.bombs.items())))
    return {"current": None, "played": s.played + (hand,)}


@_on_event(se.EndRequested)
def _requested(e: se.EndRequested, s: SeriesState) -> Changes:
    counts = dict(s.votes)
    counts[e.by] = counts.get(e.by, 0) + 1
    return {"vote": Vote(e.vote, e.by, e.deadline), "votes": tuple(sorted(counts.items()))}


@_on_event(se.EndVoted)
def _voted(e: se.EndVoted, s: SeriesState) -> Changes:
    return {"vote": None, "dissolving": s.dissolving or e.agree}


@_on_event(se.SeriesFinished)
def _finished(e: se.SeriesFinished, s: SeriesState) -> Changes:
    return {"status": "finished", "reason": e.reason, "final": e.standings, "vote": None, "current": None}


def replay_series(series: str, events: Iterable[LobbyEvent], state: SeriesState | None = None) -> SeriesState:
    """The series after ``events`` (on top of ``state``; events at or below its version skipped)."""
    s = state if state is not None else SeriesState(series=series)
    for e in events:
        if e.seq > s.version:
            s = apply(s, e)
    return s


def check_series_stream(events: Sequence[LobbyEvent]) -> list[str]:
    """Readable problems of a stored series stream (empty: sound): one aggregate, seq 1, 2, 3…,
    SeriesCreated first, nothing after SeriesFinished, hands 1, 2, 3… each settled before the
    next starts and never more than the series' count, the recorded standings equal to the
    ones the hands give.  A stream is untrusted input: problems are reported, never raised.

    >>> check_series_stream([])
    ['the stream is empty']
    """
    if not events:
        return ["the stream is empty"]
    problems: list[str] = []
    agg = events[0].aggregate
    if not isinstance(events[0], se.SeriesCreated):
        problems.append(f"seq {events[0].seq}: a series' first event is {type(events[0]).__name__}, "
                        "not SeriesCreated")
    s = SeriesState(series=agg.partition(":")[2])
    for i, e in enumerate(events):
        where = f"seq {e.seq} ({type(e).__name__})"
        if e.seq != i + 1:
            problems.append(f"{where}: expected seq {i + 1} (gap or reordering)")
        if e.aggregate != agg:
            problems.append(f"{where}: aggregate {e.aggregate!r} differs from {agg!r}")
        if not isinstance(e, se.SeriesEvent):
            problems.append(f"{where}: not a series event")
            continue
        if s.status == "finished":
            problems.append(f"{where}: event after the series finished")
        if isinstance(e, se.HandStarted):
            if e.hand != s.started + 1 or s.current is not None or e.hand > s.hands:
                problems.append(f"{where}: hand {e.hand} out of order (started {s.started} of {s.hands}, "
                                f"running {s.current})")
        if isinstance(e, se.HandSettled) and (e.match != s.current or e.hand != s.started):
            problems.append(f"{where}: settles {e.match} (hand {e.hand}), the running hand is {s.current}")
        if isinstance(e, se.SeriesFinished) and e.standings != standings(s):
            problems.append(f"{where}: the recorded standings differ from the settled hands'")
        s = apply(s, e)
    return problems


# ---- decide -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class SeriesContext:
    """What a series' decide may know of the world (each recorded in the events it causes).

    ``room``: the room's registered config (CreateTable; None: not registered); ``code``: a
    fresh 6-character code from a cryptographic source (CreateTable); ``table_id``: the id of
    the table whose matches are the hands (CreateTable; None: the series' own id);
    ``bot_id`` / ``bot_level``: the bot a JoinTimer seats where the owner allowed bots;
    ``balance``: the player's balance in the room's mode (CreateTable, JoinTable: None skips
    the R-11.1 check, the match's Sit makes it anyway); ``elsewhere``: the player's place in
    another room or series (CreateTable, JoinTable).
    """

    now_ms: int
    room: RoomConfig | None = None
    code: str | None = None
    table_id: str | None = None
    bot_id: str | None = None
    bot_level: str = "normal"
    balance: int | None = None
    elsewhere: str | None = None


class _Builder:
    """The events of one decision, each applied so later checks see it."""

    def __init__(self, state: SeriesState, command: sc.SeriesCommand, ctx: SeriesContext):
        self.state = state
        self.command = command
        self.ctx = ctx
        self.events: list[se.SeriesEvent] = []

    def emit(self, cls: type[se.SeriesEvent], **fields: Any) -> None:
        e = cls(aggregate=se.series_aggregate(self.state.series), seq=self.state.version + 1, ts=self.ctx.now_ms,
                command_id=self.command.command_id, **fields)
        self.events.append(e)
        self.state = apply(self.state, e)

    def finish(self, reason: se.FinishReason) -> None:
        self.emit(se.SeriesFinished, reason=reason, standings=standings(self.state))


def _ms(seconds: float) -> int:
    return int(round(seconds * 1000))


_HANDLERS: dict[type[sc.SeriesCommand], Callable[[_Builder, Any], None]] = {}
#: the timers' and the process managers' commands: on a finished series they are ``stale``
_SYSTEM = (sc.JoinTimer, sc.VoteTimer, sc.StartHand, sc.SettleHand, sc.AbandonSeries)


def _handles(t: type[sc.SeriesCommand]) -> Callable[[Callable[[_Builder, Any], None]],
                                                    Callable[[_Builder, Any], None]]:
    def register(fn: Callable[[_Builder, Any], None]) -> Callable[[_Builder, Any], None]:
        _HANDLERS[t] = fn
        return fn
    return register


def _closed(s: SeriesState) -> Rejected:
    """The refusal of a player's command at a finished series."""
    if s.reason == "cancelled":
        return TableCancelled("this table was cancelled by its owner")
    if s.reason == "not_joined":
        return TableExpired("this table expired: nobody joined in time")
    return TableClosed(f"this table's series is over ({s.reason})")


def decide_and_apply(state: SeriesState, command: sc.SeriesCommand,
                     ctx: SeriesContext) -> tuple[list[se.SeriesEvent], SeriesState]:
    """:func:`decide` and the state after its events."""
    handler = _HANDLERS.get(type(command))
    if handler is None:
        raise BadCommand(f"{type(command).__name__} is not a command of a series")
    if command.series != state.series:
        raise BadCommand(f"command for series {command.series!r} sent to series {state.series!r}")
    if state.status == "new" and not isinstance(command, sc.CreateTable):
        if isinstance(command, _SYSTEM):
            raise StaleCommand(f"no series {state.series!r}")
        raise UnknownTable("no table has this code" if isinstance(command, sc.JoinTable)
                           else f"no table {state.series!r}")
    if state.status == "finished" and not isinstance(command, sc.CreateTable):
        if isinstance(command, _SYSTEM):
            raise StaleCommand(f"series {state.series} is over ({state.reason})")
        if isinstance(command, sc.JoinTable) and command.code.upper() != state.code:
            raise UnknownTable("no table has this code")
        if isinstance(command, sc.JoinTable) and command.player in state.players:
            return [], state  # seated there already: the standings are the answer
        raise _closed(state)
    b = _Builder(state, command, ctx)
    handler(b, command)
    return b.events, b.state


def decide(state: SeriesState, command: sc.SeriesCommand, ctx: SeriesContext) -> list[se.SeriesEvent]:
    """The events ``command`` causes in the series ``state``, or a typed :class:`Rejected`."""
    return decide_and_apply(state, command, ctx)[0]


def _admit(b: _Builder, player: str) -> None:
    cfg = b.ctx.room
    if b.ctx.elsewhere is not None:
        raise AlreadyPlaced(f"{player} is already in {b.ctx.elsewhere}: leave it first")
    if cfg is not None and b.ctx.balance is not None and cfg.seat_level(b.ctx.balance) is None:
        low = cfg.levels[0]
        raise SeatRefused(f"this room needs {low.need} {cfg.mode} for level {low.level} (R-11.1)")


@_handles(sc.CreateTable)
def _create(b: _Builder, c: sc.CreateTable) -> None:
    s, cfg = b.state, b.ctx.room
    if s.status != "new":
        raise BadCommand(f"series {s.series} exists already")
    if cfg is None:
        raise UnknownRoom(f"no room {c.room!r}")
    if cfg.name != c.room:
        raise BadCommand(f"the context's room is {cfg.name!r}, not {c.room!r}")
    code = b.ctx.code
    if code is None or len(code) != 6:
        raise BadCommand("a private table needs a 6-character code in the context")
    _admit(b, c.player)
    b.emit(se.SeriesCreated, series=s.series, owner=c.player, room=c.room, hands=c.hands,
           options=se.SeriesOptions(spectators=c.spectators, bots=c.bots), code=code.upper(),
           table=b.ctx.table_id or s.series, join_deadline=b.ctx.now_ms + _ms(cfg.private_join_seconds),
           vote_ms=_ms(cfg.end_vote_seconds))


@_handles(sc.JoinTable)
def _join(b: _Builder, c: sc.JoinTable) -> None:
    s = b.state
    if c.code.upper() != s.code:
        raise UnknownTable("no table has this code")
    if c.player in s.players:
        return  # seated here already: nothing changes
    if c.room is not None and c.room != s.room:
        raise NotAllowed(f"this token is for room {c.room!r}")
    if s.status != "open":
        raise TableFull("this table has its two players")
    if b.ctx.now_ms >= s.join_deadline:
        raise TableExpired("this table expired: nobody joined in time")
    _admit(b, c.player)
    b.emit(se.PlayerJoinedSeries, player=c.player)


@_handles(sc.JoinTimer)
def _join_timer(b: _Builder, c: sc.JoinTimer) -> None:
    s = b.state
    if s.status != "open":
        raise StaleCommand(f"series {s.series} was joined already")
    if b.ctx.now_ms < s.join_deadline:
        raise StaleCommand(f"series {s.series}'s join time runs until {s.join_deadline}")
    if not s.bots:
        b.finish("not_joined")
        return
    if b.ctx.bot_id is None:
        raise BadCommand("a bot's seat needs a bot id in the context")
    b.emit(se.PlayerJoinedSeries, player=b.ctx.bot_id, bot=True, bot_level=b.ctx.bot_level)


@_handles(sc.CancelTable)
def _cancel(b: _Builder, c: sc.CancelTable) -> None:
    s = b.state
    if c.player != s.owner:
        raise NotOwner("only the player who opened this table may cancel it")
    if s.started:
        raise TableStarted("the series has been dealt: end it by a vote (RequestEnd)")
    b.finish("cancelled")


def _player(s: SeriesState, player: str) -> None:
    if player not in s.players or player == s.bot:
        raise NotSeated(f"{player} is not a player of series {s.series}")
    if s.status != "playing":
        raise WrongPhase("nobody has joined this table yet (its owner may cancel it)")


def _passed(b: _Builder) -> None:
    """A vote agreed: the series ends now between hands, else at the running hand's settlement."""
    if b.state.current is None:
        b.finish("dissolved")


@_handles(sc.RequestEnd)
def _request(b: _Builder, c: sc.RequestEnd) -> None:
    s = b.state
    _player(s, c.player)
    if s.dissolving:
        return  # agreed already: the series ends with the running hand
    if s.vote is not None:
        raise VoteOpen(f"a vote to end asked by {s.vote.by} is open")
    if s.votes_of(c.player) >= MAX_VOTES:
        raise VoteLimit(f"{c.player} asked to end this series {MAX_VOTES} times already")
    n = sum(k for _p, k in s.votes) + 1
    b.emit(se.EndRequested, by=c.player, vote=n, deadline=b.ctx.now_ms + s.vote_ms)
    other = s.other(c.player)
    if other is not None and other == s.bot:  # a bot agrees at once
        b.emit(se.EndVoted, player=other, agree=True)
        _passed(b)


@_handles(sc.VoteEnd)
def _vote(b: _Builder, c: sc.VoteEnd) -> None:
    s = b.state
    _player(s, c.player)
    if s.vote is None:
        raise NoVoteOpen("no vote to end this series is open")
    if c.player == s.vote.by:
        raise NotYourVote(f"{c.player} asked for this vote: the other player answers it")
    b.emit(se.EndVoted, player=c.player, agree=c.agree)
    if c.agree:
        _passed(b)


@_handles(sc.VoteTimer)
def _vote_timer(b: _Builder, c: sc.VoteTimer) -> None:
    s = b.state
    if s.vote is None or s.vote.n != c.vote:
        raise StaleCommand(f"vote {c.vote} is not open")
    if b.ctx.now_ms < s.vote.deadline:
        raise StaleCommand(f"vote {c.vote} is open until {s.vote.deadline}")
    other = s.other(s.vote.by)
    assert other is not None  # a vote opens only once both sit
    b.emit(se.EndVoted, player=other, agree=True, timed_out=True)
    _passed(b)


@_handles(sc.StartHand)
def _start(b: _Builder, c: sc.StartHand) -> None:
    s = b.state
    if c.match == s.current:
        return  # told twice
    if s.status != "playing":
        raise WrongPhase(f"series {s.series} has one player: no hand can start")
    if s.current is not None:
        raise WrongPhase(f"hand {s.started} ({s.current}) is not settled yet")
    if any(h.match == c.match for h in s.played):
        raise StaleCommand(f"{c.match} is a settled hand of the series")
    if s.started >= s.hands:
        raise WrongPhase(f"the series has {s.hands} hands: all were dealt")
    if not c.match.startswith(f"{s.table}-"):
        raise BadCommand(f"{c.match} is not a match of the series' table {s.table}")
    b.emit(se.HandStarted, hand=s.started + 1, match=c.match)


@_handles(sc.SettleHand)
def _settle(b: _Builder, c: sc.SettleHand) -> None:
    s = b.state
    if any(h.match == c.match for h in s.played):
        return  # settled already
    if c.match != s.current:
        raise StaleCommand(f"{c.match} is not the running hand ({s.current})")
    people = set(s.players)
    for who in (*c.scores, *c.bombs, *(x for x in (c.winner, c.escaper) if x is not None)):
        if who not in people:
            raise BadCommand(f"{who} is not a player of the series")
    b.emit(se.HandSettled, hand=s.started, match=c.match, scores=dict(c.scores), winner=c.winner,
           bombs={p: x for p, x in c.bombs.items() if x > 0}, escaper=c.escaper)
    if c.escaper is not None:
        b.finish("escaped")
    elif b.state.dissolving:
        b.finish("dissolved")
    elif len(b.state.played) >= s.hands:
        b.finish("completed")


@_handles(sc.AbandonSeries)
def _abandon(b: _Builder, c: sc.AbandonSeries) -> None:
    b.finish("abandoned")
