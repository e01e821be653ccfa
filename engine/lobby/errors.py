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
