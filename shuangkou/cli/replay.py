"""``shuangkou replay MATCH_ID --redis URL | --events FILE [--json] [--all]``, and
``shuangkou replay --table ID --redis URL | --archive DIR [--json]``: a table's life (who
joined, who was seated, each match and how it ended, each leave, why it closed;
engine/tools/table_life.py), and ``shuangkou replay --series ID --redis URL | --archive DIR
[--json]``: a private table's series hand by hand with its standings
(engine/tools/series_life.py).  An archived table or series is read from the folder
``shuangkou archive`` wrote (its ``table-``/``series-`` file and its matches' files); a
table's or series' archive given to ``--events`` says which command reads it.

Rebuild a match from its stored events, print it play by play in card
notation -- with each event's UTC time, the time each turn took, a separator
between tricks and both players' cards left after each play
(:mod:`projections.timeline`) -- and the settlement term by term with its
numbers (X·a·b + X·(c_W − c_L), each player's effective xiang and its source);
check the stream (:func:`engine.match.replay.check_stream`: seq, match
id, 108-card accounting, the rules of each play) and settle it
(:func:`projections.settlement.settle`).  Exit 0 when sound, 1 when a problem
is found, 2 on bad input.  There is no persistent embedded store, so the
events come from Redis (``--redis``) or from a file (``--events``): an export
(``shuangkou export``, JSON Lines) or JSON as printed by ``shuangkou run-script
--json``.  ``--all`` checks every match in the store (one summary line each, or
a JSON list) and cross-checks the ledger against the log
(:mod:`projections.audit`): a settlement or a journal line for a match the log does not
hold or finish, or that differs from the log's, is a problem of that match (exit 1).  ``--redis`` defaults to ``$SK_REDIS_URL``, as for ``shuangkou
serve``.  An unknown match id says "no such match" (exit 1); an archived one
(``shuangkou archive``) says where it went -- "archived on DATE to FILE;
`shuangkou replay --events FILE`" (exit 1: not in the store).  ``--json``
carries the full event list (``events``), its length (``event_count``), the
timeline ``steps`` and the ``settlement_lines``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("match_id", nargs="?", help="the match to replay (optional with --events/--all)")
    parser.add_argument("--redis", metavar="URL", default=None,
                        help="Redis URL of the event store (default $SK_REDIS_URL)")
    parser.add_argument("--events", metavar="FILE",
                        help="an export (shuangkou export, JSON Lines) or a JSON file {\"events\": [...]} "
                             "as printed by run-script --json")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--all", action="store_true", help="check every match in the store")
    parser.add_argument("--archive", metavar="DIR",
                        help="also read the matches archived to DIR (shuangkou archive), with their stored settlements; "
                             "with --table or --series, that table's or series' archive too")
    parser.add_argument("--table", metavar="ID",
                        help="print a table's life instead: who joined, who was seated, each match, each leave, "
                             "and why it closed (from the table's and its room queue's streams)")
    parser.add_argument("--series", metavar="ID",
                        help="print a private table's series instead: hand by hand with its scores and "
                             "running totals, each vote to end, why it finished, and its standings")


def _load_file(path: str) -> Any:
    """The :class:`~engine.tools.export.ParsedEvents` of an export (JSON Lines,
    ``shuangkou export``) or a JSON events file."""
    from shuangkou.cli import CliError
    from engine.tools.export import ExportFormatError, parse_events_text

    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read events from {path}: {exc}") from None
    from engine.tools.archive import archive_kind

    kind = archive_kind(text)
    if kind is not None:
        raise CliError(f"{path} is a {kind}'s archive, not a match's events: "
                       f"shuangkou replay --{kind} ID --archive DIR")
    try:
        return parse_events_text(text)
    except ExportFormatError as exc:
        raise CliError(f"{path}: {exc}") from None


def compare_stored(result: dict[str, Any], stored: Any, required: bool = False,
                   parked: str | None = None) -> tuple[list[str], str]:
    """Check a recomputed settlement against the stored ones.

    ``stored`` is the ledger's :class:`~projections.settlement.Settlement`, or the
    forms a file stores (``{"settlement": ..., "settlement_record": ...}``,
    :meth:`engine.tools.export.ParsedEvents.stored_forms`), or None.  Returns
    (problems, note): a difference in any compared key of any form is a problem
    (:func:`engine.tools.export.settlement_differences`); a finished match that is
    not settled yet is only a note, unless ``required`` (``replay --all``: every
    finished match must be settled) or the settlement was parked (refused for
    good; ``parked`` is its reason).
    """
    from engine.tools.export import settlement_differences

    forms = stored if isinstance(stored, dict) or stored is None else {"ledger": stored.to_json()}
    if not forms:
        if parked is not None:
            return [f"no settlement: it was parked ({parked}); fix it, then shuangkou reconcile"], ""
        if required:
            return ["finished but not settled (run shuangkou reconcile)"], ""
        return [], "stored settlement: none yet (the projection has not settled this match)"
    diffs = settlement_differences(result, forms)
    if diffs:
        return diffs, ""
    return [], "stored settlement: matches the replay"


def report(match_id: str, events: list[Any], ledger: Any = None, require_settlement: bool = False,
           stored: Any = None) -> dict[str, Any]:
    """Problems, final phase, settlement and timeline of one match's events (and,
    given the projection's ledger, or the ``stored`` settlement of an archive, whether
    it agrees; with ``require_settlement`` a finished match without one is a problem).

    ``events`` in the report is the full event list as JSON objects;
    ``event_count`` its length; ``steps`` the :func:`projections.timeline.timeline`
    steps (time, time per turn, trick, who acted, both hands after each event).
    """
    from engine.match.replay import check_stream, replay
    from engine.tools.script import result_of
    from projections.timeline import settlement_lines, timeline, timeline_lines

    if not events:
        return {"match_id": match_id, "events": [], "event_count": 0, "phase": None,
                "problems": [f"no such match: {match_id!r}"], "notes": [], "result": {"winner": None},
                "steps": [], "settlement_lines": [], "lines": [], "missing": True}
    problems = check_stream(events)
    t = timeline(events)
    base = {"match_id": match_id, "events": [e.model_dump(mode="json") for e in events],
            "event_count": len(events), "steps": t["steps"], "lines": timeline_lines(t)}
    try:
        state = replay(events, match_id=match_id)
    except Exception:  # apply refused an event: check_stream reported where
        return {**base, "phase": None, "problems": problems, "notes": [], "result": {"winner": None},
                "settlement_lines": []}
    try:
        result = result_of(events, state)
    except Exception as exc:  # a settlement bug must not hide the replay
        result = {"winner": None, "error": repr(exc)}
    if "error" in result:
        problems.append(f"settlement failed: {result['error']}")
    if state.phase == "finished" and state.finished is not None:
        if result.get("winner") != state.finished.winner:
            problems.append(f"settlement winner {result.get('winner')!r} != replayed winner {state.finished.winner!r}")
        scores = result.get("scores") or {}
        if state.finished.reason == "out" and scores and sum(scores.values()) != 0:
            problems.append(f"scores of a normal finish are not zero-sum: {scores}")
    notes: list[str] = []
    if (ledger is not None or stored is not None) and state.phase == "finished" and "error" not in result:
        if stored is None:
            stored = ledger.settlement(match_id)
        parked = None
        if stored is None and ledger is not None:
            parked = (ledger.parked().get(match_id) or {}).get("reason")
        found, note = compare_stored(result, stored, required=require_settlement, parked=parked)
        problems += found
        notes += [note] if note else []
    lines = settlement_lines(result) if result.get("winner") is not None and "error" not in result else []
    return {**base, "phase": state.phase, "abandoned": state.abandoned, "problems": problems, "notes": notes,
            "result": result, "settlement_lines": lines}


def ledger_problems(store: Any, ledger: Any, reports: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ledger cross-checked against the log (:func:`projections.audit.audit_ledger`):
    each mismatch becomes a problem of its match's report; a match the store does not hold
    gets a report of its own (returned), so ``--all`` names every match the ledger
    disagrees on."""
    from projections.audit import audit_ledger

    by_id = {r["match_id"]: r for r in reports}
    extra: dict[str, dict[str, Any]] = {}
    for m in audit_ledger(store, ledger, compare=False):  # report() compares the settlements
        r = by_id.get(m.match_id) or extra.get(m.match_id)
        if r is None:
            r = extra[m.match_id] = {"match_id": m.match_id, "events": [], "event_count": 0, "phase": None,
                                     "problems": [], "notes": [], "result": {"winner": None}, "steps": [],
                                     "settlement_lines": [], "lines": []}
        text = f"ledger: {m.problem}"
        if text not in r["problems"]:
            r["problems"].append(text)
    return list(extra.values())


def check_line(phase: str | None) -> str:
    """What an ``ok`` check covered, by the match's final phase: only a finished match has a
    settlement to check; an abandoned or an undealt one is never called "settlement ok"."""
    if phase == "finished":
        return "check: ok (seq, match id, 108 cards, rules of every play, settlement)"
    if phase == "abandoned":
        return "check: ok (seq, match id; abandoned before the deal: no cards, no settlement)"
    if phase == "playing":
        return "check: ok (seq, match id, 108 cards, rules of every play so far; not finished: no settlement yet)"
    return "check: ok (seq, match id; not dealt yet: no cards, no settlement)"


def result_line(r: dict[str, Any]) -> str:
    """The result line of a report: an abandoned match says so (it has no winner, no scores)."""
    from engine.tools.script import format_result

    if r.get("phase") == "abandoned":
        return f"result: abandoned before the deal ({r.get('abandoned')}): nothing to settle, no ledger entry"
    return format_result(r["result"])


def _lobby_source(args: argparse.Namespace, kind: str) -> str | None:
    """The Redis URL a ``--table`` or ``--series`` replay reads (None: its archive only)."""
    from shuangkou.cli import CliError

    if args.match_id or args.events or args.all or (kind == "series" and args.table):
        raise CliError(f"--{kind} ID takes no MATCH_ID, --events or --all" + (", --table" if kind == "series" else ""))
    url = args.redis or os.environ.get("SK_REDIS_URL") or None
    if not url and not args.archive:
        raise CliError(f"give --redis URL (or set SK_REDIS_URL), or --archive DIR: a {kind} is read from the store "
                       f"or from where shuangkou archive wrote it")
    return url


def _archived(args: argparse.Namespace, kind: str, ident: str) -> tuple[list[Any], Callable[[str], list[Any]]]:
    """A table's or series' events from ``--archive`` (none: ``[]``), and the events of one of
    its matches archived there (each read from its own file, :func:`archive_file_name`)."""
    from pathlib import Path

    from engine.tools.archive import archive_file_name, load_archived, read_lobby_archive
    from shuangkou.cli import CliError

    if not args.archive:
        return [], lambda _mid: []
    try:
        events = read_lobby_archive(args.archive, kind, ident) or []
    except (OSError, ValueError) as exc:
        raise CliError(f"cannot read the archive {args.archive}: {exc}") from None
    root = Path(args.archive) if Path(args.archive).is_dir() else Path(args.archive).parent
    return events, lambda mid: list(load_archived(mid, str(root / archive_file_name(mid))).events)


def _missing(args: argparse.Namespace, kind: str, ident: str) -> Exception:
    from shuangkou.cli import NotFound

    where = f" (not in the store, not in {args.archive})" if args.archive else \
        f" (archived? shuangkou replay --{kind} {ident} --archive DIR)"
    return NotFound(f"no such {kind}: {ident!r}{where}")


def players_line(client: Any, event_lists: Iterable[list[Any]]) -> str | None:
    """``players: u-1a2b3c (小明) · bob``: the display names of the players the events name,
    where a name is not the id itself (a gateway derives ``u-…`` from a name it cannot use as an
    id), so an operator reads the lines below by name; None without a store or such a name."""
    from shuangkou.cli.matches import _who, display_names

    if client is None:
        return None
    named = ("player", "owner")  # a seat's, a queue's, a series' owner (never ``by``: a move's source)
    players = sorted({p for evs in event_lists for e in evs
                      for p in [getattr(e, k, None) for k in named] + list(getattr(e, "players", None) or ())
                      if isinstance(p, str) and p})
    try:
        names = display_names(client, set(players))
    except Exception:  # noqa: BLE001 - the names are a courtesy: the replay stands without them
        return None
    if not any(n != p for p, n in names.items()):
        return None
    return "players: " + " · ".join(_who(p, names) for p in players)


def run_table(args: argparse.Namespace) -> int:
    """``replay --table ID``: the table's life (engine/tools/table_life.py), from the store or
    from ``--archive DIR`` (its ``table-`` file and its matches'); exit 0 when its stream is
    sound, 1 for an unknown table or a problem in its stream."""
    from shuangkou.cli import CliError

    url = _lobby_source(args, "table")
    from engine.lobby.events import queue_aggregate, table_aggregate
    from engine.match.replay import replay as replay_match
    from engine.store.lobby_store import RedisLobbyStore
    from engine.tools.table_life import format_table_life, table_life
    from shuangkou.cli.export import read_only_store

    events: list[Any] = []
    queue: list[Any] = []
    match_events: dict[str, list[Any]] = {}
    lobby = None
    if url:
        store = read_only_store(url)  # the read-only user is enough
        try:
            lobby = RedisLobbyStore(store.client, buckets=store.buckets)
            events = lobby.load(table_aggregate(args.table))
            for n in range(1, len(events) + 1):  # a table has at most one match per event
                mid = f"{args.table}-{n}"
                if not (m_events := store.load(mid)):
                    break
                match_events[mid] = m_events
        except Exception as exc:
            raise CliError(f"cannot load from {url}: {exc}") from None
    archived, archived_match = _archived(args, "table", args.table)
    events = events or archived
    for n in range(1, len(events) + 1):
        mid = f"{args.table}-{n}"
        if mid not in match_events and (m_events := archived_match(mid)):
            match_events[mid] = m_events
    room = getattr(events[0], "room", None) if events else None
    if lobby is not None and room:
        try:
            queue = lobby.load(queue_aggregate(room))
        except Exception as exc:
            raise CliError(f"cannot load from {url}: {exc}") from None
    if room and args.archive:  # the queue's oldest events, archived (shuangkou archive)
        from pathlib import Path

        from engine.tools.archive import read_queue_archive

        root = Path(args.archive) if Path(args.archive).is_dir() else Path(args.archive).parent
        try:
            older = read_queue_archive(root, room)
        except (OSError, ValueError) as exc:
            raise CliError(f"cannot read the archive {args.archive}: {exc}") from None
        queue = [e for e in older if not queue or e.seq < queue[0].seq] + list(queue)
    if queue and [e.seq for e in queue] != list(range(1, len(queue) + 1)):  # archived, and not all given
        i = next(i for i, e in enumerate(queue) if e.seq != i + 1)
        print(f"note: the queue of room {room} lacks its events {i + 1}-{queue[i].seq - 1}, archived: the "
              f"table's queue part may be short" + ("" if args.archive else "; add --archive DIR"), file=sys.stderr)
    matches = {mid: replay_match(evs, match_id=mid) for mid, evs in match_events.items()}
    report = table_life(args.table, events, queue, matches)
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
        return 1 if report["problems"] else 0
    if not events:
        raise _missing(args, "table", args.table)
    if (who := players_line(store.client if url else None, [events, *match_events.values()])) is not None:
        print(who)
    for line in format_table_life(report):
        print(line)
    for p in report["problems"]:
        print(f"  problem: {p}")
    return 1 if report["problems"] else 0


def run_series(args: argparse.Namespace) -> int:
    """``replay --series ID``: the series hand by hand with its standings
    (engine/tools/series_life.py); exit 0 when its stream is sound, 1 for an unknown series or
    a problem in its stream."""
    from shuangkou.cli import CliError

    url = _lobby_source(args, "series")
    from engine.lobby.series_events import series_aggregate
    from engine.match.replay import replay as replay_match
    from engine.store.lobby_store import RedisLobbyStore
    from engine.tools.series_life import format_series_life, series_life
    from shuangkou.cli.export import read_only_store

    events: list[Any] = []
    match_events: dict[str, list[Any]] = {}

    def hands(evs: list[Any]) -> list[str]:
        return [e.match for e in evs if type(e).__name__ == "HandStarted" and getattr(e, "match", None)]

    if url:
        store = read_only_store(url)  # the read-only user is enough
        try:
            events = RedisLobbyStore(store.client, buckets=store.buckets).load(series_aggregate(args.series))
            for mid in hands(events):
                if mid not in match_events and (m_events := store.load(mid)):
                    match_events[mid] = m_events
        except Exception as exc:
            raise CliError(f"cannot load from {url}: {exc}") from None
    archived, archived_match = _archived(args, "series", args.series)
    events = events or archived
    for mid in hands(events):
        if mid not in match_events and (m_events := archived_match(mid)):
            match_events[mid] = m_events
    matches = {mid: replay_match(evs, match_id=mid) for mid, evs in match_events.items()}
    report = series_life(args.series, events, matches)
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
        return 1 if report["problems"] else 0
    if not events:
        raise _missing(args, "series", args.series)
    if (who := players_line(store.client if url else None, [events, *match_events.values()])) is not None:
        print(who)
    for line in format_series_life(report):
        print(line)
    for p in report["problems"]:
        print(f"  problem: {p}")
    return 1 if report["problems"] else 0


def run(args: argparse.Namespace) -> int:
    from shuangkou.cli import CliError

    if getattr(args, "series", None):
        return run_series(args)
    if getattr(args, "table", None):
        return run_table(args)
    if args.redis and args.events:
        raise CliError("give --redis URL or --events FILE, not both")
    if not args.events and not args.archive:
        args.redis = args.redis or os.environ.get("SK_REDIS_URL") or None  # as serve does
    if not args.redis and not args.events and not args.archive:
        raise CliError("give --redis URL (or set SK_REDIS_URL) or --events FILE "
                       "(there is no persistent embedded store)")
    if not args.all and not args.match_id and not args.events:
        raise CliError("name a MATCH_ID or use --all")
    archived: dict[str, Any] = {}
    matches: dict[str, list[Any]] = {}
    ledger = None
    if args.events:
        parsed = _load_file(args.events)
        matches = parsed.by_match
        archived = {mid: forms for mid in matches if (forms := parsed.stored_forms(mid))}
        if args.match_id and not args.all:
            if args.match_id not in matches:
                raise CliError(f"no such match: {args.events} holds no events of match {args.match_id!r}")
            matches = {args.match_id: matches[args.match_id]}
    elif args.redis:
        try:
            from engine.store.redis_store import RedisEventStore
        except ImportError as exc:
            raise CliError(f"the Redis store is not available: {exc}") from None
        try:
            from projections.ledger import RedisLedger

            store = RedisEventStore.from_url(args.redis)
            ledger = RedisLedger(store.client)
            ids = sorted(store.match_ids()) if args.all else [args.match_id]
            for mid in ids:
                matches[mid] = store.load(mid)
        except CliError:
            raise
        except Exception as exc:
            raise CliError(f"cannot load from {args.redis}: {exc}") from None
        if not args.all and not args.archive and not matches[args.match_id]:
            from shuangkou.cli import NotFound
            from shuangkou.cli.export import archived_notice

            notice = archived_notice(store.client, args.match_id, "`shuangkou replay --events {file}`")
            if notice is not None:  # not in the store: where it went (an unknown one is reported below)
                gone, message = notice
                if args.json:
                    print(json.dumps({"match_id": args.match_id, "archived": True, "archive_file": gone.file,
                                      "archived_at_ms": gone.archived_at_ms, "problems": [message], "notes": []},
                                     ensure_ascii=False))
                    return 1
                raise NotFound(message)
    if args.archive:
        from shuangkou.cli.export import archive_argument

        events_of, archived = archive_argument(args.archive)
        if args.match_id and not args.all:
            events_of = {m: e for m, e in events_of.items() if m == args.match_id}
            matches = {m: e for m, e in matches.items() if e}  # a match deleted from Redis: read from the archive
        for mid, evs in events_of.items():
            matches[mid] = evs
        if not matches:
            raise CliError(f"no such match: {args.match_id!r} (not in Redis, not in {args.archive})")
    try:
        reports = [report(mid, evs, None if mid in archived else ledger, require_settlement=bool(args.all),
                          stored=archived.get(mid)) for mid, evs in matches.items()]
        if args.all and ledger is not None:
            reports += ledger_problems(store, ledger, reports)
    except Exception as exc:  # the ledger's Redis went away mid-check
        raise CliError(f"cannot read the stored settlements from {args.redis}: {exc}") from None
    bad = any(r["problems"] for r in reports)
    if args.json:
        out = [{k: v for k, v in r.items() if k not in ("lines", "missing")} for r in reports]
        print(json.dumps(out if args.all else out[0], ensure_ascii=False))
        return 1 if bad else 0
    from projections.timeline import settlement_heading

    if args.all and not reports:  # say so: an empty audit is not a silent one
        print("shuangkou replay: no matches to check: the store holds none", file=sys.stderr)
    for r in reports:
        if args.all:
            status = "ok" if not r["problems"] else f"{len(r['problems'])} problem(s)"
            print(f"{r['match_id']}: {r['event_count']} events, {r['phase']}, {status}")
        elif r.get("missing"):
            print(f"shuangkou replay: no such match: {r['match_id']!r}", file=sys.stderr)
            continue  # said once: its one problem is that line
        else:
            client = store.client if args.redis else None
            if (who := players_line(client, [matches.get(r["match_id"]) or []])) is not None:
                print(who)
            for line in r["lines"]:
                print(line)
            print(result_line(r))
            if r["settlement_lines"]:
                print(settlement_heading(r["result"]))
                for line in r["settlement_lines"]:
                    print(f"  {line}")
        for p in r["problems"]:
            print(f"  problem: {p}")
        if not args.all:
            for note in r["notes"]:
                print(note)
        if not args.all and not r["problems"]:
            print(check_line(r["phase"]))
    return 1 if bad else 0
