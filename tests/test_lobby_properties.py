"""Properties of the lobby's pure model (engine/lobby, issue 34 §6) over random interleavings
of Joins, Leaves, Readys, lost sockets past the grace and returns, match ends (a hand out),
escapes (a Leave after the deal), settlements, bots seated by the queue timer, the ready
clock (R-13.2), and the process managers' commands delivered in any order between
aggregates (tests/lobby_world.py):

* a player is in at most one place;
* a player who left is never seated again (paired, requeued, seated in a next match)
  without a new Join;
* every match belongs to a table (``<table>-<n>``, n up to the table's count);
* a bot never sits alone, never waits in the queue;
* replaying each queue and table stream equals its live state, and the queue's snapshot
  (engine.lobby.state.encode_queue) reads back equal;
* every table ends: everyone leaves and the world is driven until nothing is open.

And the churn property: one player who joins and leaves as fast as the room allows cannot
keep honest players from a deal: each honest player is dealt within ``ready_seconds`` + 5 s
of its Join, on the model's clock.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule

from tests.lobby_world import World, player_rules, room_config

PEOPLE = ["p1", "p2", "p3", "p4", "p5"]
people = st.sampled_from(PEOPLE)


class LobbyMachine(player_rules(people)):  # type: ignore[misc]
    def __init__(self) -> None:
        super().__init__()
        self.world = World(cfg=room_config(ready_seconds=20, leave_cooldown_seconds=2,
                                           leave_cooldown_max_seconds=16))

    @rule(i=st.integers(min_value=0, max_value=20))
    def a_table_gets_ready(self, i: int) -> None:
        """Everyone at one seated table sends Ready (the deal follows)."""
        seated = sorted(t for t, s in self.world.tables.items() if s.status == "seated")
        if seated:
            self.world.bots_ready()
            for p in self.world.tables[seated[i % len(seated)]].people:
                self.world.ready(p)

    @precondition(lambda self: bool(self.world.pending))
    @rule(i=st.integers(min_value=0, max_value=20))
    def deliver(self, i: int) -> None:
        targets = list(self.world.pending)
        self.world.deliver(targets[i % len(targets)])

    @precondition(lambda self: bool(self.world.pending))
    @rule(picks=st.lists(st.integers(min_value=0, max_value=20), min_size=1, max_size=12))
    def deliver_several(self, picks: list[int]) -> None:
        """Several of the managers' commands, the targets interleaved as ``picks`` says."""
        for i in picks:
            targets = list(self.world.pending)
            if not targets:
                return
            self.world.deliver(targets[i % len(targets)])

    @rule(i=st.integers(min_value=0, max_value=20))
    def play_out(self, i: int) -> None:
        live = sorted(m for m, s in self.world.matches.items() if s.phase == "playing")
        if live:
            self.world.play_out(live[i % len(live)])

    @rule(i=st.integers(min_value=0, max_value=20))
    def settle(self, i: int) -> None:
        between = sorted(t for t, s in self.world.tables.items() if s.status == "between")
        if between:
            self.world.settle(between[i % len(between)])

    @rule(ms=st.sampled_from([100, 1_000, 3_000, 10_000, 21_000]))
    def time_passes(self, ms: int) -> None:
        self.world.now += ms
        self.world.fire_ready_clocks()

    @invariant()
    def sound(self) -> None:
        self.world.check()

    def teardown(self) -> None:
        self.world.quiesce(PEOPLE)
        self.world.check()
        assert all(t.status == "closed" for t in self.world.tables.values())
        assert all(m.over for m in self.world.matches.values())


LobbyMachine.TestCase.settings = settings(max_examples=80, stateful_step_count=80, deadline=None,
                                          suppress_health_check=[HealthCheck.too_slow])
test_lobby_model = LobbyMachine.TestCase


# ---- churn ---------------------------------------------------------------------------------

STEP_MS = 30  # the griefer's pace: a Join or a Leave every 30 ms, within the socket's rate limit
SLACK_MS = 5_000


def _run_churn(honest_joins: list[int], ready_after: list[int], horizon_ms: int, deliver_every: int,
               bots: bool = True) -> World:
    """The griefer ``g`` joins and, once seated, leaves, as fast as allowed, for ``horizon_ms``;
    honest players join at the given offsets and send Ready ``ready_after`` ms after each
    seating.  The process managers' commands are delivered every ``deliver_every`` steps."""
    w = World(cfg=room_config(ready_seconds=30, leave_cooldown_seconds=5, leave_cooldown_max_seconds=300), bots=bots)
    start = w.now
    honest = [f"h{i}" for i in range(len(honest_joins))]
    seated_at: dict[str, int] = {}
    step = 0
    while w.now - start < horizon_ms:
        t = w.now - start
        for h, at in zip(honest, honest_joins):
            if at <= t < at + STEP_MS:
                w.join(h)
        placed = w.queue.place_of("g")
        if placed is None and w.queue.waiting_of("g") is None:
            w.join("g")  # refused during the cooldown: tried again at the next step
        elif placed is not None and not placed.leaving:
            w.leave("g")
        if step % deliver_every == 0:
            w.deliver_all()
        w.bots_ready()
        for h, delay in zip(honest, ready_after):
            match = w.current_match(h)
            if match is None:
                seated_at.pop(h, None)
                continue
            first = seated_at.setdefault(h, w.now)
            if w.now - first >= delay:
                w.ready(h)
        w.queue_timer()
        w.fire_ready_clocks()
        step += 1
        w.now += STEP_MS
    w.deliver_all()
    return w


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(bots=st.booleans(), n=st.integers(min_value=1, max_value=4), data=st.data(),
       deliver_every=st.integers(min_value=1, max_value=4))
def test_a_churning_player_cannot_keep_honest_players_from_a_deal(bots: bool, n: int, data: st.DataObject,
                                                                   deliver_every: int) -> None:
    """With ``gateway --bots`` any number of honest players; without, an even number that join
    together (a lone honest player without bots waits for a second one, churn or not)."""
    if bots:
        joins = data.draw(st.lists(st.integers(min_value=0, max_value=20_000), min_size=n, max_size=n))
    else:
        pairs = data.draw(st.lists(st.integers(min_value=0, max_value=20_000), min_size=1, max_size=2))
        joins = [at + d for at in pairs for d in (0, data.draw(st.integers(min_value=0, max_value=60)))]
        n = len(joins)
    readies = data.draw(st.lists(st.sampled_from([0, 30, 500, 2_000]), min_size=n, max_size=n))
    w = _run_churn(joins, readies, horizon_ms=max(joins) + 30_000 + SLACK_MS + 1_000, deliver_every=deliver_every,
                   bots=bots)
    w.check()
    for i, at in enumerate(joins):
        h = f"h{i}"
        assert h in w.dealt_at, f"{h} (joined at +{at} ms) was never dealt"
        waited = w.dealt_at[h] - w.joined_at[h]
        assert waited <= w.cfg.ready_seconds * 1000 + SLACK_MS, f"{h} waited {waited} ms for a deal"
    seatings = sum(1 for e in w.queue_events if type(e).__name__ in ("TablePaired", "BotSeated")
                   and "g" in getattr(e, "players", (getattr(e, "player", None),)))
    assert seatings <= 8  # 5, 10, 20, 40 s… of cooldown: a handful of seatings, not one every 60 ms


@pytest.mark.parametrize("cooldown", [0])
def test_without_the_cooldown_the_churn_does_seat_the_griefer_again_and_again(cooldown: int) -> None:
    """The control: the same churn with the cooldown off seats the griefer many times
    (the property above is not true by accident)."""
    w = World(cfg=room_config(leave_cooldown_seconds=cooldown))
    for _ in range(200):
        w.join("g")
        w.deliver_all()
        w.leave("g")
        w.deliver_all()
        w.now += STEP_MS
        if w.queue.waiting_of("h") is None and w.queue.place_of("h") is None and "h" not in w.joined_at:
            w.join("h")
    seatings = sum(1 for e in w.queue_events if type(e).__name__ == "TablePaired")
    assert seatings > 50
