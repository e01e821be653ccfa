"""A finished (or running) match as a dispute handler reads it: one step per event. Pure.

:func:`timeline` folds a match's events (:func:`engine.match.evolve.apply`)
and records, after every event, what an operator needs to settle a dispute:

* when it happened (``ts`` in ms and ``time`` as UTC text) and, for a play or
  a pass, how long the turn took (``turn_ms``: from the moment the player got
  the turn, ``MatchState.turn_started_at``);
* who acted (``actor``: ``player``, ``timeout``, ``trustee``, ``auto`` for an
  auto-pass (R-6.4), ``system`` for everything else);
* the trick it belongs to and whether it ended the trick (``trick_break``: a
  pass ends a trick with two players, R-6.2);
* both hands (card ids, sorted) and the cards left after it;
* the event's own fields (``fields``: the reading of a play, a timeout's count, a reason...)
  beside its English line (``text``), so the replay viewer words the step in its language;
* trusteeship, disconnect and escape events as their own steps.

At the end, the settlement (:func:`projections.settlement.settle`) with each
term of X·a·b + X·c written out (:func:`settlement_lines`), each player's
effective xiang and its source (R-8.3, R-9, R-10), and the problems
:func:`engine.match.replay.check_stream` finds (an empty list: sound).

The same structure feeds ``shuangkou replay`` (text and ``--json``) and the
operator's replay viewer (``/replay/<match_id>``), so both show the same numbers.

>>> from engine.tools.script import run_script
>>> run = run_script({"config": "points", "players": [{"id": "a"}, {"id": "b"}],
...                   "deal": {"hands": ["3 4", "5"], "first": 0},
...                   "actions": [{"player": "a", "play": "3"}, {"player": "b", "play": "5"}]})
>>> t = timeline(run.events)
>>> [(s["type"], s["actor"], s["cards_left"]) for s in t["steps"] if s["type"] in ("CardsPlayed", "Passed")]
[('CardsPlayed', 'player', {'a': 1, 'b': 1}), ('CardsPlayed', 'player', {'a': 1, 'b': 0})]
>>> [s["fields"]["reading"]["kind"] for s in t["steps"] if s["type"] == "CardsPlayed"]
['single', 'single']
>>> t["settlement"]["winner"], t["problems"]
('b', [])
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any

from engine.match.events import (
    CardsPlayed,
    EventBase,
    HandDealt,
    MatchCreated,
    MatchFinished,
    Passed,
    PlayerDisconnected,
    PlayerEscaped,
    PlayerReconnected,
    TrusteeshipEnded,
    TrusteeshipStarted,
    TurnTimedOut,
)
from engine.match.evolve import apply
from engine.match.state import MatchState
from engine.rules.cards import format_ranks_lenient, sort_cards

__all__ = ["format_ms", "format_ts", "settlement_lines", "timeline", "timeline_lines"]

# the event's own fields every step carries as ``fields`` (so the viewer words a step in its own
# language): all but the envelope, the hands (``hands``) and the fair-deal material
ENVELOPE = ("match_id", "seq", "ts", "command_id", "v", "type", "hands", "set_aside", "client_seed", "client_seeds",
            "server_seed", "config")

# events that are about a player's connection or automation, shown as notices
NOTICE_TYPES = (TurnTimedOut, TrusteeshipStarted, TrusteeshipEnded, PlayerDisconnected,
                PlayerReconnected, PlayerEscaped)


def format_ts(ms: int) -> str:
    """UTC wall time with milliseconds.

    >>> format_ts(1_700_000_000_123)
    '2023-11-14 22:13:20.123'
    """
    t = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    return t.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}"


def format_ms(ms: int | None) -> str:
    """A duration as a person reads it: ``0.8s``, ``12.0s``, ``2m05s``.

    >>> format_ms(800), format_ms(12_000), format_ms(125_000), format_ms(None)
    ('0.8s', '12.0s', '2m05s', '')
    """
    if ms is None:
        return ""
    if ms < 60_000:
        return f"{ms / 1000:.1f}s"
    m, s = divmod(ms // 1000, 60)
    return f"{m}m{s:02d}s"


def _actor(e: EventBase) -> str:
    if isinstance(e, (CardsPlayed, Passed)):
        return e.by
    if isinstance(e, TurnTimedOut):
        return "timeout"
    return "system"


def _hands(state: MatchState) -> dict[str, list[int]]:
    return {s.player: sort_cards(s.hand) for s in state.seats if s is not None}


def timeline(events: Sequence[EventBase]) -> dict[str, Any]:
    """Steps, players, settlement and problems of one match's events (see the module doc).

    The events are untrusted: an event ``apply`` refuses stops the fold, and
    the problem is in ``problems``; the steps before it are kept.
    """
    from engine.match.replay import check_stream
    from engine.match.narrate import narrate

    problems = check_stream(events) if events else ["the stream is empty"]
    lines = narrate(events)
    state = MatchState(match_id=events[0].match_id if events else "")
    steps: list[dict[str, Any]] = []
    config: dict[str, Any] = {}
    for e, line in zip(events, lines):
        before = state
        try:
            state = apply(state, e)
        except Exception:  # check_stream names the problem
            break
        if isinstance(e, MatchCreated):
            config = dict(e.config)
        step: dict[str, Any] = {
            "seq": e.seq, "type": type(e).__name__, "ts": e.ts, "time": format_ts(e.ts),
            "actor": _actor(e), "player": getattr(e, "player", None),
            "text": line.split(None, 1)[1] if " " in line else line,
            "trick": state.trick if state.phase in ("playing", "finished") else None,
            "trick_break": False, "turn_ms": None,
            "fields": {k: v for k, v in e.model_dump(mode="json").items() if k not in ENVELOPE},
        }
        if isinstance(e, (CardsPlayed, Passed)):
            started = before.turn_started_at
            step["turn_ms"] = None if started is None else max(e.ts - started, 0)
            step["trick"] = before.trick
            step["trick_break"] = state.trick != before.trick or state.phase == "finished"
        if isinstance(e, CardsPlayed):
            step["cards"] = list(e.cards)
            step["cards_text"] = format_ranks_lenient(e.cards)
            step["reading"] = e.reading.combo().describe()
            step["bomb"] = e.reading.combo().is_bomb
        if isinstance(e, NOTICE_TYPES):
            step["notice"] = True
            if isinstance(e, TurnTimedOut):
                step["notice_zh"], step["notice_en"] = e.notice_zh, e.notice_en
            if isinstance(e, (TrusteeshipStarted, TrusteeshipEnded)):
                step["reason"] = e.reason
        if isinstance(e, HandDealt):
            step["first"] = state.seat(e.first).player if state.seats[e.first] else None
        if isinstance(e, MatchFinished):
            step["winner"], step["reason"] = e.winner, e.reason
        if state.phase in ("playing", "finished") or isinstance(e, HandDealt):
            step["hands"] = _hands(state)
            step["cards_left"] = {p: len(h) for p, h in step["hands"].items()}
        steps.append(step)

    from projections.settlement import SettlementError, settle

    settlement: dict[str, Any] | None = None
    try:
        s = settle(events)
        settlement = None if s is None else s.to_json()
    except SettlementError as exc:
        problems = [*problems, f"settlement failed: {exc}"]
    except Exception as exc:  # a settlement bug must not hide the timeline
        problems = [*problems, f"settlement failed: {exc!r}"]
    players = [{"seat": i, "player": s.player, "balance": s.balance, "level": s.level, "base": s.base}
               for i, s in enumerate(state.seats) if s is not None]
    return {
        "match_id": state.match_id,
        "room": config.get("name"),
        "mode": config.get("mode"),
        "phase": state.phase,
        "players": players,
        "started_ms": events[0].ts if events else None,
        "finished_ms": events[-1].ts if events and state.phase == "finished" else None,
        "steps": steps,
        "settlement": settlement,
        "settlement_lines": settlement_lines(settlement) if settlement else [],
        "problems": problems,
    }


def settlement_heading(result: dict[str, Any]) -> str:
    """The heading over :func:`settlement_lines`: the rule the settlement follows --
    R-8.6 for a normal end, R-12 for an escape (forfeit).

    >>> settlement_heading({"kou": "flat"})
    'settlement (R-8.6: W gets X·a·b + X·(c_W − c_L); L the negation):'
    >>> settlement_heading({"kou": "escape"})[:46]
    'settlement (R-12 escape: the escaper E owes 12'
    """
    if result.get("kou") == "escape":
        return ("settlement (R-12 escape: the escaper E owes 12·X + X·c_O + D, D the doubling of the "
                "opponent O's bombs, 0 when b_O = 1; O receives the escape transfer ratio of what E paid, "
                "the rest is burned):")
    return "settlement (R-8.6: W gets X·a·b + X·(c_W − c_L); L the negation):"


def settlement_lines(result: dict[str, Any]) -> list[str]:
    """The settlement written out term by term (R-8, R-12), one line each.

    ``result`` is :meth:`projections.settlement.Settlement.to_json`.
    """
    b = result.get("breakdown") or {}
    w, kou = result.get("winner"), result.get("kou")
    out: list[str] = []
    xiang = b.get("xiang") or {}
    out.append(f"X = {b.get('X')} (R-8.2: base of the lower level; "
               + ", ".join(f"{p} level {v.get('level')} base {v.get('base')}"
                           for p, v in (b.get("X_from") or {}).get("levels", {}).items()) + ")")
    for p, x in xiang.items():
        out.append(f"effective xiang of {p}: {x.get('xiang')} ({x.get('source')}) → c = {x.get('c')}, b = {x.get('b')}")
    if kou == "escape":
        esc = b.get("escape") or {}
        out.append(f"escape ({esc.get('rule')}): {esc.get('escaper')} owes "
                   f"{esc.get('penalty_formula')}" + (f" + {esc.get('contribution_formula')}"
                                                     if "contribution_formula" in esc else "")
                   + (f" + {esc.get('doubling_formula')}" if "doubling_formula" in esc else "")
                   + f" → {esc.get('formula')}")
        out.append(f"paid {esc.get('paid')}; {esc.get('opponent')} receives {esc.get('received_formula')}; "
                   f"burned {b.get('burned', 0)}")
    else:
        out.append(f"a = {b.get('a')} ({b.get('a_from')})")
        out.append(f"b = {b.get('b')} ({b.get('b_from')})")
        out.append(f"{w} gets X·a·b + X·(c_W − c_L):  {b.get('win_formula')};  {b.get('contribution_formula')}")
        cap = b.get("cap")
        if cap and cap.get("applied"):
            out.append(f"cap (R-11.2): {cap.get('payer')} owed {cap.get('owed')}, holds {cap.get('balance')}, "
                       f"pays {cap.get('paid')}")
    scores = result.get("scores") or {}
    out.append("scores: " + ", ".join(f"{p} {v:+d}" for p, v in scores.items()))
    return out


def timeline_lines(t: dict[str, Any]) -> list[str]:
    """The text of ``shuangkou replay``: time, time per turn, trick separators, cards left."""
    out: list[str] = []
    trick_open: int | None = None
    for s in t["steps"]:
        if s["type"] in ("CardsPlayed", "Passed") and s["trick"] != trick_open:
            trick_open = s["trick"]
            out.append(f"---- trick {trick_open} " + "-" * 40)
        turn = format_ms(s["turn_ms"])
        line = f"#{s['seq']:<3} {s['time']} {('+' + turn) if turn else '':>8}  {s['text']}"
        if s["type"] in ("CardsPlayed", "Passed") and "cards_left" in s:
            line += "  | left: " + ", ".join(f"{p} {n}" for p, n in s["cards_left"].items())
        if s.get("notice_en"):
            line += f" / {s['notice_en']}"
        out.append(line)
    return out
