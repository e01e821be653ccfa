"""Commands of a room's queue and of a table.

Frozen pydantic models with a ``type`` tag and a ``command_id`` (idempotency, as for a
match).  Queue commands name their ``room``; table commands their ``table``.  The three
player-facing ones -- :class:`Join`, :class:`Leave`, and the presence pair
:class:`GraceExpired` / :class:`Returned` -- are one type each whatever aggregate
decides them: a :class:`Leave` goes to the room's queue (``table`` None), which decides it
when the player waits there and otherwise records it and hands it on to the player's table
(``table`` set, by the process manager, engine/lobby/managers.py).  The others come
from process managers (``OpenTable``, ``ConfirmSeated``, ``NoteReady``, ``NoteDealt``,
``MatchEnded``, ``Settle``, ``ReleaseTable``) or from the queue's timer (``QueueTimer``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from engine.match.commands import readable_validation_error
from engine.match.errors import BadCommand
from engine.lobby.events import RemovalReason, MatchOutcome

Id = Annotated[str, Field(min_length=1, max_length=200)]
PlayerId = Annotated[str, Field(min_length=1, max_length=100)]


class LobbyCommand(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    command_id: Id


# ---- player commands (queue, or table through the queue) ---------------------------------

class Join(LobbyCommand):
    """Wait in ``room``'s queue (refused during the player's leave cooldown: ``cooldown``)."""

    type: Literal["Join"] = "Join"
    room: Id
    player: PlayerId
    #: ranked rooms: the player's rating when they joined, a snapshot from the ladder (the
    #: queue's replay never reads the ratings projection; engine/lobby/skill.py); None: unrated
    rating: float | None = Field(None, allow_inf_nan=False)


class Leave(LobbyCommand):
    """Leave wherever the room has the player: the queue, a table between two matches, or a
    match (where the engine decides: a Leave before the deal, an Escape after it).  Sent
    to the queue with ``table`` None; the queue hands it on to the table."""

    type: Literal["Leave"] = "Leave"
    room: Id
    player: PlayerId
    table: Id | None = None


class GraceExpired(LobbyCommand):
    """The player had no socket for the room's ``reconnect_grace_seconds`` (the presence
    sweep): out of the queue, or a Disconnect in the table's match (R-13.4)."""

    type: Literal["GraceExpired"] = "GraceExpired"
    room: Id
    player: PlayerId
    table: Id | None = None


class Returned(LobbyCommand):
    """The player has a socket again: a Reconnect in the table's match if a Disconnect went."""

    type: Literal["Returned"] = "Returned"
    room: Id
    player: PlayerId
    table: Id | None = None


# ---- the queue's own ---------------------------------------------------------------------

class QueueTimer(LobbyCommand):
    """The queue's timer fired: seat a bot opposite the oldest player who waited long enough
    (``ctx.bots``: the gateway's ``--bots`` policy).  Stale unless ``version`` is the queue's."""

    type: Literal["QueueTimer"] = "QueueTimer"
    room: Id
    version: int = Field(ge=0)


class PairTimer(LobbyCommand):
    """A ranked room's matchmaking timer: pair again now that the waiting players' windows
    widened (engine/lobby/skill.py); changes nothing when nobody is close enough yet."""

    type: Literal["PairTimer"] = "PairTimer"
    room: Id


class ReleaseTable(LobbyCommand):
    """A table of the room closed (its :class:`engine.lobby.events.TableClosed`, handed on by
    the process manager): who stayed waits again, who left before the deal gets a cooldown."""

    type: Literal["ReleaseTable"] = "ReleaseTable"
    room: Id
    table: Id
    removed: tuple[tuple[PlayerId, RemovalReason], ...] = ()
    stayed: tuple[PlayerId, ...] = ()
    bot: PlayerId | None = None
    dealt: bool = False
    left_before_deal: tuple[PlayerId, ...] = ()


# ---- a table's, from the process managers ------------------------------------------------

class OpenTable(LobbyCommand):
    """Open a table the queue paired (TablePaired / BotSeated)."""

    type: Literal["OpenTable"] = "OpenTable"
    table: Id
    room: Id
    players: tuple[PlayerId, PlayerId]
    match: Id
    bot: PlayerId | None = None
    bot_level: str | None = None
    #: a private table's (issue 39: its series has the table's id): its matches are created
    #: with the room's private config (no ladder rates them), its players are in no queue
    private: bool = False


class ConfirmSeated(LobbyCommand):
    """The engine accepted the table's match (CreateMatch, both Sits)."""

    type: Literal["ConfirmSeated"] = "ConfirmSeated"
    table: Id
    match: Id


class NoteReady(LobbyCommand):
    """The match recorded the player's Ready (PlayerReady)."""

    type: Literal["NoteReady"] = "NoteReady"
    table: Id
    match: Id
    player: PlayerId


class NoteDealt(LobbyCommand):
    """The match dealt (HandDealt)."""

    type: Literal["NoteDealt"] = "NoteDealt"
    table: Id
    match: Id


class MatchEnded(LobbyCommand):
    """The match ended (MatchFinished; PlayerRemoved before the deal; MatchAbandoned)."""

    type: Literal["MatchEnded"] = "MatchEnded"
    table: Id
    match: Id
    outcome: MatchOutcome
    removed: tuple[tuple[PlayerId, RemovalReason], ...] = ()
    escaper: PlayerId | None = None


class Settle(LobbyCommand):
    """The ledger settled the finished match: tell the players, then close or go on."""

    type: Literal["Settle"] = "Settle"
    table: Id
    match: Id
    scores: dict[str, int] = Field(default_factory=dict)
    #: the table's series is over with this match (issue 39): close the table instead of
    #: offering the next match (everyone leaves with ``series_over``)
    close: bool = False


class CloseTable(LobbyCommand):
    """Close a private table whose series ended between its matches (a vote passed before
    the next deal): everyone leaves with ``series_over``.  A table never opened is refused
    ``unknown_table``, one closed already ``table_closed`` (as every table command)."""

    type: Literal["CloseTable"] = "CloseTable"
    table: Id


QueueCommand = Union[Join, Leave, GraceExpired, Returned, QueueTimer, PairTimer, ReleaseTable]
TableCommand = Union[OpenTable, CloseTable, ConfirmSeated, NoteReady, NoteDealt, Leave, GraceExpired, Returned,
                     MatchEnded, Settle]
AnyLobbyCommand = Annotated[
    Union[Join, Leave, GraceExpired, Returned, QueueTimer, PairTimer, ReleaseTable, OpenTable, CloseTable, ConfirmSeated,
          NoteReady, NoteDealt, MatchEnded, Settle],
    Field(discriminator="type"),
]
_ADAPTER: TypeAdapter[Any] = TypeAdapter(AnyLobbyCommand)


def parse_lobby_command(data: dict[str, Any]) -> LobbyCommand:
    """A command from plain data, or a :class:`BadCommand` with a readable reason.

    >>> parse_lobby_command({"type": "Join", "command_id": "c", "room": "points", "player": "a"}).player
    'a'
    >>> parse_lobby_command({"type": "Join", "command_id": "c", "room": "points"})
    Traceback (most recent call last):
    ...
    engine.match.errors.BadCommand: player: Field required
    """
    try:
        return _ADAPTER.validate_python(data)  # type: ignore[no-any-return]
    except ValidationError as exc:
        raise BadCommand(readable_validation_error(exc, skip=1)) from None
