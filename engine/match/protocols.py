"""The shapes the outside layers rely on: what executing a command gives back
(:class:`OutcomeLike`, implemented by :class:`engine.service.service.Outcome`) and
what runs commands (:class:`ServiceLike`, implemented by
:class:`engine.service.service.MatchService` and the wrappers around it: the
channel policy, the metrics, the simulator's capture).  Typing only: no behaviour.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from engine.match.commands import CommandBase
from engine.match.errors import Rejected
from engine.match.events import EventBase
from engine.match.state import MatchState


class OutcomeLike(Protocol):
    """What one command did: the events it appended (or a duplicate's stored ones), the
    match after it, the rejection if it was refused, and whether it was a duplicate."""

    @property
    def events(self) -> Sequence[EventBase]: ...
    @property
    def state(self) -> MatchState: ...
    @property
    def rejection(self) -> Rejected | None: ...
    @property
    def duplicate(self) -> bool: ...


class ServiceLike(Protocol):
    """Something that executes commands (never raises a :class:`Rejected`: it is in the outcome)."""

    def execute(self, command: CommandBase) -> OutcomeLike: ...
