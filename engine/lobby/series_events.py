"""The events of a private table's series (issue 39; engine/lobby/series.py), and the codec
the lobby's store reads every lobby stream with (:func:`decode_stored_event`).

The envelope is the lobby's (:class:`engine.lobby.events.LobbyEvent`) with ``aggregate``
``series:<id>`` (:func:`series_aggregate`).  Every moment the series computes (the join
deadline, a vote's deadline), the code from the cryptographic source and the ids it was
given (its table, a bot) are in the event that introduced them: a replay needs no clock.

>>> e = EndVoted(aggregate="series:s1", seq=5, ts=9, command_id="c", player="b", agree=False)
>>> decode_stored_event(encode_lobby_event(e)) == e
True
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

import msgpack
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from engine.lobby.events import (
    SCHEMA_VERSION,
    LobbyEvent,
    LobbyEventDecodeError,
    encode_lobby_event,
    lobby_event_from_dict,
)

__all__ = [
    "FinishReason", "SeriesOptions", "HandScores", "BiggestBomb", "Standings", "SeriesEvent", "SeriesCreated",
    "PlayerJoinedSeries", "HandStarted", "HandSettled", "EndRequested", "EndVoted", "SeriesFinished",
    "SERIES_EVENT_TYPES", "series_aggregate", "series_event_from_dict", "decode_stored_event",
    "stored_event_from_dict", "encode_lobby_event",
]

#: why a series ended (``SeriesFinished.reason``): its last hand settled (``completed``), ended
#: early by a vote (``dissolved``), an escape (R-12, ``escaped``), its table closed otherwise
#: (a Leave between hands, a removal before a deal: ``abandoned``), nobody joined in time
#: (``not_joined``), or its owner cancelled it before the first deal (``cancelled``)
FinishReason = Literal["completed", "dissolved", "escaped", "abandoned", "not_joined", "cancelled"]
#: how many hands a series may have (局數)
HandsCount = Literal[4, 8, 16]


def series_aggregate(series: str) -> str:
    """The aggregate id of a series.

    >>> series_aggregate("s1")
    'series:s1'
    """
    return f"series:{series}"


class _Value(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SeriesOptions(_Value):
    """What the owner allowed: spectators may watch; a bot takes the empty seat when nobody
    joined in the room's ``private_join_seconds``."""

    spectators: bool = False
    bots: bool = False


class HandScores(_Value):
    """One settled hand of the standings: its match and each player's signed score."""

    match: str
    scores: dict[str, int]


class BiggestBomb(_Value):
    """The series' biggest bomb: its ``xiang`` (相, R-3) and who played it in which hand
    (the first played on a tie; ``player`` None and ``xiang`` 0: no bomb yet); ``by_player``:
    each player's biggest (0: none).  Taken from the hands' CardsPlayed events (the
    settlement reports only each player's *effective* xiang, R-8.3)."""

    player: str | None = None
    xiang: int = 0
    match: str | None = None
    hand: int | None = None
    by_player: dict[str, int] = Field(default_factory=dict)


class Standings(_Value):
    """大結算: ``totals`` (player → the sum of their settled scores), ``per_hand`` (each settled
    hand in order), ``hands_won`` (player → hands won), ``biggest_bomb``."""

    totals: dict[str, int]
    per_hand: tuple[HandScores, ...]
    hands_won: dict[str, int]
    biggest_bomb: BiggestBomb

    def to_json(self) -> dict[str, Any]:
        """The WebSocket shape (``{"totals", "per_hand": [{"match", "scores"}…], "hands_won",
        "biggest_bomb"}``)."""
        return self.model_dump(mode="json")


class SeriesEvent(LobbyEvent):
    """An event of a series (``aggregate`` ``series:<id>``)."""


class SeriesCreated(SeriesEvent):
    """The owner opened a private table for ``hands`` hands in ``room``.  ``code``: the
    6-character code a friend joins with (from the context's cryptographic source);
    ``table``: the table whose matches ``<table>-<n>`` are the hands; ``join_deadline``
    (ms): when an unclaimed table ends (the room's ``private_join_seconds``); ``vote_ms``:
    how long a vote to end lasts (the room's ``end_vote_seconds``)."""

    type: Literal["SeriesCreated"] = "SeriesCreated"
    series: str
    owner: str
    room: str
    hands: HandsCount
    options: SeriesOptions
    code: str
    table: str
    join_deadline: int = Field(ge=0)
    vote_ms: int = Field(ge=0)


class PlayerJoinedSeries(SeriesEvent):
    """The second seat is taken: by the friend with the code, or (``bot``) by a bot when the
    join time ran out at a table that allows one."""

    type: Literal["PlayerJoinedSeries"] = "PlayerJoinedSeries"
    player: str
    bot: bool = False
    bot_level: str | None = None


class HandStarted(SeriesEvent):
    """Hand ``hand`` (1…hands) was dealt: the match ``match``."""

    type: Literal["HandStarted"] = "HandStarted"
    hand: int = Field(ge=1)
    match: str


class HandSettled(SeriesEvent):
    """The ledger settled hand ``hand``: ``scores`` are that hand's settlement (R-8, R-12),
    ``winner`` its winner, ``bombs`` each player's biggest bomb in it (xiang; 0: none)."""

    type: Literal["HandSettled"] = "HandSettled"
    hand: int = Field(ge=1)
    match: str
    scores: dict[str, int]
    winner: str | None = None
    bombs: dict[str, int] = Field(default_factory=dict)
    escaper: str | None = None


class EndRequested(SeriesEvent):
    """``by`` asks to end the series early (申請解散): the ``vote``-th vote of the series,
    open until ``deadline`` (ms)."""

    type: Literal["EndRequested"] = "EndRequested"
    by: str
    vote: int = Field(ge=1)
    deadline: int = Field(ge=0)


class EndVoted(SeriesEvent):
    """The other player's answer (``agree``); ``timed_out``: nobody answered by the
    deadline, which counts as agreed.  Agreed: the series ends now between hands, or once
    the running hand is settled."""

    type: Literal["EndVoted"] = "EndVoted"
    player: str
    agree: bool
    timed_out: bool = False


class SeriesFinished(SeriesEvent):
    """The series' last event, with its standings as they were then."""

    type: Literal["SeriesFinished"] = "SeriesFinished"
    reason: FinishReason
    standings: Standings


SERIES_EVENT_TYPES: tuple[type[SeriesEvent], ...] = (
    SeriesCreated, PlayerJoinedSeries, HandStarted, HandSettled, EndRequested, EndVoted, SeriesFinished,
)
AnySeriesEvent = Annotated[
    Union[SeriesCreated, PlayerJoinedSeries, HandStarted, HandSettled, EndRequested, EndVoted, SeriesFinished],
    Field(discriminator="type"),
]
_ADAPTER: TypeAdapter[Any] = TypeAdapter(AnySeriesEvent)
_TYPES = frozenset(t.__name__ for t in SERIES_EVENT_TYPES)


def series_event_from_dict(data: dict[str, Any]) -> SeriesEvent:
    v = data.get("v", SCHEMA_VERSION)
    if v != SCHEMA_VERSION:
        raise LobbyEventDecodeError(f"series event schema version {v} is not supported")
    try:
        return _ADAPTER.validate_python(data)  # type: ignore[no-any-return]
    except Exception as exc:  # pydantic.ValidationError and friends
        raise LobbyEventDecodeError(f"not a valid series event: {exc}") from None


def stored_event_from_dict(data: dict[str, Any]) -> LobbyEvent:
    """A queue's, a table's or a series' event from plain data."""
    if data.get("type") in _TYPES:
        return series_event_from_dict(data)
    return lobby_event_from_dict(data)


def decode_stored_event(data: bytes) -> LobbyEvent:
    """Any event of the lobby's streams (queue, table, series) from its msgpack bytes."""
    try:
        raw = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as exc:
        raise LobbyEventDecodeError(f"not msgpack: {exc}") from None
    if not isinstance(raw, dict):
        raise LobbyEventDecodeError("an event must be a map")
    return stored_event_from_dict(raw)
