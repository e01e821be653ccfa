"""``shuangkou gateway``: the players' WebSocket gateway (the ``gateway`` package).

Serves ``/ws`` (JSON messages, gateway/schemas/), ``/healthz``, ``/metrics`` and the
browser client's routes.  Several gateway processes may share one Redis; SIGTERM
closes every socket with 1001 and a reason, then exits 0.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gateway.headers import EdgePolicy
    from gateway.limits import Limits

from engine.tools.levels import DEFAULT_LEVEL, LEVELS


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--redis", metavar="URL", default=os.environ.get("SK_REDIS_URL"),
                        help="the engine's Redis (default $SK_REDIS_URL)")
    parser.add_argument("--lobby-redis", metavar="URL", default=os.environ.get("SK_LOBBY_REDIS_URL"),
                        help="the Redis user of the gateway's lobby adapter (docs/SECURITY.md, user lobby): it writes "
                             "the lobby channels sk:{b*}:lobby (Join, Leave, Returned), presence and the bot keys, "
                             "reads the players' places, the tables and the ledger, and registers --room rooms on "
                             "sk:ops (default: --redis)")
    parser.add_argument("--port", type=int, default=8080, help="listen port (default 8080; 0: pick a free one)")
    parser.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    parser.add_argument("--secret-file", metavar="F", required=True, help="the token signing secret (>= 32 bytes)")
    parser.add_argument("--room", action="append", default=[], metavar="FILE",
                        help="an extra room config (TOML) offered by the lobby, by its name; repeatable")
    parser.add_argument("--id", default=None, help="this gateway's id (default <hostname>-<pid>)")
    parser.add_argument("--dev", action="store_true", help="development only: the browser page mints tokens by name, for any role "
                             "(operator included); refused unless --host is a loopback address")
    parser.add_argument("--bots", action="store_true",
                        help="seat a bot opposite a player who waits alone for a few seconds (docs/BOTS.md)")
    parser.add_argument("--bot-level", choices=(*LEVELS, "trustee"), default=DEFAULT_LEVEL,
                        help="the bots' level where the room config sets no bot_level (default normal; "
                             "trustee: the trusteeship policy, R-13.3, for tests)")
    parser.add_argument("--bot-think", type=float, default=2.5, metavar="SECONDS",
                        help="the longest a bot thinks over a move: each waits a random 40-100%% of it "
                             "(default 2.5: 1-2.5 s; 0 plays at once; at most 10)")
    parser.add_argument("--log-level", default=os.environ.get("SK_LOG_LEVEL", "INFO"))
    parser.add_argument("--ws-compression", action="store_true",
                        help="offer permessage-deflate to the clients that ask for it (default off: the frames are "
                             "small; compression costs CPU on both ends and memory per socket)")
    edge = parser.add_argument_group("the edge (docs/SECURITY.md, issue 23)")
    edge.add_argument("--max-message-bytes", type=int, default=16 * 1024, metavar="N",
                      help="the largest WebSocket message, before and after Auth: a larger frame closes the "
                           "socket 1009 unread (default 16384)")
    edge.add_argument("--rate", type=float, default=20.0, metavar="PER_S",
                      help="commands a token may send a second on this gateway, its sockets together, sustained "
                           "(default 20); over it: rate_limited, "
                           "and 4429 after 10 s over")
    edge.add_argument("--burst", type=int, default=40, metavar="N", help="commands a token may send at once (default 40)")
    edge.add_argument("--rate-close-after", type=float, default=10.0, metavar="S",
                      help="a socket over its rate for this long is closed 4429 (default 10)")
    edge.add_argument("--sync-rate", type=float, default=2.0, metavar="PER_S",
                      help="Syncs and Watches a token may send the engine a second on this gateway (default 2; "
                           "more are refused rate_limited)")
    edge.add_argument("--max-unauthenticated-per-address", type=int, default=20, metavar="N",
                      help="sockets one client address may hold before their Auth (default 20; more: HTTP 429)")
    edge.add_argument("--max-sockets-per-watcher", type=int, default=8, metavar="N",
                      help="sockets one spectator or operator token may hold open at once on this gateway "
                           "(default 8; more: closed 4429); a player's newer socket replaces the older")
    edge.add_argument("--connect-rate", type=float, default=1.0, metavar="PER_S",
                      help="new sockets one token may open a second on this gateway, sustained (default 1; "
                           "more: closed 4429); the token's rates hold across its sockets")
    edge.add_argument("--connect-burst", type=int, default=5, metavar="N",
                      help="new sockets one token may open at once (default 5)")
    edge.add_argument("--trusted-proxy", action="append", default=[], metavar="CIDR",
                      help="a reverse proxy whose X-Forwarded-For names the client address; repeatable "
                           "(default: none, the peer address counts)")
    edge.add_argument("--frame-ancestors", action="append", default=[], metavar="ORIGIN",
                      help="an origin that may frame the pages and post them a token (CSP frame-ancestors); "
                           "repeatable (default: none, 'none')")
    edge.add_argument("--allowed-origin", action="append", default=[], metavar="ORIGIN",
                      help="a page origin that may open /ws (repeatable; '*' for any; default: the gateway's own "
                           "origin, any with --dev); a wrong Origin is refused 403, none at all is let through")
    edge.add_argument("--metrics-from", action="append", default=[], metavar="CIDR",
                      help="a network whose clients may read /metrics (repeatable; default: loopback and the "
                           "private networks 10/8, 172.16/12, 192.168/16, fc00::/7); others get 404")
    edge.add_argument("--token-max-lifetime", type=int, default=None, metavar="SECONDS",
                      help="refuse a token whose exp is further ahead than this (default 30 days; "
                           "docs/SECURITY.md)")
    edge.add_argument("--token-audience", default=None, metavar="AUD",
                      help="accept only tokens whose aud claim names AUD (default: only tokens without aud)")
    edge.add_argument("--token-issuer", default=None, metavar="ISS",
                      help="accept only tokens whose iss claim is ISS (default: any)")
    edge.add_argument("--allow-live-replay", action="store_true",
                      help="DANGEROUS: the replay viewer (/api/replay/<id>) shows matches still being played, both "
                           "hands included, to any operator token (default: 409 until the match has finished)")


def loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (or ``localhost``).

    >>> [loopback(h) for h in ("127.0.0.1", "::1", "localhost", "0.0.0.0", "10.1.2.3", "example.com")]
    [True, True, True, False, False, False]
    """
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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
    if args.dev and not loopback(args.host):
        raise CliError(f"--dev lets anyone who reaches the port mint an operator token: it listens on a loopback "
                       f"--host only (127.0.0.1, ::1), not {args.host!r}")
    from gateway.app import METRICS_FROM, GatewaySettings, default_gateway_id, listen_socket, serve
    from gateway.rooms import RoomBook
    from gateway.tokens import DEFAULT_MAX_LIFETIME, TokenPolicy, load_secret

    try:
        lifetime = DEFAULT_MAX_LIFETIME if args.token_max_lifetime is None else args.token_max_lifetime
        token_policy = TokenPolicy(lifetime, args.token_audience, args.token_issuer)
    except ValueError as exc:
        raise CliError(f"--token-max-lifetime, --token-audience, --token-issuer: {exc}") from None
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
    from engine.store.replicas import resolve_replica_acks

    env_acks = os.environ.get("SK_REPLICA_ACKS", "")
    try:
        resolve_replica_acks(None, None, env_acks)  # a bad value is refused before connecting
    except ValueError as exc:
        raise CliError(str(exc)) from None
    store_client = connect_redis(args.redis, "--redis")
    lobby_probe = connect_redis(args.lobby_redis, "--lobby-redis") if args.lobby_redis else store_client
    try:
        # issue 35 §3: SK_REPLICA_ACKS, else 1 when every master of the lobby's Cluster has a replica
        replica_acks, acks_why = resolve_replica_acks(lobby_probe, None, env_acks)
    finally:
        store_client.close()
        if lobby_probe is not store_client:
            lobby_probe.close()  # a readable error now rather than on the first socket
    logging.basicConfig(level=getattr(logging, str(args.log_level).upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    if args.dev:
        logging.getLogger("shuangkou.gateway").warning(
            "--dev: anyone who reaches port %s can mint a token for any name and role, operator included "
            "(POST /api/dev/token); for development on loopback only, never on a reachable host", args.port)
    try:
        edge, limits = edge_settings(args)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    for net in args.metrics_from:
        try:
            ipaddress.ip_network(net, strict=False)
        except ValueError:
            raise CliError(f"--metrics-from {net!r}: not a network (give a CIDR such as 10.0.0.0/8)") from None
    if args.allow_live_replay:
        logging.getLogger("shuangkou.gateway").warning(
            "--allow-live-replay: any operator token can read both hands of a match being played")
    settings = GatewaySettings(redis_url=args.redis, secret=secret, rooms=rooms,
                               gateway_id=args.id or default_gateway_id(), dev=args.dev, bots=args.bots, bot_level=args.bot_level,
                               bot_think_s=args.bot_think,
                               lobby_redis_url=args.lobby_redis, edge=edge, limits=limits,
                               allow_live_replay=args.allow_live_replay, replica_acks=replica_acks,
                               ws_compression=args.ws_compression,
                               metrics_from=tuple(args.metrics_from) or METRICS_FROM, token_policy=token_policy)
    try:
        sock = listen_socket(args.host, args.port)
    except OSError as exc:
        raise CliError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    logging.getLogger("shuangkou.gateway").info("replica acks %d (%s)", replica_acks, acks_why)
    serve(settings, args.host, args.port, log_level=str(args.log_level), sock=sock)
    return 0


def edge_settings(args: argparse.Namespace) -> tuple[EdgePolicy, Limits]:
    """The edge's policy and limits from the flags; ValueError naming a bad one."""
    from gateway.headers import EdgePolicy, normalize_origin
    from gateway.limits import Limits

    def origins(values: list[str], flag: str) -> tuple[str, ...]:
        out = []
        for v in values:
            for item in v.replace(",", " ").split():
                try:
                    out.append(normalize_origin(item))
                except ValueError as exc:
                    raise ValueError(f"{flag}: {exc}") from None
        return tuple(out)

    ancestors = origins(args.frame_ancestors, "--frame-ancestors")
    if "*" in ancestors:
        raise ValueError("--frame-ancestors: name the origins that may frame the page, not '*'")
    edge = EdgePolicy(frame_ancestors=ancestors, allowed_origins=origins(args.allowed_origin, "--allowed-origin"),
                      dev=args.dev)
    limits = Limits(max_message_bytes=args.max_message_bytes, rate=args.rate, burst=args.burst,
                    sync_rate=args.sync_rate, close_after_s=args.rate_close_after,
                    unauthenticated_per_address=args.max_unauthenticated_per_address,
                    sockets_per_watcher=args.max_sockets_per_watcher, connect_rate=args.connect_rate,
                    connect_burst=args.connect_burst, trusted_proxies=tuple(args.trusted_proxy))
    return edge, limits
