"""Handling one inbox message: decode it, run the command, turn the outcome into writes.

:class:`MessageHandler` does no stream I/O of its own: it returns a
:class:`Handled` (the writes to make before the message may be acknowledged)
or None (leave the message pending: it is redelivered).  The inbox consumer
(engine/service/inbox.py) batches the writes and acknowledges.

A message that cannot be a command, a command the consumer's policy refuses,
and a command the engine crashed on all come back as a :class:`Handled`
(a rejection or a dead letter): nothing about one message stops the loop.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgpack

from engine.match.commands import MAX_COMMAND_BYTES, CommandBase, decode_command, parse_command
from engine.match.errors import BadCommand, NotAllowed, Rejected
from engine.match.state import MatchState
from engine.service.service import Carry, Outcome
from engine.match.protocols import ServiceLike
from engine.service.publish import (
    INTERNAL_ERROR, MAX_ENTRY_BYTES, GatewayStats, Publisher, Write, entry_bytes, text,
)
from engine.store import keys
from engine.store.base import WrongVersion
from engine.store.redis_errors import is_transient

log = logging.getLogger("shuangkou.gateway")

#: an allowed-command policy: None to accept the command, else the reason it is refused
Accepts = Callable[[CommandBase], "str | None"]


def accept_all(command: CommandBase) -> str | None:
    """The default policy: every command may arrive on this stream."""
    return None


@dataclass
class Handled:
    """A message fully handled: acknowledge it once ``writes`` are written."""

    writes: list[Write]
    published: int = 0  # updates/replies among the writes (stats)
    fields: dict[str, Any] = field(default_factory=dict)  # the message (to dead-letter it after all)


@dataclass(frozen=True)
class Prepared:
    """A decoded message whose command the policy lets through, waiting to be executed."""

    msg_id: Any
    fields: dict[str, Any]  # the message, text keys
    command: CommandBase
    reply_to: str | None


class CarriedOutputs:
    """The publisher's outputs for the prepared commands of one read, offered to
    :meth:`engine.service.service.MatchService.execute_many` to carry with their appends
    (its ``carry``: one round trip per read less).  Remembers how many entries each
    carried command published (the stats of its :class:`Handled`)."""

    def __init__(self, publisher: Publisher, slots: Sequence[Handled | Prepared]):
        self._publisher = publisher
        # the read's messages in order: once one of them has writes of its own (a refusal,
        # a dead letter), none after it is carried -- they would reach the streams first
        self._prepared: dict[int, Prepared] = {}
        for slot in slots:
            if isinstance(slot, Handled):
                if slot.writes:
                    break
                continue
            self._prepared[id(slot.command)] = slot
        self._counts: dict[int, int] = {}

    @property
    def redis(self) -> Any:
        return self._publisher.redis

    def outputs_of(self, command: CommandBase, outcome: Any) -> list[Write] | None:
        """What publishing ``outcome`` writes (not counted yet: :meth:`count`); None for a
        command not of this read, or after a message published the usual way."""
        p = self._prepared.get(id(command))
        if p is None:
            return None
        writes = self._publisher.outputs(command, outcome, p.reply_to, p.msg_id, tally=False)
        self._counts[id(command)] = len(writes)
        return writes

    def count(self, command: CommandBase) -> int:
        """Entries the append of ``command`` carried."""
        return self._counts.get(id(command), 0)


def lenient_map(raw: bytes | None, is_json: bool) -> dict[str, Any]:
    """Best effort to read a broken command's map (to tell its sender why it failed)."""
    if raw is None or len(raw) > 4 * MAX_COMMAND_BYTES:
        return {}
    try:
        data = json.loads(raw) if is_json else msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except (Exception, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


#: the fields an inbox entry may have: the command (``c`` msgpack or ``j`` JSON) and ``reply_to``
ENTRY_FIELDS = frozenset({"c", "j", "reply_to"})
MAX_REPLY_TO = 300  # characters of a reply stream name


def check_entry(fields: dict[str, Any]) -> None:
    """Refuse an entry with unknown or oversized fields before anything reads it.

    >>> check_entry({"c": b"...", "pad": b"x"})
    Traceback (most recent call last):
    ...
    engine.match.errors.BadCommand: unknown inbox entry field(s): pad (allowed: c, j, reply_to)
    """
    unknown = sorted(set(fields) - ENTRY_FIELDS)
    if unknown:
        names = ", ".join(u[:40] for u in unknown[:5])
        raise BadCommand(f"unknown inbox entry field(s): {names} (allowed: {', '.join(sorted(ENTRY_FIELDS))})")
    if "c" in fields and "j" in fields:
        raise BadCommand("an inbox entry holds one command: field c (msgpack) or j (JSON), not both")
    for name, value in fields.items():
        limit = MAX_REPLY_TO if name == "reply_to" else MAX_COMMAND_BYTES
        if isinstance(value, (bytes, str)) and len(value) > limit:
            raise BadCommand(f"inbox entry field {name} too large: {len(value)} bytes (limit {limit})")


def decode(raw: Any, is_json: bool) -> CommandBase:
    """The command of an entry's ``c`` (msgpack) or ``j`` (JSON) field; :class:`BadCommand` if none."""
    if raw is None:
        raise BadCommand("the message has no command: field c (msgpack) or j (JSON) is required")
    if isinstance(raw, str):
        raw = raw.encode("utf-8")
    if not is_json:
        return _player_checked(decode_command(raw))
    if len(raw) > MAX_COMMAND_BYTES:
        raise BadCommand(f"command too large: {len(raw)} bytes (limit {MAX_COMMAND_BYTES})")
    try:
        data = json.loads(raw)
    except ValueError as exc:
        raise BadCommand(f"command is not JSON: {exc}") from None
    except RecursionError:
        raise BadCommand("command is not JSON a command may be: nested too deeply") from None
    if not isinstance(data, dict):
        raise BadCommand("a command must be a map")
    return _player_checked(parse_command(data))


def _player_checked(command: CommandBase) -> CommandBase:
    """``command``, unless its player id cannot be one (a hash tag: ``{`` or ``}``, issue 24 §2)."""
    player = getattr(command, "player", None)
    if isinstance(player, str) and (problem := keys.player_id_problem(player)) is not None:
        raise BadCommand(problem)
    return command


def reply_stream(value: Any, stream: str = keys.OPS) -> str | None:
    """The entry's ``reply_to`` if it names a reply stream (``sk:reply:…``), else None.  An entry
    of the player channel (``stream``: a gateway wrote it) may not name an operator channel
    caller's (``sk:reply:ops-…``, :func:`engine.store.keys.ops_reply_key`): its answers would
    pass for the engine's answers to the lobby's or an operator's commands."""
    if value is None:
        return None
    name = text(value)
    if keys.is_player_channel(stream) and name.startswith(keys.ops_reply_key("")):
        log.warning("ignoring reply_to %r of a player channel entry: an operator caller's stream", name[:80])
        return None
    if name.startswith(keys.REPLY_PREFIX) and len(name) <= MAX_REPLY_TO:
        return name
    log.warning("ignoring reply_to %r: reply streams must be named %s…", name[:80], keys.REPLY_PREFIX)
    return None


class MessageHandler:
    """Decode → decide → outcome for one message of ``stream``."""

    def __init__(self, service: ServiceLike | None, publisher: Publisher, stats: GatewayStats,
                 accepts: Accepts = accept_all, stream: str = keys.INBOX):
        self.service = service
        self.publisher = publisher
        self.stats = stats
        self.accepts = accepts
        self.stream = stream

    def handle(self, msg_id: Any, fields: dict[Any, Any]) -> Handled | None:
        """The writes that finish ``msg_id``, or None to leave it pending (a WrongVersion the
        service gave up on).  A transient Redis error of the service propagates (the
        message stays pending and is retried); anything else about one message -- it is
        not a command, the policy refuses it, the engine or Redis fails on it for good,
        its outcome cannot be encoded -- finishes it with a rejection or a dead letter."""
        prepared = self.prepare(msg_id, fields)
        if isinstance(prepared, Handled):
            return prepared
        assert self.service is not None, "a publish-only consumer cannot handle inbox messages"
        try:
            outcome = self.service.execute(prepared.command)
        except Exception as exc:
            return self.failed(prepared, exc)
        return self.finish(prepared, outcome)

    def prepare(self, msg_id: Any, fields: dict[Any, Any]) -> Handled | Prepared:
        """The first half of :meth:`handle`: decode and apply the policy.  A message that
        is finished here (not a command, refused) comes back :class:`Handled`; a command
        to execute as :class:`Prepared` (then :meth:`finish` or :meth:`failed`)."""
        pub = self.publisher
        if not fields:
            return Handled(pub.dead_writes(msg_id, {}, "the message has no fields (deleted or trimmed "
                                           "from the inbox before it was handled)", None))
        fields = {text(k): v for k, v in fields.items()}
        if entry_bytes(fields) > MAX_ENTRY_BYTES:
            pub.stats.oversized += 1  # refused below (check_entry); the inbox is trimmed soon after
        reply_to = reply_stream(fields.get("reply_to"), self.stream)
        raw, is_json = (fields.get("c"), False) if "c" in fields else (fields.get("j"), True)
        try:
            check_entry(fields)
            command = decode(raw, is_json)
        except BadCommand as exc:
            loose = lenient_map(raw if isinstance(raw, bytes) else None, is_json)
            told = pub.rejection_writes(msg_id, exc.reason, exc.code, loose, reply_to)
            if told:  # the sender is known: a rejection, not a dead letter
                return Handled(told, len(told), fields)
            return Handled(pub.dead_writes(msg_id, fields, exc.reason, loose, None, code=exc.code),
                           fields=fields)
        refusal = self.accepts(command)
        if refusal is not None:
            return self._refused(msg_id, command, NotAllowed(refusal), reply_to, fields)
        return Prepared(msg_id, fields, command, reply_to)

    def failed(self, prepared: Prepared, exc: Exception) -> Handled | None:
        """The message whose command raised ``exc``: None (left pending) for a WrongVersion
        the service gave up on; a transient error is re-raised (pending, retried); anything
        else dead-letters this message alone."""
        msg_id, command = prepared.msg_id, prepared.command
        if isinstance(exc, WrongVersion):
            log.warning("%s %s: %s; left pending for redelivery", self.stream, text(msg_id), exc)
            self.stats.retried += 1
            return None
        if is_transient(exc):
            self.stats.retried += 1
            raise exc
        # a bug in the engine, or Redis refusing this command for good (nothing was
        # appended: the append is one atomic script): do not let it block the inbox
        log.error("%s %s: the engine failed on %s", self.stream, text(msg_id), command.type,  # type: ignore[attr-defined]
                  exc_info=exc)
        return Handled(self.publisher.dead_writes(msg_id, prepared.fields,
                                                  f"internal error: {type(exc).__name__}: {exc}",
                                                  command.model_dump(mode="python"), prepared.reply_to,
                                                  code=INTERNAL_ERROR),
                       fields=prepared.fields)

    def carry(self, slots: Sequence[Handled | Prepared]) -> CarriedOutputs:
        """The outputs of a read's prepared messages (``slots``: all of its messages, in
        order) for their appends to carry (:class:`CarriedOutputs`)."""
        return CarriedOutputs(self.publisher, slots)

    def finish(self, prepared: Prepared, outcome: Any, carried: CarriedOutputs | None = None) -> Handled:
        """The writes that publish ``outcome`` of a prepared message (a dead letter if it
        cannot be encoded: the events are stored, the sender is told).  No writes when its
        append carried them (``outcome.published``, ``carried``): only counted then, and
        what it left (``outcome.leftover``: the streams another Cluster node holds) written."""
        pub, msg_id = self.publisher, prepared.msg_id
        if carried is not None and getattr(outcome, "published", False):
            pub.tally(prepared.command, outcome)
            return Handled(list(getattr(outcome, "leftover", ())), carried.count(prepared.command), prepared.fields)
        try:
            outputs = pub.outputs(prepared.command, outcome, prepared.reply_to, msg_id)
        except Exception as exc:  # an unencodable view: the events are stored, report and go on
            log.exception("%s %s: could not publish the outcome", self.stream, text(msg_id))
            return Handled(pub.dead_writes(msg_id, prepared.fields, f"internal error while publishing: "
                                           f"{type(exc).__name__}: {exc}", None, prepared.reply_to,
                                           code=INTERNAL_ERROR), fields=prepared.fields)
        return Handled(outputs, len(outputs), prepared.fields)

    def _refused(self, msg_id: Any, command: CommandBase, rejection: Rejected, reply_to: str | None,
                 fields: dict[str, Any]) -> Handled:
        """A rejection decided here, before the service (the sender is told; no dead letter)."""
        state = MatchState(match_id=command.match_id)
        load_state = getattr(self.service, "load_state", None)
        if load_state is not None:  # the rejection carries the player's current view
            try:
                state = load_state(command.match_id)
            except Exception as exc:
                if is_transient(exc):
                    raise
        outcome = Outcome((), state, rejection)
        outputs = self.publisher.outputs(command, outcome, reply_to, msg_id)
        return Handled(outputs, len(outputs), fields)


class NotRun(Exception):
    """The result of a command :func:`run_many` did not start (a stop was asked for)."""


def run_many(service: Any, commands: Sequence[CommandBase], stop: Any = None,
             carry: Carry | None = None) -> list[Any]:
    """``service.execute_many(commands, carry)`` when the service's class has it (a wrapper
    that only delegates attributes does not count: it would skip the wrapper), else
    ``execute`` one by one -- there, once ``stop`` (a threading.Event) is set, the
    commands not started yet get :class:`NotRun`.  One result per command, an outcome
    or the exception.  ``carry``: the publisher whose outputs the appends may carry
    (:meth:`engine.service.service.MatchService.execute_many`)."""
    many = getattr(type(service), "execute_many", None)
    if many is not None:
        return list(many(service, commands, carry))
    out: list[Any] = []
    failed: Exception | None = None
    for command in commands:
        if failed is not None:  # after a transient failure nothing more is tried
            out.append(failed)
            continue
        if out and stop is not None and stop.is_set():
            out.append(NotRun("stopping"))
            continue
        try:
            out.append(service.execute(command))
        except Exception as exc:
            out.append(exc)
            if is_transient(exc):
                failed = exc
    return out
