"""A private table's series (engine/lobby/series.py, issue 39): every refusal code, creating
and joining, the join timer (``private_join_seconds``: ``not_joined`` or a bot), the vote to
end (``end_vote_seconds``, at most 3 per player, no answer counts as agreed), the end of a
series by each reason, the standings, the process managers, the codec and the room keys;
R-11.1 (admission), R-12 (an escape ends the series)."""

from __future__ import annotations

from typing import Any

import pytest

from engine.config import ConfigError, load_config, parse_config
from engine.lobby import events as ev
from engine.lobby import series_commands as sc
from engine.lobby import series_events as se
from engine.lobby import series_managers as sm
from engine.lobby.errors import SERIES_REJECTION_TYPES
from engine.lobby.series import (
    MAX_VOTES,
    SeriesContext,
    SeriesState,
    check_series_stream,
    decide,
    decide_and_apply,
    replay_series,
    standings,
    summary,
)
from engine.match.errors import Rejected
from tests.lobby_world import room_config

CFG = room_config(private_join_seconds=600, end_vote_seconds=60)
NOW = 1_000_000
JOIN_MS, VOTE_MS = 600_000, 60_000


def ctx(**kw: Any) -> SeriesContext:
    return SeriesContext(**{"now_ms": NOW, "room": CFG, "code": "K7M2QX", "table_id": "p1", "bot_id": "bot-9",
                            **kw})


def run(state: SeriesState, *commands: sc.SeriesCommand, **kw: Any) -> SeriesState:
    for c in commands:
        _events, state = decide_and_apply(state, c, ctx(**kw))
    return state


def create(hands: int = 4, bots: bool = False, spectators: bool = False) -> sc.CreateTable:
    return sc.CreateTable(command_id="c", series="s1", room="points", player="a", hands=hands,  # type: ignore[arg-type]
                          spectators=spectators, bots=bots)


def join(p: str = "b", code: str = "K7M2QX") -> sc.JoinTable:
    return sc.JoinTable(command_id=f"j-{p}", series="s1", code=code, player=p)


def start(n: int) -> sc.StartHand:
    return sc.StartHand(command_id=f"h{n}", series="s1", match=f"p1-{n}")


def settle(n: int, a: int = 10, winner: str = "a", **kw: Any) -> sc.SettleHand:
    return sc.SettleHand(command_id=f"x{n}", series="s1", match=f"p1-{n}", scores={"a": a, "b": -a}, winner=winner,
                         **kw)


def request(p: str = "a", cid: str = "r") -> sc.RequestEnd:
    return sc.RequestEnd(command_id=cid, series="s1", player=p)


def vote(p: str = "b", agree: bool = True) -> sc.VoteEnd:
    return sc.VoteEnd(command_id=f"v-{p}-{agree}", series="s1", player=p, agree=agree)


S0 = SeriesState(series="s1")
OPEN = run(S0, create())
PLAYING = run(OPEN, join())
IN_HAND = run(PLAYING, start(1))
VOTING = run(PLAYING, request())
FINISHED = run(PLAYING, start(1), settle(1), start(2), settle(2), start(3), settle(3), start(4), settle(4))
CANCELLED = run(OPEN, sc.CancelTable(command_id="x", series="s1", player="a"))
EXPIRED = run(OPEN, sc.JoinTimer(command_id="t", series="s1"), now_ms=NOW + JOIN_MS)
THREE_VOTES = run(PLAYING, request("a", "r1"), vote("b", False), request("a", "r2"), vote("b", False),
                  request("a", "r3"), vote("b", False))

REFUSALS = [
    # (name, state, command, context changes, code)
    ("a code no table has", S0, join(), {}, "unknown_table"),
    ("a code that is not the series'", OPEN, join(code="AAAAAA"), {}, "unknown_table"),
    ("a code at a finished series that is not its own", FINISHED, join("c", code="AAAAAA"), {}, "unknown_table"),
    ("a cancel at no table", S0, sc.CancelTable(command_id="x", series="s1", player="a"), {}, "unknown_table"),
    ("a third player", PLAYING, join("c"), {}, "table_full"),
    ("a join after the series ended", FINISHED, join("c"), {}, "table_closed"),
    ("a vote at a finished series", FINISHED, request(), {}, "table_closed"),
    ("a join after the join time, the timer not fired yet", OPEN, join(), {"now_ms": NOW + JOIN_MS},
     "table_expired"),
    ("a join after the table expired", EXPIRED, join(), {}, "table_expired"),
    ("a join at a cancelled table", CANCELLED, join(), {}, "table_cancelled"),
    ("a second cancel", CANCELLED, sc.CancelTable(command_id="x2", series="s1", player="a"), {}, "table_cancelled"),
    ("a cancel by the friend", PLAYING, sc.CancelTable(command_id="x", series="s1", player="b"), {}, "not_owner"),
    ("a cancel after the first deal", IN_HAND, sc.CancelTable(command_id="x", series="s1", player="a"), {},
     "table_started"),
    ("an answer with no vote open", PLAYING, vote(), {}, "no_vote_open"),
    ("an answer to one's own vote", VOTING, vote("a"), {}, "not_your_vote"),
    ("a second vote while one is open", VOTING, request("b", "r9"), {}, "vote_open"),
    ("a fourth vote by one player", THREE_VOTES, request("a", "r4"), {}, "vote_limit"),
    ("a vote from a stranger", PLAYING, request("z"), {}, "not_seated"),
    ("a vote before the friend sat", OPEN, request("a"), {}, "wrong_phase"),
    ("a hand before the friend sat", OPEN, start(1), {}, "wrong_phase"),
    ("a second hand while one runs", IN_HAND, start(2), {}, "wrong_phase"),
    ("a fifth hand while the fourth runs", run(PLAYING, start(1), settle(1), start(2), settle(2), start(3), settle(3),
                                          start(4)), start(5), {}, "wrong_phase"),
    ("a settlement of another match", IN_HAND, settle(2), {}, "stale"),
    ("a settled hand started again", run(IN_HAND, settle(1)), start(1), {}, "stale"),
    ("a join timer after the join", PLAYING, sc.JoinTimer(command_id="t", series="s1"), {"now_ms": NOW + JOIN_MS},
     "stale"),
    ("an early join timer", OPEN, sc.JoinTimer(command_id="t", series="s1"), {"now_ms": NOW + JOIN_MS - 1},
     "stale"),
    ("an early vote timer", VOTING, sc.VoteTimer(command_id="t", series="s1", vote=1), {"now_ms": NOW + VOTE_MS - 1},
     "stale"),
    ("a vote timer of an older vote", VOTING, sc.VoteTimer(command_id="t", series="s1", vote=2),
     {"now_ms": NOW + VOTE_MS}, "stale"),
    ("a timer at no series", S0, sc.JoinTimer(command_id="t", series="s1"), {}, "stale"),
    ("a hand at a finished series", FINISHED, start(5), {}, "stale"),
    ("a create in an unregistered room", S0, create(), {"room": None}, "unknown_room"),
    ("a create with no code", S0, create(), {"code": None}, "bad_command"),
    ("a create twice", OPEN, create(), {}, "bad_command"),
    ("another series' command", OPEN, sc.JoinTable(command_id="j", series="s2", code="K7M2QX", player="b"), {},
     "bad_command"),
    ("a match of another table", PLAYING, sc.StartHand(command_id="h", series="s1", match="t9-1"), {},
     "bad_command"),
    ("a settlement naming a stranger", IN_HAND, sc.SettleHand(command_id="x", series="s1", match="p1-1",
                                                              scores={"a": 1, "z": -1}), {}, "bad_command"),
    ("a bot seat without a bot id", run(S0, create(bots=True)), sc.JoinTimer(command_id="t", series="s1"),
     {"now_ms": NOW + JOIN_MS, "bot_id": None}, "bad_command"),
    ("a friend placed elsewhere", OPEN, join(), {"elsewhere": "room points"}, "already_placed"),
    ("a friend whose token is for another room", OPEN,
     sc.JoinTable(command_id="j", series="s1", code="K7M2QX", player="b", room="wealth"), {}, "not_allowed"),
    ("an owner below the lowest level (R-11.1)", SeriesState(series="s1"),
     sc.CreateTable(command_id="c", series="s1", room="wealth", player="a", hands=4),
     {"room": load_config("wealth"), "balance": 0}, "seat_refused"),
]


@pytest.mark.parametrize("name,state,command,changes,code", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_series_refusals(name: str, state: SeriesState, command: sc.SeriesCommand, changes: dict[str, Any],
                         code: str) -> None:
    with pytest.raises(Rejected) as info:
        decide(state, command, ctx(**changes))
    assert info.value.code == code, str(info.value)


def test_every_series_refusal_code_has_a_row() -> None:
    tested = {r[-1] for r in REFUSALS}
    assert {t.code for t in SERIES_REJECTION_TYPES} <= tested


# ---- creating, joining, the join timer ------------------------------------------------------

def test_a_points_player_below_zero_opens_and_joins_tables() -> None:
    """R-11 decision: a points balance below 0 sits at the first level, at a private table as at a
    public one (a new user's play of 2026-12-06: one loss, then CreateTable was refused)."""
    assert CFG.mode == "points"
    events = decide(S0, create(), ctx(balance=-5))
    assert type(events[0]).__name__ == "SeriesCreated"
    assert decide(OPEN, join(), ctx(balance=-40))


def test_create_records_the_code_the_table_the_options_and_the_rooms_clocks() -> None:
    (created,) = decide(S0, create(hands=8, bots=True, spectators=True), ctx(code="k7m2qx"))
    assert isinstance(created, se.SeriesCreated)
    assert (created.owner, created.room, created.hands, created.code, created.table) == ("a", "points", 8, "K7M2QX",
                                                                                          "p1")
    assert created.options == se.SeriesOptions(spectators=True, bots=True)
    assert (created.join_deadline, created.vote_ms) == (NOW + JOIN_MS, VOTE_MS)
    assert OPEN.deadline() == ("join", NOW + JOIN_MS) and OPEN.players == ("a",)
    other = room_config(private_join_seconds=30, end_vote_seconds=10)
    (c2,) = decide(S0, create(), ctx(room=other, table_id=None))
    assert (c2.join_deadline, c2.vote_ms, c2.table) == (NOW + 30_000, 10_000, "s1")  # type: ignore[attr-defined]


def test_join_seats_the_friend_once_and_a_code_is_case_blind() -> None:
    (joined,) = decide(OPEN, join(code="k7m2qx"), ctx())
    assert isinstance(joined, se.PlayerJoinedSeries) and (joined.player, joined.bot) == ("b", False)
    assert PLAYING.status == "playing" and PLAYING.players == ("a", "b") and PLAYING.deadline() is None
    assert decide(PLAYING, join(), ctx()) == []  # again: nothing changes
    assert decide(OPEN, join("a"), ctx()) == []  # the owner is seated already
    assert decide(FINISHED, join("b"), ctx()) == []  # a player of a finished series: no refusal


def test_the_join_timer_ends_an_unclaimed_table_or_seats_a_bot() -> None:
    events = decide(OPEN, sc.JoinTimer(command_id="t", series="s1"), ctx(now_ms=NOW + JOIN_MS + 5))
    assert [type(e).__name__ for e in events] == ["SeriesFinished"]
    assert events[0].reason == "not_joined"  # type: ignore[attr-defined]
    with_bots = run(S0, create(bots=True))
    (bot,) = decide(with_bots, sc.JoinTimer(command_id="t", series="s1"), ctx(now_ms=NOW + JOIN_MS, bot_level="hard"))
    assert isinstance(bot, se.PlayerJoinedSeries) and (bot.player, bot.bot, bot.bot_level) == ("bot-9", True, "hard")


def test_cancel_before_the_first_deal_even_with_the_friend_seated() -> None:
    (fin,) = decide(PLAYING, sc.CancelTable(command_id="x", series="s1", player="a"), ctx())
    assert isinstance(fin, se.SeriesFinished) and fin.reason == "cancelled"
    assert fin.standings.totals == {"a": 0, "b": 0} and fin.standings.per_hand == ()


# ---- hands, standings ------------------------------------------------------------------------

def test_a_series_completes_after_its_last_hand_with_the_standings_of_its_settlements() -> None:
    s = run(PLAYING, start(1), settle(1, 10, "a", bombs={"a": 5}), start(2),
            settle(2, -30, "b", bombs={"b": 7, "a": 4}), start(3), settle(3, 8, "a"), start(4))
    assert summary(s) == {"series_id": "s1", "hand": 4, "hands": 4, "totals": {"a": -12, "b": 12}}
    events = decide(s, settle(4, 2, "a", bombs={"a": 7}), ctx())
    assert [type(e).__name__ for e in events] == ["HandSettled", "SeriesFinished"]
    fin = events[-1]
    assert isinstance(fin, se.SeriesFinished) and fin.reason == "completed"
    j = fin.standings.to_json()
    assert j["totals"] == {"a": -10, "b": 10}
    assert j["per_hand"] == [{"match": f"p1-{n}", "scores": {"a": x, "b": -x}} for n, x in
                             ((1, 10), (2, -30), (3, 8), (4, 2))]
    assert j["hands_won"] == {"a": 3, "b": 1}
    assert j["biggest_bomb"] == {"player": "b", "xiang": 7, "match": "p1-2", "hand": 2,
                                 "by_player": {"a": 7, "b": 7}}  # the first 7-xiang bomb played


def test_an_escape_ends_the_series_with_its_hand_settled_r12() -> None:
    events = decide(IN_HAND, settle(1, -240, "b", escaper="a"), ctx())
    assert [type(e).__name__ for e in events] == ["HandSettled", "SeriesFinished"]
    assert events[-1].reason == "escaped"  # type: ignore[attr-defined]
    assert events[-1].standings.totals == {"a": -240, "b": 240}  # type: ignore[attr-defined]


def test_a_closed_table_abandons_the_series_and_a_finished_ones_close_changes_nothing() -> None:
    close = ev.TableClosed(aggregate="table:p1", seq=9, ts=0, command_id="x", reason="left", removed=(("b", "left"),),
                           stayed=("a",), dealt=True)
    (abandon,) = sm.from_table(PLAYING, close)
    assert abandon.command_id == "pm:table:p1:9:series"
    (fin,) = decide(PLAYING, abandon, ctx())
    assert fin.reason == "abandoned"  # type: ignore[attr-defined]
    assert sm.from_table(FINISHED, close) == []
    assert sm.from_table(PLAYING, close.model_copy(update={"aggregate": "table:t2"})) == []


# ---- the vote --------------------------------------------------------------------------------

def test_a_vote_between_hands_dissolves_at_once() -> None:
    s = run(PLAYING, start(1), settle(1), request())
    assert s.deadline() == ("vote", NOW + VOTE_MS)
    events = decide(s, vote("b", True), ctx())
    assert [type(e).__name__ for e in events] == ["EndVoted", "SeriesFinished"]
    assert events[-1].reason == "dissolved"  # type: ignore[attr-defined]


def test_a_vote_during_a_hand_dissolves_after_its_settlement() -> None:
    s = run(IN_HAND, request("b"), vote("a", True))
    assert s.status == "playing" and s.dissolving and s.vote is None
    assert decide(s, request("a"), ctx()) == []  # agreed already
    with pytest.raises(Rejected) as info:
        decide(s, start(2), ctx())
    assert info.value.code == "wrong_phase"
    events = decide(s, settle(1), ctx())
    assert [type(e).__name__ for e in events] == ["HandSettled", "SeriesFinished"]
    assert events[-1].reason == "dissolved" and len(events[-1].standings.per_hand) == 1  # type: ignore[attr-defined]


def test_a_refused_vote_goes_on_and_an_unanswered_one_counts_as_agreed() -> None:
    s = run(IN_HAND, request("a"), vote("b", False))
    assert s.vote is None and not s.dissolving and s.votes_of("a") == 1
    s = run(s, request("a", "r2"))
    assert s.vote is not None and s.vote.n == 2
    (timed,) = decide(s, sc.VoteTimer(command_id="t", series="s1", vote=2), ctx(now_ms=NOW + VOTE_MS))
    assert isinstance(timed, se.EndVoted) and (timed.player, timed.agree, timed.timed_out) == ("b", True, True)
    between = run(PLAYING, request())
    events = decide(between, sc.VoteTimer(command_id="t", series="s1", vote=1), ctx(now_ms=NOW + VOTE_MS))
    assert [type(e).__name__ for e in events] == ["EndVoted", "SeriesFinished"]


def test_each_player_starts_at_most_three_votes() -> None:
    assert MAX_VOTES == 3 and THREE_VOTES.votes_of("a") == 3
    assert decide(THREE_VOTES, request("b", "rb"), ctx())  # the other player still may


def test_against_a_bot_a_vote_passes_at_once() -> None:
    s = run(run(S0, create(bots=True)), sc.JoinTimer(command_id="t", series="s1"), now_ms=NOW + JOIN_MS)
    events = decide(s, request("a"), ctx())
    assert [type(e).__name__ for e in events] == ["EndRequested", "EndVoted", "SeriesFinished"]
    with pytest.raises(Rejected) as info:
        decide(s, request("bot-9"), ctx())
    assert info.value.code == "not_seated"


# ---- the process managers, the codec, the stream check ---------------------------------------

def test_the_managers_start_and_settle_hands_with_fixed_ids() -> None:
    from engine.match import events as me
    from engine.match.events import Reading

    def e(cls: type, seq: int, **kw: Any) -> Any:
        return cls(match_id="p1-1", seq=seq, ts=0, command_id=f"c{seq}", **kw)

    bomb = Reading(kind="bomb", top=5, size=6, counts=(6,), xiang=6)
    pair = Reading(kind="pair", top=5, size=2, counts=(2,))
    hand = [e(me.HandDealt, 5, hands=((0,), (1,)), set_aside=(), lead_card=None, first=0),
            e(me.CardsPlayed, 6, player="a", cards=(0, 1, 2, 3, 4, 5), reading=bomb),
            e(me.CardsPlayed, 7, player="b", cards=(6, 7), reading=pair),
            e(me.PlayerEscaped, 8, player="b", policy="forfeit")]
    (st,) = sm.from_match(PLAYING, "p1-1", hand)
    assert (st.type, st.command_id) == ("StartHand", "pm:p1-1:5:hand")
    assert sm.from_match(PLAYING, "t9-1", hand) == []  # not a hand of this series
    cmd = sm.settle_hand(PLAYING, "p1-1", {"a": 120, "b": -120}, "a", hand)
    assert (cmd.command_id, cmd.bombs, cmd.escaper) == ("pm:p1-1:series", {"a": 6}, "b")


def test_events_round_trip_and_replay_equals_the_live_state() -> None:
    every: list[se.SeriesEvent] = []
    s = S0
    for c in (create(), join(), start(1), request("b"), vote("a", False), settle(1, 5), start(2),
              request("a", "r2"), vote("b", True), settle(2, -7, "b")):
        events, s = decide_and_apply(s, c, ctx())
        every += events
    assert {type(x) for x in every} == set(se.SERIES_EVENT_TYPES)
    for x in every:
        assert se.decode_stored_event(ev.encode_lobby_event(x)) == x
    assert replay_series("s1", every) == s and s.reason == "dissolved"
    assert check_series_stream(every) == []
    assert standings(s) == s.final
    bad = list(every)
    bad[2], bad[3] = bad[3], bad[2]
    assert check_series_stream(bad)  # the check can fail: a reordering is found
    forged = every[:-1] + [every[-1].model_copy(update={"standings": standings(SeriesState(series="s1"))})]
    assert any("standings" in p for p in check_series_stream(forged))
    # a queue's event still decodes through the same codec
    q = ev.PlayerQueued(aggregate="queue:points", seq=1, ts=5, command_id="c", player="a", since=5)
    assert se.decode_stored_event(ev.encode_lobby_event(q)) == q


def test_a_bad_stored_series_event_is_a_decode_error() -> None:
    with pytest.raises(ev.LobbyEventDecodeError):
        se.decode_stored_event(b"\xc1")
    with pytest.raises(ev.LobbyEventDecodeError):
        se.stored_event_from_dict({"type": "SeriesFinished", "aggregate": "series:s1", "seq": 1, "ts": 0,
                                   "command_id": "c", "reason": "bored"})


# ---- the room keys and the ladder's flag -----------------------------------------------------

def test_the_builtin_configs_carry_the_private_table_keys() -> None:
    for name in ("points", "wealth"):
        cfg = load_config(name)
        assert (cfg.private_join_seconds, cfg.end_vote_seconds, cfg.private) == (600.0, 60.0, False)


@pytest.mark.parametrize("changes,path", [
    ({"private_join_seconds": 0}, "private_join_seconds"),
    ({"private_join_seconds": 86_401}, "private_join_seconds"),
    ({"end_vote_seconds": 0}, "end_vote_seconds"),
    ({"end_vote_seconds": 3601}, "end_vote_seconds"),
    ({"end_vote_seconds": "soon"}, "end_vote_seconds"),
])
def test_config_check_refuses_bad_private_table_keys(changes: dict[str, Any], path: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({**load_config("points").to_record(), **changes})
    assert any(p.startswith(path) for p in info.value.problems), info.value.problems


def test_a_private_hand_is_never_rated_by_a_ladder() -> None:
    from engine.match import events as me
    from projections.ratings import rated_match

    ranked = room_config(ranked=True, name="ranked")

    def match(record: dict[str, Any]) -> list[Any]:
        def e(cls: type, seq: int, **kw: Any) -> Any:
            return cls(match_id="p1-1", seq=seq, ts=0, command_id=f"c{seq}", **kw)
        return [e(me.MatchCreated, 1, config=record),
                e(me.MatchFinished, 2, winner="a", loser="b", cards_left={"a": 0, "b": 3}, kou="flat",
                  reason="out")]

    assert rated_match(match(ranked.to_record())) != "private"  # the control: a public hand is rated
    assert rated_match(match(ranked.private_record())) == "private"


def test_the_series_modules_docstring_examples_run() -> None:
    import doctest
    import importlib

    tried = 0
    for name in ("engine.lobby.series", "engine.lobby.series_events", "engine.lobby.series_commands",
                 "engine.lobby.series_managers", "engine.service.series", "engine.service.series_notes",
                 "engine.tools.series_life", "engine.store.keys"):
        result = doctest.testmod(importlib.import_module(name))
        assert result.failed == 0, name
        tried += result.attempted
    assert tried >= 12


def test_the_second_seat_opens_the_series_table_with_a_fixed_id() -> None:
    from engine.lobby.decide import LobbyContext
    from engine.lobby.decide import decide as table_decide
    from engine.lobby.state import TableState

    events, s = decide_and_apply(OPEN, join(), ctx())
    (open_,) = sm.to_table(s, events[0])
    assert (open_.command_id, open_.table, open_.players, open_.match, open_.bot) == (  # type: ignore[attr-defined]
        "pm:series:s1:2:open", "p1", ("a", "b"), "p1-1", None)
    (opened,) = table_decide(TableState(table="p1"), open_, LobbyContext(now_ms=NOW, room=CFG))
    assert isinstance(opened, ev.TableOpened) and opened.players == ("a", "b")
    bot_events, bs = decide_and_apply(run(S0, create(bots=True)), sc.JoinTimer(command_id="t", series="s1"),
                                      ctx(now_ms=NOW + JOIN_MS))
    (bot_open,) = sm.to_table(bs, bot_events[0])
    assert (bot_open.bot, bot_open.bot_level) == ("bot-9", "normal")  # type: ignore[attr-defined]
    assert sm.to_table(OPEN, decide(S0, create(), ctx())[0]) == []


@pytest.mark.parametrize("name,state,command,changes,code", REFUSALS, ids=[r[0] for r in REFUSALS])
def test_no_refusal_names_the_tables_code_or_its_owner(name: str, state: SeriesState, command: sc.SeriesCommand,
                                                       changes: dict[str, Any], code: str) -> None:
    """The code is the secret that seats a friend: a stranger naming the series learns it from
    no refusal (nor who opened the table)."""
    stranger = command.model_copy(update={"player": "zed"}) if hasattr(command, "player") else command
    for c in (command, stranger):
        try:
            decide(state, c, ctx(**changes))
        except Rejected as r:
            assert "k7m2qx" not in str(r).lower(), str(r)
    owned = run(SeriesState(series="s1"), create().model_copy(update={"player": "ownername"}))
    with pytest.raises(Rejected) as info:
        decide(owned, sc.CancelTable(command_id="x", series="s1", player="zed"), ctx())
    assert info.value.code == "not_owner" and "ownername" not in str(info.value)
