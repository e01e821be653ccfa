"""What a private table's series tells its players (issue 39 §2-§4), in the WebSocket shapes:

* SeriesCreated → the owner: ``{"kind": "private_table", "state": "created", "code",
  "link": "/t/<code>", "series_id", "hands"}``;
* EndRequested → both: ``{"kind": "series", "state": "vote", "series_id", "by",
  "deadline_ms"}``;
* EndVoted → both: ``state`` ``vote_passed`` or ``vote_refused`` (``by``: who answered,
  ``timed_out``: nobody did, which counts as agreed);
* SeriesFinished → both: ``{"kind": "series", "state": "finished", "series_id", "reason",
  "standings": {"totals", "per_hand", "hands_won", "biggest_bomb"}}``.

Each carries ``command_id``: the player's own command that caused it, else None (a timer's
or a process manager's).  A bot gets nothing.  :func:`outcome_messages` gives every message
of one command's outcome.  :func:`settled_series` is the ``series``
field a hand's ``settled`` message carries; :func:`resync` what a reconnect or a reload
gets again (the totals, an open vote).

>>> from engine.lobby import series_events as se
>>> e = se.EndRequested(aggregate="series:s1", seq=3, ts=0, command_id="r1", by="a", vote=1, deadline=60000)
>>> from engine.lobby.series import SeriesState
>>> messages_of(e, SeriesState(series="s1", players=("a", "b")))[1]
('b', {'kind': 'series', 'state': 'vote', 'series_id': 's1', 'by': 'a', 'deadline_ms': 60000, 'command_id': None})
"""

from __future__ import annotations

from typing import Any

from engine.lobby import series_events as se
from engine.lobby.events import LobbyEvent
from engine.lobby.series import SeriesState, apply, summary


def link_of(code: str) -> str:
    """The shared link of a table: ``/t/<code>``."""
    return f"/t/{code}"


def created_message(state: SeriesState, command_id: str | None = None) -> dict[str, Any]:
    """The owner's answer to CreateTable."""
    return {"kind": "private_table", "state": "created", "code": state.code, "link": link_of(state.code),
            "series_id": state.series, "hands": state.hands, "command_id": command_id}


def _cid(e: LobbyEvent, player: str, actor: str | None) -> str | None:
    if e.command_id.startswith(("pm:", "timer:")) or player != actor:
        return None
    return e.command_id


def messages_of(e: LobbyEvent, state: SeriesState) -> list[tuple[str, dict[str, Any]]]:
    """The ``(player, message)`` pairs a series event causes; ``state``: the series after it."""
    people = [p for p in state.players if p != state.bot]
    sid = state.series
    if isinstance(e, se.SeriesCreated):
        return [(e.owner, created_message(state, e.command_id))]
    if isinstance(e, se.EndRequested):
        return [(p, {"kind": "series", "state": "vote", "series_id": sid, "by": e.by, "deadline_ms": e.deadline,
                     "command_id": _cid(e, p, e.by)}) for p in people]
    if isinstance(e, se.EndVoted):
        outcome = "vote_passed" if e.agree else "vote_refused"
        return [(p, {"kind": "series", "state": outcome, "series_id": sid, "by": e.player, "timed_out": e.timed_out,
                     "command_id": _cid(e, p, e.player)}) for p in people]
    if isinstance(e, se.SeriesFinished):
        return [(p, {"kind": "series", "state": "finished", "series_id": sid, "reason": e.reason,
                     "standings": e.standings.to_json(), "command_id": None}) for p in people]
    return []


def outcome_messages(out: Any) -> list[tuple[str, dict[str, Any]]]:
    """Every ``(player, message)`` of a command service outcome's appended events, in order
    (nothing for a refusal or a duplicate: those were told, or are told by the refusal)."""
    if not getattr(out, "committed", False) or out.before is None:
        return []
    state, told = out.before, []
    for e in out.events:
        state = apply(state, e)
        told += messages_of(e, state)
    return told


def settled_series(state: SeriesState) -> dict[str, Any]:
    """The ``series`` field of a hand's ``settled`` message: ``{"series_id", "hand", "hands",
    "totals"}`` (the state after the hand's HandSettled)."""
    return summary(state)


def resync(state: SeriesState, player: str) -> list[dict[str, Any]]:
    """What a reconnecting player of the series gets again: the running totals (``state``
    ``tally``, with ``dissolving: true`` once a vote to end has passed during the running hand),
    the open vote, or the final standings."""
    if player not in state.players or state.status == "new":
        return []
    if state.status == "finished" and state.final is not None:
        return [{"kind": "series", "state": "finished", "series_id": state.series, "reason": state.reason,
                 "standings": state.final.to_json(), "command_id": None}]
    out: list[dict[str, Any]] = []
    if state.status == "open" and player == state.owner:
        out.append(created_message(state))
    tally = {"kind": "series", "state": "tally", **summary(state), "command_id": None}
    if state.dissolving:  # the series ends when the running hand is settled: nothing left to ask
        tally["dissolving"] = True
    out.append(tally)
    if state.vote is not None:
        out.append({"kind": "series", "state": "vote", "series_id": state.series, "by": state.vote.by,
                    "deadline_ms": state.vote.deadline, "command_id": None})
    return out
