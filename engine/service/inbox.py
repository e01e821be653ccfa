"""The command service loop: read the inbox stream, execute, publish per-player updates.

Protocol (stream names, fields, codes): docs/PROTOCOL.md.  In short:

* Gateways XADD commands to their match's ``sk:{b<N>}:inbox`` (field ``c`` = msgpack command map,
  or ``j`` = the same map as JSON text; optional ``reply_to`` = a stream named
  ``sk:reply:…``).
* :class:`InboxConsumer` reads them with the consumer group ``sk-service``
  (XREADGROUP), runs :meth:`MatchService.execute`, publishes to each player's
  ``sk:out:{<player>}`` stream (``update``: the events as that player may see
  them plus the player's view; ``rejected``: code + reason) and only then
  XACKs.  A crash before the XACK leaves the message pending;
  :meth:`InboxConsumer.reclaim` (XAUTOCLAIM) hands it to a live consumer and
  the command id makes the re-run idempotent (the stored events are
  published again: updates are at-least-once, dedupe on ``version``).
* A message that cannot be a command (not msgpack/JSON, unknown type, missing
  fields, over ``MAX_COMMAND_BYTES``), a command the engine crashed on, or a
  message delivered more than ``max_deliveries`` times goes to ``sk:dead``
  with the reason, and is acknowledged.  Nothing malformed stops the loop.

Responsibilities: this module reads, claims, trims and runs the loop;
:mod:`engine.service.inbox_message` handles one message (decode → policy →
decide → outcome); :mod:`engine.service.publish` builds and writes what an
outcome publishes (updates, rejections, replies, dead letters).  One consumer
reads one ``stream`` and may refuse command types with an ``accepts`` policy
(e.g. a second consumer on an operator stream).

The channels are one stream per bucket (``sk:{b<N>}:inbox``, ``sk:{b<N>}:ops``): serve runs
one InboxConsumer per stream of each bucket it owns (engine/service/ownership.py), so no
single Cluster slot carries every command.  On a plain Redis the owned streams of a channel
are read together (:func:`run_together`: one XREADGROUP, one round of appends); on a Cluster
the two streams of one bucket are, and in serve's loop the next read rides in the write of
the round's publications to the bucket's node (:class:`engine.store.wire.Rider`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import redis

from engine.match.commands import CommandBase
from engine.match.errors import BadCommand
from engine.match.protocols import OutcomeLike, ServiceLike
from engine.service.inbox_message import (
    Accepts, Handled, MessageHandler, NotRun, Prepared, accept_all, decode, run_many,
)
from engine.service.publish import (
    DEFAULT_DEAD_MAXLEN,
    DEFAULT_FULL_VIEW_EVERY,
    DEFAULT_OUTBOX_MAXLEN,
    DEFAULT_OUTBOX_TTL,
    INTERNAL_ERROR,
    GatewayStats,
    Publisher,
    text,
)
from engine.store import keys, wire
from engine.store.connect import is_cluster, refresh_slots
from engine.store.redis_errors import REDIS_FAILURES, is_outage, is_transient
from engine.store.redis_store import ensure_group, stream_replies
from engine.store.transient import READ_RETRY_CAP_S, Backoff, read_retry_delay

log = logging.getLogger("shuangkou.gateway")

#: the back-off of parked publications (InboxConsumer.park_publications), in seconds
PARK_MIN_S = 0.1
PARK_MAX_S = 2.0
#: more messages parked than this at once: the stream's reading waits, as on any outage
PARK_LIMIT = 200

__all__ = ["INTERNAL_ERROR", "GatewayStats", "InboxConsumer", "run_together"]


class _Batch:
    """What handling some inbox messages left to do: stream writes (in order), then the XACK.

    The writes are kept per message, so a write Redis refuses is charged to its own message only."""

    def __init__(self) -> None:
        self.acks: list[Any] = []  # message ids, in order (after the commit: those acknowledged)
        self.handled: list[Handled] = []  # handled[k] belongs to acks[k]

    def done(self, msg_id: Any, handled: Handled) -> None:
        """``msg_id`` is fully handled: acknowledge it once its writes are written."""
        self.acks.append(msg_id)
        self.handled.append(handled)

    def clear(self) -> None:
        self.acks.clear()
        self.handled.clear()


class InboxConsumer:
    """Consumes ``stream`` (default ``sk:inbox``) as ``consumer`` of ``group`` (``sk-service``).

    ``accepts(command)`` is the stream's allowed-command policy: None accepts the
    command, a string refuses it as ``not_allowed`` with that reason (the sender
    is told; never a dead letter).  Default: every command.

    ``service`` is an :class:`engine.service.service.MatchService` (anything with
    ``execute(command) -> Outcome``; Outcome has ``events``, ``state``,
    ``rejection``, ``duplicate``).  Consumer names must be stable across
    restarts of one worker (e.g. ``host-1``): a restarted consumer first
    finishes its own pending messages.  ``service`` may be None for a
    publish-only gateway (:meth:`publish`, used by the timer workers).
    """

    def __init__(self, redis_client: redis.Redis, service: ServiceLike | None, consumer: str, *,
                 stream: str = keys.INBOX, group: str = keys.SERVICE_GROUP,
                 accepts: Accepts = accept_all,
                 outbox_maxlen: int = DEFAULT_OUTBOX_MAXLEN, outbox_ttl: int | None = DEFAULT_OUTBOX_TTL,
                 full_view_every: int = DEFAULT_FULL_VIEW_EVERY, dead_maxlen: int = DEFAULT_DEAD_MAXLEN,
                 max_deliveries: int = 5, forget_idle_ms: int = 3_600_000,
                 on_dead: Callable[[str, str], None] | None = None, inbox: str | None = None):
        if inbox is not None:  # the former name of ``stream``
            stream = inbox
        self.redis = redis_client
        self.consumer = consumer
        self.stream = stream
        self.group = group
        #: a message delivered more often than this (by XAUTOCLAIM or by this consumer's own
        #: re-reads of its pending entries), not counting the retries after transient
        #: errors, is dead-lettered -- unless its command's events are stored
        self.max_deliveries = max_deliveries
        #: a consumer of the group with nothing pending, idle this long, is deleted by reclaim
        self.forget_idle_ms = forget_idle_ms
        self.stats = GatewayStats()
        #: message id -> deliveries spent waiting out transient errors (not held against it)
        self._transient: dict[Any, int] = {}
        #: builds and writes updates, rejections, replies and dead letters; ``on_dead(code,
        #: reason)`` is called each time a message is dead-lettered (e.g. to count it in a
        #: metric); an exception in it is logged and never stops the loop
        self.publisher = Publisher(redis_client, consumer=consumer, stats=self.stats,
                                   outbox_maxlen=outbox_maxlen, outbox_ttl=outbox_ttl,
                                   full_view_every=full_view_every, dead_maxlen=dead_maxlen, on_dead=on_dead)
        #: decode -> policy (``accepts``: None or the reason a command may not arrive on
        #: ``stream``) -> service -> the writes of one message
        self.handler = MessageHandler(service, self.publisher, self.stats, accepts=accepts, stream=stream)
        self._backlog = True  # read our own pending entries (id 0) before new ones
        #: a message whose command is stored but whose publication Redis refused for a transient
        #: reason on some nodes (a Redis Cluster: one master away) is *parked*: it stays pending
        #: and is tried again at ``_parked_due`` (time.monotonic()), while the messages that
        #: came after it are read and handled meanwhile: one node's outage holds only the
        #: messages that write to it, not the whole bucket (issue 35 §3).  Default: on a
        #: Cluster client (on one Redis a refused write is the whole Redis's).
        self.park_publications = is_cluster(redis_client)
        self._cluster = is_cluster(redis_client)
        #: on a Cluster, the client of the node serving this stream's slot (:meth:`_slot_client`)
        self._node: Any = None
        self._parked_due: float | None = None
        self._park_delay = PARK_MIN_S
        self._parked_ids: set[str] = set()
        self._just_parked = False
        #: messages published and not acknowledged yet: :meth:`run` sends their XACK in
        #: the pipeline of the next read (one round trip less per read; flushed on stop)
        self._unsent_acks: list[Any] = []
        self.ensure_group()

    @property
    def service(self) -> ServiceLike | None:
        return self.handler.service

    @service.setter
    def service(self, service: ServiceLike | None) -> None:
        self.handler.service = service

    @property
    def inbox(self) -> str:
        """The stream this consumer reads (``stream``)."""
        return self.stream

    # -- setup ----------------------------------------------------------------------------
    def ensure_group(self) -> None:
        """Create the consumer group (and the inbox) if missing; from the start of the inbox."""
        ensure_group(self.redis, self.stream, self.group)

    # -- reading --------------------------------------------------------------------------
    def _read(self, block_ms: int | None, count: int) -> list[tuple[Any, dict]]:
        if self._parked_due is not None and time.monotonic() >= self._parked_due:
            self._parked_due = None
            self._backlog = True  # the parked messages' turn: the pending ones, oldest first
        if self._backlog:  # our own pending entries first (after a restart or a failure) ...
            # ... one at a time: each re-read counts as a delivery, and a message that kills
            # the process must not spend the deliveries of the ones read with it
            entries = self._xreadgroup("0", None, 1)
            if not entries:
                self._backlog = False
                self._parked_ids.clear()
                self._park_delay = PARK_MIN_S
            else:
                return entries
        return self._xreadgroup(">", block_ms, count)

    def _slot_client(self) -> Any:
        """What reads this stream: on a Redis Cluster the plain client of the node serving its
        slot (a read and its acknowledgements name one slot: redis-py's Cluster pipeline would
        look up every command's slot and gather the nodes' replies, about twice the client CPU
        of a plain pipeline); else the client itself.  :meth:`_lost_node` forgets it."""
        if not self._cluster:
            return self.redis
        if self._node is None:
            cluster: Any = self.redis
            self._node = cluster.get_redis_connection(cluster.get_node_from_key(self.stream))
        return self._node

    def _lost_node(self, exc: BaseException) -> None:
        """A read on the slot's node failed for a transient reason (the slot moved, the node is
        away): ask the Cluster for its slots again and find the node anew on the next read."""
        if self._cluster and refresh_slots(self.redis, exc):
            self._node = None

    def _xreadgroup(self, start: str, block_ms: int | None, count: int) -> list[tuple[Any, dict]]:
        try:
            reply = self._read_slot(start, block_ms, count)
        except REDIS_FAILURES as exc:
            self._lost_node(exc)
            raise
        if reply is None:
            return []
        entries = [e for _, es in stream_replies(reply) for e in es if e[0] is not None]
        gone = [e[0] for e in entries if e[1] is None]
        if gone:  # pending entries whose messages were deleted or trimmed: nothing to handle
            self.redis.xack(self.stream, self.group, *gone)
            self.stats.processed += len(gone)
        return [e for e in entries if e[1] is not None]

    def _read_slot(self, start: str, block_ms: int | None, count: int) -> Any:
        """XREADGROUP's reply, this stream's unsent acknowledgements first in the same round trip
        (None: the group was gone, now created again)."""
        client = self._slot_client()
        try:
            if self._unsent_acks:  # the last read's acknowledgements go first, same round trip
                acks = list(self._unsent_acks)
                pipe = client.pipeline(transaction=False)
                pipe.xack(self.stream, self.group, *acks)
                pipe.xreadgroup(self.group, self.consumer, {self.stream: start}, count=count, block=block_ms)
                acked, reply = pipe.execute(raise_on_error=False)
                if isinstance(acked, Exception):
                    raise acked
                del self._unsent_acks[:len(acks)]
                if isinstance(reply, Exception):
                    raise reply
            else:
                reply = client.xreadgroup(self.group, self.consumer, {self.stream: start},
                                          count=count, block=block_ms)
        except redis.ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            self.ensure_group()  # the inbox was deleted under us
            return None
        return reply

    def _deliveries(self, first: Any, last: Any, count: int) -> dict[str, int]:
        """Delivery counts of this consumer's pending entries from ``first`` to ``last``."""
        info = self.redis.xpending_range(self.stream, self.group, min=first, max=last, count=count,
                                         consumername=self.consumer)
        return {text(p["message_id"]): int(p["times_delivered"]) for p in info}

    def _over_limit(self, msg_id: Any, fields: dict, delivered: int) -> Handled | None:
        """The dead letter of a message delivered too often (None: handle it as usual).

        Deliveries spent waiting out transient errors do not count; a command whose
        events are stored is never dead-lettered (handled again: a duplicate, published)."""
        if delivered - self._transient.get(text(msg_id), 0) <= self.max_deliveries:
            return None
        if self._stored(fields):
            return None
        reason = f"delivered {delivered} times without being acknowledged"
        return Handled(self.publisher.dead_writes(msg_id, {text(k): v for k, v in fields.items()},
                                                  reason, None), fields=fields)

    def _stored(self, fields: dict) -> bool:
        """Has this message's command appended its events already (best effort, False if unsure)?"""
        stored_events = getattr(self.service, "stored_events", None)
        if stored_events is None:
            return False
        f = {text(k): v for k, v in fields.items()}
        raw, is_json = (f.get("c"), False) if "c" in f else (f.get("j"), True)
        try:
            command = decode(raw, is_json)
        except BadCommand:
            return False
        try:
            return bool(stored_events(command.match_id, command.command_id))
        except Exception as exc:
            if is_transient(exc):
                raise
            return False

    def _left_pending(self, msg_ids: list[Any]) -> None:
        """``msg_ids`` wait out a transient error: their next delivery is not held against them."""
        self._backlog = True
        for m in msg_ids:
            key = text(m)
            self._transient[key] = self._transient.get(key, 0) + 1
        if len(self._transient) > 10_000:  # bounded: forget the oldest
            for key in list(self._transient)[:5_000]:
                del self._transient[key]

    def flush_acks(self) -> None:
        """Send the acknowledgements :meth:`run` left for the next read (at its end)."""
        if self._unsent_acks:
            acks = list(self._unsent_acks)
            self.redis.xack(self.stream, self.group, *acks)
            del self._unsent_acks[:len(acks)]

    def run_once(self, block_ms: int | None = 1000, count: int = 10,
                 stop: threading.Event | None = None, defer_ack: bool = False) -> int:
        """Read up to ``count`` messages (blocking up to ``block_ms``) and handle them.

        Returns how many were handled (acknowledged).  With ``stop`` set, the
        message in hand is finished and the rest stay pending for this consumer.
        A transient failure (Redis, a WrongVersion the service gave up on)
        leaves the message pending and is re-raised for Redis errors.

        The messages of one read are decoded first; their commands are executed
        together (``service.execute_many`` where the service has it: each command
        is decided in message order against its match's cached state and the
        appends go in one pipeline, at most one per match per round, an append the
        store refuses -- WrongVersion, a duplicate id, an error -- is run again
        alone; engine/service/service.py); then what they publish (updates,
        rejections, replies, dead letters, in message order) is written with one
        pipeline and, once that succeeded, they are acknowledged with one XACK:
        four round trips per read (three in :meth:`run`) instead of three per message, and an
        acknowledgement still only ever follows the publication.  On a plain Redis the
        appends carry their commands' publications (:meth:`MessageHandler.carry`; the
        service's ``execute_many(…, carry)``): a read of accepted commands then takes
        two round trips in :meth:`run` (the read with the last acknowledgements, the
        appends), and only what no append carried (refusals, duplicates, dead letters)
        goes in the publication pipeline.  If the process
        dies before the XACK, the messages are redelivered and their command ids
        make the re-run a duplicate (published again: updates are at-least-once).
        One message's failure stays its own: a poison message or an engine error
        is dead-lettered alone, a transient error leaves only the commands it
        stopped (and the later ones) pending.

        ``defer_ack`` (what :meth:`run` does): the acknowledgements go with the next
        read, in its pipeline (still after the publication; a crash in between
        redelivers those messages: duplicates, published again).

        Re-reads of this consumer's own pending entries count as deliveries: an
        entry that keeps failing (e.g. it kills the process) is dead-lettered
        after ``max_deliveries``, like one XAUTOCLAIM hands over too often.
        """
        batch = _Batch()
        self._just_parked = False
        backlog = self._backlog
        entries = self._read(block_ms, count)
        counts = self._deliveries(entries[0][0], entries[-1][0], len(entries)) if backlog and entries else {}
        # decode every message first; then the commands together (the service pipelines
        # their appends, engine/service/service.py execute_many); then each message's writes,
        # in message order
        slots: list[Any] = []  # per message read: Handled, or Prepared (its command to run)
        ids: list[Any] = []
        try:
            try:
                for msg_id, fields in entries:
                    if stop is not None and stop.is_set():
                        self._backlog = True
                        break
                    over = self._over_limit(msg_id, fields, counts.get(text(msg_id), 0)) if counts else None
                    slots.append(over if over is not None else self.handler.prepare(msg_id, fields))
                    ids.append(msg_id)
            except Exception as exc:
                self._backlog = True
                if is_transient(exc):  # this message and the rest of the read wait; the prepared go on
                    self._left_pending([e[0] for e in entries[len(slots):]])
                self._run_prepared(slots, ids, batch, stop)
                raise
            self._run_prepared(slots, ids, batch, stop)
        finally:
            self._commit(batch, defer_ack=defer_ack)
        return len(batch.acks)

    def _run_prepared(self, slots: list[Any], ids: list[Any], batch: _Batch,
                      stop: threading.Event | None = None) -> None:
        """Execute the prepared commands of ``slots`` together and put every finished
        message (in order) into ``batch``.  A message whose command hit a transient error
        stays pending (with every later one the service did not finish) and that error is
        raised once the rest are in the batch; a WrongVersion the service gave up on leaves
        its message pending too."""
        prepared = [s for s in slots if isinstance(s, Prepared)]
        results: dict[int, Any] = {}
        carried = self.handler.carry(slots) if prepared else None
        if prepared:
            assert self.service is not None, "a publish-only consumer cannot handle inbox messages"
            for p, r in zip(prepared, run_many(self.service, [p.command for p in prepared], stop, carried)):
                results[id(p)] = r
        self._finish_prepared(slots, ids, batch, results, carried)

    def _finish_prepared(self, slots: list[Any], ids: list[Any], batch: _Batch, results: dict[int, Any],
                         carried: Any) -> None:
        """Put every finished message of ``slots`` (in order) into ``batch``, given the
        results of their commands (``results``: by ``id`` of each Prepared); see
        :meth:`_run_prepared`."""
        waiting: list[Any] = []
        transient: Exception | None = None
        for msg_id, slot in zip(ids, slots):
            if not isinstance(slot, Prepared):
                batch.done(msg_id, slot)
                continue
            result = results[id(slot)]
            if isinstance(result, NotRun):  # stopping: it stays pending for this consumer
                self._backlog = True
                continue
            if isinstance(result, Exception):
                if is_transient(result):
                    self.stats.retried += 1
                    transient = transient or result
                    waiting.append(msg_id)
                    continue
                handled = self.handler.failed(slot, result)
            else:
                handled = self.handler.finish(slot, result, carried)
            if handled is None:  # left pending (redelivered from our backlog)
                self._backlog = True
                continue
            batch.done(msg_id, handled)
        if transient is not None:
            self._backlog = True
            self._left_pending(waiting)
            raise transient

    def _ack_entries(self) -> list[Any]:
        """The acknowledgements :meth:`run` left for the next read, taken (see :func:`read_together`)."""
        acks = list(self._unsent_acks)
        del self._unsent_acks[:len(acks)]
        return acks

    def reclaim(self, min_idle_ms: int = 60_000, count: int = 100) -> int:
        """Take over messages pending longer than ``min_idle_ms`` (any consumer's, a dead
        one's typically) with XAUTOCLAIM and handle them; returns how many were handled.
        Then the group's consumers that have nothing pending and were idle longer than
        ``forget_idle_ms`` (dead ones) are deleted."""
        handled = 0
        start: Any = "0-0"
        while True:
            reply = self.redis.xautoclaim(self.stream, self.group, self.consumer, min_idle_ms,
                                          start_id=start, count=count)
            start, messages = reply[0], reply[1]
            for entry in messages:
                if not entry or entry[1] is None:
                    continue
                msg_id, fields = entry[0], entry[1]
                if self._too_many_deliveries(msg_id, fields):
                    handled += 1
                    continue
                try:
                    if self.handle(msg_id, fields):
                        handled += 1
                except Exception as exc:
                    if is_transient(exc):
                        self._left_pending([msg_id])
                    raise
            if text(start) == "0-0":
                break
        self.forget_dead_consumers()
        return handled

    def forget_dead_consumers(self) -> list[str]:
        """Delete the group's consumers with no pending entry, idle over ``forget_idle_ms``
        (never this one); returns their names.  A live consumer deleted by mistake is
        recreated by its next read (it had nothing pending: nothing is lost)."""
        gone: list[str] = []
        for c in self.redis.xinfo_consumers(self.stream, self.group):
            name = text(c["name"])
            if name == self.consumer or int(c.get("pending", 0)) or int(c.get("idle", 0)) < self.forget_idle_ms:
                continue
            if int(self.redis.xgroup_delconsumer(self.stream, self.group, name)) == 0:
                gone.append(name)
            else:  # it took a message between the two calls: that message is lost to the group
                log.error("%s: consumer %s had pending entries when it was deleted", self.stream, name)
        if gone:
            log.info("%s: forgot %d dead consumer(s): %s", self.stream, len(gone), ", ".join(gone[:10]))
        return gone

    def _too_many_deliveries(self, msg_id: Any, fields: dict) -> bool:
        info = self.redis.xpending_range(self.stream, self.group, min=msg_id, max=msg_id, count=1)
        if not info:
            return False
        over = self._over_limit(msg_id, fields, int(info[0]["times_delivered"]))
        if over is None:
            return False
        batch = _Batch()
        batch.done(msg_id, over)
        self._commit(batch)
        return bool(batch.acks)

    def run(self, stop: threading.Event, block_ms: int = 1000, count: int = 10,
            reclaim_every_s: float = 30.0, min_idle_ms: int = 60_000,
            trim_every_s: float = 60.0) -> None:
        """Loop until ``stop`` is set (the message in hand is finished first).

        Every ``reclaim_every_s`` it reclaims idle pending messages, every
        ``trim_every_s`` it trims the inbox below what every group has handled (at once after
        an entry over 64 KB: it does not stay in Redis for a minute).
        Redis outages are waited out with a capped back-off; any other failure
        of a round is logged and retried the same way (the loop never dies on
        one message: :meth:`handle` dead-letters what it cannot process).
        The acknowledgements of each read go out in the pipeline of the next read
        (:meth:`run_once` ``defer_ack``), and are sent on stopping.
        """
        try:
            self._loop(stop, block_ms, count, reclaim_every_s, min_idle_ms, trim_every_s)
        finally:
            try:
                self.flush_acks()
            except REDIS_FAILURES as exc:  # redelivered after a restart: duplicates, published again
                log.warning("%s: could not acknowledge %d message(s) on stopping: %s",
                            self.stream, len(self._unsent_acks), exc)

    def _loop(self, stop: threading.Event, block_ms: int, count: int, reclaim_every_s: float,
              min_idle_ms: int, trim_every_s: float) -> None:
        next_reclaim = time.monotonic() + reclaim_every_s
        next_trim = time.monotonic() + trim_every_s
        backoff = Backoff(first=0.05, cap=READ_RETRY_CAP_S)
        oversized = self.stats.oversized
        while not stop.is_set():
            try:
                self.run_once(block_ms=block_ms, count=count, stop=stop, defer_ack=True)
                now = time.monotonic()
                if self.stats.oversized != oversized:  # an oversized entry handled: out of Redis now
                    oversized = self.stats.oversized
                    self.flush_acks()
                    next_trim = now
                if now >= next_reclaim and not stop.is_set():
                    self.reclaim(min_idle_ms=min_idle_ms)
                    next_reclaim = now + reclaim_every_s
                if now >= next_trim and not stop.is_set():
                    self.trim_inbox()
                    next_trim = now + trim_every_s
                backoff.reset()
            except REDIS_FAILURES as exc:
                if self._just_parked:  # only some messages' publications wait: read on
                    self._just_parked = False
                    log.warning("%s: publication refused (%s); %d message(s) wait, the others go on",
                                self.stream, exc, len(self._parked_ids))
                    continue
                delay = read_retry_delay(exc, backoff)
                log.warning("redis error in the gateway loop (retrying in %.2fs): %s", delay, exc)
                self._backlog = True
                stop.wait(delay)
            except Exception:
                delay = backoff.next()
                log.exception("the gateway loop failed (retrying in %.2fs)", delay)
                self._backlog = True
                stop.wait(delay)

    def trim_inbox(self) -> int:
        """XTRIM MINID the inbox below the oldest entry some group still needs; returns entries removed."""
        groups = self.redis.xinfo_groups(self.stream)
        if not groups:
            return 0
        floor: tuple[int, int] | None = None

        def lower(pos: tuple[int, int]) -> None:
            nonlocal floor
            floor = pos if floor is None or pos < floor else floor

        for g in groups:
            ms, n = keys.stream_pos(g["last-delivered-id"])
            lower((ms, n + 1))  # everything up to the last delivered entry was handed out …
            pending = self.redis.xpending(self.stream, g["name"])
            if pending and pending.get("pending"):
                lower(keys.stream_pos(pending["min"]))  # … and is handled unless still pending
        if floor is None:
            return 0
        # MINID removes the entries with an id below the floor
        return int(self.redis.xtrim(self.stream, minid=f"{floor[0]}-{floor[1]}", approximate=False))

    # -- one message ----------------------------------------------------------------------
    def handle(self, msg_id: Any, fields: dict) -> bool:
        """Handle one inbox message; True when it was acknowledged.

        Redis errors propagate (the message stays pending); a WrongVersion the
        service gave up on leaves it pending too (redelivered by reclaim).
        """
        batch = _Batch()
        try:
            self._handle(msg_id, fields, batch)
        finally:
            self._commit(batch)
        return bool(batch.acks)

    def _handle(self, msg_id: Any, fields: dict, batch: _Batch) -> None:
        """:meth:`handle` without the writes: the message's outputs go to the batch and,
        once it is fully handled, its id to ``batch.acks`` (:meth:`_commit` does both)."""
        try:
            handled = self.handler.handle(msg_id, fields)
        except Exception:
            self._backlog = True
            raise
        if handled is None:  # left pending (redelivered from our backlog)
            self._backlog = True
            return
        batch.done(msg_id, handled)

    def _write_each(self, batch: _Batch) -> list[Any]:
        """The batch's writes message by message (after the pipeline of all of them failed
        before reaching Redis, e.g. a value that cannot be encoded): a message whose
        writes fail so gets that exception as the reply of each of its writes."""
        replies: list[Any] = []
        for handled in batch.handled:
            try:
                replies.extend(self.publisher.write(handled.writes, raise_on_error=False))
            except Exception as exc:
                if is_outage(exc):
                    raise
                replies.extend([exc] * len(handled.writes))
        return replies

    def _commit(self, batch: _Batch, defer_ack: bool = False, rider: wire.Rider | None = None) -> None:
        """Write the batch's outputs, then acknowledge the messages whose outputs were written.

        A write refused because of the message (e.g. WRONGTYPE: its ``reply_to``
        names a key of another type; a value that cannot be encoded) would fail the
        same way on every redelivery: that message alone is dead-lettered and
        acknowledged.  A connection failure, or an error reply of the server's state
        (OOM, READONLY, …: :func:`engine.store.redis_errors.is_transient`),
        acknowledges none of the messages it touched: they are redelivered
        (duplicates, published again), and those deliveries do not count against
        ``max_deliveries``.  ``rider``: the next read, for the writes' round trip to its node
        (:meth:`Publisher.write`)."""
        writes = [w for h in batch.handled for w in h.writes]
        try:
            try:
                replies = self.publisher.write(writes, raise_on_error=False, rider=rider)
            except Exception as exc:
                if is_outage(exc):
                    raise
                replies = self._write_each(batch)  # not sent at all (encoding): find the message it belongs to
        except REDIS_FAILURES:
            self.stats.retried += len(batch.acks)
            self._left_pending(list(batch.acks))
            batch.clear()  # nothing is acknowledged: the messages are redelivered
            raise
        acks: list[Any] = []
        retry: BaseException | None = None
        waiting: list[Any] = []
        at = 0
        for msg_id, handled in zip(batch.acks, batch.handled):
            errors = [r for r in replies[at:at + len(handled.writes)] if isinstance(r, Exception)]
            at += len(handled.writes)
            if not errors:
                acks.append(msg_id)
                self.stats.published += handled.published
                continue
            transient = [e for e in errors if is_transient(e)]
            if transient:
                retry = retry or transient[0]
                waiting.append(msg_id)
                continue
            log.error("%s %s: its outputs were refused: %s", self.stream, text(msg_id), errors[0])
            try:  # the dead letter alone (no reply_to / outbox entry: those may be what was refused)
                self.publisher.write(self.publisher.dead_writes(
                    msg_id, handled.fields, f"internal error while publishing: "
                    f"{type(errors[0]).__name__}: {errors[0]}", None, code=INTERNAL_ERROR))
            except REDIS_FAILURES as exc:
                retry = retry or exc
                waiting.append(msg_id)
                continue
            acks.append(msg_id)
        batch.clear()
        if acks:
            if defer_ack:
                self._unsent_acks.extend(acks)
            else:
                self.redis.xack(self.stream, self.group, *acks)
            self.stats.processed += len(acks)
            for m in acks:
                self._transient.pop(text(m), None)
            batch.acks.extend(acks)  # what was acknowledged (run_once / handle report it)
        if retry is not None:
            self.stats.retried += 1
            self._left_pending(waiting)
            self._park(waiting)
            raise retry

    def _park(self, msg_ids: list[Any]) -> None:
        """``msg_ids`` (stored, their publication refused for a transient reason) wait for
        their retry at a back-off of their own while later messages go on (see
        :attr:`park_publications`); too many parked at once: every read waits, as on any outage."""
        if not self.park_publications or not msg_ids:
            return
        self._parked_ids.update(text(m) for m in msg_ids)
        if len(self._parked_ids) > PARK_LIMIT:
            return  # the whole stream waits (``_backlog``, the loop's back-off)
        self._backlog = False
        self._parked_due = time.monotonic() + self._park_delay
        self._park_delay = min(self._park_delay * 2, PARK_MAX_S)
        self._just_parked = True

    # -- publishing (the timer workers' path) ---------------------------------------------
    def publish(self, command: CommandBase, outcome: OutcomeLike, reply_to: str | None = None,
                msg_id: Any = None) -> None:
        """Publish one command's outcome (:meth:`Publisher.publish`)."""
        self.publisher.publish(command, outcome, reply_to, msg_id)


class _Carries:
    """The outputs several consumers' reads offer to one ``execute_many`` (each command's
    own read's :class:`~engine.service.inbox_message.CarriedOutputs`)."""

    def __init__(self, parts: list[Any]):
        self.parts = parts

    @property
    def redis(self) -> Any:
        return self.parts[0].redis

    def outputs_of(self, command: CommandBase, outcome: Any) -> Any:
        for part in self.parts:
            out = part.outputs_of(command, outcome)
            if out is not None:
                return out
        return None


def run_together(consumers: list[InboxConsumer], block_ms: int | None = 1000, count: int = 10,
                 stop: threading.Event | None = None, carry_on: Callable[[], bool] | None = None) -> int:
    """:meth:`InboxConsumer.run_once` of several consumers at once, on one Redis node.

    The consumers read streams with one group and one consumer name (serve's consumers of
    one channel's buckets it owns on a plain Redis; on a Redis Cluster, where a read of
    several keys must stay in one slot, the player and operator streams of one bucket).  A
    consumer with pending entries of its own reads them first, alone
    (:meth:`InboxConsumer.run_once`).  The others' streams are read with one XREADGROUP (the
    acknowledgements of their last reads in its pipeline); the commands of every stream of
    one channel are executed together (one ``execute_many`` per channel: one round of
    pipelined appends, the publications carried); then each consumer publishes what no
    append carried and leaves its acknowledgements for the next read, as
    ``run_once(defer_ack=True)`` does.

    On a Redis Cluster, with ``carry_on`` (asked before each ride;
    :class:`engine.service.ownership.InboxGroup` says no once its members changed, a stop was
    asked for or its housekeeping is due) the next read rides on the round's publications to
    the readers' node (:class:`engine.store.wire.Rider`: the acknowledgements and the blocking
    XREADGROUP after that node's writes, in their write): its entries are handled in the same
    call, and so on while they come -- one round trip per read less, when a player's or the
    reply stream lives on the bucket's node (else no node takes the ride and the next read
    goes alone).

    Returns how many messages were handled; the first transient error is raised once every
    consumer's batch is committed."""
    handled = 0
    for c in consumers:
        if c._parked_due is not None and time.monotonic() >= c._parked_due:
            c._backlog = True  # its parked messages' retry is due: run_once reads them first
        if c._backlog:
            handled += c.run_once(block_ms=None, count=count, stop=stop, defer_ack=True)
    readers = [c for c in consumers if not c._backlog]
    if not readers:
        return handled
    by_stream = _read_together(consumers, readers, None if handled else block_ms, count)

    def next_ride() -> _Ride | None:
        # none on one Redis: its publications go inside the appends' scripts, and a read sent
        # with the appends is served as soon as they run (a command that comes while the
        # round finishes would wait a round more)
        if carry_on is None or not readers[0]._cluster or not carry_on():
            return None
        return _Ride.of(consumers, readers, block_ms, count)

    ride = next_ride() if by_stream and any(by_stream.values()) else None
    while by_stream and any(by_stream.values()):
        try:
            handled += _handle_read(readers, by_stream, stop, None if ride is None else ride.rider)
        except BaseException:
            if ride is not None:
                ride.drop(readers)
            raise
        if ride is None:
            break
        following = next_ride()  # made while the ride's read may still wait: off a command's path
        try:
            by_stream = ride.read(readers)
        except BaseException:
            if following is not None:
                following.drop(readers)
            raise
        ride = following
    if ride is not None:  # made, never sent: its acknowledgements go with the next read
        ride.drop(readers)
    return handled


class _Ride:
    """The next read of a :func:`run_together` round, riding on its publications: the unsent
    acknowledgements of every consumer and the XREADGROUP of the readers' streams (BLOCK),
    as a :class:`~engine.store.wire.Rider` to the node of the readers' slot."""

    __slots__ = ("rider", "acking")

    def __init__(self, rider: wire.Rider, acking: list[tuple[InboxConsumer, list[Any]]]):
        self.rider = rider
        self.acking = acking

    @classmethod
    def of(cls, consumers: list[InboxConsumer], readers: list[InboxConsumer], block_ms: int | None,
           count: int) -> _Ride | None:
        """The ride of the readers' next read (a Cluster's: :func:`run_together` asks on one
        only); None where :mod:`engine.store.wire` cannot serve the readers' node."""
        server = readers[0]._slot_client()
        if not wire.usable(server):
            return None
        acking = [(c, c._ack_entries()) for c in consumers if c._unsent_acks]
        return cls(wire.Rider(server, _read_commands(acking, readers, count, block_ms)), acking)

    def _unsent(self) -> None:
        _ack_later(self.acking)
        self.acking = []

    def drop(self, readers: list[InboxConsumer]) -> None:
        """The round failed: the acknowledgements wait for the next read; a read that may
        have run leaves its entries pending on the readers (read again first)."""
        if self.rider.in_flight is not None:
            self.rider.in_flight.abandon()
        self._unsent()
        if self.rider.sent:
            for c in readers:
                c._backlog = True

    def read(self, readers: list[InboxConsumer]) -> dict[str, list[Any]] | None:
        """What the ride read (None: no append took it, or the read ran and was lost -- its
        entries are read again as the readers' own pending ones); raises as a read does."""
        in_flight = self.rider.in_flight
        if in_flight is None:
            self.drop(readers)
            return None
        try:
            try:
                replies = in_flight.finish()
            except BaseException:
                self.drop(readers)
                raise
            acking, self.acking = self.acking, []
            try:
                return _read_replies(acking, readers, replies, direct=True)
            except BaseException:
                for c in readers:
                    c._backlog = True
                raise
        except REDIS_FAILURES as exc:
            readers[0]._lost_node(exc)
            raise


def _handle_read(readers: list[InboxConsumer], by_stream: dict[str, list[Any]], stop: threading.Event | None,
                 rider: wire.Rider | None) -> int:
    """One read's entries (by stream) handled: prepared, executed per channel, published,
    committed with deferred acknowledgements; ``rider`` (the next read) goes with the
    publications to its node.  Returns how many messages were handled; the first transient
    error is raised once every batch is committed."""
    handled = 0
    work: list[tuple[InboxConsumer, list[Any], list[Any], _Batch]] = []
    failure: Exception | None = None
    for c in readers:
        entries = by_stream.get(c.stream) or []
        if not entries:
            continue
        slots: list[Any] = []
        ids: list[Any] = []
        try:
            for msg_id, fields in entries:
                if stop is not None and stop.is_set():
                    c._backlog = True
                    break
                slots.append(c.handler.prepare(msg_id, fields))
                ids.append(msg_id)
        except Exception as exc:
            c._backlog = True
            if is_transient(exc):  # this message and the rest of the read wait; the prepared go on
                c._left_pending([e[0] for e in entries[len(slots):]])
            failure = failure or exc
        work.append((c, slots, ids, _Batch()))
    carries = {id(c): c.handler.carry(slots) for c, slots, _ids, _b in work
               if any(isinstance(x, Prepared) for x in slots)}
    # one execute_many per channel: the streams of one channel share a policy (one node's
    # groups); a Cluster's bucket group reads its player and operator streams together
    by_channel: dict[Any, tuple[Any, list[Prepared], list[Any]]] = {}
    for c, slots, _ids, _b in work:
        mine = [p for p in slots if isinstance(p, Prepared)]
        if mine:
            assert c.service is not None, "a publish-only consumer cannot handle inbox messages"
            key = _channel_key(c.service)
            _svc, prepared, parts = by_channel.setdefault(key, (c.service, [], []))
            prepared.extend(mine)
            parts.append(carries[id(c)])
    results: dict[int, Any] = {}
    for service, prepared, parts in by_channel.values():
        for p, r in zip(prepared, run_many(service, [p.command for p in prepared], stop, _Carries(parts))):
            results[id(p)] = r
    for c, slots, ids, batch in work:
        try:
            c._finish_prepared(slots, ids, batch, results, carries.get(id(c)))
        except Exception as exc:
            failure = failure or exc
        finally:
            try:
                c._commit(batch, defer_ack=True, rider=rider)
            except Exception as exc:
                failure = failure or exc
        handled += len(batch.acks)
    if failure is not None:
        raise failure
    return handled


def _channel_key(service: Any) -> Any:
    """What makes two consumers' services run the same commands alike: a
    :class:`~engine.service.channels.ChannelService`'s channel, service and operator
    (serve builds one per consumer); any other service itself."""
    channel = getattr(service, "channel", None)
    if channel is None:
        return id(service)
    return (channel.name, id(service.service), id(service.operator))


#: the arguments of the read of a set of streams (:func:`_xreadgroup_args`), built once per set
_XREAD_ARGS: dict[tuple[Any, ...], list[Any]] = {}


def _xreadgroup_args(group: str, consumer: str, streams: tuple[str, ...], count: int,
                     block_ms: int | None) -> list[Any]:
    """XREADGROUP's arguments for new entries (``>``) of ``streams`` (what redis-py's
    ``xreadgroup`` sends), kept: a serve reads the same set of streams on every read.

    >>> _xreadgroup_args("g", "c", ("s1", "s2"), 10, None)
    [b'GROUP', 'g', 'c', b'COUNT', '10', b'STREAMS', 's1', 's2', '>', '>']
    """
    key = (group, consumer, streams, count, block_ms)
    args = _XREAD_ARGS.get(key)
    if args is None:
        if count < 1 or (block_ms is not None and block_ms < 0):
            raise ValueError(f"bad XREADGROUP count {count} or block {block_ms}")
        args = [b"GROUP", group, consumer, b"COUNT", str(count)]
        if block_ms is not None:
            args += [b"BLOCK", str(block_ms)]
        args += [b"STREAMS", *streams, *(">" for _ in streams)]
        if len(_XREAD_ARGS) >= 64:
            _XREAD_ARGS.clear()
        _XREAD_ARGS[key] = args
    return args


def _xreadgroup_packed(group: str, consumer: str, streams: tuple[str, ...], count: int,
                       block_ms: int | None) -> bytes:
    """:func:`_xreadgroup_args` as an XREADGROUP on the wire (:func:`engine.store.wire.pack`), kept."""
    key = (group, consumer, streams, count, block_ms)
    packed = _XREAD_PACKED.get(key)
    if packed is None:
        packed = wire.pack("XREADGROUP", *_xreadgroup_args(group, consumer, streams, count, block_ms))
        if len(_XREAD_PACKED) >= 64:
            _XREAD_PACKED.clear()
        _XREAD_PACKED[key] = packed
    return packed


_XREAD_PACKED: dict[tuple[Any, ...], bytes] = {}


def _read_together(consumers: list[InboxConsumer], readers: list[InboxConsumer], block_ms: int | None,
                   count: int) -> dict[str, list[Any]] | None:
    """One round trip: every consumer's unsent acknowledgements, then one XREADGROUP of the
    ``readers``' streams; their new entries by stream (None: a stream had lost its group,
    now created again).  Sent packed (:mod:`engine.store.wire`) where the client allows,
    else as a redis-py pipeline."""
    first = readers[0]
    try:
        return _read_slot_together(first, consumers, readers, block_ms, count)
    except REDIS_FAILURES as exc:
        first._lost_node(exc)
        raise


def _ack_later(acking: list[tuple[InboxConsumer, list[Any]]]) -> None:
    """Acknowledgements taken for a round trip that did not carry them: they go first with the
    next read."""
    for c, acks in acking:
        c._unsent_acks[:0] = acks


def _read_commands(acking: list[tuple[InboxConsumer, list[Any]]], readers: list[InboxConsumer], count: int,
                   block_ms: int | None) -> list[bytes]:
    """A read's round trip, packed: each consumer's XACK, then one XREADGROUP of the readers' streams."""
    first = readers[0]
    return [*(wire.pack("XACK", c.stream, c.group, *acks) for c, acks in acking),
            _xreadgroup_packed(first.group, first.consumer, tuple(c.stream for c in readers), count, block_ms)]


def _read_slot_together(first: InboxConsumer, consumers: list[InboxConsumer], readers: list[InboxConsumer],
                        block_ms: int | None, count: int) -> dict[str, list[Any]] | None:
    acking = [(c, c._ack_entries()) for c in consumers if c._unsent_acks]
    streams = tuple(c.stream for c in readers)
    client = first._slot_client()
    direct = wire.usable(client)
    try:
        if direct:
            replies = wire.round_trip(client, _read_commands(acking, readers, count, block_ms))
        else:
            pipe = client.pipeline(transaction=False)
            for c, acks in acking:
                pipe.xack(c.stream, c.group, *acks)
            pipe.execute_command("XREADGROUP", *_xreadgroup_args(first.group, first.consumer, streams, count,
                                                                 block_ms))
            replies = pipe.execute(raise_on_error=False)
    except Exception:
        _ack_later(acking)
        raise
    return _read_replies(acking, readers, replies, direct)


def _read_replies(acking: list[tuple[InboxConsumer, list[Any]]], readers: list[InboxConsumer], replies: list[Any],
                  direct: bool) -> dict[str, list[Any]] | None:
    """The replies of a read's round trip (each consumer's XACK, then the XREADGROUP) as the
    new entries by stream; None when a stream had lost its group (created again).  An XACK
    that failed is queued again and raised."""
    failed = [(pair, acked) for pair, acked in zip(acking, replies) if isinstance(acked, Exception)]
    if failed:
        _ack_later([pair for pair, _ in failed])
        raise failed[0][1]
    reply = replies[-1]
    if isinstance(reply, redis.ResponseError) and "NOGROUP" in str(reply):
        for c in readers:  # a stream deleted under us
            c.ensure_group()
        return None
    if isinstance(reply, Exception):
        raise reply
    if direct:  # the server's reply: {stream: [[id, [field, value, …]], …]} (RESP3), a list of pairs (RESP2), nil
        return {text(stream): [(e[0], _fields(e[1])) for e in es if e is not None and e[0] is not None
                               and e[1] is not None]
                for stream, es in (reply.items() if isinstance(reply, dict) else reply or ())}
    return {text(stream): [e for e in es if e[0] is not None and e[1] is not None]
            for stream, es in stream_replies(reply)}


def _fields(flat: list[Any]) -> dict[Any, Any]:
    """An entry's ``[field, value, …]`` as a map (what redis-py's reply callback makes of it)."""
    it = iter(flat)
    return dict(zip(it, it))
