"""Comparing plays (R-5): engine.rules.classify.beats on the best readings of two plays.

Each row: (a, b, does a beat b?, heavenly position, rule id); both plays are
read by ``classify`` (their best reading, R-4.6).
"""

from __future__ import annotations

import itertools

import pytest

from engine.rules.classify import beats, classify

TOP, BOTTOM = "top", "bottom"

CHAIN_4_5_6 = "4 4 4 4 5 5 5 5 6 6 6 6"                     # 7-xiang regular, 12 cards
CHAIN_3_4_5 = "3 3 3 3 4 4 4 4 5 5 5 5"
CHAIN_Q_K_A = "Q Q Q Q K K K K A A A A"
IRR_4_6 = "4 4 4 4 5 5 5 5 5 6 6 6 6 6"                     # irregular k3 m4, 14 cards
IRR_4_6_13 = "4 4 4 4 5 5 5 5 6 6 6 6 6"                    # irregular k3 m4, 13 cards
IRR_7_9 = "7 7 7 7 8 8 8 8 8 9 9 9 9 9"                     # irregular k3 m4, 14 cards
REG5_7_9 = "7 7 7 7 7 8 8 8 8 8 9 9 9 9 9"                  # regular k3 m5, 8-xiang
REG5_5_7 = "5 5 5 5 5 6 6 6 6 6 7 7 7 7 7"                  # regular k3 m5, 8-xiang, 15 cards
REG4x4_4_7 = "4 4 4 4 5 5 5 5 6 6 6 6 7 7 7 7"              # regular k4 m4, 8-xiang, 16 cards
REG4x4_3_6 = "3 3 3 3 4 4 4 4 5 5 5 5 6 6 6 6"
REG4x4_8_J = "8 8 8 8 9 9 9 9 10 10 10 10 J J J J"
REG4x4_J_A = "J J J J Q Q Q Q K K K K A A A A"
IRR5_5_7_16 = "5 5 5 5 5 6 6 6 6 6 7 7 7 7 7 7"            # irregular k3 m5, 8-xiang, 16 cards
IRR4x4_17 = "3 3 3 3 4 4 4 4 5 5 5 5 6 6 6 6 6"             # irregular k4 m4, 8-xiang, 17 cards
J3a, J3b, J4 = "SJ SJ BJ", "SJ BJ BJ", "SJ SJ BJ BJ"
IRR5_8_10 = "8 8 8 8 8 8 9 9 9 9 10 10 10 10 SJ SJ"       # irregular k3 m5, 8-xiang, 16 cards, to 10
REG4x4_6_9 = "6 6 6 6 7 7 7 7 8 8 8 9 9 9 9 SJ"            # regular k4 m4, 8-xiang, 16 cards, to 9
CHAIN_K_A_2 = "K K K K A A A A 2 2 2 2"                     # regular 3-chain to 2, 7-xiang

ROWS = [
    # --- same kind, same length, higher rank
    ("4", "3", True, TOP, "R-5.1"),
    ("3", "4", False, TOP, "R-5.1"),
    ("2", "A", True, TOP, "R-5.1 R-2.1"),
    ("A", "2", False, TOP, "R-5.1 R-2.1"),
    ("SJ", "2", True, TOP, "R-5.1 jokers above 2"),
    ("BJ", "SJ", True, TOP, "R-5.1"),
    ("SJ", "BJ", False, TOP, "R-5.1"),
    ("4 4", "3 3", True, TOP, "R-5.1"),
    ("3 3", "4 4", False, TOP, "R-5.1"),
    ("SJ SJ", "2 2", True, TOP, "R-5.1"),
    ("BJ BJ", "SJ SJ", True, TOP, "R-5.1"),
    ("2 2", "SJ SJ", False, TOP, "R-5.1"),
    ("5 BJ", "4 4", True, TOP, "R-5.1 R-4.4"),
    ("6 6", "5 BJ", True, TOP, "R-5.1 R-4.4"),
    ("5 5 5", "4 4 4", True, TOP, "R-5.1"),
    ("4 4 4", "5 5 5", False, TOP, "R-5.1"),
    ("2 2 2", "A A A", True, TOP, "R-5.1"),
    ("5 5 SJ", "4 4 4", True, TOP, "R-5.1 R-4.4"),
    ("4 5 6 7 8", "3 4 5 6 7", True, TOP, "R-5.1"),
    ("3 4 5 6 7", "4 5 6 7 8", False, TOP, "R-5.1"),
    ("10 J Q K A", "9 10 J Q K", True, TOP, "R-5.1"),
    ("5 6 7 8 BJ", "4 5 6 7 8", True, TOP, "R-5.1 R-4.6"),
    ("3 4 5 6 7 8", "4 5 6 7 8", False, TOP, "R-5.1 length"),
    ("4 5 6 7 8 9", "3 4 5 6 7", False, TOP, "R-5.1 length"),
    ("3 4 5 6 7", "4 5 6 7 8 9", False, TOP, "R-5.1 length"),
    ("5 5 6 6 7 7", "4 4 5 5 6 6", True, TOP, "R-5.1"),
    ("4 4 5 5 6 6", "5 5 6 6 7 7", False, TOP, "R-5.1"),
    ("Q Q K K A A", "J J Q Q K K", True, TOP, "R-5.1"),
    ("5 5 6 6 7 7", "4 4 5 5 6 6 7 7", False, TOP, "R-5.1 length"),
    ("5 5 6 6 7 7 8 8", "4 4 5 5 6 6", False, TOP, "R-5.1 length"),
    ("5 5 5 6 6 6 7 7 7", "4 4 4 5 5 5 6 6 6", True, TOP, "R-5.1"),
    ("4 4 4 5 5 5 6 6 6", "5 5 5 6 6 6 7 7 7", False, TOP, "R-5.1"),
    ("5 5 5 6 6 6 7 7 7 8 8 8", "4 4 4 5 5 5 6 6 6", False, TOP, "R-5.1 length"),
    # --- kinds must match
    ("3 3", "4", False, TOP, "R-5.1 kind"),
    ("4", "3 3", False, TOP, "R-5.1 kind"),
    ("3 3 4 4 5 5", "3 4 5 6 7 8", False, TOP, "R-5.1 kind"),
    ("4 5 6 7 8 9", "3 3 4 4 5 5", False, TOP, "R-5.1 kind"),
    ("4 4 4 5 5 5 6 6 6", "3 4 5 6 7 8 9 10 J", False, TOP, "R-5.1 kind"),
    ("SJ SJ", "A", False, TOP, "R-5.1 kind"),
    ("2 2 2", "3 3", False, TOP, "R-5.1 kind"),
    ("2 2", "3 3 3", False, TOP, "R-5.1 kind"),
    # --- equal never beats
    ("3", "3", False, TOP, "R-5.6"),
    ("BJ", "BJ", False, TOP, "R-5.6"),
    ("5 6 7 8 BJ", "5 6 7 8 9", False, TOP, "R-5.6"),
    ("4 4 4 4", "4 4 4 4", False, TOP, "R-5.6"),
    ("4 4 4 BJ", "4 4 4 4", False, TOP, "R-5.6 R-4.3"),
    (CHAIN_4_5_6, CHAIN_4_5_6, False, TOP, "R-5.6"),
    (J3a, J3b, False, TOP, "R-5.6 R-3.8"),
    (J3b, J3a, False, TOP, "R-5.6 R-3.8"),
    (J4, J4, False, TOP, "R-5.6"),
    # --- any bomb beats any non-bomb
    ("4 4 4 4", "2 2 2", True, TOP, "R-5.2"),
    ("2 2 2", "4 4 4 4", False, TOP, "R-5.2"),
    ("4 4 4 4", "BJ BJ", True, TOP, "R-5.2"),
    ("4 4 4 4", "3 4 5 6 7 8 9 10 J Q K A", True, TOP, "R-5.2"),
    ("3 4 5 6 7 8 9 10 J Q K A", "4 4 4 4", False, TOP, "R-5.2"),
    (J3a, "BJ BJ", True, TOP, "R-5.2"),
    (J3a, "BJ", True, TOP, "R-5.2"),
    ("BJ BJ", J3a, False, TOP, "R-5.2"),
    (CHAIN_3_4_5, "J J J Q Q Q K K K A A A", True, TOP, "R-5.2"),
    ("4 4 4 BJ", "2 2 2", True, TOP, "R-5.2 R-4.3"),
    (J4, "BJ", True, TOP, "R-5.2"),
    # --- higher xiang wins
    ("3 3 3 3 3", "2 2 2 2", True, TOP, "R-5.3"),
    ("2 2 2 2", "3 3 3 3 3", False, TOP, "R-5.3"),
    ("5 5 5 BJ", "4 4 4 4", True, TOP, "R-5.3"),
    ("4 4 4 4 BJ", "A A A A", True, TOP, "R-5.3 R-4.3"),
    ("8 8 8 8 8 8 8 8 BJ", "8 8 8 8 8 8 8 8", True, TOP, "R-5.3"),
    ("3 3 3 3 3 3 3 3 SJ SJ BJ BJ", "2 2 2 2 2 2 2 2 SJ SJ BJ", True, TOP, "R-5.3"),
    ("2 2 2 2 2 2 2 2 SJ SJ BJ", "3 3 3 3 3 3 3 3 SJ SJ BJ BJ", False, TOP, "R-5.3"),
    (CHAIN_3_4_5, "2 2 2 2 2 2", True, TOP, "R-5.3"),
    ("2 2 2 2 2 2", CHAIN_3_4_5, False, TOP, "R-5.3"),
    ("3 3 3 3 3 3 3 3", J4, True, TOP, "R-5.3"),
    (J4, "3 3 3 3 3 3 3 3", False, TOP, "R-5.3"),
    (REG4x4_3_6, J4, True, TOP, "R-5.3"),
    (REG5_7_9, CHAIN_Q_K_A, True, TOP, "R-5.3"),
    # --- same xiang: fewer cards wins, then rank
    ("5 5 5 5", "4 4 4 4", True, TOP, "R-5.3"),
    ("4 4 4 4", "5 5 5 5", False, TOP, "R-5.3"),
    ("2 2 2 2", "A A A A", True, TOP, "R-5.3"),
    ("3 3 3 3 3 3 3", CHAIN_Q_K_A, True, TOP, "R-5.3 fewer cards"),
    (CHAIN_Q_K_A, "3 3 3 3 3 3 3", False, TOP, "R-5.3 fewer cards"),
    ("3 3 3 3 3 3 3 3", REG4x4_4_7, True, TOP, "R-5.3 fewer cards"),
    (REG4x4_4_7, "3 3 3 3 3 3 3 3", False, TOP, "R-5.3 fewer cards"),
    (REG5_5_7, REG4x4_4_7, True, TOP, "R-5.3 example"),
    (REG4x4_4_7, REG5_5_7, False, TOP, "R-5.3 example"),
    (REG5_5_7, REG4x4_J_A, True, TOP, "R-5.3 fewer cards beat higher rank"),
    (CHAIN_4_5_6, CHAIN_3_4_5, True, TOP, "R-5.3 rank"),
    (CHAIN_3_4_5, CHAIN_4_5_6, False, TOP, "R-5.3 rank"),
    (CHAIN_Q_K_A, CHAIN_4_5_6, True, TOP, "R-5.3 rank"),
    (REG4x4_4_7, REG4x4_3_6, True, TOP, "R-5.3 rank"),
    (REG4x4_J_A, REG4x4_8_J, True, TOP, "R-5.3 rank"),
    (REG5_7_9, REG5_5_7, True, TOP, "R-5.3 rank"),
    (CHAIN_3_4_5, IRR_4_6_13, True, TOP, "R-5.3 fewer cards (regular 12 vs irregular 13)"),
    (IRR_4_6_13, CHAIN_3_4_5, False, TOP, "R-5.3 fewer cards"),
    ("3 3 3 3 3 3 3", IRR_4_6, True, TOP, "R-5.3 fewer cards"),
    (IRR_4_6, "3 3 3 3 3 3 3", False, TOP, "R-5.3 fewer cards"),
    (IRR_4_6, "A A A A A A", True, TOP, "R-5.3 xiang"),
    (IRR5_5_7_16, IRR_4_6, True, TOP, "R-5.3 xiang"),
    (IRR5_5_7_16, IRR4x4_17, True, TOP, "R-5.3 fewer cards (different k, m)"),
    (IRR4x4_17, IRR5_5_7_16, False, TOP, "R-5.3 fewer cards"),
    (IRR4x4_17, IRR_4_6_13, True, TOP, "R-5.3 xiang"),
    # --- three jokers: the smallest 6-xiang
    (J3a, "3 3 3 3 3", True, TOP, "R-5.4"),
    (J3a, "2 2 2 2 2", True, TOP, "R-5.4"),
    (J3b, "A A A A BJ", True, TOP, "R-5.4"),
    ("3 3 3 3 3 3", J3a, True, TOP, "R-5.4"),
    (J3a, "3 3 3 3 3 3", False, TOP, "R-5.4"),
    ("4 4 4 4 4 BJ", J3b, True, TOP, "R-5.4"),
    (J3b, "4 4 4 4 4 BJ", False, TOP, "R-5.4"),
    ("2 2 2 2 2", J3a, False, TOP, "R-5.4"),
    (J4, J3a, True, TOP, "R-5.4"),
    (J3a, J4, False, TOP, "R-5.4"),
    # --- heavenly bomb: largest 7-xiang (config: bottom = smallest)
    (J4, "3 3 3 3 3 3 3", True, TOP, "R-3.9"),
    (J4, "2 2 2 2 2 2 2", True, TOP, "R-3.9"),
    ("2 2 2 2 2 2 2", J4, False, TOP, "R-3.9"),
    (J4, CHAIN_3_4_5, True, TOP, "R-3.9"),
    (J4, CHAIN_Q_K_A, True, TOP, "R-3.9"),
    (J4, IRR_4_6, True, TOP, "R-3.9"),
    (CHAIN_Q_K_A, J4, False, TOP, "R-3.9"),
    (J4, "A A A A A A", True, TOP, "R-3.9"),
    (J4, "3 3 3 3 3 3 3", False, BOTTOM, "R-3.9 config"),
    ("3 3 3 3 3 3 3", J4, True, BOTTOM, "R-3.9 config"),
    (J4, CHAIN_3_4_5, False, BOTTOM, "R-3.9 config: below the 3-chain of 4s"),
    (CHAIN_3_4_5, J4, True, BOTTOM, "R-3.9 config"),
    (J4, IRR_4_6, False, BOTTOM, "R-3.9 config"),
    (IRR_4_6, J4, True, BOTTOM, "R-3.9 config"),
    (J4, "2 2 2 2 2 2", True, BOTTOM, "R-3.9 config: still 7-xiang"),
    ("2 2 2 2 2 2", J4, False, BOTTOM, "R-3.9 config"),
    (J4, J3a, True, BOTTOM, "R-3.9 config"),
    ("3 3 3 3 3 3 3 3", J4, True, BOTTOM, "R-3.9 config"),
    # --- irregular chains with the same k and m are equal
    (IRR_7_9, IRR_4_6, False, TOP, "R-5.5"),
    (IRR_4_6, IRR_7_9, False, TOP, "R-5.5"),
    (IRR_7_9, IRR_4_6_13, False, TOP, "R-5.5"),
    (IRR_4_6_13, IRR_7_9, False, TOP, "R-5.5 overrides fewer cards"),
    (REG5_7_9, IRR_4_6, True, TOP, "R-5.5"),
    (REG5_7_9, IRR_4_6_13, True, TOP, "R-5.5"),
    (IRR_4_6, REG5_7_9, False, TOP, "R-5.5"),
    # is narrow: any other pair of bombs goes by, even same xiang and size
    (IRR5_8_10, REG4x4_6_9, True, TOP, "R-5.5 R-5.3 the issue's example: higher top rank"),
    (REG4x4_6_9, IRR5_8_10, False, TOP, "R-5.5 R-5.3 the issue's example"),
    (IRR5_5_7_16, REG4x4_8_J, False, TOP, "R-5.5 R-5.3 same xiang and size: rank"),
    (REG4x4_8_J, IRR5_5_7_16, True, TOP, "R-5.5 R-5.3 regular beats irregular by rank"),
    (REG4x4_3_6, IRR5_5_7_16, False, TOP, "R-5.5 R-5.3 rank"),
    (IRR5_5_7_16, REG4x4_3_6, True, TOP, "R-5.5 R-5.3 irregular beats regular by rank"),
    (IRR5_8_10, IRR5_5_7_16, False, TOP, "R-5.5 same k and m (3, 5): equal"),
    (IRR5_5_7_16, IRR5_8_10, False, TOP, "R-5.5 same k and m (3, 5): equal"),
    (IRR5_8_10, IRR4x4_17, True, TOP, "R-5.5 R-5.3 different k: fewer cards"),
    ("4 4 4 4 5 5 5 5 6 6 6 6 BJ", IRR_4_6_13, False, TOP, "R-5.5 (joker-made irregular)"),
    # --- chain bombs to 2 compare like any chain
    (CHAIN_K_A_2, CHAIN_Q_K_A, True, TOP, "R-2.2 R-5.3 rank 2 above A"),
    (CHAIN_Q_K_A, CHAIN_K_A_2, False, TOP, "R-2.2 R-5.3"),
    ("3 3 3 3 3 3 3", CHAIN_K_A_2, True, TOP, "R-2.2 R-5.3 fewer cards"),
    (CHAIN_K_A_2, "2 2 2 2 2 2", True, TOP, "R-2.2 R-5.3 xiang"),
    (J4, CHAIN_K_A_2, True, TOP, "R-2.2 R-3.9"),
    (CHAIN_K_A_2, J4, True, BOTTOM, "R-2.2 R-3.9 config"),
    ("Q Q Q Q K K K K A A A A 2 2 2 2", REG4x4_J_A, True, TOP, "R-2.2 R-5.3 4-chain to 2"),
]

# R-5 example: 4444 < 33333 < three jokers < 333333 < 4444 5555 6666 < 3333333 < four jokers
R5_CHAIN = ["4 4 4 4", "3 3 3 3 3", J3a, "3 3 3 3 3 3", CHAIN_4_5_6, "3 3 3 3 3 3 3", J4]
R5_ROWS = [
    (hi, lo, True, TOP, "R-5 example") for lo, hi in itertools.combinations(R5_CHAIN, 2)
] + [
    (lo, hi, False, TOP, "R-5 example") for lo, hi in itertools.combinations(R5_CHAIN, 2)
]


def test_table_is_big_enough() -> None:
    assert len(ROWS) >= 100
    assert len(R5_ROWS) == 42


@pytest.mark.parametrize("a, b, expected, heavenly, rule", ROWS + R5_ROWS,
                         ids=[f"{r[0]} vs {r[1]} [{r[4]}, {r[3]}]" for r in ROWS + R5_ROWS])
def test_beats(a: str, b: str, expected: bool, heavenly: str, rule: str) -> None:
    ca, cb = classify(a, heavenly=heavenly), classify(b, heavenly=heavenly)
    assert ca is not None and cb is not None
    assert beats(ca, cb, heavenly) is expected


@pytest.mark.parametrize("a, b, expected, heavenly, rule", ROWS + R5_ROWS)
def test_never_both_ways(a: str, b: str, expected: bool, heavenly: str, rule: str) -> None:
    """beats is asymmetric (R-5.6: a play must be strictly larger)."""
    ca, cb = classify(a, heavenly=heavenly), classify(b, heavenly=heavenly)
    assert not (beats(ca, cb, heavenly) and beats(cb, ca, heavenly))


def test_two_bomb_chains_are_not_plays() -> None:
    # 44445555 and 55556666 are not combinations, so they never compare
    assert classify("4 4 4 4 5 5 5 5") is None
    assert classify("5 5 5 5 6 6 6 6") is None
