"""The lobby's aggregates (engine/lobby, issue 34): every refusal code of the queue and the
table, the Leave decided wherever the player is, the leave cooldown (the room keys
``leave_cooldown_seconds`` / ``leave_cooldown_max_seconds``), the process managers, the
event codec; R-11.1 (admission), R-12.1 (an escape), R-13.2 (the ready clock), R-13.4
(the grace after a lost socket)."""

from __future__ import annotations

from typing import Any

import pytest

from engine.config import ConfigError, RoomConfig, load_config, parse_config
from engine.lobby import commands as lc
from engine.lobby import events as ev
from engine.lobby import managers
from engine.lobby.decide import BotPolicy, LobbyContext, cooldown_ms, decide, decide_and_apply, route
from engine.lobby.errors import Cooldown
from engine.lobby.replay import check_lobby_stream, replay_queue, replay_table
from engine.lobby.state import QueueState, TableState
from engine.match import events as me
from engine.match.errors import Rejected
from tests.lobby_world import World, room_config

CFG = room_config()
NOW = 1_000_000


def ctx(**kw: Any) -> LobbyContext:
    return LobbyContext(**{"now_ms": NOW, "room": CFG, "table_id": "tA", "bot_id": "bot-1", **kw})


def run(state: Any, *commands: lc.LobbyCommand, **kw: Any) -> Any:
    for c in commands:
        _events, state = decide_and_apply(state, c, ctx(**kw))
    return state


def join(p: str, room: str = "points") -> lc.Join:
    return lc.Join(command_id=f"j-{p}", room=room, player=p)


def opened(players: tuple[str, str] = ("a", "b"), bot: str | None = None) -> TableState:
    return run(TableState(table="tA"), lc.OpenTable(command_id="o", table="tA", room="points", players=players,
                                                    match="tA-1", bot=bot, bot_level="normal" if bot else None))


def seated(**kw: Any) -> TableState:
    return run(opened(**kw), lc.ConfirmSeated(command_id="s", table="tA", match="tA-1"))


def dealt() -> TableState:
    return run(seated(), lc.NoteDealt(command_id="d", table="tA", match="tA-1"))


def finished(escaper: str | None = None) -> TableState:
    return run(dealt(), lc.MatchEnded(command_id="e", table="tA", match="tA-1", outcome="finished", escaper=escaper))


Q0 = QueueState(room="points")
Q_A = run(Q0, join("a"))
QUEUE_REFUSALS = [
    # (name, state, command, context changes, code)
    ("unregistered room", Q0, join("a"), {"room": None}, "unknown_room"),
    ("waiting in another room", Q0, join("a"), {"elsewhere": "room wealth"}, "already_placed"),
    ("below the lowest level (R-11.1)", QueueState(room="wealth"), join("a", "wealth"),
     {"room": load_config("wealth"), "balance": 0}, "seat_refused"),
    ("away from a table of this room", run(Q_A, join("b"), lc.GraceExpired(command_id="g", room="points", player="b")),
     join("b"), {}, "already_placed"),
    ("a Leave from nobody", Q0, lc.Leave(command_id="l", room="points", player="z"), {}, "not_seated"),
    ("a Leave naming a table sent to the queue", Q_A,
     lc.Leave(command_id="l", room="points", player="a", table="tA"), {}, "bad_command"),
    ("another room's command", Q0, join("a", "wealth"), {}, "bad_command"),
    ("a table's command", Q0, lc.NoteDealt(command_id="d", table="tA", match="tA-1"), {}, "bad_command"),
    ("queue timer without bots", Q_A, lc.QueueTimer(command_id="q", room="points", version=1),
     {"now_ms": NOW + 10_000}, "not_allowed"),
    ("queue timer for an older version", Q_A, lc.QueueTimer(command_id="q", room="points", version=0),
     {"now_ms": NOW + 10_000, "bots": BotPolicy(3000)}, "stale"),
    ("queue timer before the wait is over", Q_A, lc.QueueTimer(command_id="q", room="points", version=1),
     {"now_ms": NOW + 2_999, "bots": BotPolicy(3000)}, "stale"),
    ("two wait and no table id", Q_A, join("b"), {"table_id": None}, "bad_command"),
    ("queue timer with no table id for the bot's table", Q_A, lc.QueueTimer(command_id="q", room="points", version=1),
     {"now_ms": NOW + 10_000, "bots": BotPolicy(3000), "table_id": None}, "bad_command"),
    ("pair timer in a room nobody registered", Q_A, lc.PairTimer(command_id="p", room="points"), {"room": None},
     "unknown_room"),
]

TABLE_REFUSALS = [
    ("never opened", TableState(table="tA"), lc.ConfirmSeated(command_id="s", table="tA", match="tA-1"),
     "unknown_table"),
    ("another table", opened(), lc.ConfirmSeated(command_id="s", table="tB", match="tB-1"), "bad_command"),
    ("opened twice", opened(), lc.OpenTable(command_id="o2", table="tA", room="points", players=("a", "b"),
                                            match="tA-1"), "bad_command"),
    ("an older match", seated(), lc.NoteReady(command_id="r", table="tA", match="tA-0", player="a"), "stale"),
    ("seated twice", seated(), lc.ConfirmSeated(command_id="s2", table="tA", match="tA-1"), "wrong_phase"),
    ("finished before the deal", seated(),
     lc.MatchEnded(command_id="e", table="tA", match="tA-1", outcome="finished"), "wrong_phase"),
    ("removed after the deal", dealt(),
     lc.MatchEnded(command_id="e", table="tA", match="tA-1", outcome="removed", removed=(("a", "left"),)),
     "wrong_phase"),
    ("settled before the finish", dealt(), lc.Settle(command_id="x", table="tA", match="tA-1"), "wrong_phase"),
    ("a stranger leaves", seated(), lc.Leave(command_id="l", room="points", player="z", table="tA"), "not_seated"),
    ("a stranger readies", seated(), lc.NoteReady(command_id="r", table="tA", match="tA-1", player="z"),
     "not_seated"),
    ("the bot leaves", seated(players=("a", "bot-1"), bot="bot-1"),
     lc.Leave(command_id="l", room="points", player="bot-1", table="tA"), "not_seated"),
    ("a closed table", run(opened(), lc.Leave(command_id="l", room="points", player="a", table="tA")),
     lc.ConfirmSeated(command_id="s", table="tA", match="tA-1"), "table_closed"),
    ("a queue's command", opened(), join("a"), "bad_command"),
    ("one player in both seats", TableState(table="tA"),
     lc.OpenTable(command_id="o", table="tA", room="points", players=("a", "a"), match="tA-1"), "bad_command"),
    ("a bot not at its table", TableState(table="tA"),
     lc.OpenTable(command_id="o", table="tA", room="points", players=("a", "b"), match="tA-1", bot="bot-9",
                  bot_level="normal"), "bad_command"),
    ("a first match of another number", TableState(table="tA"),
     lc.OpenTable(command_id="o", table="tA", room="points", players=("a", "b"), match="tA-2"), "bad_command"),
    ("a ready once the match ended", finished(), lc.NoteReady(command_id="r", table="tA", match="tA-1", player="a"),
     "wrong_phase"),
    ("a ready after the deal", dealt(), lc.NoteReady(command_id="r", table="tA", match="tA-1", player="a"),
     "wrong_phase"),
    ("a Leave naming another room", seated(), lc.Leave(command_id="l", room="wealth", player="a", table="tA"),
     "bad_command"),
    ("a stranger's grace ends", seated(), lc.GraceExpired(command_id="g", room="points", player="z", table="tA"),
     "not_seated"),
    ("a stranger returns", seated(), lc.Returned(command_id="r", room="points", player="z", table="tA"),
     "not_seated"),
    ("a match ended twice", finished(),
     lc.MatchEnded(command_id="e2", table="tA", match="tA-1", outcome="finished"), "wrong_phase"),
    ("a stranger removed", seated(),
     lc.MatchEnded(command_id="e", table="tA", match="tA-1", outcome="removed", removed=(("z", "left"),)),
     "not_seated"),
    ("a stranger escaped", dealt(),
     lc.MatchEnded(command_id="e", table="tA", match="tA-1", outcome="finished", escaper="z"), "not_seated"),
]


@pytest.mark.parametrize("name,state,command,changes,code", QUEUE_REFUSALS, ids=[r[0] for r in QUEUE_REFUSALS])
def test_queue_refusals(name: str, state: QueueState, command: lc.LobbyCommand, changes: dict[str, Any],
                        code: str) -> None:
    with pytest.raises(Rejected) as info:
        decide(state, command, ctx(**changes))
    assert info.value.code == code, str(info.value)


@pytest.mark.parametrize("room,balance,queued", [
    ("points", 0, True), ("points", -5, True), ("points", -10_000, True),  # R-11 decision: level 0
    ("wealth", 0, False), ("wealth", 99, False), ("wealth", 100, True),  # the first level's need
])
def test_who_the_queue_seats_by_balance(room: str, balance: int, queued: bool) -> None:
    """A points player who lost into negative points still Joins and sits at the first level (a
    new user's play of 2026-12-06: one loss, then every Join was refused ``seat_refused``); a
    wealth room refuses a balance below its first level's need (R-11.1)."""
    cfg = load_config(room)
    assert cfg.levels[0].need == (0 if room == "points" else 100)
    cmd = join("a", room)
    if queued:
        events = decide(QueueState(room=room), cmd, ctx(room=cfg, balance=balance))
        assert [type(e).__name__ for e in events] == ["PlayerQueued"]
    else:
        with pytest.raises(Rejected) as info:
            decide(QueueState(room=room), cmd, ctx(room=cfg, balance=balance))
        assert info.value.code == "seat_refused"


@pytest.mark.parametrize("name,state,command,code", TABLE_REFUSALS, ids=[r[0] for r in TABLE_REFUSALS])
def test_table_refusals(name: str, state: TableState, command: lc.LobbyCommand, code: str) -> None:
    with pytest.raises(Rejected) as info:
        decide(state, command, ctx())
    assert info.value.code == code, str(info.value)


def test_open_table_without_a_registered_room_is_unknown_room() -> None:
    with pytest.raises(Rejected) as info:
        decide(TableState(table="tA"), lc.OpenTable(command_id="o", table="tA", room="points", players=("a", "b"),
                                                   match="tA-1"), ctx(room=None))
    assert info.value.code == "unknown_room"


# ---- the queue ------------------------------------------------------------------------------

def test_two_joins_pair_the_oldest_first_at_an_opaque_table_whose_match_is_table_dash_1() -> None:
    events = decide(Q_A, join("b"), ctx(now_ms=NOW + 5))
    assert [type(e).__name__ for e in events] == ["PlayerQueued", "TablePaired"]
    paired = events[1]
    assert isinstance(paired, ev.TablePaired)
    assert (paired.table, paired.players, paired.match) == ("tA", ("a", "b"), "tA-1")
    assert [e.seq for e in events] == [2, 3] and all(e.ts == NOW + 5 for e in events)


def test_a_join_from_a_player_already_here_changes_nothing() -> None:
    assert decide(Q_A, join("a"), ctx()) == []
    q = run(Q_A, join("b"))
    assert decide(q, join("a"), ctx()) == []


def test_the_one_leave_is_decided_where_the_player_is() -> None:
    # waiting: out of the queue
    (left,) = decide(Q_A, lc.Leave(command_id="l", room="points", player="a"), ctx())
    assert isinstance(left, ev.PlayerLeftQueue) and left.reason == "left"
    # at a table: handed to the table (once)
    q = run(Q_A, join("b"))
    assert route(q, "a") == "tA" and route(Q_A, "a") == "queue"
    (req,) = decide(q, lc.Leave(command_id="l", room="points", player="a"), ctx())
    assert isinstance(req, ev.LeaveRequested) and req.table == "tA"
    q2 = run(q, lc.Leave(command_id="l", room="points", player="a"))
    assert decide(q2, lc.Leave(command_id="l2", room="points", player="a"), ctx()) == []
    # a Join while that Leave is decided is refused (join again once the table closed)
    with pytest.raises(Rejected) as info:
        decide(q2, join("a"), ctx())
    assert info.value.code == "already_placed"


@pytest.mark.parametrize("state,escape,kind", [("creating", None, "TableClosed"), ("seated", False, "LeaveDeferred"),
                                               ("dealt", True, "LeaveDeferred"), ("between", None, "LeaveNoted")])
def test_a_table_decides_a_leave_by_its_status(state: str, escape: bool | None, kind: str) -> None:
    t = {"creating": opened, "seated": seated, "dealt": dealt, "between": finished}[state]()
    events = decide(t, lc.Leave(command_id="l", room="points", player="a", table="tA"), ctx())
    assert type(events[-1]).__name__ == kind
    if escape is not None:  # the engine decides: a Leave before the deal, an Escape after it
        assert events[-1].escape is escape  # type: ignore[attr-defined]
        (cmd,) = managers.to_match(t, events[-1])
        assert (cmd.type, cmd.match_id, cmd.command_id) == (  # type: ignore[attr-defined]
            "Escape" if escape else "Leave", "tA-1", f"pm:table:tA:{events[-1].seq}:leave")


def test_a_leave_before_the_first_deal_closes_and_cools_the_leaver_and_requeues_the_other() -> None:
    q = run(Q_A, join("b"))
    t = run(opened(), lc.Leave(command_id="l", room="points", player="b", table="tA"))
    assert replay_table("tA", []).status == "new"  # an empty replay is a new table
    assert t.status == "closed" and t.close_reason == "left" and t.removed == (("b", "left"),)
    close_event = decide(opened(), lc.Leave(command_id="l", room="points", player="b", table="tA"), ctx())[-1]
    assert isinstance(close_event, ev.TableClosed)
    assert close_event.stayed == ("a",) and close_event.left_before_deal == ("b",) and not close_event.dealt
    (release,) = managers.from_table(t, close_event)
    events, q2 = decide_and_apply(q, release, ctx(now_ms=NOW + 100))
    assert [type(e).__name__ for e in events] == ["TableReleased", "PlayerQueued", "CooldownStarted"]
    requeued, cool = events[1], events[2]
    assert isinstance(requeued, ev.PlayerQueued) and requeued.reason == "opponent_left"
    assert requeued.since == NOW  # the wait counts from the Join
    assert isinstance(cool, ev.CooldownStarted) and (cool.player, cool.leaves, cool.until) == ("b", 1, NOW + 5_100)
    with pytest.raises(Cooldown) as info:
        decide(q2, join("b"), ctx(now_ms=NOW + 1_100))
    assert (info.value.code, info.value.retry_after_ms) == ("cooldown", 4_000)
    assert decide(q2, join("b"), ctx(now_ms=NOW + 5_100))  # over: accepted


def test_the_cooldown_doubles_for_each_leave_in_a_row_up_to_the_max_and_starts_again_later() -> None:
    cfg = room_config(leave_cooldown_seconds=5, leave_cooldown_max_seconds=30)
    assert [cooldown_ms(cfg, k) for k in range(1, 6)] == [5_000, 10_000, 20_000, 30_000, 30_000]
    assert cooldown_ms(cfg, 10_000) == 30_000  # no overflow however many
    w = World(cfg=cfg, bots=False)
    waits = []
    for _ in range(5):
        assert w.join("h") is None or w.queue.waiting_of("h") is not None or w.queue.place_of("h") is not None
        assert w.join("g") is None
        w.deliver_all()  # the table opens, its match is created: seated
        assert w.leave("g") is None
        w.deliver_all()  # the match removes g (left): the table closes; g's cooldown starts
        cd = w.queue.cooldown_of("g")
        assert cd is not None
        waits.append(cd.until - w.now)
        w.now = cd.until
    assert waits == [5_000, 10_000, 20_000, 30_000, 30_000]
    w.now += 30_000  # the last cooldown ended the max ago: the count starts again
    w.join("g")
    w.deliver_all()
    w.leave("g")
    w.deliver_all()
    assert w.queue.cooldown_of("g") == type(w.queue.cooldown_of("g"))(1, w.now + 5_000)  # type: ignore[misc]
    w.check()


def test_the_queue_forgets_the_cooldowns_long_past_any_doubling() -> None:
    """A cooldown that ended longer ago than any room's ``leave_cooldown_max_seconds`` (at most a
    day), with a day's margin for a replica's clock behind, changes nothing: the room's next
    CooldownStarted forgets it (``forget_before``), so the queue holds its recent leavers, not
    everyone who ever left a table before its deal.  An event that forgets nothing stores no
    ``forget_before`` (the builds before it read it)."""
    from engine.lobby.decide import FORGET_COOLDOWN_MS

    cfg = room_config(leave_cooldown_seconds=5, leave_cooldown_max_seconds=30)
    w = World(cfg=cfg, bots=False)

    def cool(a: str, b: str) -> ev.CooldownStarted:  # b leaves the table it was paired at with a
        assert w.join(a) is None and w.join(b) is None
        w.deliver_all()
        assert w.leave(b) is None
        w.deliver_all()
        assert w.leave(a) is None
        w.deliver_all()
        return [e for e in w.queue_events if isinstance(e, ev.CooldownStarted)][-1]

    for i in range(4):
        cool(f"a{i}", f"g{i}")
    start = w.now
    w.now = start + 5_000 + FORGET_COOLDOWN_MS - 1  # g0..g3's cooldowns ended 1 ms short of it
    kept = cool("a8", "g8")
    assert kept.forget_before is None and "forget_before" not in ev.lobby_event_to_dict(kept)
    assert [p for p, _ in w.queue.cooldowns] == ["g0", "g1", "g2", "g3", "g8"]
    w.now = start + 5_000 + FORGET_COOLDOWN_MS
    cut = cool("a9", "g9")
    assert (cut.player, cut.forget_before) == ("g9", w.now - FORGET_COOLDOWN_MS)
    assert ev.decode_lobby_event(ev.encode_lobby_event(cut)) == cut
    assert [p for p, _ in w.queue.cooldowns] == ["g8", "g9"]
    w.check()


def test_no_cooldown_when_the_base_is_zero_nor_after_a_deal() -> None:
    w = World(cfg=room_config(leave_cooldown_seconds=0), bots=False)
    w.join("a"), w.join("b"), w.deliver_all(), w.leave("a"), w.deliver_all()
    assert w.queue.cooldown_of("a") is None and w.join("a") is None
    w2 = World(bots=False)
    w2.join("a"), w2.join("b"), w2.deliver_all(), w2.ready("a"), w2.ready("b"), w2.deliver_all()
    w2.leave("a"), w2.deliver_all()  # an escape: settled, not cooled
    t = next(iter(w2.tables))
    w2.settle(t), w2.deliver_all()
    assert w2.tables[t].close_reason == "escaped" and w2.tables[t].removed == (("a", "escaped"),)
    assert w2.queue.cooldown_of("a") is None and w2.queue.waiting_players() == ("b",)


def test_a_bot_is_seated_by_the_queue_timer_after_the_wait_and_leaves_with_its_player() -> None:
    events = decide(Q_A, lc.QueueTimer(command_id="q", room="points", version=1),
                    ctx(now_ms=NOW + 3_000, bots=BotPolicy(3_000, "hard")))
    (seat,) = events
    assert isinstance(seat, ev.BotSeated)
    assert (seat.player, seat.bot, seat.bot_level, seat.waited_ms, seat.match) == ("a", "bot-1", "hard", 3_000, "tA-1")
    (open_,) = managers.from_queue("points", seat)
    t = run(TableState(table="tA"), open_)
    assert t.bot == "bot-1" and t.people == ("a",)
    close = decide(t, lc.Leave(command_id="l", room="points", player="a", table="tA"), ctx())[-1]
    assert isinstance(close, ev.TableClosed) and close.bot == "bot-1" and close.stayed == ()


def test_a_removal_before_the_deal_closes_the_table_and_the_other_stays() -> None:
    # the ready clock removed a; b, ready, goes back to the queue; a cools down as after a
    # Leave (a player who never readies would hold seats again and again: docs/SECURITY.md 39)
    t = seated()
    events = decide(t, lc.MatchEnded(command_id="e", table="tA", match="tA-1", outcome="removed",
                                     removed=(("a", "not_ready"),)), ctx())
    close = events[-1]
    assert isinstance(close, ev.TableClosed)
    assert (close.reason, close.removed, close.stayed, close.left_before_deal) == (
        "not_ready", (("a", "not_ready"),), ("b",), ("a",))
    # the stayer leaves the abandoned match (a Leave with a fixed id)
    (leave,) = managers.to_match(run(t, *[]), close)
    # … as what it is: the table closed under b, who never left (the match's log says so)
    assert (leave.type, leave.player, leave.reason) == ("Leave", "b", "table_closed")  # type: ignore[attr-defined]


def test_who_left_into_the_match_leaves_with_the_table_never_requeued() -> None:
    t = run(seated(), lc.Leave(command_id="l", room="points", player="a", table="tA"))
    assert t.quit == ("a",)
    close = decide(t, lc.MatchEnded(command_id="e", table="tA", match="tA-1", outcome="removed",
                                    removed=(("b", "not_ready"),)), ctx())[-1]
    assert isinstance(close, ev.TableClosed)
    assert dict(close.removed) == {"a": "left", "b": "not_ready"} and close.stayed == ()
    assert close.left_before_deal == ("a", "b")


def test_a_leave_at_the_settlement_closes_instead_of_offering_the_next_match() -> None:
    t = run(finished(), lc.Leave(command_id="l", room="points", player="b", table="tA"))
    events = decide(t, lc.Settle(command_id="x", table="tA", match="tA-1", scores={"a": 5, "b": -5}), ctx())
    assert [type(e).__name__ for e in events] == ["MatchSettled", "TableClosed"]
    assert events[1].removed == (("b", "left"),) and events[1].stayed == ("a",)  # type: ignore[attr-defined]
    nxt = decide(finished(), lc.Settle(command_id="x", table="tA", match="tA-1"), ctx())
    assert isinstance(nxt[-1], ev.NextMatchOffered) and nxt[-1].match == "tA-2"


def test_grace_and_return_go_to_the_tables_match_and_an_away_player_is_not_requeued() -> None:
    q = run(Q_A, join("b"))
    (away,) = decide(q, lc.GraceExpired(command_id="g", room="points", player="b"), ctx())
    assert isinstance(away, ev.AwayNoted) and away.away
    (cmd,) = managers.from_queue("points", away)
    t = run(seated(), cmd)
    assert t.away == ("b",)
    (disc,) = managers.to_match(seated(), decide(seated(), cmd, ctx())[0])
    assert disc.type == "Disconnect"  # type: ignore[attr-defined]
    back = decide(t, lc.Returned(command_id="r", room="points", player="b", table="tA"), ctx())
    assert isinstance(back[0], ev.PlayerBack)
    # a queued player whose grace ran out leaves the queue
    (gone,) = decide(Q_A, lc.GraceExpired(command_id="g", room="points", player="a"), ctx())
    assert isinstance(gone, ev.PlayerLeftQueue) and gone.reason == "disconnected"
    # the table closes by a's leave: b is away, so b leaves with it
    q2 = run(q, lc.GraceExpired(command_id="g", room="points", player="b"))
    release = lc.ReleaseTable(command_id="r", room="points", table="tA", removed=(("a", "left"),), stayed=("b",),
                              left_before_deal=("a",))
    events = decide(q2, release, ctx())
    assert [type(e).__name__ for e in events] == ["TableReleased", "LeftWithTable", "CooldownStarted"]


def test_the_match_process_manager_reads_one_decision_at_a_time() -> None:
    def e(cls: type, seq: int, cid: str, **kw: Any) -> Any:
        return cls(match_id="tA-1", seq=seq, ts=0, command_id=cid, **kw)

    events = [e(me.PlayerReady, 4, "r1", player="a"),
              e(me.PlayerRemoved, 5, "rt", player="a", reason="not_ready"),
              e(me.PlayerRemoved, 6, "rt", player="b", reason="not_ready"),
              e(me.MatchAbandoned, 7, "rt", reason="not_ready")]
    out = managers.from_match("tA", "tA-1", events)
    assert [c.type for c in out] == ["NoteReady", "MatchEnded"]  # type: ignore[attr-defined]
    end = out[1]
    assert isinstance(end, lc.MatchEnded) and end.removed == (("a", "not_ready"), ("b", "not_ready"))
    assert end.command_id == "pm:tA-1:5:end"  # fixed: a second run is the store's duplicate
    # the stayer's removal by the table's close is the table's own doing: the closed table gets
    # no word of it, only of the match's end
    closed = [e(me.PlayerRemoved, 8, "pm:table:tA:9:leave:b", player="b", reason="table_closed"),
              e(me.MatchAbandoned, 9, "pm:table:tA:9:leave:b", reason="left")]
    (gone,) = managers.from_match("tA", "tA-1", closed)
    assert isinstance(gone, lc.MatchEnded) and (gone.outcome, gone.removed) == ("abandoned", ())
    fin = [e(me.MatchFinished, 9, "x", winner="b", loser="a", cards_left={"a": 3, "b": 0}, kou="flat",
             reason="out")]
    (ended,) = managers.from_match("tA", "tA-1", fin, escaped=["a"])  # a escaped earlier (trustee policy)
    assert isinstance(ended, lc.MatchEnded) and ended.escaper == "a"


def test_events_round_trip_and_replay_equals_the_live_state() -> None:
    w = World()
    for p in "abcde":
        w.join(p)
    w.deliver_all()
    w.ready("a"), w.ready("b"), w.deliver_all()
    w.leave("c"), w.deliver_all()
    w.now += 3_000
    w.queue_timer(), w.deliver_all(), w.bots_ready(), w.deliver_all()
    w.quiesce(list("abcde"))
    w.check()
    every = w.queue_events + [x for es in w.table_events.values() for x in es]
    kinds = {type(x) for x in every}
    assert len(kinds) >= 12
    for x in every:
        assert ev.decode_lobby_event(ev.encode_lobby_event(x)) == x
    assert replay_queue("points", w.queue_events) == w.queue
    bad = list(w.queue_events)
    bad[1], bad[2] = bad[2], bad[1]
    assert check_lobby_stream(bad)  # the check can fail: a reordering is found


def test_a_bad_stored_event_is_a_decode_error() -> None:
    with pytest.raises(ev.LobbyEventDecodeError):
        ev.decode_lobby_event(b"\xc1")
    with pytest.raises(ev.LobbyEventDecodeError):
        ev.lobby_event_from_dict({"type": "PlayerQueued", "v": 99})


# ---- the room keys ---------------------------------------------------------------------------

def test_the_builtin_configs_carry_the_cooldown_keys() -> None:
    for name in ("points", "wealth"):
        cfg = load_config(name)
        assert (cfg.leave_cooldown_seconds, cfg.leave_cooldown_max_seconds) == (5.0, 300.0)


@pytest.mark.parametrize("changes,path", [
    ({"leave_cooldown_seconds": -1}, "leave_cooldown_seconds"),
    ({"leave_cooldown_seconds": 3601}, "leave_cooldown_seconds"),
    ({"leave_cooldown_max_seconds": 86_401}, "leave_cooldown_max_seconds"),
    ({"leave_cooldown_seconds": 60, "leave_cooldown_max_seconds": 30}, "leave_cooldown_max_seconds"),
    ({"leave_cooldown_seconds": "soon"}, "leave_cooldown_seconds"),
])
def test_config_check_refuses_bad_cooldown_keys(changes: dict[str, Any], path: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({**load_config("points").to_record(), **changes})
    assert any(p.startswith(path) for p in info.value.problems), info.value.problems


def test_a_match_recorded_before_the_keys_reads_with_the_defaults() -> None:
    old = {k: v for k, v in load_config("points").to_record().items() if not k.startswith("leave_cooldown")}
    cfg = RoomConfig.from_match_record(old)
    assert (cfg.leave_cooldown_seconds, cfg.leave_cooldown_max_seconds) == (5.0, 300.0)
    assert parse_config({**old, "leave_cooldown_seconds": 0, "leave_cooldown_max_seconds": 0}).leave_cooldown_seconds == 0


def test_a_leave_racing_the_tables_close_is_kept_by_the_queue_never_requeued() -> None:
    """The queue has a's Leave; the table closes first by b's removal (R-13.2) and has a stay:
    the release does not put a back in line, and a left before the deal, so a cools down."""
    q = run(Q_A, join("b"), lc.Leave(command_id="l", room="points", player="a"))
    release = lc.ReleaseTable(command_id="r", room="points", table="tA", removed=(("b", "not_ready"),),
                              stayed=("a",), dealt=False)
    events, q2 = decide_and_apply(q, release, ctx())
    assert [type(e).__name__ for e in events] == ["TableReleased", "LeftWithTable", "CooldownStarted"]
    assert q2.waiting == () and q2.placed == () and route(q2, "a") is None
    assert decide(q2, release, ctx()) == []  # released already: a second release changes nothing


def test_the_lobby_modules_docstring_examples_run() -> None:
    import doctest
    import importlib

    tried = 0
    for name in ("errors", "events", "commands", "state", "decide", "replay", "managers"):
        result = doctest.testmod(importlib.import_module(f"engine.lobby.{name}"))
        assert result.failed == 0, name
        tried += result.attempted
    assert tried >= 10
