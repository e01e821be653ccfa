"""A table's life from its stored events (``shuangkou replay --table ID``): who joined (the
room queue's Joins that led to the table), who was seated, each match with how it ended,
each leave, and why the table closed.  Pure: the events in, a report out.

>>> from engine.lobby import events as ev
>>> t = [ev.TableOpened(aggregate="table:t1", seq=1, ts=0, command_id="c", table="t1", room="points",
...                     players=("a", "b"), match="t1-1", ready_ms=20000, grace_ms=10000)]
>>> r = table_life("t1", t, [], {})
>>> r["players"], r["status"], r["problems"]
(['a', 'b'], 'creating', [])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from typing import Any

from engine.lobby import events as ev
from engine.lobby.replay import check_lobby_stream, replay_table


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _pairs(items: Sequence[tuple[str, str]]) -> str:
    return ", ".join(f"{p} ({r})" for p, r in items) or "nobody"


def describe(e: ev.LobbyEvent) -> str:
    """One line for a lobby event, in words."""
    if isinstance(e, ev.PlayerQueued):
        return f"{e.player} waits in the queue" + (" (joined)" if e.reason == "joined" else " again: their opponent left")
    if isinstance(e, ev.TablePaired):
        return f"{e.players[0]} and {e.players[1]} paired at table {e.table} (first match {e.match})"
    if isinstance(e, ev.BotSeated):
        return (f"{e.player} alone for {e.waited_ms / 1000:.1f} s: bot {e.bot} ({e.bot_level}) seated opposite "
                f"at table {e.table}")
    if isinstance(e, ev.LeaveRequested):
        return f"{e.player} asked to leave: handed to table {e.table}"
    if isinstance(e, ev.AwayNoted):
        return f"{e.player} {'away past the grace' if e.away else 'back'} (table {e.table})"
    if isinstance(e, ev.TableReleased):
        return f"table {e.table} released by the queue"
    if isinstance(e, ev.LeftWithTable):
        return f"{e.player} left the room with the table ({e.reason})"
    if isinstance(e, ev.CooldownStarted):
        return f"{e.player} left before a deal ({e.leaves}x in a row): no Join before {_when(e.until)}"
    if isinstance(e, ev.PlayerLeftQueue):
        return f"{e.player} left the queue ({e.reason})"
    if isinstance(e, ev.TableOpened):
        bot = f", bot {e.bot} ({e.bot_level})" if e.bot else ""
        return (f"table opened in room {e.room}: {e.players[0]} vs {e.players[1]}{bot}; match {e.match} "
                f"(ready {e.ready_ms / 1000:g} s, grace {e.grace_ms / 1000:g} s)")
    if isinstance(e, ev.MatchSeated):
        return f"{e.match}: both seated, waiting for Ready"
    if isinstance(e, ev.PlayerReadied):
        return f"{e.match}: {e.player} ready"
    if isinstance(e, ev.MatchDealt):
        return f"{e.match}: dealt"
    if isinstance(e, ev.LeaveDeferred):
        return f"{e.match}: {e.player} left during the match ({'an Escape' if e.escape else 'a Leave before the deal'})"
    if isinstance(e, ev.LeaveNoted):
        return f"{e.match}: {e.player} left after the finish (closes at the settlement)"
    if isinstance(e, ev.PlayerAway):
        return f"{e.match}: {e.player} away past the grace (Disconnect)"
    if isinstance(e, ev.PlayerBack):
        return f"{e.match}: {e.player} back (Reconnect)"
    if isinstance(e, ev.MatchEnded):
        if e.outcome == "finished":
            return f"{e.match}: finished" + (f" ({e.escaper} escaped)" if e.escaper else "")
        return f"{e.match}: ended before the deal ({e.outcome}; removed {_pairs(e.removed)})"
    if isinstance(e, ev.MatchSettled):
        return f"{e.match}: settled " + ", ".join(f"{p} {s:+d}" for p, s in sorted(e.scores.items()))
    if isinstance(e, ev.NextMatchOffered):
        return f"next match {e.match}"
    if isinstance(e, ev.TableClosed):
        stay = ", ".join(e.stayed) or "nobody"
        return f"table closed: {e.reason}; removed {_pairs(e.removed)}; back to the queue: {stay}"
    return type(e).__name__


def _queue_part(table: str, queue: Sequence[ev.LobbyEvent]) -> list[ev.LobbyEvent]:
    """The room queue's events about the table: its players' Joins before the pairing, the
    pairing, the leaves handed to it, its release and what that decision did."""
    out: list[ev.LobbyEvent] = []
    start = next((i for i, e in enumerate(queue)
                  if isinstance(e, (ev.TablePaired, ev.BotSeated)) and e.table == table), None)
    if start is None:
        return out
    seat = queue[start]
    players: tuple[str, ...] = seat.players if isinstance(seat, ev.TablePaired) else (getattr(seat, "player"),)
    for p in players:
        join = next((e for e in reversed(queue[:start]) if isinstance(e, ev.PlayerQueued) and e.player == p
                     and e.reason == "joined"), None)
        if join is not None:
            out.append(join)
    release_cmd: str | None = None
    for e in queue[start:]:
        if getattr(e, "table", None) == table:
            out.append(e)
            if isinstance(e, ev.TableReleased):
                release_cmd = e.command_id
        elif release_cmd is not None and e.command_id == release_cmd:
            out.append(e)
    return sorted(out, key=lambda e: e.seq)


def _cause(e: ev.LobbyEvent) -> tuple[str, int] | None:
    """The lobby event a process manager's command came from (its fixed id
    ``pm:<aggregate>:<seq>:<tag>``): ``(aggregate, seq)``."""
    parts = e.command_id.split(":")
    if len(parts) >= 5 and parts[0] == "pm" and parts[1] in ("table", "queue") and parts[3].isdigit():
        return f"{parts[1]}:{parts[2]}", int(parts[3])
    return None


def _merge(table: str, queue: list[ev.LobbyEvent],
           tbl: list[ev.LobbyEvent]) -> list[tuple[str, ev.LobbyEvent]]:
    """The two streams in one order: by time, an event never before the one that caused it."""
    out: list[tuple[str, ev.LobbyEvent]] = []
    done: set[tuple[str, int]] = set()
    mine = {ev.table_aggregate(table)} | ({queue[0].aggregate} if queue else set())
    lines = {"table": tbl, "queue": queue}
    at = {"table": 0, "queue": 0}
    while any(at[k] < len(v) for k, v in lines.items()):
        heads = [(k, lines[k][at[k]]) for k in ("table", "queue") if at[k] < len(lines[k])]
        ready = [(k, e) for k, e in heads if (c := _cause(e)) is None or c[0] not in mine or c in done]
        k, e = min(ready or heads, key=lambda h: h[1].ts)
        out.append((k, e))
        done.add((e.aggregate, e.seq))
        at[k] += 1
    return out


def table_life(table: str, table_events: Sequence[ev.LobbyEvent], queue_events: Sequence[ev.LobbyEvent],
               matches: Mapping[str, Any]) -> dict[str, Any]:
    """The report of a table: ``steps`` (time, stream, seq, type, text, in order of time),
    ``matches`` (id, phase, winner), ``status``, ``close_reason``, ``problems``.
    ``matches``: each match's replayed state (``engine.match.state.MatchState``) by id."""
    state = replay_table(table, table_events)
    problems = check_lobby_stream(table_events) if table_events else ["no such table"]
    rows = _merge(table, _queue_part(table, queue_events), list(table_events))
    steps = [{"at_ms": e.ts, "at": _when(e.ts), "stream": where, "seq": e.seq, "type": type(e).__name__,
              "command_id": e.command_id, "text": describe(e)} for where, e in rows]
    played = []
    for n in range(1, state.n + 1):
        mid = ev.match_of(table, n)
        m = matches.get(mid)
        fin = getattr(m, "finished", None)
        played.append({"match": mid, "phase": getattr(m, "phase", None) if m is not None else None,
                       "winner": getattr(fin, "winner", None), "reason": getattr(fin, "reason", None)})
    return {"table": table, "room": state.room or None, "players": list(state.players), "bot": state.bot,
            "status": state.status, "close_reason": state.close_reason, "removed": [list(x) for x in state.removed],
            "matches": played, "steps": steps, "event_count": len(table_events), "problems": problems}


def format_table_life(report: Mapping[str, Any]) -> list[str]:
    """The report as lines of text."""
    players = " vs ".join(report["players"]) or "?"
    lines = [f"table {report['table']} (room {report['room']}): {players}"]
    for s in report["steps"]:
        lines.append(f"  {s['at']}  {s['stream']:<5} #{s['seq']:<3} {s['text']}")
    for m in report["matches"]:
        how = m["phase"] or "not in the store"
        if m["winner"]:
            how += f", {m['winner']} won ({m['reason']})"
        lines.append(f"match {m['match']}: {how}")
    if report["status"] == "closed":
        lines.append(f"closed: {report['close_reason']}")
    else:
        lines.append(f"open: {report['status']}")
    return lines
