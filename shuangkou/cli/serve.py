"""``shuangkou serve``: the engine as a long-running process on real Redis.

One process runs

* the command loops (:class:`engine.service.inbox.InboxConsumer`): one per stream of each
  bucket this replica owns (``sk:{b<N>}:inbox`` for players, ``sk:{b<N>}:ops`` for the
  lobby's CreateMatch/Sit/Deal; engine/service/channels.py), under the bucket's lease
  (engine/service/ownership.py: one owner per bucket, rebalanced as replicas start and
  stop, a dead replica's buckets and pending commands taken over), plus ``sk:ops``
  (Credit, Debit, AddRoom) and the single ``sk:inbox`` of older builds on every replica;
  each refuses the command types its channel does not carry, reads with the consumer
  group ``sk-service``, decides, appends, publishes per-player updates; on a plain Redis
  one thread per channel reads all its owned bucket streams and its unbucketed one
  (``sk:inbox``, ``sk:ops``) with one XREADGROUP (engine.service.ownership.InboxGroup),
  on a Cluster a thread per bucket (its two streams share a slot: one XREADGROUP) and one per
  unbucketed stream;
* the projection runner (:class:`projections.runner.ProjectionRunner`): the
  bucket feeds → settlement → ledger, consumer group ``sk-projections``, the new entries of
  the buckets the replica owns (their pending ones wherever they are), and of every bucket
  once per 5 s (a replica run with ``--no-projections`` leaves its buckets to the others);
* with ``--integrity``, the integrity projection (:mod:`projections.integrity`, docs/INTEGRITY.md):
  the bucket feeds → chip-dumping records, scores and flags, consumer group ``sk-integrity``,
  read as the projections read theirs (the owned buckets', every one each 5 s);
* timers: every append records the match's deadline in the store's index; with
  ``--broker-url`` (or ``SK_BROKER_URL``) the ``dramatiq workers.actors``
  processes dispatch and fire them (workers/dispatcher.py; serve sends nothing per
  commit unless ``--timer-messages``, the old path); without one, an in-process
  dispatcher, dramatiq worker (StubBroker) and sweeper fire them here and publish
  what they commit to the players' ``sk:out:<player>`` streams, with the same
  outbox TTL, maxlen and compact form as the command loops (a one-process deployment);
* ``/metrics`` on ``--metrics-port`` (projections.metrics).

Several serve processes share the buckets (and the projections' consumer groups): give
each a distinct ``--consumer`` (default ``<hostname>-<pid>``; keep it stable across
restarts of one replica so it finishes its own pending messages first).  ``--redis`` may
name any node of a Redis Cluster (engine/store/connect.py); ``--replica-acks N``
(``SK_REPLICA_ACKS``) makes every accepting, settling or balance-moving write wait for N
replicas before the command is acknowledged or its updates are published; without either,
N is 1 on a Cluster whose every master has a replica and 0 otherwise (logged at start,
gauge ``shuangkou_replica_acks``).

SIGTERM / SIGINT: the message in hand is finished and acknowledged, the rest
stay pending (another consumer or this one after a restart takes them), then
the process exits 0.
"""

from __future__ import annotations

import argparse
from typing import Any
import os
import socket


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--redis", metavar="URL", default=os.environ.get("SK_REDIS_URL"),
                        help="the event store's Redis (default $SK_REDIS_URL)")
    parser.add_argument("--broker-url", metavar="URL", default=None,
                        help="dramatiq's Redis for timer messages (default $SK_BROKER_URL; "
                             "none: timers run in this process)")
    parser.add_argument("--timer-messages", action="store_true",
                        default=os.environ.get("SK_TIMER_MESSAGES", "").strip().lower() in ("1", "true", "yes", "on"),
                        help="with --broker-url: also send a delayed timer message on every commit (the old "
                             "path, for workers older than the deadline dispatcher; default $SK_TIMER_MESSAGES, off)")
    parser.add_argument("--metrics-port", type=int, default=None, metavar="P",
                        help="serve Prometheus /metrics on this port (0: pick a free one; default: off)")
    parser.add_argument("--metrics-addr", default="127.0.0.1",
                        help="address for /metrics (default 127.0.0.1, this host only: pass 0.0.0.0 where a "
                             "Prometheus on another host scrapes it, as compose does)")
    parser.add_argument("--consumer", default=None,
                        help="consumer name in the groups (default <hostname>-<pid>)")
    parser.add_argument("--no-projections", action="store_true",
                        help="do not run the projection runner here (the other replicas' runners read the "
                             "feeds of this replica's buckets every 5 s; one replica at least must run it)")
    parser.add_argument("--no-lobby", action="store_true",
                        help="do not run the lobby (rooms' queues, tables) for the buckets this replica holds")
    parser.add_argument("--integrity", action="store_true",
                        help="also run the integrity projection (chip-dumping flags, docs/INTEGRITY.md; "
                             "consumer group sk-integrity)")
    parser.add_argument("--batch", type=int, default=10, help="inbox messages read per call (default 10)")
    parser.add_argument("--state-cache", type=int, default=20_000, metavar="N",
                        help="match states kept in memory (LRU; the append's version check validates them; "
                             "0: load every match from the store for each command; default 20000)")
    parser.add_argument("--outbox-ttl", type=int, default=None, metavar="SECONDS",
                        help="player outbox and reply streams expire this long after their last entry "
                             "(refreshed on every write; default $SK_OUTBOX_TTL or 86400)")
    parser.add_argument("--dead-maxlen", type=int, default=10_000, metavar="N",
                        help="dead letters sk:dead keeps, about (MAXLEN ~; default 10000); an inbox entry over "
                             "64 KB is kept as a record of its size and first 1 KB, never whole")
    parser.add_argument("--outbox-maxlen", type=int, default=None, metavar="N",
                        help="entries kept per outbox/reply stream (MAXLEN ~; default $SK_OUTBOX_MAXLEN or 200)")
    parser.add_argument("--full-view-every", type=int, default=None, metavar="N",
                        help="an update carries the player's full view at least every N match versions "
                             "(and on a join, the deal, the finish, a Sync; 1: always; "
                             "default $SK_FULL_VIEW_EVERY or 60)")
    parser.add_argument("--reconcile-every", type=float, default=300.0, metavar="SECONDS",
                        help="settle finished matches without a settlement every SECONDS "
                             "(shuangkou reconcile; 0: never; default 300)")
    parser.add_argument("--replica-acks", type=int, default=None, metavar="N",
                        help="every write that accepts a command, settles a match or moves a balance waits "
                             "for N replicas (WAIT) before the command is acknowledged or its updates are "
                             "published (default $SK_REPLICA_ACKS, else 1 on a Cluster whose every master has a "
                             "replica, else 0; docs/OPERATIONS.md)")
    parser.add_argument("--lease-ms", type=int, default=4_000, metavar="MS",
                        help="a bucket's lease runs out this long after its owner stopped renewing it (a "
                             "SIGKILLed replica's buckets move within it plus one renewal tick; default 4000)")
    parser.add_argument("--log-level", default=os.environ.get("SK_LOG_LEVEL", "INFO"))


def connect_redis(url: str, option: str, **kwargs):
    """A client for ``url`` (single node or Cluster, engine.store.connect) that answered; CliError otherwise."""
    from engine.store.connect import RedisUnavailable, connect

    from shuangkou.cli import CliError

    try:
        return connect(url, option=option, **kwargs)
    except RedisUnavailable as exc:
        raise CliError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    import logging
    import random
    import signal
    import sys
    import threading

    from shuangkou.cli import CliError

    if not args.redis:
        raise CliError("--redis URL is required (or set SK_REDIS_URL)")
    if args.batch < 1:
        raise CliError(f"--batch must be at least 1, got {args.batch}")
    if args.state_cache < 0:
        raise CliError(f"--state-cache must be 0 or more, got {args.state_cache}")
    from workers.runtime import delivery_from_env

    try:
        env_delivery = delivery_from_env()  # the workers read the same variables (workers/runtime.py)
    except RuntimeError as exc:
        raise CliError(str(exc)) from None
    for key, value in env_delivery.items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.outbox_ttl < 1:
        raise CliError(f"--outbox-ttl must be at least 1 second, got {args.outbox_ttl}")
    if not 1 <= args.dead_maxlen <= 10_000_000:
        raise CliError(f"--dead-maxlen must be 1..10000000, got {args.dead_maxlen}")
    if args.outbox_maxlen < 1:
        raise CliError(f"--outbox-maxlen must be at least 1, got {args.outbox_maxlen}")
    if args.full_view_every < 1:
        raise CliError(f"--full-view-every must be at least 1, got {args.full_view_every}")
    if args.replica_acks is not None and args.replica_acks < 0:
        raise CliError(f"--replica-acks must be 0 or more, got {args.replica_acks}")
    env_acks = os.environ.get("SK_REPLICA_ACKS", "")
    if args.replica_acks is None and env_acks.strip():
        from engine.store.replicas import resolve_replica_acks

        try:
            resolve_replica_acks(None, None, env_acks)  # a bad value is refused before connecting
        except ValueError as exc:
            raise CliError(str(exc)) from None
    if args.lease_ms < 400:
        raise CliError(f"--lease-ms must be at least 400, got {args.lease_ms}")
    if args.metrics_port is not None and not 0 <= args.metrics_port <= 65535:
        raise CliError(f"--metrics-port must be 0..65535, got {args.metrics_port}")
    logging.basicConfig(level=getattr(logging, str(args.log_level).upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    log = logging.getLogger("shuangkou.serve")

    from engine.service.channels import OPS, PLAYER, ChannelService
    from engine.service.operator import OperatorDesk
    from engine.service.rooms import RedisRooms, register_shipped
    from projections.ledger import RedisLedger
    from engine.service.inbox import InboxConsumer
    from engine.service.ownership import (
        BucketOwner, ConsumerThreads, GroupedWork, InboxGroup, SlotGroupWork, take_over_pending,
    )
    from engine.service.state_cache import StateCache
    from engine.store import keys
    from engine.store.redis_store import RedisEventStore
    from projections import metrics
    from workers.clock import SystemClock

    consumer = args.consumer or f"{socket.gethostname()}-{os.getpid()}"
    client = connect_redis(args.redis, "--redis")
    raw_store = RedisEventStore(client)
    from engine.store.replicas import ReplicaAcks, resolve_replica_acks

    # issue 35 §3: the flag, else SK_REPLICA_ACKS, else 1 on a Cluster whose every master has a replica
    args.replica_acks, why = resolve_replica_acks(client, args.replica_acks, env_acks)
    log.info("replica acks %d (%s)", args.replica_acks, why)
    metrics.set_replica_acks(args.replica_acks)
    acks = None
    if args.replica_acks:
        acks = raw_store.replica_acks = ReplicaAcks(client, args.replica_acks)
        acks.on_wait = metrics.observe_replica_wait
    check = getattr(raw_store, "check_layout", None)
    if check is not None:
        check()
    store = metrics.instrumented_store(raw_store)
    clock = SystemClock()
    rng = random.SystemRandom()  # unpredictable deals in production
    # one state cache for the process: the inbox consumers' commands and the in-process timer fires
    # decide against it (engine.service.state_cache; the append's version check validates it)
    cache_kwargs: dict = {"state_cache": StateCache(args.state_cache) if args.state_cache else None,
                          "cache_size": 0}  # no second cache beside the shared one

    delivery = {"outbox_ttl": args.outbox_ttl, "outbox_maxlen": args.outbox_maxlen,
                "full_view_every": args.full_view_every}
    broker_url = args.broker_url or os.environ.get("SK_BROKER_URL") or None
    timers = None
    broker_client = None
    if broker_url:
        from workers.broker import setup_broker
        from workers.runtime import make_service
        from workers.scheduler import DeadlineScheduler

        broker_client = connect_redis(broker_url, "--broker-url")  # a readable error, not dramatiq's
        setup_broker(broker_url)
        import workers.actors  # noqa: F401  (declares fire_deadline on the broker)

        # the workers' dispatcher reads the deadline index: no message per commit (issue 13 §5)
        on_commit = DeadlineScheduler(clock).on_commit if args.timer_messages else None
        service = make_service(store, clock, rng, on_commit=on_commit, **cache_kwargs)
    else:
        from workers.embedded import EmbeddedTimers

        from workers.runtime import gateway_publisher

        # the in-process timers publish what they commit (trustee plays, timeouts, removals) to
        # the players' sk:out:<player> streams like the workers do, with this process's delivery
        timers = EmbeddedTimers(store, clock=clock, rng=rng, publish=gateway_publisher(client, **delivery),
                                **cache_kwargs)
        service = timers.service
    isvc = metrics.InstrumentedService(service, store=store, clock=clock)
    if timers is not None:
        timers.runtime.service = isvc  # in-process timer fires are measured too

    # two channels (engine/service/channels.py): players on sk:inbox, lobby/operators on sk:ops;
    # each consumer refuses the command types its channel does not carry
    # balances come from the engine's own ledger, rooms from the registry (sk:rooms)
    ledger = RedisLedger(client)
    ledger.replica_acks = acks
    rooms = RedisRooms(client)
    register_shipped(rooms)  # the shipped configs as "points" and "wealth", where absent
    service.balances = ledger
    service.rooms = rooms
    # metrics are labelled by room: the registered rooms (a bounded set), anything else "other"
    metrics.follow_room_registry(rooms.names)  # a room another replica adds: read again on its first match
    desk = OperatorDesk(ledger, rooms, service=isvc, clock=clock, on_room_added=metrics.register_room_labels)
    loop = {"block_ms": 500, "count": args.batch, "reclaim_every_s": 15.0, "min_idle_ms": 30_000}
    consumers: list[InboxConsumer] = []  # every consumer this process ran (their stats, on stopping)

    def consumer_of(channel, stream: str, operator=None) -> InboxConsumer:
        c = InboxConsumer(client, ChannelService(isvc, channel, operator), consumer, stream=stream, **delivery,
                          dead_maxlen=args.dead_maxlen,
                          on_dead=lambda _code, _reason: metrics.observe_dead_letter(channel.name.replace("player", "inbox")))
        consumers.append(c)
        return c

    # on one node each channel's owned bucket streams are read together, one XREADGROUP for all
    # (a read carries every bucket's commands); a Cluster reads each bucket's two streams (one
    # slot) together, a thread per bucket
    from redis.cluster import RedisCluster

    # (blocking 0.5 s like every loop: a hand-over takes the streams of all the buckets it
    # moves out together and waits for one round, engine.service.ownership)
    groups = None if isinstance(client, RedisCluster) else \
        {ch.name: InboxGroup(f"read {ch.name}", **loop) for ch in (PLAYER, OPS)}

    # the live lobby (engine/service/lobby_worker.py): the rooms' queues and the tables of the
    # buckets this replica holds, on their lobby channels and feeds, in one thread
    from engine.service.lobby_worker import BothWork, build_lobby

    lobby = None if args.no_lobby else build_lobby(client, raw_store, isvc, ledger, rooms, clock, consumer, delivery)
    # the projections read the new feed entries of the buckets this replica owns (own() below)
    from projections.runner import RedisFeed

    feed = None if args.no_projections else RedisFeed(client, consumer=consumer, buckets=raw_store.buckets,
                                                      feed_maxlen=raw_store.feed_maxlen, follow_owned=True)
    integrity = None
    if args.integrity:  # the integrity projection follows the owned buckets' feeds the same way
        from engine.tools.integrity import integrity_runner

        integrity = integrity_runner(client, raw_store, consumer, follow_owned=True)
    followers = [f for f in (feed, getattr(integrity, "feed", None)) if f is not None]

    def own(bucket: int) -> Any:
        """This replica now holds ``bucket``'s lease: its pending commands first, then its channels."""
        streams = ((PLAYER, keys.inbox_key(bucket), None), (OPS, keys.ops_key(bucket), desk))
        for _channel, stream, _op in streams:
            taken = take_over_pending(client, stream, keys.SERVICE_GROUP, consumer)
            if taken:
                log.info("bucket %d: took over %d pending command(s) of %s", bucket, taken, stream)
        if groups is not None:
            work: Any = GroupedWork([groups[ch.name].add(consumer_of(ch, st, op)) for ch, st, op in streams])
        else:  # a Cluster: the bucket's two streams share its slot, one read for both
            work = SlotGroupWork([consumer_of(ch, st, op) for ch, st, op in streams], f"read b{bucket}", **loop)
        parts = [work] + ([lobby.own(bucket)] if lobby is not None else []) + [f.follow(bucket) for f in followers]
        return work if len(parts) == 1 else BothWork(parts)

    # the channels of no bucket: Credit/Debit/AddRoom on sk:ops, and the single inbox of the
    # builds before issue 24 (drained during an upgrade), read by every replica (consumer group)
    # on one node they join their channel's group (no thread and no read of their own)
    shared = [(OPS, consumer_of(OPS, keys.OPS, desk)), (PLAYER, consumer_of(PLAYER, keys.INBOX))]
    unbucketed = (GroupedWork([groups[ch.name].add(c) for ch, c in shared]) if groups is not None
                  else ConsumerThreads([c for _ch, c in shared], "shared", **loop))
    owner = BucketOwner(client, consumer, own, buckets=raw_store.buckets, ttl_ms=args.lease_ms,
                        tick_ms=max(50, min(500, args.lease_ms // 8)), on_owned=metrics.set_buckets_owned)
    stop = threading.Event()
    threads: list[threading.Thread] = []

    runner = None
    if feed is not None:
        from engine.service.publish import message_publisher
        from projections.ladders import RatingProjector, RedisRatingStore
        from projections.runner import ProjectionRunner

        runner = ProjectionRunner(raw_store, ledger, feed,
                                  on_settled=metrics.observe_settled,
                                  ratings=RatingProjector(RedisRatingStore(client),
                                                          message_publisher(client, **delivery)),
                                  on_error=lambda _match, _reason: metrics.observe_dead_letter("feed"),
                                  on_parked=lambda _match, code, _reason: metrics.observe_parked(code))

        def reconciled(report) -> None:
            metrics.observe_reconciled(len(report.settled))
            if report.settled:
                log.warning("reconcile settled %d finished match(es) the feed had lost", len(report.settled))

        every = args.reconcile_every if args.reconcile_every and args.reconcile_every > 0 else None
        t = threading.Thread(target=runner.run_forever, args=(stop,), name="projections", daemon=True,
                             kwargs={"reconcile_every_s": every, "on_reconciled": reconciled})
        threads.append(t)

    if lobby is not None:
        threads.append(threading.Thread(target=lobby.run, args=(stop,), name="lobby", daemon=True))

    if integrity is not None:
        threads.append(threading.Thread(target=integrity.run_forever, args=(stop,), name="integrity", daemon=True))

    server = None
    if args.metrics_port is not None:
        buckets = getattr(raw_store, "buckets", keys.DEFAULT_BUCKETS)
        feeds = ([keys.feed_key(b) for b in range(buckets)] + PLAYER.streams(buckets) + OPS.streams(buckets))
        extra = [metrics.FeedLagCollector(client, feeds),
                 *([metrics.StateCacheCollector(cache_kwargs["state_cache"])] if cache_kwargs["state_cache"] is not None
                   else []),
                 metrics.RedisMemoryCollector({"store": client, **({"broker": broker_client} if broker_client else {})})]
        if broker_client is not None:
            extra.append(metrics.DeadLetterQueueCollector(broker_client, queues=("sk-timers",),
                                                          namespace="sk-dramatiq"))
        try:
            server, _ = metrics.start_metrics_server(args.metrics_port, addr=args.metrics_addr,
                                                     extra_collectors=extra)
        except OSError as exc:
            raise CliError(f"cannot serve /metrics on {args.metrics_addr}:{args.metrics_port}: "
                           f"{exc.strerror or exc}") from None
        log.info("metrics on http://%s:%d/metrics", args.metrics_addr, server.server_port)
        # machine-readable line for scripts and tests that pass --metrics-port 0
        print(f"metrics-port {server.server_port}", flush=True)

    def on_signal(signum, _frame) -> None:
        log.info("signal %s: finishing the message in hand, then stopping", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    for t in threads:
        t.start()
    log.info("rooms registered: %s", ", ".join(rooms.names()) or "(none)")
    log.info("serving: consumer %s, the channels of the buckets it owns (sk:{b<N>}:inbox + sk:{b<N>}:ops, "
             "lease %d ms) and %s + %s (group %s), timers %s, projections %s", consumer, args.lease_ms,
             keys.OPS, keys.INBOX, keys.SERVICE_GROUP,
             "dramatiq " + broker_url.split("@")[-1] if broker_url else "in-process",
             "on" if runner is not None else "off")
    from engine.service.gc_tuning import tune_gc

    tune_gc()  # what start-up loaded is never walked again; fewer young collections
    print(f"ready consumer={consumer}", flush=True)
    try:
        owner.run(stop)  # hands every bucket over on stopping
    finally:
        stop.set()
        unbucketed.stop()
        for g in (groups or {}).values():
            g.stop()
        for t in threads:
            t.join(timeout=10)
        if timers is not None:
            timers.stop()
        if server is not None:
            server.shutdown()
        metrics.mark_process_dead()
        total = {k: sum(getattr(c.stats, k) for c in consumers)
                 for k in ("processed", "accepted", "rejected", "duplicates", "dead")}
        log.info("stopped: %(processed)d messages handled (%(accepted)d accepted, %(rejected)d rejected, "
                 "%(duplicates)d duplicates, %(dead)d dead)", total)
    return 0
