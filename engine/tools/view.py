"""What a bot may know: one player's view of a match, as a small frozen value.

A :class:`PlayerView` holds exactly what a person at the table sees (issue 27): the
player's own hand, every card played so far,
the play in front, the opponent's card *count*, the bombs each side has played (public,
they lie face up), and the room config.  The opponent's cards and the 54 set-aside
cards (R-1.3) are never in it, so a bot built on it cannot peek.

:func:`view_of` reads a view off a :class:`MatchState` (simulations, the terminal
opponent); :class:`ViewFolder` builds the same view from the redacted events a player's
socket receives (the gateway's bots, which never read a match stream).

>>> from engine.match.state import MatchState
>>> view_of(MatchState(match_id="m"), "a") is None
True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.config import RoomConfig
from engine.match.events import Reading
from engine.match.state import MatchState
from engine.rules.cards import NUM_CARDS
from engine.rules.combo import Combo, HeavenlyPosition

__all__ = ["PlayerView", "ViewFolder", "unseen_cards", "view_of"]


@dataclass(frozen=True, slots=True)
class PlayerView:
    """One player's view of a match at their turn (or any time after the deal).

    ``played`` is every card on the table in order.  ``to_beat`` is the play in front (None: the player leads, R-6.1).
    ``my_bombs`` / ``opponent_bombs`` are the readings of the bombs each side played, in
    order (the score state, R-8.3).  ``config`` is the room's (None: the defaults apply).
    """

    hand: tuple[int, ...]
    opponent_cards: int
    to_beat: Combo | None = None
    played: tuple[int, ...] = ()
    my_bombs: tuple[Combo, ...] = ()
    opponent_bombs: tuple[Combo, ...] = ()
    config: RoomConfig | None = None

    @property
    def heavenly(self) -> HeavenlyPosition:
        return self.config.heavenly_bomb if self.config is not None else "top"

    @property
    def chain_bomb_twos(self) -> bool:
        """The room's R-2.2 setting (chain bombs up to 2)."""
        return self.config.chain_bomb_twos if self.config is not None else True

    @property
    def leading(self) -> bool:
        return self.to_beat is None


def unseen_cards(view: PlayerView) -> tuple[int, ...]:
    """The physical cards the player cannot see: the opponent's hand and the set-aside
    cards together (108 minus the own hand minus the table), lowest id first.

    >>> len(unseen_cards(PlayerView(hand=tuple(range(27)), opponent_cards=27)))
    81
    """
    seen = set(view.hand)
    seen.update(view.played)
    return tuple(c for c in range(NUM_CARDS) if c not in seen)


def view_of(state: MatchState, player: str) -> PlayerView | None:
    """The view of ``player`` (None when they are not seated or the cards are not dealt)."""
    me = state.seat_of(player)
    if me is None or state.phase not in ("playing", "finished"):
        return None
    mine = state.seat(me)
    opp = state.seats[1 - me]
    if opp is None:
        return None
    prev = state.to_beat
    to_beat = prev.combo if prev is not None and prev.seat != me else None
    return PlayerView(hand=tuple(sorted(mine.hand)), opponent_cards=len(opp.hand), to_beat=to_beat,
                      played=state.table,
                      my_bombs=mine.bombs, opponent_bombs=opp.bombs, config=state.config)


class ViewFolder:
    """Builds one player's :class:`PlayerView` from the events that player may see, in
    order (:func:`projections.views.redact_event` dicts, as the player's update stream
    carries them): HandDealt gives the own hand, the hand sizes and the leader; CardsPlayed
    the table, the play in front and the bombs; Passed ends the trick (R-6.2).  Events at
    or below the last sequence number folded are skipped (a redelivery changes nothing).

    ``config`` is the room's (the gateway knows the room it seated the player in).
    """

    def __init__(self, player: str, config: RoomConfig | None = None):
        self.player = player
        self.config = config
        self.seat: int | None = None
        self.hand: list[int] = []
        self.opponent_cards = 0
        self.played: list[int] = []
        self.bombs: tuple[list[Combo], list[Combo]] = ([], [])  # mine, the opponent's
        self.to_beat: Combo | None = None
        self.turn_mine = False
        self.finished = False
        self.seq = -1

    def apply(self, event: Mapping[str, Any]) -> None:
        """Fold one event (unknown types and other players' private data are ignored)."""
        seq = event.get("seq")
        if isinstance(seq, int):
            if seq <= self.seq:
                return
            self.seq = seq
        kind = event.get("type")
        if kind == "HandDealt":
            hands = event.get("hands") or []
            mine = [i for i, h in enumerate(hands) if h is not None]
            if len(mine) != 1:
                return
            self.seat = mine[0]
            self.hand = list(hands[self.seat])
            sizes = event.get("hand_sizes") or [len(self.hand), len(self.hand)]
            self.opponent_cards = int(sizes[1 - self.seat])
            self.played, self.bombs, self.to_beat = [], ([], []), None
            self.turn_mine = event.get("first") == self.seat
            self.finished = False
        elif kind == "CardsPlayed" and self.seat is not None:
            cards = [int(c) for c in event.get("cards") or ()]
            combo = Reading.model_validate(event.get("reading") or {}).combo()
            own = event.get("player") == self.player
            if own:
                held = set(cards)
                self.hand = [c for c in self.hand if c not in held]
            else:
                self.opponent_cards -= len(cards)
            self.played.extend(cards)
            if combo.is_bomb:
                self.bombs[0 if own else 1].append(combo)
            self.to_beat = combo
            self.turn_mine = not own
        elif kind == "Passed" and self.seat is not None:
            self.to_beat = None
            self.turn_mine = event.get("player") != self.player
        elif kind == "MatchFinished":
            self.finished = True
            self.turn_mine = False

    @property
    def my_turn(self) -> bool:
        """Dealt, not finished, and this player is to play."""
        return self.seat is not None and not self.finished and self.turn_mine

    def view(self) -> PlayerView:
        return PlayerView(hand=tuple(sorted(self.hand)), opponent_cards=self.opponent_cards,
                          to_beat=self.to_beat if self.turn_mine else None,
                          played=tuple(self.played), my_bombs=tuple(self.bombs[0]),
                          opponent_bombs=tuple(self.bombs[1]), config=self.config)
