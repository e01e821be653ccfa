"""Legal-move generation, auto-pass and trusteeship (engine.rules.moves).

Rules: R-3 (combinations), R-4 (wild jokers), R-5 (comparison), R-6.1/R-6.4
(leading, auto-pass), R-13.3 (trusteeship plays the smallest legal play).
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.rules.cards import counts_of, parse_cards
from engine.rules.combo import beats, strength_key
from engine.rules.classify import classify, classify_counts, interpretations, interpretations_for_counts
from engine.rules.moves import (
    Play,
    _breaks_group,
    can_beat,
    format_counts,
    legal_plays,
    pick_cards,
    smallest_beating,
    trustee_choice,
    trustee_lead,
)

JOKER_IDS = (52, 53, 106, 107)
NATURAL_IDS = tuple(c for c in range(108) if c % 54 < 52)


def C(text: str) -> tuple[int, ...]:
    return counts_of(parse_cards(text))


def plays_text(hand: str, prev: str | None = None, heavenly: str = "top") -> set[tuple[str, str, str]]:
    p = classify(prev) if prev else None
    return {(format_counts(c.counts), c.kind, c.rank) for c in legal_plays(parse_cards(hand), p, heavenly)}


# ----------------------------------------------------------------- table

SMALLEST = [
    # (rule, hand, previous play, expected cards or None, expected reading)
    ("R-13.3 strength first", "9 9 9 9 10 BJ", "8", "9", "single of 9"),
    ("R-13.3 fewer jokers", "9 9 SJ BJ", "8 8", "9 9", "pair of 9"),
    ("R-13.3 lowest ids (SJ 52 < BJ 53)", "9 SJ BJ", "8 8", "9 SJ", "pair of 9"),
    ("R-13.3 fewer jokers in a straight", "3 4 5 6 7 8 SJ", "3 4 5 6 7", "4 5 6 7 8", "straight to 8 (5 cards)"),
    ("R-4.6 the engine's reading of 5678+BJ is to 9", "3 3 5 6 7 8 BJ", "3 4 5 6 7",
     "5 6 7 8 BJ", "straight to 9 (5 cards)"),
    ("R-13.3 no bomb while a non-bomb beats", "K 3 3 3 3", "Q", "K", "single of K"),
    ("R-5.2 bomb only when no non-bomb beats", "K K 3 3 3 3", "A", "3 3 3 3", "4-xiang bomb of 3"),
    ("R-5.3 weakest bomb that beats", "3 3 3 3 5 5 5 5 6 6 6 6 6", "4 4 4 4", "5 5 5 5", "4-xiang bomb of 5"),
    ("R-5.3 joker-made 5-xiang below three jokers", "4 4 4 4 SJ SJ BJ", "3 3 3 3 3",
     "4 4 4 4 SJ", "5-xiang bomb of 4"),
    ("R-5.4 three jokers below natural 6-xiang", "SJ SJ BJ 5 5 5 5 5 5", "A A A A A",
     "SJ SJ BJ", "three-joker bomb (6-xiang)"),
    ("R-3.9 heavenly bomb top", "SJ SJ BJ BJ", "3 3 3 3 3 3 3", "SJ SJ BJ BJ", "heavenly bomb (7-xiang)"),
    ("R-4.3 wild pair", "9 BJ 5", "8 8", "9 BJ", "pair of 9"),
    ("R-4.4 wild triple", "10 SJ SJ 3 3 3", "9 9 9", "10 SJ SJ", "triple of 10"),
    ("R-3.10 chain beats a bomb", "4 4 4 4 5 5 5 5 6 6 6 6", "3 3 3 3 3 3", "4 4 4 4 5 5 5 5 6 6 6 6",
     "7-xiang regular 3-chain bomb to 6"),
    ("R-4.6 44+4 jokers reads as the 6-xiang bomb, so a 4-card bomb is smaller",
     "4 4 SJ SJ BJ BJ", "3 3 4 4 5 5", "4 4 SJ BJ", "4-xiang bomb of 4"),  # ids 52 53 < 52 106
    ("R-5.1 pass: nothing higher", "A A K", "2", None, None),
    ("R-5.1 pass: BJ single is the top", "2 SJ", "BJ", None, None),
    ("R-5.6 pass: equal pair of BJ", "BJ BJ", "BJ BJ", None, None),
    ("R-5.1 pass: different length", "5 6 7 8 9 9", "3 4 5 6 7 8", None, None),
    ("R-2.2 pass: no 2 in straights", "J Q K A 2", "9 10 J Q K", None, None),
    ("R-5.5 irregular chains never beat; the regular 12-card one does", "7 7 7 7 8 8 8 8 8 9 9 9 9",
     "4 4 4 4 5 5 5 5 5 6 6 6 6", "7 7 7 7 8 8 8 8 9 9 9 9", "7-xiang regular 3-chain bomb to 9"),
    ("R-4.2 pass: SJ+BJ is no pair", "SJ BJ", "A A", None, None),
    ("R-5.5 R-5.3 other chain shapes compare by rank", "8 8 8 8 8 8 9 9 9 9 10 10 10 10 SJ SJ",
     "6 6 6 6 7 7 7 7 8 8 8 9 9 9 9 SJ", "8 8 8 8 8 8 9 9 9 9 10 10 10 10 SJ SJ",
     "8-xiang irregular 3-chain bomb to 10"),
    ("R-2.2 a chain bomb to 2 beats a 6-card bomb", "K K K K A A A A 2 2 2 2 3", "2 2 2 2 2 2",
     "K K K K A A A A 2 2 2 2", "7-xiang regular 3-chain bomb to 2"),
    ("R-2.2 R-4.3 a joker stands for a 2 in the chain", "K K K K A A A A 2 2 2 BJ", "Q Q Q Q K K K K A A A A",
     "K K K K A A A A 2 2 2 BJ", "7-xiang regular 3-chain bomb to 2"),
]

# with chain_bomb_twos off (today's rooms): chains end at A.
# (rule, hand, previous play, expected cards or None, expected reading)
SMALLEST_NO_TWOS = [
    ("R-2.2 config off: no chain to 2, so pass", "K K K K A A A A 2 2 2 2 3", "2 2 2 2 2 2", None, None),
    ("R-2.2 config off: the Q-K-A chain still plays", "Q Q Q Q K K K K A A A A 2", "2 2 2 2 2 2",
     "Q Q Q Q K K K K A A A A", "7-xiang regular 3-chain bomb to A"),
    ("R-2.2 config off: the smallest bomb (no K-A-2 chain)", "K K K K A A A A 2 2 2 2", "Q Q Q Q",
     "K K K K", "4-xiang bomb of K"),
]


@pytest.mark.parametrize("rule,hand,prev,expected,reading", SMALLEST, ids=[s[0] for s in SMALLEST])
def test_smallest_beating_table(rule, hand, prev, expected, reading):
    cards = parse_cards(hand)
    play = smallest_beating(cards, classify(prev))
    if expected is None:
        assert play is None
        assert not can_beat(cards, classify(prev))  # auto-pass agrees
        return
    assert play is not None
    assert format_counts(play.combo.counts) == format_counts(C(expected))
    assert play.combo.describe() == reading
    assert set(play.cards) <= set(cards)
    assert trustee_choice(cards, classify(prev)) == play


@pytest.mark.parametrize("rule,hand,prev,expected,reading", SMALLEST_NO_TWOS, ids=[s[0] for s in SMALLEST_NO_TWOS])
def test_smallest_beating_without_chain_bomb_twos(rule, hand, prev, expected, reading):
    cards = parse_cards(hand)
    p = classify(prev, chain_bomb_twos=False)
    play = trustee_choice(cards, p, chain_bomb_twos=False)
    assert play == smallest_beating(cards, p, chain_bomb_twos=False)
    assert can_beat(cards, p, chain_bomb_twos=False) is (expected is not None)   # agrees
    assert bool(legal_plays(cards, p, chain_bomb_twos=False)) is (expected is not None)
    if expected is None:
        assert play is None
        return
    assert format_counts(play.combo.counts) == format_counts(C(expected))
    assert play.combo.describe() == reading


def test_chain_bomb_twos_in_legal_plays_and_can_beat():
    """R-2.2: the flag decides whether K-A-2 chains are offered; the caches key on it."""
    hand = parse_cards("K K K K A A A A 2 2 2 2")
    chains = {("K K K K A A A A 2 2 2 2", "chain_bomb", "2")}
    on = {t for t in plays_text("K K K K A A A A 2 2 2 2") if t[1] == "chain_bomb"}
    off = {(format_counts(c.counts), c.kind, c.rank)
           for c in legal_plays(hand, chain_bomb_twos=False) if c.kind == "chain_bomb"}
    assert on == chains and off == set()
    six = classify("2 2 2 2 2 2")
    assert can_beat(hand, six) and not can_beat(hand, six, chain_bomb_twos=False)
    assert can_beat(hand, six)  # asked again after the other setting: the cache keeps them apart
    # no wrap-around: A-2-3 is not consecutive
    assert not any(c.kind == "chain_bomb" for c in legal_plays(parse_cards("A A A A 2 2 2 2 3 3 3 3")))


def test_smallest_beating_lowest_physical_ids():
    """R-13.3: the concrete cards are the lowest ids of each rank."""
    hand = parse_cards("9D 9S 9H 9C 10 10")  # ids 27 24 25 26
    play = smallest_beating(hand, classify("8 8"))
    assert play == Play(classify("9 9"), (24, 25))


def test_smallest_beating_heavenly_bottom():
    """R-3.9 config bottom: the heavenly bomb is below every other 7-xiang."""
    hand = parse_cards("SJ SJ BJ BJ")
    assert smallest_beating(hand, classify("3 3 3 3 3 3 3"), "bottom") is None
    assert not can_beat(hand, classify("3 3 3 3 3 3 3"), "bottom")
    assert smallest_beating(hand, classify("A A A A A A"), "bottom").combo.kind == "four_jokers"


def test_breaks_group_helper():
    """R-13.3 decision: taking part (not all) of a rank held 4+ times breaks it."""
    h = C("5 5 5 5 6 6 7")
    assert _breaks_group(h, C("5"))
    assert not _breaks_group(h, C("5 5 5 5"))
    assert not _breaks_group(h, C("6 6"))
    assert not _breaks_group(h, C("6"))  # only 2 sixes held: no group


def test_trustee_lead_lowest_single():
    """R-13.3: leading, the lowest single (lowest rank, then lowest id)."""
    hand = parse_cards("SJ 4 3H 3S A")
    assert trustee_lead(hand) == Play(classify("3"), (0,))
    assert trustee_choice(hand, None) == Play(classify("3"), (0,))
    assert trustee_lead(parse_cards("BJ SJ")).cards == (52,)


def test_pick_cards():
    hand = parse_cards("3 3 3 BJ BJ 5")
    assert pick_cards(hand, C("3 3 BJ")) == (0, 1, 53)
    with pytest.raises(ValueError):
        pick_cards(hand, C("4"))


# ----------------------------------------------------------------- legal_plays table

def test_joker_substitutes_for_held_card():
    """R-4.3: 3 4 BJ 6 7 keeps 5555 intact; both SJ and BJ variants offered."""
    got = plays_text("3 4 5 5 5 5 6 7 SJ BJ")
    assert ("3 4 5 6 7", "straight", "7") in got
    assert ("3 4 6 7 BJ", "straight", "7") in got
    assert ("3 4 6 7 SJ", "straight", "7") in got
    assert ("3 4 6 7 SJ BJ", "straight", "8") in got       # 3 4 (5) 6 7 (8)
    assert ("5 5 5 SJ", "bomb", "5") in got                 # 555+joker
    assert ("5 5 5 5 SJ BJ", "bomb", "5") in got            # 6-xiang


def test_both_readings_when_leading_one_when_following():
    """R-4.6: leading returns every reading; following the largest that beats."""
    lead = plays_text("5 6 7 8 BJ")
    assert ("5 6 7 8 BJ", "straight", "9") in lead
    assert ("5 6 7 8 BJ", "straight", "8") in lead
    assert plays_text("5 6 7 8 BJ", "3 4 5 6 7") == {("5 6 7 8 BJ", "straight", "9")}
    assert plays_text("5 6 7 8 BJ", "5 6 7 8 9") == set()


def test_no_two_in_sequences():
    """R-2.2: 2 never in a straight / run; a joker never stands for a 2 there."""
    got = plays_text("10 J Q K A 2")
    assert not any(kind == "straight" and "2" in cards.split() for cards, kind, _ in got)
    got = plays_text("J Q K A BJ")
    assert ("J Q K A BJ", "straight", "A") in got
    assert all(rank != "2" for _, kind, rank in got if kind == "straight")
    assert not any(kind == "pair_run" for _, kind, _ in plays_text("K K A A 2 2"))


def test_no_two_bomb_chains():
    """R-3.10: 44445555 and 4444 555+BJ are not combinations."""
    got = plays_text("4 4 4 4 5 5 5 5 BJ")
    assert not any(kind == "chain_bomb" for _, kind, _ in got)
    assert not any(cards in ("4 4 4 4 5 5 5 5", "4 4 4 4 5 5 5 BJ") for cards, _, _ in got)


def test_joker_only_sets():
    """R-4.1, R-4.2, R-3.8, R-3.9: jokers alone are never wild."""
    assert plays_text("SJ BJ") == {("SJ", "single", "SJ"), ("BJ", "single", "BJ")}
    got = plays_text("SJ SJ BJ BJ")
    assert ("SJ SJ", "pair", "SJ") in got and ("BJ BJ", "pair", "BJ") in got
    assert ("SJ SJ BJ", "three_jokers", "BJ") in got and ("SJ BJ BJ", "three_jokers", "BJ") in got
    assert ("SJ SJ BJ BJ", "four_jokers", "BJ") in got
    assert not any(cards == "SJ BJ" for cards, _, _ in got)


def test_jokers_supply_a_whole_bomb_in_a_chain():
    """R-4.4: 4444 + SJ SJ BJ BJ + 6666 = 4444 5555 6666."""
    got = plays_text("4 4 4 4 6 6 6 6 SJ SJ BJ BJ")
    assert ("4 4 4 4 6 6 6 6 SJ SJ BJ BJ", "chain_bomb", "6") in got


def test_following_a_bomb_only_bombs():
    """R-5.3: only stronger bombs follow a bomb."""
    got = plays_text("3 3 3 3 3 K K K K 2 2", "4 4 4 4 4")
    assert got == set()
    got = plays_text("5 5 5 5 5 K K K K", "4 4 4 4 4")
    assert got == {("5 5 5 5 5", "bomb", "5")}


def test_irregular_chain_does_not_follow_irregular_chain():
    """R-5.5: 7777 88888 9999 cannot beat 4444 55555 6666 (only the regular subset can)."""
    got = plays_text("7 7 7 7 8 8 8 8 8 9 9 9 9", "4 4 4 4 5 5 5 5 5 6 6 6 6")
    assert got == {("7 7 7 7 8 8 8 8 9 9 9 9", "chain_bomb", "9")}


def test_following_reads_a_multiset_as_its_largest_beating_reading():
    """R-4.6: 4 4 + four jokers follows a pair run as the 6-xiang bomb of 4."""
    got = plays_text("4 4 SJ SJ BJ BJ", "3 3 4 4 5 5")
    assert ("4 4 SJ SJ BJ BJ", "bomb", "4") in got
    assert not any(kind == "pair_run" for _, kind, _ in got)
    assert ("4 4 SJ SJ BJ BJ", "pair_run", "6") in plays_text("4 4 SJ SJ BJ BJ")  # leading: all readings


def test_any_bomb_beats_a_non_bomb():
    """R-5.2."""
    got = plays_text("3 3 3 3 4", "2 2")
    assert got == {("3 3 3 3", "bomb", "3")}


# ----------------------------------------------------------------- properties

def _hand_strategy(max_cards: int):
    @st.composite
    def hands(draw):
        jokers = draw(st.integers(0, 4))
        size = draw(st.integers(max(1, jokers), max(jokers, max_cards)))
        js = draw(st.permutations(JOKER_IDS))[:jokers]
        if draw(st.booleans()):  # uniform natural cards
            nat = draw(st.lists(st.sampled_from(NATURAL_IDS), min_size=size - jokers,
                                max_size=size - jokers, unique=True))
        else:  # concentrated on a few ranks: bombs and chain bombs show up
            lo = draw(st.integers(0, 12))
            pool = [c for c in NATURAL_IDS if lo <= (c % 54) // 4 < lo + 4]
            n = min(size - jokers, len(pool))
            nat = draw(st.lists(st.sampled_from(pool), min_size=n, max_size=n, unique=True))
        return sorted(nat + list(js))
    return hands()


@st.composite
def hand_and_prev(draw, max_cards=27):
    hand = draw(_hand_strategy(max_cards))
    other = draw(_hand_strategy(27))
    prev = None
    if draw(st.integers(0, 4)):
        options = legal_plays(other)
        prev = options[draw(st.integers(0, len(options) - 1))]
    return hand, prev


SETTINGS = settings(max_examples=300, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@SETTINGS
@given(hand_and_prev(), st.booleans())
def test_plays_are_legal(data, twos):
    """Every play is in the hand, is a reading of its cards, and beats prev
    (under either R-2.2 setting ``chain_bomb_twos``)."""
    hand, prev = data
    h = counts_of(hand)
    plays = legal_plays(hand, prev, chain_bomb_twos=twos)
    seen = set()
    for c in plays:
        assert all(x <= y for x, y in zip(c.counts, h))
        cards = pick_cards(hand, c.counts)
        if prev is None:
            assert c in interpretations(cards, chain_bomb_twos=twos)          # R-4 readings
        else:
            assert beats(c, prev)
            assert classify(cards, beat=prev, chain_bomb_twos=twos) == c       # engine's reading
            assert c.counts not in seen                                        # one reading per multiset
            seen.add(c.counts)
    assert len(set(plays)) == len(plays)
    assert can_beat(hand, prev, chain_bomb_twos=twos) == bool(plays)


@SETTINGS
@given(hand_and_prev())
def test_smallest_beating_property(data):
    """R-13.3: the trustee's play is legal and nothing legal is strictly weaker."""
    hand, prev = data
    if prev is None:
        play = smallest_beating(hand, None)
        assert play == trustee_lead(hand) and len(play.cards) == 1
        return
    play = smallest_beating(hand, prev)
    plays = legal_plays(hand, prev)
    if play is None:
        assert not plays
        return
    assert set(play.cards) <= set(hand) and len(set(play.cards)) == len(play.cards)
    assert counts_of(play.cards) == play.combo.counts
    assert play.combo in plays
    k = strength_key(play.combo)
    assert all(strength_key(c) >= k for c in plays)
    assert all(c.jokers >= play.combo.jokers for c in plays if strength_key(c) == k)
    h = counts_of(hand)
    reference = min(plays, key=lambda c: (strength_key(c), c.jokers, _breaks_group(h, c.counts),
                                          pick_cards(hand, c.counts)))
    assert play == Play(reference, pick_cards(hand, reference.counts))   # tie-breaks


def _sub_multisets(h):
    for v in itertools.product(*[range(x + 1) for x in h]):
        if any(v):
            yield v


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hand_and_prev(max_cards=8))
def test_brute_force_small_hands(data):
    """Small hands: same plays as classifying every sub-multiset (R-3, R-4, R-5)."""
    hand, prev = data
    h = counts_of(hand)
    got = legal_plays(hand, prev)
    if prev is None:
        expected = {c for v in _sub_multisets(h) for c in interpretations_for_counts(v)}
        assert {(c.counts, c.kind, c.top) for c in got} == {(c.counts, c.kind, c.top) for c in expected}
        assert set(got) == expected
    else:
        expected = {}
        for v in _sub_multisets(h):
            c = classify_counts(v, beat=prev)
            if c is not None:
                expected[v] = c
        assert {c.counts: c for c in got} == expected
