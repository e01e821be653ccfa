"""Effective xiang and multiplier lookups (R-8.3, R-8.4, R-8.5, R-9, R-10)."""

from __future__ import annotations

import pytest

from engine.rules.classify import classify
from engine.config import load_config
from projections.scoring import (
    XiangResult,
    bomb_text,
    contribution_of,
    doubling_of,
    effective_xiang,
    standing_contribution,
)

POINTS = load_config("points")
WEALTH = load_config("wealth")
POINTS_R10 = POINTS.model_copy(update={"separate_bombs": True})


def combos(*plays: str):
    out = []
    for p in plays:
        c = classify(p)
        assert c is not None and c.is_bomb, p
        out.append(c)
    return out


# (plays, expected effective xiang, a fragment of the source) — R-8.3 (i): every row of the tables
TABLE_ROWS = [
    (["4 4 4 4"], 4, "played 4 4 4 4 (4-xiang)"),
    (["3 3 3 3 3"], 5, "played 3 3 3 3 3 (5-xiang)"),
    (["SJ SJ BJ"], 6, "(6-xiang)"),                                   # three jokers
    (["6 6 6 6 6 6"], 6, "played 6 6 6 6 6 6"),
    (["7 7 7 7 7 7 7"], 7, "played 7 7 7 7 7 7 7 (7-xiang)"),
    (["SJ SJ BJ BJ"], 7, "(7-xiang)"),                                # heavenly bomb
    (["4 4 4 4 5 5 5 5 6 6 6 6"], 7, "played 4 4 4 4 5 5 5 5 6 6 6 6"),          # 3-chain of 4s
    (["4 4 4 4 5 5 5 5 6 6 6 6 7 7 7 7"], 8, "(8-xiang)"),            # 4-chain of 4s
    (["5 5 5 5 5 6 6 6 6 6 7 7 7 7 7"], 8, "(8-xiang)"),              # 3-chain of 5s
    (["8 8 8 8 8 8 8 8"], 8, "played 8 8 8 8 8 8 8 8"),
    (["9 9 9 9 9 9 9 9 BJ"], 9, "played 9 9 9 9 9 9 9 9 BJ (9-xiang)"),      # 8 + 1 joker
    (["6 6 6 6 6 6 7 7 7 7 7 7 8 8 8 8 8 8"], 9, "(9-xiang)"),        # 3-chain of 6s
    (["10 10 10 10 10 10 10 10 SJ BJ"], 10, "(10-xiang)"),
    (["J J J J J J J J SJ SJ BJ"], 11, "(11-xiang)"),                 # 8 + any 3 jokers
    (["2 2 2 2 2 2 2 2 SJ SJ BJ BJ"], 12, "(12-xiang)"),              # 8 + 4 jokers
    ([], 0, "no bomb"),
]

# two single-rank bombs of the same xiang with consecutive ranks (3…A), at different times
R9_ROWS = [
    (["4 4 4 4", "5 5 5 5"], 5, "R-9: 4 4 4 4 and 5 5 5 5 consecutive → 5"),
    (["5 5 5 5", "4 4 4 4"], 5, "R-9: 4 4 4 4 and 5 5 5 5 consecutive → 5"),      # order does not matter
    (["4 4 4 4", "6 6 6 6"], 4, "played 4 4 4 4"),                             # not consecutive
    (["A A A A", "2 2 2 2"], 5, "R-9: A A A A and 2 2 2 2 consecutive → 5"),      # R-9.2 R-2.2 chain_bomb_twos on
    (["2 2 2 2", "3 3 3 3"], 4, "played"),                                  # no wrap-around
    (["K K K K", "A A A A"], 5, "R-9: K K K K and A A A A consecutive → 5"),      # top of 3…A
    (["4 4 4 4", "5 5 5 BJ"], 5, "R-9: 4 4 4 4 and 5 5 5 BJ consecutive → 5"),   # joker-completed
    (["4 4 4 4", "5 5 5 5", "6 6 6 6"], 5, "R-9"),                          # three in a row → X+1 only
    (["5 5 5 5 5", "6 6 6 6 6"], 6, "R-9: 5 5 5 5 5 and 6 6 6 6 6 consecutive → 6"),  # 5-xiang pairs
    (["6 6 6 6 6 6", "7 7 7 7 7 7"], 7, "R-9"),                             # two consecutive 6s → 7
    (["7 7 7 7 7 7 7", "8 8 8 8 8 8 8"], 8, "R-9"),                         # two consecutive 7s → 8
    (["4 4 4 4", "5 5 5 5 5"], 5, "played 5 5 5 5 5"),                          # different xiang: nothing
    (["4 4 4 4", "4 4 4 4"], 4, "played 4 4 4 4"),                             # same rank: not consecutive
    (["4 4 4 4", "5 5 5 5", "9 9 9 9 9 9 9"], 7, "played 9 9 9 9 9 9 9"),         # a bigger played bomb wins
    (["SJ SJ BJ", "SJ BJ BJ"], 6, "played"),                                # joker bombs are not R-9
    (["4 4 4 4 5 5 5 5 6 6 6 6", "7 7 7 7 8 8 8 8 9 9 9 9"], 7, "played"),  # chains are not R-9
]

# R-10 when separate_bombs is on (POINTS_R10), and the same plays with it off
R10_ROWS = [
    (["3 3 3 3", "6 6 6 6", "9 9 9 9"], 5, 4, "R-10: 3 separate 4-xiang bombs → 5"),
    (["3 3 3 3", "6 6 6 6", "9 9 9 9", "Q Q Q Q"], 6, 4, "R-10: 4 separate 4-xiang bombs → 6"),
    (["3 3 3 3", "5 5 5 5", "7 7 7 7", "9 9 9 9", "J J J J"], 7, 4, "R-10: 5 separate"),
    (["3 3 3 3", "5 5 5 5", "7 7 7 7", "9 9 9 9", "J J J J", "K K K K"], 8, 4, "R-10: 6 separate"),
    (["3 3 3 3", "5 5 5 5", "7 7 7 7", "9 9 9 9", "J J J J", "K K K K", "2 2 2 2"], 8, 4, "R-10: 7 separate"),
    (["3 3 3 3 3", "9 9 9 9 9"], 6, 5, "R-10: 2 separate 5-xiang bombs → 6"),
    (["3 3 3 3 3", "9 9 9 9 9", "Q Q Q Q Q"], 6, 5, "R-10: 3 separate 5-xiang bombs → 6"),  # nothing more
    (["3 3 3 3", "9 9 9 9", "Q Q Q Q Q"], 5, 5, "played Q Q Q Q Q"),            # unlisted mix: nothing
    (["3 3 3 3", "4 4 4 4", "9 9 9 9"], 5, 5, "R-9"),                       # consecutive count too; R-9 named first
    (["3 3 3 BJ", "6 6 6 SJ", "9 9 9 9"], 5, 4, "R-10"),                    # joker-completed count
    (["3 3 3 3", "6 6 6 6"], 4, 4, "played 3 3 3 3"),                          # two: nothing
    (["SJ SJ BJ", "3 3 3 3", "6 6 6 6", "9 9 9 9"], 6, 6, "played"),        # played 6 beats R-10's 5
]


@pytest.mark.parametrize("plays,xiang,source", TABLE_ROWS, ids=[" ".join(r[0]) or "none" for r in TABLE_ROWS])
def test_table_rows_effective_xiang(plays, xiang, source):
    """R-8.3 (i), R-3.7–R-3.10: the xiang of the largest bomb played."""
    r = effective_xiang(combos(*plays), POINTS)
    assert r.xiang == xiang
    assert source in r.source


@pytest.mark.parametrize("plays,xiang,source", R9_ROWS, ids=[" / ".join(r[0]) for r in R9_ROWS])
def test_r9_consecutive_bombs(plays, xiang, source):
    """R-9.1, R-9.2."""
    r = effective_xiang(combos(*plays), POINTS)
    assert (r.xiang, source in r.source) == (xiang, True), r


# follows: A and 2 are consecutive only with chain_bomb_twos on.
# (plays, effective xiang with the flag on, with it off, source fragment when on)
R9_TWOS_ROWS = [
    (["A A A A", "2 2 2 2"], 5, 4, "R-9: A A A A and 2 2 2 2 consecutive → 5"),
    (["2 2 2 2", "A A A A"], 5, 4, "R-9: A A A A and 2 2 2 2 consecutive → 5"),      # order does not matter
    (["A A A A A", "2 2 2 2 2"], 6, 5, "R-9: A A A A A and 2 2 2 2 2 consecutive → 6"),
    (["A A A BJ", "2 2 2 SJ"], 5, 4, "R-9: A A A BJ and 2 2 2 SJ consecutive → 5"),  # joker-completed
    (["A A A A", "2 2 2 2 2"], 5, 5, "played 2 2 2 2 2"),                         # different xiang: nothing
    (["K K K K", "A A A A"], 5, 5, "R-9: K K K K and A A A A consecutive → 5"),      # 3…A pairs either way
    (["2 2 2 2", "3 3 3 3"], 4, 4, "played"),                                  # no wrap-around either way
]


@pytest.mark.parametrize("plays,on,off,source", R9_TWOS_ROWS, ids=[" / ".join(r[0]) for r in R9_TWOS_ROWS])
def test_r9_a_and_2_follow_chain_bomb_twos(plays, on, off, source):
    """R-9.2, R-2.2: the room's chain_bomb_twos decides whether AAAA then 2222 count."""
    r_on = effective_xiang(combos(*plays), POINTS)
    r_off = effective_xiang(combos(*plays), POINTS.model_copy(update={"chain_bomb_twos": False}))
    assert r_on.xiang == on and source in r_on.source, r_on
    assert r_off.xiang == off, r_off


@pytest.mark.parametrize("plays,on,off,source", R10_ROWS, ids=[" / ".join(r[0]) for r in R10_ROWS])
def test_r10_separate_bombs(plays, on, off, source):
    """R-10.1: only when config.separate_bombs is on."""
    r_on = effective_xiang(combos(*plays), POINTS_R10)
    r_off = effective_xiang(combos(*plays), POINTS)
    assert r_on.xiang == on and source in r_on.source, r_on
    assert r_off.xiang == off, r_off
    assert "R-10" not in r_off.source


def test_non_bombs_are_ignored():
    """R-8.3: only bombs count."""
    plays = [classify("3 4 5 6 7"), classify("8 8"), classify("4 4 4 4")]
    assert effective_xiang(plays, POINTS) == XiangResult(4, "played 4 4 4 4 (4-xiang)")


@pytest.mark.parametrize("xiang,pc,pb,wc,wb", [
    (0, 0, 1, 0, 1), (3, 0, 1, 0, 1),
    (4, 0, 1, 0, 1), (5, 0, 2, 0, 1), (6, 2, 4, 2, 2), (7, 4, 8, 4, 4), (8, 8, 16, 8, 8),
    (9, 16, 32, 16, 16), (10, 32, 64, 32, 32), (11, 64, 128, 64, 64), (12, 128, 256, 128, 128),
])
def test_default_tables(xiang, pc, pb, wc, wb):
    """R-8 multiplier tables (defaults): points c/b and wealth c/b; none below 4-xiang."""
    assert (contribution_of(xiang, POINTS), doubling_of(xiang, POINTS)) == (pc, pb)
    assert (contribution_of(xiang, WEALTH), doubling_of(xiang, WEALTH)) == (wc, wb)


def test_operator_tables_are_used():
    """R-14: the lookups read the room's tables, not constants."""
    table = {x: x * 10 for x in range(4, 13)}
    cfg = POINTS.model_copy(update={"contribution": table, "doubling": table})
    assert contribution_of(9, cfg) == 90 and doubling_of(4, cfg) == 40 and doubling_of(0, cfg) == 1


def test_standing_contribution_instant_view():
    """R-8.5: each player's standing contribution as soon as a bomb is played."""
    view = standing_contribution({"a": combos("7 7 7 7 7 7 7"), "b": combos("4 4 4 4", "5 5 5 5 5 5"), "c": []},
                                 POINTS)
    assert view == {"a": 4, "b": 2, "c": 0}


def test_bomb_text():
    assert bomb_text(classify("5 5 5 BJ")) == "5 5 5 BJ"
    assert bomb_text(classify("SJ SJ BJ BJ")) == "SJ SJ BJ BJ"
    # the 10s keep their separators (issue 36): "10 10 10 10", never "10101010"
    assert bomb_text(classify("10 10 10 10")) == "10 10 10 10"
    assert bomb_text(classify("10 10 10 10 J J J J Q Q Q Q")) == "10 10 10 10 J J J J Q Q Q Q"
    assert bomb_text(classify("10 10 10 BJ")) == "10 10 10 BJ"
