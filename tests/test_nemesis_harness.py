"""The nemesis harness's own choices that need no Cluster: where an inbox client's matches live,
and how it plays a match to its end."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.store import keys
from tests.nemesis.harness import InboxPlayer, Recorder, slot_of


def _player(home_ranges: list[tuple[int, int]] | None) -> InboxPlayer:
    p = InboxPlayer.__new__(InboxPlayer)  # no Redis: match_id reads only its tag and home
    p.tag = "ib0"
    p.home = None if home_ranges is None else (lambda s: any(a <= s <= b for a, b in home_ranges))
    return p


@given(st.integers(0, 5_000), st.sampled_from([[(0, 5460)], [(5461, 10922)], [(10923, 16383)]]))
def test_a_homed_client_plays_only_matches_whose_bucket_is_on_its_master(k: int, home: list[tuple[int, int]]) -> None:
    mid, nxt = _player(home).match_id(k)
    assert nxt >= k and mid == f"ib0-{nxt}"
    slot = slot_of(keys.feed_key(keys.bucket_of(mid)))
    assert any(a <= slot <= b for a, b in home)


def test_a_client_without_home_or_with_an_empty_one_takes_the_next_id() -> None:
    assert _player(None).match_id(7) == ("ib0-7", 7)
    assert _player([]).match_id(7) == ("ib0-7", 7)


# -- an inbox client plays its match to the end, as a player would ------------------------------

class _State(SimpleNamespace):
    """What :meth:`InboxPlayer.play` reads of a match's state."""

    def seat(self, i: int) -> SimpleNamespace:
        return SimpleNamespace(trusteed=i in self.trusteed)


def _state(phase: str, version: int, turn: int | None = 0, trusteed: tuple[int, ...] = ()) -> _State:
    players = ("ib0a", "ib0b")
    return _State(phase=phase, version=version, turn=turn, trusteed=trusteed,
                  current_player=players[turn] if phase == "playing" and turn is not None else None)


class _Script:
    """A fake store and inbox: ``load_state`` answers ``states`` in turn (the last one again);
    ``send`` records each command and raises the errors ``fail`` names (by command id, once)."""

    def __init__(self, states: list[_State], fail: dict[str, Exception] | None = None):
        self.states, self.fail, self.sent = states, dict(fail or {}), []

    def load_state(self, mid: str) -> _State:
        return self.states.pop(0) if len(self.states) > 1 else self.states[0]

    def send(self, command: Any) -> SimpleNamespace:
        self.sent.append((command.type, command.command_id))
        if command.command_id in self.fail:
            raise self.fail.pop(command.command_id)
        return SimpleNamespace(kind="accepted")


def _inbox(script: _Script, monkeypatch: pytest.MonkeyPatch) -> InboxPlayer:
    import engine.tools.bot as bot

    monkeypatch.setattr(bot, "choose_for", lambda _bot, _st, _p: None)  # every turn a Pass
    monkeypatch.setattr(time, "sleep", lambda _s: None)
    p = InboxPlayer.__new__(InboxPlayer)  # no Redis: the store and the inbox are the script
    p.tag, p.players, p.rec, p.matches, p.issued = "ib0", ("ib0a", "ib0b"), Recorder(), [], {}
    p.reader = script
    p.send = script.send  # type: ignore[method-assign]
    p.read_updates = lambda *_a: None  # type: ignore[method-assign]
    p._retry = lambda fn, **_k: fn()  # type: ignore[method-assign]
    return p


def test_a_seat_in_trusteeship_is_left_to_the_system(monkeypatch: pytest.MonkeyPatch) -> None:
    """R-13.3: the system plays for a trusteed seat; the client sends nothing for it and stays
    with the match (its player's own command would be refused, again and again) until it ends."""
    states = [_state("playing", 9, 0, trusteed=(0,))] * 50 + [_state("playing", 10, 1, trusteed=(0, 1))] * 50 \
        + [_state("finished", 11, None)]
    script = _Script(states)
    _inbox(script, monkeypatch).play("ib0-1", "ib0a", "ib0b")
    assert [cid for _t, cid in script.sent] == [f"ib0-1:{k}" for k in range(1, 6)]  # the setup only


def test_a_match_is_played_on_after_an_error_with_new_ids_for_new_turns(monkeypatch: pytest.MonkeyPatch) -> None:
    states = [_state("seating", 5, None), _state("playing", 6, 0), _state("playing", 6, 0), _state("playing", 7, 1),
              _state("finished", 8, None)]
    script = _Script(states, fail={"ib0-1:4": ConnectionError("down"), "ib0-1:6": ConnectionError("down")})
    p = _inbox(script, monkeypatch)
    p.play_out("ib0-1")
    ids = [cid for _t, cid in script.sent]
    # the setup up to the failed Ready; again in full (the same ids: duplicates); a Pass that
    # failed; the next turns with ids not used before
    assert ids[:4] == [f"ib0-1:{k}" for k in range(1, 5)]
    assert ids[4:9] == [f"ib0-1:{k}" for k in range(1, 6)]
    assert ids[9:] == ["ib0-1:6", "ib0-1:7"]
    assert len(p.rec.errors) == 2 and not p.rec.gave_up


def test_a_client_gives_up_only_after_its_budget_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    script = _Script([_state("playing", 6, 0)], fail={"ib0-1:1": ValueError("refused")})
    p = _inbox(script, monkeypatch)
    p.play_out("ib0-1", give_up_s=-1)
    assert [g.match for g in p.rec.gave_up] == ["ib0-1"] and "ValueError: refused" in p.rec.gave_up[0].why


def test_the_history_kept_for_a_finding_holds_its_matches_alone() -> None:
    """A run with findings keeps what the clients recorded of the matches they name (reads,
    sends, acknowledgements, the turns a player did not act on) with their logs; nothing of
    the other matches."""
    import json

    from tests.nemesis.checker import Ack, Fault, Final, Finding, History, Read, Sent
    from tests.nemesis.harness import _history_of

    rec = Recorder()
    rec.decline("p1", "m1", 4, "no hand to lead from")
    rec.decline("p2", "m2", 7, "a command unanswered")
    rec.refuse("p1", "m1", "c9", "not_seated")
    rec.refuse("p2", "m2", "c8", "rate_limited")
    history = History([Ack("p1", "m1", "c1", "update", 5, 4), Ack("p2", "m2", "c2", "update", 5, 7)],
                      [Read("p1", "m1", 4, 10), Read("p2", "m2", 7, 11)], [Fault("kill_process", 1, 2)],
                      None, [Sent("p1", "p1", "m1", "c1", 3), Sent("p2", "p2", "m2", "c2", 3)])
    report = SimpleNamespace(findings=[Finding("late_ends", "m1", "ended late", 2)])
    kept = _history_of(report, history, Final({"m1": [{"seq": 1, "type": "MatchCreated"}], "m2": []}), rec)
    assert set(kept["matches"]) == {"m1"} and kept["matches"]["m1"][0]["type"] == "MatchCreated"
    assert [r["match"] for r in kept["reads"]] == [a["match"] for a in kept["acks"]] == ["m1"]
    assert [s["match"] for s in kept["sends"]] == ["m1"]
    assert [d[1:] for d in kept["declined"]] == [("p1", "m1", 4, "no hand to lead from")]
    assert [r[1:] for r in kept["refused"]] == [("p1", "m1", "c9", "not_seated")]
    assert kept["faults"] == [{"kind": "kill_process", "start_ms": 1, "heal_ms": 2}]
    json.dumps(kept, default=str)


class _Socket:
    """What a WsPlayer sends, kept."""

    def __init__(self) -> None:
        self.sent: list[dict] = []

    async def send(self, msg: dict) -> None:
        self.sent.append(msg)


def _ws_player_on_turn() -> tuple[Any, _Socket]:
    from tests.nemesis.harness import WsPlayer

    p = WsPlayer(lambda: "ws://unused", None, "p1", Recorder(), threading.Event())
    p.match, p.version, p.hand, p.idle_since = "m1", 9, [12, 30], None
    p.brief = {"phase": "playing", "turn": "p1", "version": 9, "last_play": None}
    return p, _Socket()


@pytest.mark.parametrize("code,pauses", [("rate_limited", True), ("not_seated", True), ("stale", False)])
def test_a_refused_ws_player_decides_again_after_a_pause(monkeypatch: pytest.MonkeyPatch, code: str,
                                                         pauses: bool) -> None:
    """A refusal answered at once by the same command again and again ran into the gateway's
    rate limit, whose refusals fed the loop: the player sent 4,800 commands in one match and
    none was stored (the nemesis run's late_ends).  After a refusal (but stale, which an
    update follows) the player waits :data:`REFUSED_PAUSE_S`; each refusal is recorded."""
    import asyncio

    from tests.nemesis import harness

    clock = [100.0]
    monkeypatch.setattr(harness.time, "monotonic", lambda: clock[0])
    p, ws = _ws_player_on_turn()

    async def run() -> None:
        await p._act(ws)
        assert [m["type"] for m in ws.sent] == ["Play"] and ws.sent[0]["cards"] == [12]
        await p._answered(ws, {"kind": "rejected", "command_id": ws.sent[0]["command_id"], "code": code,
                               "match": "m1"})
        assert len(ws.sent) == (1 if pauses else 2)
        await p._resume(ws)
        assert len(ws.sent) == (1 if pauses else 2)  # not yet
        clock[0] += harness.REFUSED_PAUSE_S
        await p._resume(ws)
        assert len(ws.sent) == 2 and ws.sent[1]["command_id"] != ws.sent[0]["command_id"]

    asyncio.run(run())
    assert [r[1:] for r in p.rec.refused] == [("p1", "m1", ws.sent[0]["command_id"], code)]


def test_an_answer_to_another_command_changes_nothing() -> None:
    import asyncio

    p, ws = _ws_player_on_turn()

    async def run() -> None:
        await p._act(ws)
        await p._answered(ws, {"kind": "rejected", "command_id": "someone-else", "code": "rate_limited"})

    asyncio.run(run())
    assert len(ws.sent) == 1 and p.pending is not None and not p.rec.refused and p.hold_until == 0.0
