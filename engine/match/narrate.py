"""A match play by play: one readable line per event, cards in notation.

Used by ``shuangkou run-script``/``replay`` and the dispute timeline
(:mod:`projections.timeline`).  Pure: it reads events only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from engine.match.events import (
    CardsPlayed,
    EventBase,
    HandDealt,
    MatchAbandoned,
    MatchCreated,
    MatchFinished,
    Passed,
    PlayerDisconnected,
    PlayerEscaped,
    PlayerReady,
    PlayerReconnected,
    ClockExtended,
    PlayerRemoved,
    PlayerSeated,
    TrusteeshipEnded,
    TrusteeshipStarted,
    TurnTimedOut,
)
from engine.rules.cards import format_ranks_lenient


def narrate(events: Sequence[EventBase]) -> list[str]:
    """One readable line per event, cards in notation (ids that are no card as ``#id``)."""
    seats: dict[int, str] = {}

    def name(i: int) -> str:
        return seats.get(i, f"seat {i}")

    def by(e: Any) -> str:
        return "" if e.by == "player" else f" [{e.by}]"

    def seated(e: PlayerSeated) -> str:
        seats[e.seat] = e.player
        return f"{e.player} sits in seat {e.seat} (balance {e.balance}, level {e.level}, base {e.base})"

    def dealt(e: HandDealt) -> str:
        hands = " | ".join(f"{name(i)}: {format_ranks_lenient(h)}" for i, h in enumerate(e.hands))
        lead = "" if e.lead_card is None else f", lead card {format_ranks_lenient([e.lead_card])}"
        return f"deal -- {hands} -- {name(e.first)} leads{lead}"

    def finished(e: MatchFinished) -> str:
        left = ", ".join(f"{p} {n}" for p, n in e.cards_left.items())
        return f"{e.winner} wins ({e.reason}); kou {e.kou}; cards left: {left}"

    line_of: dict[type, Callable[[Any], str]] = {
        MatchCreated: lambda e: f"match {e.match_id} created ({e.config.get('mode')} room {e.config.get('name')!r})",
        PlayerSeated: seated,
        PlayerReady: lambda e: f"{e.player} is ready",
        PlayerRemoved: lambda e: f"{e.player} is removed ({e.reason})",
        HandDealt: dealt,
        CardsPlayed: lambda e: (f"{e.player} plays {format_ranks_lenient(e.cards)} -- "
                                f"{e.reading.combo().describe()}{by(e)}"),
        Passed: lambda e: f"{e.player} passes{by(e)}",
        TurnTimedOut: lambda e: f"{e.player} timed out ({e.count}): {e.notice_zh}",
        TrusteeshipStarted: lambda e: f"{e.player} is now in trusteeship ({e.reason})",
        TrusteeshipEnded: lambda e: f"{e.player} takes control back ({e.reason})",
        PlayerDisconnected: lambda e: f"{e.player} disconnected",
        PlayerReconnected: lambda e: f"{e.player} reconnected",
        PlayerEscaped: lambda e: f"{e.player} escaped (policy {e.policy})",
        ClockExtended: lambda e: f"the {e.kind} clock paused {e.by_ms / 1000:.1f}s ({e.reason})",
        MatchFinished: finished,
        MatchAbandoned: lambda e: f"the match is abandoned before the deal ({e.reason}): nothing to settle",
    }
    return [f"#{e.seq:<3} " + line_of.get(type(e), lambda e: type(e).__name__)(e) for e in events]
