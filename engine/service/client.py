"""A gateway's side of the command protocol (docs/PROTOCOL.md), in Python.

>>> import fakeredis
>>> client = GatewayClient(fakeredis.FakeRedis())
>>> sent = client.play("m1", "alice", "3 3")
>>> sent.command.type, sent.command.text
('Play', '3 3')

:meth:`GatewayClient.send` XADDs a command to its channel (engine/service/channels.py):
player commands to the player channel ``sk:inbox``, lobby and operator commands
(CreateMatch, Sit, Deal, ledger entries, rooms) to the operator channel ``sk:ops``.
A player gateway only ever sends player commands (its Redis user may write
``sk:inbox`` only); a lobby or operator tool uses :class:`OperatorClient`.  The
helpers build the command with a fresh ``command_id`` (uuid4).  Keep the command and re-send it
unchanged to retry: the same command id is applied at most once.
:meth:`GatewayClient.updates` reads a player's outbound stream.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any, NamedTuple

import msgpack

from engine.match.commands import (
    CancelTrustee,
    CommandBase,
    CreateMatch,
    Deal,
    Disconnect,
    Escape,
    Leave,
    Pass,
    Play,
    Ready,
    Reconnect,
    RequestTrustee,
    Sit,
    Sync,
    encode_command,
)
from engine.service.publish import expand_events, expand_view
from engine.store import keys
from engine.store.redis_store import stream_replies


def new_command_id() -> str:
    return uuid.uuid4().hex


class Sent(NamedTuple):
    command: CommandBase
    stream_id: str  # the inbox entry id

    @property
    def command_id(self) -> str:
        return self.command.command_id


def _s(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


@dataclass(frozen=True)
class OutMessage:
    """One entry of a player's outbound stream (or of a reply stream)."""

    id: str  # stream entry id: pass the last one back as ``last_id``
    kind: str  # update | sync | rejected | ack (outbound); accepted | duplicate | rejected | dead (replies)
    match_id: str
    command_id: str
    version: int | None = None
    code: str | None = None
    reason: str | None = None
    #: update: match_id, command_id, version, duplicate, events, base_version, view (not in every
    #: update: docs/PROTOCOL.md "Resync"); sync and rejected: match_id, command_id, version, view
    body: dict[str, Any] = field(default_factory=dict)

    @property
    def events(self) -> list[dict[str, Any]]:
        return list(self.body.get("events", ()))

    @property
    def view(self) -> dict[str, Any] | None:
        return self.body.get("view")

    @classmethod
    def parse(cls, entry_id: Any, fields: dict) -> OutMessage:
        f = {_s(k): v for k, v in fields.items()}
        body = msgpack.unpackb(f["body"], raw=False, strict_map_key=False) if "body" in f else {}
        version = f.get("version")
        if body:  # compact updates leave out what the entry says (docs/PROTOCOL.md, "Updates")
            match_id, command_id = _s(f.get("match", b"")), _s(f.get("command_id", b""))
            body.setdefault("match_id", match_id)
            body.setdefault("command_id", command_id)
            if version is not None:
                body.setdefault("version", int(version))
            if "events" in body:
                body.setdefault("duplicate", False)
            if isinstance(body.get("events"), list):
                body["events"] = expand_events(body, match_id, command_id, None if version is None else int(version))
                body.pop("ts", None)
            if "view" in body:  # its history stored compact (publish.compact_view)
                body["view"] = expand_view(body["view"])
        return cls(id=_s(entry_id), kind=_s(f.get("kind", b"")), match_id=_s(f.get("match", b"")),
                   command_id=_s(f.get("command_id", b"")),
                   version=None if version is None else int(version),
                   code=None if "code" not in f else _s(f["code"]),
                   reason=None if "reason" not in f else _s(f["reason"]), body=body)


class _Seen:
    """The default ``expected_version``: the newest version this client has read of the match."""

    def __repr__(self) -> str:
        return "SEEN"


SEEN: Any = _Seen()


def _player_command(cls: type[CommandBase]) -> Callable[..., Sent]:
    """A GatewayClient method sending ``cls(match_id, player)`` (with a fresh command id)."""

    def send(self: GatewayClient, match_id: str, player: str, command_id: str | None = None) -> Sent:
        return self._send(cls, match_id, command_id, player=player)

    send.__doc__ = f"Send a {cls.__name__} command for ``player`` in ``match_id``."
    return send


class GatewayClient:
    """Publish commands to the inbox and read players' updates.

    ``reply_to``: a stream named ``sk:reply:…`` where the service reports the
    fate of each command this client sends (accepted / duplicate / rejected / dead).
    Each command goes to the stream that carries it
    (:func:`engine.service.channels.stream_for`: its match's ``sk:{b<N>}:inbox`` or
    ``sk:{b<N>}:ops``, or ``sk:ops``).  A test rig running one consumer without channel
    policy may name its ``inbox`` (player commands) or ``ops`` stream instead (the one it does not
    name is then the unbucketed ``sk:inbox`` / ``sk:ops``).
    """

    def __init__(self, redis_client: Any, inbox: str | None = None, reply_to: str | None = None,
                 ops: str | None = None, buckets: int = keys.DEFAULT_BUCKETS):
        if reply_to is not None and not reply_to.startswith(keys.REPLY_PREFIX):
            raise ValueError(f"reply streams must be named {keys.REPLY_PREFIX}…")
        self.redis = redis_client
        if inbox is not None or ops is not None:  # a rig naming its streams: the other one is the unbucketed one
            inbox, ops = inbox or keys.INBOX, ops or keys.OPS
        self.inbox = inbox
        self.ops = ops
        self.buckets = buckets
        self.reply_to = reply_to
        #: match id -> the newest match version this client has read (updates, syncs,
        #: rejections, replies); Play and Pass send it as ``expected_version`` by default
        self.versions: dict[str, int] = {}

    def _expected(self, match_id: str, given: Any) -> int | None:
        return self.versions.get(match_id) if given is SEEN else given

    def _saw(self, messages: list[OutMessage]) -> list[OutMessage]:
        for m in messages:
            if m.match_id and m.version is not None and m.version > self.versions.get(m.match_id, -1):
                self.versions[m.match_id] = m.version
        return messages

    # -- sending --------------------------------------------------------------------------
    def stream_for(self, command: CommandBase) -> str:
        """The stream ``command`` is sent to: its channel's bucket stream (or the ``inbox`` /
        ``ops`` this client was given)."""
        from engine.service.channels import OPS_COMMANDS, stream_for

        given = self.ops if getattr(command, "type", "") in OPS_COMMANDS else self.inbox
        return given or stream_for(command, self.buckets)

    def send(self, command: CommandBase, stream: str | None = None) -> str:
        """XADD the command (field ``c`` = msgpack) to its channel's stream (or ``stream``);
        returns the entry id."""
        fields: dict[str, Any] = {"c": encode_command(command)}
        if self.reply_to is not None:
            fields["reply_to"] = self.reply_to
        return _s(self.redis.xadd(stream or self.stream_for(command), fields))

    def _send(self, cls: type[CommandBase], match_id: str, command_id: str | None, **data: Any) -> Sent:
        command = cls(command_id=command_id or new_command_id(), match_id=match_id, **data)
        return Sent(command, self.send(command))

    def create_match(self, match_id: str, config: dict[str, Any] | None = None, command_id: str | None = None,
                     *, room: str | None = None) -> Sent:
        """Create a match in the registered ``room`` (by name) or with a full ``config`` record."""
        return self._send(CreateMatch, match_id, command_id, config=config, room=room)

    def sit(self, match_id: str, player: str, command_id: str | None = None) -> Sent:
        """Seat ``player`` (the engine reads their balance from its ledger)."""
        return self._send(Sit, match_id, command_id, player=player)

    def deal(self, match_id: str, hands: Any = None, first: int | None = None,
             command_id: str | None = None) -> Sent:
        return self._send(Deal, match_id, command_id, hands=hands, first=first)

    def play(self, match_id: str, player: str, text: str | None = None, *, cards: Any = None,
             reading_kind: str | None = None, reading_rank: str | None = None,
             command_id: str | None = None, expected_version: int | None = SEEN) -> Sent:
        """Play cards as notation text (``"3 3"``, ``"10H 10S"``) or as card ids (``cards=``).

        ``expected_version``: the version the player decided on (default: the newest this
        client has read of the match; None: send none); a match that has moved since
        refuses the play as ``stale``."""
        return self._send(Play, match_id, command_id, player=player, text=text,
                          cards=None if cards is None else tuple(cards),
                          reading_kind=reading_kind, reading_rank=reading_rank,
                          expected_version=self._expected(match_id, expected_version))

    def pass_(self, match_id: str, player: str, command_id: str | None = None,
              expected_version: int | None = SEEN) -> Sent:
        """Pass (``expected_version`` as for :meth:`play`)."""
        return self._send(Pass, match_id, command_id, player=player,
                          expected_version=self._expected(match_id, expected_version))

    # the commands that carry only a player: one shape, one definition (_player_command)
    leave = _player_command(Leave)

    def ready(self, match_id: str, player: str, command_id: str | None = None,
              client_seed: str | None = None) -> Sent:
        """Send a Ready for ``player``; ``client_seed``: their entropy for the fair deal (FAIRNESS.md)."""
        return self._send(Ready, match_id, command_id, player=player, client_seed=client_seed)

    request_trustee = _player_command(RequestTrustee)
    cancel_trustee = _player_command(CancelTrustee)
    disconnect = _player_command(Disconnect)
    reconnect = _player_command(Reconnect)
    escape = _player_command(Escape)
    sync = _player_command(Sync)  # the player's current view, as a ``sync`` entry of their stream

    # -- reading --------------------------------------------------------------------------
    def _read(self, stream: str, last_id: str, block_ms: int | None, count: int) -> list[OutMessage]:
        reply = self.redis.xread({stream: last_id}, count=count, block=block_ms)
        return self._saw([OutMessage.parse(entry_id, fields) for _, entries in stream_replies(reply)
                          for entry_id, fields in entries])

    def updates(self, player: str, last_id: str = "0", block_ms: int | None = None,
                count: int = 100) -> list[OutMessage]:
        """Entries of ``sk:out:<player>`` after ``last_id`` ("0": from the start, "$": only new
        ones), waiting up to ``block_ms`` for the first one (None: do not wait)."""
        return self._read(keys.outbox_key(player), last_id, block_ms, count)

    def replies(self, last_id: str = "0", block_ms: int | None = None, count: int = 100) -> list[OutMessage]:
        """Entries of this client's ``reply_to`` stream after ``last_id``."""
        if self.reply_to is None:
            raise ValueError("this client has no reply_to stream")
        return self._read(self.reply_to, last_id, block_ms, count)
