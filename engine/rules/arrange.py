"""理牌: a hand split into combinations with the fewest groups (the table's "arrange" toggle).

:func:`arrange` splits a set of cards into groups that are each a combination of R-3: every
card in exactly one group, as few groups as possible (ties: more cards in bombs, then fewer
singles).  Bombs (R-3.7-R-3.9) come first, then the chains -- straights (R-3.6), pair runs
(R-3.3), triple runs (R-3.5), chain bombs (R-3.10) -- then triples (R-3.4), pairs (R-3.2) and
singles (R-3.1); within a kind, the lower rank first.

The jokers stay themselves: never wild (R-4) in an arrangement -- where to spend a 財神 is the
player's call when they play -- so they group among themselves: all four are the heavenly bomb
(R-3.9), three the three-joker bomb (R-3.8), two of a kind a pair (R-3.2), else singles (SJ + BJ
is no combination, R-4.2).  Only 3…A appear in sequences (R-2.2); a chain bomb may run up to 2
unless ``chain_bomb_twos`` is off.

>>> from engine.rules.cards import format_ranks, parse_cards
>>> show = lambda text: [(g.kind, format_ranks(g.cards)) for g in arrange(parse_cards(text))]
>>> show("3 4 5 6 7 7 7 9 9 BJ")
[('straight', '3 4 5 6 7'), ('pair', '7 7'), ('pair', '9 9'), ('single', 'BJ')]
>>> show("10 10 10 10 J J J J Q Q Q Q 2 SJ SJ BJ")
[('three_jokers', 'SJ SJ BJ'), ('chain_bomb', '10 10 10 10 J J J J Q Q Q Q'), ('single', '2')]
>>> show("5 5 5 5 5 6 7 8 9")
[('bomb', '5 5 5 5'), ('straight', '5 6 7 8 9')]

Pure and deterministic: the search runs over the rank counts (suits never matter, R-1.6),
memoised, always covering the lowest rank left.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from typing import NamedTuple

from engine.rules.cards import BJ, NATURAL_RANKS, NUM_CARDS, SEQUENCE_TOP, SJ, chain_top, rank_of, sort_cards

#: the order groups are listed in: bombs, chains, triples, pairs, singles
KIND_ORDER = ("four_jokers", "three_jokers", "bomb", "straight", "pair_run", "triple_run", "chain_bomb",
              "triple", "pair", "single")
BOMB_GROUP_KINDS = frozenset({"four_jokers", "three_jokers", "bomb", "chain_bomb"})
MAX_CARDS = 27  # a hand


class BadCards(ValueError):
    """The cards to arrange are not a hand: not distinct ids 0..107, or more than 27."""


class Group(NamedTuple):
    """One combination of an arrangement: its kind (as a reading's) and its card ids in rank order."""

    kind: str
    cards: tuple[int, ...]


# A group of natural cards while searching: (kind, first rank, cards of each rank from the first on)
_Shape = tuple[str, int, tuple[int, ...]]
# A search result: (groups, -cards in bombs, singles) and the shapes
_Best = tuple[tuple[int, int, int], tuple[_Shape, ...]]


def _options(counts: tuple[int, ...], r: int, twos: bool) -> list[_Shape]:
    """Every group of natural cards that holds the lowest rank ``r`` left."""
    c = counts[r]
    out: list[_Shape] = [("single", r, (1,))]
    if c >= 2:
        out.append(("pair", r, (2,)))
    if c >= 3:
        out.append(("triple", r, (3,)))
    out.extend(("bomb", r, (n,)) for n in range(4, c + 1))
    for kind, width, shortest in (("straight", 1, 5), ("pair_run", 2, 3), ("triple_run", 3, 3)):
        end = r
        while end <= SEQUENCE_TOP and counts[end] >= width:
            if end - r + 1 >= shortest:
                out.append((kind, r, (width,) * (end - r + 1)))
            end += 1
    top = chain_top(twos)
    if c >= 4:  # chain bombs: k >= 3 bombs of consecutive ranks, each of any size it can have
        partial: list[tuple[int, ...]] = [(n,) for n in range(4, c + 1)]
        end = r + 1
        while partial and end <= top and counts[end] >= 4:
            partial = [p + (n,) for p in partial for n in range(4, counts[end] + 1)]
            if end - r + 1 >= 3:
                out.extend(("chain_bomb", r, p) for p in partial)
            end += 1
    return out


@lru_cache(maxsize=4096)
def _best(counts: tuple[int, ...], twos: bool) -> _Best:
    r = next((i for i, n in enumerate(counts) if n), None)
    if r is None:
        return (0, 0, 0), ()
    best: _Best | None = None
    for shape in _options(counts, r, twos):
        kind, first, widths = shape
        left = list(counts)
        for i, n in enumerate(widths):
            left[first + i] -= n
        (groups, bombs, singles), rest = _best(tuple(left), twos)
        key = (groups + 1, bombs - (sum(widths) if kind in BOMB_GROUP_KINDS else 0),
               singles + (kind == "single"))
        if best is None or key < best[0]:
            best = (key, (shape, *rest))
    assert best is not None
    return best


def _check(cards: Iterable[object]) -> list[int]:
    ids = list(cards)
    if (len(ids) > MAX_CARDS or len(set(ids)) != len(ids)
            or not all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c < NUM_CARDS for c in ids)):
        raise BadCards(f"cards must be at most {MAX_CARDS} distinct card ids 0..{NUM_CARDS - 1}")
    return ids  # type: ignore[return-value]


def arrange(cards: Iterable[int], chain_bomb_twos: bool = True) -> list[Group]:
    """The split of ``cards`` into the fewest combinations, in :data:`KIND_ORDER` (module
    docstring); raises :class:`BadCards` for anything that is not a hand.

    >>> arrange([])
    []
    >>> arrange([52, 53, 106, 107])
    [Group(kind='four_jokers', cards=(52, 106, 53, 107))]
    """
    ids = _check(cards)
    by_rank: dict[int, list[int]] = {}
    for c in sorted(ids):
        by_rank.setdefault(rank_of(c), []).append(c)
    counts = tuple(len(by_rank.get(r, ())) for r in range(NATURAL_RANKS))
    _key, shapes = _best(counts, chain_bomb_twos)
    groups: list[tuple[str, int, list[int]]] = []
    for kind, first, widths in shapes:
        groups.append((kind, first + len(widths) - 1, [by_rank[first + i].pop(0)
                                                       for i, n in enumerate(widths) for _ in range(n)]))
    sj, bj = by_rank.get(SJ, []), by_rank.get(BJ, [])
    jokers = sj + bj
    if len(jokers) >= 3:
        groups.append(("four_jokers" if len(jokers) == 4 else "three_jokers", BJ if bj else SJ, jokers))
    else:
        for rank, same in ((SJ, sj), (BJ, bj)):
            if len(same) == 2:
                groups.append(("pair", rank, same))
            else:
                groups.extend(("single", rank, [c]) for c in same)
    groups.sort(key=lambda g: (KIND_ORDER.index(g[0]), g[1]))
    return [Group(kind, tuple(sort_cards(cs))) for kind, _top, cs in groups]
