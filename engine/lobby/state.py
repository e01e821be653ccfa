"""The state of a room's queue and of a table, as folded from their events.

Frozen, slotted values (:func:`engine.match.frozen.evolve` copies them); mappings are
tuples of pairs kept in a fixed order, so two states built by the same events are equal.

>>> q = QueueState(room="points")
>>> q.place_of("a") is None and q.waiting_players() == ()
True
>>> TableState(table="t1").status
'new'
>>> q = QueueState(room="points", version=7, waiting=(Waiting("a", 5, 1500.0),),
...                cooldowns=(("b", Cooldown(2, 90)),))
>>> decode_queue(encode_queue(q)) == q
True
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import msgpack

from engine.lobby.events import CloseReason, RemovalReason


@dataclass(frozen=True, slots=True)
class Waiting:
    """One waiting player; ``since``: when their Join came (kept through a requeue)."""

    player: str
    since: int
    rating: float | None = None  # ranked rooms: the Join's rating snapshot (engine/lobby/skill.py)


@dataclass(frozen=True, slots=True)
class Placed:
    """A player at one of the room's tables; ``leaving``: their Leave was handed to the table;
    ``away``: their grace ran out (a Disconnect went to the table)."""

    player: str
    table: str
    since: int
    leaving: bool = False
    away: bool = False
    rating: float | None = None  # the Join's rating snapshot, kept for a requeue


@dataclass(frozen=True, slots=True)
class Cooldown:
    """``leaves`` leaves before a deal in a row; no Join before ``until`` (ms)."""

    leaves: int
    until: int


@dataclass(frozen=True, slots=True)
class QueueState:
    room: str
    version: int = 0
    last_ts: int = 0
    waiting: tuple[Waiting, ...] = ()  # oldest Join first
    placed: tuple[Placed, ...] = ()  # sorted by player
    cooldowns: tuple[tuple[str, Cooldown], ...] = ()  # sorted by player
    tables: int = 0  # tables opened so far

    def waiting_players(self) -> tuple[str, ...]:
        return tuple(w.player for w in self.waiting)

    def waiting_of(self, player: str) -> Waiting | None:
        for w in self.waiting:
            if w.player == player:
                return w
        return None

    def place_of(self, player: str) -> Placed | None:
        for p in self.placed:
            if p.player == player:
                return p
        return None

    def cooldown_of(self, player: str) -> Cooldown | None:
        for p, c in self.cooldowns:
            if p == player:
                return c
        return None

    def at_table(self, table: str) -> tuple[Placed, ...]:
        return tuple(p for p in self.placed if p.table == table)


#: bumped when :func:`encode_queue`'s layout changes: an older snapshot is then not read
QUEUE_CODEC_VERSION = 1


def encode_queue(q: QueueState) -> bytes:
    """msgpack bytes of a queue's state (its snapshot); :func:`decode_queue` reads them back
    equal."""
    return msgpack.packb({  # type: ignore[no-any-return]
        "codec": QUEUE_CODEC_VERSION, "room": q.room, "version": q.version, "last_ts": q.last_ts,
        "waiting": [[w.player, w.since, w.rating] for w in q.waiting],
        "placed": [[p.player, p.table, p.since, p.leaving, p.away, p.rating] for p in q.placed],
        "cooldowns": [[p, c.leaves, c.until] for p, c in q.cooldowns],
        "tables": q.tables,
    }, use_bin_type=True)


def decode_queue(data: bytes) -> QueueState:
    """The state :func:`encode_queue` wrote; ValueError for another codec version."""
    d: dict[str, Any] = msgpack.unpackb(data, raw=False)
    if d.get("codec") != QUEUE_CODEC_VERSION:
        raise ValueError(f"queue snapshot codec {d.get('codec')!r} is not supported")
    return QueueState(
        room=d["room"], version=d["version"], last_ts=d["last_ts"],
        waiting=tuple(Waiting(w[0], w[1], w[2]) for w in d["waiting"]),
        placed=tuple(Placed(p[0], p[1], p[2], p[3], p[4], p[5]) for p in d["placed"]),
        cooldowns=tuple((c[0], Cooldown(c[1], c[2])) for c in d["cooldowns"]),
        tables=d["tables"])


TableStatus = Literal["new", "creating", "seated", "between", "closed"]


@dataclass(frozen=True, slots=True)
class TableState:
    """``creating``: its match is being created; ``seated``: the match runs (``dealt`` once
    the cards are out); ``between``: the match finished, the settlement not yet told;
    ``closed``: for good (``close_reason``)."""

    table: str
    version: int = 0
    last_ts: int = 0
    room: str = ""
    players: tuple[str, ...] = ()  # seat a, seat b
    bot: str | None = None
    bot_level: str | None = None
    n: int = 0  # the current match is <table>-<n>
    match: str | None = None
    status: TableStatus = "new"
    ready: tuple[str, ...] = ()  # ready in the current match (in the order they got ready)
    dealt: bool = False  # the current match
    ever_dealt: bool = False  # any match of the table
    ready_ms: int = 0
    grace_ms: int = 0
    seated_at: int | None = None  # when the current match was seated (its ready clock's start)
    away: tuple[str, ...] = ()  # a Disconnect went to the current match for them
    quit: tuple[str, ...] = ()  # their Leave went to the current match (LeaveDeferred)
    leaving: tuple[str, ...] = ()  # left at the settlement (LeaveNoted)
    escaper: str | None = None
    close_reason: CloseReason | None = None
    removed: tuple[tuple[str, RemovalReason], ...] = ()  # who left the room at the close
    private: bool = False  # a private table's: its series (issue 39) has the table's id

    @property
    def people(self) -> tuple[str, ...]:
        """The players who are not the table's bot."""
        return tuple(p for p in self.players if p != self.bot)

    @property
    def open(self) -> bool:
        return self.status not in ("new", "closed")

    def ready_deadline(self) -> int | None:
        """When the match's ready clock (R-13.2) runs out, while a seated player is not ready."""
        if self.status != "seated" or self.dealt or self.seated_at is None:
            return None
        if all(p in self.ready for p in self.players):
            return None
        return self.seated_at + self.ready_ms
