"""Typed rejections: every refusal of a command is a :class:`Rejected` with a
reason a person can read.  ``code`` is a stable machine-readable tag (metrics,
gateways); ``str(exc)`` is the human reason.

>>> try:
...     raise DoesNotBeat("3 3 does not beat 4 4")
... except Rejected as r:
...     (r.code, str(r))
('does_not_beat', '3 3 does not beat 4 4')
"""

from __future__ import annotations


class Rejected(Exception):
    """Base of every refusal; state never changes when one is raised."""

    code = "rejected"

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class BadCommand(Rejected):
    """The command is malformed (missing fields, wrong types, unknown type, too large)."""

    code = "bad_command"


class UnknownMatch(Rejected):
    code = "unknown_match"


class MatchExists(Rejected):
    code = "match_exists"


class WrongPhase(Rejected):
    """The command does not fit the match's phase (e.g. playing before the deal)."""

    code = "wrong_phase"


class MatchOver(Rejected):
    code = "match_over"


class SeatRefused(Rejected):
    """A third player, a duplicate, or a player who does not meet the room's level (R-11.1)."""

    code = "seat_refused"


class NotSeated(Rejected):
    code = "not_seated"


class NotYourTurn(Rejected):
    code = "not_your_turn"


class NotInHand(Rejected):
    code = "not_in_hand"


class NotACombination(Rejected):
    code = "not_a_combination"


class DoesNotBeat(Rejected):
    code = "does_not_beat"


class CannotPass(Rejected):
    """Passing while leading a trick (R-6.1)."""

    code = "cannot_pass"


class NotAllowed(Rejected):
    """The room's config or the player's state forbids this (e.g. reclaiming control, R-13.4)."""

    code = "not_allowed"


class StaleCommand(Rejected):
    """A timer or system command set for an earlier version of the match."""

    code = "stale"


class UnknownRoom(Rejected):
    """CreateMatch names a room that is not registered (``shuangkou room add``)."""

    code = "unknown_room"


class InsufficientBalance(Rejected):
    """A ledger debit larger than the player's balance."""

    code = "insufficient_balance"


class CommandIdReused(Rejected):
    """A ledger Credit/Debit whose command id was already used for a different entry."""

    code = "command_id_reused"


REJECTION_TYPES: tuple[type[Rejected], ...] = (
    Rejected, BadCommand, UnknownMatch, MatchExists, WrongPhase, MatchOver, SeatRefused,
    NotSeated, NotYourTurn, NotInHand, NotACombination, DoesNotBeat, CannotPass, NotAllowed,
    StaleCommand, UnknownRoom, InsufficientBalance, CommandIdReused,
)
