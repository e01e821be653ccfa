"""Cards and notation (R-1, R-2, docs/ARCHITECTURE.md "Contracts that stay stable")."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.rules.cards import BJ, NUM_CARDS, SJ, CardNotationError, counts_of, deal_from_deck, deck_of, format_cards, format_ranks, is_joker, parse_cards, rank_of, resolve_in_hand, sort_cards, suit_of
from engine.service.shuffle import seeded_random, shuffled_deck

# (text, expected rank indices) — order 3..2 SJ BJ
PARSE_TABLE = [
    ("3", [0]), ("4", [1]), ("10", [7]), ("T", [7]), ("t", [7]), ("J", [8]), ("Q", [9]),
    ("K", [10]), ("A", [11]), ("2", [12]), ("SJ", [SJ]), ("BJ", [BJ]), ("sj bj", [SJ, BJ]),
    ("10H", [7]), ("AS", [11]), ("2d", [12]), ("3,4", [0, 1]), ("  5   6 ", [2, 3]),
    ("JS QH KC AD", [8, 9, 10, 11]),
]


@pytest.mark.parametrize("text,ranks", PARSE_TABLE)
def test_parse_ranks(text: str, ranks: list[int]) -> None:
    assert [rank_of(c) for c in parse_cards(text)] == ranks


BAD_TOKENS = ["1", "11", "Z", "3X", "SJH", "JJ", "B", "0", "10Z", "S"]


@pytest.mark.parametrize("token", BAD_TOKENS)
def test_bad_token_named(token: str) -> None:
    with pytest.raises(CardNotationError) as exc:
        parse_cards(f"3 {token}")
    assert str(exc.value).startswith(f"bad card token {token!r}")  # names the bad token itself


@pytest.mark.parametrize("text,what", [
    ("3 3 3 3 3 3 3 3 3", "3"), ("SJ SJ SJ", "SJ"), ("BJ BJ BJ", "BJ"), ("3S 3S 3S", "3S"),
])
def test_more_copies_than_two_decks(text: str, what: str) -> None:
    """R-1.1: two decks hold 8 of a rank, 2 of a suited card, 2 of each joker."""
    with pytest.raises(CardNotationError, match=f"too many {what}"):
        parse_cards(text)


def test_108_distinct_cards() -> None:
    """R-1.1: 2 × (52 + SJ + BJ); rank, suit and deck derivable from the id."""
    ranks = counts_of(range(NUM_CARDS))
    assert ranks == (8,) * 13 + (2, 2)
    assert sum(is_joker(c) for c in range(NUM_CARDS)) == 4
    assert {deck_of(c) for c in range(NUM_CARDS)} == {0, 1}
    assert {suit_of(c) for c in range(NUM_CARDS) if not is_joker(c)} == set("SHCD")


@given(st.lists(st.integers(0, NUM_CARDS - 1), unique=True, max_size=40))
def test_notation_round_trips(cards: list[int]) -> None:
    """Notation round-trips: the same labels (rank and suit) in the same order.

    The deck copy of a card is not part of the notation (R-1.6: only
    bookkeeping), so two decks' 3S both read back as the lowest free 3S.
    """
    text = format_cards(cards)
    again = parse_cards(text)
    assert format_cards(again) == text
    assert [(rank_of(c), suit_of(c)) for c in again] == [(rank_of(c), suit_of(c)) for c in cards]


@given(st.lists(st.integers(0, NUM_CARDS - 1), unique=True, min_size=1, max_size=27), st.data())
def test_resolve_in_hand_takes_cards_from_the_hand(hand: list[int], data: st.DataObject) -> None:
    """D-2: unsuited notation resolves to the hand's lowest ids of each rank."""
    sub = data.draw(st.lists(st.sampled_from(hand), unique=True, min_size=1))
    got = resolve_in_hand(format_ranks(sub), hand)
    assert got is not None
    assert set(got) <= set(hand)
    assert counts_of(got) == counts_of(sub)
    extra = [c for c in range(NUM_CARDS) if c not in hand][:1]
    if extra and counts_of(hand)[rank_of(extra[0])] < 8:
        assert resolve_in_hand(format_ranks(hand + extra), hand) is None


def test_deal_27_27_54() -> None:
    """R-1.3: 27 cards each, 54 set aside; a seed reproduces the deal (R-1.5)."""
    a, b, rest = deal_from_deck(shuffled_deck(seeded_random(7)))
    assert len(a) == len(b) == 27 and len(rest) == 54
    assert sorted(a + b + rest) == list(range(NUM_CARDS))
    assert deal_from_deck(shuffled_deck(seeded_random(7)))[0] == a
    assert a == sort_cards(a)
    with pytest.raises(ValueError):
        deal_from_deck(list(range(107)) + [0])


def test_sort_and_format_ranks() -> None:
    cards = parse_cards("BJ 2 3 A SJ 10")
    random.Random(1).shuffle(cards)
    assert format_ranks(cards) == "3 10 A 2 SJ BJ"
