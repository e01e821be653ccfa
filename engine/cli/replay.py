"""``shuangkou replay MATCH_ID --redis URL | --events FILE [--json] [--all]``.

Rebuild a match from its stored events, print it play by play in card
notation, check the stream (:func:`engine.match.replay.check_stream`: seq, match
id, 108-card accounting, the rules of each play) and settle it
(:func:`projections.settlement.settle`).  Exit 0 when sound, 1 when a problem
is found, 2 on bad input.  There is no persistent embedded store, so the
events come from Redis (``--redis``) or from a JSON file as printed by
``shuangkou run-script --json`` (``--events``).  ``--all`` checks every match
in the store (one summary line each, or a JSON list).  ``--redis`` defaults to
``$SK_REDIS_URL``, as for ``shuangkou serve``.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("match_id", nargs="?", help="the match to replay (optional with --events/--all)")
    parser.add_argument("--redis", metavar="URL", default=None,
                        help="Redis URL of the event store (default $SK_REDIS_URL)")
    parser.add_argument("--events", metavar="FILE", help='a JSON file {"events": [...]} as printed by run-script --json')
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--all", action="store_true", help="check every match in the store")


def _load_file(path: str) -> dict[str, list[Any]]:
    from engine.cli import CliError
    from engine.match.events import EventDecodeError, event_from_dict

    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, json.JSONDecodeError) as exc:
        raise CliError(f"cannot read events from {path}: {exc}") from None
    raw = data.get("events") if isinstance(data, dict) else data
    if not isinstance(raw, list):
        raise CliError(f"{path}: expected {{\"events\": [...]}} or a list of events")
    if not raw:
        raise CliError(f"{path} holds no events")
    by_match: dict[str, list[Any]] = {}
    for n, item in enumerate(raw):
        if not isinstance(item, dict):
            raise CliError(f"{path}: event {n} is not an object")
        try:
            e = event_from_dict(item)
        except EventDecodeError as exc:
            why = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
            raise CliError(f"{path}: event {n}: {why}") from None
        by_match.setdefault(e.match_id, []).append(e)
    return by_match


COMPARED = ("winner", "kou", "cards_left", "scores", "burned")


def compare_stored(result: dict[str, Any], stored: Any) -> tuple[list[str], str]:
    """Check a recomputed settlement against the projection's stored one.

    Returns (problems, note): a difference in any of ``COMPARED`` is a problem;
    a finished match the projection has not settled yet is only a note.
    """
    if stored is None:
        return [], "stored settlement: none yet (the projection has not settled this match)"
    mine, theirs = result, stored.to_json()
    diffs = [f"{k}: replayed {mine.get(k)!r} != stored {theirs.get(k)!r}"
             for k in COMPARED if mine.get(k) != theirs.get(k)]
    if diffs:
        return ["stored settlement differs from the replay: " + "; ".join(diffs)], ""
    return [], "stored settlement: matches the replay"


def report(match_id: str, events: list[Any], ledger: Any = None) -> dict[str, Any]:
    """Problems, final phase and settlement of one match's events (and, given the
    projection's ledger, whether its stored settlement agrees)."""
    from engine.match.replay import check_stream, replay
    from engine.tools.script import narrate, result_of

    problems = check_stream(events) if events else [f"no events for match {match_id!r}"]
    try:
        state = replay(events, match_id=match_id)
    except Exception:  # apply refused an event: check_stream reported where
        return {"match_id": match_id, "events": len(events), "phase": None, "problems": problems,
                "notes": [], "result": {"winner": None}, "lines": narrate(events)}
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
    if ledger is not None and state.phase == "finished" and "error" not in result:
        found, note = compare_stored(result, ledger.settlement(match_id))
        problems += found
        notes += [note] if note else []
    return {"match_id": match_id, "events": len(events), "phase": state.phase,
            "problems": problems, "notes": notes, "result": result, "lines": narrate(events)}


def run(args: argparse.Namespace) -> int:
    from engine.cli import CliError

    if args.redis and args.events:
        raise CliError("give --redis URL or --events FILE, not both")
    if not args.events:
        args.redis = args.redis or os.environ.get("SK_REDIS_URL") or None  # as serve does
    if not args.redis and not args.events:
        raise CliError("give --redis URL (or set SK_REDIS_URL) or --events FILE "
                       "(there is no persistent embedded store)")
    if not args.all and not args.match_id and not args.events:
        raise CliError("name a MATCH_ID or use --all")
    matches: dict[str, list[Any]] = {}
    ledger = None
    if args.events:
        matches = _load_file(args.events)
        if args.match_id and not args.all:
            if args.match_id not in matches:
                raise CliError(f"{args.events} holds no events of match {args.match_id!r}")
            matches = {args.match_id: matches[args.match_id]}
    else:
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
    try:
        reports = [report(mid, evs, ledger) for mid, evs in matches.items()]
    except Exception as exc:  # the ledger's Redis went away mid-check
        raise CliError(f"cannot read the stored settlements from {args.redis}: {exc}") from None
    bad = any(r["problems"] for r in reports)
    if args.json:
        out = [{k: v for k, v in r.items() if k != "lines"} for r in reports]
        print(json.dumps(out if args.all else out[0], ensure_ascii=False))
        return 1 if bad else 0
    from engine.tools.script import format_result

    for r in reports:
        if args.all:
            status = "ok" if not r["problems"] else f"{len(r['problems'])} problem(s)"
            print(f"{r['match_id']}: {r['events']} events, {r['phase']}, {status}")
        else:
            for line in r["lines"]:
                print(line)
            print(format_result(r["result"]))
        for p in r["problems"]:
            print(f"  problem: {p}")
        if not args.all:
            for note in r["notes"]:
                print(note)
        if not args.all and not r["problems"]:
            print("check: ok (seq, match id, 108 cards, rules of every play, settlement)")
    return 1 if bad else 0
