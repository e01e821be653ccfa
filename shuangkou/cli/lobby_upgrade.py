"""``shuangkou lobby-upgrade --redis URL [--force] [--dry-run] [--json]``: the cut-over from the
lobby of the builds before issue 34 (gateway/lobby.lua, every key under ``sk:{lobby}:``) to the
lobby's aggregates (docs/OPERATIONS.md "The lobby's keys").

Run it at a quiet moment, once the old gateways are stopped and the new serve replicas run:

* every player waiting in an old room queue is put in the room's new queue: a ``Join`` on the
  room's lobby channel, command id ``upgrade:<player>`` (a second run is the engine's duplicate);
* the display names and the players who hide theirs (``names``, ``hidden``) are copied to
  their own keys (``sk:{names}:display``, ``sk:{names}:hidden``; a name written meanwhile wins);
* every old key is deleted.

An old table that is not closed has a match its players may still be playing, and the new lobby
does not know it: the command then changes nothing and exits 1, naming those tables (wait for
them to end, or ``--force`` to drop them: their matches go on in the engine and end by their
clocks).  ``--dry-run`` reports what it would do.  Exit 0 when done (or nothing to do).
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

OLD = "sk:{lobby}:"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--redis", metavar="URL", default=os.environ.get("SK_REDIS_URL"),
                        help="the deployment's Redis (default $SK_REDIS_URL)")
    parser.add_argument("--force", action="store_true", help="go on although old tables are open (they are dropped)")
    parser.add_argument("--dry-run", action="store_true", help="report, change nothing")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def _s(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else ("" if v is None else str(v))


def survey(client: Any) -> dict[str, Any]:
    """What the old lobby holds: its keys, the waiting players by room (oldest first), the
    tables that are not closed."""
    old = sorted(_s(k) for k in client.scan_iter(match=OLD.replace("{", "[{]").replace("}", "[}]") + "*",
                                                  count=1000))
    waiting: dict[str, list[str]] = {}
    open_tables: list[dict[str, str]] = []
    for key in old:
        rest = key[len(OLD):]
        if rest.startswith("queue:"):
            room = rest[len("queue:"):]
            seen: list[str] = []
            for p in (_s(x) for x in client.lrange(key, 0, -1)):
                place = {_s(k): _s(v) for k, v in client.hgetall(f"{OLD}player:{p}").items()}
                if place.get("state") == "queued" and place.get("room") == room and p not in seen:
                    seen.append(p)
            if seen:
                waiting[room] = seen
        elif rest.startswith("table:"):
            t = {_s(k): _s(v) for k, v in client.hgetall(key).items()}
            if t.get("status") and t.get("status") != "closed":
                open_tables.append({"table": rest[len("table:"):], "room": t.get("room", ""),
                                    "match": t.get("match", ""), "status": t.get("status", ""),
                                    "players": ",".join(x for x in (t.get("a"), t.get("b")) if x)})
    return {"keys": old, "waiting": waiting, "open_tables": open_tables}


def upgrade(client: Any, force: bool = False, dry_run: bool = False) -> dict[str, Any]:
    """Requeue the waiting players and delete the old keys (the module docstring); the report
    says what was (or, with ``dry_run`` or open tables without ``force``, would be) done."""
    from engine.store import keys

    found = survey(client)
    requeued = sum(len(v) for v in found["waiting"].values())
    report = {"old_keys": len(found["keys"]), "requeued": requeued, "waiting": found["waiting"],
              "open_tables": found["open_tables"], "done": False}
    if dry_run or (found["open_tables"] and not force):
        return report
    for room, players in found["waiting"].items():
        channel = keys.lobby_inbox_key(keys.room_bucket(room))
        for p in players:
            if keys.player_id_problem(p) is not None:
                continue
            command = {"type": "Join", "command_id": f"upgrade:{p}", "room": room, "player": p}
            client.xadd(channel, {"c": json.dumps(command)})
    names = {_s(k): _s(v) for k, v in client.hgetall(f"{OLD}names").items()}
    for player, name in names.items():
        client.hsetnx(keys.NAMES_KEY, player, name)
    hidden = [_s(x) for x in client.smembers(f"{OLD}hidden")]
    if hidden:
        client.sadd(keys.HIDDEN_NAMES_KEY, *hidden)
    report["names"], report["hidden"] = len(names), len(hidden)
    for key in found["keys"]:
        client.delete(key)
    report["done"] = True
    return report


def run(args: argparse.Namespace) -> int:
    from shuangkou.cli import CliError
    from shuangkou.cli.serve import connect_redis

    if not args.redis:
        raise CliError("--redis URL is required (or set SK_REDIS_URL)")
    client = connect_redis(args.redis, "--redis")
    report = upgrade(client, force=args.force, dry_run=args.dry_run)
    if args.json:
        print(json.dumps(report, sort_keys=True))
    else:
        verb = "requeued" if report["done"] else "would requeue"
        print(f"{report['old_keys']} old lobby key(s); {verb} {report['requeued']} waiting player(s); "
              f"{len(report['open_tables'])} open table(s)" + ("; old keys deleted" if report["done"] else ""))
        for t in report["open_tables"]:
            print(f"  open: table {t['table']} room {t['room']} match {t['match']} ({t['status']}) {t['players']}")
    if report["open_tables"] and not report["done"] and not args.dry_run:
        print("old tables are open: wait for their matches to end, or --force to drop them")
        return 1
    return 0
