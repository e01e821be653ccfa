"""Deadlines: when the system must act on a match if no one else does (R-13).

A match's state says which deadline is running; the store records it atomically
with each append, and the timer workers and the sweeper act on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

DeadlineKind = Literal["turn", "trustee", "ready"]


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
