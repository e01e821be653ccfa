"""The gateway's one link to the engine's command channels (docs/PROTOCOL.md §1, docs/SECURITY.md).

* player commands (Ready, Play, Pass, …, for the token's subject) go to the
  player channel, the match's ``sk:{b<N>}:inbox``;
* the lobby's commands (CreateMatch, Sit) go to the operator channel, the match's
  ``sk:{b<N>}:ops`` (AddRoom to ``sk:ops``): :func:`stream_for`.

Both use the engine's reply format; the lobby waits for its replies on
``sk:reply:<gateway id>``.  Everything that depends on which engine build runs
(the channel split of the trust-boundary work, ledger-backed Sit, ``Sync`` and
``expected_version``) is read from the engine itself here, so nothing else in
``gateway/`` needs to know.

>>> stream_for(player_command("Ready", "t1-1", "alice", "c1"))
'sk:{b5}:inbox'
"""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

from redis.typing import EncodableT, FieldT

from engine.match import commands as engine_commands
from engine.match.commands import CommandBase, encode_command
from engine.service import channels as engine_channels

def stream_for(command: CommandBase) -> str:
    """The engine stream that carries ``command``: its match's ``sk:{b<N>}:inbox`` (player
    commands) or ``sk:{b<N>}:ops`` (CreateMatch, Sit), ``sk:ops`` for AddRoom (issue 24 §2)."""
    return engine_channels.stream_for(command)


def engine_command_id(player: str, client_id: str) -> str:
    """The engine's command id of a client's command: namespaced by the player, so no client can
    collide with another player's ids or with the lobby's (``lobby:…``).

    >>> engine_command_id("alice", "c1")
    'p5:alice:c1'
    """
    return f"p{len(player)}:{player}:{client_id}"


def client_command_id(player: str, engine_id: str | None) -> str | None:
    """The client's own id back from an engine command id of ``player``'s, else None.

    >>> client_command_id("alice", "p5:alice:c1"), client_command_id("bob", "p5:alice:c1")
    ('c1', None)
    """
    prefix = f"p{len(player)}:{player}:"
    if engine_id and engine_id.startswith(prefix):
        return engine_id[len(prefix):]
    return None


def lobby_command_id(*parts: str) -> str:
    return "lobby:" + ":".join(parts)


def player_command(ctype: str, match_id: str, player: str, command_id: str, **fields: Any) -> CommandBase:
    """An engine command of ``ctype`` for ``player`` (the token's subject, never a message's)."""
    cls = getattr(engine_commands, ctype)
    data = {k: v for k, v in fields.items() if v is not None}
    return engine_commands.command_of(cls, command_id=command_id, match_id=match_id, player=player, **data)


def create_match(match_id: str, room: str, config_record: dict[str, Any] | None = None) -> CommandBase:
    """CreateMatch naming a registered room (the lobby's way, issue 12); a full ``config_record``
    only from operator tools (bench/gateway.py), on the operator channel.

    >>> c = create_match("t1-1", "points")
    >>> (c.room, c.config, c.command_id)
    ('points', None, 'lobby:t1-1:create')
    """
    fields: dict[str, Any] = {"room": room} if config_record is None else {"config": config_record}
    return engine_commands.CreateMatch(command_id=lobby_command_id(match_id, "create"), match_id=match_id, **fields)


def add_room(name: str, config_record: dict[str, Any], operator: str) -> CommandBase:
    """AddRoom (replacing) for a ``shuangkou gateway --room FILE`` room; the command id names the
    config's content, so registering the same file twice is one registration.

    >>> c = add_room("fast", {"name": "fast"}, "gw-1")
    >>> c.type, c.name, c.replace, c.command_id.startswith("lobby:room:fast:")
    ('AddRoom', 'fast', True, True)
    """
    digest = hashlib.sha256(json.dumps(config_record, sort_keys=True).encode()).hexdigest()[:16]
    return engine_commands.AddRoom(command_id=lobby_command_id("room", name, digest), name=name,
                                   config=config_record, replace=True, operator=f"gateway:{operator}"[:100])


def sit(match_id: str, player: str) -> CommandBase:
    """The lobby's Sit (the engine reads the balance from its own ledger, R-11)."""
    return engine_commands.Sit(command_id=lobby_command_id(match_id, "sit", player), match_id=match_id,
                               player=player)


def entry(command: CommandBase, reply_to: str | None = None) -> dict[FieldT, EncodableT]:
    """The stream fields of one command (``c`` = msgpack, optional ``reply_to``)."""
    fields: dict[FieldT, EncodableT] = {"c": encode_command(command)}
    if reply_to is not None:
        fields["reply_to"] = reply_to
    return fields


def new_id() -> str:
    return uuid.uuid4().hex
