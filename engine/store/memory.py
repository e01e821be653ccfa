"""In-process event store: the reference implementation of :class:`EventStore`.

Thread-safe (one lock); behaves exactly like the Redis store (the contract
suite runs both), including idempotent command ids, per-bucket feeds with the
same fields as the Redis feed, deadlines and snapshots.  Events are kept as the
(frozen) event objects themselves.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence

from engine.match.events import EventBase, MatchFinished, announced
from engine.store import keys
from engine.store.base import (
    AppendResult,
    Deadline,
    EventStore,
    FeedEntry,
    Snapshot,
    WrongVersion,
    check_append,
)


class InMemoryEventStore(EventStore):
    def __init__(self, buckets: int = keys.DEFAULT_BUCKETS, feed_maxlen: int = 100_000):
        if buckets < 1:
            raise ValueError("buckets must be >= 1")
        self.buckets = buckets
        self.feed_maxlen = feed_maxlen
        self._lock = threading.RLock()
        self._events: dict[str, list[EventBase]] = {}
        self._commands: dict[str, dict[str, tuple[int, int]]] = {}
        self._deadlines: dict[str, Deadline] = {}
        self._snapshots: dict[str, Snapshot] = {}
        self._feeds: dict[int, list[FeedEntry]] = {}
        self._feed_counter = 0

    # -- EventStore ---------------------------------------------------------------------
    def bucket_of(self, match_id: str) -> int:
        return keys.bucket_of(match_id, self.buckets)

    def append(self, match_id: str, expected_version: int, command_id: str,
               events: Sequence[EventBase], deadline: Deadline | None) -> AppendResult:
        check_append(match_id, expected_version, command_id, events, deadline)
        with self._lock:
            stream = self._events.get(match_id, [])
            commands = self._commands.get(match_id, {})
            seen = commands.get(command_id)
            if seen is not None:
                first, last = seen
                return AppendResult(version=last, duplicate=True, events=tuple(stream[first - 1:last]))
            if len(stream) != expected_version:
                raise WrongVersion(match_id, expected_version, len(stream))
            self._events[match_id] = stream
            self._commands[match_id] = commands
            stream.extend(events)
            version = len(stream)
            commands[command_id] = (expected_version + 1, version)
            bucket = self.bucket_of(match_id)
            if announced(events):
                self._feed_counter += 1
                feed = self._feeds.setdefault(bucket, [])
                feed.append(FeedEntry(id=f"{self._feed_counter}-0", match_id=match_id,
                                      first=expected_version + 1, last=version,
                                      finished=isinstance(events[-1], MatchFinished)))
                if len(feed) > self.feed_maxlen:
                    del feed[: len(feed) - self.feed_maxlen]
            if deadline is None:
                self._deadlines.pop(match_id, None)
            else:
                self._deadlines[match_id] = deadline
            return AppendResult(version=version, duplicate=False, events=tuple(events))

    def command_range(self, match_id: str, command_id: str) -> tuple[int, int] | None:
        with self._lock:
            return self._commands.get(match_id, {}).get(command_id)

    def load_range(self, match_id: str, first: int, last: int) -> list[EventBase]:
        with self._lock:
            return list(self._events.get(match_id, ())[max(first, 1) - 1:max(last, 0)])

    def load(self, match_id: str, after: int = 0) -> list[EventBase]:
        if after < 0:
            raise ValueError("after must be >= 0")
        with self._lock:
            return list(self._events.get(match_id, ())[after:])

    def version(self, match_id: str) -> int:
        with self._lock:
            return len(self._events.get(match_id, ()))

    def match_ids(self) -> Iterator[str]:
        with self._lock:
            ids = list(self._events)
        return iter(ids)

    def due_deadlines(self, now_ms: int, limit: int = 100) -> list[Deadline]:
        with self._lock:
            due = [d for d in self._deadlines.values() if d.at_ms <= now_ms]
        due.sort(key=lambda d: (d.at_ms, d.match_id.encode("utf-8")))
        return due[:limit]

    def deadline(self, match_id: str) -> Deadline | None:
        with self._lock:
            return self._deadlines.get(match_id)

    def save_snapshot(self, match_id: str, snapshot: Snapshot) -> None:
        with self._lock:
            self._snapshots[match_id] = snapshot

    def load_snapshot(self, match_id: str) -> Snapshot | None:
        with self._lock:
            return self._snapshots.get(match_id)

    def read_feed(self, bucket: int, after: str = "0-0", count: int = 1000) -> list[FeedEntry]:
        pos = keys.stream_pos(after)
        with self._lock:
            feed = list(self._feeds.get(bucket, ()))
        return [e for e in feed if keys.stream_pos(e.id) > pos][:count]
