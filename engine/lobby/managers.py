"""The lobby's process managers: pure translations of one aggregate's events into the
commands of another, each with a fixed command id (the source aggregate or match, the
event's seq, a tag), so that running a manager twice over the same events changes nothing
(the event store refuses a command id it has seen).

* :func:`from_queue`: TablePaired / BotSeated open the table; LeaveRequested, AwayNoted
  hand the player's Leave / grace / return to the table.
* :func:`from_table`: TableClosed releases the table in its room's queue.
* :func:`to_match`: what a table's events ask of its match: CreateMatch and the Sits
  for a new match (TableOpened, NextMatchOffered), a Leave or an Escape (LeaveDeferred),
  a Disconnect / Reconnect (PlayerAway / PlayerBack), and at a close before the deal the
  Leave of each player who stays (they leave the abandoned match).
* :func:`from_match`: a match's events, one decision at a time (the events of one command
  id), as the table's news: PlayerReady, HandDealt, the end (PlayerRemoved before the deal,
  MatchAbandoned, MatchFinished with the escaper).

>>> from engine.lobby.events import TablePaired
>>> e = TablePaired(aggregate="queue:points", seq=4, ts=0, command_id="c", table="t1",
...                 players=("a", "b"), match="t1-1")
>>> [(c.type, c.command_id) for c in from_queue("points", e)]
[('OpenTable', 'pm:queue:points:4:open')]
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import groupby
from typing import Any

from engine.match import commands as mc
from engine.match.events import (
    EventBase,
    HandDealt,
    MatchAbandoned,
    MatchFinished,
    PlayerEscaped,
    PlayerReady,
    PlayerRemoved,
)
from engine.lobby import commands as lc
from engine.lobby import events as ev
from engine.lobby.state import TableState


def _id(e: ev.LobbyEvent, tag: str) -> str:
    return f"pm:{e.aggregate}:{e.seq}:{tag}"


def from_queue(room: str, e: ev.LobbyEvent) -> list[lc.LobbyCommand]:
    """The table commands a queue event causes."""
    if isinstance(e, ev.TablePaired):
        return [lc.OpenTable(command_id=_id(e, "open"), table=e.table, room=room, players=e.players,
                             match=e.match)]
    if isinstance(e, ev.BotSeated):
        return [lc.OpenTable(command_id=_id(e, "open"), table=e.table, room=room,
                             players=(e.player, e.bot), match=e.match, bot=e.bot, bot_level=e.bot_level)]
    if isinstance(e, ev.LeaveRequested):
        return [lc.Leave(command_id=_id(e, "leave"), room=room, player=e.player, table=e.table)]
    if isinstance(e, ev.AwayNoted):
        cls = lc.GraceExpired if e.away else lc.Returned
        return [cls(command_id=_id(e, "away" if e.away else "back"), room=room, player=e.player, table=e.table)]
    return []


def from_table(table: TableState, e: ev.LobbyEvent) -> list[lc.LobbyCommand]:
    """The queue commands a table event causes (``table``: the table's state, for its room)."""
    if isinstance(e, ev.TableClosed):
        return [lc.ReleaseTable(command_id=_id(e, "release"), room=table.room, table=table.table,
                                removed=e.removed, stayed=e.stayed, bot=e.bot, dealt=e.dealt,
                                left_before_deal=e.left_before_deal)]
    return []


def _player_command(cls: type[mc.CommandBase], e: ev.LobbyEvent, tag: str, match: str,
                    player: str, **fields: Any) -> mc.CommandBase:
    return cls(command_id=_id(e, tag), match_id=match, player=player, **fields)  # type: ignore[call-arg]


def to_match(before: TableState, e: ev.LobbyEvent) -> list[mc.CommandBase]:
    """The match commands a table event asks for (``before``: the table before the event)."""
    if isinstance(e, (ev.TableOpened, ev.NextMatchOffered)):
        room = e.room if isinstance(e, ev.TableOpened) else before.room
        players = e.players if isinstance(e, ev.TableOpened) else tuple(before.players)
        out: list[mc.CommandBase] = [mc.CreateMatch(command_id=_id(e, "create"), match_id=e.match, room=room)]
        out += [mc.Sit(command_id=_id(e, f"sit:{i}"), match_id=e.match, player=p) for i, p in enumerate(players)]
        return out
    if isinstance(e, ev.LeaveDeferred):
        return [_player_command(mc.Escape if e.escape else mc.Leave, e, "leave", e.match, e.player)]
    if isinstance(e, ev.PlayerAway):
        return [_player_command(mc.Disconnect, e, "disconnect", e.match, e.player)]
    if isinstance(e, ev.PlayerBack):
        return [_player_command(mc.Reconnect, e, "reconnect", e.match, e.player)]
    if isinstance(e, ev.TableClosed) and before.match is not None and not before.dealt \
            and before.status in ("creating", "seated", "between"):
        # a close before the deal, the table's own (a Leave while creating) or after the match
        # ended before its deal (a removal: the table is "between" then, not dealt): whoever
        # stays leaves that match, so it ends with the table and they sit in no other
        stay = [*e.stayed, *([e.bot] if e.bot else [])]
        stay += [p for p, r in e.removed if r == "series_over"]  # a private table's next match, never dealt
        return [_player_command(mc.Leave, e, f"leave:{p}", before.match, p, reason="table_closed") for p in stay]
    return []


def from_match(table: str, match: str, events: Iterable[EventBase],
               escaped: Iterable[str] = ()) -> list[lc.LobbyCommand]:
    """The table commands a match's events cause, one per decision (command id) that matters;
    ``escaped``: who escaped in the match before these events (its state's seats), named as
    the escaper when the match finishes (under the trustee policy it finishes by a hand out)."""
    out: list[lc.LobbyCommand] = []
    escaper: str | None = next(iter(escaped), None)
    for _cid, group in groupby(events, key=lambda x: x.command_id):
        batch: Sequence[EventBase] = list(group)
        first = f"pm:{match}:{batch[0].seq}"
        # a removal the table's close asked for is the table's own doing: nothing to tell it
        removed = tuple((x.player, x.reason) for x in batch
                        if isinstance(x, PlayerRemoved) and x.reason != "table_closed")
        for x in batch:
            if isinstance(x, PlayerReady):
                out.append(lc.NoteReady(command_id=f"pm:{match}:{x.seq}:ready", table=table, match=match,
                                        player=x.player))
            elif isinstance(x, HandDealt):
                out.append(lc.NoteDealt(command_id=f"pm:{match}:{x.seq}:dealt", table=table, match=match))
            elif isinstance(x, PlayerEscaped):
                escaper = x.player
        finish = next((x for x in batch if isinstance(x, MatchFinished)), None)
        if removed:
            out.append(lc.MatchEnded(command_id=f"{first}:end", table=table, match=match, outcome="removed",
                                     removed=removed))
        elif any(isinstance(x, MatchAbandoned) for x in batch):
            out.append(lc.MatchEnded(command_id=f"{first}:end", table=table, match=match, outcome="abandoned"))
        elif finish is not None:
            who = finish.loser if finish.reason == "escape" else escaper
            out.append(lc.MatchEnded(command_id=f"{first}:end", table=table, match=match, outcome="finished",
                                     escaper=who))
    return out
