"""Properties of a private table's series (engine/lobby/series.py, issue 39 §10) over random
interleavings of its commands: joins (the friend, a stranger, a wrong code), the join timer
(``not_joined`` or a bot), cancels, hands started and settled (random scores, bombs, an
escape, R-12), votes to end asked, answered or left to time out, the table closing, and the
clock moving, each timer fired late or early:

* the totals equal the sum of the hands' settlements (the oracle: the SettleHand commands
  the series accepted), and the recorded standings equal :func:`standings`;
* a series never has more than its N hands (started or settled);
* no player starts more than 3 votes;
* replaying the stream equals the live state, and the stream passes its check;
* a dissolved series ends with its hand settled (every hand it started);
* every series ends: driven by its timers and its hands from any state it reached.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from engine.lobby import series_commands as sc
from engine.lobby import series_events as se
from engine.lobby.series import (
    MAX_VOTES,
    SeriesContext,
    SeriesState,
    check_series_stream,
    decide_and_apply,
    replay_series,
    standings,
)
from engine.match.errors import Rejected
from tests.lobby_world import room_config

CFG = room_config(private_join_seconds=30, end_vote_seconds=10)
CODE = "K7M2QX"
people = st.sampled_from(["a", "b", "c"])


class SeriesMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 1_000_000
        self.state = SeriesState(series="s1")
        self.events: list[se.SeriesEvent] = []
        self.ids = 0
        self.settled: list[dict[str, int]] = []  # the scores of each SettleHand the series accepted
        self.codes: list[str] = []

    # -- running ---------------------------------------------------------------------------------
    def run(self, command: sc.SeriesCommand) -> Rejected | None:
        ctx = SeriesContext(now_ms=self.now, room=CFG, code=CODE, table_id="p1", bot_id="bot-1")
        try:
            events, after = decide_and_apply(self.state, command, ctx)
        except Rejected as r:
            self.codes.append(r.code)
            assert self.state == replay_series("s1", self.events)  # a refusal changes nothing
            return r
        if isinstance(command, sc.SettleHand) and any(isinstance(e, se.HandSettled) for e in events):
            self.settled.append(dict(command.scores))
        for e in events:
            if isinstance(e, se.SeriesFinished):
                before = replay_series("s1", self.events + events[:events.index(e)])
                assert e.standings == standings(before)
        self.events += events
        self.state = after
        return None

    def cid(self) -> str:
        self.ids += 1
        return f"c{self.ids}"

    @initialize(hands=st.sampled_from([4, 8, 16]), bots=st.booleans())
    def create(self, hands: int, bots: bool) -> None:
        assert self.run(sc.CreateTable(command_id="create", series="s1", room=CFG.name, player="a",
                                       hands=hands, bots=bots)) is None  # type: ignore[arg-type]

    # -- the players -----------------------------------------------------------------------------
    @rule(p=people, wrong=st.booleans())
    def join(self, p: str, wrong: bool) -> None:
        self.run(sc.JoinTable(command_id=self.cid(), series="s1", code="ZZZZZZ" if wrong else CODE.lower(),
                              player=p))

    @rule(p=people)
    def cancel(self, p: str) -> None:
        self.run(sc.CancelTable(command_id=self.cid(), series="s1", player=p))

    @rule(p=people)
    def request_end(self, p: str) -> None:
        self.run(sc.RequestEnd(command_id=self.cid(), series="s1", player=p))

    @rule(p=people, agree=st.booleans())
    def vote(self, p: str, agree: bool) -> None:
        self.run(sc.VoteEnd(command_id=self.cid(), series="s1", player=p, agree=agree))

    # -- the clock and the timers ------------------------------------------------------------------
    @rule(ms=st.sampled_from([1, 500, 9_999, 10_000, 31_000]))
    def time_passes(self, ms: int) -> None:
        self.now += ms

    @rule()
    def join_timer(self) -> None:
        self.run(sc.JoinTimer(command_id=self.cid(), series="s1"))

    @rule(back=st.integers(min_value=0, max_value=2))
    def vote_timer(self, back: int) -> None:
        n = self.state.vote.n if self.state.vote is not None else sum(k for _p, k in self.state.votes)
        self.run(sc.VoteTimer(command_id=self.cid(), series="s1", vote=max(n - back, 1)))

    # -- the hands ---------------------------------------------------------------------------------
    @rule(n=st.integers(min_value=1, max_value=17))
    def start_hand(self, n: int) -> None:
        self.run(sc.StartHand(command_id=self.cid(), series="s1", match=f"p1-{n}"))

    @rule(a=st.integers(min_value=-5_000, max_value=5_000), escape=st.sampled_from([None, None, None, "a", "b"]),
          bomb=st.integers(min_value=0, max_value=12), n=st.integers(min_value=0, max_value=2))
    def settle_hand(self, a: int, escape: str | None, bomb: int, n: int) -> None:
        match = self.state.current if n else f"p1-{self.state.started + n}"
        if match is None or len(self.state.players) < 2:
            return
        b = self.state.players[1]
        esc = {"a": "a", "b": b}.get(escape or "")
        self.run(sc.SettleHand(command_id=self.cid(), series="s1", match=match, scores={"a": a, b: -a},
                               winner="a" if a >= 0 else b, bombs={"a": bomb}, escaper=esc))

    @rule()
    def table_closes(self) -> None:
        self.run(sc.AbandonSeries(command_id=self.cid(), series="s1"))

    # -- properties --------------------------------------------------------------------------------
    @invariant()
    def sound(self) -> None:
        s = self.state
        assert replay_series("s1", self.events) == s
        assert check_series_stream(self.events) == []
        totals = {p: 0 for p in s.players}
        for scores in self.settled:
            for p, x in scores.items():
                totals[p] += x
        assert s.totals() == totals == standings(s).totals
        assert s.started <= s.hands and len(s.played) <= s.hands
        assert all(k <= MAX_VOTES for _p, k in s.votes)
        if s.status == "finished":
            assert s.final == standings(s)
            if s.reason in ("dissolved", "completed", "escaped"):
                assert len(s.played) == s.started  # every hand it started was settled
            if s.reason == "completed":
                assert len(s.played) == s.hands

    def teardown(self) -> None:
        """Every series ends: its timers fire, its hands are dealt and settled."""
        for _ in range(3 * 16 + 10):
            s = self.state
            if s.status == "finished":
                break
            self.now += 60_000
            if s.status == "open":
                self.join_timer()
            elif s.vote is not None:
                self.run(sc.VoteTimer(command_id=self.cid(), series="s1", vote=s.vote.n))
            elif s.current is not None:
                self.settle_hand(1, None, 0, 1)
            else:
                # a match of the table no rule has used (the rules start any p1-1 … p1-17)
                assert self.run(sc.StartHand(command_id=self.cid(), series="s1", match=f"p1-{s.started + 100}")) is None
        assert self.state.status == "finished", self.state
        self.sound()


SeriesMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=60, deadline=None,
                                           suppress_health_check=[HealthCheck.too_slow])
test_series_model = SeriesMachine.TestCase


def test_the_machines_rules_reach_every_reason_and_the_refusals() -> None:
    """The control: scripted runs through the machine's own rules end each way a series can,
    and meet refusals (so the properties are not true by accident)."""
    reasons: set[Any] = set()
    codes: set[str] = set()
    explore_simple(reasons, codes)
    assert reasons == {"completed", "dissolved", "escaped", "abandoned", "not_joined", "cancelled"}, reasons
    assert {"table_full", "unknown_table", "table_cancelled", "no_vote_open", "not_your_vote"} <= codes, codes


def explore_simple(reasons: set[Any], codes: set[str]) -> None:
    """Scripted runs that end each way, through the machine's own rules."""
    scripts: list[list[tuple[str, dict[str, Any]]]] = [
        [("join", {"p": "b", "wrong": False})],  # completed by the teardown
        [("join", {"p": "b", "wrong": False}), ("request_end", {"p": "b"}), ("vote", {"p": "a", "agree": True})],
        [("join", {"p": "b", "wrong": False}), ("start_hand", {"n": 1}),
         ("settle_hand", {"a": 3, "escape": "b", "bomb": 4, "n": 1})],
        [("join", {"p": "b", "wrong": False}), ("table_closes", {})],
        [("time_passes", {"ms": 31_000}), ("join_timer", {})],
        [("cancel", {"p": "a"}), ("join", {"p": "c", "wrong": True}), ("join", {"p": "c", "wrong": False})],
        [("join", {"p": "b", "wrong": False}), ("join", {"p": "c", "wrong": False}), ("vote", {"p": "a", "agree": True}),
         ("request_end", {"p": "a"}), ("vote", {"p": "a", "agree": True}), ("vote", {"p": "b", "agree": False})],
    ]
    for script in scripts:
        m = SeriesMachine()
        m.create(4, False)
        for name, kw in script:
            getattr(m, name)(**kw)
            m.sound()
        m.teardown()
        reasons.add(m.state.reason)
        codes.update(m.codes)
