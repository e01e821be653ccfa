"""The projection runner: follows the bucket feeds and keeps the ledger (DESIGN.md "Projections").

Every append to a match notifies its bucket's feed (``sk:{b<N>}:feed``,
:mod:`engine.store.keys`).  The runner reads the feeds with a consumer group,
and for each notification whose events include ``MatchFinished`` it loads the
match, :func:`~projections.settlement.settle`\\ s it and applies the settlement
to the :class:`~projections.ledger.Ledger`; then it acknowledges the message.

Exactly once: the ledger's apply is atomic and idempotent per match id (the
settlement, the balance increments and the "settled" marker are one write),
and a message is acknowledged only after it was applied.  So

* a crash after reading and before applying → the message is redelivered
  (it is still pending) and applied then;
* a crash after applying and before acking → redelivered, the ledger says
  "already applied", nothing changes, the message is acked.

Feeds:

* :class:`RedisFeed` — consumer group ``sk-projections`` on every bucket feed;
  each read first re-reads this consumer's own pending messages (what a crash
  left unacknowledged), optionally claims messages another consumer left
  pending too long (``XAUTOCLAIM``), then reads new ones.  One call per
  bucket, so it also works on Redis Cluster.
* :class:`MemoryFeed` — the same semantics over
  :class:`engine.store.memory.InMemoryEventStore` (embedded mode): the acked
  position per bucket lives in a dict that may outlive the runner.

Without a store at all, :func:`project_match` settles a list of events and
applies it to a ledger directly.
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.match.events import EventBase, MatchFinished
from engine.store import keys
from engine.store.base import EventStore, FeedEntry
from projections.ledger import Ledger
from projections.settlement import Settlement, SettlementError, settle

log = logging.getLogger(__name__)

GROUP = "sk-projections"


@dataclass(frozen=True, slots=True)
class Delivery:
    """One feed message handed to the runner (acknowledge it with :meth:`Feed.ack`)."""

    bucket: int
    entry: FeedEntry


class Feed(ABC):
    """At-least-once delivery of feed notifications, acknowledged one by one."""

    @abstractmethod
    def read(self, count: int = 100) -> list[Delivery]:
        """Unacknowledged messages first (redeliveries), then new ones; oldest first per bucket."""

    @abstractmethod
    def ack(self, delivery: Delivery) -> None: ...


class MemoryFeed(Feed):
    """Feed of an in-memory store.  ``cursors`` (bucket → last acked id) may be
    shared with a later MemoryFeed to model a restart: everything not acked
    is delivered again."""

    def __init__(self, store: Any, cursors: dict[int, str] | None = None):
        self.store = store
        self.cursors = cursors if cursors is not None else {}

    def read(self, count: int = 100) -> list[Delivery]:
        out: list[Delivery] = []
        for b in range(self.store.buckets):
            if len(out) >= count:
                break
            for e in self.store.read_feed(b, after=self.cursors.get(b, "0-0"), count=count - len(out)):
                out.append(Delivery(b, e))
        return out

    def ack(self, delivery: Delivery) -> None:
        cur = self.cursors.get(delivery.bucket, "0-0")
        if keys.stream_pos(delivery.entry.id) > keys.stream_pos(cur):
            self.cursors[delivery.bucket] = delivery.entry.id


def _s(v: bytes | str) -> str:
    return v.decode("utf-8") if isinstance(v, bytes) else v


class RedisFeed(Feed):
    """Consumer-group reader of the bucket feed streams."""

    def __init__(self, client: Any, consumer: str = "ledger-1", group: str = GROUP,
                 buckets: int = keys.DEFAULT_BUCKETS, claim_idle_ms: int | None = 60_000):
        self.client = client
        self.consumer = consumer
        self.group = group
        self.buckets = buckets
        self.claim_idle_ms = claim_idle_ms
        self._ready = False
        # buckets that may hold entries delivered to this consumer and not acked yet:
        # all of them at start (a restart), then only those read from since the last
        # empty re-read or where XAUTOCLAIM took something over
        self._maybe_pending = [True] * buckets
        self._next_claim = 0.0  # monotonic time of the next XAUTOCLAIM round
        self._claim_count = 100

    def ensure_groups(self) -> None:
        """Create the group on every bucket feed (from the start: replaying is harmless)."""
        from engine.store.redis_store import ensure_group

        for b in range(self.buckets):
            ensure_group(self.client, keys.feed_key(b), self.group)
        self._ready = True

    def _parse(self, bucket: int, reply: Any, out: list[Delivery], empty: list[str]) -> None:
        for _stream, entries in reply or []:
            for entry_id, fields in entries:
                eid = _s(entry_id)
                if not fields:                      # trimmed from the stream (MAXLEN): nothing to do
                    empty.append(eid)
                    continue
                f = {_s(k): _s(v) for k, v in fields.items()}
                out.append(Delivery(bucket, FeedEntry(id=eid, match_id=f["match"],
                                                      first=int(f["from"]), last=int(f["to"]))))

    def _claim(self, key: str) -> bool:
        """XAUTOCLAIM this bucket's entries idle longer than ``claim_idle_ms`` (a dead
        consumer's); True when some were taken over.  Only a server without the
        command turns claiming off; any other error propagates (transient)."""
        import redis

        try:
            reply = self.client.xautoclaim(key, self.group, self.consumer, self.claim_idle_ms,
                                           start_id="0-0", count=self._claim_count, justid=True)
        except redis.ResponseError as exc:
            if "unknown command" not in str(exc).lower():
                raise
            log.warning("this Redis has no XAUTOCLAIM (< 6.2): idle entries of dead consumers are not claimed")
            self.claim_idle_ms = None
            return False
        return bool(reply and len(reply) > 1 and reply[1])

    def read(self, count: int = 100) -> list[Delivery]:
        if not self._ready:
            self.ensure_groups()
        out: list[Delivery] = []
        claim = self.claim_idle_ms is not None and time.monotonic() >= self._next_claim
        if claim:
            # idle entries of a dead consumer: checked every quarter of the idle limit, not every poll
            self._claim_count = count
            for b in range(self.buckets):
                if self.claim_idle_ms is None:
                    break
                if self._claim(keys.feed_key(b)):
                    self._maybe_pending[b] = True
            self._next_claim = time.monotonic() + (self.claim_idle_ms or 0) / 4000
        for b in range(self.buckets):
            if len(out) >= count:
                break
            key = keys.feed_key(b)
            empty: list[str] = []
            before = len(out)
            if self._maybe_pending[b]:
                pending = self.client.xreadgroup(self.group, self.consumer, {key: "0"}, count=count - len(out))
                self._parse(b, pending, out, empty)
                self._maybe_pending[b] = len(out) > before or bool(empty)
            if len(out) == before and len(out) < count:
                # set before reading: should the reply be lost, what it delivered is pending on us
                was, self._maybe_pending[b] = self._maybe_pending[b], True
                fresh = self.client.xreadgroup(self.group, self.consumer, {key: ">"}, count=count - len(out))
                self._parse(b, fresh, out, empty)
                self._maybe_pending[b] = was or len(out) > before  # delivered to us: pending until acked
            if empty:
                self.client.xack(key, self.group, *empty)
        return out

    def ack(self, delivery: Delivery) -> None:
        self.client.xack(keys.feed_key(delivery.bucket), self.group, delivery.entry.id)


def project_match(events: Sequence[EventBase], ledger: Ledger) -> Settlement | None:
    """Settle a match from its events and apply it to ``ledger`` (idempotent).

    Returns the settlement (also when it was applied before), None when the
    match has not finished.
    """
    s = settle(events)
    if s is not None:
        ledger.apply_settlement(s.match_id, s)
    return s


def _transient(exc: BaseException) -> bool:
    """A failure worth retrying (the store's Redis is down or busy), not one of the message."""
    try:
        import redis
    except ImportError:  # pragma: no cover
        return False
    return isinstance(exc, (redis.RedisError, OSError))


@dataclass
class ProjectionRunner:
    """Feed → settle → ledger, acknowledging each message after it is applied.

    A message that cannot be projected (the match cannot be settled, its events
    cannot be read, a bug) is recorded in :attr:`errors` (and passed to
    ``on_error(match_id, reason)``) and acknowledged: it must not block the feed.
    A Redis failure is transient: it propagates and the message stays pending.
    """

    store: EventStore
    ledger: Ledger
    feed: Feed
    on_settled: Callable[[Settlement, bool], None] | None = None
    errors: list[tuple[str, str]] = field(default_factory=list)
    on_error: Callable[[str, str], None] | None = None

    def _error(self, match_id: str, reason: str) -> None:
        log.error("match %s cannot be projected: %s", match_id, reason)
        self.errors.append((match_id, reason))
        if self.on_error is not None:
            try:
                self.on_error(match_id, reason)
            except Exception:
                log.exception("the on_error callback failed")

    def process(self, d: Delivery) -> Settlement | None:
        """Handle one message (without acking it).  Returns the settlement when
        the message finished a match."""
        match_id = d.entry.match_id
        # MatchFinished is the last event a match ever gets, so this entry finished the
        # match only if its own last event is one: read from there, not from its first
        tail = self.store.load(match_id, after=max(d.entry.last - 1, 0))
        if not (tail and tail[0].seq == d.entry.last and isinstance(tail[0], MatchFinished)):
            return None
        try:
            s = settle(self.store.load(match_id))
        except SettlementError as exc:
            # a match that cannot be settled would block the feed forever: record it and move on
            self._error(match_id, str(exc))
            return None
        if s is None:
            return None
        applied = self.ledger.apply_settlement(match_id, s)
        if self.on_settled is not None:
            self.on_settled(s, applied)
        return s

    def run_once(self, count: int = 100) -> int:
        """Process and acknowledge what the feed has now; the number of messages handled."""
        batch = self.feed.read(count)
        for d in batch:
            try:
                self.process(d)
            except Exception as exc:
                if _transient(exc):
                    raise  # left pending: redelivered once the store answers again
                log.exception("feed entry %s of match %s failed", d.entry.id, d.entry.match_id)
                self._error(d.entry.match_id, f"{type(exc).__name__}: {exc}")
            self.feed.ack(d)
        return len(batch)

    def drain(self, count: int = 100) -> int:
        """Run until the feed is empty; total messages handled."""
        total = 0
        while n := self.run_once(count):
            total += n
        return total

    def run_forever(self, stop: threading.Event, idle_seconds: float = 0.2, count: int = 100) -> None:
        while not stop.is_set():
            try:
                if self.run_once(count) == 0:
                    stop.wait(idle_seconds)
            except Exception:  # keep the projection alive; the message stays pending
                log.exception("projection runner: batch failed, retrying")
                stop.wait(idle_seconds)
