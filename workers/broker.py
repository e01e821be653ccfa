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
* Delayed messages (every timer) wait in a Redis sorted set, not in the
  worker's memory: :class:`TimerRedisBroker` (below, "Delayed messages").
* ``Prometheus`` (dramatiq's ``dramatiq_*`` metrics and their exposition
  server, not in dramatiq's default middleware): opt in with
  ``SK_DRAMATIQ_PROMETHEUS=1`` (Redis brokers only; docs/OPERATIONS.md "Metrics").
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any
from uuid import uuid4

import dramatiq
from dramatiq import Message
from dramatiq.broker import Broker
from dramatiq.common import dq_name
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
QUEUE = "sk-timers"  # the timer actors' queue
FIRE_ACTOR = "fire_deadline"  # actor name of the deadline timer (workers.actors.fire_deadline)
FIRE_MANY_ACTOR = "fire_deadlines"  # a dispatched batch of deadlines (workers.dispatcher)

# Actors declared so far (workers.actors registers its own): setup_broker re-binds them
# to a new broker.  The broker module imports no actor module.
_registered: list[dramatiq.Actor] = []  # type: ignore[type-arg]


def register_actors(actors: list[dramatiq.Actor]) -> None:  # type: ignore[type-arg]
    """Remember ``actors`` so that :func:`setup_broker` re-binds them to each new broker."""
    for actor in actors:
        if actor not in _registered:
            _registered.append(actor)
#: dramatiq's RedisBroker declares a worker dead (and requeues the messages it
#: had fetched but not acked) after this long without a heartbeat.  The sweeper covers the gap; a shorter timeout only makes the
#: stale redelivery come sooner.
HEARTBEAT_TIMEOUT_MS = 15_000


#: Most delayed messages moved to the queue by one fetch (one Lua call).
MOVE_DUE_LIMIT = 1_000

# KEYS: zset, zset messages; ARGV: eta ms, redis message id, encoded message
_SCHEDULE_LUA = """
redis.call("hset", KEYS[2], ARGV[2], ARGV[3])
redis.call("zadd", KEYS[1], ARGV[1], ARGV[2])
"""

# KEYS: zset, zset messages, queue list, queue messages, heartbeats;
# ARGV: now ms, limit, broker id
# Moves the due messages onto the queue (as dramatiq's own enqueue does: hash
# entry + RPUSH) and returns the queue's length, so an idle poll costs one call.
# It also beats the worker's heartbeat, as dramatiq's dispatch script does on
# every call (an idle poll skips the dispatch).
_MOVE_DUE_LUA = """
redis.call("zadd", KEYS[5], ARGV[1], ARGV[3])
local ids = redis.call("zrangebyscore", KEYS[1], "-inf", ARGV[1], "LIMIT", 0, tonumber(ARGV[2]))
for i = 1, #ids do
    local id = ids[i]
    local data = redis.call("hget", KEYS[2], id)
    redis.call("zrem", KEYS[1], id)
    if data then
        redis.call("hdel", KEYS[2], id)
        redis.call("hset", KEYS[4], id, data)
        redis.call("rpush", KEYS[3], id)
    end
end
return redis.call("llen", KEYS[3])
"""

# KEYS: queue list, queue messages; ARGV: id1, data1, id2, data2, …
# dramatiq's own enqueue (hash entry + RPUSH) for many messages; returns the queue's length
_ENQUEUE_MANY_LUA = """
for i = 1, #ARGV, 2 do
    redis.call("hset", KEYS[2], ARGV[i], ARGV[i + 1])
    redis.call("rpush", KEYS[1], ARGV[i])
end
return redis.call("llen", KEYS[1])
"""


def _timer_redis_broker_class() -> type:
    from dramatiq.brokers.redis import RedisBroker
    from dramatiq.common import current_millis

    class TimerRedisBroker(RedisBroker):
        """dramatiq's RedisBroker, with delayed messages held in Redis until due.

        dramatiq's own RedisBroker puts a delayed message on ``<queue>.DQ``;
        a worker's delay-queue consumer *prefetches* it (up to 1000 per
        thread), keeps it in a heap in memory and, once due, re-enqueues it
        on ``<queue>`` and acks it on ``.DQ`` — two round trips per message,
        made one message at a time by one thread that must win the GIL back
        from the busy worker threads after each of them.  Under load that
        thread falls behind: bursts of due timers (hundreds of stale timers
        coming due together) waited up to ~2 s in the worker's heap.

        Here ``enqueue(message, delay=…)`` stores the message in the sorted
        set ``<ns>:<queue>.ZQ`` (score: eta ms; data in ``<queue>.ZQ.msgs``),
        with no ``eta`` option, and every fetch of ``<queue>`` first moves the
        due ones onto the queue in one Lua call.  Nothing delayed lives in a
        worker's memory: a SIGKILLed worker holds no future timers.  Messages
        that a stock RedisBroker put on ``.DQ`` are still consumed as before.
        """

        def __init__(self, **kwargs: Any):
            super().__init__(**kwargs)
            self._schedule_script = self.client.register_script(_SCHEDULE_LUA)
            self._move_due_script = self.client.register_script(_MOVE_DUE_LUA)
            self._enqueue_many_script = self.client.register_script(_ENQUEUE_MANY_LUA)

        def _zq_keys(self, queue_name: str) -> list[str]:
            zq = f"{self.namespace}:{queue_name}.ZQ"
            return [zq, zq + ".msgs"]

        def enqueue(self, message: Message, *, delay: int | None = None) -> Message:
            if delay is None or message.queue_name.endswith(".DQ"):
                return super().enqueue(message, delay=delay)
            message = message.copy(options={"redis_message_id": str(uuid4())})
            eta = current_millis() + int(delay)
            self.emit_before("enqueue", message, delay)
            self._schedule_script(keys=self._zq_keys(message.queue_name),
                                  args=[eta, message.options["redis_message_id"], message.encode()])
            self.emit_after("enqueue", message, delay)
            return message

        def enqueue_many(self, messages: list[Message]) -> int:
            """Enqueue ``messages`` (no delay, all on one queue) in one call; returns the
            queue's length afterwards (the dispatcher's backlog)."""
            if not messages:
                return 0
            queue_name = messages[0].queue_name
            args: list[Any] = []
            sent = []
            for message in messages:
                if message.queue_name != queue_name:
                    raise ValueError("enqueue_many: every message must go to one queue")
                message = message.copy(options={"redis_message_id": str(uuid4())})
                self.emit_before("enqueue", message, None)
                args += [message.options["redis_message_id"], message.encode()]
                sent.append(message)
            queue = f"{self.namespace}:{queue_name}"
            length = int(self._enqueue_many_script(keys=[queue, queue + ".msgs"], args=args))
            for message in sent:
                self.emit_after("enqueue", message, None)
            return length

        def queue_length(self, queue_name: str) -> int:
            """Messages waiting on ``queue_name`` (not fetched yet)."""
            return int(self.client.llen(f"{self.namespace}:{queue_name}"))

        def move_due(self, queue_name: str, now_ms: int | None = None) -> int:
            """Move the due delayed messages of ``queue_name`` onto it; returns the queue length."""
            queue = f"{self.namespace}:{queue_name}"
            return int(self._move_due_script(
                keys=[*self._zq_keys(queue_name), queue, queue + ".msgs", f"{self.namespace}:__heartbeats__"],
                args=[current_millis() if now_ms is None else now_ms, MOVE_DUE_LIMIT, self.broker_id]))

        def do_fetch(self, queue_name: str, prefetch: int) -> list[bytes]:
            if not queue_name.endswith(".DQ") and self.move_due(queue_name) == 0:
                # dramatiq requeues a dead worker's fetched-but-unacked messages only in
                # the dispatch script's random maintenance; skipping the dispatch on an
                # idle queue must not skip that too (their timers would stay stuck)
                if self._should_do_maintenance("fetch"):
                    self._maintain(queue_name)
                return []
            return self._dispatch("fetch")(queue_name, prefetch)

        def _maintain(self, queue_name: str) -> None:
            """dramatiq's queue maintenance (requeue what dead workers held, expire the
            DLQ) for ``queue_name``, with no other effect (a ``requeue`` of nothing)."""
            self.scripts["dispatch"](keys=[self.namespace], args=[
                "requeue", current_millis(), queue_name, self.broker_id, self.heartbeat_timeout,
                self.dead_message_ttl, 1, self._max_unpack_size()])

        def scheduled_count(self, queue_name: str) -> int:
            """Delayed messages of ``queue_name`` not due (or not moved) yet."""
            return int(self.client.zcard(self._zq_keys(queue_name)[0]))

        def flush(self, queue_name: str) -> None:
            super().flush(queue_name)
            self.client.delete(*self._zq_keys(queue_name))

        def join(self, queue_name: str, *, interval: int = 100, timeout: int | None = None) -> None:
            """Wait until the queue, its delay queues and its sorted set are empty (tests)."""
            deadline = timeout and time.monotonic() + timeout / 1000
            while self.scheduled_count(queue_name):
                if deadline and time.monotonic() >= deadline:
                    from dramatiq.errors import QueueJoinTimeout

                    raise QueueJoinTimeout(queue_name)
                time.sleep(interval / 1000)
            left = None if not deadline else max(1, int((deadline - time.monotonic()) * 1000))
            super().join(queue_name, interval=interval, timeout=left)

    return TimerRedisBroker


_TIMER_BROKER: type | None = None


def timer_redis_broker_class() -> type:
    """:class:`TimerRedisBroker` (built on first use: dramatiq's Redis broker imports redis)."""
    global _TIMER_BROKER
    if _TIMER_BROKER is None:
        _TIMER_BROKER = _timer_redis_broker_class()
    return _TIMER_BROKER


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
        middleware.append(prometheus_middleware())
    return middleware


#: where dramatiq's exposition server listens unless ``$dramatiq_prom_host`` says otherwise:
#: the loopback only (dramatiq's own default is every interface); compose sets 0.0.0.0
PROMETHEUS_DEFAULT_HOST = "127.0.0.1"
PROMETHEUS_HOST_ENV = "dramatiq_prom_host"


def prometheus_middleware() -> Middleware:
    """dramatiq's Prometheus middleware, with two changes (docs/OPERATIONS.md "Metrics"):

    * its exposition server binds ``$dramatiq_prom_host``, default 127.0.0.1 (not 0.0.0.0);
    * at process boot every series it can export is created at 0, for each actor of the
      broker (its queue and its delay queue): ``dramatiq_messages_total``,
      ``dramatiq_message_errors_total``, ``_retries_total``, ``_rejects_total``,
      ``dramatiq_messages_inprogress``, ``dramatiq_delayed_messages_inprogress`` and
      ``dramatiq_message_duration_milliseconds``, so a fresh worker's first scrape has
      every name the dashboard and the alerts query, and ``increase()`` sees the first
      dead letter.
    """
    import dramatiq.middleware.prometheus as prom_mod  # creates $dramatiq_prom_db on import: only when asked

    if not os.environ.get(PROMETHEUS_HOST_ENV):
        prom_mod.HTTP_HOST = PROMETHEUS_DEFAULT_HOST  # read by the forked exposition server

    class ZeroedPrometheus(prom_mod.Prometheus):
        def after_process_boot(self, broker: Broker) -> None:
            super().after_process_boot(broker)
            for actor in list(broker.actors.values()):
                for queue in (actor.queue_name, dq_name(actor.queue_name)):
                    labels = (queue, actor.actor_name)
                    for metric in (self.total_messages, self.total_errored_messages, self.total_retried_messages,
                                   self.total_rejected_messages, self.inprogress_messages,
                                   self.inprogress_delayed_messages, self.message_durations):
                        metric.labels(*labels)

    return ZeroedPrometheus()


def make_broker(url: str | None, *, prometheus: bool | None = None) -> Broker:
    """A new broker (not installed as dramatiq's global one).

    ``prometheus`` (None: ``SK_DRAMATIQ_PROMETHEUS``) adds dramatiq's Prometheus
    middleware to a Redis broker; a StubBroker (in-process) never gets it.
    """
    if url:
        if prometheus is None:
            prometheus = prometheus_from_env()
        return timer_redis_broker_class()(url=url, middleware=timer_middleware(prometheus), namespace="sk-dramatiq",
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
    bind_actors(broker, _registered)
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
