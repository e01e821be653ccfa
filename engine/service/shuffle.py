"""Where randomness enters a match: the shufflers behind a deal (R-1.5).

The rules and the match domain never draw a random number: the service shuffles
here and hands the deck to ``decide`` through its context, and the deal records it.
"""

from __future__ import annotations

import random
import secrets
from typing import Protocol

from engine.rules.cards import Card, full_deck


class RandomSource(Protocol):
    def shuffle(self, x: list[Card]) -> None: ...


def secure_random() -> RandomSource:
    """Cryptographically strong shuffler for production deals (R-1.5)."""
    return secrets.SystemRandom()


def seeded_random(seed: int | str) -> RandomSource:
    """Reproducible shuffler for tests and simulations (R-1.5)."""
    return random.Random(seed)


def shuffled_deck(rng: RandomSource) -> list[Card]:
    deck = full_deck()
    rng.shuffle(deck)
    return deck
