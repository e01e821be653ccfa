"""Pairing by skill in a ranked room's queue (issue 40 §4; engine/lobby/skill.py): the closest
rating inside a window that widens with the wait, the fallback after the room's longest wait,
the bot that never pre-empts the window, and a replay that needs no ratings projection."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.config import load_config
from engine.lobby import commands as lc
from engine.lobby import events as ev
from engine.lobby.decide import BotPolicy, LobbyContext, decide_and_apply
from engine.lobby.replay import replay_queue
from engine.lobby.skill import window
from engine.lobby.state import QueueState
from engine.match.errors import NotAllowed, StaleCommand

RANKED = load_config("points").model_copy(update={
    "name": "ranked", "ranked": True, "match_window": 50.0, "match_window_per_second": 10.0,
    "match_max_wait_seconds": 20.0})
Q0 = QueueState(room="ranked")
T0 = 1_000_000


class Queue:
    """A ranked room's queue driven on a simulated clock; every event kept for the replay."""

    def __init__(self, cfg: Any = RANKED, bots: BotPolicy | None = None):
        self.state, self.cfg, self.bots, self.events, self.n = Q0, cfg, bots, [], 0

    def do(self, cmd: lc.LobbyCommand, now: int) -> list[ev.LobbyEvent]:
        self.n += 1
        ctx = LobbyContext(now_ms=now, room=self.cfg, table_id=f"t{self.n}", bot_id=f"bot-{self.n}", bots=self.bots)
        out, self.state = decide_and_apply(self.state, cmd, ctx)
        self.events += out
        return out

    def join(self, p: str, rating: float | None, now: int) -> list[ev.LobbyEvent]:
        return self.do(lc.Join(command_id=f"j-{p}-{now}", room="ranked", player=p, rating=rating), now)

    def tick(self, now: int) -> list[ev.LobbyEvent]:
        return self.do(lc.PairTimer(command_id=f"tick-{now}", room="ranked"), now)


def paired(events: list[ev.LobbyEvent]) -> list[tuple[tuple[str, str], bool]]:
    return [(e.players, e.fallback) for e in events if isinstance(e, ev.TablePaired)]


def test_far_apart_players_wait_until_the_window_covers_the_gap():
    q = Queue()
    assert paired(q.join("a", 1000.0, T0)) == []
    assert paired(q.join("b", 1300.0, T0)) == []  # 300 apart, windows 50
    assert paired(q.tick(T0 + 10_000)) == []  # windows 150
    assert paired(q.tick(T0 + 25_000)) == [(("a", "b"), False)]  # 50 + 10·25 = 300


def test_the_closest_rating_inside_the_window_is_chosen():
    q = Queue()
    q.join("a", 1000.0, T0)
    q.join("far", 1400.0, T0 + 1000)
    q.join("near", 1045.0, T0 + 2000)
    assert paired(q.events) == [(("a", "near"), False)]
    assert q.state.waiting_players() == ("far",)


def test_unrated_players_count_as_new_players():
    q = Queue()
    q.join("new", None, T0)
    assert paired(q.join("b", 1030.0, T0)) == [(("new", "b"), False)]


def test_after_the_longest_wait_anyone_will_do():
    cfg = RANKED.model_copy(update={"match_window_per_second": 0.0})
    q = Queue(cfg)
    q.join("a", 1000.0, T0)
    q.join("b", 2000.0, T0)
    assert paired(q.tick(T0 + 19_999)) == []
    assert paired(q.tick(T0 + 20_000)) == [(("a", "b"), True)]


def test_a_bot_never_preempts_the_widening_window():
    q = Queue(bots=BotPolicy(after_ms=5000, level="hard"))
    q.join("a", 1000.0, T0)
    with pytest.raises(StaleCommand):
        q.do(lc.QueueTimer(command_id="qt1", room="ranked", version=q.state.version), T0 + 6000)
    out = q.do(lc.QueueTimer(command_id="qt2", room="ranked", version=q.state.version), T0 + 20_000)
    assert [type(e).__name__ for e in out] == ["BotSeated"]


def test_pair_timer_only_in_ranked_rooms():
    q = Queue(load_config("points"))
    with pytest.raises(NotAllowed):
        q.do(lc.PairTimer(command_id="t", room="ranked"), T0)


def test_rating_must_be_finite():
    with pytest.raises(Exception):
        lc.Join(command_id="j", room="ranked", player="a", rating=float("nan"))


def test_a_requeued_player_keeps_the_rating_of_their_join():
    q = Queue()
    q.join("a", 1500.0, T0)
    q.join("b", 1510.0, T0)
    q.do(lc.ReleaseTable(command_id="rel", room="ranked", table="t2", stayed=("a",), dealt=True), T0 + 5000)
    assert q.state.waiting_of("a").rating == 1500.0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(500, 2500), st.integers(0, 4000)), min_size=2, max_size=25))
def test_pairs_stay_inside_a_window_unless_fallback_and_replay_needs_no_projection(arrivals):
    """Property: every pair's gap is inside the window of one of its players at pairing time,
    or the pair is a fallback past the longest wait; folding the queue's events alone gives
    the same state (the ratings came in the Joins)."""
    q = Queue()
    now, joined = T0, {}
    for i, (rating, gap_ms) in enumerate(arrivals):
        now += gap_ms
        q.tick(now)
        q.join(f"p{i}", rating, now)
        joined[f"p{i}"] = (rating, now)
    for e in q.events:
        if isinstance(e, ev.TablePaired):
            (ra, ta), (rb, tb) = joined[e.players[0]], joined[e.players[1]]
            inside = abs(ra - rb) <= max(window(RANKED, e.ts - ta), window(RANKED, e.ts - tb)) + 1e-9
            assert inside or e.fallback
            if e.fallback:
                assert e.ts - min(ta, tb) >= RANKED.match_max_wait_seconds * 1000
    assert replay_queue("ranked", q.events) == q.state


def test_the_live_gateway_bot_waits_for_a_ranked_rooms_longest_wait():
    """gateway --bots (the live lobby, gateway/bots.py): in a ranked room a bot sits only after
    match_max_wait_seconds, elsewhere after BOT_AFTER_S."""
    from types import SimpleNamespace

    from gateway.bots import BOT_AFTER_S, BotDriver

    lobby = SimpleNamespace(rooms={"ranked": RANKED, "points": load_config("points")})
    driver = BotDriver(lobby, None, None)
    assert driver.wait_ms_of("ranked") == int(max(BOT_AFTER_S, RANKED.match_max_wait_seconds) * 1000) == 20_000
    assert driver.wait_ms_of("points") == int(BOT_AFTER_S * 1000)
