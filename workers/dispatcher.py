"""The deadline dispatcher: moves the deadlines that fall due from the store's
deadline index into dramatiq (issue 13 §5).

Every append records the match's one current deadline in the store, in the same
Lua step as the events (``sk:{bN}:deadlines``: match id scored by ``at_ms``;
``sk:{bN}:deadline_info``: match id -> ``"<version>|<kind>|<at_ms>"``).  That
index is the source of truth: no process sends a timer message when it commits.
Instead one dispatcher (a thread in a worker process, one at a time across
processes by a lease) reads the due part of the 16 bucket indexes every
``SK_DISPATCH_INTERVAL_MS`` (one ``EVALSHA`` for all of them; while nothing
falls due sooner it sleeps until the soonest deadline, at most ``SK_DISPATCH_IDLE_MS``)
and enqueues exactly the current deadlines, in
batches (``fire_deadlines([[match, version, kind], …])``), onto the timer queue.
A deadline that a later commit replaced was never sent, so there are no stale
messages.

**In flight.**  Claiming a deadline writes a mark next to the index, atomically
with the read (one Lua call for all buckets; on Redis Cluster one per bucket, packed into
one round trip per node):
``sk:{bN}:deadline_sent``: match id -> ``"<version>|<kind>|<at_ms>#<retry at ms>#<attempt>"``.
A claimed deadline is not claimed again while its mark stands; firing it removes
the mark (whatever the result: committed, stale, duplicate).  A mark whose
``retry at`` has passed is claimed again (the message was lost, the worker died
with it, or its firing failed): the dispatcher's own rescue, with back-off,
the in-flight lease doubling per attempt from ``SK_DISPATCH_LEASE_MS`` up to
60 s.  A claim reads past marked deadlines, so failing deadlines never hide
the others.

**One dispatcher.**  :class:`DispatcherLease` is a ``SET NX PX`` key on the
broker's Redis (``sk:timers:dispatcher-lease``), renewed every tick by its
holder; when the holder dies another worker process takes it over once it
expires (``SK_DISPATCHER_LEASE_TTL_MS``).  Correctness does not depend on it:
two dispatchers at once (a paused holder) still claim each deadline once, the
claim being atomic in Redis.

    claims = claims_for(store)                      # RedisClaims or MemoryClaims
    d = Dispatcher(claims, BrokerDispatch(broker), clock)
    d.tick()                                        # claim what is due, enqueue it
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from dramatiq import Message
from dramatiq.broker import Broker

from engine.match.deadline import Deadline
from engine.store import keys, replies
from engine.store.lease import LeaseScripts
from engine.store.transient import Backoff, is_transient
from workers.broker import FIRE_MANY_ACTOR, QUEUE
from workers.clock import read_ms
from workers.settings import env_ms

log = logging.getLogger("workers.dispatcher")

INTERVAL_ENV = "SK_DISPATCH_INTERVAL_MS"
LEASE_ENV = "SK_DISPATCH_LEASE_MS"
HOLDER_TTL_ENV = "SK_DISPATCHER_LEASE_TTL_MS"
IDLE_ENV = "SK_DISPATCH_IDLE_MS"
DEFAULT_INTERVAL_MS = 25
#: the longest wait between ticks while the soonest recorded deadline is further away
#: (a deadline recorded during that wait and due before its end is late by at most this)
DEFAULT_IDLE_MS = 100
#: ``next_due_ms`` of a claim that found no deadline recorded at all
NOTHING_RECORDED = 2**62
#: first in-flight lease of a claimed deadline; it doubles per attempt up to LEASE_CAP_MS
DEFAULT_LEASE_MS = 5_000
LEASE_CAP_MS = 60_000
#: how long the dispatcher lease lives without renewal (the takeover delay after a SIGKILL)
DEFAULT_HOLDER_TTL_MS = 2_000
HOLDER_KEY = keys.DISPATCHER_LEASE_KEY
#: deadlines per fire_deadlines message (at most)
BATCH = 16
#: deadlines claimed per tick (at most, over all buckets)
CLAIM_LIMIT = 2_000
#: marked deadlines a claim reads past, per bucket, looking for unmarked ones
SCAN_PAST = 2_000
#: queue length (messages, each up to BATCH deadlines) above which the dispatcher claims
#: nothing more until the workers catch up (deadlines wait unclaimed in the index: their
#: in-flight lease does not run out in a queue)
BACKLOG_LIMIT = 200


@dataclass(frozen=True, slots=True)
class Claim:
    """One deadline the dispatcher took; ``attempt`` 1 is its first dispatch."""

    deadline: Deadline
    attempt: int = 1


def lease_ms(attempt: int, first_ms: int, cap_ms: int = LEASE_CAP_MS) -> int:
    """The in-flight lease of a claim's ``attempt``: ``first_ms`` doubling, at most ``cap_ms``.

    >>> [lease_ms(a, 1000, 8000) for a in (1, 2, 3, 4, 5)]
    [1000, 2000, 4000, 8000, 8000]
    """
    return min(cap_ms, first_ms * 2 ** min(max(attempt, 1) - 1, 30))


class DueClaims(Protocol):
    """Where due deadlines are claimed and released (the store's Redis, or memory).

    A claimer may also have ``next_due_ms`` (the soonest deadline its last claim left,
    see :class:`RedisClaims`); without it the dispatcher ticks every interval."""

    def claim(self, now_ms: int, limit: int, *, due_ms: int | None = None) -> list[Claim]: ...

    def release(self, fired: Iterable[tuple[str, int, str]]) -> None: ...

    def retry_at(self, deadline: Deadline) -> int | None: ...

    def in_flight_of(self, deadlines: Sequence[Deadline], now_ms: int) -> set[Deadline]:
        """Those of ``deadlines`` whose mark stands at ``now_ms`` (claimed, lease not over)."""
        ...


# KEYS: per bucket, its deadlines zset, deadline_info hash, deadline_sent hash (3 keys a bucket,
# any number of buckets: all of them in one call on one Redis, one bucket a call on a cluster)
# ARGV: due ms, most to claim per bucket, most to read past, first lease ms, lease cap ms, now ms
# Returns field/value pairs (never positional, :func:`_claim_reply`): "claims", a list of
# {"match", id, "info", info, "attempt", n} over the buckets, and "soonest", the soonest
# deadline after "due" (ms; "due" itself when a bucket had more due than it claimed; -1: none).
_CLAIM_LUA = """
local due = tonumber(ARGV[1])
local want = tonumber(ARGV[2])
local scan = want + tonumber(ARGV[3])
local first = tonumber(ARGV[4])
local cap = tonumber(ARGV[5])
local now = tonumber(ARGV[6])
local out = {}
local soonest = -1
for k = 1, #KEYS - 2, 3 do
  local index, infos, marks = KEYS[k], KEYS[k + 1], KEYS[k + 2]
  local n = 0
  local offset = 0
  local head = redis.call('ZRANGE', index, 0, 0, 'WITHSCORES')
  local first_at = tonumber(head[2])
  local quiet = first_at == nil or first_at > due   -- nothing due here: the head is its soonest
  if quiet and first_at and (soonest < 0 or first_at < soonest) then soonest = first_at end
  while not quiet and n < want and offset < scan do
    local ids = redis.call('ZRANGEBYSCORE', index, '-inf', due, 'LIMIT', offset, math.min(want, scan - offset))
    if #ids == 0 then break end
    offset = offset + #ids
    for i = 1, #ids do
      if n >= want then break end
      local id = ids[i]
      local info = redis.call('HGET', infos, id)
      if info then
        local attempt = 1
        local skip = false
        local sent = redis.call('HGET', marks, id)
        if sent then
          local was, retry_at, tries = string.match(sent, '^(.*)#(%d+)#(%d+)$')
          if was == info then
            if now < tonumber(retry_at) then skip = true else attempt = tonumber(tries) + 1 end
          end
        end
        if not skip then
          local at = tonumber(string.match(info, '|(%d+)$')) or now
          local lease = first
          for _ = 2, math.min(attempt, 32) do
            lease = lease * 2
            if lease >= cap then break end
          end
          if lease > cap then lease = cap end
          local base = now
          if at > base then base = at end
          redis.call('HSET', marks, id, info .. '#' .. string.format('%d', base + lease) .. '#' .. attempt)
          out[#out + 1] = {'match', id, 'info', info, 'attempt', attempt}
          n = n + 1
        end
      end
    end
  end
  if n >= want then
    soonest = due                                   -- more may be due in this bucket
  elseif quiet then                                 -- its head, read above, said all
  elseif soonest ~= due then
    local after = redis.call('ZRANGEBYSCORE', index, '(' .. ARGV[1], '+inf', 'LIMIT', 0, 1, 'WITHSCORES')
    local at = tonumber(after[2])
    if at and (soonest < 0 or at < soonest) then soonest = at end
  end
end
return {'claims', out, 'soonest', soonest}
"""

# KEYS: one deadline_sent hash per released deadline; ARGV: its match id, "<version>|<kind>|", …
# (a mark goes only if it is still this deadline's); returns how many marks went
_RELEASE_LUA = """
local gone = 0
for i = 1, #KEYS do
  local id, prefix = ARGV[2 * i - 1], ARGV[2 * i]
  local sent = redis.call('HGET', KEYS[i], id)
  if sent and string.sub(sent, 1, #prefix) == prefix then
    redis.call('HDEL', KEYS[i], id)
    gone = gone + 1
  end
end
return gone
"""


def _s(v: Any) -> str:
    return v.decode("utf-8", "surrogatepass") if isinstance(v, bytes) else str(v)


def _claim_reply(reply: Any) -> tuple[list[Claim], int]:
    """The claim script's reply read by name: its claims and the soonest deadline (-1: none).

    >>> _claim_reply([b"claims", [[b"match", b"m1", b"info", b"3|turn|900", b"attempt", 2]], b"soonest", -1])
    ([Claim(deadline=Deadline(match_id='m1', version=3, at_ms=900, kind='turn'), attempt=2)], -1)
    """
    fields = replies.fields(reply)
    claims = []
    for raw in fields["claims"]:
        c = replies.fields(raw)
        claims.append(Claim(_parse_info(_s(c["match"]), c["info"]), int(c["attempt"])))
    return claims, int(fields["soonest"])


def _parse_info(match_id: str, raw: Any) -> Deadline:
    version, kind, at_ms = _s(raw).split("|")
    return Deadline(match_id=match_id, version=int(version), at_ms=int(at_ms), kind=kind)  # type: ignore[arg-type]


def _is_cluster(client: Any) -> bool:
    return callable(getattr(client, "get_nodes", None))


class RedisClaims:
    """Claims on the store's Redis: one Lua call for all buckets on one Redis (one call a
    bucket on Redis Cluster, where each bucket lives on its own slot: a round trip per node).

    Each call is one ``EVALSHA``: no pipeline of scripts (a pipeline holding registered
    scripts asks ``SCRIPT EXISTS`` first, one more round trip per tick), and a ``NOSCRIPT``
    (after ``SCRIPT FLUSH`` or a Redis restart: the script did not run) loads the script
    and runs it again (redis-py's ``Script``)."""

    def __init__(self, client: Any, buckets: int = keys.DEFAULT_BUCKETS, *,
                 first_lease_ms: int = DEFAULT_LEASE_MS, cap_ms: int = LEASE_CAP_MS,
                 bucket_of: Callable[[str], int] | None = None):
        self.client = client
        self.buckets = buckets
        self.first_lease_ms = first_lease_ms
        self.cap_ms = cap_ms
        self.bucket_of = bucket_of or (lambda match_id: keys.bucket_of(match_id, buckets))
        self._claim = client.register_script(_CLAIM_LUA)
        self._release = client.register_script(_RELEASE_LUA)
        self.cluster = _is_cluster(client)
        #: after a claim: the soonest recorded deadline it left (due later, or due and not
        #: claimed yet), :data:`NOTHING_RECORDED` if none; None before the first claim
        self.next_due_ms: int | None = None
        self._all_keys = [k for b in range(buckets) for k in self._bucket_keys(b)]

    def _bucket_keys(self, b: int) -> list[str]:
        return [keys.deadlines_key(b), keys.deadline_info_key(b), keys.deadline_sent_key(b)]

    def claim(self, now_ms: int, limit: int, *, due_ms: int | None = None) -> list[Claim]:
        per_bucket = max(1, math.ceil(limit / self.buckets))
        args = [now_ms if due_ms is None else due_ms, per_bucket, SCAN_PAST, self.first_lease_ms,
                self.cap_ms, now_ms]
        failed: Exception | None = None
        if self.cluster:
            # one call per bucket (each its own slot), packed by node: a node that cannot
            # answer (cut off, failing over) holds back only its own buckets' deadlines (issue 35 §3)
            answers, alone = self._claim_by_node(args)
            for b in alone:
                try:
                    answers.append(self._claim(keys=self._bucket_keys(b), args=args))
                except Exception as exc:
                    if not is_transient(exc):
                        raise
                    failed = failed or exc
            if failed is not None and not answers:
                raise failed
            if failed is not None:
                log.warning("dispatcher: some buckets could not be claimed (%s); the others go on", failed)
        else:
            answers = [self._claim(keys=self._all_keys, args=args)]
        out: list[Claim] = []
        soonest: int | None = None
        for reply in answers:
            claims, at = _claim_reply(reply)
            out += claims
            if at >= 0 and (soonest is None or at < soonest):
                soonest = at
        self.next_due_ms = NOTHING_RECORDED if soonest is None else soonest
        if failed is not None:
            self.next_due_ms = None  # what the skipped buckets hold is unknown: tick every interval
        out.sort(key=lambda c: (c.deadline.at_ms, c.deadline.match_id))
        return out

    def _claim_by_node(self, args: list[Any]) -> tuple[list[Any], list[int]]:
        """On a Cluster: each node's buckets' claims in one round trip, every node written
        before any is read (engine/store/wire.py :func:`~engine.store.wire.round_trips`).
        Returns the claims' replies and the buckets left to claim alone through the Cluster
        client, which follows a moved slot and loads a flushed script: those whose node the
        slot map does not name or the packed path cannot serve, whose node's round trip
        failed, or whose call was answered with an error (NOSCRIPT, MOVED, CLUSTERDOWN…:
        the script did not run)."""
        from engine.store import wire
        from engine.store.connect import node_client

        groups: dict[int, tuple[Any, list[int]]] = {}
        alone: list[int] = []
        for b in range(self.buckets):
            node = node_client(self.client, keys.deadlines_key(b))
            if node is None or not wire.usable(node):
                alone.append(b)
                continue
            groups.setdefault(id(node.connection_pool), (node, []))[1].append(b)
        if not groups:
            return [], alone
        calls = [(node, [wire.pack("EVALSHA", self._claim.sha, 3, *self._bucket_keys(b), *args) for b in bs])
                 for node, bs in groups.values()]
        out: list[Any] = []
        for (_node, bs), result in zip(groups.values(), wire.round_trips(calls)):
            if isinstance(result, Exception):
                alone += bs
                continue
            for b, reply in zip(bs, result):
                if isinstance(reply, Exception):
                    alone.append(b)
                else:
                    out.append(reply)
        return out, sorted(alone)

    def release(self, fired: Iterable[tuple[str, int, str]]) -> None:
        items = list(fired)
        if not items:
            return
        calls: list[tuple[list[str], list[Any]]] = []
        for match_id, version, kind in items:
            key, args = keys.deadline_sent_key(self.bucket_of(match_id)), [match_id, f"{version}|{kind}|"]
            if self.cluster or not calls:
                calls.append(([key], args))
            else:  # one Redis: every mark of the batch in one call
                calls[0][0].append(key)
                calls[0][1].extend(args)
        for ks, args in calls:
            self._release(keys=ks, args=args)

    def retry_at(self, deadline: Deadline) -> int | None:
        raw = self.client.hget(keys.deadline_sent_key(self.bucket_of(deadline.match_id)), deadline.match_id)
        if raw is None:
            return None
        info, retry, _attempt = _s(raw).rsplit("#", 2)
        want = f"{deadline.version}|{deadline.kind}|{deadline.at_ms}"
        return int(retry) if info == want else None

    def in_flight_of(self, deadlines: Sequence[Deadline], now_ms: int) -> set[Deadline]:
        by_bucket: dict[int, list[Deadline]] = {}
        for d in deadlines:
            by_bucket.setdefault(self.bucket_of(d.match_id), []).append(d)
        if not by_bucket:
            return set()
        order = list(by_bucket.items())
        if self.cluster:
            marks = [self.client.hmget(keys.deadline_sent_key(b), [d.match_id for d in ds]) for b, ds in order]
        else:
            pipe = self.client.pipeline(transaction=False)
            for b, ds in order:
                pipe.hmget(keys.deadline_sent_key(b), [d.match_id for d in ds])
            marks = pipe.execute()
        out: set[Deadline] = set()
        for (_b, ds), raws in zip(order, marks):
            for d, raw in zip(ds, raws):
                if raw is None:
                    continue
                info, retry, _attempt = _s(raw).rsplit("#", 2)
                if info == f"{d.version}|{d.kind}|{d.at_ms}" and now_ms < int(retry):
                    out.add(d)
        return out

    def in_flight(self) -> int:
        """Marks standing (claimed, not released yet), over all buckets."""
        return sum(int(self.client.hlen(keys.deadline_sent_key(b))) for b in range(self.buckets))


class MemoryClaims:
    """Claims for a store without Redis (the embedded in-memory default): the same
    rules as :class:`RedisClaims`, marks kept in this process."""

    def __init__(self, store: Any, *, first_lease_ms: int = DEFAULT_LEASE_MS, cap_ms: int = LEASE_CAP_MS):
        self.store = store
        self.first_lease_ms = first_lease_ms
        self.cap_ms = cap_ms
        self._marks: dict[str, tuple[Deadline, int, int]] = {}  # match -> (deadline, retry at, attempt)
        self._lock = threading.Lock()

    def claim(self, now_ms: int, limit: int, *, due_ms: int | None = None) -> list[Claim]:
        due = self.store.due_deadlines(now_ms if due_ms is None else due_ms, limit + SCAN_PAST)
        out: list[Claim] = []
        with self._lock:
            for d in due:
                if len(out) >= limit:
                    break
                attempt = 1
                mark = self._marks.get(d.match_id)
                if mark is not None and mark[0] == d:
                    if now_ms < mark[1]:
                        continue
                    attempt = mark[2] + 1
                retry = max(now_ms, d.at_ms) + lease_ms(attempt, self.first_lease_ms, self.cap_ms)
                self._marks[d.match_id] = (d, retry, attempt)
                out.append(Claim(d, attempt))
        return out

    def release(self, fired: Iterable[tuple[str, int, str]]) -> None:
        with self._lock:
            for match_id, version, kind in fired:
                mark = self._marks.get(match_id)
                if mark is not None and mark[0].version == int(version) and mark[0].kind == kind:
                    del self._marks[match_id]

    def retry_at(self, deadline: Deadline) -> int | None:
        with self._lock:
            mark = self._marks.get(deadline.match_id)
        return mark[1] if mark is not None and mark[0] == deadline else None

    def in_flight_of(self, deadlines: Sequence[Deadline], now_ms: int) -> set[Deadline]:
        with self._lock:
            return {d for d in deadlines
                    if (m := self._marks.get(d.match_id)) is not None and m[0] == d and now_ms < m[1]}

    def in_flight(self) -> int:
        with self._lock:
            return len(self._marks)


def claims_for(store: Any, *, first_lease_ms: int | None = None) -> DueClaims:
    """:class:`RedisClaims` for a Redis event store (also behind a metrics wrapper),
    :class:`MemoryClaims` for anything else."""
    first = first_lease_ms if first_lease_ms is not None else env_ms(LEASE_ENV, DEFAULT_LEASE_MS)
    client = getattr(store, "client", None)
    buckets = getattr(store, "buckets", None)
    if client is not None and isinstance(buckets, int) and callable(getattr(client, "register_script", None)):
        return RedisClaims(client, buckets, first_lease_ms=first, bucket_of=store.bucket_of)
    return MemoryClaims(store, first_lease_ms=first)


# ---- sending -------------------------------------------------------------------------------

def fire_many_message(deadlines: Sequence[Deadline], queue_name: str = QUEUE) -> Message:
    """The ``fire_deadlines`` message for a batch (built by name: no actor import)."""
    return Message(queue_name=queue_name, actor_name=FIRE_MANY_ACTOR,
                   args=([[d.match_id, d.version, d.kind] for d in deadlines],), kwargs={}, options={})


class Sender(Protocol):
    def send(self, batches: list[list[Deadline]]) -> int | None: ...

    def queue_length(self) -> int | None: ...


class BrokerDispatch:
    """Enqueue batches on a broker, now (no delay): one Lua call for all of them on a
    :class:`workers.broker.TimerRedisBroker` (it returns the queue's length), one
    ``enqueue`` each on another broker (the embedded StubBroker)."""

    def __init__(self, broker: Broker, queue_name: str = QUEUE):
        self.broker = broker
        self.queue_name = queue_name
        broker.declare_queue(queue_name)

    def send(self, batches: list[list[Deadline]]) -> int | None:
        messages = [fire_many_message(b, self.queue_name) for b in batches if b]
        many = getattr(self.broker, "enqueue_many", None)
        if callable(many):
            return int(many(messages))
        for m in messages:
            self.broker.enqueue(m)
        return None

    def queue_length(self) -> int | None:
        length = getattr(self.broker, "queue_length", None)
        return int(length(self.queue_name)) if callable(length) else None


def batches_of(claims: Sequence[Claim], size: int = BATCH, spread: int = 4) -> list[list[Deadline]]:
    """Split claims (earliest first) into messages of at most ``size`` deadlines, and
    into at least ``spread`` messages when there are that many (worker threads share them).

    >>> ds = [Claim(Deadline("m%d" % i, 1, i, "turn")) for i in range(5)]
    >>> [len(b) for b in batches_of(ds, size=16, spread=4)]
    [2, 1, 1, 1]
    >>> [len(b) for b in batches_of(ds * 8, size=16, spread=2)]
    [14, 13, 13]
    """
    n = len(claims)
    if n == 0:
        return []
    count = max(math.ceil(n / size), min(n, spread))
    base, extra = divmod(n, count)
    out: list[list[Deadline]] = []
    i = 0
    for k in range(count):
        take = base + (1 if k < extra else 0)
        out.append([c.deadline for c in claims[i:i + take]])
        i += take
    return out


class Dispatcher:
    """One tick claims what is due and enqueues it (see the module docstring)."""

    def __init__(self, claims: DueClaims, sender: Sender, clock: Any = None, *,
                 limit: int = CLAIM_LIMIT, batch: int = BATCH, spread: int = 4,
                 backlog_limit: int = BACKLOG_LIMIT):
        self.claims = claims
        self.sender = sender
        self.clock = clock
        self.limit = limit
        self.batch = batch
        self.spread = spread
        self.backlog_limit = backlog_limit
        self.backlog = 0
        self.dispatched = 0
        self.redispatched = 0
        self.last_tick_ms: int | None = None

    def quiet_ms(self) -> int | None:
        """How long after the last tick nothing recorded falls due (0: something is due
        now); None when the claimer cannot say (then tick every interval)."""
        nxt = getattr(self.claims, "next_due_ms", None)
        if nxt is None or self.last_tick_ms is None:
            return None
        return max(0, int(nxt) - self.last_tick_ms)

    def tick(self, now_ms: int | None = None) -> int:
        """Claim the due deadlines and enqueue them; returns how many were sent."""
        now = read_ms(self.clock) if now_ms is None else now_ms
        self.last_tick_ms = None  # unknown until a claim says (a full queue claims nothing)
        if self.backlog > self.backlog_limit:
            self.backlog = self.sender.queue_length() or 0
            if self.backlog > self.backlog_limit:
                return 0
        claimed = self.claims.claim(now, self.limit)
        self.last_tick_ms = now
        if not claimed:
            return 0
        again = [c for c in claimed if c.attempt > 1]
        for c in again:
            d = c.deadline
            log.warning("dispatching %s %s v%d again (attempt %d, %d ms overdue): its last dispatch "
                        "did not finish in time", d.kind, d.match_id[:80], d.version, c.attempt, now - d.at_ms)
        length = self.sender.send(batches_of(claimed, self.batch, self.spread))
        self.backlog = length or 0
        self.dispatched += len(claimed)
        self.redispatched += len(again)
        return len(claimed)


# ---- one dispatcher at a time ------------------------------------------------------------------

class DispatcherLease:
    """``SET NX PX`` lease on the broker's Redis; ``client`` None: always held (in-process)."""

    def __init__(self, client: Any = None, ttl_ms: int = DEFAULT_HOLDER_TTL_MS, key: str = HOLDER_KEY):
        self.client = client
        self.ttl_ms = ttl_ms
        self.key = key
        self.token = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self.held = client is None
        if client is not None:
            self._scripts = LeaseScripts(client)

    def hold(self) -> bool:
        """Renew the lease or take it if free; True while this process holds it."""
        if self.client is None:
            return True
        got = self._scripts.hold(self.key, self.token, self.ttl_ms)
        was, self.held = self.held, got > 0
        if self.held and not was:
            log.info("dispatcher lease acquired (%s)", self.token)
        elif was and not self.held:
            log.warning("dispatcher lease lost (%s)", self.token)
        return self.held

    def drop(self) -> None:
        if self.client is not None and self.held:
            try:
                self._scripts.drop(self.key, self.token)
            except Exception:  # the lease expires by itself
                log.debug("could not drop the dispatcher lease", exc_info=True)
        self.held = self.client is None


class DispatcherThread(threading.Thread):
    """Runs :meth:`Dispatcher.tick` every ``interval_ms`` while it holds the lease.

    When a tick sent nothing and the soonest recorded deadline is further away than
    the interval (:meth:`Dispatcher.quiet_ms`), the thread waits until it falls due, at
    most ``idle_ms`` (``SK_DISPATCH_IDLE_MS``, default 100; 0 or at most the interval:
    always the interval): an idle dispatcher wakes ~10 times a second instead of 40.
    A deadline recorded during such a wait that falls due before its end is late by at
    most ``idle_ms``; a deadline recorded at least ``idle_ms`` before it falls due (every
    turn, ready and default trustee clock) fires as before, on its tick.

    ``make`` builds the dispatcher on the thread's first tick (a worker process
    builds its runtime lazily, from the environment)."""

    def __init__(self, make: Callable[[], Dispatcher], lease: DispatcherLease | None = None,
                 interval_ms: int = DEFAULT_INTERVAL_MS, idle_ms: int | None = None):
        super().__init__(name="sk-deadline-dispatcher", daemon=True)
        self.make = make
        self.lease = lease or DispatcherLease(None)
        self.interval = max(1, int(interval_ms)) / 1000
        idle = env_ms(IDLE_ENV, DEFAULT_IDLE_MS) if idle_ms is None else int(idle_ms)
        self.idle = max(self.interval, idle / 1000)
        self.dispatcher: Dispatcher | None = None
        self.ticks = 0
        self._stop_event = threading.Event()

    def run(self) -> None:
        outage = Backoff(first=max(self.interval, 0.05), cap=5.0)
        wait = 0.0
        while not self._stop_event.wait(wait):
            wait = self.interval
            try:
                if not self.lease.hold():
                    # not the holder: try again when it may have expired
                    wait = max(self.interval, self.lease.ttl_ms / 4000)
                    continue
                if self.dispatcher is None:
                    self.dispatcher = self.make()
                sent = self.dispatcher.tick()
                self.ticks += 1
                if sent >= self.dispatcher.limit:
                    wait = 0  # more is due: go on at once
                elif sent == 0 and self.idle > self.interval:
                    quiet = self.dispatcher.quiet_ms()
                    if quiet is not None:  # until the soonest deadline (+1 ms), within [interval, idle]
                        wait = min(self.idle, max(self.interval, (quiet + 1) / 1000))
                outage.reset()
            except Exception as exc:
                wait = outage.next()
                if is_transient(exc):
                    log.warning("dispatcher: Redis is unavailable (%s), retrying in %.2fs", exc, wait)
                else:
                    log.exception("dispatcher: tick failed (retrying in %.2fs)", wait)
        self.lease.drop()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop_event.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout)
