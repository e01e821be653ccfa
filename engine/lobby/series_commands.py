"""Commands of a private table's series (issue 39; engine/lobby/series.py).

Frozen pydantic models with a ``type`` tag, a ``command_id`` (idempotency) and the
``series`` they are for.  The players' five (``CreateTable``, ``JoinTable``,
``CancelTable``, ``RequestEnd``, ``VoteEnd``: ``player`` comes from the gateway's token, as
for every player command); the series' two timers (``JoinTimer``, ``VoteTimer``: late or
duplicated firings are refused ``stale``, never early ones accepted); and what the
process managers learn from the series' matches and their settlements (``StartHand``,
``SettleHand``, ``AbandonSeries``; engine/lobby/series_managers.py).

A JoinTable names the ``code`` the friend typed and the ``series`` the code index gave for
it (engine/store/lobby_store.py ``series_of_code``): the series checks the two agree.

>>> parse_series_command({"type": "CreateTable", "command_id": "c", "series": "s1", "room": "points",
...                       "player": "a", "hands": 8}).hands
8
>>> parse_series_command({"type": "CreateTable", "command_id": "c", "series": "s1", "room": "points",
...                       "player": "a", "hands": 5})
Traceback (most recent call last):
...
engine.match.errors.BadCommand: hands: Input should be 4, 8 or 16
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import Field, TypeAdapter, ValidationError

from engine.lobby.commands import Id, LobbyCommand, PlayerId
from engine.lobby.series_events import HandsCount
from engine.match.commands import readable_validation_error
from engine.match.errors import BadCommand

#: the code a friend joins with: 6 characters (engine/service/series.py ``CODE_ALPHABET``)
Code = Annotated[str, Field(min_length=6, max_length=6, pattern=r"^[A-Za-z0-9]{6}$")]


class SeriesCommand(LobbyCommand):
    series: Id


# ---- the players' ---------------------------------------------------------------------------

class CreateTable(SeriesCommand):
    """``player`` opens a private table in ``room`` for ``hands`` hands (4, 8 or 16);
    ``spectators``: others may watch; ``bots``: a bot takes the empty seat when nobody joined
    in time (else the table ends ``not_joined``)."""

    type: Literal["CreateTable"] = "CreateTable"
    room: Id
    player: PlayerId
    hands: HandsCount
    spectators: bool = False
    bots: bool = False


class JoinTable(SeriesCommand):
    """``player`` takes the second seat with the table's ``code``; ``room``: the only room the
    player's token allows (a table of another room is refused ``not_allowed``), None: any."""

    type: Literal["JoinTable"] = "JoinTable"
    code: Code
    player: PlayerId
    room: Id | None = None


class CancelTable(SeriesCommand):
    """The owner cancels the table before its first deal (``cancelled``)."""

    type: Literal["CancelTable"] = "CancelTable"
    player: PlayerId


class RequestEnd(SeriesCommand):
    """``player`` asks to end the series early: a vote the other player answers (at most
    3 per player per series)."""

    type: Literal["RequestEnd"] = "RequestEnd"
    player: PlayerId


class VoteEnd(SeriesCommand):
    """The other player's answer to the open vote."""

    type: Literal["VoteEnd"] = "VoteEnd"
    player: PlayerId
    agree: bool


# ---- the timers -----------------------------------------------------------------------------

class JoinTimer(SeriesCommand):
    """The table's join time (``SeriesCreated.join_deadline``) ran out: a bot sits where the
    owner allowed bots, else the series ends ``not_joined``."""

    type: Literal["JoinTimer"] = "JoinTimer"


class VoteTimer(SeriesCommand):
    """Vote number ``vote`` ran out unanswered: it counts as agreed."""

    type: Literal["VoteTimer"] = "VoteTimer"
    vote: int = Field(ge=1)


# ---- the process managers' -----------------------------------------------------------------

class StartHand(SeriesCommand):
    """The series' next hand was dealt: ``match`` (a match ``<table>-<n>`` of its table)."""

    type: Literal["StartHand"] = "StartHand"
    match: Id


class SettleHand(SeriesCommand):
    """The ledger settled the running hand ``match``: its ``scores``, ``winner``, each
    player's biggest bomb (``bombs``, xiang) and, after an escape (R-12), the ``escaper``,
    which ends the series (``escaped``)."""

    type: Literal["SettleHand"] = "SettleHand"
    match: Id
    scores: dict[str, int] = Field(default_factory=dict)
    winner: str | None = None
    bombs: dict[str, int] = Field(default_factory=dict)
    escaper: str | None = None


class AbandonSeries(SeriesCommand):
    """The series' table closed without a settled hand to go on from (a Leave between hands,
    a removal before a deal, R-13.2): the series ends ``abandoned``."""

    type: Literal["AbandonSeries"] = "AbandonSeries"
    match: str | None = None


PLAYER_COMMANDS: tuple[type[SeriesCommand], ...] = (CreateTable, JoinTable, CancelTable, RequestEnd, VoteEnd)
AnySeriesCommand = Annotated[
    Union[CreateTable, JoinTable, CancelTable, RequestEnd, VoteEnd, JoinTimer, VoteTimer, StartHand, SettleHand,
          AbandonSeries],
    Field(discriminator="type"),
]
_ADAPTER: TypeAdapter[Any] = TypeAdapter(AnySeriesCommand)


def parse_series_command(data: dict[str, Any]) -> SeriesCommand:
    """A series command from plain data, or a :class:`BadCommand` with a readable reason."""
    try:
        return _ADAPTER.validate_python(data)  # type: ignore[no-any-return]
    except ValidationError as exc:
        raise BadCommand(readable_validation_error(exc, skip=1)) from None
