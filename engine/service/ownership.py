"""One owner per bucket: the serve replicas share the buckets under leases (issue 24 §3).

Every serve replica registers in ``sk:serve:replicas`` (a sorted set: replica name →
the ms its registration runs out, renewed every tick) and, of the live replicas sorted
by name, bucket ``b`` is *wanted* by replica ``b % n``.  A replica consumes a bucket's
channels (``sk:{b<N>}:inbox`` and ``sk:{b<N>}:ops``) only while it holds the bucket's
lease ``sk:{b<N>}:owner`` (``SET NX PX``, renewed every tick; engine/store/lease.py):

* **one owner**: a lease has one holder, so a match's commands are decided in order by
  one process, against its warm state cache: no append conflicts between replicas;
* **rebalancing**: a replica that starts registers, the others hand over the buckets it
  now wants (stop consuming them after the message in hand, acknowledge, drop the
  lease), it takes them at its next tick; a replica that stops hands all of its own over;
* **takeover**: a SIGKILLed replica stops renewing; its registration and its leases run
  out after ``ttl_ms`` (default 4 s) and the replicas that now want its buckets take them
  at their next tick (every ``tick_ms``, default 0.5 s): at most 4.5 s;
* **pending commands**: before a new owner reads a bucket's streams it claims every
  entry pending there for another consumer (XAUTOCLAIM, min idle 0, JUSTID: the delivery
  counts are kept) and handles them first, in stream order; their command ids make a
  re-run of a command that was decided but not acknowledged a duplicate (decided once).

The registry is one key (one slot on a Cluster): one pipeline of three commands per
replica per tick; the leases held are renewed with one more pipeline (one per node).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from engine.store import keys
from engine.store.lease import LeaseScripts
from engine.store.redis_errors import is_transient

log = logging.getLogger("shuangkou.ownership")

DEFAULT_TTL_MS = 4_000
DEFAULT_TICK_MS = 500


class BucketWork(Protocol):
    """What a replica runs for one bucket it owns (the bucket's consumer loops)."""

    def stop(self) -> None:
        """Finish the message in hand, acknowledge, return once nothing runs any more."""


def _stop_together(works: Sequence[BucketWork]) -> None:
    """Stop several buckets' work: each one that can (``begin_stop``) is told first, so their
    rounds in hand finish side by side, then each is waited for (:meth:`BucketWork.stop`)."""
    for w in works:
        begin = getattr(w, "begin_stop", None)
        if begin is not None:
            begin()
    for w in works:
        w.stop()


def wanted(bucket_count: int, live: Sequence[str], replica: str) -> set[int]:
    """The buckets ``replica`` should own among the ``live`` replicas (sorted by name, ``b % n``).

    >>> sorted(wanted(8, ["a", "b", "c"], "b"))
    [1, 4, 7]
    >>> wanted(4, [], "a") == set()
    True
    """
    ordered = sorted(set(live))
    if replica not in ordered:
        return set()
    i, n = ordered.index(replica), len(ordered)
    return {b for b in range(bucket_count) if b % n == i}


# KEYS[1]: stream; ARGV: group, consumer, start.  XAUTOCLAIM … JUSTID (redis-py drops the cursor
# of a JUSTID reply), answered by name: {"cursor", next start ("0-0": done), "ids", {claimed ids}}
_CLAIM_LUA = """
local r = redis.call('XAUTOCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, ARGV[3], 'COUNT', 500, 'JUSTID')
return {'cursor', r[1], 'ids', r[2]}
"""


def take_over_pending(client: Any, stream: str, group: str, consumer: str) -> int:
    """Claim every entry of ``stream`` pending for another consumer of ``group`` (a former owner's):
    XAUTOCLAIM, min idle 0, JUSTID (delivery counts kept).  Returns how many (0 when the stream
    or the group does not exist yet: nothing can be pending; the consumer creates the group)."""
    import redis

    from engine.store.replies import fields

    claim = client.register_script(_CLAIM_LUA)
    taken, start = 0, "0-0"
    while True:
        try:
            reply = fields(claim(keys=[stream], args=[group, consumer, start]))
        except redis.ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            return taken
        cursor = reply["cursor"]
        start = cursor.decode() if isinstance(cursor, bytes) else str(cursor)
        taken += len(reply["ids"])
        if start == "0-0":
            return taken


class BucketOwner:
    """Holds this replica's share of the bucket leases and runs ``start(bucket)`` for each one held.

    ``start(bucket) -> BucketWork`` begins consuming a bucket (after the pending entries were
    taken over); ``on_owned(n)`` reports how many buckets are held (the gauge
    ``shuangkou_buckets_owned``).  :meth:`run` ticks until ``stop`` is set, then hands
    every bucket over (stops its work, drops its lease) and unregisters.
    """

    def __init__(self, client: Any, replica: str, start: Callable[[int], BucketWork], *,
                 buckets: int = keys.DEFAULT_BUCKETS, ttl_ms: int = DEFAULT_TTL_MS, tick_ms: int = DEFAULT_TICK_MS,
                 on_owned: Callable[[int], None] | None = None):
        if tick_ms * 2 > ttl_ms:
            raise ValueError(f"the tick ({tick_ms} ms) must be at most half the lease TTL ({ttl_ms} ms)")
        self.client = client
        self.replica = replica
        self.start = start
        self.buckets = buckets
        self.ttl_ms = ttl_ms
        self.tick_ms = tick_ms
        self.on_owned = on_owned
        self.token = f"{replica}|{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.owned: dict[int, BucketWork] = {}
        self._leases = LeaseScripts(client)
        self._lock = threading.Lock()

    # -- one tick ----------------------------------------------------------------------
    def live_replicas(self, now_ms: int) -> list[str]:
        """Renew this replica's registration and list the live ones (expired ones removed)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.zadd(keys.REPLICAS, {self.replica: now_ms + self.ttl_ms})
        pipe.zremrangebyscore(keys.REPLICAS, "-inf", now_ms)
        pipe.zrange(keys.REPLICAS, 0, -1)
        *_, members = pipe.execute()
        return sorted(m.decode() if isinstance(m, bytes) else str(m) for m in members)

    def tick(self, now_ms: int | None = None) -> set[int]:
        """Register, hand over what another replica wants, renew the rest, take what is wanted
        and free; returns the buckets held after it."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        try:
            want = wanted(self.buckets, self.live_replicas(now_ms), self.replica)
        except Exception as exc:
            if not is_transient(exc):
                raise
            # the registry's node is away (a Cluster node cut off): no rebalancing now, but the
            # leases held on the other nodes are renewed, so their buckets go on (issue 35 §3)
            log.warning("serve replicas registry unavailable (%s); renewing the %d bucket(s) held",
                        exc, len(self.owned))
            want = set(self.owned)
        self._hand_over_all(sorted(set(self.owned) - want))
        held = sorted(want | set(self.owned))
        # every lease in one round trip (one per node on a Cluster); each bucket's reply its own
        for b, got in zip(held, self._leases.hold_many([keys.owner_key(b) for b in held], self.token, self.ttl_ms)):
            if isinstance(got, Exception):
                if not is_transient(got):
                    raise got
                log.warning("bucket %d: lease not renewed (%s); retrying next tick", b, got)
                continue
            if got == 0 and b in self.owned:  # expired and taken (a pause longer than the TTL)
                log.warning("bucket %d: lease lost to another replica; stopping its consumers", b)
                self._stop_work(b)
            elif got and b not in self.owned:
                try:
                    self._begin(b)
                except Exception:
                    self._leases.drop(keys.owner_key(b), self.token)
                    raise
        self._report()
        return set(self.owned)

    def _begin(self, b: int) -> None:
        work = self.start(b)
        with self._lock:
            self.owned[b] = work
        log.info("bucket %d: owned by %s", b, self.replica)

    def _stop_work(self, b: int) -> None:
        with self._lock:
            work = self.owned.pop(b, None)
        if work is not None:
            work.stop()

    def hand_over(self, b: int) -> None:
        """Stop consuming bucket ``b`` (its message in hand finished and acknowledged), drop its lease."""
        self._hand_over_all([b])

    def _hand_over_all(self, buckets: Sequence[int]) -> None:
        """:meth:`hand_over` of several buckets: their work stopped together (the rounds in
        hand finish side by side), then their leases dropped in one round trip per node."""
        if not buckets:
            return
        with self._lock:
            works = [self.owned.pop(b) for b in buckets if b in self.owned]
        _stop_together(works)
        try:
            dropped: list[Any] = list(self._leases.drop_many([keys.owner_key(b) for b in buckets], self.token))
        except Exception as exc:
            dropped = [exc] * len(buckets)
        for b, r in zip(buckets, dropped):
            if isinstance(r, Exception):  # it expires by itself
                log.warning("bucket %d: lease not dropped (%s); it runs out in %d ms", b, r, self.ttl_ms)
            log.info("bucket %d: handed over by %s", b, self.replica)

    def _report(self) -> None:
        if self.on_owned is not None:
            self.on_owned(len(self.owned))

    # -- the loop ----------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        """Tick every ``tick_ms`` until ``stop``; transient Redis failures are waited out."""
        delay = self.tick_ms / 1000
        try:
            while not stop.is_set():
                try:
                    self.tick()
                    delay = self.tick_ms / 1000
                except Exception as exc:
                    if is_transient(exc):
                        log.warning("bucket leases: %s (retrying in %.2fs)", exc, delay)
                    else:
                        log.exception("bucket leases: tick failed (retrying in %.2fs)", delay)
                    delay = min(delay * 2, self.ttl_ms / 2000)
                stop.wait(delay)
        finally:
            self.release_all()

    def release_all(self) -> None:
        """Hand every bucket over and unregister (a clean stop: the others take over at once):
        every bucket's work stopped together, then the leases dropped in one round trip."""
        self._hand_over_all(sorted(self.owned))
        try:
            self.client.zrem(keys.REPLICAS, self.replica)
        except Exception as exc:
            log.warning("could not unregister %s (%s); the registration runs out by itself", self.replica, exc)
        self._report()



class ConsumerThreads:
    """:class:`BucketWork` of inbox consumers: each one's :meth:`run` loop in a thread of its own,
    stopped together (the message in hand finished, the acknowledgements flushed)."""

    def __init__(self, consumers: Sequence[Any], name: str, **run_kwargs: Any):
        self.consumers = list(consumers)
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=c.run, args=(self._stop,), kwargs=run_kwargs, daemon=True,
                                          name=f"{name} {c.stream}") for c in self.consumers]
        for t in self._threads:
            t.start()

    def begin_stop(self) -> None:
        """Tell the threads to stop after the message in hand (:meth:`stop` waits for them)."""
        self._stop.set()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=30)


class InboxGroup:
    """The consumers of one channel's bucket streams on one Redis node, read together by one
    thread (:func:`engine.service.inbox.run_together`: one XREADGROUP for all the streams,
    one round of appends for all their commands) instead of a thread per stream: a read
    carries the commands of every bucket, as one stream's would.  On a Redis Cluster one
    read cannot span slots: each bucket's player and operator streams (one slot, ``{b<N>}``)
    are one group of their own (:class:`SlotGroupWork`).

    :meth:`add` returns the :class:`BucketWork` of one consumer: its ``stop`` takes the
    stream out of the reads, waits for the round in hand to finish and sends that
    consumer's acknowledgements.  Every ``reclaim_every_s`` each member reclaims idle
    pending messages and every ``trim_every_s`` trims its stream (at once after an
    oversized entry), as :meth:`InboxConsumer.run` does."""

    def __init__(self, name: str, *, block_ms: int = 500, count: int = 10, reclaim_every_s: float = 30.0,
                 min_idle_ms: int = 60_000, trim_every_s: float = 60.0, members: Sequence[Any] = ()):
        self.block_ms = block_ms
        self.count = count
        self.reclaim_every_s = reclaim_every_s
        self.min_idle_ms = min_idle_ms
        self.trim_every_s = trim_every_s
        self._members: list[Any] = list(members)  # read from the first round (:meth:`add` for more)
        #: held briefly (adding never waits for a read); guards the members and _started
        self._members_lock = threading.Lock()
        self._started = 0  # rounds begun (each on the members of that moment)
        self._done = 0  # rounds finished: taking a stream out waits for the round it is in
        self._finished = threading.Condition()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=name)
        self._thread.start()

    def add(self, consumer: Any) -> _Member:
        with self._members_lock:
            self._members.append(consumer)
        return _Member(self, consumer)

    def remove(self, consumer: Any) -> None:
        """Take ``consumer``'s stream out of the reads, wait for the round that may hold its
        messages, send its acknowledgements."""
        self.settle(self.take_out(consumer))
        consumer.flush_acks()

    def take_out(self, consumer: Any) -> int:
        """Take ``consumer``'s stream out of the next reads; returns the last round that may
        still hold its messages (for :meth:`settle`)."""
        with self._members_lock:
            if consumer in self._members:
                self._members.remove(consumer)
            return self._started

    def settle(self, last: int) -> None:
        """Wait until round ``last`` is finished."""
        with self._finished:
            self._finished.wait_for(lambda: self._done >= last or not self._thread.is_alive(), timeout=30)

    def stop(self) -> None:
        """Stop the thread (the round in hand finished) and send every member's acknowledgements."""
        self._stop.set()
        self._thread.join(timeout=30)
        with self._members_lock:
            members = list(self._members)
        for c in members:
            try:
                c.flush_acks()
            except Exception as exc:  # redelivered after a restart: duplicates, published again
                log.warning("%s: could not acknowledge on stopping: %s", c.stream, exc)

    def _carry_on(self, members: list[Any], until: float) -> Callable[[], bool]:
        """Whether a round of ``members`` may read on (on a Cluster its next read rides on its
        publications, :func:`engine.service.inbox.run_together`): not once a stop was asked
        for, the members changed (a stream taken out waits for the round in hand; one added is
        read from the next) or the housekeeping is due (monotonic ``until``)."""
        def carry_on() -> bool:
            if self._stop.is_set() or time.monotonic() >= until:
                return False
            with self._members_lock:
                return self._members == members

        return carry_on

    def _run(self) -> None:
        from engine.service.inbox import run_together
        from engine.store.redis_errors import REDIS_FAILURES
        from engine.store.transient import READ_RETRY_CAP_S, Backoff, read_retry_delay

        next_reclaim = time.monotonic() + self.reclaim_every_s
        next_trim = time.monotonic() + self.trim_every_s
        backoff = Backoff(first=0.05, cap=READ_RETRY_CAP_S)
        while not self._stop.is_set():
            with self._members_lock:
                members = list(self._members)
                if members:
                    self._started += 1
            if not members:
                self._stop.wait(self.block_ms / 1000)
                continue
            try:
                try:
                    oversized = sum(c.stats.oversized for c in members)
                    run_together(members, self.block_ms, self.count, self._stop,
                                 carry_on=self._carry_on(members, min(next_reclaim, next_trim)))
                    now = time.monotonic()
                    if sum(c.stats.oversized for c in members) != oversized:
                        for c in members:  # an oversized entry handled: out of Redis now
                            c.flush_acks()
                        next_trim = now
                    if now >= next_reclaim and not self._stop.is_set():
                        for c in members:
                            c.reclaim(min_idle_ms=self.min_idle_ms)
                        next_reclaim = now + self.reclaim_every_s
                    if now >= next_trim and not self._stop.is_set():
                        for c in members:
                            c.trim_inbox()
                        next_trim = now + self.trim_every_s
                finally:
                    with self._finished:
                        self._done += 1
                        self._finished.notify_all()
                backoff.reset()
            except REDIS_FAILURES as exc:
                delay = read_retry_delay(exc, backoff)
                log.warning("redis error reading %d stream(s) (retrying in %.2fs): %s", len(members), delay, exc)
                for c in members:
                    c._backlog = True
                self._stop.wait(delay)
            except Exception:
                delay = backoff.next()
                log.exception("reading %d stream(s) failed (retrying in %.2fs)", len(members), delay)
                for c in members:
                    c._backlog = True
                self._stop.wait(delay)


class _Member:
    """One consumer's place in an :class:`InboxGroup` (its :class:`BucketWork`)."""

    def __init__(self, group: InboxGroup, consumer: Any):
        self.group = group
        self.consumer = consumer

    def stop(self) -> None:
        self.group.remove(self.consumer)


class GroupedWork:
    """The :class:`BucketWork` of a bucket whose streams are members of :class:`InboxGroup`\\ s:
    ``stop`` takes them all out of the reads first, then waits for the rounds in hand."""

    def __init__(self, members: Sequence[_Member]):
        self.members = list(members)
        self._lasts: list[tuple[_Member, int]] | None = None

    def begin_stop(self) -> None:
        """Take the streams out of the next reads (:meth:`stop` then waits for the rounds in hand)."""
        if self._lasts is None:
            self._lasts = [(m, m.group.take_out(m.consumer)) for m in self.members]

    def stop(self) -> None:
        self.begin_stop()
        assert self._lasts is not None
        for m, last in self._lasts:
            m.group.settle(last)
            m.consumer.flush_acks()


class SlotGroupWork:
    """The :class:`BucketWork` of one bucket on a Redis Cluster: its streams (the player and
    the operator channel's, one slot) read by one :class:`InboxGroup` of their own -- one
    thread and one XREADGROUP for both, instead of a thread and a blocking read each.
    ``stop`` takes them out of the reads, waits for the round in hand, acknowledges, then
    ends the thread."""

    def __init__(self, consumers: Sequence[Any], name: str, **loop: Any):
        self.group = InboxGroup(name, members=consumers, **loop)
        self.work = GroupedWork([_Member(self.group, c) for c in consumers])

    def begin_stop(self) -> None:
        self.work.begin_stop()

    def stop(self) -> None:
        self.work.stop()
        self.group.stop()
