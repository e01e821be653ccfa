"""``shuangkou verify-deal MATCH_ID --redis URL | --events FILE [--commitment HEX] [--json]``.

``--redis`` defaults to ``$SK_REDIS_URL`` (as for ``matches``, ``replay``, ``ledger``…).

Recompute a finished match's commitment and deal from its revealed server seed
and the players' client seeds (docs/FAIRNESS.md) and compare them with the
recorded ones: ``SHA-256(server_seed ‖ match_id)`` must be the commitment
MatchCreated recorded before any card was dealt, and both hands, the set-aside
cards, the lead card and the first seat must be the fair deal.

Exit 0 when they match (or the match predates fair deals: that is said), 1 when
anything differs (a tampered record) or the match is not there (unknown: "no such
match"; archived: where it went, and the ``--events FILE`` to verify it from), 2 on
bad input or a match that cannot be checked yet (not dealt, not finished).  ``--events`` reads the same files as
``shuangkou replay --events``; ``--commitment`` pins the commitment the player
saw during play.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("match_id", nargs="?", help="the match to verify (optional with --events of one match)")
    parser.add_argument("--redis", metavar="URL", default=None,
                        help="Redis URL of the event store (a read-only user is enough; default $SK_REDIS_URL)")
    parser.add_argument("--events", metavar="FILE", help="an export of the match's events "
                        "(the files shuangkou replay --events reads)")
    parser.add_argument("--commitment", metavar="HEX", help="the commitment the match showed during play")
    parser.add_argument("--json", action="store_true", help="print the verdict as JSON")


def _events(args: argparse.Namespace) -> tuple[str, list[Any]]:
    from shuangkou.cli import CliError, NotFound

    if args.redis and args.events:
        raise CliError("give --redis URL or --events FILE, not both")
    if not args.events:
        args.redis = args.redis or os.environ.get("SK_REDIS_URL") or None  # as replay does
    if not args.redis and not args.events:
        raise CliError("give --redis URL (or set SK_REDIS_URL) or --events FILE")
    if args.events:
        from shuangkou.cli.replay import _load_file

        matches = _load_file(args.events).by_match
        if args.match_id:
            if args.match_id not in matches:
                raise NotFound(f"no such match: {args.events} holds no events of match {args.match_id!r}")
            return args.match_id, matches[args.match_id]
        if len(matches) != 1:
            raise CliError(f"{args.events} holds {len(matches)} matches: name one")
        [(mid, evs)] = matches.items()
        return mid, evs
    if not args.match_id:
        raise CliError("name the MATCH_ID to verify")
    from shuangkou.cli.export import missing_match, read_only_store

    store = read_only_store(args.redis)  # the read-only user is enough
    try:
        events = store.load(args.match_id)
    except Exception as exc:
        raise CliError(f"cannot load match {args.match_id!r} from {args.redis}: {exc}") from None
    if not events:
        raise missing_match(store.client, args.match_id, "`shuangkou verify-deal --events {file}`")
    return args.match_id, list(events)


def _cards(ids: Any) -> str:
    from engine.rules.cards import format_cards

    return format_cards(list(ids))


def run(args: argparse.Namespace) -> int:
    from engine.match.fairness import verify_match

    mid, events = _events(args)
    verdict = verify_match(events, mid, args.commitment)
    code = 1 if verdict.problems else {"ok": 0, "predates": 0}.get(verdict.status, 2)
    if args.json:
        print(json.dumps(verdict.to_json(), ensure_ascii=False))
        return code
    if verdict.status == "ok":
        assert verdict.client_seeds is not None and verdict.first_cards is not None
        print(f"match {mid}: the deal is fair and verified")
        print(f"  commitment  {verdict.commitment} = SHA-256(server seed ‖ match id)")
        print(f"  server seed {verdict.server_seed} (revealed at the finish)")
        print(f"  client seeds: seat 0 {verdict.client_seeds[0]!r}, seat 1 {verdict.client_seeds[1]!r}")
        print(f"  first cards dealt: seat 0 {_cards(verdict.first_cards[0])} …, "
              f"seat 1 {_cards(verdict.first_cards[1])} …")
        print("  both hands, the 54 set-aside cards and the lead card are the fair deal of these seeds")
    elif verdict.status == "mismatch":
        print(f"match {mid}: VERIFICATION FAILED: the record does not match its commitment and seeds")
        for p in verdict.problems:
            print(f"  problem: {p}")
    else:
        for note in verdict.notes:
            print(f"match {mid}: {note}")
        for p in verdict.problems:
            print(f"  problem: {p}")
    return code
