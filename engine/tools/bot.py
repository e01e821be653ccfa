"""Bots that choose plays for simulations and for the terminal opponent.

A bot reads a :class:`engine.match.state.MatchState` and returns a
:class:`engine.rules.moves.Play` (cards + reading) or None (pass).  Policies:

* ``trustee`` -- exactly what trusteeship plays (R-13.3,
  :func:`engine.rules.moves.trustee_choice`): the lowest single when leading, the
  weakest play that beats otherwise.  Deterministic.
* ``random`` -- a uniformly random legal play (any reading), passing with
  some probability when following.  Bomb-happy: a stress test.
* ``greedy`` (default for simulations) -- leads a random non-bomb combination,
  preferring long ones (sheds cards like a person); follows with the weakest
  non-bomb that beats, uses a bomb only with probability ``bomb_p`` (more often
  when the opponent is low on cards).

The bot never reads a clock; randomness comes from the ``rng`` it is given.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from engine.rules.combo import BOMB_KINDS
from engine.rules.moves import Play, legal_plays, pick_cards, smallest_beating, trustee_choice
from engine.match.state import MatchState

POLICIES = ("trustee", "greedy", "random")


class Bot:
    def __init__(self, policy: str = "greedy", rng: random.Random | None = None, bomb_p: float = 0.35,
                 pass_p: float = 0.1):
        if policy not in POLICIES:
            raise ValueError(f"unknown bot policy {policy!r} (one of {', '.join(POLICIES)})")
        self.policy = policy
        self.rng = rng or random.Random()
        self.bomb_p = bomb_p
        self.pass_p = pass_p

    def choose(self, state: MatchState, player: str) -> Play | None:
        i = state.seat_of(player)
        if i is None:
            raise ValueError(f"{player!r} is not seated")
        hand = state.seat(i).hand
        prev = state.to_beat.combo if state.to_beat is not None else None
        heavenly = state.heavenly
        twos = state.chain_bomb_twos  # the room's setting
        if self.policy == "trustee":
            return trustee_choice(hand, prev, heavenly, chain_bomb_twos=twos)
        opp = state.seats[1 - i]
        opp_left = len(opp.hand) if opp is not None else 27
        if self.policy == "random":
            return self._random(hand, prev, heavenly, twos)
        return self._greedy(hand, prev, heavenly, opp_left, twos)

    def _random(self, hand: Sequence[int], prev, heavenly, twos: bool = True) -> Play | None:
        plays = legal_plays(hand, prev, heavenly, chain_bomb_twos=twos)
        if not plays:
            return None
        if prev is not None and self.rng.random() < self.pass_p:
            return None
        c = self.rng.choice(plays)
        return Play(c, pick_cards(hand, c.counts))

    def _greedy(self, hand: Sequence[int], prev, heavenly, opp_left: int, twos: bool = True) -> Play | None:
        if prev is None:
            plays = legal_plays(hand, None, heavenly, chain_bomb_twos=twos)
            whole = [c for c in plays if c.size == len(hand)]
            if whole:  # going out in one play
                c = whole[0]
                return Play(c, pick_cards(hand, c.counts))
            normal = [c for c in plays if c.kind not in BOMB_KINDS and c.jokers == 0]
            if not normal:
                normal = [c for c in plays if c.kind not in BOMB_KINDS] or list(plays)
            # prefer shedding more cards: weight by size, low ranks first
            weights = [c.size * c.size / (1 + c.top) for c in normal]
            c = self.rng.choices(normal, weights=weights, k=1)[0]
            return Play(c, pick_cards(hand, c.counts))
        best = smallest_beating(hand, prev, heavenly, chain_bomb_twos=twos)
        if best is None:
            return None
        if best.combo.kind in BOMB_KINDS and prev.kind not in BOMB_KINDS:
            p = self.bomb_p if opp_left > 6 else min(1.0, self.bomb_p * 2.5)
            if self.rng.random() >= p:
                return None
        elif best.combo.kind in BOMB_KINDS:
            # answering a bomb with a bomb: sometimes let it go
            if self.rng.random() >= self.bomb_p * 1.5:
                return None
        return best


def hint(state: MatchState, player: str) -> Play | None:
    """The smallest legal play (what trusteeship would play), or None (pass)."""
    return Bot("trustee").choose(state, player)


__all__ = ["Bot", "POLICIES", "hint"]
