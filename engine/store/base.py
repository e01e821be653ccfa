"""The event store contract: one interface, an in-memory and a Redis Streams
implementation, one contract test suite (tests/test_store_contract.py).

An append is atomic: it checks the expected version and the command id, adds
the events, adds a notification to the match's bucket feed and records the
match's next deadline (or clears it) — all or nothing.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from engine.events import EventBase

DeadlineKind = Literal["turn", "trustee", "ready"]


class WrongVersion(Exception):
    """Optimistic concurrency: the match moved on since it was loaded (reload, decide again)."""

    def __init__(self, match_id: str, expected: int, actual: int):
        super().__init__(f"match {match_id}: expected version {expected}, stream is at {actual}")
        self.match_id = match_id
        self.expected = expected
        self.actual = actual


@dataclass(frozen=True, slots=True)
class Deadline:
    """When the system must act on a match if no one else does.

    ``version`` is the match version the deadline was set for: a timer or
    sweeper firing for an older version does nothing (the match moved on).
    """

    match_id: str
    version: int
    at_ms: int
    kind: DeadlineKind


@dataclass(frozen=True, slots=True)
class AppendResult:
    version: int  # the match version after the append
    duplicate: bool  # the command id was already applied: nothing was appended
    events: tuple[EventBase, ...]  # the events of that command (the stored ones on a duplicate)


@dataclass(frozen=True, slots=True)
class Snapshot:
    version: int
    state: bytes  # codec of the state module (engine.state.encode_state)


class EventStore(ABC):
    """Append-only per-match event streams plus feed, deadlines and snapshots."""

    @abstractmethod
    def append(self, match_id: str, expected_version: int, command_id: str,
               events: Sequence[EventBase], deadline: Deadline | None) -> AppendResult:
        """Append ``events`` (seq expected_version+1 …) if the stream is at
        ``expected_version``; a command id seen before returns its original
        result with ``duplicate=True``; else raise :class:`WrongVersion`.
        ``deadline`` replaces the match's recorded deadline (None clears it)."""

    @abstractmethod
    def load(self, match_id: str, after: int = 0) -> list[EventBase]:
        """Events with seq > ``after``, in order (paged internally)."""

    @abstractmethod
    def version(self, match_id: str) -> int:
        """Seq of the last event, 0 for an unknown match."""

    @abstractmethod
    def match_ids(self) -> Iterator[str]:
        """Every match the store holds."""

    @abstractmethod
    def due_deadlines(self, now_ms: int, limit: int = 100) -> list[Deadline]:
        """Recorded deadlines at or before ``now_ms``, earliest first."""

    @abstractmethod
    def deadline(self, match_id: str) -> Deadline | None:
        """The match's recorded deadline, if any."""

    @abstractmethod
    def save_snapshot(self, match_id: str, snapshot: Snapshot) -> None: ...

    @abstractmethod
    def load_snapshot(self, match_id: str) -> Snapshot | None: ...
