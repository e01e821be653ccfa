"""The events of a room's queue and of a table, and their msgpack codec.

The envelope is the match's (engine/match/events.py) with ``aggregate`` in place of
``match_id``: ``queue:<room>`` or ``table:<table>`` (:func:`queue_aggregate`,
:func:`table_aggregate`), ``seq`` 1, 2, 3… within it, ``ts`` from the decide context,
``command_id`` and ``v``.  Every id the lobby makes (a table, a bot) and every moment it
computes (a cooldown's end) is in the event that introduced it, so a replay needs no
clock and no generator.

>>> e = PlayerQueued(aggregate="queue:points", seq=1, ts=5, command_id="c", player="a", since=5)
>>> decode_lobby_event(encode_lobby_event(e)) == e
True
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal, Union

import msgpack
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

SCHEMA_VERSION = 1

#: why a player is no longer waiting in the queue (the ``removed`` note's reason)
DequeueReason = Literal["left", "disconnected"]
#: why a player leaves a table and the room (R-13.2 ``not_ready``; ``left``; R-12.1 ``escaped``;
#: ``no_opponent``; the engine's refusal of a Sit, ``seat_refused``; ``unknown_room``)
#: ``series_over``: a private table's series ended (issue 39)
RemovalReason = Literal["left", "not_ready", "escaped", "no_opponent", "seat_refused", "unknown_room",
                        "series_over"]
#: how a table's match ended, as its process manager reports it (the match's terminal events)
MatchOutcome = Literal["finished", "removed", "abandoned"]
CloseReason = Literal["left", "not_ready", "escaped", "no_opponent", "seat_refused", "unknown_room",
                      "abandoned", "series_over"]


def queue_aggregate(room: str) -> str:
    """The aggregate id of a room's queue.

    >>> queue_aggregate("points"), table_aggregate("t7")
    ('queue:points', 'table:t7')
    """
    return f"queue:{room}"


def table_aggregate(table: str) -> str:
    return f"table:{table}"


def match_of(table: str, n: int) -> str:
    """A table's ``n``-th match: ``<table>-<n>`` (the id every tool already knows).

    >>> match_of("t7", 2)
    't7-2'
    """
    return f"{table}-{n}"


class LobbyEvent(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    aggregate: str
    seq: int = Field(ge=1)
    ts: int = Field(ge=0, description="milliseconds since the epoch, from the decide context")
    command_id: str
    v: int = SCHEMA_VERSION

    #: fields added after the event type was first stored: left out of the stored form while
    #: None (:func:`lobby_event_to_dict`), so older builds still read the event
    omit_if_none: ClassVar[frozenset[str]] = frozenset()


# ---- the queue of a room ------------------------------------------------------------

class PlayerQueued(LobbyEvent):
    """The player waits: after a Join (``joined``), or back from a table whose other player
    left (``opponent_left``).  ``since`` is when the player's Join came: a requeued player
    keeps it (the bot timer and the order of pairing count the whole wait)."""

    type: Literal["PlayerQueued"] = "PlayerQueued"
    player: str
    since: int = Field(ge=0)
    reason: Literal["joined", "opponent_left"] = "joined"
    #: ranked rooms: the rating the Join carried (engine/lobby/skill.py); None: unrated
    rating: float | None = None


class PlayerLeftQueue(LobbyEvent):
    """The player waits no more (a Leave, or the grace after a lost socket ran out)."""

    type: Literal["PlayerLeftQueue"] = "PlayerLeftQueue"
    player: str
    reason: DequeueReason


class TablePaired(LobbyEvent):
    """Two waiting players (oldest first) get a new table; ``match``: its first match."""

    type: Literal["TablePaired"] = "TablePaired"
    table: str
    players: tuple[str, str]
    match: str
    #: ranked rooms: paired past the room's longest wait, outside both windows (skill.py)
    fallback: bool = False


class BotSeated(LobbyEvent):
    """The queue timer found ``player`` alone for ``waited_ms`` (``gateway --bots``): a table
    with the bot ``bot`` of level ``bot_level`` opposite them."""

    type: Literal["BotSeated"] = "BotSeated"
    table: str
    player: str
    bot: str
    bot_level: str
    match: str
    waited_ms: int = Field(ge=0)


class LeaveRequested(LobbyEvent):
    """A Leave from a player at one of the room's tables: the table decides it (its process
    manager sends it the Leave); the queue never puts the player back in line."""

    type: Literal["LeaveRequested"] = "LeaveRequested"
    player: str
    table: str


class TableReleased(LobbyEvent):
    """A table of the room closed: none of its players is at it any more."""

    type: Literal["TableReleased"] = "TableReleased"
    table: str


class AwayNoted(LobbyEvent):
    """A player at one of the room's tables lost their socket for the grace (``away``) or is
    back: the table hears of it (a Disconnect / Reconnect in its match); a player away when
    their table closes is not put back in line."""

    type: Literal["AwayNoted"] = "AwayNoted"
    player: str
    table: str
    away: bool


class LeftWithTable(LobbyEvent):
    """A player the table had stay, but whose Leave the queue had (:class:`LeaveRequested`,
    ``left``) or who was away (:class:`AwayNoted`, ``disconnected``): they leave with the
    table's close, never requeued."""

    type: Literal["LeftWithTable"] = "LeftWithTable"
    player: str
    table: str
    reason: Literal["left", "disconnected"]


class CooldownStarted(LobbyEvent):
    """The player left a table before its deal: the ``leaves``-th such leave in a row; a
    Join is refused until ``until`` (ms).  The queue forgets the other players' cooldowns
    that ended at or before ``forget_before`` (ms; None: none, and then the field is not
    stored): long past any room's doubling, so remembering them changed nothing, and a busy
    room's queue stays the size of its recent leavers."""

    omit_if_none: ClassVar[frozenset[str]] = frozenset({"forget_before"})

    type: Literal["CooldownStarted"] = "CooldownStarted"
    player: str
    leaves: int = Field(ge=1)
    until: int = Field(ge=0)
    forget_before: int | None = Field(None, ge=0)


# ---- a table ------------------------------------------------------------------------

class TableOpened(LobbyEvent):
    """A table of ``room`` for ``players`` (seat a, seat b; the bot's id among them when
    ``bot`` is set), with the room's clocks recorded as they were."""

    type: Literal["TableOpened"] = "TableOpened"
    table: str
    room: str
    players: tuple[str, str]
    bot: str | None = None
    bot_level: str | None = None
    match: str
    ready_ms: int = Field(ge=0, description="the room's ready_seconds, in ms")
    grace_ms: int = Field(ge=0, description="the room's reconnect_grace_seconds, in ms")
    private: bool = Field(False, description="a private table's (issue 39): its series has the table's id")


class MatchSeated(LobbyEvent):
    """The engine created ``match`` and seated both players: they are told ``seated``."""

    type: Literal["MatchSeated"] = "MatchSeated"
    match: str


class PlayerReadied(LobbyEvent):
    type: Literal["PlayerReadied"] = "PlayerReadied"
    player: str
    match: str


class MatchDealt(LobbyEvent):
    type: Literal["MatchDealt"] = "MatchDealt"
    match: str


class LeaveDeferred(LobbyEvent):
    """The player left while ``match`` runs: the engine decides it, a Leave before the deal
    (``escape`` false) or an Escape after it (R-12.1).  Should the table close in this match
    first, the player leaves the room with it, never requeued."""

    type: Literal["LeaveDeferred"] = "LeaveDeferred"
    player: str
    match: str
    escape: bool


class LeaveNoted(LobbyEvent):
    """The player left between two matches (``match`` finished, not yet settled): the
    settlement closes the table instead of offering the next match."""

    type: Literal["LeaveNoted"] = "LeaveNoted"
    player: str
    match: str


class PlayerAway(LobbyEvent):
    """No socket for the room's grace: a Disconnect goes to ``match`` (R-13.4)."""

    type: Literal["PlayerAway"] = "PlayerAway"
    player: str
    match: str


class PlayerBack(LobbyEvent):
    """The player is connected again after :class:`PlayerAway`: a Reconnect goes to ``match``."""

    type: Literal["PlayerBack"] = "PlayerBack"
    player: str
    match: str


class MatchEnded(LobbyEvent):
    """The table's match is over for the table: ``finished`` (``escaper``: who escaped, R-12.1),
    or ended before the deal (``removed`` players with their reasons; ``abandoned``)."""

    type: Literal["MatchEnded"] = "MatchEnded"
    match: str
    outcome: MatchOutcome
    removed: tuple[tuple[str, RemovalReason], ...] = ()
    escaper: str | None = None


class MatchSettled(LobbyEvent):
    """The finished match is settled: each player is told ``settled`` (``scores``)."""

    type: Literal["MatchSettled"] = "MatchSettled"
    match: str
    scores: dict[str, int]


class NextMatchOffered(LobbyEvent):
    """Both stay: the table's next match, ``<table>-<n+1>``, is created."""

    type: Literal["NextMatchOffered"] = "NextMatchOffered"
    match: str


class TableClosed(LobbyEvent):
    """The table's last event.  ``removed`` leave the room (the ``removed`` note with each
    reason); ``stayed`` go back to the queue unless they asked to leave there; the bot
    leaves (``table_closed``).  ``dealt``: whether any match of the table was dealt;
    ``left_before_deal``: who left, or was removed not ready (R-13.2), before that (the room's
    leave cooldown)."""

    type: Literal["TableClosed"] = "TableClosed"
    reason: CloseReason
    removed: tuple[tuple[str, RemovalReason], ...]
    stayed: tuple[str, ...]
    bot: str | None = None
    dealt: bool
    left_before_deal: tuple[str, ...] = ()


QUEUE_EVENT_TYPES: tuple[type[LobbyEvent], ...] = (
    PlayerQueued, PlayerLeftQueue, TablePaired, BotSeated, LeaveRequested, AwayNoted, TableReleased,
    LeftWithTable, CooldownStarted,
)
TABLE_EVENT_TYPES: tuple[type[LobbyEvent], ...] = (
    TableOpened, MatchSeated, PlayerReadied, MatchDealt, LeaveDeferred, LeaveNoted, PlayerAway,
    PlayerBack, MatchEnded, MatchSettled, NextMatchOffered, TableClosed,
)
AnyLobbyEvent = Annotated[
    Union[
        PlayerQueued, PlayerLeftQueue, TablePaired, BotSeated, LeaveRequested, AwayNoted, TableReleased,
        LeftWithTable, CooldownStarted, TableOpened, MatchSeated, PlayerReadied, MatchDealt,
        LeaveDeferred, LeaveNoted, PlayerAway, PlayerBack, MatchEnded, MatchSettled,
        NextMatchOffered, TableClosed,
    ],
    Field(discriminator="type"),
]
_ADAPTER: TypeAdapter[Any] = TypeAdapter(AnyLobbyEvent)


class LobbyEventDecodeError(ValueError):
    """Stored bytes are not a valid lobby event of a known schema version."""


def lobby_event_to_dict(event: LobbyEvent) -> dict[str, Any]:
    """The event's fields; a field added since (``omit_if_none``) is left out while None, so
    an event that does not use it reads in the builds before it."""
    d = event.model_dump(mode="python")
    for name in type(event).omit_if_none:
        if d.get(name, 0) is None:
            del d[name]
    return d


def lobby_event_from_dict(data: dict[str, Any]) -> LobbyEvent:
    v = data.get("v", SCHEMA_VERSION)
    if v != SCHEMA_VERSION:
        raise LobbyEventDecodeError(f"lobby event schema version {v} is not supported")
    try:
        return _ADAPTER.validate_python(data)  # type: ignore[no-any-return]
    except Exception as exc:  # pydantic.ValidationError and friends
        raise LobbyEventDecodeError(f"not a valid lobby event: {exc}") from None


def encode_lobby_event(event: LobbyEvent) -> bytes:
    return msgpack.packb(lobby_event_to_dict(event), use_bin_type=True)  # type: ignore[no-any-return]


def decode_lobby_event(data: bytes) -> LobbyEvent:
    try:
        raw = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as exc:
        raise LobbyEventDecodeError(f"not msgpack: {exc}") from None
    if not isinstance(raw, dict):
        raise LobbyEventDecodeError("an event must be a map")
    return lobby_event_from_dict(raw)
