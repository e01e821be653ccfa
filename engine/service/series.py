"""Private tables' series on the command service (issue 39): the series aggregate
(engine/lobby/series.py) run by :class:`engine.service.command_service.CommandService`, stored
by a :class:`engine.store.lobby_store.LobbyStore` (the lobby's streams and append script, the
code index), with what the pure domain may not do itself: the codes from a cryptographic
source (:func:`new_code`), the series ids, the clock, the room's config, the ledger's balance.

:class:`SeriesService` is the one entry point a gateway adapter or a process manager needs:

* :meth:`SeriesService.create`: CreateTable with a fresh code reserved in the index first
  (a code never names two series; another code is drawn on a collision);
* :meth:`SeriesService.join`: JoinTable by code (the index gives the series; an unknown code
  is refused ``unknown_table`` like a wrong one);
* :meth:`SeriesService.execute`: any other series command (CancelTable, RequestEnd,
  VoteEnd; the process managers' StartHand, SettleHand, AbandonSeries);
* :meth:`SeriesService.timer`: the due timer command of a series, with a fixed id
  (``timer:<series>:join`` / ``timer:<series>:vote:<n>``); every append records the series'
  next deadline in its bucket's lobby deadline index (``sk:{bN}:lobby:deadlines``, member
  ``series:<id>``), and :meth:`SeriesService.fire_due` runs what is due (a sweeper's round).

Each returns the command service's :class:`Outcome` (``rejection`` with its stable ``code``,
``events``, ``state``); :mod:`engine.service.series_notes` turns the events into the
players' messages.
"""

from __future__ import annotations

import hashlib
import re
import secrets
import threading
from collections.abc import Callable, Sequence
from typing import Any

from engine.lobby import series_commands as sc
from engine.lobby import series_events as se
from engine.lobby.errors import UnknownTable
from engine.lobby.series import SeriesContext, SeriesState, decide_and_apply, replay_series
from engine.match.errors import Rejected
from engine.service.command_service import CommandService, DictCache, Outcome
from engine.service.lobby import LobbyStreams
from engine.service.service import BalanceSource, RoomSource
from engine.store.lobby_store import AppendResult, LobbyStore

#: a private table's code: 6 characters of an alphabet without look-alikes (no 0/O, 1/I/L)
CODE_ALPHABET = "23456789ABCDEFGHJKMNPQRSTUVWXYZ"
CODE_LENGTH = 6
#: draws of a fresh code before giving up (31^6 ≈ 887 million codes: a collision is rare)
CODE_ATTEMPTS = 8
_CODE = re.compile(r"[A-Za-z0-9]{6}")


def new_code() -> str:
    """A fresh table code from the operating system's cryptographic source (:mod:`secrets`).

    >>> c = new_code()
    >>> len(c) == 6 and set(c) <= set(CODE_ALPHABET)
    True
    """
    return "".join(secrets.choice(CODE_ALPHABET) for _ in range(CODE_LENGTH))


def series_id_for(player: str, command_id: str) -> str:
    """The series a player's CreateTable opens: ``s`` and 12 hex digits of a hash of the player
    and the command id, so a retried CreateTable names the same series (the store answers it
    as a duplicate) instead of opening a second table.  Its table has the same id, so its
    hands are the matches ``<series>-<n>``.  Not a secret: joining takes the code.

    >>> series_id_for("a", "c1") == series_id_for("a", "c1") != series_id_for("b", "c1")
    True
    """
    return "s" + hashlib.sha256(f"{player}\0{command_id}".encode()).hexdigest()[:12]


class SeriesAggregate:
    """A series as the command service's :class:`Aggregate`: ``series:<id>``."""

    def __init__(self, clock: Callable[[], int], rooms: RoomSource | None, balances: BalanceSource | None = None,
                 bot_ids: Callable[[], str] | None = None, bot_level: str = "normal",
                 elsewhere: Callable[[str, str], str | None] | None = None):
        self.clock, self.rooms, self.balances = clock, rooms, balances
        self.bot_ids = bot_ids or (lambda: "bot-" + str(secrets.randbelow(10**9)))
        self.bot_level = bot_level
        self.elsewhere = elsewhere
        #: the code the next CreateTable records (set by :meth:`SeriesService.create`)
        self.next_code: str | None = None

    def id_of(self, command: sc.SeriesCommand) -> str:
        return se.series_aggregate(command.series)

    def empty(self, ident: str) -> SeriesState:
        return SeriesState(series=ident.partition(":")[2])

    def version(self, state: SeriesState) -> int:
        return state.version

    def replay(self, events: Sequence[Any], state: SeriesState) -> SeriesState:
        return replay_series(state.series, events, state)

    def context(self, command: sc.SeriesCommand, state: SeriesState) -> SeriesContext:
        room = command.room if isinstance(command, sc.CreateTable) else state.room
        cfg = self.rooms.get(room) if self.rooms is not None and room else None
        player = getattr(command, "player", None)
        seating = isinstance(command, (sc.CreateTable, sc.JoinTable)) and player is not None
        balance = None
        if seating and cfg is not None and self.balances is not None:
            balance = int(self.balances.balance(str(player), cfg.mode))
        elsewhere = self.elsewhere(str(player), command.series) if seating and self.elsewhere is not None else None
        bot = isinstance(command, sc.JoinTimer) and state.bots
        return SeriesContext(now_ms=int(self.clock()), room=cfg, code=self.next_code,
                             bot_id=self.bot_ids() if bot else None, bot_level=self.bot_level, balance=balance,
                             elsewhere=elsewhere)

    def decide_and_apply(self, state: SeriesState, command: sc.SeriesCommand,
                         ctx: SeriesContext) -> tuple[list[Any], SeriesState]:
        events, new = decide_and_apply(state, command, ctx)
        return list(events), new


class SeriesStreams(LobbyStreams):
    """The lobby's streams, each append recording the series' next timer (its join or vote
    deadline, :meth:`SeriesState.deadline`) in its bucket's lobby deadline index."""

    def append(self, ident: str, expected_version: int, command_id: str, events: Sequence[Any],
               state: Any) -> AppendResult:
        return self.store.append(ident, expected_version, command_id, events, deadline=state.deadline())


class SeriesService:
    """Private tables' series over one lobby store (the module docstring)."""

    def __init__(self, store: LobbyStore, *, clock: Callable[[], int], rooms: RoomSource | None,
                 balances: BalanceSource | None = None, codes: Callable[[], str] = new_code,
                 series_ids: Callable[[str, str], str] = series_id_for, bot_ids: Callable[[], str] | None = None,
                 bot_level: str = "normal", elsewhere: Callable[[str, str], str | None] | None = None):
        self.store = store
        self.codes = codes
        self._creating = threading.Lock()  # the code travels to the context through the aggregate
        self.series_ids = series_ids
        self.aggregate = SeriesAggregate(clock, rooms, balances, bot_ids, bot_level, elsewhere)
        self.service: CommandService[SeriesState, sc.SeriesCommand] = CommandService(
            self.aggregate, SeriesStreams(store), cache=DictCache())

    def create(self, command_id: str, player: str, room: str, hands: int, spectators: bool = False,
               bots: bool = False) -> Outcome[SeriesState]:
        """Open a private table: a new series with a fresh code (reserved in the index before its
        SeriesCreated is appended).  A bad ``hands`` raises :class:`BadCommand`."""
        series = self.series_ids(player, command_id)
        command = sc.parse_series_command({"type": "CreateTable", "command_id": command_id, "series": series,
                                           "room": room, "player": player, "hands": hands,
                                           "spectators": spectators, "bots": bots})
        for _ in range(CODE_ATTEMPTS):
            code = self.codes()
            if self.store.reserve_code(code, series):
                break
        else:
            raise RuntimeError(f"no free table code after {CODE_ATTEMPTS} draws")
        with self._creating:
            self.aggregate.next_code = code
            try:
                out = self.service.execute(command)
            finally:
                self.aggregate.next_code = None
        if not out.committed and out.state.code != code:  # refused, or a retry: its own code stays
            self.store.release_code(code, series)
        return out

    def series_of_code(self, code: str) -> str | None:
        return self.store.series_of_code(code)

    def join(self, command_id: str, player: str, code: str, room: str | None = None) -> Outcome[SeriesState]:
        """JoinTable by the code a friend typed or followed (``/t/<code>``); ``room``: the only
        room the player's token allows (None: any)."""
        series = self.store.series_of_code(code) if _CODE.fullmatch(code) else None
        if series is None:
            return Outcome("series:?", (), SeriesState(series="?"), UnknownTable("no table has this code"))
        return self.execute(sc.JoinTable(command_id=command_id, series=series, code=code, player=player, room=room))

    def execute(self, command: sc.SeriesCommand) -> Outcome[SeriesState]:
        return self.service.execute(command)

    def state(self, series: str) -> SeriesState:
        return self.service.load(se.series_aggregate(series))

    def timer(self, series: str) -> sc.SeriesCommand | None:
        """The timer command a series' current deadline asks for (None: no deadline); the
        caller runs it once the deadline passed (an early one is refused ``stale``)."""
        s = self.state(series)
        due = s.deadline()
        if due is None:
            return None
        if due[0] == "join":
            return sc.JoinTimer(command_id=f"timer:{series}:join", series=series)
        assert s.vote is not None
        return sc.VoteTimer(command_id=f"timer:{series}:vote:{s.vote.n}", series=series, vote=s.vote.n)

    def fire_due(self, now_ms: int, limit: int = 1000) -> list[Outcome[SeriesState]]:
        """Run the timer of every series whose recorded deadline is at or before ``now_ms``
        (the deadline sweeper's round; a late or repeated firing is a duplicate or ``stale``)."""
        out = []
        for due in self.store.due(now_ms, limit):
            kind, _, series = due.aggregate.partition(":")
            if kind != "series":
                continue
            command = self.timer(series)
            if command is not None:
                out.append(self.execute(command))
        return out


def rejection_code(out: Outcome[Any]) -> str | None:
    """The refusal's stable code of an outcome (None: accepted)."""
    rej: Rejected | None = out.rejection
    return None if rej is None else rej.code
