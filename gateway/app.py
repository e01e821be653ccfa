"""The gateway's ASGI app (Starlette) and its process (uvicorn).

Routes: ``/ws`` (the WebSocket, gateway/session.py), ``/healthz`` (200 while Redis
answers), ``/metrics`` (Prometheus, gateway/metrics.py), plus ``gateway.web.routes(ctx)``
(the browser client).  On SIGTERM every socket is closed with 1001 and a reason *before*
uvicorn stops; no Disconnect is sent for them (a player who reconnects to another
gateway within the grace window is never disconnected, R-13.4).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import os
import socket
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_plus

import uvicorn
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from redis.exceptions import RedisError
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from engine.service.gc_tuning import tune_gc
from gateway import web
from gateway.context import WebContext
from gateway.headers import DeniedHandshakeFilter, EdgeMiddleware, EdgePolicy, deny
from gateway.limits import CLOSE_RATE_LIMITED, AddressCount, Limits, address_in, client_address
from gateway.lobby import Lobby
from gateway.metrics import CONTENT_TYPE_LATEST, GatewayMetrics
from gateway.rooms import RoomBook
from gateway.session import CLOSE_GOING_AWAY, Connection, Hub, authenticate
from gateway.tokens import TokenPolicy

log = logging.getLogger("shuangkou.gateway")

CLOSE_TRY_AGAIN = 1013  # WebSocket "try again later": Redis failed under this socket


#: who may read ``/metrics`` unless ``--metrics-from`` says otherwise: they name rooms, counts and
#: latencies an outsider should not read (docs/OPERATIONS.md)
METRICS_FROM: tuple[str, ...] = ("127.0.0.0/8", "::1/128", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",
                                 "fc00::/7")


@dataclass(frozen=True)
class GatewaySettings:
    redis_url: str
    secret: bytes
    rooms: RoomBook
    gateway_id: str
    dev: bool = False
    bots: bool = False
    bot_think_s: float = 2.5  # the longest a --bots bot thinks over a move (gateway/bots.py)
    bot_level: str = "normal"  # --bot-level: the bots' level where a room sets no bot_level (docs/BOTS.md)
    lobby_redis_url: str | None = None  # the lobby's Redis user (default: redis_url)
    edge: EdgePolicy = EdgePolicy()  # headers, frame ancestors, allowed Origins (gateway/headers.py)
    limits: Limits = Limits()  # sizes and rates per client (gateway/limits.py)
    allow_live_replay: bool = False  # dangerous: the replay viewer shows matches being played
    replica_acks: int = 0  # the lobby's transitions wait for N replicas (SK_REPLICA_ACKS or the topology; issue 35 §3)
    #: --ws-compression: offer permessage-deflate (RFC 7692) to the clients that ask for it.
    #: Off by default: our frames are small, and per socket it costs a deflate and an inflate
    #: context (memory) and CPU on both ends for every frame (docs/CAPACITY.md)
    ws_compression: bool = False
    #: --metrics-from: the networks whose clients may read ``/metrics`` (the client address as
    #: for the edge limits, trusted proxies resolved); others get 404.  Default: loopback and
    #: the private networks (a Prometheus beside the gateway), never the Internet
    metrics_from: tuple[str, ...] = METRICS_FROM
    #: --token-max-lifetime, --token-audience, --token-issuer (gateway/tokens.py TokenPolicy)
    token_policy: TokenPolicy = TokenPolicy()


#: Redis connections of one gateway process, whatever its sockets: the players' pool (every
#: socket's commands, the lobby's reply reader among them), the fan-out's own (its notice
#: connection and its readers' pipelines: a notice is never read behind the sockets' commands)
#: and, with ``--lobby-redis``, the lobby's own.  A command waits for a free one.
#: On a Cluster the bound is per node (gateway/gated.py: a command waits there too).
REDIS_CONNECTIONS = 20
#: the hot path's own: the notice connection, the fan-out's :data:`~gateway.fanout.READERS`
#: pipelines and, on a single node, the command sender's one (gateway/sender.py)
READER_CONNECTIONS = 4
#: the most one gateway holds on one node without ``--lobby-redis``
MAX_REDIS_CONNECTIONS = REDIS_CONNECTIONS + READER_CONNECTIONS
LOBBY_REDIS_CONNECTIONS = 6


#: a reply that takes longer is a dead connection (it is dropped, and the command fails)
SOCKET_TIMEOUT_S = 30


def redis_client(url: str, connections: int, name: str, option: str = "--redis", hot: bool = False) -> Any:
    """An asyncio client of at most ``connections`` connections (per node), each named ``name``
    (CLIENT LIST); a single node or a Cluster, detected from the node (engine/store/connect.py).

    ``hot``: the fan-out's and the sender's client, whose callers bound each round with one
    timeout of their own (:data:`gateway.fanout.ROUND_TIMEOUT_S`); on a single node its replies
    are read with none (redis-py's timeout per reply is an ``asyncio.timeout``, 3.7 µs here,
    and one per write a ``wait_for``, 6.6 µs: docs/CAPACITY.md)."""
    import redis.asyncio as aioredis

    from engine.store.connect import probe

    kwargs: dict[str, Any] = {"socket_timeout": SOCKET_TIMEOUT_S, "socket_connect_timeout": 5,
                              "health_check_interval": 0, "client_name": name}
    if probe(url, option=option):
        from gateway.gated import GatedCluster

        return GatedCluster.from_url(url, max_connections=connections, **kwargs)
    if hot:
        kwargs["socket_timeout"] = None
    pool = aioredis.BlockingConnectionPool.from_url(url, max_connections=connections, timeout=60, **kwargs)
    return aioredis.Redis.from_pool(pool)


def build_app(settings: GatewaySettings, redis: Any | None = None) -> Starlette:
    name = f"sk-gateway:{settings.gateway_id}"
    client = redis or redis_client(settings.redis_url, REDIS_CONNECTIONS, name)
    metrics = GatewayMetrics()
    lobby_client = client
    if settings.lobby_redis_url and settings.lobby_redis_url != settings.redis_url:
        lobby_client = redis_client(settings.lobby_redis_url, LOBBY_REDIS_CONNECTIONS, name, "--lobby-redis")
    lobby = Lobby(lobby_client, settings.rooms, settings.gateway_id)
    metrics.replica_acks.set(settings.replica_acks)
    reader = None if redis is not None else redis_client(settings.redis_url, READER_CONNECTIONS, name, hot=True)
    hub = Hub(redis=client, secret=settings.secret, rooms=settings.rooms, lobby=lobby,
              gateway_id=settings.gateway_id, metrics=metrics, limits=settings.limits, reader_redis=reader,
              token_policy=settings.token_policy)
    bots = None
    if settings.bots:
        from gateway.bots import BotDriver

        bots = BotDriver(lobby, client, hub.fanout, think_s=settings.bot_think_s, level=settings.bot_level)

    def bot_rooms() -> list[str]:
        # every room served, those registered later with `shuangkou room add` included (read
        # at each round); a bot holds no coins: only rooms that seat a zero balance
        book = settings.rooms
        return [n for n in book.names() if book.admits(book.rooms[n], 0)]
    ctx = WebContext(redis=client, secret=settings.secret, dev=settings.dev, bots=settings.bots, hub=hub,
                     redis_url=settings.redis_url, allow_live_replay=settings.allow_live_replay,
                     frame_ancestors=settings.edge.frame_ancestors)
    unauthenticated = AddressCount(settings.limits.unauthenticated_per_address)
    watchers = AddressCount(settings.limits.sockets_per_watcher)  # per spectator / operator token subject

    async def ws_endpoint(ws: WebSocket) -> None:
        # a socket that will wait for its Auth message (no ?token=) holds a place of its address
        # until it is authenticated or closed; one with ?token= is judged at once
        waits = ws.query_params.get("token") is None
        address = client_address(ws.client.host if ws.client else None, ws.headers.get("x-forwarded-for"),
                                 settings.limits.trusted_proxies)
        if waits and not unauthenticated.acquire(address):
            metrics.refused("unauthenticated_per_address")
            await deny(ws.scope, ws.send, 429, "too_many_sockets",
                       f"too many sockets from your address waiting for their Auth (at most "
                       f"{settings.limits.unauthenticated_per_address})")
            return
        try:
            await ws.accept()
            if hub.stopping:
                await ws.close(code=CLOSE_GOING_AWAY, reason="gateway shutting down; connect to another one")
                return
            auth = await authenticate(hub, ws)
        finally:
            if waits:
                unauthenticated.release(address)
        if auth is None:
            return
        identity, resume = auth
        if not hub.budgets.connect(identity.player, time.monotonic()):
            # each greeting asks the engine for a view and the lobby for a Returned: a token's
            # sockets opened and closed in a loop would flood both (docs/SECURITY.md)
            metrics.refused("connect_limited")
            with contextlib.suppress(RuntimeError, OSError, WebSocketDisconnect):
                await ws.close(code=CLOSE_RATE_LIMITED, reason=f"connecting again too often: at most "
                                                               f"{settings.limits.connect_rate:g} new sockets a "
                                                               f"second for this token; wait a moment")
            return
        watcher = identity.role != "player"  # a player's newer socket replaces the older one
        if watcher and not watchers.acquire(identity.player):
            metrics.refused("sockets_per_watcher")
            with contextlib.suppress(RuntimeError, OSError, WebSocketDisconnect):
                await ws.close(code=CLOSE_RATE_LIMITED, reason=f"too many sockets of this {identity.role} token "
                                                               f"(at most {settings.limits.sockets_per_watcher})")
            return
        try:
            await serve_socket(ws, identity, resume, address)
        finally:
            if watcher:
                watchers.release(identity.player)

    async def serve_socket(ws: WebSocket, identity: Any, resume: Any, address: str) -> None:
        conn = Connection(hub, ws, identity)
        conn.address = address
        try:
            await conn.run(resume)
        except RedisError as exc:  # Redis away or the pool busy past its wait: the client may retry
            log.warning("socket of %s closed, Redis failed: %s", identity.player, exc)
            with contextlib.suppress(RuntimeError, OSError, WebSocketDisconnect):
                await ws.close(code=CLOSE_TRY_AGAIN, reason="the gateway cannot reach Redis now; reconnect")
        if ws.application_state != WebSocketState.DISCONNECTED:
            with contextlib.suppress(RuntimeError, OSError, WebSocketDisconnect):
                await ws.close()

    async def healthz(_request: Request) -> Response:
        try:
            await asyncio.wait_for(client.ping(), 2.0)
        except Exception as exc:
            return JSONResponse({"status": "redis unavailable", "error": type(exc).__name__}, status_code=503)
        if hub.stopping:
            return JSONResponse({"status": "stopping"}, status_code=503)
        return JSONResponse({"status": "ok", "gateway": settings.gateway_id,
                             "connections": len(hub.connections)})

    async def metrics_endpoint(request: Request) -> Response:
        address = client_address(request.client.host if request.client else None,
                                 request.headers.get("x-forwarded-for"), settings.limits.trusted_proxies)
        if not address_in(address, settings.metrics_from):
            metrics.refused("metrics_from")
            return Response("Not Found", status_code=404, media_type="text/plain")
        rooms = settings.rooms.names()  # the registry's rooms too (refreshed by the lobby)
        try:
            waiting = await asyncio.wait_for(lobby.waiting(rooms), 2.0)
        except Exception as exc:  # the lobby's Redis cannot answer: the other metrics still go out
            log.warning("metrics: lobby queue lengths unavailable (%s)", type(exc).__name__)
        else:
            metrics.queue_lengths(waiting)
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette):
        stop = asyncio.Event()
        tasks = [asyncio.create_task(lobby.run(stop)), asyncio.create_task(hub.heartbeat(stop)),
                 asyncio.create_task(hub.receipts.run(stop)), asyncio.create_task(hub.receipts.beat(stop))]
        if bots is not None:
            tasks.append(asyncio.create_task(bots.run(stop, bot_rooms, settings.gateway_id)))
        try:
            yield
        finally:
            stop.set()
            if bots is not None:
                try:
                    await asyncio.wait_for(bots.withdraw(bot_rooms()), 2.0)
                except Exception as exc:  # Redis away: the offers expire on their own
                    log.warning("bots: could not withdraw the offers: %s", exc)
            await hub.close_all(CLOSE_GOING_AWAY, "gateway shutting down; reconnect")
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await hub.fanout.aclose()
            if redis is None:
                await client.aclose()
            if reader is not None:
                await reader.aclose()
            if lobby_client is not client:
                await lobby_client.aclose()

    routes = [WebSocketRoute("/ws", ws_endpoint), Route("/healthz", healthz), Route("/metrics", metrics_endpoint)]
    routes += list(web.routes(ctx))
    app = Starlette(routes=routes, lifespan=lifespan,
                    middleware=[Middleware(EdgeMiddleware, policy=settings.edge, on_refuse=metrics.refused)])
    app.state.hub = hub
    app.state.context = ctx
    return app


class GatewayServer(uvicorn.Server):
    """uvicorn, but sockets hear ``1001 gateway shutting down`` before the server stops."""

    def __init__(self, config: uvicorn.Config, app: Starlette):
        super().__init__(config)
        self.gateway_app = app

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        hub: Hub = self.gateway_app.state.hub
        await hub.close_all(CLOSE_GOING_AWAY, "gateway shutting down; reconnect")
        await super().shutdown(sockets)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        tune_gc()  # engine/service/gc_tuning.py
        # uvicorn's "auto" loop is uvloop where it is installed (a dependency: the frames, the
        # Redis replies and the tasks cost ≈ 15 % less CPU per command, docs/CAPACITY.md)
        logging.getLogger("uvicorn.error").info("event loop: %s", event_loop_name())
        for server in getattr(self, "servers", ()):
            for s in server.sockets:
                host, port = s.getsockname()[:2]
                # machine-readable line for scripts and tests that pass --port 0
                print(f"gateway-port {port}", flush=True)
                return


def event_loop_name() -> str:
    """``uvloop`` or ``asyncio``: the event loop this gateway runs on."""
    module = type(asyncio.get_running_loop()).__module__
    return "uvloop" if module.startswith("uvloop") else "asyncio"


def default_gateway_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


class TokenRedactingFilter(logging.Filter):
    """Hides the value of every ``token`` query parameter in a log record: uvicorn logs each
    WebSocket's path with its query string, and ``?token=`` is a documented way to connect.
    A name is read as the gateway reads it (percent-decoded: ``tok%65n`` is ``token``).

    >>> f = TokenRedactingFilter()
    >>> r = logging.LogRecord("uvicorn.error", logging.INFO, "", 0, '%s - "WebSocket %s" [accepted]',
    ...                       ("127.0.0.1:5", "/ws?version=3&token=eyJabc.def.ghi"), None)
    >>> f.filter(r), r.getMessage()
    (True, '127.0.0.1:5 - "WebSocket /ws?version=3&token=<redacted>" [accepted]')
    >>> f.redact("/ws?tok%65n=eyJa.b.c&x=1 /ws?%74oken=eyJd&v=2 /ws?tokens=kept")
    '/ws?tok%65n=<redacted>&x=1 /ws?%74oken=<redacted>&v=2 /ws?tokens=kept'
    """

    _PARAM = re.compile(r"(?<=[?&])([^=&\s\"'?]+)=([^&\s\"']*)")

    @classmethod
    def redact(cls, text: str) -> str:
        def one(m: re.Match[str]) -> str:
            return f"{m.group(1)}=<redacted>" if unquote_plus(m.group(1)) == "token" else m.group(0)
        return cls._PARAM.sub(one, text)

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = self.redact(record.msg)
        if record.args:
            args = record.args if isinstance(record.args, tuple) else (record.args,)
            record.args = tuple(self.redact(a) if isinstance(a, str) else a for a in args)
        return True


def listen_socket(host: str, port: int) -> socket.socket:
    """The gateway's listening socket, bound before uvicorn starts (OSError: the address is in
    use, or not this host's: the command line says so in one line)."""
    # the family as uvicorn chooses it: IPv6 for an address with a colon, else IPv4
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def serve(settings: GatewaySettings, host: str, port: int, log_level: str = "info",
          sock: socket.socket | None = None) -> None:
    """Run the gateway (on ``sock`` when given: :func:`listen_socket`) until SIGTERM or SIGINT."""
    app = build_app(settings)
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level.lower(), lifespan="on",
                            ws_ping_interval=20, ws_ping_timeout=20, timeout_graceful_shutdown=5,
                            ws_max_size=settings.limits.max_message_bytes,  # a larger frame is never buffered
                            ws_per_message_deflate=settings.ws_compression,
                            # the peer is the peer: X-Forwarded-For counts only from a --trusted-proxy
                            # (gateway/limits.py), never by uvicorn's default trust of 127.0.0.1
                            proxy_headers=False,
                            access_log=False)
    for name in ("uvicorn.error", "uvicorn.access", "uvicorn"):  # no token reaches a log
        logging.getLogger(name).addFilter(TokenRedactingFilter())
    logging.getLogger("uvicorn.error").addFilter(DeniedHandshakeFilter())  # a refusal is no error
    import signal

    # uvicorn re-raises the signal that stopped it once it is done: exit 0 after a clean stop
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_a: None)
    GatewayServer(config, app).run(sockets=[sock] if sock is not None else None)
