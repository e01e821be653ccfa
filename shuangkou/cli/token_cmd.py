"""``shuangkou token PLAYER --secret-file F [--role spectator] [--ttl 3600] [--room NAME] [--name 小明]``:
mint a gateway session token (JWT, HS256) for tests and development; prints it."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("player", help="the player id (the token's sub)")
    parser.add_argument("--secret-file", metavar="F", required=True, help="the signing secret (>= 32 bytes)")
    parser.add_argument("--role", default="player", choices=("player", "spectator", "operator"))
    parser.add_argument("--ttl", type=int, default=3600, help="seconds until it expires (default 3600)")
    parser.add_argument("--room", default=None, help="restrict the token to one room")
    parser.add_argument("--name", default=None, help="the display name shown at the table (1–24 characters, "
                        "any script; control and format characters are dropped)")


def run(args: argparse.Namespace) -> int:
    from shuangkou.cli import CliError
    from gateway.tokens import load_secret, mint

    try:
        secret = load_secret(args.secret_file)
        print(mint(secret, args.player, role=args.role, ttl_seconds=args.ttl, room=args.room, name=args.name))
    except OSError as exc:
        raise CliError(f"cannot read --secret-file {args.secret_file}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise CliError(str(exc)) from None
    return 0
