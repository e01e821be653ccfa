"""The bot levels (issue 27, docs/BOTS.md): they decide from a player's view only, play
legally through the real engine, and a seeded bot repeats itself.  No timing here: the
costs and the strength are figures of bench/bots.py."""

from __future__ import annotations

import json
import random
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.config import load_config
from engine.match.state import MatchState
from engine.rules.cards import NUM_CARDS
from engine.tools.bot import Bot, UnknownPolicy, choose_for
from engine.tools.levels import LEVELS, POLICIES
from engine.tools.plan import counts, plan
from engine.tools.search import Budget
from engine.tools.view import PlayerView, ViewFolder, unseen_cards, view_of

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.bots import deal, play_match  # noqa: E402

POINTS = load_config("points")
SMALL = Budget(nodes=150, ms=60_000.0)  # a small node budget; the time cap never binds in a test


def _bot(level: str, seed: int) -> Bot:
    return Bot(level, random.Random(seed), budget=SMALL)


def _events(seed: int, levels: tuple[str, str] = ("normal", "greedy")) -> list:
    """Every event of one seeded match through the engine (the bench's match driver)."""
    from engine.store.memory import InMemoryEventStore

    h0, h1, first = deal(seed, 0)
    store = InMemoryEventStore()
    play_match(POINTS, (h0, h1), first, (Bot(levels[0], random.Random(seed)),
                                         Bot(levels[1], random.Random(seed + 1))), {}, "m", store=store)
    return list(store.load("m"))


def _states(seed: int, levels: tuple[str, str] = ("normal", "greedy")) -> list[MatchState]:
    from engine.match.evolve import apply

    out, s = [], MatchState(match_id="m")
    for e in _events(seed, levels):
        s = apply(s, e)
        out.append(s)
    return out


@pytest.fixture(scope="module")
def match_states() -> list[MatchState]:
    return [s for s in _states(7) if s.phase == "playing"]


# -- only what a player sees --------------------------------------------------------------------

@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_same_view_same_move_whatever_the_opponent_holds(match_states, data):
    """Issue 27 §2: two states with the same view -- the opponent's hand and the set-aside
    cards dealt differently from the unseen cards -- give every level the same move."""
    state = data.draw(st.sampled_from(match_states))
    me = state.turn
    assert me is not None
    opp = state.seat(1 - me)
    pool = list(opp.hand) + list(state.set_aside)
    shuffled = data.draw(st.permutations(pool))
    other = state.with_seat(1 - me, replace(opp, hand=tuple(shuffled[:len(opp.hand)])))
    other = replace(other, set_aside=tuple(shuffled[len(opp.hand):]))
    assert other != state or sorted(shuffled[:len(opp.hand)]) == sorted(opp.hand)
    player = state.seat(me).player
    assert view_of(state, player) == view_of(other, player)
    level = data.draw(st.sampled_from(POLICIES))
    seed = data.draw(st.integers(0, 2**32))
    assert choose_for(_bot(level, seed), state, player) == choose_for(_bot(level, seed), other, player)


def test_a_view_holds_no_hidden_card(match_states):
    for state in match_states[::7]:
        for i in (0, 1):
            s = state.seat(i)
            view = view_of(state, s.player)
            assert view is not None
            hidden = set(state.seat(1 - i).hand) | set(state.set_aside)
            assert not hidden & (set(view.hand) | set(view.played))
            assert set(unseen_cards(view)) == hidden
            assert view.opponent_cards == len(state.seat(1 - i).hand)


def test_the_view_folder_sees_what_view_of_sees():
    """The gateway's bots build their view from the redacted events of their update stream
    (compact, then expanded as outbox.parse_entry does): it equals the view read off the engine's state, at every step, for both players."""
    from engine.match.evolve import apply
    from engine.service.publish import compact_event, expand_event
    from projections.views import redact_event

    events = _events(3)
    states = _states(3)
    folders = {p: ViewFolder(p, POINTS) for p in ("s0", "s1")}
    s = MatchState(match_id="m")
    for e in events:
        s = apply(s, e)
        for p, folder in folders.items():
            sent = compact_event(json.loads(json.dumps(redact_event(e, p, state=s), default=list)))
            folder.apply(expand_event(sent, "m", e.command_id, e.seq))  # as the update stream carries it
            if s.phase == "playing":
                expected = view_of(s, p)
                assert folder.view() == expected, (e.type, p)
                assert folder.my_turn == (s.current_player == p)
    assert s == states[-1] and all(f.finished for f in folders.values())


# -- legal, finished, reproducible ---------------------------------------------------------------

@pytest.mark.parametrize("level", LEVELS)
def test_each_level_finishes_matches_through_the_engine(level):
    """Every move is accepted by the engine (play_match raises on a refusal) and the match
    is settled; the same seeds replay the same match."""
    h0, h1, first = deal(11, 0)
    runs = []
    for _ in range(2):
        scores = play_match(POINTS, (h0, h1), first, (_bot(level, 5), _bot("trustee", 6)), {}, "m")
        runs.append(scores)
        assert sorted(scores.values())[0] == -sorted(scores.values())[1] != 0  # zero-sum
    assert runs[0] == runs[1]


def test_hard_is_reproducible_decision_by_decision(match_states):
    for state in match_states[::5]:
        player = state.current_player
        assert player is not None
        a = [choose_for(_bot("hard", 9), state, player) for _ in range(2)]
        assert a[0] == a[1]


@pytest.mark.parametrize("text,cards", [
    ("3 4 5 6 7 9 9 J J J 2 2 2 2 BJ", ["2 2 2 2", "3 4 5 6 7", "9 9", "J J J", "BJ"]),
    ("4 4 4 4 5 5 5 5 6 6 6 6 8", ["4 4 4 4 5 5 5 5 6 6 6 6", "8"]),   # a chain bomb
    ("SJ SJ BJ 3 3 4 4 5 5", ["SJ SJ BJ", "3 3 4 4 5 5"]),
    ("Q K A 2 2 SJ", ["Q", "K", "A", "2 2", "SJ"]),                    # no straight to 2
])
def test_plan_groups_are_whole_combinations(text, cards):
    from engine.rules.cards import parse_cards
    from engine.rules.classify import classify
    from engine.rules.moves import format_counts

    groups = plan(counts(parse_cards(text)))
    assert [format_counts(g.counts) for g in groups] == cards
    for g in groups:
        reading = classify(" ".join(format_counts(g.counts).split()))
        assert reading is not None and (reading.kind, reading.top) == (g.kind, g.top)


def test_leading_the_last_cards_goes_out():
    hand = tuple(range(0, 20, 4))  # 3 4 5 6 7 (one card of each, deck 0)
    view = PlayerView(hand=hand, opponent_cards=5, config=POINTS,
                      played=tuple(c for c in range(NUM_CARDS) if c >= 60)[:30])
    for level in LEVELS:
        play = _bot(level, 1).choose(view)
        assert play is not None and sorted(play.cards) == list(hand), level


def test_an_unknown_level_is_a_typed_error():
    with pytest.raises(UnknownPolicy, match="one of trustee, greedy, random, easy, normal, hard"):
        Bot("expert")


def test_a_room_bot_level_overrides_the_gateway_level():
    """``gateway --bots --bot-level L``; a room config's ``bot_level`` wins for that room."""
    from types import SimpleNamespace

    from engine.config import parse_config
    from gateway.bots import BotDriver

    easy = parse_config({**POINTS.to_record(), "name": "practice", "bot_level": "easy"}, "practice.toml")
    lobby = SimpleNamespace(rooms={"points": POINTS, "practice": easy})
    driver = BotDriver(lobby, None, None, level="hard")  # type: ignore[arg-type]
    assert driver.level_of("points") == "hard"
    assert driver.level_of("practice") == "easy"
    assert driver.level_of("unknown") == "hard" and driver.level_of(None) == "hard"
    with pytest.raises(ValueError, match="unknown bot level 'expert'"):
        BotDriver(lobby, None, None, level="expert")  # type: ignore[arg-type]


@given(st.lists(st.integers(0, 8), min_size=13, max_size=13), st.integers(0, 2), st.integers(0, 2))
def test_plan_sets_cost_matches_the_groups(ranks: list[int], small: int, big: int) -> None:
    """The plan's cost of the leftover sets, counted without building them, is the cost of the built groups."""
    from engine.tools.plan import _cost, _sets, _sets_cost

    h = [*ranks, small, big]
    assert _sets_cost(h) == _cost(_sets(list(h)))
