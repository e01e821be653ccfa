"""Classification of played cards (R-2.2, R-3, R-4): engine.rules.classify.classify.

Each row: (cards, kind, rank label of the top rank, xiang, chain k, regular, rule id).
``kind None`` means the cards are no combination.  Every row is also checked
against the brute-force oracle (tests/rules_oracle.py).
"""

from __future__ import annotations

import pytest

from engine.rules.cards import RANK_LABELS, parse_cards
from engine.rules.combo import strength_key
from engine.rules.classify import (
    beats,
    classify,
    classify_counts,
    counts_for,
    interpretations,
    interpretations_for_counts,
)
try:
    from tests.rules_oracle import oracle_readings
except ImportError:  # tests/ is not a package: pytest put it on sys.path
    from rules_oracle import oracle_readings  # type: ignore[no-redef]

S, P, T, B, CB = "single", "pair", "triple", "bomb", "chain_bomb"
ST, PR, TR = "straight", "pair_run", "triple_run"
J3, J4 = "three_jokers", "four_jokers"
N = None

ROWS = [
    # --- singles
    ("3", S, "3", N, N, N, "R-3.1"),
    ("10", S, "10", N, N, N, "R-3.1"),
    ("T", S, "10", N, N, N, "R-3.1"),
    ("KH", S, "K", N, N, N, "R-3.1"),
    ("A", S, "A", N, N, N, "R-3.1"),
    ("2", S, "2", N, N, N, "R-3.1"),
    ("SJ", S, "SJ", N, N, N, "R-4.1"),
    ("BJ", S, "BJ", N, N, N, "R-4.1"),
    # --- pairs
    ("3 3", P, "3", N, N, N, "R-3.2"),
    ("2 2", P, "2", N, N, N, "R-3.2"),
    ("SJ SJ", P, "SJ", N, N, N, "R-3.2 R-4.2"),
    ("BJ BJ", P, "BJ", N, N, N, "R-3.2 R-4.2"),
    ("5 BJ", P, "5", N, N, N, "R-4.4"),
    ("2 SJ", P, "2", N, N, N, "R-4.3 R-4.4"),
    ("A BJ", P, "A", N, N, N, "R-4.4"),
    ("3 4", N, N, N, N, N, "R-3.2"),
    ("2 3", N, N, N, N, N, "R-3.2"),
    ("SJ BJ", N, N, N, N, N, "R-4.2 decision"),
    # --- triples
    ("3 3 3", T, "3", N, N, N, "R-3.4"),
    ("2 2 2", T, "2", N, N, N, "R-3.4"),
    ("5 5 SJ", T, "5", N, N, N, "R-4.4"),
    ("9 SJ BJ", T, "9", N, N, N, "R-4.4"),
    ("3 SJ BJ", T, "3", N, N, N, "R-4.2 R-4.4"),
    ("2 BJ BJ", T, "2", N, N, N, "R-4.3"),
    ("3 3 4", N, N, N, N, N, "R-3.4"),
    ("3 3 3 4", N, N, N, N, N, "R-3.4 three-with-one"),
    ("3 3 3 4 4", N, N, N, N, N, "R-3.4 three-with-two"),
    ("9 9 9 K K", N, N, N, N, N, "R-3.4 three-with-two"),
    ("3 3 3 4 BJ", N, N, N, N, N, "R-3.4 R-4.5"),
    ("4 4 4 5 5 5", N, N, N, N, N, "R-3.5 two triples"),
    ("4 4 4 5 5 BJ", N, N, N, N, N, "R-3.5 two triples"),
    ("Q Q Q K K K", N, N, N, N, N, "R-3.5 two triples"),
    ("3 3 3 4 4 4 BJ", N, N, N, N, N, "R-3.5 R-4.5"),
    # --- joker-only bombs
    ("SJ SJ BJ", J3, "BJ", 6, N, N, "R-3.8"),
    ("SJ BJ BJ", J3, "BJ", 6, N, N, "R-3.8"),
    ("SJ SJ BJ BJ", J4, "BJ", 7, N, N, "R-3.9"),
    # --- single-rank bombs
    ("4 4 4 4", B, "4", 4, N, N, "R-3.7"),
    ("2 2 2 2", B, "2", 4, N, N, "R-3.7"),
    ("BJ 2 2 2", B, "2", 4, N, N, "R-4.3"),
    ("4 4 4 BJ", B, "4", 4, N, N, "R-4.3"),
    ("4 4 4 4 BJ", B, "4", 5, N, N, "R-4.3"),
    ("3 3 3 3 3", B, "3", 5, N, N, "R-3.7"),
    ("7 7 7 7 7 7", B, "7", 6, N, N, "R-3.7"),
    ("3 3 3 3 3 3", B, "3", 6, N, N, "R-3.7 R-5"),
    ("3 3 3 3 3 3 3", B, "3", 7, N, N, "R-3.7 R-5"),
    ("7 7 7 7 7 7 7", B, "7", 7, N, N, "R-3.7"),
    ("8 8 8 8 8 8 8 8", B, "8", 8, N, N, "R-3.7"),
    ("8 8 8 8 8 8 8 8 BJ", B, "8", 9, N, N, "R-4.3"),
    ("8 8 8 8 8 8 8 8 SJ BJ", B, "8", 10, N, N, "R-3.7"),
    ("8 8 8 8 8 8 8 8 SJ SJ BJ", B, "8", 11, N, N, "R-3.7"),
    ("8 8 8 8 8 8 8 8 SJ SJ BJ BJ", B, "8", 12, N, N, "R-3.7"),
    ("2 2 2 2 2 2 2 2 SJ SJ BJ BJ", B, "2", 12, N, N, "R-3.7 R-4.3"),
    ("A A A A A A A A SJ", B, "A", 9, N, N, "R-3.7"),
    ("3 3 3 3 3 3 SJ SJ BJ BJ", B, "3", 10, N, N, "R-3.7"),
    ("Q Q Q Q Q SJ BJ", B, "Q", 7, N, N, "R-3.7"),
    ("J J J J J J J J BJ", B, "J", 9, N, N, "R-3.7"),
    ("A A SJ BJ", B, "A", 4, N, N, "R-4.3"),
    ("K SJ SJ BJ", B, "K", 4, N, N, "R-4.3"),
    ("2 2 SJ BJ", B, "2", 4, N, N, "R-4.3"),
    ("2 SJ SJ BJ BJ", B, "2", 5, N, N, "R-4.3 R-2.2"),
    ("5 SJ SJ BJ BJ", B, "5", 5, N, N, "R-4.6"),
    ("5 5 SJ SJ BJ BJ", B, "5", 6, N, N, "R-4.6"),
    ("3 3 3 3 4", N, N, N, N, N, "R-3.7 R-4.5"),
    ("3 3 3 3 4 4", N, N, N, N, N, "R-3.7 R-4.5"),
    # --- straights
    ("3 4 5 6 7", ST, "7", N, N, N, "R-3.6"),
    ("4 5 6 7 8", ST, "8", N, N, N, "R-3.6"),
    ("10 J Q K A", ST, "A", N, N, N, "R-3.6 R-2.2"),
    ("3 4 5 6 7 8 9 10 J Q K A", ST, "A", N, N, N, "R-3.6"),
    ("3S 4S 5S 6S 7S", ST, "7", N, N, N, "R-1.6"),
    ("J Q K A 2", N, N, N, N, N, "R-2.2"),
    ("2 3 4 5 6", N, N, N, N, N, "R-2.2"),
    ("A 2 3 4 5", N, N, N, N, N, "R-2.2"),
    ("9 10 J Q K A 2", N, N, N, N, N, "R-2.2"),
    ("Q K A 2 BJ", N, N, N, N, N, "R-2.2 R-4.3"),
    ("3 4 5 6", N, N, N, N, N, "R-3.6"),
    ("3 4 5 6 8", N, N, N, N, N, "R-3.6"),
    ("3 4 5 6 7 7", N, N, N, N, N, "R-3.6"),
    ("3 4 5 8 BJ", N, N, N, N, N, "R-3.6 R-4.5"),
    ("5 6 7 9 BJ", ST, "9", N, N, N, "R-4.3"),
    ("5 6 7 8 BJ", ST, "9", N, N, N, "R-4.6"),
    ("3 4 5 6 BJ", ST, "7", N, N, N, "R-4.3 joker at the top end"),
    ("4 5 6 7 BJ", ST, "8", N, N, N, "R-4.6 joker at the top end"),
    ("J Q K A BJ", ST, "A", N, N, N, "R-4.3 R-2.2 joker at the low end"),
    ("10 J Q K BJ", ST, "A", N, N, N, "R-4.6"),
    ("3 5 6 7 BJ", ST, "7", N, N, N, "R-4.3 joker in the middle"),
    ("K A SJ SJ BJ", ST, "A", N, N, N, "R-4.3 jokers at the low end"),
    ("3 4 5 SJ BJ", ST, "7", N, N, N, "R-4.3"),
    ("5 6 7 8 SJ BJ", ST, "10", N, N, N, "R-4.6"),
    ("3 4 6 8 SJ BJ", ST, "8", N, N, N, "R-4.3"),
    ("3 4 5 6 7 8 9 10 J Q K BJ", ST, "A", N, N, N, "R-4.3"),
    ("4 5 6 7 8 9 10 J Q K A BJ", ST, "A", N, N, N, "R-4.3 joker as 3"),
    ("3 4 5 6 7 8 9 10 J Q K A BJ", N, N, N, N, N, "R-2.2 no 13-card straight"),
    ("3 4 5 6 7 8 9 10 J Q K 2", N, N, N, N, N, "R-2.2"),
    # --- pair runs
    ("4 4 5 5 6 6", PR, "6", N, N, N, "R-3.3"),
    ("J J Q Q K K A A", PR, "A", N, N, N, "R-3.3"),
    ("3 3 4 4 5 5 6 6 7 7 8 8 9 9 10 10 J J Q Q K K A A", PR, "A", N, N, N, "R-3.3"),
    ("3 3 4 4", N, N, N, N, N, "R-3.3"),
    ("3 3 4 4 5 BJ", PR, "5", N, N, N, "R-4.3"),
    ("3 3 4 4 BJ", N, N, N, N, N, "R-4.5"),
    ("3 3 4 4 SJ BJ", PR, "5", N, N, N, "R-4.3"),
    ("Q Q K K BJ BJ", PR, "A", N, N, N, "R-4.6"),
    ("5 5 6 BJ 7 7", PR, "7", N, N, N, "R-4.3 joker in the middle"),
    ("4 4 5 5 6 6 SJ BJ", PR, "7", N, N, N, "R-4.6"),
    ("3 3 5 5 6 6 SJ BJ", PR, "6", N, N, N, "R-4.3"),
    ("4 4 5 5 6 6 SJ SJ BJ BJ", PR, "8", N, N, N, "R-4.6"),
    ("3 4 5 SJ SJ BJ", PR, "5", N, N, N, "D-1 pair run preferred (docs/RULES.md)"),
    ("K K A A 2 2", N, N, N, N, N, "R-2.2"),
    ("A A 2 2 3 3", N, N, N, N, N, "R-2.2"),
    ("3 3 5 5 6 6", N, N, N, N, N, "R-3.3"),
    ("5 5 6 6 7 7 7", N, N, N, N, N, "R-3.3"),
    ("3 3 4 4 5 5 6", N, N, N, N, N, "R-3.3"),
    ("K K A A BJ BJ", PR, "A", N, N, N, "R-4.3 R-2.2"),
    # --- triple runs
    ("4 4 4 5 5 5 6 6 6", TR, "6", N, N, N, "R-3.5"),
    ("J J J Q Q Q K K K A A A", TR, "A", N, N, N, "R-3.5"),
    ("3 3 3 4 4 4 5 5 5 6 6 6 7 7 7", TR, "7", N, N, N, "R-3.5"),
    ("4 4 4 5 5 5 6 6 BJ", TR, "6", N, N, N, "R-4.4"),
    ("4 4 4 6 6 6 SJ SJ BJ", TR, "6", N, N, N, "R-4.4 joker triple"),
    ("4 4 4 5 5 5 SJ SJ BJ", TR, "6", N, N, N, "R-4.6"),
    ("3 3 3 4 4 4 5 5 SJ BJ 6 6", TR, "6", N, N, N, "R-4.4"),
    ("K K K A A A 2 2 2", N, N, N, N, N, "R-2.2"),
    ("Q Q Q K K K A A A 2 2 2", N, N, N, N, N, "R-2.2"),
    ("4 4 4 5 5 5 6 6 6 7", N, N, N, N, N, "R-3.5 R-4.5"),
    ("4 4 4 5 5 5 7 7 7", N, N, N, N, N, "R-3.5"),
    # --- chain bombs
    ("3 3 3 3 4 4 4 4 5 5 5 5", CB, "5", 7, 3, True, "R-3.10"),
    ("3 3 3 3 4 4 4 4 5 5 5 BJ", CB, "5", 7, 3, True, "R-4.3"),
    ("4 4 4 4 5 5 5 5 5 6 6 6 6 6", CB, "6", 7, 3, False, "R-3.10 irregular"),
    ("4 4 4 4 5 5 5 5 6 6 6 6 6", CB, "6", 7, 3, False, "R-3.10 R-5.5"),
    ("7 7 7 7 8 8 8 8 8 9 9 9 9 9", CB, "9", 7, 3, False, "R-5.5"),
    ("4 4 4 4 SJ SJ BJ BJ 6 6 6 6", CB, "6", 7, 3, True, "R-4.4 joker bomb"),
    ("4 4 4 4 5 5 5 5", N, N, N, N, N, "R-3.10 no two-bomb chain"),
    ("4 4 4 4 5 5 5 BJ", N, N, N, N, N, "R-3.10 no two-bomb chain"),
    ("4 4 4 4 5 5 5 5 SJ SJ BJ", N, N, N, N, N, "R-3.10 R-4.5"),
    ("4 4 4 4 5 5 5 5 6 6 6", N, N, N, N, N, "R-3.10"),
    ("5 5 5 5 5 6 6 6 6 6 7 7 7 7 7", CB, "7", 8, 3, True, "R-5.3"),
    ("7 7 7 7 7 8 8 8 8 8 9 9 9 9 9", CB, "9", 8, 3, True, "R-5.5"),
    ("4 4 4 4 5 5 5 5 6 6 6 6 7 7 7 7", CB, "7", 8, 4, True, "R-5.3"),
    ("J J J J Q Q Q Q K K K K A A A A", CB, "A", 8, 4, True, "R-3.10"),
    ("Q Q Q Q K K K K A A A A", CB, "A", 7, 3, True, "R-3.10 R-2.2"),
    ("K K K K A A A A 2 2 2 2", CB, "2", 7, 3, True, "R-2.2 R-3.10 a chain bomb may run to 2"),
    ("A A A A 2 2 2 2 3 3 3 3", N, N, N, N, N, "R-2.2 no wrap-around"),
    ("K K K K A A A A 2 2 2 BJ", CB, "2", 7, 3, True, "R-2.2 R-4.3 a joker stands for 2 in a chain"),
    ("4 4 4 4 5 5 5 5 6 6 6 6 BJ", CB, "6", 7, 3, False, "R-4.4 extra joker"),
    ("4 4 4 4 5 5 5 5 SJ SJ BJ BJ", CB, "6", 7, 3, True, "R-4.4 R-4.6"),
    ("4 4 4 4 5 5 5 5 5 5 6 6 6 6 6 6", CB, "6", 7, 3, False, "R-3.10"),
    ("3 3 3 3 3 3 3 3 4 4 4 4 5 5 5 5", CB, "5", 7, 3, False, "R-3.10"),
    ("3 3 3 3 4 4 4 4 5 5 5 5 SJ", CB, "5", 7, 3, False, "R-4.4"),
    ("3 3 3 3 4 4 4 4 5 5 5 5 SJ SJ BJ BJ", CB, "6", 8, 4, True, "R-4.4 R-4.6"),
    ("3 3 3 3 5 5 5 5 6 6 6 6", N, N, N, N, N, "R-3.10"),
    ("3 3 3 3 5 5 5 5 6 6 6 6 SJ SJ BJ BJ", CB, "6", 8, 4, True, "R-4.4"),
    ("4 4 4 4 5 5 5 5 6 6 6 BJ", CB, "6", 7, 3, True, "R-4.3 joker at the top"),
    ("5 5 5 BJ 6 6 6 6 7 7 7 7", CB, "7", 7, 3, True, "R-4.3 joker at the bottom"),
    ("3 3 3 4 4 4 5 5 5 SJ SJ BJ", CB, "5", 7, 3, True, "R-4.6 D-1 bomb over triple run"),
    ("4 4 4 4 4 4 4 4 5 5 5 5 5 5 5 5 6 6 6 6 6 6 6 6", CB, "6", 11, 3, True, "R-3.10"),
    ("3 3 3 3 4 4 4 4 5 5 5 5 6 6 6 6 6", CB, "6", 8, 4, False, "R-3.10"),
    ("5 5 5 5 5 6 6 6 6 6 7 7 7 7 7 7", CB, "7", 8, 3, False, "R-3.10"),
    ("3 3 3 3 4 4 4 4 5 5 5 5 6 6 6 6 7 7 7 7", CB, "7", 9, 5, True, "R-3.10"),
    ("8 8 8 8 9 9 9 9 10 10 10 10 J J J J", CB, "J", 8, 4, True, "R-3.10"),
    ("9 9 9 9 10 10 10 10 J J J J Q Q Q BJ", CB, "Q", 8, 4, True, "R-4.3"),
    # --- other non-combinations
    ("5 5 6 6 7 7 8", N, N, N, N, N, "R-3"),
    ("6 6 6 6 7 7 7 7 8 8 8 8 9", N, N, N, N, N, "R-3.10 R-4.5"),
    ("A A A A A A A A 2", N, N, N, N, N, "R-3.7 R-4.5"),
    ("4 4 4 4 5", N, N, N, N, N, "R-3"),
    ("4 4 SJ BJ 5", N, N, N, N, N, "R-4.5"),
    ("3 4 SJ BJ", N, N, N, N, N, "R-4.5"),
    ("3 SJ", P, "3", N, N, N, "R-4.4"),
    ("2 2 2 SJ SJ BJ BJ", B, "2", 7, N, N, "R-4.3"),
    ("6 6 6 6 6 6 6 6 SJ SJ", B, "6", 10, N, N, "R-4.3"),
]


def _row_id(row: tuple) -> str:
    return f"{row[0]} [{row[6]}]"


# R-2.2 (config ``chain_bomb_twos``): chain bombs may run up to 2; off = 3…A only.
# (cards, chain_bomb_twos, kind, rank, xiang, chain k, regular, rule id)
CHAIN_TWOS_ROWS = [
    ("K K K K A A A A 2 2 2 2", True, CB, "2", 7, 3, True, "R-2.2 R-3.10"),
    ("K K K K A A A A 2 2 2 2", False, N, N, N, N, N, "R-2.2 config off"),
    ("K K K K A A A BJ 2 2 2 2", True, CB, "2", 7, 3, True, "R-2.2 R-4.3 joker for A"),
    ("K K K K A A A A 2 2 2 BJ", True, CB, "2", 7, 3, True, "R-2.2 R-4.3 joker for 2"),
    ("K K K K A A A A 2 2 2 BJ", False, N, N, N, N, N, "R-2.2 config off"),
    ("K K K K SJ SJ BJ BJ 2 2 2 2", True, CB, "2", 7, 3, True, "R-2.2 R-4.4 jokers supply the As"),
    ("Q Q Q Q K K K K A A A A 2 2 2 2", True, CB, "2", 8, 4, True, "R-2.2 4-chain to 2"),
    ("Q Q Q Q K K K K A A A A 2 2 2 2", False, N, N, N, N, N, "R-2.2 config off"),
    ("K K K K K A A A A 2 2 2 2 2", True, CB, "2", 7, 3, False, "R-2.2 irregular chain to 2"),
    ("A A A A 2 2 2 2 3 3 3 3", True, N, N, N, N, N, "R-2.2 no wrap-around"),
    ("2 2 2 2 3 3 3 3 4 4 4 4", True, N, N, N, N, N, "R-2.2 no wrap-around"),
    ("A A A A 2 2 2 2", True, N, N, N, N, N, "R-2.2 R-3.10 still no two-bomb chain"),
    ("A A A A 2 2 2 2 SJ SJ BJ BJ", True, CB, "2", 7, 3, True, "R-2.2 R-4.4 jokers supply the Ks (R-4.6)"),
    ("A A A A 2 2 2 2 SJ SJ BJ BJ", False, N, N, N, N, N, "R-2.2 config off"),
    ("Q Q Q Q K K K K A A A A", False, CB, "A", 7, 3, True, "R-2.2 config off: 3…A chains stay"),
    ("K K A A 2 2", True, N, N, N, N, N, "R-2.2 pair runs never hold a 2"),
    ("K K K A A A 2 2 2", True, N, N, N, N, N, "R-2.2 triple runs never hold a 2"),
    ("J Q K A 2", True, N, N, N, N, N, "R-2.2 straights never hold a 2"),
    ("Q K A BJ BJ", True, ST, "A", N, N, N, "R-2.2 R-4.3 no joker as 2 in a straight"),
]


@pytest.mark.parametrize("row", CHAIN_TWOS_ROWS, ids=[f"{r[0]} twos={r[1]} [{r[7]}]" for r in CHAIN_TWOS_ROWS])
def test_classify_chain_bomb_twos(row: tuple) -> None:
    text, twos, kind, rank, xiang, chain, regular, _rule = row
    c = classify(text, chain_bomb_twos=twos)
    counts = counts_for(text)
    assert set(interpretations_for_counts(counts, chain_bomb_twos=twos)) == oracle_readings(counts, twos)
    if kind is None:
        assert c is None, c
        assert interpretations(text, chain_bomb_twos=twos) == []
        return
    assert c is not None
    assert (c.kind, c.rank, c.xiang, c.chain, c.regular) == (kind, rank, xiang, chain, regular)


def test_chain_bomb_twos_cache_keys_on_the_flag() -> None:
    """The lru cache must not hand a reading made under one R-2.2 setting to the other."""
    counts = counts_for("K K K K A A A A 2 2 2 2")
    on = interpretations_for_counts(counts, chain_bomb_twos=True)
    off = interpretations_for_counts(counts, chain_bomb_twos=False)
    assert on and not off
    assert interpretations_for_counts(counts, chain_bomb_twos=True) is on
    assert interpretations_for_counts(counts) == on                # default: on


def test_table_is_big_enough() -> None:
    assert len(ROWS) >= 150
    assert len({r[0] for r in ROWS}) == len(ROWS), "duplicate rows"


@pytest.mark.parametrize("row", ROWS, ids=_row_id)
def test_classify(row: tuple) -> None:
    text, kind, rank, xiang, chain, regular, _rule = row
    c = classify(text)
    if kind is None:
        assert c is None, c
        assert interpretations(text) == []
        return
    assert c is not None
    assert (c.kind, c.rank, c.xiang, c.chain, c.regular) == (kind, rank, xiang, chain, regular)
    assert c.size == len(parse_cards(text))
    assert c.counts == counts_for(text)


@pytest.mark.parametrize("row", ROWS, ids=_row_id)
def test_table_agrees_with_oracle(row: tuple) -> None:
    """The hand-written expectations and the brute-force oracle agree."""
    text = row[0]
    counts = counts_for(text)
    fast = interpretations_for_counts(counts)
    oracle = oracle_readings(counts)
    assert set(fast) == oracle
    if oracle:
        assert strength_key(fast[0]) == max(strength_key(o) for o in oracle)


# --- details of single readings ---------------------------------------------

def _labels(ranks: tuple[int, ...]) -> list[str]:
    return [RANK_LABELS[r] for r in ranks]


@pytest.mark.parametrize("text, jokers_as, bomb_sizes", [
    ("BJ 2 2 2", ["2"], ()),
    ("5 6 7 9 BJ", ["8"], ()),
    ("5 6 7 8 BJ", ["9"], ()),
    ("3 3 4 4 5 BJ", ["5"], ()),
    ("3 3 3 3 4 4 4 4 5 5 5 BJ", ["5"], (4, 4, 4)),
    ("4 4 4 4 SJ SJ BJ BJ 6 6 6 6", ["5", "5", "5", "5"], (4, 4, 4)),
    ("4 4 4 4 5 5 5 5 5 6 6 6 6 6", [], (4, 5, 5)),
    ("SJ SJ BJ", [], ()),                                    # never wild
    ("SJ SJ", [], ()),
    ("J Q K A BJ", ["10"], ()),
])
def test_jokers_as_and_bomb_sizes(text: str, jokers_as: list[str], bomb_sizes: tuple) -> None:
    c = classify(text)
    assert c is not None
    assert _labels(c.jokers_as) == jokers_as
    assert c.bomb_sizes == bomb_sizes
    joker_only = c.jokers == c.size   # jokers alone are never wild
    assert len(c.jokers_as) == (0 if joker_only else c.jokers)


def test_irregular_chain_fields() -> None:
    c = classify("4 4 4 4 5 5 5 5 5 6 6 6 6 6")    # example
    assert c is not None
    assert (c.m, c.chain, c.xiang, c.regular, c.size) == (4, 3, 7, False, 14)


def test_all_readings_of_5678_joker() -> None:
    # 5678+BJ is 56789, but 45678 is also a reading
    rs = interpretations("5 6 7 8 BJ")
    assert [(r.kind, r.rank) for r in rs] == [("straight", "9"), ("straight", "8")]


def test_several_kinds_from_the_same_cards() -> None:
    # 3 4 5 + three jokers: pair run 334455 and straight 345678
    rs = interpretations("3 4 5 SJ SJ BJ")
    assert [(r.kind, r.rank) for r in rs] == [("pair_run", "5"), ("straight", "8")]
    # a bomb and straights from one natural card and four jokers
    rs = interpretations("5 SJ SJ BJ BJ")
    assert [(r.kind, r.rank, r.xiang) for r in rs] == [
        ("bomb", "5", 5), ("straight", "9", None), ("straight", "8", None), ("straight", "7", None)]


def test_chain_with_an_extra_joker_has_one_reading_per_bomb() -> None:
    rs = interpretations("4 4 4 4 5 5 5 5 6 6 6 6 BJ")
    assert sorted(r.bomb_sizes for r in rs) == [(4, 4, 5), (4, 5, 4), (5, 4, 4)]
    assert {(r.kind, r.xiang, r.m, r.regular) for r in rs} == {("chain_bomb", 7, 4, False)}


# --- classify(..., beat=...) (R-4.6, R-5) -----------------------------------

BEAT_ROWS = [
    # (cards, previous play, expected kind, expected rank) -- None: no reading beats
    ("5 6 7 8 BJ", "4 5 6 7 8", ST, "9"),
    ("5 6 7 8 BJ", "3 4 5 6 7", ST, "9"),
    ("5 6 7 8 BJ", "5 6 7 8 9", None, None),        # equal never beats
    ("5 6 7 8 BJ", "6 7 8 9 10", None, None),
    ("3 4 5 6 BJ", "3 4 5 6 7", None, None),        # the 3 must be used: only 34567
    ("4 5 6 7 BJ", "3 4 5 6 7", ST, "8"),
    ("4 5 6 SJ SJ BJ", "3 4 5 6 7 8", ST, "9"),      # straight reading chosen to follow
    ("4 5 6 SJ SJ BJ", "4 5 6 7 8 9", None, None),
    ("4 5 6 SJ SJ BJ", "3 3 4 4 5 5", PR, "6"),
    ("3 4 5 SJ SJ BJ", "3 3 4 4 5 5", None, None),
    ("3 4 5 SJ SJ BJ", "3 4 5 6 7 8", None, None),
    ("5 SJ SJ BJ BJ", "3 4 5 6 7", B, "5"),          # largest: the bomb
    ("5 SJ SJ BJ BJ", "4 4 4 4 4 4", None, None),
    ("5 SJ SJ BJ BJ", "5 5 5 5 5", None, None),
    ("6 SJ SJ BJ BJ", "5 5 5 5 5", B, "6"),
    ("4 4 4 4 5 5 5 5 SJ SJ BJ BJ", "3 3 3 3 4 4 4 4 5 5 5 5", CB, "6"),
    ("4 4 4 4 5 5 5 5 SJ SJ BJ BJ", "4 4 4 4 5 5 5 5 6 6 6 6", None, None),
    ("4 4 4 4 5 5 5 5 6 6 6 6 BJ", "7 7 7 7 7 7 7", None, None),    # fewer cards
    ("4 4 4 4 5 5 5 5 6 6 6 6 BJ", "3 3 3 3 4 4 4 4 5 5 5 5", None, None),
    ("4 4 4 4 5 5 5 5 6 6 6 6 BJ", "3 3 3 3 3 3", CB, "6"),
    ("BJ", "SJ", S, "BJ"),
    ("SJ", "2", S, "SJ"),
    ("2", "SJ", None, None),
    ("5 BJ", "4 4", P, "5"),
    ("5 BJ", "2 2", None, None),
    ("SJ SJ", "2 2", P, "SJ"),
    ("BJ BJ", "SJ SJ", P, "BJ"),
    ("4 4 4 BJ", "2 2 2", B, "4"),
    ("4 4 4 5 5 5 SJ SJ BJ", "3 3 3 4 4 4 5 5 5", TR, "6"),
    ("3 3 3 4 4 4 5 5 5 SJ SJ BJ", "J J J Q Q Q K K K A A A", CB, "5"),
]


@pytest.mark.parametrize("cards, prev, kind, rank", BEAT_ROWS)
def test_classify_beat(cards: str, prev: str, kind: str | None, rank: str | None) -> None:
    b = classify(prev)
    assert b is not None
    c = classify(cards, beat=b)
    if kind is None:
        assert c is None, c
        return
    assert c is not None and (c.kind, c.rank) == (kind, rank)
    assert beats(c, b)
    # it is the largest beating reading
    beating = [r for r in interpretations(cards) if beats(r, b)]
    assert all(strength_key(r) <= strength_key(c) for r in beating)


def test_heavenly_bottom_beat() -> None:
    seven = classify("7 7 7 7 7 7 7")
    assert classify("SJ SJ BJ BJ", beat=seven).kind == "four_jokers"
    assert classify("SJ SJ BJ BJ", beat=seven, heavenly="bottom") is None        # config


# --- API details --------------------------------------------------------------

def test_empty_and_ids_and_counts() -> None:
    assert classify("") is None
    assert classify([]) is None
    assert interpretations([]) == []
    ids = parse_cards("5 6 7 9 BJ")
    assert classify(ids) == classify("5 6 7 9 BJ")
    assert classify(tuple(ids)) == classify_counts(counts_for(ids))
    assert isinstance(interpretations_for_counts(counts_for(ids)), tuple)
    assert isinstance(interpretations(ids), list)


def test_bad_input() -> None:
    with pytest.raises(ValueError):
        classify([108])
    with pytest.raises(ValueError):
        classify([-1])
    with pytest.raises(ValueError):
        interpretations_for_counts((9,) + (0,) * 14)
    with pytest.raises(ValueError):
        interpretations_for_counts((0,) * 14)


def test_cache_returns_the_same_tuple() -> None:
    c = counts_for("3 4 5 6 BJ")
    assert interpretations_for_counts(c) is interpretations_for_counts(c)


@pytest.mark.parametrize("row", ROWS, ids=_row_id)
def test_interpretations_sorted_best_first_and_distinct(row: tuple) -> None:
    for heavenly in ("top", "bottom"):
        rs = interpretations(row[0], heavenly=heavenly)
        assert len(set(rs)) == len(rs)
        keys = [strength_key(r, heavenly) for r in rs]
        assert keys == sorted(keys, reverse=True)
        if rs:
            assert classify(row[0], heavenly=heavenly) == rs[0]


# --- the `shuangkou classify` command -------------------------------------------

def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, object, str]:
    import json

    from shuangkou.cli import main

    code = main(["classify", *argv])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if out.strip() else None), err


def test_cli_best_reading(capsys: pytest.CaptureFixture[str]) -> None:
    code, data, _ = _cli(capsys, "3", "4", "5", "6", "BJ")
    assert code == 0
    assert data["kind"] == "straight" and data["rank"] == "7" and data["jokers_as"] == ["7"]
    assert data["cards"] == "3 4 5 6 BJ" and data["size"] == 5


def test_cli_beat(capsys: pytest.CaptureFixture[str]) -> None:
    code, data, _ = _cli(capsys, "5 6 7 8 BJ", "--beat", "4 5 6 7 8")
    assert code == 0 and (data["kind"], data["rank"], data["beats"]) == ("straight", "9", True)
    # a valid combination that does not beat (R-5.1, R-5.6 strict): its reading and "beats": false
    code, data, _ = _cli(capsys, "5", "6", "7", "8", "BJ", "--beat", "5 6 7 8 9")
    assert code == 1 and data["beats"] is False and (data["kind"], data["rank"]) == ("straight", "9")
    assert (data["beat"]["kind"], data["beat"]["rank"]) == ("straight", "9")
    code, data, _ = _cli(capsys, "5 5", "--beat", "6 6")
    assert code == 1 and data["beats"] is False and data["describe"] == "pair of 5"
    # not a combination at all: "kind": null, and still "beats": false
    code, data, _ = _cli(capsys, "3 3 4 4 BJ", "--beat", "6 6")
    assert code == 1 and data["kind"] is None and data["beats"] is False
    # without --beat there is no "beats" key
    code, data, _ = _cli(capsys, "5 5")
    assert code == 0 and "beats" not in data


def test_cli_all(capsys: pytest.CaptureFixture[str]) -> None:
    code, data, _ = _cli(capsys, "--all", "5 6 7 8 BJ")
    assert code == 0
    assert [(r["kind"], r["rank"]) for r in data["readings"]] == [("straight", "9"), ("straight", "8")]
    code, data, _ = _cli(capsys, "--all", "3 3 4 4 BJ")
    assert code == 1 and data["readings"] == []


def test_cli_chain_and_heavenly(capsys: pytest.CaptureFixture[str]) -> None:
    code, data, _ = _cli(capsys, "4 4 4 4 5 5 5 5 5 6 6 6 6 6")
    assert code == 0
    assert (data["kind"], data["xiang"], data["chain"], data["regular"]) == ("chain_bomb", 7, 3, False)
    assert data["bomb_sizes"] == [4, 5, 5]
    code, data, _ = _cli(capsys, "SJ SJ BJ BJ", "--beat", "3 3 3 3 3 3 3", "--heavenly", "bottom")
    assert code == 1 and data["beats"] is False and data["kind"] == "four_jokers"  # bottom


def test_cli_not_a_combination(capsys: pytest.CaptureFixture[str]) -> None:
    code, data, _ = _cli(capsys, "3", "3", "4", "4", "BJ")
    assert code == 1 and data == {"cards": "3 3 4 4 BJ", "kind": None}


def test_cli_bad_token(capsys: pytest.CaptureFixture[str]) -> None:
    code, data, err = _cli(capsys, "3", "X")
    assert code == 2 and data is None
    assert err.count("\n") == 1 and "'X'" in err
    code, data, err = _cli(capsys, "3", "--beat", "3 Z")
    assert code == 2 and "'Z'" in err
    code, data, err = _cli(capsys, "3", "--beat", "3 4")   # the previous play must be a combination
    assert code == 2 and err.count("\n") == 1


def test_cli_chain_bomb_twos(capsys: pytest.CaptureFixture[str]) -> None:
    code, data, _ = _cli(capsys, "K K K K A A A A 2 2 2 2")
    assert code == 0 and (data["kind"], data["rank"], data["xiang"]) == ("chain_bomb", "2", 7)
    code, data, _ = _cli(capsys, "K K K K A A A A 2 2 2 2", "--no-chain-bomb-twos")
    assert code == 1 and data["kind"] is None
    code, data, _ = _cli(capsys, "K K K K A A A A 2 2 2 2", "--beat", "Q Q Q Q K K K K A A A A")
    assert code == 0 and data["beats"] is True
