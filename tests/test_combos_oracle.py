"""The fast classifier (engine.rules.classify) against the brute-force oracle (tests/rules_oracle.py).

The oracle substitutes every joker by every natural rank and reads natural
multisets by the plain definitions of R-3 (joker-only sets by R-4.2); the
classifier uses deficits and windows.  Their sets of readings must be equal
(every field of :class:`Combo`), and the best reading (R-4.6) must agree.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.rules.cards import ACE, BJ, NUM_RANKS, SJ, TWO, card_id, rank_of
from engine.rules.combo import strength_key
from engine.rules.classify import interpretations, interpretations_for_counts

try:
    from tests.rules_oracle import oracle_readings
except ImportError:  # tests/ is not a package: pytest put it on sys.path
    from rules_oracle import oracle_readings  # type: ignore[no-redef]

MAX_CARDS = 16


def _ids(counts: tuple[int, ...]) -> list[int]:
    """Physical card ids for a count vector (suits/decks do not matter, R-1.6)."""
    out = []
    for r, c in enumerate(counts):
        for i in range(c):
            if r >= SJ:
                out.append(card_id(r, None, i))
            else:
                out.append(card_id(r, "SHCD"[i % 4], i // 4))
    return out


def _check(counts: tuple[int, ...], heavenly: str = "top", twos: bool = True) -> None:
    fast = interpretations_for_counts(counts, heavenly, chain_bomb_twos=twos)
    oracle = oracle_readings(counts, chain_bomb_twos=twos)
    assert len(set(fast)) == len(fast), "readings are not distinct"
    assert set(fast) == oracle
    keys = [strength_key(c, heavenly) for c in fast]
    assert keys == sorted(keys, reverse=True), "not best first"
    if oracle:
        best = max(strength_key(o, heavenly) for o in oracle)
        assert keys[0] == best


# --- strategies ------------------------------------------------------------------

@st.composite
def random_sets(draw: st.DrawFn) -> tuple[int, ...]:
    """Pure random sets of 1..16 physical cards (so 0..4 jokers)."""
    ids = draw(st.lists(st.integers(0, 107), min_size=1, max_size=MAX_CARDS, unique=True))
    v = [0] * NUM_RANKS
    for c in ids:
        v[rank_of(c)] += 1
    return tuple(v)


@st.composite
def near_combinations(draw: st.DrawFn) -> tuple[int, ...]:
    """A random combination, then some of its cards replaced by jokers, then a nudge."""
    kind = draw(st.sampled_from(
        ["single", "pair", "triple", "bomb", "straight", "pair_run", "triple_run", "chain_bomb"]))
    v = [0] * 13
    if kind in ("single", "pair", "triple", "bomb"):
        r = draw(st.integers(0, 12))
        v[r] = {"single": 1, "pair": 2, "triple": 3}.get(kind) or draw(st.integers(4, 8))
    elif kind == "chain_bomb":
        k = draw(st.integers(3, 4))
        low = draw(st.integers(0, 13 - k))  # up to a chain ending at 2
        for r in range(low, low + k):
            v[r] = 4
        extra = draw(st.integers(0, MAX_CARDS - 4 * k))
        for _ in range(extra):
            v[draw(st.integers(low, low + k - 1))] += 1
    else:
        per = {"straight": 1, "pair_run": 2, "triple_run": 3}[kind]
        length = draw(st.integers({"straight": 5}.get(kind, 3), min(12, MAX_CARDS // per)))
        low = draw(st.integers(0, 12 - length))
        for r in range(low, low + length):
            v[r] = per
    # replace up to four natural cards by jokers
    jokers = 0
    for _ in range(draw(st.integers(0, 4))):
        present = [r for r in range(13) if v[r]]
        if not present or sum(v) == 1 and draw(st.booleans()):
            break
        v[draw(st.sampled_from(present))] -= 1
        jokers += 1
    # nudge: add/remove a joker or a natural card, or move to a 2
    nudge = draw(st.sampled_from(["none", "none", "add_joker", "drop_joker", "add_natural",
                                  "drop_natural", "add_two"]))
    if nudge == "add_joker":
        jokers += 1
    elif nudge == "drop_joker" and jokers:
        jokers -= 1
    elif nudge == "add_natural":
        v[draw(st.integers(0, 12))] += 1
    elif nudge == "drop_natural":
        present = [r for r in range(13) if v[r]]
        if present:
            v[draw(st.sampled_from(present))] -= 1
    elif nudge == "add_two":
        v[12] += 1
    jokers = min(jokers, 4)
    v = [min(x, 8) for x in v]
    while sum(v) + jokers > MAX_CARDS:
        v[max(range(13), key=lambda r: v[r])] -= 1
    if sum(v) + jokers == 0:
        jokers = 1
    sj = draw(st.integers(max(0, jokers - 2), min(2, jokers)))
    return (*v, sj, jokers - sj)


@given(random_sets(), st.booleans())
@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_random_sets_match_oracle(counts: tuple[int, ...], twos: bool) -> None:
    _check(counts, twos=twos)


@given(near_combinations(), st.sampled_from(["top", "bottom"]), st.booleans())
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_near_combinations_match_oracle(counts: tuple[int, ...], heavenly: str, twos: bool) -> None:
    _check(counts, heavenly, twos)


@pytest.mark.parametrize("twos", [True, False], ids=["chain_bomb_twos", "no_twos"])
def test_chains_at_the_top_match_oracle(twos: bool) -> None:
    """R-2.2: every 3- and 4-rank window ending at A or 2, 3..5 naturals a rank, 0..2 jokers."""
    for k in (3, 4):
        for low in (ACE - k + 1, TWO - k + 1):
            for fill in itertools.product(range(3, 6), repeat=k):
                for sj, bj in ((0, 0), (1, 0), (1, 1), (0, 2)):
                    v = [0] * 13
                    for i, x in enumerate(fill):
                        v[low + i] = x
                    if sum(v) + sj + bj <= 20:
                        _check((*v, sj, bj), twos=twos)


@given(near_combinations())
@settings(max_examples=100, deadline=None)
def test_card_ids_and_counts_agree(counts: tuple[int, ...]) -> None:
    assert interpretations(_ids(counts)) == list(interpretations_for_counts(counts))


@pytest.mark.parametrize("jokers", [(0, 0), (1, 0), (0, 1), (1, 1), (2, 1), (2, 2)])
def test_joker_heavy_templates(jokers: tuple[int, int]) -> None:
    """Every window of 3..5 ranks with 0..2 natural cards each, plus jokers."""
    sj, bj = jokers
    for k in (3, 4, 5) if sj + bj <= 2 else (3, 4):
        for low in (0, 4, 12 - k, 13 - k):
            for fill in itertools.product((0, 1, 2), repeat=k):
                v = [0] * 13
                for i, x in enumerate(fill):
                    v[low + i] = x
                if sum(v) == 0 and sj + bj == 0:
                    continue
                _check((*v, sj, bj))


@pytest.mark.slow
def test_exhaustive_small_sets() -> None:
    """Every set of at most 5 cards two decks can hold (R-3, R-4), plus 2..4 jokers."""
    for size in range(1, 6):
        for combo in itertools.combinations_with_replacement(range(NUM_RANKS), size):
            v = [0] * NUM_RANKS
            for r in combo:
                v[r] += 1
            if v[SJ] > 2 or v[BJ] > 2:
                continue
            _check(tuple(v))


@pytest.mark.slow
def test_exhaustive_bomb_chains() -> None:
    """Every 3- and 4-rank window with 3..6 natural cards a rank and 0..4 jokers (R-3.10, R-4.4),
    up to the window ending at 2 (R-2.2)."""
    for k in (3, 4):
        for low in range(0, 13 - k + 1):
            for fill in itertools.product(range(3, 7), repeat=k):
                for sj, bj in ((0, 0), (1, 0), (1, 1), (2, 1), (2, 2)):
                    if sum(fill) + sj + bj > 20:
                        continue
                    v = [0] * 13
                    for i, x in enumerate(fill):
                        v[low + i] = x
                    _check((*v, sj, bj))
