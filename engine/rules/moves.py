"""Legal-move generation, the auto-pass test and the trustee's choice.

* :func:`legal_plays` -- every distinct play a hand may lead (R-6.1) or that
  beats the previous play (R-5), generated kind by kind straight from the
  rank-count vector (windows of consecutive ranks and their deficits, which
  the jokers fill -- R-4), never by enumerating subsets of the hand.
* :func:`can_beat` -- fast yes/no for the auto-pass of R-6.4.
* :func:`smallest_beating`, :func:`trustee_lead`, :func:`trustee_choice` --
  the trusteeship policy of R-13.3.

A play is *distinct* by (the rank multiset played -- counting SJ and BJ
apart -- and its reading).  Leading, every reading of every multiset is
returned, exactly the readings :func:`engine.rules.classify.interpretations` gives for
those cards.  Following, one reading per multiset: the largest one that beats
the previous play, i.e. what :func:`engine.rules.classify.classify` with ``beat=``
chooses (R-4.6).  Jokers may stand in for natural cards the hand holds
(R-4.3, R-4.4): ``3 4 BJ 6 7`` is offered even when the hand holds ``5 5 5 5``.

Hands are lists of physical card ids (``engine.rules.cards``); the ``*_counts``
variants take a 15-entry rank-count vector instead.  Every function takes the
room's R-2.2 setting as the keyword ``chain_bomb_twos`` (default on: chain
bombs may run up to 2); the caches key on it.

>>> from engine.rules.cards import counts_of, parse_cards
>>> hand = parse_cards("3 4 6 7 5 5 5 5 BJ")
>>> prev = Combo("single", 11, 1, counts_of(parse_cards("A")))
>>> [format_counts(c.counts) for c in legal_plays(hand, prev)]
['BJ', '5 5 5 5', '5 5 5 5 BJ', '5 5 5 BJ']
>>> play = smallest_beating(hand, prev)                # R-13.3: no bomb if BJ beats
>>> format_counts(play.combo.counts), play.cards
('BJ', (53,))
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations_with_replacement

from engine.rules.cards import NUM_CARDS, RANK_LABELS, Card, chain_top, rank_of
from engine.rules.combo import Combo, HeavenlyPosition, beats, bomb_key, strength_key

__all__ = [
    "Play",
    "can_beat",
    "can_beat_counts",
    "format_counts",
    "legal_plays",
    "legal_plays_counts",
    "pick_cards",
    "smallest_beating",
    "trustee_choice",
    "trustee_lead",
]

_RANK: tuple[int, ...] = tuple(rank_of(c) for c in range(NUM_CARDS))
_ACE = 11          # straights and runs end at A (chain bombs: chain_top)
_MIN_BOMB = 4
_MIN_CHAIN = 3     # no two-bomb chains
_PER = {"straight": 1, "pair_run": 2, "triple_run": 3}
# Caches are bounded (a long-running server must not grow without limit);
# the small per-rank tables are bounded by their argument ranges.


def format_counts(counts: Sequence[int]) -> str:
    """A count vector as ranks, low to high, then the jokers (for docs/tests).

    >>> from engine.rules.cards import counts_of, parse_cards
    >>> format_counts(counts_of(parse_cards("BJ 3 3 SJ")))
    '3 3 SJ BJ'
    """
    return " ".join(RANK_LABELS[r] for r in range(15) for _ in range(counts[r]))


def _counts(hand: Iterable[Card]) -> tuple[int, ...]:
    v = [0] * 15
    table = _RANK
    for c in hand:
        v[table[c]] += 1
    return tuple(v)


# ---------------------------------------------------------------- building blocks

@lru_cache(maxsize=None)
def _splits(j: int, s: int, b: int) -> tuple[tuple[int, int], ...]:
    """Ways to take ``j`` jokers from ``s`` SJ and ``b`` BJ (SJ-heavy first)."""
    return tuple((sj, j - sj) for sj in range(min(j, s), max(0, j - b) - 1, -1))


def _vec(lo: int, xs: Sequence[int], sj: int, bj: int) -> tuple[int, ...]:
    v = [0] * 15
    v[lo:lo + len(xs)] = xs
    v[13] = sj
    v[14] = bj
    return tuple(v)


@lru_cache(maxsize=1 << 14)
def _fills(hw: tuple[int, ...], need: int, budget: int, capped: bool) -> tuple[tuple[int, ...], ...]:
    """Natural-count choices for a window: ``x[i] <= hw[i]`` (and ``<= need`` if
    ``capped``), with total deficit ``sum(max(0, need - x[i])) <= budget``."""
    if not hw:
        return ((),)
    first, rest = hw[0], hw[1:]
    out: list[tuple[int, ...]] = []
    top = min(first, need) if capped else first
    for x in range(top, -1, -1):
        d = need - x if x < need else 0
        if d > budget:
            break
        for tail in _fills(rest, need, budget - d, capped):
            out.append((x, *tail))
    return tuple(out)


_SINGLE = tuple(Combo("single", r, 1, tuple(int(i == r) for i in range(15))) for r in range(15))


@lru_cache(maxsize=None)
def _pairs_at(r: int, hr: int, s: int, b: int) -> tuple[Combo, ...]:
    """R-3.2 with R-4.4: ``rr`` or ``r`` + one wild joker (hr <= 2, s, b <= 1)."""
    out = []
    if hr >= 2:
        out.append(Combo("pair", r, 2, _vec(r, (2,), 0, 0)))
    if hr >= 1:
        for sj, bj in _splits(1, s, b):
            out.append(Combo("pair", r, 2, _vec(r, (1,), sj, bj), jokers_as=(r,)))
    return tuple(out)


@lru_cache(maxsize=None)
def _triples_at(r: int, hr: int, s: int, b: int) -> tuple[Combo, ...]:
    """R-3.4 with R-4.4: ``x`` natural cards of rank r and ``3 - x`` wild jokers."""
    out = []
    for x in range(min(hr, 3), 0, -1):
        for sj, bj in _splits(3 - x, s, b):
            out.append(Combo("triple", r, 3, _vec(r, (x,), sj, bj), jokers_as=(r,) * (3 - x)))
    return tuple(out)


@lru_cache(maxsize=None)
def _bombs_at(r: int, hr: int, s: int, b: int) -> tuple[Combo, ...]:
    """R-3.7 with R-4.3: ``x >= 1`` natural cards of rank r plus ``j`` wild jokers."""
    out = []
    for x in range(hr, 0, -1):
        for j in range(max(0, _MIN_BOMB - x), s + b + 1):
            for sj, bj in _splits(j, s, b):
                out.append(Combo("bomb", r, x + j, _vec(r, (x,), sj, bj), xiang=x + j,
                                 jokers_as=(r,) * j))
    return tuple(out)


@lru_cache(maxsize=None)
def _joker_only(s: int, b: int) -> tuple[tuple[Combo, ...], tuple[Combo, ...]]:
    """Plays of jokers alone (R-4.1, R-4.2, R-3.8, R-3.9): (non-bombs, bombs)."""
    plain: list[Combo] = []
    bombs: list[Combo] = []
    if s:
        plain.append(_SINGLE[13])
    if b:
        plain.append(_SINGLE[14])
    if s >= 2:
        plain.append(Combo("pair", 13, 2, _vec(0, (), 2, 0)))
    if b >= 2:
        plain.append(Combo("pair", 14, 2, _vec(0, (), 0, 2)))
    for sj, bj in _splits(3, s, b):
        bombs.append(Combo("three_jokers", 14 if bj else 13, 3, _vec(0, (), sj, bj), xiang=6))
    if s == 2 and b == 2:
        bombs.append(Combo("four_jokers", 14, 4, _vec(0, (), 2, 2), xiang=7))
    return tuple(plain), tuple(bombs)


@lru_cache(maxsize=1 << 13)
def _seq_window(kind: str, per: int, lo: int, hw: tuple[int, ...], s: int, b: int) -> tuple[Combo, ...]:
    """Sequences (R-3.3, R-3.5, R-3.6) on the window ``lo .. lo+len(hw)-1``.

    ``hw`` = the hand's counts there, capped at ``per``.  Every choice of
    natural cards (any held card may be replaced by a joker, R-4.3) whose
    deficit the jokers cover, with at least one natural card (R-4.2).
    """
    length = len(hw)
    top = lo + length - 1
    size = per * length
    out = []
    ranks = range(lo, top + 1)
    head = (0,) * lo
    tail = (0,) * (13 - top - 1)
    for xs in _fills(hw, per, s + b, True):
        d = size - sum(xs)
        if d == size:
            continue
        if per == 1:
            as_ = tuple([r for r, x in zip(ranks, xs) if not x])
        else:
            as_ = tuple([r for r, x in zip(ranks, xs) for _ in range(per - x)])
        body = head + xs + tail
        for sj, bj in _splits(d, s, b):
            out.append(Combo(kind, top, size, body + (sj, bj), jokers_as=as_))  # type: ignore[arg-type]
    return tuple(out)


@lru_cache(maxsize=1 << 12)
def _chain_window(lo: int, hw: tuple[int, ...], s: int, b: int) -> tuple[Combo, ...]:
    """Chain bombs (R-3.10, R-4.4) of k = len(hw) >= 3 bombs on ``lo .. lo+k-1``.

    Every choice of natural cards, every number of jokers, every spread of
    the jokers beyond those needed to bring each bomb to four cards -- one
    reading per spread, as :func:`engine.rules.classify.interpretations` reads them.
    """
    k = len(hw)
    top = lo + k - 1
    jmax = s + b
    out = []
    for xs in _fills(hw, _MIN_BOMB, jmax, False):
        base = [x if x > _MIN_BOMB else _MIN_BOMB for x in xs]
        nat = sum(xs)
        d = sum(base) - nat
        for j in range(d, jmax + 1):
            splits = _splits(j, s, b)
            if not splits:
                continue
            for where in combinations_with_replacement(range(k), j - d):
                sizes = base[:]
                for i in where:
                    sizes[i] += 1
                m = min(sizes)
                regular = all(z == m for z in sizes)
                as_ = tuple(lo + i for i in range(k) for _ in range(sizes[i] - xs[i]))
                bs = tuple(sizes)
                for sj, bj in splits:
                    out.append(Combo("chain_bomb", top, nat + j, _vec(lo, xs, sj, bj), xiang=m + k,
                                     chain=k, m=m, regular=regular, jokers_as=as_, bomb_sizes=bs))
    return tuple(out)


def _seq_windows(h: tuple[int, ...], per: int, min_len: int, jmax: int) -> list[tuple[int, tuple[int, ...]]]:
    """Windows (lo, capped counts) inside 3..A whose deficit jokers can fill."""
    caps = [x if x < per else per for x in h[:_ACE + 1]]
    out = []
    for lo in range(_ACE + 1):
        d = 0
        for hi in range(lo, _ACE + 1):
            d += per - caps[hi]
            if d > jmax:
                break
            if hi - lo + 1 >= min_len:
                out.append((lo, tuple(caps[lo:hi + 1])))
    return out


def _chain_windows(h: tuple[int, ...], jmax: int, top_rank: int) -> list[tuple[int, tuple[int, ...]]]:
    """Windows (lo, counts) of >= 3 ranks inside 3..``top_rank`` (R-2.2) whose
    missing cards (up to four a rank) the jokers can supply."""
    out = []
    for lo in range(top_rank + 1 - _MIN_CHAIN + 1):
        d = 0
        for hi in range(lo, top_rank + 1):
            x = h[hi]
            if x < _MIN_BOMB:
                d += _MIN_BOMB - x
                if d > jmax:
                    break
            if hi - lo + 1 >= _MIN_CHAIN:
                out.append((lo, h[lo:hi + 1]))
    return out


@lru_cache(maxsize=1 << 12)
def _all_bombs(h: tuple[int, ...], twos: bool) -> tuple[Combo, ...]:
    """Every bomb reading the hand can play (R-3.7 .. R-3.10; ``twos``: R-2.2 setting)."""
    s, b = h[13], h[14]
    jmax = s + b
    out: list[Combo] = []
    for r in range(13):
        if h[r] and h[r] + jmax >= _MIN_BOMB:
            out.extend(_bombs_at(r, h[r], s, b))
    out.extend(_joker_only(s, b)[1])
    for lo, hw in _chain_windows(h, jmax, chain_top(twos)):
        out.extend(_chain_window(lo, hw, s, b))
    return tuple(out)


def _lead(h: tuple[int, ...], twos: bool) -> tuple[Combo, ...]:
    """Every reading of every play the hand may lead (R-6.1); cached by :func:`_legal`."""
    s, b = h[13], h[14]
    jmax = s + b
    s1, b1 = min(s, 1), min(b, 1)
    out: list[Combo] = []
    for r in range(13):
        hr = h[r]
        if hr:
            out.append(_SINGLE[r])
            out.extend(_pairs_at(r, min(hr, 2), s1, b1))
            if hr + jmax >= 3:
                out.extend(_triples_at(r, min(hr, 3), s, b))
    out.extend(_joker_only(s, b)[0])
    nat = h[:_ACE + 1]
    out.extend(_seq_all("straight", 1, 5, tuple(x if x < 1 else 1 for x in nat), s, b))
    out.extend(_seq_all("pair_run", 2, 3, tuple(x if x < 2 else 2 for x in nat), s, b))
    out.extend(_seq_all("triple_run", 3, 3, tuple(x if x < 3 else 3 for x in nat), s, b))
    out.extend(_all_bombs(h, twos))
    return tuple(out)


@lru_cache(maxsize=1 << 12)
def _seq_all(kind: str, per: int, min_len: int, caps: tuple[int, ...], s: int, b: int) -> tuple[Combo, ...]:
    """All sequences of one kind, from the counts of 3..A capped at ``per``."""
    out: list[Combo] = []
    for lo, hw in _seq_windows(caps, per, min_len, s + b):
        out.extend(_seq_window(kind, per, lo, hw, s, b))
    return tuple(out)


def _reading_key(c: Combo, heavenly: HeavenlyPosition) -> tuple[object, ...]:
    """Order of readings of one multiset, as ``engine.rules.classify`` sorts them (R-4.6)."""
    return (strength_key(c, heavenly), c.jokers_as, c.bomb_sizes)


def _best_per_multiset(cands: Iterable[Combo], heavenly: HeavenlyPosition) -> list[Combo]:
    best: dict[tuple[int, ...], Combo] = {}
    for c in cands:
        old = best.get(c.counts)
        if old is None or _reading_key(c, heavenly) > _reading_key(old, heavenly):
            best[c.counts] = c
    return list(best.values())


def _same_kind_above(h: tuple[int, ...], prev: Combo) -> list[Combo]:
    """Non-bombs of prev's kind and length with a higher top (R-5.1)."""
    s, b = h[13], h[14]
    jmax = s + b
    kind, t = prev.kind, prev.top
    out: list[Combo] = []
    if kind == "single":
        out = [_SINGLE[r] for r in range(t + 1, 15) if h[r]]
    elif kind == "pair":
        s1, b1 = min(s, 1), min(b, 1)
        for r in range(t + 1, 13):
            if h[r]:
                out.extend(_pairs_at(r, min(h[r], 2), s1, b1))
        if t < 13 and s >= 2:
            out.append(Combo("pair", 13, 2, _vec(0, (), 2, 0)))
        if t < 14 and b >= 2:
            out.append(Combo("pair", 14, 2, _vec(0, (), 0, 2)))
    elif kind == "triple":
        for r in range(t + 1, 13):
            if h[r] and h[r] + jmax >= 3:
                out.extend(_triples_at(r, min(h[r], 3), s, b))
    elif kind in _PER:
        per = _PER[kind]
        length = prev.size // per
        for top in range(max(t + 1, length - 1), _ACE + 1):
            lo = top - length + 1
            hw = tuple(x if x < per else per for x in h[lo:top + 1])
            if per * length - sum(hw) <= jmax:
                out.extend(_seq_window(kind, per, lo, hw, s, b))
    return out


@lru_cache(maxsize=1 << 13)
def _legal(h: tuple[int, ...], prev: Combo | None, heavenly: HeavenlyPosition,
           twos: bool) -> tuple[Combo, ...]:
    if prev is None:
        return _lead(h, twos)
    jokers = h[13] + h[14]
    if not prev.is_bomb:
        cands = _same_kind_above(h, prev)
        cands.extend(_all_bombs(h, twos))
        if not jokers:
            return tuple(cands)  # without jokers every multiset has one reading
        return tuple(_best_per_multiset(cands, heavenly))
    cands = [c for c in _all_bombs(h, twos) if beats(c, prev, heavenly)]
    return tuple(_best_per_multiset(cands, heavenly))


# ---------------------------------------------------------------- public API

def legal_plays_counts(counts: Sequence[int], prev: Combo | None = None,
                       heavenly: HeavenlyPosition = "top", *, chain_bomb_twos: bool = True) -> list[Combo]:
    """:func:`legal_plays` for a 15-entry rank-count vector."""
    return list(_legal(tuple(counts), prev, heavenly, chain_bomb_twos))


def legal_plays(hand: Iterable[Card], prev: Combo | None = None,
                heavenly: HeavenlyPosition = "top", *, chain_bomb_twos: bool = True) -> list[Combo]:
    """Every distinct play the hand may lead (``prev`` None) or that beats ``prev``.

    Leading (R-6.1): every reading of every playable multiset.  Following
    (R-5, R-4.6): per multiset the largest reading that beats ``prev``.
    Each Combo's ``counts`` is a sub-multiset of the hand.

    >>> from engine.rules.cards import counts_of, parse_cards
    >>> hand = parse_cards("3 4 5 6 7 BJ")
    >>> prev = Combo("straight", 4, 5, counts_of(parse_cards("3 4 5 6 7")))
    >>> [format_counts(c.counts) + " to " + c.rank for c in legal_plays(hand, prev)]
    ['4 5 6 7 BJ to 8']
    >>> len([c for c in legal_plays(hand) if c.kind == "straight"])  # R-4.3 substitutions too
    8
    >>> hand = parse_cards("K K K K A A A A 2 2 2 2")
    >>> [c.describe() for c in legal_plays(hand) if c.kind == "chain_bomb"]   # R-2.2
    ['7-xiang regular 3-chain bomb to 2']
    >>> [c for c in legal_plays(hand, chain_bomb_twos=False) if c.kind == "chain_bomb"]
    []
    """
    return list(_legal(_counts(hand), prev, heavenly, chain_bomb_twos))


def can_beat_counts(h: Sequence[int], prev: Combo | None,
                    heavenly: HeavenlyPosition = "top", *, chain_bomb_twos: bool = True) -> bool:
    """:func:`can_beat` for a 15-entry rank-count vector."""
    if prev is None:
        return any(h)
    s, b = h[13], h[14]
    jmax = s + b
    if not prev.is_bomb:
        if jmax >= 3:
            return True  # the three-joker bomb beats any non-bomb
        for r in range(13):
            x = h[r]
            if x and x + jmax >= _MIN_BOMB:
                return True
        kind, t = prev.kind, prev.top
        if kind == "single":
            return any(h[t + 1:])
        if kind == "pair":
            for r in range(t + 1, 13):
                if h[r] and h[r] + jmax >= 2:
                    return True
            return (t < 13 and s >= 2) or (t < 14 and b >= 2)
        if kind == "triple":
            for r in range(t + 1, 13):
                if h[r] and h[r] + jmax >= 3:
                    return True
            return False
        per = _PER[kind]
        length = prev.size // per
        for top in range(max(t + 1, length - 1), _ACE + 1):
            d = 0
            for x in h[top - length + 1:top + 1]:
                if x < per:
                    d += per - x
            if d <= jmax:
                return True
        return False
    # a bomb: compare the strongest single-rank bomb, the joker bombs, then chains
    pk = bomb_key(prev, heavenly)
    best = -1
    best_r = 0
    for r in range(13):
        x = h[r]
        if x and x + jmax >= best:
            best, best_r = x + jmax, r
    # concerns two irregular chains only: single-rank bombs go by
    if best >= _MIN_BOMB and (best, 0, -best, best_r) > pk:
        return True
    if jmax >= 3 and (6, -1, 0, 0) > pk:
        return True
    if s == 2 and b == 2 and (7, 1 if heavenly == "top" else -1, 0, 0) > pk:
        return True
    twos = chain_bomb_twos
    if not _chain_windows(tuple(h), jmax, chain_top(twos)):
        return False
    return any(beats(c, prev, heavenly) for c in _all_bombs(tuple(h), twos) if c.kind == "chain_bomb")


def can_beat(hand: Iterable[Card], prev: Combo | None, heavenly: HeavenlyPosition = "top",
             *, chain_bomb_twos: bool = True) -> bool:
    """Can any play from the hand beat ``prev``?  Drives the auto-pass (R-6.4).

    Equal to ``bool(legal_plays(hand, prev))``, without generating the plays.

    >>> from engine.rules.cards import counts_of, parse_cards
    >>> prev = Combo("pair", 12, 2, counts_of(parse_cards("2 2")))
    >>> can_beat(parse_cards("A A 3 SJ"), prev), can_beat(parse_cards("SJ SJ"), prev)
    (False, True)
    """
    return can_beat_counts(_counts(hand), prev, heavenly, chain_bomb_twos=chain_bomb_twos)


@dataclass(frozen=True)
class Play:
    """A reading plus the concrete physical cards that realise it."""

    combo: Combo
    cards: tuple[int, ...]


def pick_cards(hand_cards: Iterable[Card], counts: Sequence[int]) -> tuple[int, ...]:
    """Concrete card ids from the hand realising a count vector, lowest ids first.

    >>> from engine.rules.cards import counts_of, parse_cards
    >>> pick_cards(parse_cards("3 3 3 BJ BJ"), counts_of(parse_cards("3 3 BJ")))
    (0, 1, 53)
    """
    need = list(counts)
    out = []
    for c in sorted(hand_cards):
        r = _RANK[c]
        if need[r]:
            need[r] -= 1
            out.append(c)
    if any(need):
        raise ValueError("the hand does not hold these cards")
    return tuple(out)


def _breaks_group(h: Sequence[int], counts: Sequence[int]) -> bool:
    """Does the play take part (not all) of a rank the hand holds 4+ of? (R-13.3)"""
    for r in range(13):
        if h[r] >= _MIN_BOMB and 0 < counts[r] < h[r]:
            return True
    return False


def trustee_lead(hand_cards: Sequence[Card]) -> Play:
    """Leading under trusteeship: the lowest single card (R-13.3).

    >>> from engine.rules.cards import counts_of, parse_cards
    >>> trustee_lead(parse_cards("SJ 4 3H 3S")).cards
    (0,)
    """
    if not hand_cards:
        raise ValueError("an empty hand cannot lead")
    c = min(hand_cards, key=lambda x: (_RANK[x], x))
    return Play(_SINGLE[_RANK[c]], (c,))


def smallest_beating(hand_cards: Sequence[Card], prev: Combo | None,
                     heavenly: HeavenlyPosition = "top", *, chain_bomb_twos: bool = True) -> Play | None:
    """The weakest play that beats ``prev`` (R-13.3), or None (pass).

    Weakest by :func:`engine.rules.combo.strength_key` (so a bomb only when no
    non-bomb beats, then the weakest bomb); ties: fewer jokers, then not
    breaking a group of 4+ natural cards of one rank, then the lowest ids.
    With ``prev`` None this is :func:`trustee_lead`.

    >>> from engine.rules.cards import counts_of, parse_cards
    >>> prev = Combo("single", 5, 1, counts_of(parse_cards("8")))
    >>> smallest_beating(parse_cards("9 9 9 9 10 BJ"), prev).combo.rank   # strength first
    '9'
    >>> prev = Combo("pair", 5, 2, counts_of(parse_cards("8 8")))
    >>> format_counts(smallest_beating(parse_cards("9 9 SJ BJ"), prev).combo.counts)
    '9 9'
    """
    if prev is None:
        return trustee_lead(hand_cards)
    h = _counts(hand_cards)
    plays: Sequence[Combo] = ()
    jokers = h[13] + h[14]
    if not prev.is_bomb and jokers <= 2:
        # a same-kind non-bomb is weaker than any bomb: skip the bombs.
        # Only with <= 2 jokers: with more, one multiset may read both ways
        # (5 + 4 jokers: straight or 55555; 444555666 + 3 jokers: triple run or
        # chain) and the engine would read it as the bomb.
        plays = _same_kind_above(h, prev)
        if jokers:
            plays = _best_per_multiset(plays, heavenly)
    if not plays:
        plays = _legal(h, prev, heavenly, chain_bomb_twos)
    if not plays:
        return None
    keyed = [(strength_key(c, heavenly), c) for c in plays]
    low = min(k for k, _ in keyed)
    tier = [c for k, c in keyed if k == low]
    if len(tier) > 1:
        fewest = min(c.jokers for c in tier)
        tier = [c for c in tier if c.jokers == fewest]
    if len(tier) > 1:
        intact = [c for c in tier if not _breaks_group(h, c.counts)]
        tier = intact or tier
    if len(tier) == 1:
        c = tier[0]
        return Play(c, pick_cards(hand_cards, c.counts))
    return min((Play(c, pick_cards(hand_cards, c.counts)) for c in tier), key=lambda p: p.cards)


def trustee_choice(hand_cards: Sequence[Card], prev: Combo | None,
                   heavenly: HeavenlyPosition = "top", *, chain_bomb_twos: bool = True) -> Play | None:
    """What trusteeship plays (R-13.3): lead the lowest single, or follow with
    :func:`smallest_beating` (None = pass).

    >>> from engine.rules.cards import counts_of, parse_cards
    >>> prev = Combo("bomb", 12, 6, counts_of(parse_cards("2 2 2 2 2 2")), xiang=6)
    >>> hand = parse_cards("K K K K A A A A 2 2 2 2 3")
    >>> trustee_choice(hand, prev).combo.describe()          # R-2.2: a chain to 2
    '7-xiang regular 3-chain bomb to 2'
    >>> trustee_choice(hand, prev, chain_bomb_twos=False) is None
    True
    """
    if prev is None:
        return trustee_lead(hand_cards)
    return smallest_beating(hand_cards, prev, heavenly, chain_bomb_twos=chain_bomb_twos)
