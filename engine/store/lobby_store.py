"""The streams of the lobby's aggregates (engine/lobby): a room's queue, its tables and the
private tables' series (engine/lobby/series.py, with the code index), stored like matches (docs/ARCHITECTURE.md "Redis layout").

An aggregate is named by the id its events carry (``queue:<room>``, ``table:<id>``,
engine/lobby/events.py; ``series:<id>``, engine/lobby/series_events.py, under the series'
bucket like a table, :func:`engine.store.keys.series_keys`).  An append goes through the match's own script (append.lua): the
command id (a retry is a duplicate), the expected version, the events, one notification on
the feed of the aggregate's tag -- a table's bucket feed ``sk:{b<N>}:feed``, a queue's room
feed ``sk:{r:<room>}:feed`` -- and the aggregate in the member set of its tag, all in one
slot (keys: :func:`engine.store.keys.table_keys`, :func:`engine.store.keys.queue_keys`).
A feed entry's ``match`` field holds the aggregate id and ``fin`` is ``0``: the projections
skip it.  A room's queue also keeps a snapshot (:meth:`LobbyStore.save_snapshot`, never over
a later one), and its events up to it may be archived and trimmed (:meth:`LobbyStore.trim`):
a stream's version is its last event's seq.

Two implementations behind one contract (tests/test_lobby_store.py runs both): in memory
and on Redis (a plain Redis, fakeredis with Lua, or a Redis Cluster).

>>> from engine.lobby.events import PlayerQueued
>>> s = InMemoryLobbyStore()
>>> e = PlayerQueued(aggregate="queue:points", seq=1, ts=5, command_id="c", player="a", since=5)
>>> s.append("queue:points", 0, "c", [e]).version, s.append("queue:points", 0, "c", [e]).duplicate
(1, True)
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from typing import Any

from engine.lobby.events import LobbyEvent, encode_lobby_event
from engine.lobby.series_events import decode_stored_event
from engine.store import keys, scripts
from engine.store.base import Snapshot, WrongVersion

PAGE = 500


@dataclass(frozen=True, slots=True)
class AppendResult:
    """What an append did (as :class:`engine.store.base.AppendResult`, with lobby events):
    ``version`` after it (after the original append on a duplicate), ``events`` appended
    now or the stored ones of a duplicate command id."""

    version: int
    duplicate: bool
    events: tuple[LobbyEvent, ...]


@dataclass(frozen=True, slots=True)
class Due:
    """A lobby aggregate's due deadline: its id, the kind (``join``, ``vote``), when, and the
    aggregate's version when it was recorded."""

    aggregate: str
    kind: str
    at_ms: int
    version: int


def check_lobby_append(aggregate: str, expected_version: int, command_id: str,
                       events: Sequence[LobbyEvent]) -> None:
    """Argument checks of every implementation (a caller bug: ValueError)."""
    keys.lobby_keys(aggregate)  # a table, a queue or a series
    if not command_id:
        raise ValueError("command_id must not be empty")
    if expected_version < 0:
        raise ValueError(f"expected_version must be >= 0, got {expected_version}")
    for i, e in enumerate(events):
        if e.aggregate != aggregate:
            raise ValueError(f"event {i} belongs to {e.aggregate!r}, not {aggregate!r}")
        if e.seq != expected_version + 1 + i:
            raise ValueError(f"event {i} has seq {e.seq}, expected {expected_version + 1 + i}")


class LobbyStore(ABC):
    """Append-only streams of queues and tables, with the match store's guarantees: an append
    is atomic, checks the command id before the expected version, and notifies the feed of
    the aggregate's tag; a stale expected version raises the match store's
    :class:`WrongVersion`."""

    buckets: int

    @abstractmethod
    def append(self, aggregate: str, expected_version: int, command_id: str,
               events: Sequence[LobbyEvent], deadline: tuple[str, int] | None = None) -> AppendResult:
        """Append ``events`` (seq expected_version+1 …) if the stream is at
        ``expected_version``; a command id seen before returns its original events with
        ``duplicate=True``; else :class:`WrongVersion`.  ``deadline``: the aggregate's next
        timer after the events, ``(kind, at_ms)``, recorded in its tag's lobby deadline index
        in the same atomic write (None clears it; a series' join or vote timer)."""

    @abstractmethod
    def load(self, aggregate: str, after: int = 0) -> list[LobbyEvent]:
        """Events with seq > ``after``, in order."""

    @abstractmethod
    def command_range(self, aggregate: str, command_id: str) -> tuple[int, int] | None:
        """The seqs ``(first, last)`` a command id appended (``first > last``: none), or None."""

    @abstractmethod
    def save_snapshot(self, aggregate: str, snapshot: Snapshot) -> bool:
        """Keep ``snapshot`` as the aggregate's state at its version, unless the kept one is
        at that version or a later one (False: a late save, dropped); a room's queue,
        engine/service/lobby.py."""

    @abstractmethod
    def load_snapshot(self, aggregate: str) -> Snapshot | None:
        """The aggregate's latest snapshot; its events after ``snapshot.version`` follow it."""

    @abstractmethod
    def trim(self, aggregate: str, through: int) -> int:
        """Drop the events with seq ≤ ``through``, the command ids that appended only those
        and (a room's queue) the room feed's entries of them, once archived (``shuangkou
        archive``), but never past :meth:`trim_point`; the events dropped.  A retry of a
        dropped command id is a new command."""

    @abstractmethod
    def first_kept(self, aggregate: str) -> int:
        """The seq of the oldest event the stream keeps (1 when none was trimmed; 1 for an
        empty stream)."""

    @abstractmethod
    def table_ids(self) -> Iterator[str]:
        """Every table the store holds (the ids, without ``table:``)."""

    @abstractmethod
    def delete_table(self, table: str) -> None:
        """Remove a table's stream, command ids and membership, and its read model
        (:func:`engine.store.keys.table_info_key`, when the store holds one) (``shuangkou archive``)."""

    def version(self, aggregate: str) -> int:
        events = self.load(aggregate)
        return events[-1].seq if events else 0

    def trim_point(self, aggregate: str, through: int) -> int:
        """How far :meth:`trim` may go: ``through``, the kept snapshot's version, the seq
        before the last event and what the lobby's feed follower has handled
        (:meth:`followed_through`), whichever is lowest, and back to the end of a command
        (a command's events stay together); 0: nothing."""
        snap = self.load_snapshot(aggregate)
        followed = self.followed_through(aggregate)
        upto = max(0, min(through, snap.version if snap is not None else 0, self.version(aggregate) - 1,
                          followed if followed is not None else through))
        while upto > 0:
            pair = self._between(aggregate, upto, upto + 1)
            if len(pair) < 2 or pair[0].command_id != pair[1].command_id:
                break
            upto -= 1
        return upto

    def followed_through(self, aggregate: str) -> int | None:
        """The last seq of the aggregate whose feed entries the lobby's feed follower
        (engine/service/lobby_feed.py, group ``sk-lobby``) has handled; None: no follower
        (events are followed as they are appended)."""
        return None

    @abstractmethod
    def _between(self, aggregate: str, first: int, last: int) -> list[LobbyEvent]:
        """The kept events with ``first`` ≤ seq ≤ ``last``."""

    @abstractmethod
    def due(self, now_ms: int, limit: int = 1000) -> list[Due]:
        """The bucket-tagged lobby aggregates (a series) whose recorded deadline is at or before
        ``now_ms``, oldest first: what a deadline sweeper runs the timer command of."""

    # -- private tables' series (engine/lobby/series.py) and their codes ----------------------
    @abstractmethod
    def series_ids(self) -> Iterator[str]:
        """Every series the store holds (the ids, without ``series:``)."""

    @abstractmethod
    def delete_series(self, series: str, code: str | None = None) -> None:
        """Remove a series' stream, command ids and membership, and its ``code`` from the
        index if it still names this series (``shuangkou archive``)."""

    @abstractmethod
    def reserve_code(self, code: str, series: str) -> bool:
        """Point the private-table code ``code`` at ``series`` unless another series holds it
        (False: draw another code).  Reserved before the series' SeriesCreated is appended, so
        a code never names two series; it stays until the series is archived."""

    @abstractmethod
    def series_of_code(self, code: str) -> str | None:
        """The series a code was reserved for (None: no table has this code)."""

    @abstractmethod
    def release_code(self, code: str, series: str) -> None:
        """Drop ``code`` from the index if it names ``series``."""

    def command_events(self, aggregate: str, command_id: str) -> list[LobbyEvent]:
        """The events a command id appended (empty: none, or never applied)."""
        seqs = self.command_range(aggregate, command_id)
        if seqs is None or seqs[0] > seqs[1]:
            return []
        return [e for e in self.load(aggregate, after=seqs[0] - 1) if e.seq <= seqs[1]]


class InMemoryLobbyStore(LobbyStore):
    """The reference implementation (thread-safe, one lock)."""

    def __init__(self, buckets: int = keys.DEFAULT_BUCKETS):
        self.buckets = buckets
        self._lock = threading.RLock()
        self._events: dict[str, list[LobbyEvent | None]] = {}  # index seq - 1; None: trimmed
        self._commands: dict[str, dict[str, tuple[int, int]]] = {}
        self._codes: dict[str, str] = {}
        self._deadlines: dict[str, tuple[str, int, int]] = {}  # aggregate -> (kind, at_ms, version)
        self._snapshots: dict[str, Snapshot] = {}

    def append(self, aggregate: str, expected_version: int, command_id: str,
               events: Sequence[LobbyEvent], deadline: tuple[str, int] | None = None) -> AppendResult:
        check_lobby_append(aggregate, expected_version, command_id, events)
        with self._lock:
            stream = self._events.setdefault(aggregate, [])
            cmds = self._commands.setdefault(aggregate, {})
            seen = cmds.get(command_id)
            if seen is not None:
                return AppendResult(version=seen[1], duplicate=True,
                                    events=tuple(e for e in stream[seen[0] - 1:seen[1]] if e is not None))
            if len(stream) != expected_version:
                raise WrongVersion(aggregate, expected_version, len(stream))
            stream.extend(events)
            cmds[command_id] = (expected_version + 1, len(stream))
            if deadline is None:
                self._deadlines.pop(aggregate, None)
            else:
                self._deadlines[aggregate] = (deadline[0], deadline[1], len(stream))
            return AppendResult(version=len(stream), duplicate=False, events=tuple(events))

    def due(self, now_ms: int, limit: int = 1000) -> list[Due]:
        with self._lock:
            due = sorted((at, agg, kind, v) for agg, (kind, at, v) in self._deadlines.items() if at <= now_ms)
        return [Due(agg, kind, at, v) for at, agg, kind, v in due[:limit]]

    def load(self, aggregate: str, after: int = 0) -> list[LobbyEvent]:
        with self._lock:
            return [e for e in self._events.get(aggregate, ())[max(after, 0):] if e is not None]

    def version(self, aggregate: str) -> int:
        with self._lock:
            return len(self._events.get(aggregate, ()))

    def first_kept(self, aggregate: str) -> int:
        with self._lock:
            stream = self._events.get(aggregate, [])
            return next((i + 1 for i, e in enumerate(stream) if e is not None), 1)

    def _between(self, aggregate: str, first: int, last: int) -> list[LobbyEvent]:
        with self._lock:
            return [e for e in self._events.get(aggregate, [])[max(first, 1) - 1:last] if e is not None]

    def trim(self, aggregate: str, through: int) -> int:
        with self._lock:
            upto = self.trim_point(aggregate, through)
            stream = self._events.get(aggregate, [])
            dropped = sum(1 for e in stream[:upto] if e is not None)
            stream[:upto] = [None] * upto
            cmds = self._commands.get(aggregate, {})
            for cid in [c for c, (_first, last) in cmds.items() if last <= upto]:
                del cmds[cid]
            return dropped

    def command_range(self, aggregate: str, command_id: str) -> tuple[int, int] | None:
        with self._lock:
            return self._commands.get(aggregate, {}).get(command_id)

    def save_snapshot(self, aggregate: str, snapshot: Snapshot) -> bool:
        keys.lobby_keys(aggregate)
        with self._lock:
            kept = self._snapshots.get(aggregate)
            if kept is not None and kept.version >= snapshot.version:
                return False
            self._snapshots[aggregate] = snapshot
            return True

    def load_snapshot(self, aggregate: str) -> Snapshot | None:
        with self._lock:
            return self._snapshots.get(aggregate)

    def table_ids(self) -> Iterator[str]:
        with self._lock:
            ids = [a[len("table:"):] for a, evs in self._events.items() if a.startswith("table:") and evs]
        return iter(ids)

    def delete_table(self, table: str) -> None:
        with self._lock:
            for part in (self._events, self._commands):
                part.pop(f"table:{table}", None)

    def series_ids(self) -> Iterator[str]:
        with self._lock:
            ids = [a[len("series:"):] for a, evs in self._events.items() if a.startswith("series:") and evs]
        return iter(ids)

    def delete_series(self, series: str, code: str | None = None) -> None:
        with self._lock:
            for part in (self._events, self._commands):
                part.pop(f"series:{series}", None)
            if code is not None:
                self.release_code(code, series)

    def reserve_code(self, code: str, series: str) -> bool:
        with self._lock:
            return self._codes.setdefault(code.upper(), series) == series

    def series_of_code(self, code: str) -> str | None:
        with self._lock:
            return self._codes.get(code.upper())

    def release_code(self, code: str, series: str) -> None:
        with self._lock:
            if self._codes.get(code.upper()) == series:
                del self._codes[code.upper()]


def _s(v: bytes | str) -> str:
    return v.decode("utf-8") if isinstance(v, bytes) else v


class RedisLobbyStore(LobbyStore):
    """Queues and tables on Redis, through append.lua (the script object is the match
    store's when ``events`` is given one: one script, one SCRIPT LOAD)."""

    def __init__(self, client: Any, buckets: int = keys.DEFAULT_BUCKETS, page: int = PAGE):
        kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
        if kwargs.get("decode_responses"):
            raise ValueError("RedisLobbyStore needs a client with decode_responses=False (events are bytes)")
        self.client = client
        self.buckets = buckets
        self.page = page
        self._append = client.register_script(scripts.load("append.lua"))
        self._save_snapshot = client.register_script(scripts.load("lobby_snapshot.lua"))

    def check_layout(self) -> None:
        """Record the bucket count, or refuse another recorded one (as the match store: a
        table's bucket is part of the layout)."""
        from engine.store.redis_store import RedisEventStore

        RedisEventStore(self.client, buckets=self.buckets).check_layout()

    def _keys(self, aggregate: str) -> tuple[str, str, str, str, str, str]:
        return keys.lobby_keys(aggregate, self.buckets)

    def append(self, aggregate: str, expected_version: int, command_id: str,
               events: Sequence[LobbyEvent], deadline: tuple[str, int] | None = None) -> AppendResult:

        from engine.store.redis_store import _wrong_version, append_fields

        check_lobby_append(aggregate, expected_version, command_id, events)
        payloads = [encode_lobby_event(e) for e in events]
        # ARGV as for a match: id, expected, command id, fin "0" (no match finishes), the deadline
        # ("" clears it; else at_ms and "<version>|<kind>|<at_ms>")
        at, info = "", ""
        if deadline is not None:
            at, info = str(deadline[1]), f"{expected_version + len(events)}|{deadline[0]}|{deadline[1]}"
        args: list[Any] = [aggregate, str(expected_version), command_id, "0", at, info, len(payloads), *payloads]
        fields = append_fields(self._append(keys=list(self._keys(aggregate)), args=args))
        wrong = _wrong_version(fields, aggregate, expected_version)
        if wrong is not None:
            raise wrong
        if fields["status"] == "ok":
            return AppendResult(version=fields["version"], duplicate=False, events=tuple(events))
        lo, hi = fields["first"], fields["last"]
        stored = self._range(aggregate, lo, hi) if hi >= lo else []
        return AppendResult(version=hi, duplicate=True, events=tuple(stored))

    def _range(self, aggregate: str, first: int, last: int | None) -> list[LobbyEvent]:
        stream = self._keys(aggregate)[0]
        end = "+" if last is None else keys.entry_id(last)
        out: list[LobbyEvent] = []
        start = f"{max(first, 1)}-0"
        while True:
            page = self.client.xrange(stream, min=start, max=end, count=self.page)
            out += [decode_stored_event(fields[b"e"]) for _id, fields in page]
            if len(page) < self.page:
                return out
            start = f"{keys.seq_of(page[-1][0]) + 1}-0"

    def load(self, aggregate: str, after: int = 0) -> list[LobbyEvent]:
        if after < 0:
            raise ValueError("after must be >= 0")
        return self._range(aggregate, after + 1, None)

    def version(self, aggregate: str) -> int:
        last = self.client.xrevrange(self._keys(aggregate)[0], count=1)
        return keys.seq_of(last[0][0]) if last else 0

    def command_range(self, aggregate: str, command_id: str) -> tuple[int, int] | None:
        raw = self.client.hget(self._keys(aggregate)[1], command_id)
        if raw is None:
            return None
        first, _, last = _s(raw).partition("-")
        return int(first), int(last)

    def command_events(self, aggregate: str, command_id: str) -> list[LobbyEvent]:
        seqs = self.command_range(aggregate, command_id)
        if seqs is None or seqs[0] > seqs[1]:
            return []
        return self._range(aggregate, seqs[0], seqs[1])

    def save_snapshot(self, aggregate: str, snapshot: Snapshot) -> bool:
        key = keys.lobby_snapshot_key(aggregate, self.buckets)
        return bool(self._save_snapshot(keys=[key], args=[snapshot.version, snapshot.state]))

    def load_snapshot(self, aggregate: str) -> Snapshot | None:
        version, state = self.client.hmget(keys.lobby_snapshot_key(aggregate, self.buckets), ["v", "s"])
        return None if version is None or state is None else Snapshot(int(version), bytes(state))

    def first_kept(self, aggregate: str) -> int:
        first = self.client.xrange(self._keys(aggregate)[0], count=1)
        return keys.seq_of(first[0][0]) if first else 1

    def _between(self, aggregate: str, first: int, last: int) -> list[LobbyEvent]:
        return self._range(aggregate, first, last)

    def followed_through(self, aggregate: str) -> int | None:
        """From the room feed's ``sk-lobby`` group: the seq before the ``from`` of the oldest
        entry it has not acknowledged (the first kept at or after its oldest pending one, or
        the first after what it has read); the stream's version when there is none; None
        without the feed or the group."""
        from engine.store.redis_store import entry_pairs, stream_replies

        feed = self._keys(aggregate)[2]
        if not self.client.exists(feed):
            return None
        rows = [{_s(k): v for k, v in g.items()} for g in self.client.xinfo_groups(feed)]
        group = next((g for g in rows if _s(g["name"]) == keys.LOBBY_GROUP), None)
        if group is None:
            return None
        firsts = []
        oldest = self.client.xpending(feed, keys.LOBBY_GROUP).get("min")
        if oldest is not None:
            firsts += self.client.xrange(feed, min=oldest, max="+", count=1)
        unread = stream_replies(self.client.xread({feed: group["last-delivered-id"]}, count=1))  # after the id
        firsts += [entry for _stream, entries in unread for entry in entries]
        froms = [int(dict(entry_pairs(fields))[b"from"]) for _id, fields in firsts]
        return min(froms) - 1 if froms else self.version(aggregate)

    def trim(self, aggregate: str, through: int) -> int:
        upto = self.trim_point(aggregate, through)
        stream, cmds = self._keys(aggregate)[:2]
        dropped = 0
        while True:  # the oldest first, a page at a time (XDEL by id: XTRIM MINID is Redis ≥ 6.2 only)
            ids = [i for i, _f in self.client.xrange(stream, min="-", max=keys.entry_id(upto), count=self.page)]
            if not ids:
                break
            dropped += int(self.client.xdel(stream, *ids))
        gone = []
        for cid, seqs in self.client.hscan_iter(cmds, count=self.page):
            if int(_s(seqs).partition("-")[2]) <= upto:
                gone.append(cid)
        for i in range(0, len(gone), self.page):
            self.client.hdel(cmds, *gone[i:i + self.page])
        if aggregate.startswith("queue:") and upto > 0:
            self._trim_room_feed(self._keys(aggregate)[2], upto)
        return dropped

    def _trim_room_feed(self, feed: str, upto: int) -> None:
        """Drop a room feed's entries of events at or below ``upto``: the lobby's feed
        follower handled them (:meth:`trim_point` stops before what it has not)."""
        from engine.store.redis_store import entry_pairs

        while True:
            page = self.client.xrange(feed, min="-", max="+", count=self.page)
            done = []
            for entry_id, fields in page:
                if int(dict(entry_pairs(fields))[b"to"]) > upto:
                    break
                done.append(entry_id)
            if done:
                self.client.xdel(feed, *done)
            if len(done) < self.page:
                return

    def table_ids(self) -> Iterator[str]:
        for b in range(self.buckets):
            for member in self.client.sscan_iter(keys.tables_key(b), count=500):
                yield _s(member)[len("table:"):]

    def delete_table(self, table: str) -> None:
        ks = keys.table_keys(table, self.buckets)
        pipe = self.client.pipeline(transaction=True)  # one slot: the table's bucket
        pipe.delete(ks[0], ks[1], keys.table_info_key(table, self.buckets))
        pipe.srem(ks[5], f"table:{table}")
        pipe.execute()

    def due(self, now_ms: int, limit: int = 1000) -> list[Due]:
        out: list[Due] = []
        for b in range(self.buckets):
            zkey, hkey = keys.series_keys_of_bucket(b)
            for member in self.client.zrangebyscore(zkey, "-inf", now_ms, start=0, num=limit):
                raw = self.client.hget(hkey, member)
                if raw is None:
                    continue
                version, kind, at = _s(raw).split("|")
                out.append(Due(_s(member), kind, int(at), int(version)))
        out.sort(key=lambda d: (d.at_ms, d.aggregate))
        return out[:limit]

    def series_ids(self) -> Iterator[str]:
        for b in range(self.buckets):
            for member in self.client.sscan_iter(keys.series_set_key(b), count=500):
                yield _s(member)[len("series:"):]

    def delete_series(self, series: str, code: str | None = None) -> None:
        ks = keys.series_keys(series, self.buckets)
        pipe = self.client.pipeline(transaction=True)  # one slot: the series' bucket
        pipe.delete(ks[0], ks[1])
        pipe.srem(ks[5], f"series:{series}")
        pipe.execute()
        if code is not None:
            self.release_code(code, series)

    def reserve_code(self, code: str, series: str) -> bool:
        key = keys.code_key(code, self.buckets)
        if self.client.set(key, series, nx=True):
            return True
        return self.series_of_code(code) == series  # a retry of this series' own reservation

    def series_of_code(self, code: str) -> str | None:
        raw = self.client.get(keys.code_key(code, self.buckets))
        return None if raw is None else _s(raw)

    def release_code(self, code: str, series: str) -> None:
        if self.series_of_code(code) == series:  # only this series' code (codes are never reused before)
            self.client.delete(keys.code_key(code, self.buckets))
