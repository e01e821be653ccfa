"""``shuangkou ratings``: the ladders of ranked rooms (docs/RANKED.md).

* ``ratings rebuild --season S [--check] [--archive DIR] [--json]``: replay every stored
  match's events (and with ``--archive`` the archived ones') into fresh ladders of season S
  (:func:`projections.ladders.rebuild`), compare each room's with the live projection's, and
  store the rebuilt ones (``--check``: compare only, write nothing) -- nothing at all when a
  live ladder rated a match whose events were not read again (archived); archived matches not
  read are counted (``archived_not_read``: a ladder that is gone cannot say what it rated).
  Exit 0 when every room's ladder equals the live one, 1 when one differed (it is written) or
  lacked a match it rated (nothing is).
* ``ratings show ROOM [--season S] [--limit N] [--json]``: the leaderboard (exit 1 for a room
  that does not exist or is not ranked and has no ladder in any season).
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="ratings_command", required=True, metavar="ACTION")
    p = sub.add_parser("rebuild", help="replay the events into the season's ladders and compare them with the live ones")
    p.add_argument("--season", required=True, help="the season's name (shuangkou season list)")
    p.add_argument("--check", action="store_true", help="compare only: write nothing")
    p.add_argument("--archive", metavar="DIR", default=None,
                   help="also read the matches archived to DIR (shuangkou archive): without them a ladder that "
                        "rated an archived match is not rebuilt")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    _redis(p)
    p = sub.add_parser("show", help="a room's leaderboard")
    p.add_argument("room")
    p.add_argument("--season", default=None, help="the season (default: the running one, else the last)")
    p.add_argument("--limit", type=int, default=20, help="entries (default 20)")
    p.add_argument("--json", action="store_true", help="print JSON")
    _redis(p)


def _redis(p: argparse.ArgumentParser) -> None:
    p.add_argument("--redis", metavar="URL", default=os.environ.get("SK_REDIS_URL"),
                   help="the event store's Redis (default $SK_REDIS_URL)")


def run(args: argparse.Namespace) -> int:
    from shuangkou.cli import CliError, NotFound
    from shuangkou.cli.serve import connect_redis
    from projections.ladders import RedisRatingStore, SeasonError, rebuild

    if not args.redis:
        raise CliError("--redis URL is required (or set SK_REDIS_URL)")
    client = connect_redis(args.redis, "--redis")
    ratings = RedisRatingStore(client)
    if args.ratings_command == "show":
        season = ratings.season(args.season)
        if season is None:
            raise NotFound(f"no season {args.season!r}" if args.season else "no season yet (shuangkou season start NAME)")
        board = ratings.leaderboard(args.room, season.name, args.limit)
        if not board["entries"] and args.room not in {room for room, _season in ratings.ladders()}:
            from engine.service.rooms import RedisRooms  # no ladder in any season: say why

            cfg = RedisRooms(client).get(args.room)
            if cfg is None:
                raise NotFound(f"no room {args.room!r} (shuangkou room list names them)")
            if not cfg.ranked:
                raise NotFound(f"room {args.room!r} is not ranked: it has no leaderboard")
        if args.json:
            print(json.dumps(board, ensure_ascii=False))
        else:
            print(f"{args.room} · season {season.name}")
            for e in board["entries"]:
                print(f"{e['rank']:>5}  {e['rating']:>6}  {e['tier']:<9} {e['name'] or '-'} ({e['player']})")
        return 0
    from engine.store.redis_store import RedisEventStore

    store = RedisEventStore(client)
    store.check_layout()
    archived = None
    if args.archive:
        from shuangkou.cli.export import archive_argument

        archived = archive_argument(args.archive)[0]
    try:
        report = rebuild(store, ratings, args.season, write=not args.check, archived=archived)
    except SeasonError as exc:
        raise NotFound(str(exc)) from None
    from engine.tools.archive import archived_markers

    # a ladder that is gone cannot say which archived matches it rated: name those not read
    unread = len(set(archived_markers(client)) - set(archived or {}))
    out = {**report.to_json(), "archived_not_read": unread}
    if unread and not report.missing:
        print(f"{unread} archived match(es) were not read (--archive DIR reads them): a ladder that rated "
              "them and is gone was rebuilt without them", file=sys.stderr)
    if args.json:
        print(json.dumps(out, ensure_ascii=False))
    else:
        for room, r in out["rooms"].items():
            print(f"{room}: {r['players']} players, {r['matches']} rated matches: "
                  f"{'equals the live ladder' if r['same'] else 'DIFFERS from the live ladder'}")
            if r["missing"]:
                print(f"  {r['missing']} rated match(es) of the live ladder have no events here "
                      f"(archived? --archive DIR reads them)")
        if not out["rooms"]:
            print(f"season {args.season}: no rated matches")
    if report.missing and not args.check:
        print(f"nothing written: {sum(len(v) for v in report.missing.values())} rated match(es) were not "
              "read again", file=sys.stderr)
    return 0 if out["same"] and not report.missing else 1
