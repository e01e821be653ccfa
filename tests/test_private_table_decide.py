"""The table aggregate's private-table commands (issue 39): OpenTable(private) records it, a
private table's matches are created with the room's private config, Settle(close) closes the
table instead of offering the next match, and CloseTable's cases (engine/lobby/decide.py)."""

from __future__ import annotations

from typing import Any

import pytest

from engine.lobby import commands as lc
from engine.lobby import events as ev
from engine.lobby import managers
from engine.lobby.decide import LobbyContext, decide_and_apply
from engine.lobby.state import TableState
from tests.lobby_world import room_config

CFG = room_config()


def _run(state: TableState, command: lc.LobbyCommand) -> tuple[list[Any], TableState]:
    events, new = decide_and_apply(state, command, LobbyContext(now_ms=1000, room=CFG))
    return list(events), new


def _opened(private: bool = True) -> TableState:
    _e, t = _run(TableState(table="s1"), lc.OpenTable(command_id="o", table="s1", room=CFG.name, players=("a", "b"),
                                                      match="s1-1", private=private))
    return t


def _seated(t: TableState) -> TableState:
    _e, t = _run(t, lc.ConfirmSeated(command_id="c", table="s1", match=t.match))
    return t


def _between(t: TableState) -> TableState:
    t = _seated(t)
    _e, t = _run(t, lc.NoteDealt(command_id="d", table="s1", match=t.match))
    _e, t = _run(t, lc.MatchEnded(command_id="f", table="s1", match=t.match, outcome="finished"))
    return t


def test_a_private_table_is_recorded_and_a_public_one_is_not() -> None:
    assert _opened().private and not _opened(private=False).private


def test_settle_with_close_ends_the_table_with_series_over_instead_of_a_next_match() -> None:
    t = _between(_opened())
    events, after = _run(t, lc.Settle(command_id="s", table="s1", match="s1-1", scores={"a": 5, "b": -5}, close=True))
    assert [type(e).__name__ for e in events] == ["MatchSettled", "TableClosed"]
    closed = events[-1]
    assert isinstance(closed, ev.TableClosed) and closed.reason == "series_over"
    assert dict(closed.removed) == {"a": "series_over", "b": "series_over"} and closed.stayed == ()
    assert after.status == "closed"
    events, _ = _run(t, lc.Settle(command_id="s", table="s1", match="s1-1", scores={"a": 5, "b": -5}))
    assert isinstance(events[-1], ev.NextMatchOffered)  # without close: the next match, as at a public table


@pytest.mark.parametrize("stage, outcome", [
    ("new", "unknown_table"), ("creating", "closed"), ("seated", "closed"), ("dealt", "wrong_phase"),
    ("between", "wrong_phase"), ("closed", "table_closed"), ("public", "bad_command"),
])
def test_close_table(stage: str, outcome: str) -> None:
    t = {"new": lambda: TableState(table="s1"), "creating": _opened, "seated": lambda: _seated(_opened()),
         "between": lambda: _between(_opened()), "public": lambda: _seated(_opened(private=False))}.get(stage)
    if stage == "dealt":
        t0 = _seated(_opened())
        _e, state = _run(t0, lc.NoteDealt(command_id="d", table="s1", match="s1-1"))
    elif stage == "closed":
        state = _run(_seated(_opened()), lc.CloseTable(command_id="x0", table="s1"))[1]
    else:
        assert t is not None
        state = t()
    if outcome != "closed":
        with pytest.raises(Exception) as exc:
            _run(state, lc.CloseTable(command_id="x", table="s1"))
        assert getattr(exc.value, "code", None) == outcome
        return
    events, after = _run(state, lc.CloseTable(command_id="x", table="s1"))
    assert [type(e).__name__ for e in events] == ["TableClosed"] and after.status == "closed"
    # the match that was never dealt ends with the table: both leave it
    leaves = managers.to_match(state, events[0])
    assert sorted(getattr(c, "player") for c in leaves) == ["a", "b"]
    assert {type(c).__name__ for c in leaves} == {"Leave"}
