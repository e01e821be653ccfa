"""What the lobby tells each player, from its events (docs/PROTOCOL.md §8 "Lobby and tables").

:func:`messages_of` maps one queue or table event to the ``lobby`` messages of the players it
concerns, in the WebSocket shape (``kind`` ``lobby``, ``state`` ``queued`` | ``seated`` |
``removed``, ``room``, ``table``, ``match``, ``reason``, ``bot_level``, ``command_id``):

* PlayerQueued → ``queued`` (``opponent_left`` when requeued);
* PlayerLeftQueue, LeftWithTable → ``removed`` (``left`` / ``disconnected``);
* MatchSeated → ``seated`` for each person at the table (their Ready is due);
* TableClosed → ``removed`` with each reason for whoever leaves the room with it.

``command_id`` is the player's own Join or Leave that caused the message, else None (a
process manager's command: its id begins ``pm:``).  :class:`OutboxNotes` writes them to the
players' streams ``sk:out:{<player>}`` (entry ``kind`` ``lobby``, field ``m`` the JSON), so
they reach a player in order with the match's updates, then sends the notice.

>>> from engine.lobby import events as ev
>>> e = ev.PlayerQueued(aggregate="queue:points", seq=1, ts=0, command_id="j1", player="a", since=0)
>>> messages_of(e, None)
[('a', {'kind': 'lobby', 'state': 'queued', 'room': 'points', 'table': None, 'match': None, 'reason': None, \
'bot_level': None, 'command_id': 'j1'})]
"""

from __future__ import annotations

import json
from typing import Any

from engine.lobby import events as ev
from engine.lobby.state import TableState
from engine.store import keys


def _cid(e: ev.LobbyEvent) -> str | None:
    return None if e.command_id.startswith("pm:") else e.command_id


def _msg(state: str, room: str | None, table: str | None = None, match: str | None = None,
         reason: str | None = None, bot_level: str | None = None, command_id: str | None = None) -> dict[str, Any]:
    return {"kind": "lobby", "state": state, "room": room, "table": table, "match": match, "reason": reason,
            "bot_level": bot_level, "command_id": command_id}


def messages_of(e: ev.LobbyEvent, table: TableState | None) -> list[tuple[str, dict[str, Any]]]:
    """The ``(player, message)`` pairs an event causes; ``table``: the table's state after the
    event (None for a queue's event)."""
    room = e.aggregate.partition(":")[2] if e.aggregate.startswith("queue:") else (table.room if table else None)
    if isinstance(e, ev.PlayerQueued):
        return [(e.player, _msg("queued", room, reason=None if e.reason == "joined" else e.reason,
                                command_id=_cid(e)))]
    if isinstance(e, ev.PlayerLeftQueue):
        return [(e.player, _msg("removed", room, reason=e.reason, command_id=_cid(e)))]
    if isinstance(e, ev.LeftWithTable):
        return [(e.player, _msg("removed", room, table=e.table, reason=e.reason, command_id=_cid(e)))]
    if table is None:
        return []
    level = table.bot_level if table.bot else None
    if isinstance(e, ev.MatchSeated):
        return [(p, _msg("seated", table.room, table.table, e.match, bot_level=level)) for p in table.people]
    if isinstance(e, ev.TableClosed):
        return [(p, _msg("removed", table.room, table.table, table.match, reason=r)) for p, r in e.removed]
    return []


class OutboxNotes:
    """Writes the lobby's messages to the players' streams (``XADD sk:out:{<player>}``, then
    ``SPUBLISH`` its notice), as the publisher writes their updates."""

    def __init__(self, client: Any, maxlen: int = 1000):
        self.client = client
        self.maxlen = maxlen

    def __call__(self, e: ev.LobbyEvent, table: TableState | None) -> None:
        for player, message in messages_of(e, table):
            stream = keys.outbox_key(player)
            self.client.xadd(stream, {"kind": "lobby", "m": json.dumps(message, ensure_ascii=False)},
                             maxlen=self.maxlen, approximate=True)
            try:
                self.client.spublish(stream, "")
            except Exception:  # a notice only wakes a reader early
                pass
