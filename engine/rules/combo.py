"""The value type of a reading of played cards, and the comparison of R-5.

A :class:`Combo` is one *reading* of a set of cards: its kind, top rank, size,
and for bombs the xiang.  It is independent of physical card ids: ``counts``
is the 15-entry rank-count vector of the cards actually played (jokers counted
at SJ/BJ), ``jokers_as`` the natural rank each wild joker stands for.

Comparison (R-5) lives here so every module compares the same way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from engine.rules.cards import RANK_LABELS

Kind = Literal[
    "single", "pair", "pair_run", "triple", "triple_run", "straight",
    "bomb", "chain_bomb", "three_jokers", "four_jokers",
]
BOMB_KINDS = frozenset({"bomb", "chain_bomb", "three_jokers", "four_jokers"})
HeavenlyPosition = Literal["top", "bottom"]


@dataclass(frozen=True, slots=True)
class Combo:
    """One reading of a play.

    ``rank`` is the label of the top rank (``"A"``, ``"10"``, ``"BJ"``);
    ``top`` the same as an index 0..14.  ``xiang`` is set for bombs only;
    ``chain`` is k for chain bombs (else None), ``m`` the fewest cards of
    the chain's bombs, ``regular`` whether all k bombs have m cards.
    """

    kind: Kind
    top: int
    size: int
    counts: tuple[int, ...]
    xiang: int | None = None
    chain: int | None = None
    m: int | None = None
    regular: bool | None = None
    jokers_as: tuple[int, ...] = ()
    # chain bombs: the size of each bomb, low rank first
    bomb_sizes: tuple[int, ...] = field(default=())

    @property
    def rank(self) -> str:
        return RANK_LABELS[self.top]

    @property
    def is_bomb(self) -> bool:
        return self.kind in BOMB_KINDS

    @property
    def jokers(self) -> int:
        return self.counts[13] + self.counts[14]

    def to_json(self) -> dict[str, object]:
        """The reading as plain data (the ``classify`` CLI prints this)."""
        return {
            "kind": self.kind,
            "rank": self.rank,
            "size": self.size,
            "xiang": self.xiang,
            "chain": self.chain,
            "regular": self.regular,
            "m": self.m,
            "bomb_sizes": list(self.bomb_sizes) if self.bomb_sizes else None,
            "jokers_as": [RANK_LABELS[r] for r in self.jokers_as],
        }

    def describe(self) -> str:
        """A short human reading: ``straight to 9 (5 cards)``, ``6-xiang bomb of 4``."""
        k = self.kind
        if k == "bomb":
            return f"{self.xiang}-xiang bomb of {self.rank}"
        if k == "chain_bomb":
            reg = "regular" if self.regular else "irregular"
            return f"{self.xiang}-xiang {reg} {self.chain}-chain bomb to {self.rank}"
        if k == "three_jokers":
            return "three-joker bomb (6-xiang)"
        if k == "four_jokers":
            return "heavenly bomb (7-xiang)"
        if k in ("straight", "pair_run", "triple_run"):
            return f"{k.replace('_', ' ')} to {self.rank} ({self.size} cards)"
        return f"{k} of {self.rank}"


def bomb_key(c: Combo, heavenly: HeavenlyPosition = "top") -> tuple[int, int, int, int]:
    """Total preorder key of a bomb (R-5.3, R-5.4): bigger key = stronger.

    (xiang, special, -size, top): the three-joker bomb is the smallest
    6-xiang, the heavenly bomb the largest (or, configured, smallest) 7-xiang.
    Irregular chains with the same k and m (R-5.5) are handled in :func:`beats`.
    """
    assert c.xiang is not None
    if c.kind == "three_jokers":
        return (6, -1, 0, 0)
    if c.kind == "four_jokers":
        return (7, 1 if heavenly == "top" else -1, 0, 0)
    return (c.xiang, 0, -c.size, c.top)


def beats(a: Combo, b: Combo, heavenly: HeavenlyPosition = "top") -> bool:
    """Does play ``a`` beat the previous play ``b``?  (R-5)

    >>> from engine.rules.classify import classify
    >>> beats(classify("4 4 4 4"), classify("2 2 2"))      # R-5.2
    True
    >>> beats(classify("7 7 7 7 8 8 8 8 8 9 9 9 9 9"), classify("4 4 4 4 5 5 5 5 5 6 6 6 6 6"))  # R-5.5
    False
    >>> beats(classify("8 8 8 8 8 8 9 9 9 9 10 10 10 10 SJ SJ"),
    ...       classify("6 6 6 6 7 7 7 7 8 8 8 9 9 9 9 SJ"))   # R-5.5: other shapes by R-5.3
    True
    """
    if a.is_bomb != b.is_bomb:
        return a.is_bomb
    if not a.is_bomb:
        # same kind, same length, higher top rank; strict
        return a.kind == b.kind and a.size == b.size and a.top > b.top
    # two irregular chains with the same k and m are equal, whatever
    # their ranks and card counts; every other pair of bombs goes by
    if (a.kind == "chain_bomb" and b.kind == "chain_bomb" and not a.regular and not b.regular
            and a.chain == b.chain and a.m == b.m):
        return False
    return bomb_key(a, heavenly) > bomb_key(b, heavenly)


# Among non-bomb kinds that the same cards can form (they never compare, R-5.1),
# the reading preferred when leading: documented in docs/RULES.md (D-1).
KIND_PREFERENCE = {"single": 0, "pair": 1, "triple": 2, "straight": 3, "pair_run": 4, "triple_run": 5}


def strength_key(c: Combo, heavenly: HeavenlyPosition = "top") -> tuple[int, ...]:
    """Key that orders readings weakest → strongest for choosing among them.

    Bombs above non-bombs (R-5.2); bombs by :func:`bomb_key`, then regular
    before irregular; non-bombs by kind preference (D-1), then top rank.  Used
    to pick "the largest reading" (R-4.6) and "the smallest legal play" (R-13.3).
    """
    if c.is_bomb:
        return (1, *bomb_key(c, heavenly), 0 if c.kind == "chain_bomb" and not c.regular else 1)
    return (0, KIND_PREFERENCE[c.kind], c.size, c.top, 0, 0)
