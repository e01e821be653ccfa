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
import logging
from typing import Any, get_args

from engine.lobby import events as ev
from engine.lobby.state import TableState
from engine.service.place_claims import PlaceClaims, room_claim
from engine.store import keys, scripts
from engine.store.replies import fields as reply_fields

log = logging.getLogger("shuangkou.lobby")

#: every ``reason`` a ``lobby`` message carries (gateway/schemas_gen.py's enum): why a player
#: left a queue or a table (engine/lobby/events.py), a requeue after the opponent left, a bot's
#: table closing, and the answers to a Join from where the player already is (lobby_worker.py)
LOBBY_REASONS: tuple[str, ...] = tuple(dict.fromkeys((
    *get_args(ev.RemovalReason), *get_args(ev.DequeueReason), "opponent_left", "table_closed",
    "already_seated", "already_queued")))

#: engine/store/table_info.lua: a table's read model, not written over a later version
TABLE_INFO_LUA = scripts.sent_by_eval("table_info.lua")
#: engine/store/place.lua: a player's place, never taken back by an entry handled late
PLACE_LUA = scripts.sent_by_eval("place.lua")
#: the fields of a place (keys.place_key) that say where the player is; the others are the fence
PLACE_FIELDS = ("state", "room", "table", "match")
#: how long a place that says nowhere keeps its fence: far longer than an entry is ever handled
#: late (a bucket's hand-over, a partition's heal), then the hash goes (a bot's id is new each table)
PLACE_FENCE_TTL_MS = 24 * 3600 * 1000


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
        gone = [(p, _msg("removed", table.room, table.table, table.match, reason=r)) for p, r in e.removed]
        if table.private:  # a private table's players are in no queue: whoever stayed leaves with it
            gone += [(p, _msg("removed", table.room, table.table, table.match, reason="opponent_left"))
                     for p in e.stayed]
        if e.bot:  # the bot leaves with its table: the process that plays it stops
            gone.append((e.bot, _msg("removed", table.room, table.table, table.match, reason="table_closed",
                                     bot_level=level)))
        return gone
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


def _place_changes(e: ev.LobbyEvent, table: TableState | None) -> list[tuple[str, dict[str, str] | None]]:
    """Where an event puts players (the ``place`` read model): ``(player, fields)`` with None
    for nowhere.  A queue event names the room in its aggregate; a table event is read with
    the table's state after it."""
    room = e.aggregate.partition(":")[2] if e.aggregate.startswith("queue:") else (table.room if table else "")
    if isinstance(e, ev.PlayerQueued):
        return [(e.player, {"state": "queued", "room": room, "table": "", "match": ""})]
    if isinstance(e, (ev.PlayerLeftQueue, ev.LeftWithTable)):
        return [(e.player, None)]
    if isinstance(e, ev.TablePaired):
        return [(p, {"state": "table", "room": room, "table": e.table, "match": e.match}) for p in e.players]
    if isinstance(e, ev.BotSeated):
        return [(p, {"state": "table", "room": room, "table": e.table, "match": e.match}) for p in (e.player, e.bot)]
    if table is None:
        return []
    if isinstance(e, (ev.TableOpened, ev.MatchSeated, ev.NextMatchOffered)):
        return [(p, {"state": "table", "room": table.room, "table": table.table, "match": table.match or ""})
                for p in table.players]
    if isinstance(e, ev.TableClosed):
        gone: list[tuple[str, dict[str, str] | None]] = [(p, None) for p, _r in e.removed]
        if table.private:
            gone += [(p, None) for p in e.stayed]
        return gone + [(e.bot, None)] if e.bot else gone
    return []


def _place_table(e: ev.LobbyEvent, fields: dict[str, str] | None) -> str:
    """The table a place write is about: the one it seats the player at, or the one a clear
    takes them from ("": a queue's own place)."""
    if fields is not None:
        return fields.get("table", "")
    if isinstance(e, ev.LeftWithTable):
        return e.table
    return e.aggregate.partition(":")[2] if e.aggregate.startswith("table:") else ""


def write_place(pipe: Any, player: str, e: ev.LobbyEvent, fields: dict[str, str] | None, *,
                op: str | None = None) -> None:
    """In ``pipe``: ``player``'s place after ``e`` (``fields``; None: nowhere), unless a later
    event of ``e``'s queue or table was written, or ``e`` seats the player at a table that
    has closed, or clears a place the player no longer has (engine/store/place.lua; its
    reply: :func:`place_written`).  ``op="closed"``: ``e`` closes the player's table and
    leaves their place to the queue (only the fence learns of it)."""
    closes = isinstance(e, ev.TableClosed)
    room = e.aggregate.partition(":")[2] if e.aggregate.startswith("queue:") else ""
    flat = [x for kv in (fields or {}).items() for x in kv]
    op = op or ("clear" if fields is None else "set")
    pipe.execute_command("EVAL", PLACE_LUA, 1, keys.place_key(player), op, e.aggregate, e.seq,
                         _place_table(e, fields), "1" if closes else "", room if fields is None else "",
                         PLACE_FENCE_TTL_MS, *flat)


def place_written(reply: Any) -> str:
    """place.lua's reply: ``written``, ``stale`` or ``elsewhere``."""
    status = reply_fields(reply).get("status")
    status = status.decode("utf-8") if isinstance(status, bytes) else status
    if status in ("written", "stale", "elsewhere"):
        return str(status)
    raise ValueError(f"place.lua replied {reply!r}"[:200])


def table_info(table: TableState) -> dict[str, str]:
    """A table's read model (:func:`engine.store.keys.table_info_key`): what the gateways read
    of a table (its players, its current match, its status) and ``v``, the table's version
    (the fence of :data:`TABLE_INFO_LUA`)."""
    players = list(table.players) + ["", ""]
    finished = (table.match or "") if table.status == "between" else ""
    return {"room": table.room, "a": players[0], "b": players[1], "n": str(table.n), "match": table.match or "",
            "status": table.status, "finished": finished, "escaped": table.escaper or "",
            "bot_level": (table.bot_level or "") if table.bot else "", "v": str(table.version)}


def write_table_info(pipe: Any, key: str, table: TableState) -> None:
    """In ``pipe``: the table's read model, written unless the hash already shows a later
    version of the table (engine/store/table_info.lua; its reply: :func:`table_info_written`)."""
    flat = [x for kv in table_info(table).items() for x in kv]
    # by execute_command: a Redis Cluster's pipeline has no eval(script, ...) of its own
    pipe.execute_command("EVAL", TABLE_INFO_LUA, 1, key, table.version, *flat)


def table_info_written(reply: Any) -> int | None:
    """table_info.lua's reply: None when written, else the later version the hash kept."""
    f = reply_fields(reply)
    status = f.get("status")
    status = status.decode("utf-8") if isinstance(status, bytes) else status
    if status == "written":
        return None
    if status == "stale":
        return int(f["v"])
    raise ValueError(f"table_info.lua replied {reply!r}"[:200])


class LobbyOutbox:
    """What each stored lobby event changes outside the lobby's streams, written by whoever
    follows the event's feed (engine/service/lobby_feed.py) before it acts on the event:

    * the players' ``place`` and the table's ``info`` read models (what the gateways read);
    * the room queue's ``info`` (``waiting``: the gateways' queue-length gauge);
    * the ``lobby`` messages (:func:`messages_of`) and, at a MatchSettled, each player's
      ``settled`` message (their own breakdown and balance, from the ledger) on the players'
      streams, through the publisher (capped, expiring, with the notice);
    * a BotSeated on the room's bot seats stream, for the process that plays the bot.

    Writing again what was written (a feed entry read twice) changes nothing a reader could
    tell but a repeated message, which the gateways drop (a ``seated`` already announced): the
    read models are fenced (engine/store/table_info.lua, engine/store/place.lua), so an entry
    handled late never takes a table or a player back."""

    def __init__(self, client: Any, publisher: Any, ledger: Any = None, *, buckets: int = keys.DEFAULT_BUCKETS,
                 acks: Any = None):
        self.client = client
        self.publisher = publisher
        self.ledger = ledger
        self.buckets = buckets
        #: engine.store.replicas.ReplicaAcks (replica acks in force) or None: the notes and read
        #: models are confirmed on the replicas before the event's commands run
        self.acks = acks
        #: a private table's ``series`` field of its ``settled`` messages (issue 39), or None
        self.series_summary: Any = None
        #: a private table's ``series finished`` messages after a hand's ``settled`` (issue 39)
        self.series_finished: Any = None

    def __call__(self, e: ev.LobbyEvent, table: TableState | None, waiting: int | None = None) -> None:
        pipe = self.client.pipeline(transaction=False)
        written: list[str] = []  # the keys of the read models, confirmed with the notes (acks)
        # a Join's claim (engine/service/place_claims.py) is said by its queue's events only:
        # a table's events never release one (no EVAL per player per match)
        joined = e.aggregate.startswith("queue:")
        places: list[tuple[int, str]] = []  # (its reply's index, the player)
        for player, fields in _place_changes(e, table):
            written.append(keys.place_key(player))
            places.append((len(pipe), player))
            write_place(pipe, player, e, fields)
            if fields is not None and joined and not keys.is_bot_id(player):  # the Join's claim ends
                PlaceClaims.caught_up(pipe, player, room_claim(fields["room"]))
        if isinstance(e, ev.TableClosed):  # who stays in the room: the table closed all the same
            for player in sorted(set(e.stayed) - {p for _at, p in places}):
                written.append(keys.place_key(player))
                places.append((len(pipe), player))
                write_place(pipe, player, e, None, op="closed")
        info_at = None
        if table is not None and e.aggregate.startswith("table:"):
            written.append(keys.table_info_key(table.table, self.buckets))
            info_at = len(pipe)
            write_table_info(pipe, written[-1], table)
        if waiting is not None and e.aggregate.startswith("queue:"):
            pipe.hset(keys.queue_info_key(e.aggregate.partition(":")[2]), "waiting", str(waiting))
        if isinstance(e, ev.BotSeated):
            room = e.aggregate.partition(":")[2]
            pipe.xadd(keys.bot_seats_key(room), {"bot": e.bot, "table": e.table, "match": e.match,
                                                  "level": e.bot_level}, maxlen=1000, approximate=True)
        if len(pipe):
            replies = pipe.execute()
            for at, player in places:
                status = place_written(replies[at])
                if status != "written":
                    log.info("%s v%d: %s's place not %s (%s)", e.aggregate, e.seq, player,
                             "cleared" if status == "elsewhere" else "written", status)
            if info_at is not None and table is not None:
                later = table_info_written(replies[info_at])
                if later is not None:
                    log.info("table %s: read model of v%d not written, it shows v%d", table.table, table.version,
                             later)
        writes = [self._entry(player, "lobby", message.get("match") or "", message)
                  for player, message in messages_of(e, table)]
        if isinstance(e, ev.MatchSettled) and table is not None:
            writes += self._settled(e, table)
        if writes:
            self.publisher.write(writes)
            written += [w.stream for w in writes]
        if self.acks is not None and written:
            # a note or read model a master took and lost in a fail-over is gone for good (the
            # gateways act on them): NOREPLICAS raises, the feed entry stays pending, and it is
            # handled (written) again once a replica acknowledges
            self.acks.confirm(written)

    def _entry(self, player: str, kind: str, match: str, message: dict[str, Any]) -> Any:
        return self.publisher._delivery(keys.outbox_key(player), {
            "kind": kind, "match": match, "command_id": message.get("command_id") or "",
            "m": json.dumps(message, ensure_ascii=False)})

    def _settled(self, e: ev.MatchSettled, table: TableState) -> list[Any]:
        from projections.views import breakdown_for

        s = self.ledger.settlement(e.match) if self.ledger is not None else None
        out = []
        series = self.series_summary(table.table) if table.private and self.series_summary is not None else None
        for p in table.people:
            breakdown = breakdown_for(s.breakdown, p) if s is not None else {}
            balances = {p: int(self.ledger.balance(p, s.mode))} if s is not None else {}
            message = {"kind": "settled", "match": e.match, "scores": dict(e.scores), "breakdown": breakdown,
                       "balances": balances}
            if series is not None:
                message["series"] = series
            out.append(self._entry(p, "settled", e.match, message))
        if table.private and self.series_finished is not None:
            out += [self._entry(p, m["kind"], "", m) for p, m in self.series_finished(table.table, e.match)]
        return out
