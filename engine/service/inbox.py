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

The inbox is one stream, not hash-tagged per match: on Redis Cluster it lives
on one node (its throughput is that node's).  Run more inboxes (one
InboxConsumer per inbox) if that ever limits; every other key spreads.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import msgpack
import redis

from engine.match.commands import MAX_COMMAND_BYTES, CommandBase, decode_command, parse_command
from engine.match.errors import BadCommand, Rejected
from engine.store import keys
from engine.store.base import WrongVersion
from engine.store.redis_store import ensure_group, stream_replies

log = logging.getLogger("shuangkou.gateway")

INTERNAL_ERROR = "internal_error"  # gateway-level rejection code: the engine failed on the command


def _s(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _plain(obj: Any) -> Any:
    """msgpack ``default``: pydantic models, dataclasses, sets -> plain data."""
    if hasattr(obj, "model_dump"):
        return obj.model_dump(mode="python")
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    return str(obj)


def pack(data: Any) -> bytes:
    return msgpack.packb(data, use_bin_type=True, default=_plain)  # type: ignore[no-any-return]


def _lenient_map(raw: bytes | None, is_json: bool) -> dict[str, Any]:
    """Best effort to read a broken command's map (to tell its sender why it failed)."""
    if raw is None or len(raw) > 4 * MAX_COMMAND_BYTES:
        return {}
    try:
        data = json.loads(raw) if is_json else msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except Exception:
        return {}
    return data if isinstance(data, dict) else {}


def _short_str(value: Any) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= 200 else None


@dataclasses.dataclass
class GatewayStats:
    processed: int = 0  # messages handled and acknowledged
    accepted: int = 0
    rejected: int = 0
    duplicates: int = 0
    dead: int = 0
    retried: int = 0  # left pending after a transient failure (redelivered later)
    published: int = 0  # entries written to player/reply streams


Write = tuple[str, dict[str, Any], int]  # (stream, fields, approximate MAXLEN)


@dataclasses.dataclass
class _Batch:
    """What handling some inbox messages left to do: stream writes (in order), then the XACK.

    The writes are kept per message (``groups[k]`` belongs to ``acks[k]``), so a write
    Redis refuses is charged to its own message only."""

    acks: list[Any] = dataclasses.field(default_factory=list)
    groups: list[list[Write]] = dataclasses.field(default_factory=list)
    counts: list[int] = dataclasses.field(default_factory=list)  # updates/replies per message
    fields: list[dict] = dataclasses.field(default_factory=list)  # the messages (to dead-letter them)

    def done(self, msg_id: Any, writes: list[Write], published: int = 0, fields: dict | None = None) -> None:
        """``msg_id`` is fully handled: acknowledge it once ``writes`` are written."""
        self.acks.append(msg_id)
        self.groups.append(list(writes))
        self.counts.append(published)
        self.fields.append(fields or {})

    def clear(self) -> None:
        self.acks.clear()
        self.groups.clear()
        self.counts.clear()
        self.fields.clear()


#: error replies that say nothing about the message (the server is busy, read-only,
#: out of memory, failing over): the message is retried, never dead-lettered for them
_TRANSIENT_REPLIES = ("OOM", "READONLY", "LOADING", "BUSY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN",
                      "NOREPLICAS", "MISCONF", "MOVED", "ASK")


def _transient_reply(exc: BaseException) -> bool:
    if not isinstance(exc, redis.ResponseError) or isinstance(exc, redis.ReadOnlyError):
        return True
    return str(exc).lstrip().upper().startswith(_TRANSIENT_REPLIES)


class InboxConsumer:
    """Consumes ``sk:inbox`` as ``consumer`` of the ``sk-service`` group.

    ``service`` is an :class:`engine.service.service.MatchService` (anything with
    ``execute(command) -> Outcome``; Outcome has ``events``, ``state``,
    ``rejection``, ``duplicate``).  Consumer names must be stable across
    restarts of one worker (e.g. ``host-1``): a restarted consumer first
    finishes its own pending messages.  ``service`` may be None for a
    publish-only gateway (:meth:`publish`, used by the timer workers).
    """

    def __init__(self, redis_client: Any, service: Any, consumer: str, *,
                 inbox: str = keys.INBOX, group: str = keys.SERVICE_GROUP,
                 outbox_maxlen: int = 1000, dead_maxlen: int = 100_000,
                 max_deliveries: int = 5,
                 on_dead: Callable[[str, str], None] | None = None):
        self.redis = redis_client
        self.service = service
        self.consumer = consumer
        self.inbox = inbox
        self.group = group
        self.outbox_maxlen = outbox_maxlen
        self.dead_maxlen = dead_maxlen
        self.max_deliveries = max_deliveries
        #: called with (code, reason) each time a message is dead-lettered (e.g. to count it
        #: in a metric); an exception in it is logged and never stops the loop
        self.on_dead = on_dead
        self.stats = GatewayStats()
        self._backlog = True  # read our own pending entries (id 0) before new ones
        self.ensure_group()

    # -- setup ----------------------------------------------------------------------------
    def ensure_group(self) -> None:
        """Create the consumer group (and the inbox) if missing; from the start of the inbox."""
        ensure_group(self.redis, self.inbox, self.group)

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
            reply = self.redis.xreadgroup(self.group, self.consumer, {self.inbox: start},
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
            reply = self.redis.xautoclaim(self.inbox, self.group, self.consumer, min_idle_ms,
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
            if _s(start) == "0-0":
                return handled

    def _too_many_deliveries(self, msg_id: Any, fields: dict) -> bool:
        info = self.redis.xpending_range(self.inbox, self.group, min=msg_id, max=msg_id, count=1)
        if not info or int(info[0]["times_delivered"]) <= self.max_deliveries:
            return False
        n = int(info[0]["times_delivered"])
        self._dead(msg_id, fields, f"delivered {n} times without being acknowledged", None)
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
        groups = self.redis.xinfo_groups(self.inbox)
        if not groups:
            return 0
        floor: tuple[int, int] | None = None

        def lower(pos: tuple[int, int]) -> None:
            nonlocal floor
            floor = pos if floor is None or pos < floor else floor

        for g in groups:
            ms, n = keys.stream_pos(g["last-delivered-id"])
            lower((ms, n + 1))  # everything up to the last delivered entry was handed out …
            pending = self.redis.xpending(self.inbox, g["name"])
            if pending and pending.get("pending"):
                lower(keys.stream_pos(pending["min"]))  # … and is handled unless still pending
        if floor is None:
            return 0
        # MINID removes the entries with an id below the floor
        return int(self.redis.xtrim(self.inbox, minid=f"{floor[0]}-{floor[1]}", approximate=False))

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
        """:meth:`handle` without the writes: the message's outputs go to the batch (``_Batch.done``)
        and, once it is fully handled, its id to ``batch.acks`` (:meth:`_commit` does both)."""
        if not fields:
            batch.done(msg_id, self._dead_writes(msg_id, {}, "the message has no fields (deleted or trimmed "
                                                 "from the inbox before it was handled)", None))
            return
        fields = {_s(k): v for k, v in fields.items()}
        reply_to = self._reply_stream(fields.get("reply_to"))
        raw, is_json = (fields.get("c"), False) if "c" in fields else (fields.get("j"), True)
        try:
            command = self._decode(raw, is_json)
        except BadCommand as exc:
            loose = _lenient_map(raw if isinstance(raw, bytes) else None, is_json)
            batch.done(msg_id, self._dead_writes(msg_id, fields, exc.reason, loose, reply_to, code=exc.code),
                       fields=fields)
            return
        try:
            outcome = self.service.execute(command)
        except WrongVersion as exc:
            log.warning("inbox %s: %s; left pending for redelivery", _s(msg_id), exc)
            self.stats.retried += 1
            self._backlog = True
            return
        except redis.RedisError:
            self.stats.retried += 1
            self._backlog = True
            raise
        except Exception as exc:  # a bug in the engine: do not let it block the inbox
            log.exception("inbox %s: the engine failed on %s", _s(msg_id), command.type)  # type: ignore[attr-defined]
            batch.done(msg_id, self._dead_writes(msg_id, fields, f"internal error: {type(exc).__name__}: {exc}",
                                                 command.model_dump(mode="python"), reply_to, code=INTERNAL_ERROR),
                       fields=fields)
            return
        try:
            outputs = self._outputs(command, outcome, reply_to, msg_id)
        except Exception as exc:  # an unencodable view: the events are stored, report and go on
            log.exception("inbox %s: could not publish the outcome", _s(msg_id))
            batch.done(msg_id, self._dead_writes(msg_id, fields, f"internal error while publishing: "
                                                 f"{type(exc).__name__}: {exc}", None, reply_to,
                                                 code=INTERNAL_ERROR), fields=fields)
            return
        batch.done(msg_id, outputs, len(outputs), fields)

    @staticmethod
    def _decode(raw: Any, is_json: bool) -> CommandBase:
        if raw is None:
            raise BadCommand("the message has no command: field c (msgpack) or j (JSON) is required")
        if isinstance(raw, str):
            raw = raw.encode("utf-8")
        if not is_json:
            return decode_command(raw)
        if len(raw) > MAX_COMMAND_BYTES:
            raise BadCommand(f"command too large: {len(raw)} bytes (limit {MAX_COMMAND_BYTES})")
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise BadCommand(f"command is not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise BadCommand("a command must be a map")
        return parse_command(data)

    def _reply_stream(self, value: Any) -> str | None:
        if value is None:
            return None
        name = _s(value)
        if name.startswith(keys.REPLY_PREFIX) and len(name) <= 300:
            return name
        log.warning("ignoring reply_to %r: reply streams must be named %s…", name[:80], keys.REPLY_PREFIX)
        return None

    def _ack(self, msg_id: Any) -> None:
        self.redis.xack(self.inbox, self.group, msg_id)
        self.stats.processed += 1

    def _write(self, writes: list[Write], raise_on_error: bool = True) -> list[Any]:
        """The writes in order, one pipeline (no MULTI: each stream is on its own; on
        Redis Cluster the pipeline splits by node).  Raises if any of them failed, or
        with ``raise_on_error=False`` returns each write's reply (an error reply as the
        exception); a connection failure always raises."""
        if not writes:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for stream, fields, maxlen in writes:
            pipe.xadd(stream, fields, maxlen=maxlen, approximate=True)
        return pipe.execute(raise_on_error=raise_on_error)

    def _commit(self, batch: _Batch) -> None:
        """Write the batch's outputs, then acknowledge the messages whose outputs were written.

        A write Redis refuses because of the message (e.g. WRONGTYPE: its ``reply_to``
        names a key of another type) would fail the same way on every redelivery: that
        message alone is dead-lettered and acknowledged.  A connection failure, or an
        error reply of the server's state (OOM, READONLY, …), acknowledges none of the
        messages it touched: they are redelivered (duplicates, published again)."""
        writes = [w for group in batch.groups for w in group]
        try:
            replies = self._write(writes, raise_on_error=False)
        except redis.RedisError:
            self.stats.retried += len(batch.acks)
            self._backlog = True
            batch.clear()  # nothing is acknowledged: the messages are redelivered
            raise
        acks: list[Any] = []
        retry: BaseException | None = None
        at = 0
        for msg_id, group, count, fields in zip(batch.acks, batch.groups, batch.counts, batch.fields):
            errors = [r for r in replies[at:at + len(group)] if isinstance(r, Exception)]
            at += len(group)
            if not errors:
                acks.append(msg_id)
                self.stats.published += count
                continue
            transient = [e for e in errors if _transient_reply(e)]
            if transient:
                retry = retry or transient[0]
                continue
            log.error("inbox %s: Redis refused its outputs: %s", _s(msg_id), errors[0])
            try:  # the dead letter alone (no reply_to / outbox entry: those may be what was refused)
                self._write(self._dead_writes(msg_id, fields, f"internal error while publishing: "
                                              f"{type(errors[0]).__name__}: {errors[0]}", None,
                                              code=INTERNAL_ERROR))
            except redis.RedisError as exc:
                retry = retry or exc
                continue
            acks.append(msg_id)
        batch.clear()
        if acks:
            self.redis.xack(self.inbox, self.group, *acks)
            self.stats.processed += len(acks)
            batch.acks.extend(acks)  # what was acknowledged (run_once / handle report it)
        if retry is not None:
            self.stats.retried += 1
            self._backlog = True
            raise retry

    # -- outputs --------------------------------------------------------------------------
    def _recipients(self, state: Any, events: Iterable[Any]) -> list[str]:
        players: list[str] = []
        for seat in getattr(state, "seats", ()) or ():
            p = getattr(seat, "player", None)
            if p and p not in players:
                players.append(p)
        for e in events:  # e.g. a player removed before the deal still hears of it
            p = getattr(e, "player", None)
            if isinstance(p, str) and p not in players:
                players.append(p)
        return players

    def publish(self, command: CommandBase, outcome: Any, reply_to: str | None = None,
                msg_id: Any = None) -> None:
        """Publish one command's outcome: per-player ``update`` entries (each player's
        redacted events and view) or the sender's ``rejected`` entry, and the
        ``reply_to`` report when given.  The timer workers call this for the
        commands they run (no inbox message: ``reply_to`` and ``msg_id`` None)."""
        writes = self._outputs(command, outcome, reply_to, msg_id)
        self._write(writes)
        self.stats.published += len(writes)

    def _outputs(self, command: CommandBase, outcome: Any, reply_to: str | None = None,
                 msg_id: Any = None) -> list[Write]:
        """The stream entries :meth:`publish` writes for one outcome (no I/O)."""
        from projections.views import redact_event, view_for

        out: list[Write] = []
        maxlen = self.outbox_maxlen
        cmd_id = command.command_id
        match_id = command.match_id
        rejection: Rejected | None = outcome.rejection
        version = int(getattr(outcome.state, "version", 0))
        if rejection is not None:
            self.stats.rejected += 1
            player = _short_str(getattr(command, "player", None))
            if player is not None:
                out.append((keys.outbox_key(player),
                            self._rejection_fields(match_id, cmd_id, rejection.code, rejection.reason), maxlen))
            status = "rejected"
        else:
            status = "duplicate" if outcome.duplicate else "accepted"
            if outcome.duplicate:
                self.stats.duplicates += 1
            else:
                self.stats.accepted += 1
            events = tuple(outcome.events)
            if events:
                state = outcome.state
                for player in self._recipients(state, events):
                    body = {
                        "match_id": match_id, "command_id": cmd_id, "version": version,
                        "duplicate": bool(outcome.duplicate),
                        "events": [redact_event(e, player, state=state) for e in events],
                        "view": view_for(state, player),
                    }
                    out.append((keys.outbox_key(player),
                                {"kind": "update", "match": match_id, "command_id": cmd_id,
                                 "version": version, "body": pack(body)}, maxlen))
        if reply_to is not None:
            reply = {"kind": status, "match": match_id, "command_id": cmd_id, "version": version,
                     "inbox_id": msg_id if msg_id is not None else ""}
            if rejection is not None:
                reply["code"] = rejection.code
                reply["reason"] = rejection.reason
            out.append((reply_to, reply, maxlen))
        return out

    @staticmethod
    def _rejection_fields(match_id: str | None, cmd_id: str | None, code: str, reason: str) -> dict[str, Any]:
        return {"kind": "rejected", "match": match_id or "", "command_id": cmd_id or "",
                "code": code, "reason": reason[:2000]}

    def _dead(self, msg_id: Any, fields: dict, reason: str, loose: dict[str, Any] | None,
              reply_to: str | None = None, code: str = BadCommand.code) -> None:
        """Dead-letter the raw message with its reason; tell the sender when it is identifiable."""
        self._write(self._dead_writes(msg_id, fields, reason, loose, reply_to, code))

    def _dead_writes(self, msg_id: Any, fields: dict, reason: str, loose: dict[str, Any] | None,
                     reply_to: str | None = None, code: str = BadCommand.code) -> list[Write]:
        """The entries :meth:`_dead` writes (counted and reported to ``on_dead`` now)."""
        self.stats.dead += 1
        log.warning("inbox %s dead-lettered: %s", _s(msg_id), reason)
        if self.on_dead is not None:
            try:
                self.on_dead(code, reason)
            except Exception:
                log.exception("the on_dead callback failed")
        dead: dict[str, Any] = {}
        for k, v in fields.items():
            if isinstance(v, (bytes, str)) and len(v) > MAX_COMMAND_BYTES:
                v = v[:MAX_COMMAND_BYTES]
                dead["truncated"] = "1"
            dead[k] = v
        dead.update({"dead_reason": reason[:2000], "dead_code": code, "inbox_id": msg_id,
                     "consumer": self.consumer, "dead_at_ms": int(time.time() * 1000)})
        out: list[Write] = [(keys.DEAD_LETTERS, dead, self.dead_maxlen)]
        loose = loose or {}
        player = _short_str(loose.get("player"))
        cmd_id = _short_str(loose.get("command_id"))
        match_id = _short_str(loose.get("match_id"))
        if player is not None:
            out.append((keys.outbox_key(player), self._rejection_fields(match_id, cmd_id, code, reason),
                        self.outbox_maxlen))
        if reply_to is not None:
            out.append((reply_to, {"kind": "dead", "match": match_id or "", "command_id": cmd_id or "",
                                   "code": code, "reason": reason[:2000], "inbox_id": msg_id},
                        self.outbox_maxlen))
        return out
