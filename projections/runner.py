"""The projection runner: follows the bucket feeds and keeps the ledger (docs/ARCHITECTURE.md "Projections").

Every append to a match notifies its bucket's feed (``sk:{b<N>}:feed``,
:mod:`engine.store.keys`), but for a match's moves and clock (a play, a pass, a timeout: no
finish among them, :func:`engine.match.events.announced`).  The runner reads the feeds
with a consumer group, and for each notification whose events include ``MatchFinished``
it loads the match, :func:`~projections.settlement.settle`\\ s it and applies the
settlement to the :class:`~projections.ledger.Ledger`; then it acknowledges the message.

Exactly once: the ledger's apply is atomic and idempotent per match id (the
settlement, the balance increments and the "settled" marker are one write),
and a message is acknowledged only after it was applied.  So

* a crash after reading and before applying → the message is redelivered
  (it is still pending) and applied then;
* a crash after applying and before acking → redelivered, the ledger says
  "already applied", nothing changes, the message is acked.

Feeds:

* :class:`RedisFeed` — consumer group ``sk-projections`` on every bucket feed (in serve,
  the new entries of the buckets the replica owns, :meth:`RedisFeed.follow`, and of every
  bucket once per ``sweep_every_s``, 5 s: those of a replica run with ``--no-projections``);
  each read first re-reads this consumer's own pending messages (what a crash
  left unacknowledged), optionally claims messages another consumer left
  pending too long (``XAUTOCLAIM``), then reads new ones: every bucket's
  read in one pipeline (one command per bucket, so it also works on Redis
  Cluster), one XACK per bucket per batch.  The append script marks each
  feed entry with whether it finished its match (field ``fin``): only those
  are read further (entries without the mark: the match's tail).
* :class:`MemoryFeed` — the same semantics over
  :class:`engine.store.memory.InMemoryEventStore` (embedded mode): the acked
  position per bucket lives in a dict that may outlive the runner.

Without a store at all, :func:`project_match` settles a list of events and
applies it to a ledger directly.

Errors (issue 11 §3): a *transient* failure (:func:`engine.store.transient.is_transient`:
OOM, LOADING, BUSY, READONLY, MASTERDOWN, TRYAGAIN, CLUSTERDOWN, a dropped
connection) leaves the entry pending and the runner retries with a capped
back-off; so does ``NOSCRIPT`` (the script cache flushed between redis-py's load and
its retry).  A *permanent* one (the ledger refused the settlement, the events
cannot be settled or decoded, a bug) moves that match's settlement aside
(:meth:`~projections.ledger.Ledger.park`, with its reason; metric
``shuangkou_settlements_parked_total``) and the runner goes on with the others.

Trimming (§4): the append never trims a feed.  :meth:`RedisFeed.trim` removes
only entries below what every consumer group of the feed has acknowledged
(the runner does it every ``trim_every_s``, when it has caught up, and when it
stops), so a stopped projection loses nothing and a settled match's feed entry
does not stay in Redis;
:func:`reconcile` (``shuangkou reconcile``, and periodically in serve) settles
finished matches that no feed entry announced any more, exactly once.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import NoScriptError

from engine.match.events import EventBase, MatchFinished, room_of
from engine.store import keys, wire
from engine.store.base import EventStore, FeedEntry
from engine.store.connect import is_cluster
from engine.store.redis_store import entry_pairs, stream_replies
from engine.store.transient import Backoff, is_transient
from projections.ledger import Ledger, LedgerRefused
from projections.settlement import Settlement, SettlementError, settle

log = logging.getLogger(__name__)


def _retry_later(exc: BaseException) -> bool:
    """A failure that leaves the entry pending (retried) instead of parking the settlement:
    a transient one, or NOSCRIPT -- the server's script cache was flushed (SCRIPT FLUSH, a
    restart, a fail-over) between redis-py's load and its second try; the next try loads it."""
    return is_transient(exc) or isinstance(exc, NoScriptError)

GROUP = "sk-projections"
_MORE_PENDING = "more"  # in RedisFeed._unacked: a pending re-read was full, read the bucket's pending again


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

    def ack_all(self, deliveries: Sequence[Delivery]) -> None:
        """Acknowledge ``deliveries`` (RedisFeed: one XACK per bucket, one round trip)."""
        for d in deliveries:
            self.ack(d)


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
                 buckets: int = keys.DEFAULT_BUCKETS, claim_idle_ms: int | None = 60_000,
                 feed_maxlen: int = 100_000, follow_owned: bool = False, sweep_every_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic):
        self.client = client
        #: kept for compatibility: :meth:`trim` now trims every feed below what every group
        #: acknowledged, whatever its length
        self.feed_maxlen = feed_maxlen
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
        #: per bucket, the entries read (and so pending on this consumer) and not acked yet:
        #: a bucket whose reads were all acknowledged needs no re-read of its pending entries
        self._unacked: list[set[str]] = [set() for _ in range(buckets)]
        #: read every feed with one XREADGROUP (one Redis), or a feed a command (a Cluster)
        self._together = not is_cluster(client)
        #: the buckets whose new entries are read: every one, or with ``follow_owned`` those
        #: :meth:`follow` names (a serve replica's owned buckets), and every one once per
        #: ``sweep_every_s`` (a bucket whose owner runs no projections is read by the others)
        self._followed: frozenset[int] = frozenset() if follow_owned else frozenset(range(buckets))
        self._follow_lock = threading.Lock()
        self._sweep_every_s = sweep_every_s
        self._clock = clock
        self._next_sweep = clock() + sweep_every_s

    def follow(self, bucket: int) -> FollowedBucket:
        """Read ``bucket``'s new entries from now on, until the returned handle's ``stop``
        (serve: while the replica holds the bucket's lease, so that on a Cluster each replica
        reads its own buckets' feeds five times a second, and every feed only once per
        ``sweep_every_s``).  Entries already delivered to this consumer are read again and
        handled whether or not it follows their bucket, and an entry a dead consumer left is
        claimed (``XAUTOCLAIM``) on every bucket."""
        with self._follow_lock:
            self._followed = self._followed | {bucket}
        return FollowedBucket(self, bucket)

    def unfollow(self, bucket: int) -> None:
        """Stop reading ``bucket``'s new entries (its pending ones are still handled)."""
        with self._follow_lock:
            self._followed = self._followed - {bucket}

    def ensure_groups(self) -> None:
        """Create the group on every bucket feed (from the start: replaying is harmless)."""
        import redis

        # one pipeline for every bucket (a group that exists answers BUSYGROUP: fine)
        pipe = self.client.pipeline(transaction=False)
        for b in range(self.buckets):
            pipe.xgroup_create(keys.feed_key(b), self.group, id="0", mkstream=True)
        for reply in pipe.execute(raise_on_error=False):
            if isinstance(reply, Exception) and not (isinstance(reply, redis.ResponseError)
                                                     and "BUSYGROUP" in str(reply)):
                raise reply
        self._ready = True

    def _parse(self, bucket: int, reply: Any, out: list[Delivery], empty: list[str]) -> None:
        for _stream, entries in reply or []:
            for entry_id, fields in entries:
                eid = _s(entry_id)
                if not fields:                      # trimmed from the stream (MAXLEN): nothing to do
                    empty.append(eid)
                    continue
                f = {_s(k): _s(v) for k, v in entry_pairs(fields)}
                fin = f.get("fin")  # set by the append script; absent on entries written before
                out.append(Delivery(bucket, FeedEntry(id=eid, match_id=f["match"],
                                                      first=int(f["from"]), last=int(f["to"]),
                                                      finished=None if fin is None else fin == "1")))

    def _claim_all(self) -> list[int]:
        """XAUTOCLAIM every bucket's entries idle longer than ``claim_idle_ms`` (a dead
        consumer's), in one pipeline; the buckets where entries were taken over.  A server without XAUTOCLAIM turns claiming off; any other error
        propagates (transient)."""
        pipe = self.client.pipeline(transaction=False)
        for b in range(self.buckets):
            pipe.xautoclaim(keys.feed_key(b), self.group, self.consumer, self.claim_idle_ms,
                            start_id="0-0", count=self._claim_count, justid=True)
        taken: list[int] = []
        for b, reply in enumerate(pipe.execute(raise_on_error=False)):
            if isinstance(reply, Exception):
                if "unknown command" in str(reply).lower():
                    log.warning("this Redis has no XAUTOCLAIM (< 6.2): idle entries of dead consumers "
                                "are not claimed")
                    self.claim_idle_ms = None
                    return taken
                raise reply
            if reply and len(reply) > 1 and reply[1]:
                taken.append(b)
        return taken

    def read(self, count: int = 100) -> list[Delivery]:
        """One batch of the feeds.  A feed whose group is gone (``NOGROUP``: its stream was
        deleted, the database flushed) gets the group again, from the start of what the
        stream holds now, and the read is made once more: the runner never stays stuck on
        a missing group (the ledger's apply is idempotent, so re-reading costs a no-op)."""
        import redis

        try:
            return self._read(count)
        except redis.ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            log.warning("projection runner: consumer group %s is gone from a feed (%s): creating it again",
                        self.group, exc)
            # create it again, and re-read every bucket's pending entries (what the failed
            # read delivered from the other buckets is pending on this consumer)
            self._ready = False
            self._maybe_pending = [True] * self.buckets
            self._unacked = [set() for _ in range(self.buckets)]
            return self._read(count)

    def _read(self, count: int) -> list[Delivery]:
        if not self._ready:
            self.ensure_groups()
        out: list[Delivery] = []
        claim = self.claim_idle_ms is not None and time.monotonic() >= self._next_claim
        if claim:
            # idle entries of a dead consumer: checked every quarter of the idle limit, not every poll
            self._claim_count = count
            for b in self._claim_all():
                self._maybe_pending[b] = True
            self._next_claim = time.monotonic() + (self.claim_idle_ms or 0) / 4000
        # every bucket's reads in one pipeline (one round trip; on Redis Cluster the pipeline is
        # split by node, each command stays on its bucket's slot): first this consumer's own
        # pending entries where there may be some, then new entries of the buckets that had none
        empty: dict[int, list[str]] = {}
        had_pending: set[int] = set()
        pending_buckets = [b for b in range(self.buckets) if self._maybe_pending[b]]
        if pending_buckets:
            for b, reply in zip(pending_buckets, self._read_feeds(pending_buckets, "0", count)):
                before = len(out)
                self._parse(b, reply, out, empty.setdefault(b, []))
                if len(out) > before:
                    had_pending.add(b)
                self._maybe_pending[b] = len(out) > before or bool(empty[b])
                self._unacked[b] = {d.entry.id for d in out[before:]}
                if len(out) - before + len(empty[b]) >= count:  # maybe more pending than one read holds
                    self._unacked[b].add(_MORE_PENDING)
        followed = self._followed
        if len(followed) < self.buckets and (now := self._clock()) >= self._next_sweep:
            followed = frozenset(range(self.buckets))
            self._next_sweep = now + self._sweep_every_s
        fresh_buckets = [b for b in range(self.buckets) if b in followed and b not in had_pending]
        if fresh_buckets and len(out) < count:
            # set before reading: should the reply be lost, what it delivered is pending on us
            was = {b: self._maybe_pending[b] for b in fresh_buckets}
            for b in fresh_buckets:
                self._maybe_pending[b] = True
            for b, reply in zip(fresh_buckets, self._read_feeds(fresh_buckets, ">", count)):
                before = len(out)
                self._parse(b, reply, out, empty.setdefault(b, []))
                self._maybe_pending[b] = was[b] or len(out) > before  # delivered to us: pending until acked
                self._unacked[b].update(d.entry.id for d in out[before:])
        if any(empty.values()):
            pipe = self.client.pipeline(transaction=False)
            for b, ids in empty.items():
                if ids:
                    pipe.xack(keys.feed_key(b), self.group, *ids)
            pipe.execute()
        return out

    def _read_feeds(self, buckets: Sequence[int], start: str, count: int) -> list[Any]:
        """XREADGROUP of ``buckets``' feeds from ``start`` (``"0"``: this consumer's pending
        entries, ``">"``: new ones), at most ``count`` entries a feed; per bucket, in order, a
        reply :meth:`_parse` reads.  On one Redis one XREADGROUP names every feed; on a Cluster
        (a feed a slot) one XREADGROUP a feed, in one pipeline split by node."""
        if not self._together:
            pipe = self.client.pipeline(transaction=False)
            for b in buckets:
                pipe.xreadgroup(self.group, self.consumer, {keys.feed_key(b): start}, count=count)
            return [stream_replies(reply) for reply in pipe.execute()]
        names = [keys.feed_key(b) for b in buckets]
        if wire.usable(self.client):  # packed, the raw reply (engine/store/wire.py)
            reply = wire.checked(self.client, [wire.pack("XREADGROUP", "GROUP", self.group, self.consumer,
                                                         "COUNT", count, "STREAMS", *names,
                                                         *(start for _ in names))])[0]
        else:
            reply = self.client.xreadgroup(self.group, self.consumer, {name: start for name in names}, count=count)
        by_feed = {_s(stream): entries for stream, entries in stream_replies(reply)}
        return [[(name, by_feed[name])] if name in by_feed else [] for name in names]

    def ack(self, delivery: Delivery) -> None:
        self.ack_all([delivery])

    def ack_all(self, deliveries: Sequence[Delivery]) -> None:
        by_bucket: dict[int, list[str]] = {}
        for d in deliveries:
            by_bucket.setdefault(d.bucket, []).append(d.entry.id)
        if not by_bucket:
            return
        if wire.usable(self.client):  # packed, one write (engine/store/wire.py)
            wire.checked(self.client, [wire.pack("XACK", keys.feed_key(b), self.group, *ids)
                                       for b, ids in by_bucket.items()])
        else:
            pipe = self.client.pipeline(transaction=False)
            for b, ids in by_bucket.items():
                pipe.xack(keys.feed_key(b), self.group, *ids)
            pipe.execute()
        for b, ids in by_bucket.items():  # every entry read from the bucket acked: nothing pending there
            left = self._unacked[b]
            left.difference_update(ids)
            if not left:
                self._maybe_pending[b] = False

    def trim(self) -> int:
        """Trim every bucket feed below the oldest entry some group still needs (issue 11 §4:
        only what every projection group acknowledged goes, whatever the feed's length);
        returns the entries removed.  Three pipelined round trips for all buckets:
        XINFO GROUPS, XPENDING where a group has pending entries, XTRIM MINID."""
        names = [keys.feed_key(b) for b in range(self.buckets)]
        pipe = self.client.pipeline(transaction=False)
        for key in names:
            pipe.xinfo_groups(key)
        infos = pipe.execute(raise_on_error=False)
        groups: dict[str, list[dict[str, Any]]] = {}
        for key, reply in zip(names, infos):
            if isinstance(reply, Exception):
                if is_transient(reply):
                    raise reply
                continue  # no such stream yet
            if reply:
                groups[key] = [{_s(k): v for k, v in g.items()} for g in reply]
        asks = [(key, _s(g["name"])) for key, gs in groups.items() for g in gs if int(g.get("pending", 0) or 0)]
        pending_min: dict[tuple[str, str], tuple[int, int]] = {}
        if asks:
            pipe = self.client.pipeline(transaction=False)
            for key, name in asks:
                pipe.xpending(key, name)
            for ask, reply in zip(asks, pipe.execute()):
                if reply and reply.get("pending"):
                    pending_min[ask] = keys.stream_pos(_s(reply["min"]))
        floors = {key: _floor(gs, functools.partial(_pending_of, pending_min, key)) for key, gs in groups.items()}
        if not floors:
            return 0
        pipe = self.client.pipeline(transaction=False)
        for key, (ms, n) in floors.items():
            pipe.xtrim(key, minid=f"{ms}-{n}", approximate=False)
        return sum(int(r) for r in pipe.execute())


class FollowedBucket:
    """One bucket a :class:`RedisFeed` follows (:meth:`RedisFeed.follow`); ``stop`` ends it."""

    def __init__(self, feed: RedisFeed, bucket: int):
        self.feed, self.bucket = feed, bucket

    def stop(self) -> None:
        self.feed.unfollow(self.bucket)


def _pending_of(pending_min: dict[tuple[str, str], tuple[int, int]], key: str, name: str) -> tuple[int, int] | None:
    return pending_min.get((key, name))


def _floor(groups: Sequence[dict[str, Any]],
           pending_min: Callable[[str], tuple[int, int] | None]) -> tuple[int, int]:
    """The oldest entry position that one of ``groups`` (XINFO GROUPS rows) still needs:
    the first not delivered yet, or the oldest delivered and still pending."""
    floor: tuple[int, int] | None = None
    for info in groups:
        ms, n = keys.stream_pos(_s(info["last-delivered-id"]))
        low = (ms, n + 1)  # everything up to the last delivered entry was handed out …
        pending = pending_min(_s(info["name"]))
        if pending is not None:
            low = min(low, pending)  # … and acknowledged unless pending
        floor = low if floor is None or low < floor else floor
    assert floor is not None
    return floor


def acknowledged_floor(client: Any, key: str) -> tuple[int, int] | None:
    """The oldest entry id of stream ``key`` that some consumer group still needs
    (not delivered yet, or delivered and pending), as ``(ms, n)``; None when the
    stream has no group (then nobody acknowledged anything: nothing may go)."""
    try:
        groups = client.xinfo_groups(key)
    except Exception as exc:  # no such stream
        if is_transient(exc):
            raise
        return None
    if not groups:
        return None
    rows = [{_s(k): v for k, v in g.items()} for g in groups]

    def pending_min(name: str) -> tuple[int, int] | None:
        row = next(r for r in rows if _s(r["name"]) == name)
        if not int(row.get("pending", 0) or 0):
            return None
        pending = client.xpending(key, name)
        return keys.stream_pos(_s(pending["min"])) if pending and pending.get("pending") else None

    return _floor(rows, pending_min)


def trim_acknowledged(client: Any, key: str) -> int:
    """XTRIM MINID ``key`` below :func:`acknowledged_floor`; the entries removed (0 without groups)."""
    floor = acknowledged_floor(client, key)
    if floor is None:
        return 0
    return int(client.xtrim(key, minid=f"{floor[0]}-{floor[1]}", approximate=False))


def project_match(events: Sequence[EventBase], ledger: Ledger) -> Settlement | None:
    """Settle a match from its events and apply it to ``ledger`` (idempotent).

    Returns the settlement (also when it was applied before), None when the
    match has not finished.
    """
    s = settle(events)
    if s is not None:
        ledger.apply_settlement(s.match_id, s)
    return s


@dataclass
class ProjectionRunner:
    """Feed → settle → ledger, acknowledging each message after it is applied.

    A message that cannot be projected for good (the ledger refuses the
    settlement, the match cannot be settled, its events cannot be read, a bug)
    parks the match's settlement (``ledger.park``) with its reason, is recorded
    in :attr:`errors` (and passed to ``on_error(match_id, reason)`` and
    ``on_parked(match_id, code, reason)``) and acknowledged: it never blocks the
    feed.  A transient Redis failure propagates and the message stays pending
    (:meth:`run_forever` retries with back-off).  Each settled match is passed to
    ``on_settled(settlement, applied, room)`` (``applied``: by this call; ``room``:
    :func:`engine.match.events.room_of` its events); an error there is logged, never parks the match.
    """

    store: EventStore
    ledger: Ledger
    feed: Feed
    on_settled: Callable[[Settlement, bool, str | None], None] | None = None
    errors: list[tuple[str, str]] = field(default_factory=list)
    on_error: Callable[[str, str], None] | None = None
    on_parked: Callable[[str, str, str], None] | None = None
    #: the ranked ladders (projections/ladders.py ``RatingProjector``): each settled match's
    #: events go to it after the ledger (idempotent per match, so a redelivery is harmless)
    ratings: Any = None

    def _park(self, match_id: str, code: str, reason: str) -> None:
        log.error("match %s cannot be settled (%s), parked: %s", match_id, code, reason)
        self.ledger.park(match_id, f"{code}: {reason}")  # transient errors propagate: stays pending
        self.errors.append((match_id, reason))
        for cb, args in ((self.on_error, (match_id, reason)), (self.on_parked, (match_id, code, reason))):
            if cb is not None:
                try:
                    cb(*args)  # type: ignore[operator]
                except Exception:
                    log.exception("a projection error callback failed")

    def settle_match(self, match_id: str, events: Sequence[EventBase] | None = None) -> Settlement | None:
        """Settle one match from its stored events and apply it (idempotent); park it on a
        permanent error.  None when it has not finished (or was parked)."""
        return self._settle(match_id, events)[0]

    def _settle(self, match_id: str, events: Sequence[EventBase] | None = None) -> tuple[Settlement | None, bool]:
        """:meth:`settle_match` and whether this call applied it (False: applied before, or none)."""
        try:
            events = self.store.load(match_id) if events is None else events
            s = settle(events)
            if s is None:
                return None, False
            applied = self.ledger.apply_settlement(match_id, s)
        except Exception as exc:
            if _retry_later(exc):
                raise
            if isinstance(exc, LedgerRefused):
                code = exc.code
            elif isinstance(exc, SettlementError):
                code = "unsettleable"
            else:
                log.exception("settling match %s failed", match_id)
                code = "error"
            self._park(match_id, code, f"{type(exc).__name__}: {exc}" if code == "error" else str(exc))
            return None, False
        if self.ratings is not None:
            try:
                self.ratings.project(list(events))
            except Exception as exc:
                if _retry_later(exc):
                    raise  # left pending: the ledger's apply is a no-op the next time
                log.exception("rating match %s failed", match_id)
        if self.on_settled is not None:
            try:
                self.on_settled(s, applied, room_of(events))
            except Exception:  # applied: a failing observer never parks the match
                log.exception("the settled callback failed for match %s", match_id)
        return s, applied

    def process(self, d: Delivery) -> Settlement | None:
        """Handle one message (without acking it).  Returns the settlement when
        the message finished a match."""
        match_id = d.entry.match_id
        if d.entry.finished is not None:  # the append script marked it: no read needed
            return self.settle_match(match_id) if d.entry.finished else None
        try:
            # MatchFinished is the last event a match ever gets, so this entry finished the
            # match only if its own last event is one: read from there, not from its first
            tail = self.store.load(match_id, after=max(d.entry.last - 1, 0))
        except Exception as exc:
            if _retry_later(exc):
                raise
            self._park(match_id, "unreadable", f"{type(exc).__name__}: {exc}")
            return None
        if not (tail and tail[0].seq == d.entry.last and isinstance(tail[0], MatchFinished)):
            return None
        return self.settle_match(match_id)

    def run_once(self, count: int = 100) -> int:
        """Process and acknowledge what the feed has now; the number of messages handled.
        A transient failure propagates (that message and the rest of the batch stay pending)."""
        batch = self.feed.read(count)
        done: list[Delivery] = []
        try:
            for d in batch:
                try:
                    self.process(d)
                except Exception as exc:
                    if _retry_later(exc):
                        raise  # left pending: redelivered once the store answers again
                    log.exception("feed entry %s of match %s failed", d.entry.id, d.entry.match_id)
                    self._park(d.entry.match_id, "error", f"{type(exc).__name__}: {exc}")
                done.append(d)
        finally:
            # what was applied is acknowledged together (one XACK per bucket); a crash before
            # this redelivers those entries, and the ledger's apply is idempotent per match
            if done:
                self.feed.ack_all(done)
        return len(batch)

    def drain(self, count: int = 100) -> int:
        """Run until the feed is empty; total messages handled."""
        total = 0
        while n := self.run_once(count):
            total += n
        return total

    def reconcile(self) -> ReconcileReport:
        """Settle every finished match of the store that has no settlement (:func:`reconcile`)."""
        return reconcile(self.store, self.ledger, runner=self)

    def run_forever(self, stop: threading.Event, idle_seconds: float = 0.2, count: int = 100,
                    reconcile_every_s: float | None = None, trim_every_s: float = 30.0,
                    on_reconciled: Callable[[ReconcileReport], None] | None = None,
                    trim_idle_s: float = 1.0, poll_seconds: float = 0.1) -> None:
        """Loop until ``stop``: read and apply; trim the acknowledged part of the feeds every
        ``trim_every_s``, when the feed is caught up after some work (at most every
        ``trim_idle_s``: three round trips for all buckets, so it costs nothing per command),
        and once more when stopping; reconcile every ``reconcile_every_s`` (None: never).
        Failures are retried with a capped exponential back-off (0.05 s … 5 s).

        A read that found fewer than ``count`` entries waits ``poll_seconds`` before the
        next one (``idle_seconds`` when it found none): under load each read then takes
        a batch of the feeds (two round trips: the read, the XACK), not one entry per
        poll -- the projections cost ≤ 0.3 round trips per command (issue 13 §2), and a
        settlement waits at most about ``poll_seconds`` more."""
        backoff = Backoff(first=0.05, cap=5.0)
        next_trim = time.monotonic() + trim_every_s
        last_trim = time.monotonic()
        handled_since_trim = 0
        # the first reconciliation soon after start (a restart after an outage), then every period
        next_reconcile = None if reconcile_every_s is None else time.monotonic() + min(reconcile_every_s, 30.0)
        trim = getattr(self.feed, "trim", None)
        while not stop.is_set():
            try:
                n = self.run_once(count)
                handled_since_trim += n
                now = time.monotonic()
                caught_up = n == 0 and handled_since_trim > 0 and now - last_trim >= trim_idle_s
                if callable(trim) and (now >= next_trim or caught_up):
                    trim()
                    handled_since_trim, last_trim, next_trim = 0, now, now + trim_every_s
                if next_reconcile is not None and reconcile_every_s is not None and now >= next_reconcile:
                    report = self.reconcile()
                    next_reconcile = now + reconcile_every_s
                    if on_reconciled is not None:
                        on_reconciled(report)
                backoff.reset()
                if n == 0:
                    stop.wait(idle_seconds)
                elif n < count and poll_seconds > 0:
                    stop.wait(poll_seconds)
            except Exception as exc:  # keep the projection alive; the message stays pending
                delay = backoff.next()
                if _retry_later(exc):  # the server's state (down, full, a flushed script): one line
                    log.warning("projection runner: Redis unavailable (%s), retrying in %.2fs", exc, delay)
                else:
                    log.exception("projection runner: batch failed, retrying in %.2fs", delay)
                stop.wait(delay)
        if callable(trim) and handled_since_trim:
            try:
                trim()  # what this runner acknowledged last need not outlive it
            except Exception as exc:  # stopping anyway; the next runner trims it
                log.warning("projection runner: final feed trim failed (%s)", exc)


@dataclass(frozen=True)
class ReconcileReport:
    """What :func:`reconcile` found: ``settled`` = finished matches it settled now
    (their feed entry was lost), ``parked`` = refused for good (see ``ledger.parked()``),
    ``unsettled_parked`` = finished matches left parked from before, ``checked`` = matches looked at."""

    checked: int
    settled: tuple[str, ...]
    parked: tuple[str, ...]
    unsettled_parked: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"checked": self.checked, "settled": list(self.settled), "parked": list(self.parked),
                "unsettled_parked": list(self.unsettled_parked)}


def _finished(store: EventStore, match_id: str) -> bool:
    """Whether the match's last event is MatchFinished (reads one event)."""
    version = store.version(match_id)
    if version == 0:
        return False
    tail = store.load(match_id, after=version - 1)
    return bool(tail) and isinstance(tail[-1], MatchFinished)


def reconcile(store: EventStore, ledger: Ledger, runner: ProjectionRunner | None = None,
              match_ids: Sequence[str] | None = None) -> ReconcileReport:
    """Find finished matches without a settlement and settle them, exactly once.

    Safe beside running projections and other reconcilers: the ledger's apply is
    atomic and idempotent per match id, so a race costs a no-op.  A parked match is
    left alone (an operator looks at it, ``ledger.unpark`` it, reconcile again).
    """
    runner = runner or ProjectionRunner(store, ledger, MemoryFeed(store))
    parked = set(ledger.parked())
    ids = list(store.match_ids()) if match_ids is None else list(match_ids)
    settled: list[str] = []
    newly_parked: list[str] = []
    left_parked: list[str] = []
    for mid in ledger.unsettled(ids):
        if not _finished(store, mid):
            continue
        if mid in parked:
            left_parked.append(mid)
            continue
        before = len(runner.errors)
        _s_, applied = runner._settle(mid)
        if applied:
            log.warning("reconcile: match %s was finished but not settled: settled now", mid)
            settled.append(mid)
        elif len(runner.errors) > before:
            newly_parked.append(mid)
    return ReconcileReport(checked=len(ids), settled=tuple(settled), parked=tuple(newly_parked),
                           unsettled_parked=tuple(left_parked))
