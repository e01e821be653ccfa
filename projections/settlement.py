"""Settlement of a finished match from its events (R-7, R-8, R-11.2, R-12). Pure.

:func:`settle` folds a match's events into a :class:`Settlement`:

* normal end (a hand emptied, R-6.3; also an escape under the ``trustee``
  policy, R-12.1): winner W, loser L,
  ``W gets X·a·b + X·(c_W − c_L)``, L the negation (R-8.6), where
  X = base score of the *lower* level of the two seated players (R-8.2),
  a = the kou multiplier (R-7.2), b = doubling of the *winner's* effective
  xiang only (R-8.4), c = contribution of each player's effective xiang (R-8.5);
* escape forfeit, points (R-12.2): the escaper pays ``m·X + X·c_O + D``
  (m = ``escape_penalty_multiple``, 12 by default; D = X·a_single·b_O when
  b_O > 1, else 0; the escaper's own contribution counts 0), the opponent
  receives that × ``escape_transfer_ratio``;
* escape forfeit, wealth (R-12.3): before any card was played by anyone the
  escaper pays ``m·X``; after, ``m·X + X·c_O + D`` with D = X·b_O when
  b_O > 1; the opponent receives ``escape_transfer_ratio`` (0.7) of it,
  the rest is burned;
* wealth loss cap (R-11.2, ``cap_loss_at_balance``): the paying player pays
  at most the balance they were seated with; the receiver gets what was
  actually paid (for escapes: the transfer ratio of what was actually paid).

All arithmetic is on integers.  The transfer ratio is read as an exact
decimal fraction (0.7 = 7/10) and the receiver's share is rounded *down*;
the remainder is burned (so coins are never created).

Conservation: ``sum(scores) + burned == 0`` always; ``burned == 0`` for every
normal end and for escapes with ratio 1.0 (points default), so points
settlements are zero-sum.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from engine.rules.combo import Combo
from engine.config import RoomConfig
from engine.match.events import (
    CardsPlayed,
    EventBase,
    MatchCreated,
    MatchFinished,
    PlayerEscaped,
    PlayerRemoved,
    PlayerSeated,
)
from projections.scoring import (
    XiangResult,
    contribution_of,
    doubling_of,
    effective_xiang,
    standing_contribution,
)

__all__ = ["Settlement", "SettlementError", "settle", "standing_contribution", "transfer_share"]

KouName = Literal["flat", "single", "double", "escape"]


class SettlementError(ValueError):
    """The events cannot be settled (no config, a player never seated…)."""


class Settlement(BaseModel):
    """The result of one finished match: signed scores per player (R-8, R-12)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    match_id: str
    mode: Literal["points", "wealth"]
    winner: str
    loser: str
    kou: KouName
    cards_left: dict[str, int]
    scores: dict[str, int]
    burned: int = Field(0, ge=0, description="coins/points that go to no one (escape share not transferred)")
    breakdown: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        """The public result: ``winner kou cards_left scores breakdown burned`` (docs/ARCHITECTURE.md, run-script)."""
        return {
            "winner": self.winner,
            "kou": self.kou,
            "cards_left": dict(self.cards_left),
            "scores": dict(self.scores),
            "breakdown": json.loads(json.dumps(self.breakdown)),
            "burned": self.burned,
        }


def transfer_share(amount: int, ratio: float) -> int:
    """The receiver's share of ``amount`` at ``ratio``, rounded down (R-12.3).

    The ratio is read as the exact decimal it is written as (0.7 → 7/10).

    >>> transfer_share(20000, 0.7), transfer_share(15, 0.7), transfer_share(15, 1.0)
    (14000, 10, 15)
    """
    frac = Fraction(str(ratio)).limit_denominator(10**9)
    return amount * frac.numerator // frac.denominator


class _Seat:
    __slots__ = ("player", "balance", "level", "base", "seat")

    def __init__(self, e: PlayerSeated):
        self.player = e.player
        self.balance = e.balance
        self.level = e.level
        self.base = e.base
        self.seat = e.seat


def _xiang_json(r: XiangResult, config: RoomConfig) -> dict[str, Any]:
    return {"xiang": r.xiang, "source": r.source,
            "c": contribution_of(r.xiang, config), "b": doubling_of(r.xiang, config)}


def settle(events: Sequence[EventBase]) -> Settlement | None:
    """Settle a match from its events; None when it has not finished.

    Raises :class:`SettlementError` when a finished match's events lack what
    settlement needs (the config, a seated winner or loser).
    """
    config: RoomConfig | None = None
    match_id = ""
    seats: dict[str, _Seat] = {}
    bombs: dict[str, list[Combo]] = {}
    any_card_played = False
    escape: PlayerEscaped | None = None
    escape_after_cards = False
    trustee_escapes: list[str] = []
    finish: MatchFinished | None = None

    for e in events:
        if isinstance(e, MatchCreated):
            config = RoomConfig.from_match_record(e.config)
            match_id = e.match_id
        elif isinstance(e, PlayerSeated):
            seats[e.player] = _Seat(e)
        elif isinstance(e, PlayerRemoved):
            seats.pop(e.player, None)
        elif isinstance(e, CardsPlayed):
            any_card_played = True
            c = e.reading.combo()
            if c.is_bomb:
                bombs.setdefault(e.player, []).append(c)
        elif isinstance(e, PlayerEscaped):
            if e.policy == "forfeit" and escape is None:
                escape = e
                escape_after_cards = any_card_played
            elif e.policy == "trustee":
                trustee_escapes.append(e.player)
        elif isinstance(e, MatchFinished):
            finish = e
            break

    if finish is None:
        return None
    if config is None:
        raise SettlementError(f"match {finish.match_id}: no MatchCreated event (the config is unknown)")
    match_id = match_id or finish.match_id
    w, l = finish.winner, finish.loser
    for p in (w, l):
        if p not in seats:
            raise SettlementError(f"match {match_id}: {p!r} finished the match but is not seated")

    # X is the base of the lower level of the two seated players.
    lower = min((seats[w], seats[l]), key=lambda s: (s.level, s.base))
    X = lower.base
    xr = {p: effective_xiang(bombs.get(p, ()), config) for p in (w, l)}
    c_of = {p: contribution_of(xr[p].xiang, config) for p in (w, l)}
    breakdown: dict[str, Any] = {
        "mode": config.mode,
        "room": config.name,
        "X": X,
        "X_from": {
            "rule": "R-8.2: base of the lower level of the two seated players",
            "levels": {p: {"level": seats[p].level, "base": seats[p].base, "balance": seats[p].balance}
                       for p in (w, l)},
            "lower": lower.player if seats[w].level != seats[l].level else f"both at level {lower.level}",
        },
        "xiang": {p: _xiang_json(xr[p], config) for p in (w, l)},
        "c": dict(c_of),
    }

    if finish.reason == "escape":
        escaper = escape.player if escape is not None else l
        opponent = w if escaper == l else l
        owed, esc = _escape_amount(config, X, xr[opponent], escape_after_cards if escape else any_card_played)
        esc["escaper"] = escaper
        esc["opponent"] = opponent
        paid, cap = _cap(config, seats[escaper], owed)
        received = transfer_share(paid, config.escape_transfer_ratio)
        burned = paid - received
        esc.update({"owed": owed, "paid": paid, "transfer_ratio": config.escape_transfer_ratio,
                    "received": received,
                    "received_formula": f"floor({paid} × {config.escape_transfer_ratio}) = {received}"})
        breakdown["escape"] = esc
        breakdown["c"] = {opponent: c_of[opponent], escaper: 0}
        breakdown["c_note"] = "R-12.2/R-12.3: the escaper's own contribution counts 0"
        breakdown["cap"] = cap
        breakdown["burned"] = burned
        scores = {escaper: -paid, opponent: received}
        return Settlement(match_id=match_id, mode=config.mode, winner=opponent, loser=escaper, kou="escape",
                          cards_left=dict(finish.cards_left), scores=scores, burned=burned, breakdown=breakdown)

    # Normal end.
    kou = finish.kou if finish.kou != "escape" else config.kou.kou_of(finish.cards_left.get(l, 0))
    a = config.kou.multiplier(kou)
    b = doubling_of(xr[w].xiang, config)
    win_term = X * a * b
    contrib_w = X * (c_of[w] - c_of[l])
    net_w = win_term + contrib_w
    breakdown.update({
        "kou": kou,
        "a": a,
        "a_from": f"R-7: {l} holds {_cards_count(finish.cards_left.get(l))} → {kou}",
        "b": b,
        "b_from": f"R-8.4: winner {w}'s effective xiang {xr[w].xiang}" if xr[w].xiang else "R-8.4: winner played no bomb",
        "win_term": win_term,
        "win_formula": f"X·a·b = {X}·{a}·{b} = {win_term}",
        "contribution": {w: contrib_w, l: -contrib_w},
        "contribution_formula": f"X·(c_{w} − c_{l}) = {X}·({c_of[w]} − {c_of[l]}) = {contrib_w}",
    })
    if trustee_escapes:
        breakdown["escaped_to_trustee"] = trustee_escapes  # trustee: normal settlement
    scores = {w: net_w, l: -net_w}
    if net_w != 0:
        payer, receiver = (l, w) if net_w > 0 else (w, l)
        paid, cap = _cap(config, seats[payer], abs(net_w))
        scores = {receiver: paid, payer: -paid}
    else:
        cap = None
    breakdown["cap"] = cap
    breakdown["burned"] = 0
    return Settlement(match_id=match_id, mode=config.mode, winner=w, loser=l, kou=kou,
                      cards_left=dict(finish.cards_left), scores=scores, burned=0, breakdown=breakdown)


def _cards_count(n: int | None) -> str:
    """``"1 card"``, ``"5 cards"`` (``"? cards"`` when unknown).

    >>> _cards_count(1), _cards_count(0), _cards_count(None)
    ('1 card', '0 cards', '? cards')
    """
    if n is None:
        return "? cards"
    return f"{n} card" if n == 1 else f"{n} cards"


def _escape_amount(config: RoomConfig, X: int, xo: XiangResult, after_cards: bool) -> tuple[int, dict[str, Any]]:
    m = config.escape_penalty_multiple
    penalty = m * X
    c_o = contribution_of(xo.xiang, config)
    b_o = doubling_of(xo.xiang, config)
    if config.mode == "wealth" and not after_cards:
        return penalty, {
            "rule": "R-12.3: wealth, escaped before any card was played",
            "penalty": penalty, "penalty_formula": f"{m}·X = {m}·{X} = {penalty}",
            "contribution": 0, "doubling": 0, "formula": f"{penalty}",
        }
    contribution = X * c_o
    if config.mode == "points":
        a_single = config.kou.single
        doubling = X * a_single * b_o if b_o > 1 else 0
        d_formula = f"X·a_single·b_O = {X}·{a_single}·{b_o}"
        rule = "R-12.2: points forfeit"
    else:
        doubling = X * b_o if b_o > 1 else 0
        d_formula = f"X·b_O = {X}·{b_o}"
        rule = "R-12.3: wealth, escaped after cards were played"
    owed = penalty + contribution + doubling
    return owed, {
        "rule": rule,
        "penalty": penalty, "penalty_formula": f"{m}·X = {m}·{X} = {penalty}",
        "contribution": contribution, "contribution_formula": f"X·c_O = {X}·{c_o} = {contribution}",
        "doubling": doubling,
        "doubling_formula": f"{d_formula} = {doubling}" if b_o > 1 else "D = 0 (b_O = 1: no doubling)",
        "escaper_contribution": 0,
        "formula": f"{penalty} + {contribution} + {doubling} = {owed}",
    }


def _cap(config: RoomConfig, payer: _Seat, owed: int) -> tuple[int, dict[str, Any] | None]:
    """R-11.2: with ``cap_loss_at_balance`` the payer pays at most the balance seated with."""
    if not config.cap_loss_at_balance:
        return owed, None
    limit = max(payer.balance, 0)
    paid = min(owed, limit)
    return paid, {"rule": "R-11.2", "payer": payer.player, "balance": payer.balance,
                  "owed": owed, "paid": paid, "applied": paid < owed}
