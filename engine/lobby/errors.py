"""The lobby's own refusals, under the one :class:`engine.match.errors.Rejected` hierarchy.

The lobby also raises the match's codes where they mean the same thing: ``bad_command``
(a command for another aggregate), ``unknown_room`` (a Join in a room nobody registered),
``seat_refused`` (a balance below the room's lowest level, R-11.1), ``not_seated`` (a Leave
from a player the room does not have) and ``stale`` (a timer or a match's news for an
older match of the table).  Callers compare ``code``, never the reason.

>>> try:
...     raise Cooldown("wait 5 s", retry_after_ms=5000)
... except Rejected as r:
...     (r.code, r.retry_after_ms, str(r))
('cooldown', 5000, 'wait 5 s')
"""

from __future__ import annotations

from engine.match.errors import Rejected


class Cooldown(Rejected):
    """A Join while the player's leave cooldown runs (they left a table before its deal);
    ``retry_after_ms``: how long until a Join is accepted again."""

    code = "cooldown"

    def __init__(self, reason: str, retry_after_ms: int):
        super().__init__(reason)
        self.retry_after_ms = retry_after_ms


class AlreadyPlaced(Rejected):
    """A Join from a player who waits or sits in another room (one place per player)."""

    code = "already_placed"


class UnknownTable(Rejected):
    """A command for a table that was never opened."""

    code = "unknown_table"


class TableClosed(Rejected):
    """A command for a table that has closed: nothing more happens at it."""

    code = "table_closed"


LOBBY_REJECTION_TYPES: tuple[type[Rejected], ...] = (Cooldown, AlreadyPlaced, UnknownTable, TableClosed)


# ---- a private table's series (engine/lobby/series.py, issue 39) ----------------------------
# ``unknown_table`` (:class:`UnknownTable`) also answers a JoinTable with a code no table has.

class TableFull(Rejected):
    """A JoinTable at a private table whose two seats are taken."""

    code = "table_full"


class TableExpired(Rejected):
    """A JoinTable (or any command) at a private table nobody joined in the room's
    ``private_join_seconds``: it ended ``not_joined``."""

    code = "table_expired"


class TableCancelled(Rejected):
    """A command at a private table its owner cancelled before the first deal."""

    code = "table_cancelled"


class NotOwner(Rejected):
    """A CancelTable from a player who did not open the table."""

    code = "not_owner"


class TableStarted(Rejected):
    """A CancelTable after the series' first deal: end it by a vote (RequestEnd) instead."""

    code = "table_started"


class NoVoteOpen(Rejected):
    """A VoteEnd while no vote to end the series runs."""

    code = "no_vote_open"


class NotYourVote(Rejected):
    """A VoteEnd from the player who asked for the vote: the other player answers it."""

    code = "not_your_vote"


class VoteOpen(Rejected):
    """A RequestEnd while a vote to end the series already runs."""

    code = "vote_open"


class VoteLimit(Rejected):
    """A RequestEnd from a player who started the most votes a series allows (3)."""

    code = "vote_limit"


SERIES_REJECTION_TYPES: tuple[type[Rejected], ...] = (
    UnknownTable, TableClosed, TableFull, TableExpired, TableCancelled, NotOwner, TableStarted, NoVoteOpen,
    NotYourVote, VoteOpen, VoteLimit,
)
