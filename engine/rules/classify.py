"""Reading played cards as combinations (R-3, R-4) -- the classifier.

Public API (a stable contract, see docs/ARCHITECTURE.md "Contracts that stay stable"):

* :func:`interpretations` -- every distinct reading of exactly these cards
  (all cards used, R-4.5), best first (by :func:`engine.rules.combo.strength_key`).
* :func:`interpretations_for_counts` -- the same from a 15-entry rank-count
  vector; ``lru_cache``-d on the vector, returns a tuple.
* :func:`classify` -- the best reading (R-4.6), or with ``beat=`` the largest
  reading that beats that play; None when there is none.
* :func:`classify_counts` -- :func:`classify` from a rank-count vector.
* :func:`beats` -- re-exported from :mod:`engine.rules.combo` (R-5).

The algorithm works on rank-count vectors only: ``n[0..12]`` natural counts
(3..2), ``j`` jokers.  Joker-only sets follow R-4.2 (never wild); otherwise
every joker is wild (R-4.3, R-4.4): for single-rank kinds it may stand for
any of 3..2, in straights and runs only for 3..A (R-2.2), in chain bombs for
any rank the chain may hold (3..2 with ``chain_bomb_twos``, the default; 3..A
without).  A sequence reading is a window of consecutive ranks that holds every
natural rank; the jokers fill its deficit.  No joker substitution is enumerated (the brute-force
oracle in ``tests/rules_oracle.py`` does that, to check this module).

>>> classify("3 4 5 6 BJ").describe()
'straight to 7 (5 cards)'
>>> classify("BJ 2 2 2").describe()                     # R-4.3
'4-xiang bomb of 2'
>>> classify("3 3 4 4 BJ") is None                      # R-4.5
True
>>> [c.describe() for c in interpretations("5 6 7 8 BJ")]   # R-4.6
['straight to 9 (5 cards)', 'straight to 8 (5 cards)']
>>> classify("5 6 7 8 BJ", beat=classify("5 6 7 8 9")) is None   # R-5.6
True
>>> classify("K K K K A A A BJ 2 2 2 2").describe()      # R-2.2, R-4.3
'7-xiang regular 3-chain bomb to 2'
>>> classify("K K K K A A A A 2 2 2 2", chain_bomb_twos=False) is None
True
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache
from itertools import combinations_with_replacement

from engine.rules.cards import (
    NUM_CARDS,
    NUM_RANKS,
    RANK_LABELS,  # noqa: F401  (used by the doctests)
    SEQUENCE_TOP,
    TWO,
    chain_top,
    Card,
    parse_cards,
    rank_of,
)
from engine.rules.combo import Combo, HeavenlyPosition, beats, strength_key

__all__ = [
    "Combo",
    "beats",
    "classify",
    "classify_counts",
    "counts_for",
    "interpretations",
    "interpretations_for_counts",
]

# rank index of each physical card id 0..107 (a table: no arithmetic per card)
_RANK_OF: tuple[int, ...] = tuple(rank_of(c) for c in range(NUM_CARDS))
_MAX_NATURAL = 8   # two decks: 8 cards of each natural rank
_MAX_JOKER = 2     # two of each joker
_MIN_BOMB = 4      # a bomb has at least four cards
_MIN_CHAIN = 3     # chains of two bombs are not combinations


def counts_for(cards: str | Iterable[Card]) -> tuple[int, ...]:
    """Rank-count vector of notation text or of physical card ids.

    >>> counts_for("3 3 BJ")
    (2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1)
    """
    if isinstance(cards, str):
        cards = parse_cards(cards)
    v = [0] * NUM_RANKS
    table = _RANK_OF
    for c in cards:
        if c < 0:  # negative ids would index the table from its end
            raise ValueError(f"no card has id {c!r}")
        try:
            v[table[c]] += 1
        except (IndexError, TypeError):
            raise ValueError(f"no card has id {c!r}") from None
    return tuple(v)


def _check_counts(counts: Sequence[int]) -> None:
    if len(counts) != NUM_RANKS:
        raise ValueError(f"a count vector has {NUM_RANKS} entries, got {len(counts)}")
    for r, x in enumerate(counts):
        limit = _MAX_NATURAL if r <= TWO else _MAX_JOKER
        if not 0 <= x <= limit:
            raise ValueError(f"rank {r} has {x} cards; two decks hold only {limit}")


def _joker_only(counts: tuple[int, ...], sj: int, bj: int) -> list[Combo]:
    """R-4.1, R-4.2: jokers played without natural cards are never wild."""
    j = sj + bj
    if j == 1:
        return [Combo("single", 13 if sj else 14, 1, counts)]
    if j == 2:
        if sj == 2:
            return [Combo("pair", 13, 2, counts)]
        if bj == 2:
            return [Combo("pair", 14, 2, counts)]
        return []  # decision: SJ + BJ is not a combination
    if j == 3:
        return [Combo("three_jokers", 14 if bj else 13, 3, counts, xiang=6)]
    return [Combo("four_jokers", 14, 4, counts, xiang=7)]


def _sequence_readings(
    out: list[Combo], kind: str, per: int, n: tuple[int, ...], lo: int, hi: int,
    counts: tuple[int, ...], size: int,
) -> None:
    """Straights (per=1), pair runs (2), triple runs (3): R-3.3, R-3.5, R-3.6.

    Every window of ``size // per`` consecutive ranks inside 3..A that holds all
    the natural ranks is one reading; the jokers (R-4.3) fill the slots the
    naturals leave (``size`` is a multiple of ``per``, so they fit exactly).
    """
    length = size // per
    for top in range(max(hi, length - 1), min(lo + length - 1, SEQUENCE_TOP) + 1):
        low = top - length + 1
        as_: list[int] = []
        for r in range(low, top + 1):
            missing = per - n[r]
            if missing:
                as_.extend([r] * missing)
        out.append(Combo(kind, top, size, counts, jokers_as=tuple(as_)))  # type: ignore[arg-type]


def _chain_bomb_readings(
    out: list[Combo], n: tuple[int, ...], j: int, lo: int, hi: int,
    counts: tuple[int, ...], size: int, top_rank: int,
) -> None:
    """Chain bombs (R-3.10) with wild jokers (R-4.4).

    For each chain length k >= 3 and each window of k ranks inside
    3..``top_rank`` (A, or 2 with ``chain_bomb_twos``, R-2.2) that holds every
    natural rank: the jokers first bring every bomb up to four
    cards (a missing rank takes four jokers: 4444 + SJ SJ BJ BJ + 6666); the
    extra jokers may go on any bombs -- each distribution is one reading.
    """
    for k in range(max(_MIN_CHAIN, hi - lo + 1), min(top_rank + 1, size // _MIN_BOMB) + 1):
        for top in range(max(hi, k - 1), min(lo + k - 1, top_rank) + 1):
            low = top - k + 1
            base = [n[r] if n[r] > _MIN_BOMB else _MIN_BOMB for r in range(low, top + 1)]
            extra = j - sum(base[i] - n[low + i] for i in range(k))
            if extra < 0:
                continue
            for where in combinations_with_replacement(range(k), extra):
                sizes = base[:] if extra else base
                for i in where:
                    sizes[i] += 1
                m = min(sizes)
                as_: list[int] = []
                for i in range(k):
                    missing = sizes[i] - n[low + i]
                    if missing:
                        as_.extend([low + i] * missing)
                out.append(Combo(
                    "chain_bomb", top, size, counts, xiang=m + k, chain=k, m=m,
                    regular=all(s == m for s in sizes), jokers_as=tuple(as_),
                    bomb_sizes=tuple(sizes),
                ))


@lru_cache(maxsize=1 << 16)
def interpretations_for_counts(
    counts: tuple[int, ...], heavenly: HeavenlyPosition = "top", chain_bomb_twos: bool = True,
) -> tuple[Combo, ...]:
    """All distinct readings of the cards with this rank-count vector, best first.

    ``counts`` has 15 entries (3..2, SJ, BJ; see :func:`engine.rules.cards.counts_of`).
    ``chain_bomb_twos`` is the room's R-2.2 setting (chain bombs may run up to 2).
    Cached on ``(counts, heavenly, chain_bomb_twos)``; pass the arguments the
    same way each time so the cache hits.  Raises ValueError for vectors two decks
    cannot hold.  Order: ``strength_key`` descending; readings of equal
    strength (chain bombs whose extra jokers sit on different bombs) by
    ``(jokers_as, bomb_sizes)`` descending, so the order is deterministic.

    >>> [c.describe() for c in interpretations_for_counts(counts_for("3 4 5 SJ SJ BJ"))]
    ['pair run to 5 (6 cards)', 'straight to 8 (6 cards)']
    """
    counts = tuple(counts)
    _check_counts(counts)
    n = counts[:13]
    sj, bj = counts[13], counts[14]
    j = sj + bj
    size = sum(counts)
    if size == 0:
        return ()
    if size == j:
        return tuple(_joker_only(counts, sj, bj))

    out: list[Combo] = []
    present = [r for r in range(13) if n[r]]
    lo, hi = present[0], present[-1]
    if lo == hi:
        # single-rank kinds: jokers stand for the natural rank, 3..2
        jokers_as = (lo,) * j
        if size == 1:
            out.append(Combo("single", lo, 1, counts))
        elif size == 2:
            out.append(Combo("pair", lo, 2, counts, jokers_as=jokers_as))
        elif size == 3:
            out.append(Combo("triple", lo, 3, counts, jokers_as=jokers_as))
        else:
            out.append(Combo("bomb", lo, size, counts, xiang=size, jokers_as=jokers_as))
    if hi <= SEQUENCE_TOP:  # no 2 in straights, pair runs, triple runs
        most = max(n)
        if size >= 5 and most <= 1:
            _sequence_readings(out, "straight", 1, n, lo, hi, counts, size)
        if size >= 6 and size % 2 == 0 and most <= 2:
            _sequence_readings(out, "pair_run", 2, n, lo, hi, counts, size)
        if size >= 9 and size % 3 == 0 and most <= 3:
            _sequence_readings(out, "triple_run", 3, n, lo, hi, counts, size)
    top_rank = chain_top(chain_bomb_twos)
    if hi <= top_rank and size >= _MIN_CHAIN * _MIN_BOMB:  # chains may reach 2
        _chain_bomb_readings(out, n, j, lo, hi, counts, size, top_rank)
    out.sort(key=lambda c: (strength_key(c, heavenly), c.jokers_as, c.bomb_sizes), reverse=True)
    return tuple(out)


def interpretations(
    cards: str | Iterable[Card], heavenly: HeavenlyPosition = "top", *, chain_bomb_twos: bool = True,
) -> list[Combo]:
    """All distinct readings of exactly these cards, best first (R-4.5, R-4.6).

    ``cards`` is notation text or a sequence of physical card ids.

    >>> [c.describe() for c in interpretations("5 SJ SJ BJ BJ")][:2]
    ['5-xiang bomb of 5', 'straight to 9 (5 cards)']
    >>> interpretations("SJ BJ")                          # R-4.2 decision
    []
    """
    return list(interpretations_for_counts(counts_for(cards), heavenly, chain_bomb_twos))


def classify_counts(
    counts: tuple[int, ...], beat: Combo | None = None, heavenly: HeavenlyPosition = "top",
    *, chain_bomb_twos: bool = True,
) -> Combo | None:
    """:func:`classify` for a rank-count vector (no card parsing at all)."""
    readings = interpretations_for_counts(counts, heavenly, chain_bomb_twos)  # positional: one cache key
    if beat is None:
        return readings[0] if readings else None
    for r in readings:
        if beats(r, beat, heavenly):
            return r
    return None


def classify(
    cards: str | Iterable[Card], beat: Combo | None = None, heavenly: HeavenlyPosition = "top",
    *, chain_bomb_twos: bool = True,
) -> Combo | None:
    """The best reading of the cards (R-4.6), or None if they are no combination.

    With ``beat`` (the previous play), the largest reading that beats it
    (R-4.6, R-5), or None when no reading does.  ``chain_bomb_twos`` is the
    room's R-2.2 setting (default on: chain bombs may run up to 2).

    >>> classify("3 3 3 3 4 4 4 4 5 5 5 BJ").describe()    # R-4.3
    '7-xiang regular 3-chain bomb to 5'
    >>> classify("4 4 4 4 5 5 5 BJ") is None                # R-3.10
    True
    >>> classify("5 6 7 8 BJ", beat=classify("4 5 6 7 8")).rank
    '9'
    >>> c = classify("6 7 8 SJ SJ BJ", beat=classify("4 5 6 7 8 9"))
    >>> c.kind, c.rank, [RANK_LABELS[r] for r in c.jokers_as]
    ('straight', 'J', ['9', '10', 'J'])
    """
    return classify_counts(counts_for(cards), beat, heavenly, chain_bomb_twos=chain_bomb_twos)

