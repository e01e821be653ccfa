"""The bot levels are ordered in strength (docs/BOTS.md "Measured strength"), so a ranked
ladder can tell them apart (issue 40 §6, bench/matchmaking.py ``bot_levels_ordered``).

A seeded table: fixed duplicate deals (each played twice, the seats swapped) through the real
engine, every bot seeded and ``hard`` on its node budget alone (its time cap never binds here),
so the table is the same on every machine and cannot flake.  Each level must beat the one
below it significantly (one-sided exact binomial test, p < 0.01), and ``hard`` must keep
beating ``greedy`` in at least 85 % of the matches (the bench measures about 92 %)."""

from __future__ import annotations

import random
import sys
from functools import cache
from pathlib import Path

import pytest
from scipy.stats import binomtest

from engine.config import load_config
from engine.tools import bot as bot_module
from engine.tools.bot import Bot
from engine.tools.plan import counts, follow_plan, plan
from engine.tools.search import Budget
from engine.tools.view import view_of

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.bots import deal, play_match  # noqa: E402

POINTS = load_config("points")
FULL = Budget(nodes=1000, ms=3_600_000.0)  # the level's own node budget; no time cap in a test
SEED = 40
DEALS = 60  # 120 matches a pair
#: (stronger, weaker): each level against the one below it, and the top level against greedy
PAIRS = [("greedy", "easy"), ("normal", "greedy"), ("hard", "normal"), ("hard", "greedy")]


@cache
def wins(strong: str, weak: str) -> tuple[int, int]:
    """(matches ``strong`` won, matches played) over the seeded duplicate deals."""
    won = 0
    for i in range(DEALS):
        h0, h1, first = deal(SEED, i)
        for swap in (0, 1):
            base = (SEED * 1_000_003 + i) * 4 + swap * 2
            a, b = Bot(strong, random.Random(base), budget=FULL), Bot(weak, random.Random(base + 1), budget=FULL)
            scores = play_match(POINTS, (h0, h1), first, (b, a) if swap else (a, b), {}, f"d{i}-{swap}")
            won += scores["s1" if swap else "s0"] > 0
    return won, 2 * DEALS


@pytest.mark.slow
@pytest.mark.parametrize("strong,weak", PAIRS[:3])
def test_each_level_beats_the_one_below(strong: str, weak: str) -> None:
    won, n = wins(strong, weak)
    assert binomtest(won, n, 0.5, alternative="greater").pvalue < 0.01, (strong, weak, won, n)


@pytest.mark.slow
def test_hard_keeps_beating_greedy() -> None:
    won, n = wins("hard", "greedy")
    assert won >= 0.85 * n, (won, n)


def test_normal_without_slips_is_the_plan_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    """The slips are all that sets ``normal`` apart from the plan policy the search plays out
    with (``hard``'s strength does not depend on them); with them, some moves differ."""
    from engine.match.evolve import apply
    from engine.match.state import MatchState
    from engine.store.memory import InMemoryEventStore

    h0, h1, first = deal(7, 0)
    store = InMemoryEventStore()
    play_match(POINTS, (h0, h1), first, (Bot("greedy", random.Random(1)), Bot("trustee")), {}, "m", store=store)
    states, s = [], MatchState(match_id="m")
    for e in store.load("m"):
        s = apply(s, e)
        if s.phase == "playing" and s.current_player is not None:
            states.append(s)
    views = [v for v in (view_of(st, st.current_player) for st in states) if v is not None]
    assert len(views) > 10

    def planned(v):  # the plan policy's own play, as cards' counts (None: pass)
        h = counts(v.hand)
        c = follow_plan(h, plan(h, v.chain_bomb_twos), v.to_beat, v.opponent_cards, v.heavenly,
                        v.chain_bomb_twos)
        return None if c is None else c.counts

    def normal(v, seed):
        p = Bot("normal", random.Random(seed)).choose(v)
        return None if p is None else p.combo.counts

    monkeypatch.setattr(bot_module, "NORMAL_SLIP", 0.0)
    assert all(normal(v, 3) == planned(v) for v in views)
    monkeypatch.setattr(bot_module, "NORMAL_SLIP", 1.0)
    assert any(normal(v, 3) != planned(v) for v in views)
