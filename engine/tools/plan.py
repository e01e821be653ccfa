"""A hand's plan and the plan-following policy the ``normal`` bot and the search share.

:func:`plan` splits a rank-count vector (15 entries, ``engine.rules.cards`` order) into
natural combinations a person would play one by one: joker bombs, chain bombs and bombs
first (R-3.7 … R-3.10, kept whole), then the sequences (R-3.3, R-3.5, R-3.6) that leave the
fewest plays, then triples, pairs and singles.  Every group is a legal play of the hand on
its own (no joker stands in for another rank), so a plan never needs the move generator.

:func:`follow_plan` is the policy: lead the weakest group (shed long, low groups first;
guard against an opponent about to go out), follow with a group that beats, break a group
only when it costs no extra play or the opponent is low, and spend a bomb only when it
decides the match (the opponent is low, or the player will soon be out).  It reads counts
only, so a search can run thousands of its moves in a decision.

>>> from engine.rules.cards import parse_cards
>>> from engine.rules.moves import format_counts
>>> h = counts(parse_cards("3 4 5 6 7 9 9 J J J 2 2 2 2 BJ"))
>>> [format_counts(g.counts) for g in plan(h)]
['2 2 2 2', '3 4 5 6 7', '9 9', 'J J J', 'BJ']
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache
from operator import sub

from engine.rules.cards import ACE, NUM_CARDS, chain_top, rank_of
from engine.rules.combo import BOMB_KINDS, Combo, HeavenlyPosition, Kind, beats, strength_key
from engine.rules.moves import legal_plays_counts

__all__ = ["Counts", "follow_plan", "counts", "plan", "plays_left", "remove"]

Counts = tuple[int, ...]
_RANK = tuple(rank_of(c) for c in range(NUM_CARDS))
_SEQ: tuple[tuple[Kind, int, int], ...] = (("straight", 1, 5), ("pair_run", 2, 3), ("triple_run", 3, 3))
_ORDERS = ((0, 1, 2), (2, 1, 0), (1, 2, 0), (1, 2))  # which sequences to take first; the last: no straights
_BOMB_LOW = 6        # the opponent holds this many cards or fewer: bombs come out
_NEAR_OUT = 2        # the player has this many non-bomb groups or fewer: bombs come out


def counts(cards: Iterable[int]) -> Counts:
    """The 15-entry rank-count vector of physical cards."""
    v = [0] * 15
    for c in cards:
        v[_RANK[c]] += 1
    return tuple(v)


def remove(h: Sequence[int], played: Sequence[int]) -> Counts:
    """``h`` minus the cards of a play (both count vectors)."""
    return tuple(map(sub, h, played))


def _vec(parts: dict[int, int]) -> Counts:
    v = [0] * 15
    for r, n in parts.items():
        v[r] = n
    return tuple(v)


def _bombs(h: list[int], twos: bool) -> list[Combo]:
    """Take the bombs out of ``h`` (changed in place): jokers, chains, single ranks."""
    out: list[Combo] = []
    s, b = h[13], h[14]
    if s == 2 and b == 2:
        out.append(Combo("four_jokers", 14, 4, _vec({13: 2, 14: 2}), xiang=7))
        h[13] = h[14] = 0
    elif s + b >= 3:
        out.append(Combo("three_jokers", 14 if b else 13, 3, _vec({13: s, 14: b}), xiang=6))
        h[13] = h[14] = 0
    top = chain_top(twos)
    r = 0
    while r <= top:
        if h[r] >= 4:
            hi = r
            while hi + 1 <= top and h[hi + 1] >= 4:
                hi += 1
            k = hi - r + 1
            if k >= 3:  # three bombs or more in a row
                sizes = tuple(h[r:hi + 1])
                m = min(sizes)
                out.append(Combo("chain_bomb", hi, sum(sizes), _vec({x: h[x] for x in range(r, hi + 1)}),
                                 xiang=m + k, chain=k, m=m, regular=all(z == m for z in sizes),
                                 bomb_sizes=sizes))
                for x in range(r, hi + 1):
                    h[x] = 0
            r = hi + 1
        else:
            r += 1
    for r in range(13):
        if h[r] >= 4:
            out.append(Combo("bomb", r, h[r], _vec({r: h[r]}), xiang=h[r]))
            h[r] = 0
    return out


def _take_sequences(h: list[int], which: int) -> list[Combo]:
    """Take the sequences of one kind out of ``h`` (3..A only, R-2.2), lowest first.

    A straight grows over lone cards only (it must not split a pair or a triple); the
    runs grow as long as they can."""
    kind, per, min_len = _SEQ[which]
    out: list[Combo] = []
    lo = 0
    while lo <= ACE - min_len + 1:
        hi = lo
        while hi <= ACE and h[hi] >= per:
            hi += 1
        if hi - lo < min_len:
            lo = hi + 1 if hi > lo else lo + 1
            continue
        end = lo + min_len - 1
        while end + 1 < hi and (per > 1 or h[end + 1] == 1):
            end += 1
        v = [0] * 15
        for r in range(lo, end + 1):
            h[r] -= per
            v[r] = per
        out.append(Combo(kind, end, per * (end - lo + 1), tuple(v)))
    return out


def _sets(h: list[int]) -> list[Combo]:
    """Triples, pairs and singles of what is left (jokers as themselves, R-4.1, R-4.2)."""
    out: list[Combo] = []
    for r in range(15):
        n = h[r]
        if n >= 3 and r < 13:
            out.append(Combo("triple", r, 3, _vec({r: 3})))
            n -= 3
        if n >= 2:
            out.append(Combo("pair", r, 2, _vec({r: 2})))
            n -= 2
        if n == 1:
            out.append(Combo("single", r, 1, _vec({r: 1})))
    return out


def _sets_cost(h: Sequence[int]) -> tuple[int, int]:
    """:func:`_cost` of :func:`_sets` of ``h`` without building the groups."""
    groups = low = 0
    for r in range(15):
        n = h[r]
        if n >= 3 and r < 13:
            groups += 1
            n -= 3
        if n >= 2:
            groups += 1
            n -= 2
        if n == 1:
            groups += 1
            low += r < ACE
    return groups, low


def _cost(groups: Sequence[Combo]) -> tuple[int, int]:
    """Fewer plays first, then fewer low singles (each needs the lead to get rid of)."""
    return (len(groups), sum(1 for g in groups if g.kind == "single" and g.top < ACE))


def plan(h: Sequence[int], twos: bool = True) -> list[Combo]:
    """The groups the hand will be played as: bombs first, then the rest weakest
    first.  Deterministic (cached: a search plans the same hands again and again)."""
    return list(_plan(tuple(h), twos))


@lru_cache(maxsize=1 << 16)
def _plan(h: Counts, twos: bool) -> tuple[Combo, ...]:
    rest = list(h)
    bombs = _bombs(rest, twos)
    best: list[Combo] | None = None
    best_cost = (99, 99)
    for order in _ORDERS:
        v = rest[:]
        groups: list[Combo] = []
        for which in order:
            groups.extend(_take_sequences(v, which))
        k, low = _sets_cost(v)  # a sequence is never a single: the sets' cost completes _cost
        c = (len(groups) + k, low)
        if c < best_cost:
            best, best_cost, left = groups, c, v
    assert best is not None
    best.extend(_sets(left))
    best.sort(key=lambda g: (g.top, -g.size))
    return (*bombs, *best)


def plays_left(h: Sequence[int], twos: bool = True) -> int:
    """How many plays the hand needs by its plan, bombs not counted."""
    return sum(1 for g in plan(h, twos) if not g.is_bomb)


def _lead_key(g: Combo) -> float:
    return g.top - 0.3 * g.size


def _weakest(groups: Iterable[Combo], heavenly: HeavenlyPosition) -> Combo:
    return min(groups, key=lambda g: strength_key(g, heavenly))


def follow_plan(h: Sequence[int], groups: Sequence[Combo], prev: Combo | None, opponent_cards: int,
                heavenly: HeavenlyPosition = "top", twos: bool = True) -> Combo | None:
    """The plan policy's play (None: pass) for hand ``h`` planned as ``groups``.

    Every play returned is legal: a group of the plan (whole natural combinations, or a
    bomb), or a same-kind natural play from the move generator.
    """
    plain: list[Combo] = []
    bombs: list[Combo] = []
    for g in groups:  # one pass (a playout calls this at every move)
        (bombs if g.kind in BOMB_KINDS else plain).append(g)
    if prev is None:
        if len(groups) == 1:
            return groups[0]
        if len(plain) <= 1 and bombs:
            return _weakest(bombs, heavenly)  # the opponent needs a bigger bomb; then the last group
        if opponent_cards <= 2:
            # never lead what the opponent can answer with all their cards
            safe = [g for g in plain if g.size != opponent_cards]
            if safe:
                return min(safe, key=_lead_key)
            return max(plain, key=lambda g: g.top)
        return min(plain, key=_lead_key)
    if not prev.is_bomb:
        same = [g for g in plain if g.kind == prev.kind and g.size == prev.size and g.top > prev.top]
        if same:
            return min(same, key=lambda g: g.top)
        # break a group: the weakest natural same-kind play, if it costs no extra play
        if prev.kind in ("single", "pair", "triple") or len(plain) > 1:
            cand = [c for c in legal_plays_counts(h, prev, heavenly, chain_bomb_twos=twos)
                    if not c.is_bomb and c.jokers_as == () and not _takes_bomb(c, bombs)]
            if cand:
                c = min(cand, key=lambda g: g.top)
                after = remove(h, c.counts)
                if opponent_cards <= _BOMB_LOW or plays_left(after, twos) <= len(plain):
                    return c
        if bombs and (opponent_cards <= _BOMB_LOW or len(plain) <= _NEAR_OUT):
            return _weakest(bombs, heavenly)
        return None
    answers = [g for g in bombs if beats(g, prev, heavenly)]
    if answers and (opponent_cards <= _BOMB_LOW or len(plain) <= _NEAR_OUT):
        return _weakest(answers, heavenly)
    return None


def _takes_bomb(c: Combo, bombs: Sequence[Combo]) -> bool:
    """Does the play use a card of one of the plan's bombs?"""
    return any(c.counts[r] and b.counts[r] for b in bombs for r in range(15))
