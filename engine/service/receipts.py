"""Delivery receipts (issue 35 §4): the format of ``sk:seen:{<player>}``
(:func:`engine.store.keys.receipt_key`), written by the gateway (gateway/receipts.py) when it
hands a player's socket the update that starts their clock, read by the timers
(workers/runtime.py ``clock_pause``): a clock also pauses while the update sat in the player's
stream with no gateway to deliver it.

A receipt is ``open|<at_ms>|<version>|<match>`` (a socket of the player was handed the update
of ``match`` at ``version``, at ``at_ms``, the gateway's wall clock) or
``closed|<at_ms>|<version>|<match>`` (the player's own socket closed on a live gateway: the
ordinary reconnect grace runs, not a pause).  A socket whose client acknowledges what it read
(the ``Seen`` message, docs/PROTOCOL.md) writes ``open+|<at_ms>|<version>|<acked>|<gateway>|<match>``: the highest version of
``match`` the client said it read on that socket, and the handing gateway process's instance,
whose liveness beat is ``sk:seen:gw:{<gateway>}`` (:func:`engine.store.keys.gateway_beat_key`,
its last beat's wall-clock milliseconds, written every :data:`BEAT_MS`).  The timers read an
update handed over, not acknowledged, by a gateway whose beat stopped as not delivered
(:func:`handed_at`); the client's word alone never pauses a clock.
"""

from __future__ import annotations

from typing import Any, NamedTuple

#: a receipt is forgotten this long after it was written
TTL_MS = 3_600_000
#: how often a gateway writes its liveness beat; a beat older than :data:`BEAT_STALE_MS` (or
#: none: the key expires after :data:`BEAT_TTL_MS`) is a gateway killed or restarted
BEAT_MS = 500
BEAT_STALE_MS = 2_000
BEAT_TTL_MS = 10_000


class Receipt(NamedTuple):
    """A decoded receipt; ``acked``/``gateway`` None: the socket never acknowledged (the
    gateway's word alone, as before acknowledgements)."""

    state: str
    at_ms: int
    version: int
    match: str
    acked: int | None = None
    gateway: str | None = None


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


def encode(state: str, at_ms: int, version: int, match: str, acked: int | None = None,
           gateway: str | None = None) -> str:
    """A receipt's value (:func:`decode` / :func:`read` read it back); ``acked`` with
    ``gateway``: the socket's client acknowledges (the match id goes last: it may hold ``|``).

    >>> decode(encode("open", 1000, 7, "m|1"))
    ('open', 1000, 7, 'm|1')
    >>> read(encode("open", 1000, 7, "m|1", 6, "g1"))
    Receipt(state='open', at_ms=1000, version=7, match='m|1', acked=6, gateway='g1')
    """
    if acked is not None and gateway:
        return f"{state}+|{int(at_ms)}|{int(version)}|{int(acked)}|{gateway}|{match}"
    return f"{state}|{int(at_ms)}|{int(version)}|{match}"


def decode(value: Any) -> tuple[str, int, int, str] | None:
    """``(state, at_ms, version, match)`` of a receipt's value, None when it is none.

    >>> decode(b"closed|5|3|m"), decode(None), decode("garbage")
    (('closed', 5, 3, 'm'), None, None)
    """
    r = read(value)
    return None if r is None else (r.state, r.at_ms, r.version, r.match)


def read(value: Any) -> Receipt | None:
    """The whole receipt (with the client's acknowledgement, when its socket sends them).

    >>> read(b"open+|5|3|2|gw|m").acked, read(b"open|5|3|m").acked, read(b"open+|5|3|x|gw|m")
    (2, None, None)
    """
    if value is None:
        return None
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    acks = text.startswith(("open+|", "closed+|"))
    parts = text.split("|", 5 if acks else 3)
    if len(parts) != (6 if acks else 4) or parts[0].rstrip("+") not in ("open", "closed"):
        return None
    try:
        if acks:
            return Receipt(parts[0][:-1], int(parts[1]), int(parts[2]), parts[5], int(parts[3]), parts[4])
        return Receipt(parts[0], int(parts[1]), int(parts[2]), parts[3])
    except ValueError:
        return None


def handed_at(receipt: Receipt | None, match: str, version: int, beat_ms: int | None, now_ms: int,
              stale_ms: int = BEAT_STALE_MS) -> tuple[bool, int | None]:
    """``(through_gateway, at_ms)``: whether a gateway's socket of the player is open, and when
    it handed over the update of ``match`` at ``version`` or later (None: not yet, or handed
    over but never read: not delivered).  ``beat_ms``: the last liveness beat of the gateway
    the receipt names (None: none, it expired).

    The client's acknowledgement counts only against a gateway that died: an update handed
    over and not acknowledged (``acked`` below ``version``) is undelivered when the gateway
    that handed it no longer beats (killed, or restarted: a new instance); while it beats, the
    handing-over time counts, acknowledged or not (a client cannot pause its clock by keeping
    quiet).  A socket that never acknowledged: the handing-over time, as before.

    >>> r = Receipt("open", 100, 7, "m", acked=6, gateway="g")
    >>> handed_at(r, "m", 7, beat_ms=4_900, now_ms=5_000), handed_at(r, "m", 7, beat_ms=None, now_ms=5_000)
    ((True, 100), (True, None))
    """
    if receipt is None or receipt.state != "open":
        return False, None
    if receipt.match != match or receipt.version < version:
        return True, None
    if receipt.acked is not None and receipt.acked < version:
        if beat_ms is None or now_ms - beat_ms > stale_ms:
            return True, None
    return True, receipt.at_ms
