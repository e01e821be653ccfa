"""The command service loop: read the inbox stream, execute, publish per-player updates.

Protocol (stream names, fields, codes): docs/PROTOCOL.md.  In short:

* Gateways XADD commands to ``sk:inbox`` (field ``c`` = msgpack command map,
  or ``j`` = the same map as JSON text; optional ``reply_to`` = a stream named
  ``sk:reply:…``).
* :class:`InboxConsumer` reads them with the consumer group ``sk-service``
  (XREADGROUP), runs :meth:`MatchService.execute`, publishes to each player's
  ``sk:out:<player>`` stream (``update``: the events as that player may see
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

The inbox is one stream, not hash-tagged per match: on Redis Cluster it lives
on one node (its throughput is that node's).  Run more inboxes (one
InboxConsumer per inbox) if that ever limits; every other key spreads.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import redis

from engine.match.commands import CommandBase
from engine.service.inbox_message import Accepts, Handled, MessageHandler, ServiceLike, accept_all
from engine.service.publish import INTERNAL_ERROR, GatewayStats, OutcomeLike, Publisher, text
from engine.store import keys
from engine.store.redis_store import ensure_group, stream_replies

log = logging.getLogger("shuangkou.gateway")

__all__ = ["INTERNAL_ERROR", "GatewayStats", "InboxConsumer"]


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


#: error replies that say nothing about the message (the server is busy, read-only,
#: out of memory, failing over): the message is retried, never dead-lettered for them
_TRANSIENT_REPLIES = ("OOM", "READONLY", "LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN",
                      "NOREPLICAS", "MISCONF", "MOVED", "ASK")


def _transient_reply(exc: BaseException) -> bool:
    if not isinstance(exc, redis.ResponseError) or isinstance(exc, redis.ReadOnlyError):
        return True
    return str(exc).lstrip().upper().startswith(_TRANSIENT_REPLIES)


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
                 outbox_maxlen: int = 1000, dead_maxlen: int = 100_000,
                 max_deliveries: int = 5,
                 on_dead: Callable[[str, str], None] | None = None):
        self.redis = redis_client
        self.consumer = consumer
        self.stream = stream
        self.group = group
        self.max_deliveries = max_deliveries
        self.stats = GatewayStats()
        #: builds and writes updates, rejections, replies and dead letters; ``on_dead(code,
        #: reason)`` is called each time a message is dead-lettered (e.g. to count it in a
        #: metric); an exception in it is logged and never stops the loop
        self.publisher = Publisher(redis_client, consumer=consumer, stats=self.stats,
                                   outbox_maxlen=outbox_maxlen, dead_maxlen=dead_maxlen, on_dead=on_dead)
        #: decode -> policy (``accepts``: None or the reason a command may not arrive on
        #: ``stream``) -> service -> the writes of one message
        self.handler = MessageHandler(service, self.publisher, self.stats, accepts=accepts, stream=stream)
        self._backlog = True  # read our own pending entries (id 0) before new ones
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
        if self._backlog:  # our own pending entries first (after a restart or a failure)
            entries = self._xreadgroup("0", None, count)
            if len(entries) < count:
                self._backlog = False
            if entries:
                return entries
        return self._xreadgroup(">", block_ms, count)

    def _xreadgroup(self, start: str, block_ms: int | None, count: int) -> list[tuple[Any, dict]]:
        try:
            reply = self.redis.xreadgroup(self.group, self.consumer, {self.stream: start},
                                          count=count, block=block_ms)
        except redis.ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            self.ensure_group()  # the inbox was deleted under us
            return []
        # a pending entry whose message was trimmed away comes back with no fields
        return [e for _, es in stream_replies(reply) for e in es if e[0] is not None]

    def run_once(self, block_ms: int | None = 1000, count: int = 10,
                 stop: threading.Event | None = None) -> int:
        """Read up to ``count`` messages (blocking up to ``block_ms``) and handle them.

        Returns how many were handled (acknowledged).  With ``stop`` set, the
        message in hand is finished and the rest stay pending for this consumer.
        A transient failure (Redis, a WrongVersion the service gave up on)
        leaves the message pending and is re-raised for Redis errors.

        The messages of one read are executed one after the other (each append
        is durable before the next command is decided), then what they publish
        (updates, rejections, replies, dead letters, in message order) is written
        with one pipeline and, once that succeeded, they are acknowledged with
        one XACK: two round trips per read instead of two per message, and an
        acknowledgement still only ever follows the publication.  If the process
        dies before the XACK, the messages are redelivered and their command ids
        make the re-run a duplicate (published again: updates are at-least-once).
        """
        batch = _Batch()
        try:
            for msg_id, fields in self._read(block_ms, count):
                if stop is not None and stop.is_set():
                    self._backlog = True
                    break
                self._handle(msg_id, fields, batch)
        finally:
            self._commit(batch)
        return len(batch.acks)

    def reclaim(self, min_idle_ms: int = 60_000, count: int = 100) -> int:
        """Take over messages pending longer than ``min_idle_ms`` (any consumer's, a dead
        one's typically) with XAUTOCLAIM and handle them; returns how many were handled."""
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
                if self.handle(msg_id, fields):
                    handled += 1
            if text(start) == "0-0":
                return handled

    def _too_many_deliveries(self, msg_id: Any, fields: dict) -> bool:
        info = self.redis.xpending_range(self.stream, self.group, min=msg_id, max=msg_id, count=1)
        if not info or int(info[0]["times_delivered"]) <= self.max_deliveries:
            return False
        n = int(info[0]["times_delivered"])
        self._dead(msg_id, fields, f"delivered {n} times without being acknowledged")
        self._ack(msg_id)
        return True

    def run(self, stop: threading.Event, block_ms: int = 1000, count: int = 10,
            reclaim_every_s: float = 30.0, min_idle_ms: int = 60_000,
            trim_every_s: float = 60.0) -> None:
        """Loop until ``stop`` is set (the message in hand is finished first).

        Every ``reclaim_every_s`` it reclaims idle pending messages, every
        ``trim_every_s`` it trims the inbox below what every group has handled.
        Redis outages are waited out with a capped back-off; any other failure
        of a round is logged and retried the same way (the loop never dies on
        one message: :meth:`handle` dead-letters what it cannot process).
        """
        next_reclaim = time.monotonic() + reclaim_every_s
        next_trim = time.monotonic() + trim_every_s
        backoff = 0.05
        while not stop.is_set():
            try:
                self.run_once(block_ms=block_ms, count=count, stop=stop)
                now = time.monotonic()
                if now >= next_reclaim and not stop.is_set():
                    self.reclaim(min_idle_ms=min_idle_ms)
                    next_reclaim = now + reclaim_every_s
                if now >= next_trim and not stop.is_set():
                    self.trim_inbox()
                    next_trim = now + trim_every_s
                backoff = 0.05
            except redis.RedisError as exc:
                log.warning("redis error in the gateway loop (retrying in %.2fs): %s", backoff, exc)
                self._backlog = True
                stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
            except Exception:
                log.exception("the gateway loop failed (retrying in %.2fs)", backoff)
                self._backlog = True
                stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)

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
        except redis.RedisError:
            self._backlog = True
            raise
        if handled is None:  # left pending (redelivered from our backlog)
            self._backlog = True
            return
        batch.done(msg_id, handled)

    def _ack(self, msg_id: Any) -> None:
        self.redis.xack(self.stream, self.group, msg_id)
        self.stats.processed += 1

    def _commit(self, batch: _Batch) -> None:
        """Write the batch's outputs, then acknowledge the messages whose outputs were written.

        A write Redis refuses because of the message (e.g. WRONGTYPE: its ``reply_to``
        names a key of another type) would fail the same way on every redelivery: that
        message alone is dead-lettered and acknowledged.  A connection failure, or an
        error reply of the server's state (OOM, READONLY, …), acknowledges none of the
        messages it touched: they are redelivered (duplicates, published again)."""
        writes = [w for h in batch.handled for w in h.writes]
        try:
            replies = self.publisher.write(writes, raise_on_error=False)
        except redis.RedisError:
            self.stats.retried += len(batch.acks)
            self._backlog = True
            batch.clear()  # nothing is acknowledged: the messages are redelivered
            raise
        acks: list[Any] = []
        retry: BaseException | None = None
        at = 0
        for msg_id, handled in zip(batch.acks, batch.handled):
            errors = [r for r in replies[at:at + len(handled.writes)] if isinstance(r, Exception)]
            at += len(handled.writes)
            if not errors:
                acks.append(msg_id)
                self.stats.published += handled.published
                continue
            transient = [e for e in errors if _transient_reply(e)]
            if transient:
                retry = retry or transient[0]
                continue
            log.error("inbox %s: Redis refused its outputs: %s", text(msg_id), errors[0])
            try:  # the dead letter alone (no reply_to / outbox entry: those may be what was refused)
                self.publisher.write(self.publisher.dead_writes(
                    msg_id, handled.fields, f"internal error while publishing: "
                    f"{type(errors[0]).__name__}: {errors[0]}", None, code=INTERNAL_ERROR))
            except redis.RedisError as exc:
                retry = retry or exc
                continue
            acks.append(msg_id)
        batch.clear()
        if acks:
            self.redis.xack(self.stream, self.group, *acks)
            self.stats.processed += len(acks)
            batch.acks.extend(acks)  # what was acknowledged (run_once / handle report it)
        if retry is not None:
            self.stats.retried += 1
            self._backlog = True
            raise retry

    # -- publishing (the timer workers' path) ---------------------------------------------
    def publish(self, command: CommandBase, outcome: OutcomeLike, reply_to: str | None = None,
                msg_id: Any = None) -> None:
        """Publish one command's outcome (:meth:`Publisher.publish`)."""
        self.publisher.publish(command, outcome, reply_to, msg_id)

    def _dead(self, msg_id: Any, fields: dict, reason: str) -> None:
        """Dead-letter the raw message with its reason now."""
        self.publisher.write(self.publisher.dead_writes(msg_id, fields, reason, None))
