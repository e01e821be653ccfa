"""理牌 (engine.rules.arrange): a hand split into the fewest combinations, bombs first (issue 36).

A table of hands with the arrangement the rules give (R-ids cited), then properties over random
hands: every card in exactly one group, each group the combination its kind says (R-3), the
groups in the documented order, and no split with fewer groups (an exhaustive oracle on small
hands).
"""

from __future__ import annotations

from functools import lru_cache

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.rules.arrange import KIND_ORDER, MAX_CARDS, BadCards, arrange
from engine.rules.cards import format_ranks, parse_cards, rank_of
from engine.rules.classify import classify


def _show(text: str, twos: bool = True) -> list[tuple[str, str]]:
    return [(g.kind, format_ranks(g.cards)) for g in arrange(parse_cards(text), chain_bomb_twos=twos)]


TABLE = [
    # (rule, hand, arrangement)
    ("R-3.1", "3", [("single", "3")]),
    ("R-3.2", "3 3", [("pair", "3 3")]),
    ("R-3.4", "3 3 3", [("triple", "3 3 3")]),
    ("R-3.7", "10 10 10 10", [("bomb", "10 10 10 10")]),
    ("R-3.7", "10 10 10 10 10 10 10 10", [("bomb", "10 10 10 10 10 10 10 10")]),
    ("R-3.6", "3 4 5 6 7", [("straight", "3 4 5 6 7")]),
    ("R-3.6 R-2.2", "10 J Q K A", [("straight", "10 J Q K A")]),
    ("R-2.2: no 2 in a straight", "J Q K A 2", [("single", "J"), ("single", "Q"), ("single", "K"),
                                                  ("single", "A"), ("single", "2")]),
    ("R-3.3", "4 4 5 5 6 6", [("pair_run", "4 4 5 5 6 6")]),
    ("R-3.3 R-2.2: no 2 in a pair run", "K K A A 2 2", [("pair", "K K"), ("pair", "A A"), ("pair", "2 2")]),
    ("R-3.5", "4 4 4 5 5 5 6 6 6", [("triple_run", "4 4 4 5 5 5 6 6 6")]),
    ("R-3.5: two triples are no combination", "4 4 4 5 5 5", [("triple", "4 4 4"), ("triple", "5 5 5")]),
    ("R-3.10", "3 3 3 3 4 4 4 4 5 5 5 5", [("chain_bomb", "3 3 3 3 4 4 4 4 5 5 5 5")]),
    ("R-3.10: irregular", "4 4 4 4 5 5 5 5 5 6 6 6 6 6",
     [("chain_bomb", "4 4 4 4 5 5 5 5 5 6 6 6 6 6")]),
    ("R-3.10: no two-bomb chain", "4 4 4 4 5 5 5 5", [("bomb", "4 4 4 4"), ("bomb", "5 5 5 5")]),
    ("R-3.10 R-2.2: up to 2", "K K K K A A A A 2 2 2 2", [("chain_bomb", "K K K K A A A A 2 2 2 2")]),
    ("R-3.8", "SJ SJ BJ", [("three_jokers", "SJ SJ BJ")]),
    ("R-3.9", "SJ SJ BJ BJ", [("four_jokers", "SJ SJ BJ BJ")]),
    ("R-3.2 R-4.2", "BJ BJ", [("pair", "BJ BJ")]),
    ("R-4.2: SJ + BJ is no combination", "SJ BJ", [("single", "SJ"), ("single", "BJ")]),
    ("R-4: the jokers are never wild here", "4 4 4 BJ", [("triple", "4 4 4"), ("single", "BJ")]),
    ("fewest groups: the straight takes a 7", "3 4 5 6 7 7 7 9 9 BJ",
     [("straight", "3 4 5 6 7"), ("pair", "7 7"), ("pair", "9 9"), ("single", "BJ")]),
    ("fewest groups: a bomb lends a card to a straight", "5 5 5 5 5 6 7 8 9",
     [("bomb", "5 5 5 5"), ("straight", "5 6 7 8 9")]),
    ("fewest groups: the chain beats three bombs", "10 10 10 10 J J J J Q Q Q Q 2 SJ SJ BJ",
     [("three_jokers", "SJ SJ BJ"), ("chain_bomb", "10 10 10 10 J J J J Q Q Q Q"), ("single", "2")]),
    ("order: bombs, chains, triples, pairs, singles", "3 8 8 9 9 9 J J J J 4 5 6 7 2",
     [("bomb", "J J J J"), ("straight", "3 4 5 6 7"), ("triple", "9 9 9"), ("pair", "8 8"), ("single", "2")]),
]


@pytest.mark.parametrize("rule, hand, expected", TABLE, ids=[f"{r}: {h}" for r, h, _ in TABLE])
def test_the_table_of_hands(rule: str, hand: str, expected: list[tuple[str, str]]) -> None:
    assert _show(hand) == expected


def test_without_twos_in_chain_bombs_the_chain_to_2_is_three_bombs() -> None:  # config
    assert _show("K K K K A A A A 2 2 2 2", twos=False) == [
        ("bomb", "K K K K"), ("bomb", "A A A A"), ("bomb", "2 2 2 2")]


@pytest.mark.parametrize("cards", [[0, 0], [108], [-1], [True], ["3"], [1.0], list(range(MAX_CARDS + 1))])
def test_what_is_not_a_hand_is_refused(cards: list[object]) -> None:
    with pytest.raises(BadCards):
        arrange(cards)  # type: ignore[arg-type]


def _fewest_groups(cards: tuple[int, ...]) -> int:
    """The oracle: the fewest combinations the cards split into, by trying every subset that
    holds the first card and reads as a combination (classify; no jokers in these hands)."""

    @lru_cache(maxsize=None)
    def best(mask: int) -> int:
        if mask == 0:
            return 0
        first = (mask & -mask)
        rest = mask ^ first
        out = len(cards)
        sub = rest
        while True:
            group = sub | first
            chosen = [cards[i] for i in range(len(cards)) if group >> i & 1]
            if classify(chosen) is not None:
                out = min(out, 1 + best(mask ^ group))
            if sub == 0:
                break
            sub = (sub - 1) & rest
        return out

    return best((1 << len(cards)) - 1)


_naturals = st.lists(st.integers(0, 107).filter(lambda c: rank_of(c) < 13), min_size=0, max_size=11, unique=True)
_hands = st.lists(st.integers(0, 107), min_size=0, max_size=MAX_CARDS, unique=True)


@settings(max_examples=150, deadline=None)
@given(_hands)
def test_every_card_in_one_group_each_a_combination_in_order(hand: list[int]) -> None:
    groups = arrange(hand)
    assert sorted(c for g in groups for c in g.cards) == sorted(hand)
    for g in groups:
        combo = classify(list(g.cards))
        assert combo is not None and combo.kind == g.kind, g
    order = [KIND_ORDER.index(g.kind) for g in groups]
    assert order == sorted(order)


@settings(max_examples=120, deadline=None)
@given(_naturals)
def test_no_split_has_fewer_groups(hand: list[int]) -> None:
    # small hands of natural cards, with ranks crowded so runs and bombs appear
    assert len(arrange(hand)) == _fewest_groups(tuple(sorted(hand)))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([r * 4 + s + d * 54 for r in range(3, 8) for s in range(4) for d in range(2)]),
                min_size=4, max_size=12, unique=True))
def test_no_split_has_fewer_groups_on_crowded_ranks(hand: list[int]) -> None:
    assert len(arrange(hand)) == _fewest_groups(tuple(sorted(hand)))
