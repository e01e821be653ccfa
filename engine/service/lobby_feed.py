"""The lobby's process managers following the feeds (docs/ARCHITECTURE.md "Process managers").

:class:`LobbyFeedManager` reads, with its own consumer group (``sk-lobby``), the bucket
feeds ``sk:{b<N>}:feed`` (each append of a table or a match, a match's moves and clock aside:
:func:`engine.match.events.announced`) and the rooms' feeds
``sk:{r:<room>}:feed`` (each append of a queue).  For every entry it loads the events the
entry names and runs what the managers of engine/lobby/managers.py derive from them,
through the command service (:class:`engine.service.lobby.LobbyEngine` in its
``follow_appends=False`` mode: the commands' own appends come back on the feeds):

* a queue's events → the tables' commands (open a paired table, hand on a Leave…);
* a table's events → the match's commands (CreateMatch, the Sits and the seat check, a
  Leave, an Escape…) and the queue's (release a closed table); a table left ``between``
  a finish and its settlement gets ``Settle`` once the ledger holds the settlement --
  until then the entry stays pending and is read again;
* a match ``<table>-<n>``'s events → the table's news (a Ready, the deal, the end).

Every command has a fixed id, so an entry handled twice (a crash before its XACK, a
redelivery) changes nothing: the entry is acknowledged only once all its commands ran.
So the lobby learns a match's end from the match's own events, whoever appended them (a
player's command on the inbox, a timer worker's ReadyTimeout), never from a player's stream.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from engine.lobby import events as ev
from engine.lobby import managers
from engine.lobby.evolve import apply as lobby_apply
from engine.lobby.replay import replay_table
from engine.lobby.state import TableState
from engine.match.events import HandDealt, MatchFinished
from engine.service.lobby import LobbyEngine
from engine.store import keys

_log = logging.getLogger(__name__)

GROUP = keys.LOBBY_GROUP

#: ``notes(event, table state after it or None, the queue's waiting count or None)``
Notes = Callable[[ev.LobbyEvent, "TableState | None", "int | None"], None]


def _s(v: Any) -> str:
    return v.decode("utf-8") if isinstance(v, bytes) else str(v)


class LobbyFeedManager:
    """Follow the feeds of ``buckets`` and of ``rooms()``' queues (the module docstring)."""

    def __init__(self, client: Any, engine: LobbyEngine, *, consumer: str = "lobby-1", group: str = GROUP,
                 buckets: Sequence[int] | None = None, rooms: Callable[[], Sequence[str]] = lambda: (),
                 notes: Notes | None = None):
        if engine.follow_appends:
            raise ValueError("the feed manager derives the follow-ups itself: LobbyEngine(follow_appends=False)")
        self.client = client
        self.engine = engine
        #: what each event changes outside the lobby's streams (the players' messages, the read
        #: models: engine/service/lobby_notes.py), written before the event is acted on
        self.notes = notes
        self._tables: dict[str, bool] = {}  # table id -> whether it is one of the lobby's
        #: matches this process saw dealt: after the deal only a finish matters to the table (a
        #: Ready, a removal and an abandon come before it; an escape ends in the finish, which
        #: names the escaper), so their other entries are acknowledged unread
        self._dealt: set[str] = set()
        self.consumer = consumer
        self.group = group
        self.buckets = list(buckets) if buckets is not None else list(range(engine.store.buckets))
        self.rooms = rooms
        self._groups: set[str] = set()
        #: private tables' series (engine/service/series_lobby.py :class:`SeriesLobby`), or None
        self.series: Any = None

    def _feeds(self) -> list[str]:
        return [keys.feed_key(b) for b in self.buckets] + [keys.room_feed_key(r) for r in self.rooms()]

    def _ensure(self, feed: str) -> None:
        if feed in self._groups:
            return
        from engine.store.redis_store import ensure_group

        ensure_group(self.client, feed, self.group)
        self._groups.add(feed)

    def run_once(self, count: int = 100) -> int:
        """Handle this consumer's pending entries, then new ones, of every feed (one stream per
        read: on a Cluster each feed has its own slot); how many entries were acknowledged."""
        from engine.store.redis_store import stream_replies

        done = 0
        for feed in self._feeds():
            self._ensure(feed)
            for start in ("0", ">"):
                reply = self.client.xreadgroup(self.group, self.consumer, {feed: start}, count=count)
                acked = []
                for _stream, entries in stream_replies(reply):
                    for entry_id, fields in entries:
                        if not fields or self.handle({_s(k): _s(v) for k, v in fields.items()}):
                            acked.append(entry_id)
                if acked:
                    self.client.xack(feed, self.group, *acked)
                    done += len(acked)
        return done

    def run_until_quiet(self, rounds: int = 1000) -> None:
        """:meth:`run_once` until a round acknowledges nothing (tests, a drain)."""
        for _ in range(rounds):
            if not self.run_once():
                return
        raise RuntimeError("the lobby's feeds never went quiet")

    # -- one entry ------------------------------------------------------------------------------
    def handle(self, f: dict[str, str]) -> bool:
        """Run what one feed entry asks of the lobby; False: not done yet (leave it pending).
        The entry's events are told (:attr:`notes`) before the commands they cause run, so
        whatever those commands tell a player comes after."""
        agg, first, last = f.get("match", ""), int(f.get("from", "0")), int(f.get("to", "0"))
        eng = self.engine
        if agg.startswith("series:"):
            if self.series is not None:
                self.series.follow(agg.partition(":")[2], first, last)
                eng.drain()
            return True
        if agg.startswith("queue:"):
            room = agg.partition(":")[2]
            events = self._slice(eng.store.load(agg, max(0, first - 1)), first, last)
            if self.notes is not None and events:
                waiting = len(eng.queue(room).waiting)
                for e in events:
                    self.notes(e, None, waiting)
            for e in events:
                eng.follow_queue(room, e)
        elif agg.startswith("table:"):
            table = agg.partition(":")[2]
            events = eng.store.load(agg)
            state = replay_table(table, events[:first - 1])
            fresh = self._slice(events, first, last)
            if self.notes is not None:
                after = state
                for e in fresh:
                    after = lobby_apply(after, e)
                    self.notes(e, after, None)
            eng.follow_table(state, fresh)
            eng.drain()
            if self.series is not None:
                self.series.from_table(replay_table(table, events[:last]), fresh)
            return self._settled(table)
        else:
            table, sep, _n = agg.rpartition("-")
            if not sep or not self._is_table(table):
                return True  # a match of no table (an operator's): nothing for the lobby
            if agg in self._dealt and f.get("fin") != "1":
                return True  # a dealt match's plays: the table hears only of its finish
            match_store = getattr(eng.matches, "store")
            events = self._slice(match_store.load(agg, max(0, first - 1)), first, last)
            if not events:
                return True
            if any(isinstance(e, HandDealt) for e in events):
                if len(self._dealt) > 100_000:
                    self._dealt.clear()
                self._dealt.add(agg)
            if any(isinstance(e, MatchFinished) for e in events):
                self._dealt.discard(agg)
            escaped: list[str] = []
            if any(isinstance(e, MatchFinished) for e in events):  # who escaped: named at the finish
                now = eng.matches.load_state(agg)
                escaped = [s.player for s in now.seats if s is not None and s.escaped]
            for c in managers.from_match(table, agg, events, escaped):
                eng.send(("table", table), c)
            if self.series is not None and table.startswith("s"):
                self.series.from_match(table, agg, events)
        eng.drain()
        return True

    def _is_table(self, table: str) -> bool:
        """Whether ``table`` is one of the lobby's (remembered both ways: a table is stored
        before its first match is created, so a match's prefix that is no table never becomes
        one -- an operator's or a simulation's match)."""
        known = self._tables.get(table)
        if known is None:
            if len(self._tables) > 100_000:
                self._tables.clear()
            known = self._tables[table] = bool(self.engine.store.version(ev.table_aggregate(table)))
        return known

    @staticmethod
    def _slice(events: Sequence[Any], first: int, last: int) -> list[Any]:
        return [e for e in events if first <= e.seq <= last]

    def _settled(self, table: str) -> bool:
        """A table between a finish and its settlement: Settle once the ledger has it (else
        False: the entry is read again)."""
        t = self.engine.table(table)
        if t.status != "between":
            return True
        self.engine.settle_due([table])
        return self.engine.table(table).status != "between"
