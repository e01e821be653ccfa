"""Delivery receipts (issue 35 §4): the format of ``sk:seen:{<player>}``
(:func:`engine.store.keys.receipt_key`), written by the gateway (gateway/receipts.py) when it
hands a player's socket the update that starts their clock, read by the timers
(workers/runtime.py ``clock_pause``): a clock also pauses while the update sat in the player's
stream with no gateway to deliver it.

A receipt is ``open|<at_ms>|<version>|<match>`` (a socket of the player was handed the update
of ``match`` at ``version``, at ``at_ms``, the gateway's wall clock) or
``closed|<at_ms>|<version>|<match>`` (the player's own socket closed on a live gateway: the
ordinary reconnect grace runs, not a pause).
"""

from __future__ import annotations

from typing import Any

#: a receipt is forgotten this long after it was written
TTL_MS = 3_600_000


def starts_clock(player: str, message: dict[str, Any]) -> bool:
    """Whether ``message`` (a socket's ``update``) starts a clock of ``player``: its brief has a
    deadline, and it is the player's turn or the match is not dealt yet (the ready clock).

    >>> starts_clock("a", {"kind": "update", "brief": {"phase": "playing", "turn": "a", "deadline_ms": 9}})
    True
    >>> starts_clock("a", {"kind": "update", "brief": {"phase": "playing", "turn": "b", "deadline_ms": 9}})
    False
    >>> starts_clock("a", {"kind": "update", "brief": {"phase": "seating", "turn": None, "deadline_ms": 9}})
    True
    >>> starts_clock("a", {"kind": "update", "brief": {"phase": "finished", "deadline_ms": None}})
    False
    """
    brief = message.get("brief")
    if message.get("kind") != "update" or not isinstance(brief, dict) or brief.get("deadline_ms") is None:
        return False
    return brief.get("turn") == player or brief.get("phase") in ("new", "seating")


def encode(state: str, at_ms: int, version: int, match: str) -> str:
    """A receipt's value (:func:`decode` reads it back).

    >>> decode(encode("open", 1000, 7, "m|1"))
    ('open', 1000, 7, 'm|1')
    """
    return f"{state}|{int(at_ms)}|{int(version)}|{match}"


def decode(value: Any) -> tuple[str, int, int, str] | None:
    """``(state, at_ms, version, match)`` of a receipt's value, None when it is none.

    >>> decode(b"closed|5|3|m"), decode(None), decode("garbage")
    (('closed', 5, 3, 'm'), None, None)
    """
    if value is None:
        return None
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    parts = text.split("|", 3)
    if len(parts) != 4 or parts[0] not in ("open", "closed"):
        return None
    try:
        return parts[0], int(parts[1]), int(parts[2]), parts[3]
    except ValueError:
        return None
