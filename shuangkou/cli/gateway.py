"""``shuangkou gateway``: the players' WebSocket gateway (the ``gateway`` package).

Serves ``/ws`` (JSON messages, gateway/schemas/), ``/healthz``, ``/metrics`` and the
browser client's routes.  Several gateway processes may share one Redis; SIGTERM
closes every socket with 1001 and a reason, then exits 0.
"""

from __future__ import annotations

import argparse
import os


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--redis", metavar="URL", default=os.environ.get("SK_REDIS_URL"),
                        help="the engine's Redis (default $SK_REDIS_URL)")
    parser.add_argument("--lobby-redis", metavar="URL", default=os.environ.get("SK_LOBBY_REDIS_URL"),
                        help="the lobby's Redis user (lobby keys, sk:ops, ledger reads; default: --redis)")
    parser.add_argument("--port", type=int, default=8080, help="listen port (default 8080; 0: pick a free one)")
    parser.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    parser.add_argument("--secret-file", metavar="F", required=True, help="the token signing secret (>= 32 bytes)")
    parser.add_argument("--room", action="append", default=[], metavar="FILE",
                        help="an extra room config (TOML) offered by the lobby, by its name; repeatable")
    parser.add_argument("--id", default=None, help="this gateway's id (default <hostname>-<pid>)")
    parser.add_argument("--dev", action="store_true", help="development only: the browser page mints tokens by name, for any role "
                             "(operator included): never on a reachable host")
    parser.add_argument("--bots", action="store_true", help="fill an empty seat with a bot (it plays as the trustee would)")
    parser.add_argument("--bot-think", type=float, default=2.5, metavar="SECONDS",
                        help="the longest a bot thinks over a move: each waits a random 40-100%% of it "
                             "(default 2.5: 1-2.5 s; 0 plays at once; at most 10)")
    parser.add_argument("--log-level", default=os.environ.get("SK_LOG_LEVEL", "INFO"))


def run(args: argparse.Namespace) -> int:
    import logging
    import sys

    from shuangkou.cli import CliError
    from shuangkou.cli.serve import connect_redis
    from engine.config import ConfigError

    if not args.redis:
        raise CliError("--redis URL is required (or set SK_REDIS_URL)")
    if not 0 <= args.bot_think <= 10:
        raise CliError(f"--bot-think must be 0..10 seconds, got {args.bot_think:g}")
    if not 0 <= args.port <= 65535:
        raise CliError(f"--port must be 0..65535, got {args.port}")
    from gateway.app import GatewaySettings, default_gateway_id, serve
    from gateway.rooms import RoomBook
    from gateway.tokens import load_secret

    try:
        secret = load_secret(args.secret_file)
    except OSError as exc:
        raise CliError(f"cannot read --secret-file {args.secret_file}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise CliError(str(exc)) from None
    try:
        rooms = RoomBook.load(args.room)
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    connect_redis(args.redis, "--redis").close()
    if args.lobby_redis:
        connect_redis(args.lobby_redis, "--lobby-redis").close()  # a readable error now rather than on the first socket
    logging.basicConfig(level=getattr(logging, str(args.log_level).upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if args.dev:
        logging.getLogger("shuangkou.gateway").warning(
            "--dev: anyone who reaches port %s can mint a token for any name and role, operator included "
            "(POST /api/dev/token); for development on loopback only, never on a reachable host", args.port)
    settings = GatewaySettings(redis_url=args.redis, secret=secret, rooms=rooms,
                               gateway_id=args.id or default_gateway_id(), dev=args.dev, bots=args.bots,
                               bot_think_s=args.bot_think,
                               lobby_redis_url=args.lobby_redis)
    serve(settings, args.host, args.port, log_level=str(args.log_level))
    return 0
