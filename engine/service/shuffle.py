"""Where randomness enters a match: the shufflers behind a deal (R-1.5).

The rules and the match domain never draw a random number: the service shuffles
here and hands the deck to ``decide`` through its context, and the deal records it.
"""

from __future__ import annotations

import random
import secrets
from collections.abc import Callable
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


#: draws the 32-byte server seed of a new match (docs/FAIRNESS.md)
SeedSource = Callable[[], bytes]
SERVER_SEED_BYTES = 32


def secure_server_seed() -> bytes:
    """A fresh server seed from the operating system's CSPRNG (``secrets``)."""
    return secrets.token_bytes(SERVER_SEED_BYTES)


def seeded_server_seeds(seed: int | str) -> SeedSource:
    """Reproducible server seeds for tests and simulations (never for real matches:
    revealed seeds of a non-cryptographic generator predict the next ones).

    >>> a, b = seeded_server_seeds(1), seeded_server_seeds(1)
    >>> a() == b() and len(a()) == 32
    True
    """
    rng = random.Random(f"server-seeds:{seed}")
    return lambda: rng.randbytes(SERVER_SEED_BYTES)


def shuffled_deck(rng: RandomSource) -> list[Card]:
    deck = full_deck()
    rng.shuffle(deck)
    return deck
