"""The ledger checked against the log (issue 35 §5): ``replay --all`` and ``reconcile``.

The log is the truth; the ledger is derived from it.  So every settlement the ledger
holds, and every settlement line in a player's journal, must stand for a match the log
*finishes*, with the settlement the log gives:

* a settlement for a match the log does not hold, or does not finish (a write kept by the
  ledger's master while the match's writes were lost with another one);
* a settlement that differs from the one the log's events give (``compare``);
* a journal line ``match:<id>`` with no settlement behind it, or whose amount is not the
  player's score in that settlement.

Archived matches (``shuangkou archive``) left the store on purpose: their settlement is
audited from the archive (``replay --all --archive DIR``), not here.

>>> from engine.store.memory import InMemoryEventStore
>>> from projections.ledger import InMemoryLedger
>>> from projections.settlement import Settlement
>>> ledger = InMemoryLedger()
>>> _ = ledger.apply_settlement("ghost", Settlement(match_id="ghost", mode="points", winner="a",
...     loser="b", kou="flat", cards_left={"a": 0, "b": 3}, scores={"a": 1, "b": -1}, breakdown={}))
>>> [(p.match_id, p.problem) for p in audit_ledger(InMemoryEventStore(), ledger)]
[('ghost', 'the ledger holds a settlement of a match the log does not hold')]
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from engine.match.events import MatchFinished
from engine.store.base import EventStore
from projections.ledger import Ledger
from projections.settlement import Settlement, SettlementError, settle


@dataclass(frozen=True)
class LedgerMismatch:
    """One disagreement between the ledger and the log, naming its match (and player)."""

    match_id: str
    problem: str
    player: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"match_id": self.match_id, "player": self.player, "problem": self.problem}


def _log_settlement(store: EventStore, match_id: str) -> tuple[str, Settlement | None]:
    """``(state, settlement)`` of a match from its log: ``missing``, ``unfinished``,
    ``unsettleable`` or ``finished`` (with the settlement the events give)."""
    version = store.version(match_id)
    if version == 0:
        return "missing", None
    tail = store.load(match_id, after=version - 1)
    if not tail or not isinstance(tail[-1], MatchFinished):
        return "unfinished", None
    try:
        s = settle(store.load(match_id))
    except SettlementError:
        return "unsettleable", None
    return ("finished", s) if s is not None else ("unfinished", None)


def _differences(stored: Settlement, derived: Settlement) -> list[str]:
    a, b = stored.model_dump(mode="json"), derived.model_dump(mode="json")
    return [f"{k}: ledger {a.get(k)!r}, log {b.get(k)!r}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def audit_ledger(store: EventStore, ledger: Ledger, compare: bool = True,
                 players: Iterable[str] | None = None) -> list[LedgerMismatch]:
    """Every :class:`LedgerMismatch` between ``ledger`` and the log in ``store``.

    ``compare``: also recompute each settled match's settlement from its events (``replay``
    compares them itself and passes False).  ``players``: the journals to read (default:
    every journal the ledger holds, :meth:`Ledger.journal_players`)."""
    out: list[LedgerMismatch] = []
    settled: dict[str, Settlement | None] = {}
    for mid in sorted(ledger.settled_matches()):
        stored = ledger.settlement(mid)
        settled[mid] = stored
        state, derived = _log_settlement(store, mid)
        if state == "missing":
            out.append(LedgerMismatch(mid, "the ledger holds a settlement of a match the log does not hold"))
        elif state == "unfinished":
            out.append(LedgerMismatch(mid, "the ledger holds a settlement of a match the log does not finish"))
        elif state == "unsettleable":
            out.append(LedgerMismatch(mid, "the ledger holds a settlement of a match whose log cannot be settled"))
        elif compare and stored is not None and derived is not None:
            diffs = _differences(stored, derived)
            if diffs:
                out.append(LedgerMismatch(mid, "the ledger's settlement differs from the log's: " + "; ".join(diffs)))
    for player in sorted(ledger.journal_players() if players is None else players):
        for entry in ledger.entries(player):
            if entry.kind != "settlement":
                continue
            mid = entry.ref
            if mid not in settled:
                if ledger.archived(mid) is not None:
                    continue  # audited from its archive
                settled[mid] = ledger.settlement(mid)
            stored = settled[mid]
            if stored is None:
                out.append(LedgerMismatch(mid, f"{player}'s journal holds a settlement line of {entry.amount} "
                                               "for a match the ledger has not settled", player))
                if mid not in {m.match_id for m in out}:
                    state, _ = _log_settlement(store, mid)
                    if state != "finished":
                        out.append(LedgerMismatch(mid, f"{player}'s journal moves coins for a match the log "
                                                       f"does not finish ({state})", player))
            elif stored.scores.get(player) != entry.amount:
                out.append(LedgerMismatch(mid, f"{player}'s journal line of {entry.amount} differs from the "
                                               f"settlement's {stored.scores.get(player)}", player))
    return out
