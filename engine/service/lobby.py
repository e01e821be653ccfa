"""The lobby on the command service: a room's queue and its tables run through
:class:`engine.service.command_service.CommandService`, stored by a
:class:`engine.store.lobby_store.LobbyStore`, their process managers
(engine/lobby/managers.py) carrying each aggregate's events to the next one's commands.

:class:`LobbyEngine` holds the managers' commands in one FIFO line per target aggregate
(a queue, a table, a match) until :meth:`LobbyEngine.deliver` runs them, so any
interleaving of the targets can be driven (the property tests do); :meth:`LobbyEngine.drain`
runs them all.  Every manager command has a fixed id (the source event's aggregate, seq and
a tag), so a command run twice -- after a crash, by :meth:`LobbyEngine.recover` -- is the
store's duplicate and changes nothing.

What the context brings from outside (and the events record): the clock, an opaque table
id (:func:`new_table_id`), a bot's id and the ``--bots`` policy, the room's registered
config, the player's balance from the ledger.  The lobby learns a match's end from the
match's own events (:func:`engine.lobby.managers.from_match`), never from a player's stream,
and the settlement from the ledger (:meth:`LobbyEngine.settle_due`).
"""

from __future__ import annotations

import logging
import secrets
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from engine.lobby import commands as lc
from engine.lobby import events as ev
from engine.lobby import managers
from engine.lobby.decide import BotPolicy, LobbyContext, decide_and_apply
from engine.lobby.evolve import apply as lobby_apply
from engine.lobby.replay import replay_queue, replay_table
from engine.lobby.state import QueueState, TableState, decode_queue, encode_queue
from engine.match import commands as mc
from engine.match.errors import Rejected
from engine.service.command_service import CommandService, DictCache, Outcome
from engine.service.service import BalanceSource, RoomSource
from engine.store.base import Snapshot
from engine.store.lobby_store import AppendResult, LobbyStore

_log = logging.getLogger(__name__)


def new_table_id() -> str:
    """An opaque table id: ``t`` and 12 random hex digits (a match is ``<table>-<n>``)."""
    return "t" + secrets.token_hex(6)


def new_bot_id() -> str:
    """A bot's id: ``bot-`` and 12 random digits (:func:`engine.store.keys.is_bot_id`)."""
    return f"bot-{secrets.randbelow(10**12):012d}"


#: the queue's bot policy: fixed, or by room (``gateway --bots`` offers bots per room)
Bots = BotPolicy | Callable[[str], BotPolicy | None] | None
#: ``(player, room)``: the room (or private table) a player waits or sits in, if any (the
#: ``place`` read model, or a place another command claimed), ``room`` itself claimed for the
#: Join when they are nowhere (engine/service/place_claims.py): a Join elsewhere is refused
Places = Callable[[str, str], str | None]


#: a room's queue is saved every this many events, so whoever runs it next (a restart, a
#: new owner of its bucket) folds at most this many after the snapshot, not the room's life
QUEUE_SNAPSHOT_EVERY = 500


@dataclass(frozen=True)
class Snapshots:
    """How an aggregate kind's states are saved: the codec, and every how many events."""

    encode: Callable[[Any], bytes]
    decode: Callable[[bytes], Any]
    every: int

    def __post_init__(self) -> None:
        if self.every < 1:
            raise ValueError(f"snapshots every {self.every} events: needs at least 1")


QUEUE_SNAPSHOTS = Snapshots(encode_queue, decode_queue, QUEUE_SNAPSHOT_EVERY)


class LobbyStreams:
    """A :class:`LobbyStore` as the command service's :class:`Streams`; with ``snapshots``,
    the aggregate's state is saved each time an append reaches a multiple of
    ``snapshots.every`` and loads start from the newest one (:meth:`base`)."""

    def __init__(self, store: LobbyStore, snapshots: Snapshots | None = None):
        self.store = store
        self.snapshots = snapshots

    def load(self, ident: str, after: int = 0) -> list[Any]:
        return list(self.store.load(ident, after))

    def version(self, ident: str) -> int:
        return self.store.version(ident)

    def base(self, ident: str) -> Any | None:
        """The saved state to fold the rest of the stream on (None: none saved, or one this
        build cannot read: the whole stream is folded)."""
        if self.snapshots is None:
            return None
        snap = self.store.load_snapshot(ident)
        if snap is None:
            return None
        try:
            state = self.snapshots.decode(snap.state)
        except Exception:
            _log.warning("the snapshot of %s at v%d is unreadable: folding its whole stream", ident, snap.version)
            return None
        return state if getattr(state, "version", None) == snap.version else None

    def append(self, ident: str, expected_version: int, command_id: str, events: Sequence[Any],
               state: Any) -> AppendResult:
        result = self.store.append(ident, expected_version, command_id, events)
        snaps = self.snapshots
        if (snaps is not None and not result.duplicate and getattr(state, "version", None) == result.version
                and result.version // snaps.every > expected_version // snaps.every):
            try:
                self.store.save_snapshot(ident, Snapshot(result.version, snaps.encode(state)))
            except Exception:  # the next multiple saves one; a load folds a longer tail
                _log.exception("could not save the snapshot of %s at v%d", ident, result.version)
        return result

    def command_events(self, ident: str, command_id: str) -> list[Any]:
        return list(self.store.command_events(ident, command_id))


class QueueAggregate:
    """A room's queue: ``queue:<room>``."""

    def __init__(self, clock: Callable[[], int], rooms: RoomSource | None, balances: BalanceSource | None,
                 table_ids: Callable[[], str] = new_table_id, bots: Bots = None,
                 bot_ids: Callable[[], str] | None = None, places: Places | None = None,
                 ratings: Callable[[str, str], float | None] | None = None):
        self.clock, self.rooms, self.balances = clock, rooms, balances
        self.table_ids, self.bots = table_ids, bots
        self.bot_ids = bot_ids or new_bot_id
        self.places = places
        #: ranked rooms: the player's rating now, the Join's snapshot when it names none
        self.ratings = ratings

    def id_of(self, command: lc.LobbyCommand) -> str:
        return ev.queue_aggregate(getattr(command, "room"))

    def empty(self, ident: str) -> QueueState:
        return QueueState(room=ident.partition(":")[2])

    def version(self, state: QueueState) -> int:
        return state.version

    def replay(self, events: Sequence[Any], state: QueueState) -> QueueState:
        return replay_queue(state.room, events, state)

    def context(self, command: lc.LobbyCommand, state: QueueState) -> LobbyContext:
        cfg = self.rooms.get(state.room) if self.rooms is not None else None
        balance = 0
        if isinstance(command, lc.Join) and cfg is not None and self.balances is not None:
            balance = int(self.balances.balance(command.player, cfg.mode))
        bot = isinstance(command, lc.QueueTimer)
        bots = self.bots(state.room) if callable(self.bots) else self.bots
        elsewhere = None
        if isinstance(command, lc.Join) and self.places is not None:
            at = self.places(command.player, state.room)
            elsewhere = at if at and at != state.room else None
        return LobbyContext(now_ms=int(self.clock()), room=cfg, balance=balance, table_id=self.table_ids(),
                            bot_id=self.bot_ids() if bot else None, bots=bots, elsewhere=elsewhere)

    def command(self, command: lc.LobbyCommand) -> lc.LobbyCommand:
        """A ranked room's Join with the player's rating snapshot when it names none."""
        if isinstance(command, lc.Join) and command.rating is None and self.ratings is not None:
            cfg = self.rooms.get(command.room) if self.rooms is not None else None
            if cfg is not None and getattr(cfg, "ranked", False):
                rating = self.ratings(command.player, command.room)
                if rating is not None:
                    return command.model_copy(update={"rating": rating})
        return command

    def decide_and_apply(self, state: QueueState, command: lc.LobbyCommand,
                         ctx: LobbyContext) -> tuple[list[Any], QueueState]:
        events, new = decide_and_apply(state, command, ctx)
        return list(events), new


class TableAggregate:
    """A table: ``table:<id>``."""

    def __init__(self, clock: Callable[[], int], rooms: RoomSource | None):
        self.clock, self.rooms = clock, rooms

    def id_of(self, command: lc.LobbyCommand) -> str:
        return ev.table_aggregate(getattr(command, "table"))

    def empty(self, ident: str) -> TableState:
        return TableState(table=ident.partition(":")[2])

    def version(self, state: TableState) -> int:
        return state.version

    def replay(self, events: Sequence[Any], state: TableState) -> TableState:
        return replay_table(state.table, events, state)

    def context(self, command: lc.LobbyCommand, state: TableState) -> LobbyContext:
        room = getattr(command, "room", None) or state.room
        cfg = self.rooms.get(room) if self.rooms is not None and room else None
        return LobbyContext(now_ms=int(self.clock()), room=cfg)

    def decide_and_apply(self, state: TableState, command: lc.LobbyCommand,
                         ctx: LobbyContext) -> tuple[list[Any], TableState]:
        events, new = decide_and_apply(state, command, ctx)
        return list(events), new


class MatchRunner(Protocol):
    """What the lobby needs of the match service (engine.service.service.MatchService)."""

    def execute(self, command: mc.CommandBase) -> Any: ...

    def load_state(self, match_id: str) -> Any: ...


class SettlementSource(Protocol):
    def settlement(self, match_id: str) -> Any | None: ...


@dataclass(frozen=True)
class SeatCheck:
    """After a new match's CreateMatch and Sits (same line, so after them): were both seated?"""

    command_id: str
    table: str
    match: str
    players: tuple[str, ...]


Target = tuple[str, str]  # ("queue", room) | ("table", id) | ("match", id)


class LobbyEngine:
    """The lobby's aggregates and process managers over one store (the module docstring)."""

    def __init__(self, store: LobbyStore, matches: MatchRunner, *, clock: Callable[[], int],
                 rooms: RoomSource | None, balances: BalanceSource | None = None,
                 settlements: SettlementSource | None = None, bots: Bots = None,
                 table_ids: Callable[[], str] = new_table_id, bot_ids: Callable[[], str] | None = None,
                 places: Places | None = None, ratings: Callable[[str, str], float | None] | None = None,
                 on_event: Callable[[ev.LobbyEvent], None] | None = None, follow_appends: bool = True,
                 notes: Callable[[ev.LobbyEvent, TableState | None], None] | None = None,
                 queue_snapshots: Snapshots | None = QUEUE_SNAPSHOTS):
        self.store = store
        #: derive the managers' commands from each append this engine makes (True), or leave
        #: that to :class:`engine.service.lobby_feed.LobbyFeedManager` reading the feeds (False)
        self.follow_appends = follow_appends
        self.matches = matches
        self.settlements = settlements
        self.queues: CommandService[QueueState, lc.LobbyCommand] = CommandService(
            QueueAggregate(clock, rooms, balances, table_ids, bots, bot_ids, places, ratings),
            LobbyStreams(store, queue_snapshots), cache=DictCache())
        self.tables: CommandService[TableState, lc.LobbyCommand] = CommandService(
            TableAggregate(clock, rooms), LobbyStreams(store), cache=DictCache())
        self.pending: dict[Target, deque[Any]] = {}
        #: each lobby event once it is appended (the tests' watchers)
        self.on_event = on_event
        #: the players' lobby messages of each appended event, with the table's state after it
        #: (engine/service/lobby_notes.py: :class:`OutboxNotes` writes them to their streams)
        self.notes = notes
        #: a private table's settled match told to its series first (issue 39): True when the
        #: series is over with it, so the table closes instead of offering the next match
        self.series_settled: Callable[[TableState, Any], bool] | None = None

    # -- commands in ------------------------------------------------------------------------
    def submit(self, command: lc.LobbyCommand) -> Outcome[Any]:
        """A player's or a timer's command (Join, Leave, GraceExpired, Returned, QueueTimer) to
        the room's queue; the managers' follow-ups wait in :attr:`pending`."""
        if getattr(command, "table", None) is not None:
            raise ValueError("a player's command goes to the room's queue (table None)")
        agg = self.queues.aggregate
        if isinstance(agg, QueueAggregate):
            command = agg.command(command)
        return self._run_queue(command)

    def run_match(self, command: mc.CommandBase) -> Any:
        """A match command (a player's Ready or Play, a timer's) through the match service; the
        table hears of what it did (:func:`managers.from_match`)."""
        out = self.matches.execute(command)
        if self.follow_appends and getattr(out, "accepted", False) and not getattr(out, "duplicate", False) \
                and out.events:
            self._after_match(command.match_id, out)
        return out

    # -- the managers' lines ----------------------------------------------------------------
    def send(self, target: Target, command: Any) -> None:
        """Queue ``command`` on ``target``'s line (run by :meth:`deliver` / :meth:`drain`); once
        (a feed entry handled again derives the commands still waiting after a failure)."""
        line = self.pending.setdefault(target, deque())
        if command not in line:
            line.append(command)

    _send = send

    def deliver(self, target: Target) -> None:
        """Run the oldest command waiting for ``target``.  A command that raises (Redis away)
        goes back to the head of its line, and the line behind the others: what follows it on
        the line (a seat check after a CreateMatch) never runs before it."""
        line = self.pending.get(target)
        if not line:
            return
        command = line.popleft()
        if not line:
            del self.pending[target]
        kind = target[0]
        try:
            if kind == "queue":
                self._run_queue(command)
            elif kind == "table":
                self._run_table(command)
            elif isinstance(command, SeatCheck):
                self._seat_check(command)
            else:
                self.run_match(command)
        except Exception:
            rest = self.pending.pop(target, deque())
            rest.appendleft(command)
            self.pending[target] = rest
            raise

    def drain(self, limit: int = 100_000) -> None:
        """Run every waiting command (and what they cause) until the lines are empty."""
        for _ in range(limit):
            if not self.pending:
                return
            self.deliver(next(iter(self.pending)))
        raise RuntimeError("the lobby's process managers never went quiet")

    # -- running ----------------------------------------------------------------------------
    def _run_queue(self, command: lc.LobbyCommand) -> Outcome[Any]:
        out = self.queues.execute(command)
        if out.committed:
            for e in out.events:
                self._emit(e, None)
                if self.follow_appends:
                    self.follow_queue(out.state.room, e)
        return out

    def follow_queue(self, room: str, e: ev.LobbyEvent) -> None:
        """The tables' commands a queue event causes, on their lines."""
        for c in managers.from_queue(room, e):
            self._send(("table", getattr(c, "table")), c)

    def _run_table(self, command: lc.LobbyCommand) -> Outcome[Any]:
        out = self.tables.execute(command)
        if out.committed and out.before is not None:
            state = out.before
            for e in out.events:
                state = lobby_apply(state, e)
                self._emit(e, state)
            if self.follow_appends:
                self.follow_table(out.before, out.events)
        return out

    def follow_table(self, state: TableState, events: Sequence[ev.LobbyEvent]) -> None:
        """The match's and the queue's commands a table's ``events`` cause (``state``: the
        table before them), on their lines."""
        for e in events:
            private = e.private if isinstance(e, ev.TableOpened) else state.private
            for mcmd in managers.to_match(state, e):
                if private and isinstance(mcmd, mc.CreateMatch):
                    mcmd = self._private_match(mcmd, state.room or getattr(e, "room", ""))
                self._send(("match", mcmd.match_id), mcmd)
            if isinstance(e, (ev.TableOpened, ev.NextMatchOffered)):
                players = e.players if isinstance(e, ev.TableOpened) else state.players
                self._send(("match", e.match), SeatCheck(f"pm:{e.aggregate}:{e.seq}:confirm", state.table,
                                                         e.match, tuple(players)))
            state = lobby_apply(state, e)
            for c in managers.from_table(state, e):
                self._send(("queue", getattr(c, "room")), c)

    def _private_match(self, command: mc.CreateMatch, room: str) -> mc.CreateMatch:
        """A private table's match: created with the room's private config (no ladder rates
        it, issue 39); the room's name when the room is unknown (CreateMatch is refused then)."""
        rooms = getattr(self.queues.aggregate, "rooms", None)
        cfg = rooms.get(room) if rooms is not None else None
        if cfg is None:
            return command
        return mc.CreateMatch(command_id=command.command_id, match_id=command.match_id,
                              config=cfg.private_record())

    def _after_match(self, match: str, out: Any) -> None:
        table, sep, _n = match.rpartition("-")
        if not sep:
            return
        escaped = [s.player for s in out.state.seats if s is not None and s.escaped]
        for c in managers.from_match(table, match, out.events, escaped):
            self._send(("table", table), c)

    def _seat_check(self, check: SeatCheck) -> None:
        """ConfirmSeated when the engine seated both players; else the table's match ends
        before it began (a refused Sit: ``seat_refused``)."""
        m = self.matches.load_state(check.match)
        if m.phase in ("finished", "abandoned"):
            return  # it ended: the table hears of it from the match's events
        if m.version == 0:  # CreateMatch was refused (the room is not registered)
            self._send(("table", check.table), lc.MatchEnded(
                command_id=f"{check.command_id}:refused", table=check.table, match=check.match, outcome="removed",
                removed=tuple((p, "unknown_room") for p in check.players)))
            return
        seated = {s.player for s in m.seats if s is not None}
        missing = tuple(p for p in check.players if p not in seated)
        if not missing:
            self._send(("table", check.table), lc.ConfirmSeated(command_id=check.command_id, table=check.table,
                                                                match=check.match))
        elif m.phase in ("new", "seating"):
            self._send(("table", check.table), lc.MatchEnded(
                command_id=f"{check.command_id}:refused", table=check.table, match=check.match, outcome="removed",
                removed=tuple((p, "seat_refused") for p in missing)))

    def _emit(self, e: ev.LobbyEvent, table: TableState | None) -> None:
        for hook, args in ((self.on_event, (e,)), (self.notes, (e, table))):
            if hook is None:
                continue
            try:
                hook(*args)  # type: ignore[operator]
            except Exception:  # the event is stored: a lost message is a reader's resync
                _log.exception("a lobby hook failed for %s", type(e).__name__)

    # -- the settlement and recovery ----------------------------------------------------------
    def settle_due(self, tables: Sequence[str]) -> int:
        """Settle each of ``tables`` whose finished match the ledger settled (``Settle`` with
        the fixed id ``pm:<match>:settle``); how many were settled now."""
        n = 0
        if self.settlements is None:
            return 0
        for table in tables:
            t = self.tables.load(ev.table_aggregate(table))
            if t.status != "between" or t.match is None:
                continue
            s = self.settlements.settlement(t.match)
            if s is None:
                continue
            close = bool(t.private and self.series_settled is not None and self.series_settled(t, s))
            out = self._run_table(lc.Settle(command_id=f"pm:{t.match}:settle", table=table, match=t.match,
                                            scores=dict(getattr(s, "scores", {}) or {}), close=close))
            n += int(out.accepted and not out.duplicate)
        return n

    def recover(self, rooms: Sequence[str]) -> None:
        """What a crashed process had not done: every manager command again, from the stored
        streams of ``rooms``' queues, of every table and of their matches (fixed command ids:
        what was done is a duplicate).  The lines are rebuilt from scratch."""
        self.pending.clear()
        for room in rooms:
            for e in self.store.load(ev.queue_aggregate(room)):
                for c in managers.from_queue(room, e):
                    self._send(("table", getattr(c, "table")), c)
        for table in sorted(self.store.table_ids()):
            events = self.store.load(ev.table_aggregate(table))
            self.follow_table(TableState(table=table), events)
            t = replay_table(table, events)
            for n in range(1, t.n + 1):
                match = ev.match_of(table, n)
                m_events = self.matches.load_state(match)
                if m_events.version:
                    self._refeed_match(table, match)

    def _refeed_match(self, table: str, match: str) -> None:
        store = getattr(self.matches, "store", None)
        if store is None:
            return
        events = store.load(match)
        escaped: list[str] = []
        for c in managers.from_match(table, match, events, escaped):
            self._send(("table", table), c)

    # -- reading -----------------------------------------------------------------------------
    def queue(self, room: str) -> QueueState:
        return self.queues.load(ev.queue_aggregate(room))

    def table(self, table: str) -> TableState:
        return self.tables.load(ev.table_aggregate(table))


def is_rejection(out: Any, code: str) -> bool:
    """Whether an outcome was refused with ``code``."""
    rej: Rejected | None = getattr(out, "rejection", None)
    return rej is not None and rej.code == code
