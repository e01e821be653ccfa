"""The operator channel's own commands: audited ledger entries, room registration, and
the check that a fixed-hand Deal is sent only into a test room.

:class:`OperatorDesk` is the ``operator`` hook of the ops channel's
:class:`~engine.service.channels.ChannelService`: it answers the commands that are
not match commands (``Credit``, ``Debit``, ``AddRoom``) with an
:class:`~engine.service.service.Outcome` (no events; the reply says accepted /
duplicate / rejected), refuses a fixed-hand ``Deal`` in a room without
``test_deals``, and returns None for everything else (decided by the match service).

>>> from projections.ledger import InMemoryLedger
>>> from engine.match.commands import Credit
>>> desk = OperatorDesk(InMemoryLedger(), clock=lambda: 5)
>>> c = Credit(command_id="c1", player="alice", amount=300, reason="deposit", operator="ops-7")
>>> desk(c).accepted, desk(c).duplicate, desk.ledger.balance("alice", "wealth")
(True, True, 300)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from engine.match.commands import AddRoom, CommandBase, Credit, Deal, Debit
from engine.match.errors import BadCommand, CommandIdReused, InsufficientBalance, NotAllowed, Rejected
from engine.match.state import MatchState
from engine.service.rooms import RoomError, RoomRegistry
from engine.service.service import Outcome
from projections.ledger import (
    ENTRY_APPLIED,
    ENTRY_DUPLICATE,
    ENTRY_INSUFFICIENT,
    MAX_BALANCE,
    Ledger,
    LedgerEntry,
    LedgerEntryConflict,
)


class OperatorDesk:
    """``ledger``: the engine's ledger; ``rooms``: the room registry; ``service``: the match
    service (to read a match's room for a Deal); ``clock``: ms for the entries' ``at_ms``."""

    def __init__(self, ledger: Ledger | None, rooms: RoomRegistry | None = None, service: Any = None,
                 clock: Callable[[], int] | None = None,
                 on_room_added: Callable[[list[str]], None] | None = None):
        self.ledger = ledger
        #: called with [name] after a room is registered (serve: allow it as a metrics label)
        self.on_room_added = on_room_added
        self.rooms = rooms
        self.service = service
        self.clock = clock or (lambda: 0)

    def __call__(self, command: CommandBase) -> Outcome | None:
        if isinstance(command, (Credit, Debit)):
            return self._entry(command)
        if isinstance(command, AddRoom):
            return self._add_room(command)
        if isinstance(command, Deal) and command.hands is not None:
            return self._fixed_deal(command)
        return None

    @staticmethod
    def _outcome(command: CommandBase, rejection: Rejected | None = None, duplicate: bool = False) -> Outcome:
        return Outcome((), MatchState(match_id=command.match_id or ""), rejection, duplicate)

    def _entry(self, c: Credit | Debit) -> Outcome:
        if self.ledger is None:
            return self._outcome(c, NotAllowed("this service has no ledger"))
        kind: Literal["credit", "debit"] = "credit" if isinstance(c, Credit) else "debit"
        entry = LedgerEntry(kind, c.player, c.mode, c.amount if kind == "credit" else -c.amount,
                            c.command_id, int(self.clock()), c.reason, c.operator)
        try:
            result = self.ledger.record_entry(entry)
        except LedgerEntryConflict as exc:
            return self._outcome(c, CommandIdReused(exc.reason))
        if result == ENTRY_APPLIED:
            return self._outcome(c)
        if result == ENTRY_DUPLICATE:
            return self._outcome(c, duplicate=True)
        if result == ENTRY_INSUFFICIENT:
            return self._outcome(c, InsufficientBalance(
                f"debit of {c.amount} refused: {c.player}'s {c.mode} balance is smaller"))
        return self._outcome(c, BadCommand(f"{kind} of {c.amount} refused: the balance would pass "
                                           f"{MAX_BALANCE}"))

    def _add_room(self, c: AddRoom) -> Outcome:
        if self.rooms is None:
            return self._outcome(c, NotAllowed("this service has no room registry"))
        try:
            added = self.rooms.add(c.name, c.config, replace=c.replace)
        except RoomError as exc:
            return self._outcome(c, BadCommand(f"room {c.name!r} refused: {exc}"))
        if not added:
            return self._outcome(c, NotAllowed(f"a room named {c.name!r} is already registered "
                                               "(send replace: true to replace it)"))
        if self.on_room_added is not None:
            self.on_room_added([c.name])
        return self._outcome(c)

    def _fixed_deal(self, c: Deal) -> Outcome | None:
        state = self.service.load_state(c.match_id) if self.service is not None else None
        cfg = getattr(state, "config", None)
        if cfg is not None and cfg.test_deals:
            return None  # a test room: decided as usual
        from engine.service.channels import refused_outcome

        refusal = NotAllowed("a fixed-hand Deal is allowed only in rooms with test_deals = true "
                             "(the shipped rooms deal from the engine's shuffle)")
        return refused_outcome(self.service, c, refusal) if self.service is not None else self._outcome(c, refusal)
