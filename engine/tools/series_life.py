"""A private table's series from its stored events (``shuangkou replay --series ID``): who
opened it and who joined, each hand with its match, how the match ended and its settled
scores with the running totals, each vote to end, why the series finished, and its
standings.  Pure: the events in (and each hand's replayed match, optional), a report out.

>>> from engine.lobby import series_events as se
>>> e = [se.SeriesCreated(aggregate="series:s1", seq=1, ts=0, command_id="c", series="s1", owner="a",
...                       room="points", hands=4, options=se.SeriesOptions(), code="K7M2QX", table="s1",
...                       join_deadline=600000, vote_ms=60000)]
>>> r = series_life("s1", e, {})
>>> r["players"], r["status"], r["standings"]["totals"], r["problems"]
(['a'], 'open', {'a': 0}, [])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from engine.lobby import series_events as se
from engine.lobby.events import LobbyEvent
from engine.lobby.series import SeriesState, apply, check_series_stream, standings
from engine.tools.table_life import _when


def _signed(scores: Mapping[str, int]) -> str:
    return ", ".join(f"{p} {s:+d}" for p, s in scores.items()) or "none"


def describe(e: LobbyEvent, after: SeriesState) -> str:
    """One line for a series event, in words (``after``: the series after it)."""
    if isinstance(e, se.SeriesCreated):
        o = e.options
        return (f"{e.owner} opened table {e.code} in room {e.room} for {e.hands} hands (spectators: "
                f"{'yes' if o.spectators else 'no'}, bots: {'yes' if o.bots else 'no'}); join by "
                f"{_when(e.join_deadline)}")
    if isinstance(e, se.PlayerJoinedSeries):
        if e.bot:
            return f"nobody joined in time: bot {e.player} ({e.bot_level}) took the seat"
        return f"{e.player} joined with the code"
    if isinstance(e, se.HandStarted):
        return f"hand {e.hand} of {after.hands} dealt: {e.match}"
    if isinstance(e, se.HandSettled):
        won = f" ({e.winner} won)" if e.winner else ""
        esc = f"; {e.escaper} escaped" if e.escaper else ""
        return f"hand {e.hand} settled: {_signed(e.scores)}{won}{esc}; totals {_signed(after.totals())}"
    if isinstance(e, se.EndRequested):
        return f"{e.by} asked to end the series (vote {e.vote}, open until {_when(e.deadline)})"
    if isinstance(e, se.EndVoted):
        if e.timed_out:
            return f"{e.player} did not answer in time: counts as agreed"
        return f"{e.player} {'agreed' if e.agree else 'refused'}" + (
            " (the series ends after the running hand)" if e.agree and after.status != "finished" else "")
    if isinstance(e, se.SeriesFinished):
        return f"series finished: {e.reason}"
    return type(e).__name__


def series_life(series: str, events: Sequence[LobbyEvent], matches: Mapping[str, Any]) -> dict[str, Any]:
    """The report of a series: ``steps`` (time, seq, type, text), ``hands`` (number, match,
    scores, winner, the match's phase and finish), ``status``, ``reason``, ``standings`` (as
    the series' ``finished`` message carries them, recomputed from the hands' settlements),
    ``problems``.  ``matches``: each hand's replayed state (``engine.match.state.MatchState``)."""
    problems = check_series_stream(events) if events else ["no such series"]
    s = SeriesState(series=series)
    steps = []
    for e in events:
        s = apply(s, e)
        steps.append({"at_ms": e.ts, "at": _when(e.ts), "seq": e.seq, "type": type(e).__name__,
                      "command_id": e.command_id, "text": describe(e, s)})
    hands = []
    started = {e.hand: e.match for e in events if isinstance(e, se.HandStarted)}
    settled = {h.hand: h for h in s.played}
    for n, match in sorted(started.items()):
        m = matches.get(match)
        fin = getattr(m, "finished", None)
        h = settled.get(n)
        hands.append({"hand": n, "match": match, "scores": dict(h.scores) if h else None,
                      "winner": h.winner if h else None,
                      "phase": getattr(m, "phase", None) if m is not None else None,
                      "finish": getattr(fin, "reason", None), "kou": getattr(fin, "kou", None)})
    return {"series": series, "room": s.room or None, "owner": s.owner or None, "code": s.code or None,
            "table": s.table or None, "hands_count": s.hands, "players": list(s.players), "bot": s.bot,
            "options": {"spectators": s.spectators, "bots": s.bots}, "status": s.status, "reason": s.reason,
            "hands": hands, "standings": standings(s).to_json(), "steps": steps, "event_count": len(events),
            "problems": problems}


def format_series_life(report: Mapping[str, Any]) -> list[str]:
    """The report as lines of text."""
    players = " vs ".join(report["players"]) or "?"
    lines = [f"series {report['series']} (room {report['room']}, {report['hands_count']} hands, table "
             f"{report['code']}): {players}"]
    for st in report["steps"]:
        lines.append(f"  {st['at']}  #{st['seq']:<3} {st['text']}")
    for h in report["hands"]:
        how = h["phase"] or "not in the store"
        if h["finish"]:
            how += f" ({h['finish']}, {h['kou']})"
        scores = _signed(h["scores"]) if h["scores"] is not None else "not settled"
        lines.append(f"hand {h['hand']} {h['match']}: {how}; {scores}")
    st = report["standings"]
    lines.append(f"standings: totals {_signed(st['totals'])}")
    lines.append("  hands won: " + (", ".join(f"{p} {n}" for p, n in st["hands_won"].items()) or "none"))
    bomb = st["biggest_bomb"]
    if bomb["player"]:
        lines.append(f"  biggest bomb: {bomb['player']}, {bomb['xiang']} xiang (hand {bomb['hand']}, {bomb['match']})")
    else:
        lines.append("  biggest bomb: none")
    lines.append(f"finished: {report['reason']}" if report["status"] == "finished" else f"open: {report['status']}")
    return lines
