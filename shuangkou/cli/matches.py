"""``shuangkou matches --redis URL [--player P] [--since T] [--room R] [--json]``: find matches for a dispute.

Lists the matches in the store, newest first, one line each: id, start time
(UTC), room and mode, the two players, phase (``open``, ``finished``, or
``abandoned`` with its reason: ended before the deal, nothing settled), winner, kou and scores (the
ledger's stored settlement when there is one, else recomputed from the
events; ``settled`` says which).  Filters:

* ``--player P``: P was seated in the match -- P a player id, or a display name the gateways
  keep (``sk:{names}:display``: every player who goes by that name; read with HSCAN, one pass
  over the names) -- (also one that removed P: ``removed`` lists who
  was, and the text marks them ``(removed)``); the tables P sat at are listed too (after the
  matches; JSON: rows with ``"kind": "table"``, the table's id, room, players, status,
  close reason and matches; ``shuangkou replay --table ID`` tells a table's life), and the
  private tables' series P played (JSON: rows with ``"kind": "series"``, the series' id, room,
  players, hands, hands played, status, finish reason, totals and matches; ``shuangkou
  replay --series ID`` prints one hand by hand);
* ``--since T``: the match started at or after T -- an ISO date or time
  (``2026-12-01``, ``2026-12-01T10:30``, UTC unless it names a zone), ms
  since the epoch, or an age (``90m``, ``2h``, ``7d``);
* ``--room R``: the room config's name (``points``, ``wealth``…);
* ``--archived`` / ``--live``: only the matches ``shuangkou archive`` moved to files,
  or only those still in Redis (default: both).

Every row carries ``names``: the display names of its players who have one (the text shows
``id (name)``).

An archived match is listed from its file (the ledger's ``sk:{ledger}:archived``
says where) and marked ``[archived on DATE to FILE]`` (JSON: ``"archived": true``,
``archive_file``, ``archived_at``, ``archive_readable``); a file that cannot be read here
still lists the match, without its players (``--player`` cannot find it then) and with what
only the file could say (``phase``, ``settled``, the result) null: the text says so.

Read-only (the read-only Redis user is enough).  Exit 0 (also when nothing
matches: an empty list), 2 on bad input.
"""

from __future__ import annotations

import argparse
import os
import json
import re
import time
from datetime import datetime, timezone
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--redis", metavar="URL", default=None,
                        help="Redis URL of the event store (default $SK_REDIS_URL)")
    parser.add_argument("--player", metavar="P", help="only matches where P was seated (a player id or a display name)")
    parser.add_argument("--since", metavar="T", help="only matches started at or after T (ISO time, ms, or 2h / 7d)")
    parser.add_argument("--room", metavar="R", help="only matches of this room (config name)")
    parser.add_argument("--json", action="store_true", help="print a JSON list")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--archived", action="store_true", help="only archived matches (shuangkou archive)")
    which.add_argument("--live", action="store_true", help="only matches still in Redis")


_AGE = re.compile(r"^(\d+)\s*([smhd])$")
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_since(text: str, now_ms: int) -> int:
    """ms since the epoch of ``--since``.

    >>> parse_since("1700000000000", 0), parse_since("2h", 10_000_000)
    (1700000000000, 2800000)
    >>> parse_since("2023-11-14T22:13:20", 0)
    1700000000000
    """
    from shuangkou.cli import CliError

    t = text.strip()
    if t.isdigit():
        return int(t)
    m = _AGE.match(t)
    if m:
        return now_ms - int(m.group(1)) * _UNIT_MS[m.group(2)]
    try:
        dt = datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError:
        raise CliError(f"--since {text!r}: give an ISO date/time (2026-12-01T10:30), ms since the epoch, "
                       "or an age such as 2h or 7d") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp() * 1000)


def summary(match_id: str, events: list[Any], stored: Any) -> dict[str, Any]:
    """One match as the listing shows it (no hands: a summary for finding matches)."""
    from engine.match.events import MatchAbandoned, MatchCreated, MatchFinished, PlayerRemoved, PlayerSeated
    from projections.settlement import settle
    from projections.timeline import format_ts

    room = mode = None
    players: dict[str, int] = {}  # everyone who sat, at the seat they first took
    removed: list[str] = []  # who of them the match removed (not ready, left before the deal)
    finish = None
    abandoned = None
    for e in events:
        if isinstance(e, MatchCreated):
            room, mode = e.config.get("name"), e.config.get("mode")
        elif isinstance(e, PlayerSeated):
            players.setdefault(e.player, e.seat)
            if e.player in removed:
                removed.remove(e.player)  # sat again
        elif isinstance(e, PlayerRemoved):
            removed.append(e.player)
        elif isinstance(e, MatchFinished):
            finish = e
        elif isinstance(e, MatchAbandoned):
            abandoned = e.reason
    scores: dict[str, int] | None = None
    kou = None
    if stored is not None:
        scores, kou = dict(stored.scores), stored.kou
    elif finish is not None:
        try:
            s = settle(events)
            scores, kou = (dict(s.scores), s.kou) if s is not None else (None, None)
        except Exception:  # an unsettleable match still lists; replay says why
            scores = None
    started = events[0].ts if events else None
    return {
        "match_id": match_id, "started_ms": started, "started": format_ts(started) if started else None,
        "finished_ms": finish.ts if finish else None, "room": room, "mode": mode,
        "players": sorted(players, key=lambda p: players[p]), "removed": removed,
        "phase": "finished" if finish else ("abandoned" if abandoned else "open"),
        "abandoned": abandoned,
        "winner": finish.winner if finish else None, "reason": finish.reason if finish else None,
        "kou": kou, "scores": scores, "settled": stored is not None, "events": len(events),
    }


def run(args: argparse.Namespace) -> int:
    from shuangkou.cli import CliError
    from shuangkou.cli.export import read_only_store
    from projections.ledger import RedisLedger

    since = parse_since(args.since, int(time.time() * 1000)) if args.since else None
    args.redis = args.redis or os.environ.get("SK_REDIS_URL") or None
    if not args.redis:
        raise CliError("give --redis URL (or set SK_REDIS_URL)")
    store = read_only_store(args.redis)
    ledger = RedisLedger(store.client)
    rows: list[dict[str, Any]] = []

    try:
        wanted = players_named(store.client, args.player) if args.player else set()
    except Exception as exc:
        raise CliError(f"cannot read the display names from {args.redis}: {exc}") from None

    def keep(row: dict[str, Any]) -> bool:
        if args.player and not wanted & set(row["players"]):
            return False
        if args.room and row["room"] != args.room:
            return False
        return since is None or (row["started_ms"] or 0) >= since

    try:
        live: set[str] = set()
        if not args.archived:
            for mid in store.match_ids():
                events = store.load(mid)
                if not events:
                    continue
                live.add(mid)
                row = {**summary(mid, events, ledger.settlement(mid)), "archived": False}
                if keep(row):
                    rows.append(row)
        if not args.live:
            from engine.tools.archive import archived_markers, load_archived

            for mid, file in sorted(archived_markers(store.client).items()):
                if mid in live:  # marked, not yet deleted (archive finishes it on its next run)
                    continue
                row = archived_row(load_archived(mid, file))
                if keep(row):
                    rows.append(row)
    except CliError:
        raise
    except Exception as exc:
        raise CliError(f"cannot read matches from {args.redis}: {exc}") from None
    rows.sort(key=lambda r: (-(r["started_ms"] or 0), r["match_id"]))
    try:
        tables = player_tables(store, wanted, args.room, since) if args.player and not args.archived else []
        series = player_series(store, wanted, args.room, since) if args.player and not args.archived else []
        names = display_names(store.client, {p for r in rows + tables + series for p in r["players"]})
    except Exception as exc:
        raise CliError(f"cannot read tables from {args.redis}: {exc}") from None
    for r in rows + tables + series:
        r["names"] = {p: names[p] for p in r["players"] if p in names}
    if args.json:
        print(json.dumps(rows + tables + series, ensure_ascii=False))
        return 0
    if not rows and not tables and not series:
        print("no matches")
        return 0
    for r in rows:
        if r["archived"] and not r["archive_readable"]:
            print(f"{r['match_id']}  [{r['archive_where']}; the file cannot be read here]")
            continue
        scores = ", ".join(f"{p} {v:+d}" for p, v in (r["scores"] or {}).items())
        if r["winner"]:
            result = (f"{r['winner']} wins ({r['reason']}, kou {r['kou']}): {scores}"
                      + ("" if r["settled"] else " [not settled yet]"))
        elif r["phase"] == "abandoned":
            result = f"abandoned ({r['abandoned']}): never dealt, nothing settled"
        else:
            result = "finished" if r["archived"] else "not finished"
        if r["archived"]:
            result += f"  [{r['archive_where']}]"
        who = [_who(p, names) + (" (removed)" if p in r.get("removed", ()) else "") for p in r["players"]]
        print(f"{r['match_id']}  {r['started']}  {r['room']} ({r['mode']})  "
              f"{' vs '.join(who) or '?'}  {result}")
    for t in tables:
        state = f"closed ({t['close_reason']})" if t["status"] == "closed" else t["status"]
        print(f"table {t['table']}  {t['started']}  {t['room']}  {' vs '.join(_who(p, names) for p in t['players'])}"
              f"  {state}  "
              f"matches: {', '.join(t['matches']) or 'none'}  (shuangkou replay --table {t['table']})")
    for r in series:
        state = f"finished ({r['reason']})" if r["status"] == "finished" else r["status"]
        totals = ", ".join(f"{p} {v:+d}" for p, v in r["totals"].items())
        print(f"series {r['series']}  {r['started']}  {r['room']}  {' vs '.join(_who(p, names) for p in r['players'])}  "
              f"{r['hands_played']}/{r['hands']} hands  {state}  totals: {totals}  "
              f"(shuangkou replay --series {r['series']})")
    return 0


def players_named(client: Any, who: str) -> set[str]:
    """``who`` as a player id, and every player whose display name is ``who``
    (``sk:{names}:display``, gateway/names.py)."""
    from engine.service.publish import text as _text
    from engine.store import keys

    out = {who}
    for player, name in client.hscan_iter(keys.NAMES_KEY, count=1000):
        if _text(name) == who:
            out.add(_text(player))
    return out


def display_names(client: Any, players: set[str]) -> dict[str, str]:
    """The display names of ``players`` that have one (HMGET)."""
    from engine.service.publish import text as _text
    from engine.store import keys

    order = sorted(players)
    got = client.hmget(keys.NAMES_KEY, order) if order else []
    return {p: _text(n) for p, n in zip(order, got) if n is not None}


def _who(player: str, names: dict[str, str]) -> str:
    name = names.get(player)
    return f"{player} ({name})" if name and name != player else player


def player_series(store: Any, players: set[str], room: str | None, since: int | None) -> list[dict[str, Any]]:
    """The private tables' series any of ``players`` played (engine/store/lobby_store.py), newest
    first: rows with ``kind`` ``series``: the series' id, room, players, hands, hands played,
    status, finish reason, totals and its hands' matches."""
    from engine.lobby.series import replay_series
    from engine.lobby.series_events import series_aggregate
    from engine.store.lobby_store import RedisLobbyStore
    from projections.timeline import format_ts

    lobby = RedisLobbyStore(store.client, buckets=store.buckets)
    out: list[dict[str, Any]] = []
    for sid in lobby.series_ids():
        events = lobby.load(series_aggregate(sid))
        if not events:
            continue
        s = replay_series(sid, events)
        started = events[0].ts
        if not players & set(s.players) or (room and s.room != room) or (since is not None and started < since):
            continue
        matches = [h.match for h in s.played] + ([s.current] if s.current else [])
        out.append({"kind": "series", "series": sid, "room": s.room, "players": list(s.players), "bot": s.bot,
                    "hands": s.hands, "hands_played": len(s.played), "status": s.status, "reason": s.reason,
                    "totals": s.totals(), "started_ms": started, "started": format_ts(started),
                    "matches": matches})
    out.sort(key=lambda r: (-r["started_ms"], r["series"]))
    return out


def player_tables(store: Any, players: set[str], room: str | None, since: int | None) -> list[dict[str, Any]]:
    """The tables any of ``players`` sat at (the lobby's table streams, engine/store/lobby_store.py),
    newest first: rows with ``kind`` ``table`` (a match row has no ``kind``)."""
    from engine.lobby.events import match_of, table_aggregate
    from engine.lobby.replay import replay_table
    from engine.store.lobby_store import RedisLobbyStore
    from projections.timeline import format_ts

    lobby = RedisLobbyStore(store.client, buckets=store.buckets)
    out: list[dict[str, Any]] = []
    for tid in lobby.table_ids():
        events = lobby.load(table_aggregate(tid))
        if not events:
            continue
        t = replay_table(tid, events)
        started = events[0].ts
        if not players & set(t.players) or (room and t.room != room) or (since is not None and started < since):
            continue
        out.append({"kind": "table", "table": tid, "room": t.room, "players": list(t.players), "bot": t.bot,
                    "status": t.status, "close_reason": t.close_reason, "started_ms": started,
                    "started": format_ts(started), "matches": [match_of(tid, n) for n in range(1, t.n + 1)]})
    out.sort(key=lambda r: (-r["started_ms"], r["table"]))
    return out


def archived_row(gone: Any) -> dict[str, Any]:
    """The listing's row of an archived match (:class:`engine.tools.archive.ArchivedMatch`):
    from its file when it is readable here (the file's settlement is the one the ledger stored)."""
    from projections.timeline import format_ts

    if gone.readable:
        row = summary(gone.match_id, list(gone.events), None)
        row["settled"] = row["phase"] == "finished"  # only settled (or abandoned: nothing to settle) ones are
    else:  # what only the file could say is unknown (null), never guessed
        row = {"match_id": gone.match_id, "started_ms": None, "started": None, "finished_ms": None,
               "room": None, "mode": None, "players": [], "removed": [], "phase": None, "abandoned": None,
               "winner": None, "reason": None,
               "kou": None, "scores": None, "settled": None, "events": 0}
    at = gone.archived_at_ms
    return {**row, "archived": True, "archive_file": gone.file, "archive_readable": gone.readable,
            "archived_at": format_ts(at) if at else None, "archive_where": gone.where()}
