"""The dramatiq broker for the timer workers.

Production: a :class:`~dramatiq.brokers.redis.RedisBroker` on its *own* Redis
(``SK_BROKER_URL``) — dramatiq does not run on Redis Cluster, so its Redis is
separate from the event store's (``SK_REDIS_URL``).  Without a URL: a
:class:`~dramatiq.brokers.stub.StubBroker` (the embedded default, unit tests).

Middleware, chosen for timer messages:

* ``AgeLimit`` counts a message's age from ``message_timestamp`` — the moment
  it was *sent* — not from its ``eta``.  A timer delayed on purpose by 30 s
  would therefore look 30 s old the moment it becomes due and could be
  dropped by any ``max_age`` below its delay.  We keep the middleware (so an
  operator can set ``max_age`` on other actors) but with no default limit, and
  the timer actors never set one.  A stale timer is harmless anyway (it is a
  no-op by version), so there is nothing to gain from dropping old ones.
* ``TimeLimit`` only counts *processing* time (from ``before_process_message``),
  never the delay; a fire takes milliseconds, so a limit of 30 s only catches a
  wedged Redis call.  An interrupted fire is safe: the append is one atomic
  Lua script and the command id makes the retry idempotent.
* ``Retries``: few and fast (3 retries, 100 ms – 1 s backoff).  A timer that
  keeps failing is picked up by the deadline sweeper anyway; twenty retries
  with dramatiq's default 15 s minimum backoff would only fire far too late.
* ``Prometheus`` (dramatiq's ``dramatiq_*`` metrics and their exposition
  server, not in dramatiq's default middleware): opt in with
  ``SK_DRAMATIQ_PROMETHEUS=1`` (Redis brokers only; docs/OPERATIONS.md "Metrics").
"""

from __future__ import annotations

import logging
import os

import dramatiq
from dramatiq.broker import Broker
from dramatiq.brokers.stub import StubBroker
from dramatiq.middleware import (
    AgeLimit,
    Callbacks,
    Middleware,
    Pipelines,
    Retries,
    ShutdownNotifications,
    TimeLimit,
)

log = logging.getLogger(__name__)

BROKER_URL_ENV = "SK_BROKER_URL"
STORE_URL_ENV = "SK_REDIS_URL"
PROMETHEUS_ENV = "SK_DRAMATIQ_PROMETHEUS"

MAX_RETRIES = 3
MIN_BACKOFF_MS = 100
MAX_BACKOFF_MS = 1_000
TIME_LIMIT_MS = 30_000
#: dramatiq's RedisBroker declares a worker dead (and requeues the messages it
#: had prefetched, including delayed timers) after this long without a
#: heartbeat.  The sweeper covers the gap; a shorter timeout only makes the
#: stale redelivery come sooner.
HEARTBEAT_TIMEOUT_MS = 15_000


def prometheus_from_env() -> bool:
    """``SK_DRAMATIQ_PROMETHEUS`` set to 1 / true / yes / on."""
    return os.environ.get(PROMETHEUS_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def timer_middleware(prometheus: bool = False) -> list[Middleware]:
    middleware: list[Middleware] = [
        AgeLimit(max_age=None),
        TimeLimit(time_limit=TIME_LIMIT_MS, interval=1000),
        ShutdownNotifications(),
        Callbacks(),
        Pipelines(),
        Retries(max_retries=MAX_RETRIES, min_backoff=MIN_BACKOFF_MS, max_backoff=MAX_BACKOFF_MS),
    ]
    if prometheus:
        # imported only when asked for: the module creates $dramatiq_prom_db on import
        from dramatiq.middleware.prometheus import Prometheus

        middleware.append(Prometheus())
    return middleware


def make_broker(url: str | None, *, prometheus: bool | None = None) -> Broker:
    """A new broker (not installed as dramatiq's global one).

    ``prometheus`` (None: ``SK_DRAMATIQ_PROMETHEUS``) adds dramatiq's Prometheus
    middleware to a Redis broker; a StubBroker (in-process) never gets it.
    """
    if url:
        from dramatiq.brokers.redis import RedisBroker

        if prometheus is None:
            prometheus = prometheus_from_env()
        return RedisBroker(url=url, middleware=timer_middleware(prometheus), namespace="sk-dramatiq",
                           heartbeat_timeout=HEARTBEAT_TIMEOUT_MS)
    return StubBroker(middleware=timer_middleware())


def setup_broker(url: str | None = None, *, from_env: bool = True) -> Broker:
    """Create the broker and install it as dramatiq's global broker.

    ``url`` None reads ``SK_BROKER_URL`` (when ``from_env``); still none → StubBroker.
    Actors already declared are re-bound to the new broker (see :func:`bind_actors`).
    """
    if url is None and from_env:
        url = os.environ.get(BROKER_URL_ENV) or None
    broker = make_broker(url)
    dramatiq.set_broker(broker)
    # Re-bind our actors if they were declared on an earlier broker.
    try:
        from workers import actors as _actors
    except ImportError:  # pragma: no cover - circular import during module load
        return broker
    if getattr(_actors, "ACTORS", None):
        bind_actors(broker, _actors.ACTORS)
    return broker


def bind_actors(broker: Broker, actors: list[dramatiq.Actor]) -> None:  # type: ignore[type-arg]
    """Move already-declared actors onto ``broker`` (tests build a fresh StubBroker each)."""
    for actor in actors:
        actor.broker = broker
        if actor.actor_name not in broker.actors:
            broker.declare_actor(actor)


def broker_url_redacted(broker: Broker) -> str:
    if isinstance(broker, StubBroker):
        return "stub"
    client = getattr(broker, "client", None)
    try:
        kw = client.connection_pool.connection_kwargs  # type: ignore[union-attr]
        return f"redis://{kw.get('host')}:{kw.get('port')}/{kw.get('db', 0)}"
    except Exception:
        return type(broker).__name__
