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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgpack
import redis

from engine.match.commands import MAX_COMMAND_BYTES, CommandBase, decode_command, parse_command
from engine.match.errors import BadCommand, NotAllowed, Rejected
from engine.match.state import MatchState
from engine.service.service import Outcome
from engine.service.publish import INTERNAL_ERROR, GatewayStats, OutcomeLike, Publisher, Write, text
from engine.store import keys
from engine.store.base import WrongVersion

log = logging.getLogger("shuangkou.gateway")

#: an allowed-command policy: None to accept the command, else the reason it is refused
Accepts = Callable[[CommandBase], "str | None"]


def accept_all(command: CommandBase) -> str | None:
    """The default policy: every command may arrive on this stream."""
    return None


class ServiceLike(Protocol):
    """What the consumer needs of :class:`engine.service.service.MatchService`."""

    def execute(self, command: CommandBase) -> OutcomeLike: ...


@dataclass
class Handled:
    """A message fully handled: acknowledge it once ``writes`` are written."""

    writes: list[Write]
    published: int = 0  # updates/replies among the writes (stats)
    fields: dict[str, Any] = field(default_factory=dict)  # the message (to dead-letter it after all)


def lenient_map(raw: bytes | None, is_json: bool) -> dict[str, Any]:
    """Best effort to read a broken command's map (to tell its sender why it failed)."""
    if raw is None or len(raw) > 4 * MAX_COMMAND_BYTES:
        return {}
    try:
        data = json.loads(raw) if is_json else msgpack.unpackb(raw, raw=False, strict_map_key=False)
    except Exception:
        return {}
    return data if isinstance(data, dict) else {}


def decode(raw: Any, is_json: bool) -> CommandBase:
    """The command of an entry's ``c`` (msgpack) or ``j`` (JSON) field; :class:`BadCommand` if none."""
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


def reply_stream(value: Any) -> str | None:
    """The entry's ``reply_to`` if it names a reply stream (``sk:reply:…``), else None."""
    if value is None:
        return None
    name = text(value)
    if name.startswith(keys.REPLY_PREFIX) and len(name) <= 300:
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
        service gave up on).  Redis errors of the service propagate (left pending)."""
        pub = self.publisher
        if not fields:
            return Handled(pub.dead_writes(msg_id, {}, "the message has no fields (deleted or trimmed "
                                           "from the inbox before it was handled)", None))
        fields = {text(k): v for k, v in fields.items()}
        reply_to = reply_stream(fields.get("reply_to"))
        raw, is_json = (fields.get("c"), False) if "c" in fields else (fields.get("j"), True)
        try:
            command = decode(raw, is_json)
        except BadCommand as exc:
            loose = lenient_map(raw if isinstance(raw, bytes) else None, is_json)
            return Handled(pub.dead_writes(msg_id, fields, exc.reason, loose, reply_to, code=exc.code),
                           fields=fields)
        refusal = self.accepts(command)
        if refusal is not None:
            return self._refused(msg_id, command, NotAllowed(refusal), reply_to, fields)
        assert self.service is not None, "a publish-only consumer cannot handle inbox messages"
        try:
            outcome = self.service.execute(command)
        except WrongVersion as exc:
            log.warning("%s %s: %s; left pending for redelivery", self.stream, text(msg_id), exc)
            self.stats.retried += 1
            return None
        except redis.RedisError:
            self.stats.retried += 1
            raise
        except Exception as exc:  # a bug in the engine: do not let it block the inbox
            log.exception("%s %s: the engine failed on %s", self.stream, text(msg_id), command.type)  # type: ignore[attr-defined]
            return Handled(pub.dead_writes(msg_id, fields, f"internal error: {type(exc).__name__}: {exc}",
                                           command.model_dump(mode="python"), reply_to, code=INTERNAL_ERROR),
                           fields=fields)
        try:
            outputs = pub.outputs(command, outcome, reply_to, msg_id)
        except Exception as exc:  # an unencodable view: the events are stored, report and go on
            log.exception("%s %s: could not publish the outcome", self.stream, text(msg_id))
            return Handled(pub.dead_writes(msg_id, fields, f"internal error while publishing: "
                                           f"{type(exc).__name__}: {exc}", None, reply_to,
                                           code=INTERNAL_ERROR), fields=fields)
        return Handled(outputs, len(outputs), fields)

    def _refused(self, msg_id: Any, command: CommandBase, rejection: Rejected, reply_to: str | None,
                 fields: dict[str, Any]) -> Handled:
        """A rejection decided here, before the service (the sender is told; no dead letter)."""
        outcome = Outcome((), MatchState(match_id=command.match_id), rejection)
        outputs = self.publisher.outputs(command, outcome, reply_to, msg_id)
        return Handled(outputs, len(outputs), fields)
