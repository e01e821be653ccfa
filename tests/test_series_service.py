"""The series on the command service in memory (engine/service/series.py): the codes (a
cryptographic source, an alphabet without look-alikes, a collision draws again), the code
index of the in-memory store, the players' messages and what a reconnect gets again
(engine/service/series_notes.py), the timers' fixed ids."""

from __future__ import annotations

import dataclasses

from typing import Any

import pytest

from engine.lobby import series_commands as sc
from engine.service.series import CODE_ALPHABET, SeriesService, new_code, rejection_code
from engine.service.series_notes import messages_of, resync
from engine.store.lobby_store import InMemoryLobbyStore
from tests.lobby_world import room_config

CFG = room_config(private_join_seconds=60, end_vote_seconds=10)


class Clock:
    def __init__(self) -> None:
        self.now = 5_000_000

    def __call__(self) -> int:
        return self.now


def service(codes: Any = new_code, **kw: Any) -> tuple[SeriesService, Clock, InMemoryLobbyStore]:
    store, clock = InMemoryLobbyStore(), Clock()
    return SeriesService(store, clock=clock, rooms={CFG.name: CFG}, codes=codes, bot_ids=lambda: "bot-7",
                         **kw), clock, store


def test_codes_have_six_characters_of_an_alphabet_without_look_alikes() -> None:
    assert not set("0O1IL") & set(CODE_ALPHABET) and len(set(CODE_ALPHABET)) == len(CODE_ALPHABET) == 31
    codes = {new_code() for _ in range(2_000)}
    assert all(len(c) == 6 and set(c) <= set(CODE_ALPHABET) for c in codes)
    assert len(codes) == 2_000  # no repeats among a few thousand (31^6 codes)
    assert set("".join(codes)) == set(CODE_ALPHABET)  # every character is used


def test_a_taken_code_draws_another_and_an_exhausted_source_is_an_error() -> None:
    draws = iter(["AAAAAA", "AAAAAA", "BBBBBB"])
    svc, _clock, store = service(codes=lambda: next(draws))
    first = svc.create("c1", "a", "points", 4)
    second = svc.create("c2", "b", "points", 4)
    assert (first.state.code, second.state.code) == ("AAAAAA", "BBBBBB")
    assert store.series_of_code("aaaaaa") == first.state.series
    stuck, _c, _s = service(codes=lambda: "CCCCCC")
    stuck.create("c1", "a", "points", 4)
    with pytest.raises(RuntimeError):
        stuck.create("c2", "b", "points", 4)


def test_the_in_memory_code_index_reserves_once_and_frees_only_its_own() -> None:
    store = InMemoryLobbyStore()
    assert store.reserve_code("K7M2QX", "s1") and store.reserve_code("k7m2qx", "s1")  # its own again: yes
    assert not store.reserve_code("K7M2QX", "s2")
    store.release_code("K7M2QX", "s2")  # not s2's: kept
    assert store.series_of_code("K7M2QX") == "s1"
    store.release_code("K7M2QX", "s1")
    assert store.series_of_code("K7M2QX") is None


def test_the_players_are_told_the_table_the_vote_and_the_standings() -> None:
    svc, clock, _store = service()
    created = svc.create("make", "a", "points", 4)
    sid, code = created.state.series, created.state.code
    ((who, msg),) = messages_of(created.events[0], created.state)
    assert who == "a" and msg == {"kind": "private_table", "state": "created", "code": code, "link": f"/t/{code}",
                                  "series_id": sid, "hands": 4, "command_id": "make"}
    assert resync(created.state, "a")[0]["kind"] == "private_table" and resync(created.state, "b") == []
    joined = svc.join("j", "b", code)
    assert messages_of(joined.events[0], joined.state) == []  # the table's ``lobby seated`` says it
    asked = svc.execute(sc.RequestEnd(command_id="ask", series=sid, player="b"))
    told = dict(messages_of(asked.events[0], asked.state))
    assert told["b"] == {"kind": "series", "state": "vote", "series_id": sid, "by": "b",
                         "deadline_ms": clock.now + 10_000, "command_id": "ask"}
    assert told["a"]["command_id"] is None  # not a's command
    again = resync(asked.state, "a")
    assert [m["state"] for m in again] == ["tally", "vote"] and again[0]["totals"] == {"a": 0, "b": 0}
    assert "dissolving" not in again[0]
    # a vote that passed during a hand: a reload is told the series is ending (no Ask to end)
    ending = dataclasses.replace(asked.state, vote=None, dissolving=True, current=f"{sid}-1", started=1)
    assert [(m["state"], m.get("dissolving")) for m in resync(ending, "b")] == [("tally", True)]
    timer = svc.timer(sid)
    assert timer is not None and timer.command_id == f"timer:{sid}:vote:1"
    clock.now += 10_000
    passed = svc.execute(timer)
    vote_msgs = dict(messages_of(passed.events[0], passed.state))
    assert vote_msgs["a"]["state"] == "vote_passed" and vote_msgs["a"]["timed_out"] is True
    fin = dict(messages_of(passed.events[1], passed.state))
    assert fin["b"]["state"] == "finished" and fin["b"]["reason"] == "dissolved"
    assert set(fin["b"]["standings"]) == {"totals", "per_hand", "hands_won", "biggest_bomb"}
    assert resync(passed.state, "a") == [fin["a"]]
    assert svc.timer(sid) is None


def test_a_bot_is_told_nothing_and_a_refusal_names_its_code() -> None:
    svc, clock, _store = service()
    sid = svc.create("make", "a", "points", 4, bots=True).state.series
    clock.now += 60_000
    timer = svc.timer(sid)
    assert timer is not None and timer.command_id == f"timer:{sid}:join"
    seated = svc.execute(timer)
    assert seated.state.players == ("a", "bot-7")
    ended = svc.execute(sc.RequestEnd(command_id="r", series=sid, player="a"))
    assert {p for e in ended.events for p, _m in messages_of(e, ended.state)} == {"a"}
    assert rejection_code(svc.execute(sc.VoteEnd(command_id="v", series=sid, player="a", agree=True))) == \
        "table_closed"
    assert rejection_code(ended) is None


def test_metrics_count_tables_finishes_by_reason_and_votes_by_outcome() -> None:
    from projections import metrics as m

    def value(metric: Any, *labels: str) -> float:
        return float(m._child(metric, *labels)._value.get())

    before = (value(m.PRIVATE_TABLES_CREATED, "points"), value(m.PRIVATE_TABLES_FINISHED, "points", "dissolved"),
              value(m.SERIES_VOTES, "points", "refused"), value(m.SERIES_VOTES, "points", "timed_out"))
    svc, clock, _store = service()
    out = svc.create("make", "a", "points", 4)
    sid = out.state.series
    events = list(out.events)
    events += svc.join("j", "b", out.state.code).events
    events += svc.execute(sc.RequestEnd(command_id="r1", series=sid, player="a")).events
    events += svc.execute(sc.VoteEnd(command_id="v1", series=sid, player="b", agree=False)).events
    events += svc.execute(sc.RequestEnd(command_id="r2", series=sid, player="a")).events
    clock.now += 10_000
    timer = svc.timer(sid)
    assert timer is not None
    events += svc.execute(timer).events
    m.observe_series_events(events, "points")
    after = (value(m.PRIVATE_TABLES_CREATED, "points"), value(m.PRIVATE_TABLES_FINISHED, "points", "dissolved"),
             value(m.SERIES_VOTES, "points", "refused"), value(m.SERIES_VOTES, "points", "timed_out"))
    assert [a - b for a, b in zip(after, before)] == [1, 1, 1, 1]
    assert {"shuangkou_private_tables_created_total", "shuangkou_private_tables_finished_total",
            "shuangkou_series_votes_total"} <= m.exposed_names()


def test_bad_input_is_a_typed_refusal() -> None:
    from engine.match.errors import BadCommand

    svc, _clock, _store = service()
    with pytest.raises(BadCommand) as info:
        svc.create("c", "a", "points", 5)
    assert info.value.code == "bad_command" and "hands" in str(info.value)
    for code in ("", "ab", "abc!ef", "x" * 7, "日本語日本語"):
        assert rejection_code(svc.join("j", "b", code)) == "unknown_table"


def test_each_append_records_the_next_timer_and_fire_due_runs_what_is_due() -> None:
    svc, clock, store = service()
    lone = svc.create("c1", "a", "points", 4).state
    voting = svc.create("c2", "b", "points", 4).state
    svc.join("j", "c", voting.code)
    assert [d.aggregate for d in store.due(clock.now + 60_000)] == [f"series:{lone.series}"]  # joined: no timer
    svc.execute(sc.RequestEnd(command_id="r", series=voting.series, player="c"))
    (vote,) = [d for d in store.due(clock.now + 10_000) if d.kind == "vote"]
    assert (vote.aggregate, vote.at_ms) == (f"series:{voting.series}", clock.now + 10_000)
    assert svc.fire_due(clock.now) == [] and store.due(clock.now) == []  # nothing due yet: nothing run
    clock.now += 60_000
    outs = svc.fire_due(clock.now)
    assert sorted(o.state.reason or "" for o in outs) == ["dissolved", "not_joined"]
    assert store.due(clock.now + 10**9) == []  # finished: no timer left
    assert svc.fire_due(clock.now) == []
