"""A brute-force oracle for the combination rules (R-3, R-4), for tests only.

It knows nothing of deficits or windows.  Joker-only sets follow R-4.2 by a
plain table.  Otherwise every joker is substituted by every natural rank
3..2 (R-4.3, R-4.4: jokers are wild in every kind), and each resulting
*natural* multiset is read by the plain definitions of R-3 (with R-2.2: no 2
in a straight, pair run or triple run -- so a joker used as a 2 simply fails
there; chain bombs may end at 2 when ``chain_bomb_twos`` is on, at A when off).  The
readings of the original cards are the union over all substitutions.

It is slow on purpose (up to C(16, 4) = 1820 substitutions for four jokers)
and builds the same :class:`engine.rules.combo.Combo` values as ``engine.rules.classify``
so results compare with ``==``.
"""

from __future__ import annotations

from itertools import combinations_with_replacement

from engine.rules.combo import Combo

NATURAL = range(13)     # 3..2 (R-4.3: what a wild joker may stand for)
ACE = 11                # straights and runs end at A
TWO = 12                # chain bombs may end at 2 (chain_bomb_twos)


def _consecutive(ranks: list[int]) -> bool:
    return all(b == a + 1 for a, b in zip(ranks, ranks[1:]))


def natural_readings(nat: list[int], chain_bomb_twos: bool = True) -> list[tuple]:
    """Readings of a multiset of natural cards (counts over 3..2) by R-3 alone.

    Returns tuples (kind, top, size, xiang, chain, m, regular, bomb_sizes).
    """
    size = sum(nat)
    ranks = [r for r in NATURAL if nat[r]]
    cs = [nat[r] for r in ranks]
    out: list[tuple] = []
    if size == 1:
        out.append(("single", ranks[0], 1, None, None, None, None, ()))
    if len(ranks) == 1:
        if size == 2:
            out.append(("pair", ranks[0], 2, None, None, None, None, ()))
        elif size == 3:
            out.append(("triple", ranks[0], 3, None, None, None, None, ()))
        elif size >= 4:
            out.append(("bomb", ranks[0], size, size, None, None, None, ()))
    consecutive = bool(ranks) and _consecutive(ranks)
    if consecutive and ranks[-1] <= ACE:
        top = ranks[-1]
        if len(ranks) >= 5 and all(c == 1 for c in cs):
            out.append(("straight", top, size, None, None, None, None, ()))
        if len(ranks) >= 3 and all(c == 2 for c in cs):
            out.append(("pair_run", top, size, None, None, None, None, ()))
        if len(ranks) >= 3 and all(c == 3 for c in cs):
            out.append(("triple_run", top, size, None, None, None, None, ()))
    if consecutive and ranks[-1] <= (TWO if chain_bomb_twos else ACE):
        top = ranks[-1]
        if len(ranks) >= 3 and all(c >= 4 for c in cs):
            m = min(cs)
            out.append(("chain_bomb", top, size, m + len(ranks), len(ranks), m,
                        all(c == m for c in cs), tuple(cs)))
    return out


def oracle_readings(counts: tuple[int, ...], chain_bomb_twos: bool = True) -> set[Combo]:
    """Every reading of the cards with this 15-entry rank-count vector
    (``chain_bomb_twos``: the room's R-2.2 setting)."""
    counts = tuple(counts)
    sj, bj = counts[13], counts[14]
    j = sj + bj
    size = sum(counts)
    if size == 0:
        return set()
    if size == j:  # jokers alone are themselves
        if j == 1:
            return {Combo("single", 13 if sj else 14, 1, counts)}
        if j == 2:
            if sj == 1:
                return set()  # SJ + BJ: no combination (R-4.2 decision)
            return {Combo("pair", 13 if sj else 14, 2, counts)}
        if j == 3:
            return {Combo("three_jokers", 14 if bj else 13, 3, counts, xiang=6)}
        return {Combo("four_jokers", 14, 4, counts, xiang=7)}
    found: set[Combo] = set()
    base = list(counts[:13])
    for subst in combinations_with_replacement(NATURAL, j):
        nat = base[:]
        for r in subst:
            nat[r] += 1
        for kind, top, sz, xiang, chain, m, regular, sizes in natural_readings(nat, chain_bomb_twos):
            found.add(Combo(kind, top, sz, counts, xiang=xiang, chain=chain, m=m,
                            regular=regular, jokers_as=tuple(sorted(subst)),
                            bomb_sizes=sizes))
    return found
