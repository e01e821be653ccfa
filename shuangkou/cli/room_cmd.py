"""``shuangkou room``: registered room configs (CreateMatch names one: ``"room": NAME``).

* ``room add FILE [--name NAME] [--replace]``: validate a TOML config and register it under
  NAME (default: the config's ``name``); sent on the operator channel ``sk:ops`` and
  applied by the engine (``shuangkou serve``).
* ``room list``: the registered names (serve registers ``points`` and ``wealth`` at start).
* ``room show NAME``: the registered config as JSON (an unknown name: exit 1, as a thing not found).
"""

from __future__ import annotations

import argparse
import json
import sys

from shuangkou.cli.ops_client import add_redis_arguments, connect, send_and_wait


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="room_command", required=True, metavar="ACTION")
    p = sub.add_parser("add", help="validate a room config file and register it")
    p.add_argument("file", help="a TOML room config (like config/points.toml)")
    p.add_argument("--name", default=None, help="the room's name (default: the config's name)")
    p.add_argument("--replace", action="store_true", help="replace a room registered under that name")
    p.add_argument("--operator", default=None, help="the operator's id (default: the login name)")
    add_redis_arguments(p)
    p = sub.add_parser("list", help="the registered rooms")
    p.add_argument("--json", action="store_true", help="print JSON")
    add_redis_arguments(p, wait=False)
    p = sub.add_parser("show", help="one registered room's config as JSON")
    p.add_argument("name")
    add_redis_arguments(p, wait=False)


def run(args: argparse.Namespace) -> int:
    from shuangkou.cli import CliError, NotFound
    from engine.service.rooms import RedisRooms

    if args.room_command == "add":
        import getpass
        import uuid

        from engine.config import ConfigError, load_config
        from engine.match.commands import AddRoom
        from engine.service.rooms import RoomError, named

        try:
            cfg = load_config(args.file)
            name = args.name or cfg.name
            cfg = named(name, cfg)  # every check the engine makes, before anything is sent
        except (ConfigError, RoomError) as exc:
            raise CliError(str(exc)) from None
        client = connect(args)
        cmd = AddRoom(command_id=uuid.uuid4().hex, name=name, config=cfg.to_record(), replace=args.replace,
                      operator=args.operator or getpass.getuser())
        msg = send_and_wait(client, cmd, args.timeout)
        if msg.kind in ("accepted", "duplicate"):
            print(f"room {name!r} registered ({cfg.mode})")
            return 0
        print(f"refused ({msg.code}): {msg.reason}", file=sys.stderr)
        return 1
    rooms = RedisRooms(connect(args))
    if args.room_command == "list":
        names = rooms.names()
        if args.json:
            print(json.dumps([{"name": n, "mode": rooms.get(n).mode} for n in names]))  # type: ignore[union-attr]
        else:
            for n in names:
                print(f"{n}\t{rooms.get(n).mode}")  # type: ignore[union-attr]
        return 0
    found = rooms.get(args.name)
    if found is None:
        raise NotFound(f"no room named {args.name!r} is registered (shuangkou room list)")
    print(json.dumps(found.to_record(), indent=2, ensure_ascii=False))
    return 0
