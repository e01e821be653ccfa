"""``shuangkou season``: seasons of ranked play (docs/RANKED.md).

* ``season start NAME [--soft-reset F]``: a new season from now (the running one ends now).
  Each player starts it from their last season's skill pulled ``F`` of the way back to a new
  player's (0: carried over, 1: a fresh start; default 1).
* ``season end``: the running season ends now (its ladders stay queryable).
* ``season list [--json]``: every season, oldest first.
"""

from __future__ import annotations

import argparse
import json
import os
import time


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="season_command", required=True, metavar="ACTION")
    p = sub.add_parser("start", help="start a season now (ending the running one)")
    p.add_argument("name")
    p.add_argument("--soft-reset", type=float, default=1.0, metavar="F",
                   help="pull each player's start F of the way back to a new player's (0..1, default 1)")
    _common(p)
    p = sub.add_parser("end", help="end the running season now")
    _common(p)
    p = sub.add_parser("list", help="every season, oldest first")
    _common(p)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print JSON")
    p.add_argument("--redis", metavar="URL", default=os.environ.get("SK_REDIS_URL"),
                   help="the engine's Redis (default $SK_REDIS_URL)")


def run(args: argparse.Namespace) -> int:
    from shuangkou.cli import CliError, NotFound
    from shuangkou.cli.serve import connect_redis
    from projections.ladders import RedisRatingStore, SeasonError

    if not args.redis:
        raise CliError("--redis URL is required (or set SK_REDIS_URL)")
    store = RedisRatingStore(connect_redis(args.redis, "--redis"))
    now = int(time.time() * 1000)
    try:
        if args.season_command == "start":
            seasons = [store.start_season(args.name, now, args.soft_reset)]
        elif args.season_command == "end":
            seasons = [store.end_season(now)]
        else:
            seasons = store.seasons()
    except SeasonError as exc:
        if exc.code == "none_running":
            raise NotFound(str(exc)) from None
        raise CliError(str(exc)) from None
    if args.json:
        out = [s.to_json() for s in seasons]
        print(json.dumps(out if args.season_command == "list" else out[0]))
    else:
        for s in seasons:
            end = "running" if s.end_ms is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(s.end_ms / 1000))
            start = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(s.start_ms / 1000))
            print(f"{s.name}: {start} UTC → {end}{' UTC' if s.end_ms is not None else ''}, soft reset {s.soft_reset:g}")
    return 0
