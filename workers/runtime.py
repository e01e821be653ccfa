"""What the timer actors run against: the event store, the command service,
the clock and the deadline scheduler.

A worker process builds it lazily from the environment (``SK_REDIS_URL`` →
:class:`engine.store.redis_store.RedisEventStore`, the system clock,
``SK_BROKER_URL`` for the messages it schedules); the embedded default
(:mod:`workers.embedded`) installs its own with :func:`install`.

:func:`fire` is the one way a deadline is acted on — by the ``fire_deadline``
actor and by the sweeper alike.  It builds the timer command with an id
derived from (match id, version, kind) and runs it through
``MatchService.execute``, exactly like a player's command: a second firing
of the same deadline is a duplicate by command id, a firing for an older
version is refused by ``decide`` as stale, and both are no-ops.

Clocks that stop during outages (issue 35 §4): before a turn or ready clock runs
out, :func:`clock_pause` asks whether the player could have acted.  The match's
writes must be confirmable now (with replica acks, an INCR + WAIT on its node; a
failure leaves the deadline for later and is remembered), and the update that
started the clock must have reached the player's stream (its entry id is when it
was published), and no command of the player's, added to the bucket's inbox by the
deadline, may be waiting for the command service (``unhandled``: serve down, cut off or
handing the bucket over).  Otherwise the timer appends ``ExtendClock`` instead of the timeout:
ClockExtended moves the deadline (the brief's and the view's too) by the delay of
the publication (``unpublished``), or gives a fresh clock after a period the writes
could not be confirmed (``unconfirmed``), and is published like any timer outcome.
"""

from __future__ import annotations

import logging
import os
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import redis.exceptions as redis_errors

from engine.match.commands import CommandBase, ExtendClock, ReadyTimeout, TrusteeAct, TurnTimeout
from engine.match.errors import Rejected, StaleCommand
from engine.match.deadline import DeadlineKind
from engine.match.events import ClockExtended, PlayerDisconnected, PlayerReconnected
from engine.store import keys
from engine.store.base import EventStore, WrongVersion
from engine.store.transient import Backoff, is_transient
from workers.clock import SystemClock, read_ms
from workers.settings import env_int

log = logging.getLogger("workers.timers")

STORE_URL_ENV = "SK_REDIS_URL"
#: 1: the old path, every commit sends a delayed fire_deadline message (default 0: the
#: dispatcher moves due deadlines from the store's index into dramatiq, workers/dispatcher.py)
TIMER_MESSAGES_ENV = "SK_TIMER_MESSAGES"
GRACE_ENV = "SK_SWEEP_GRACE_MS"
DEFAULT_GRACE_MS = 2_000

FireResult = Literal["committed", "duplicate", "stale", "rejected", "conflict", "extended"]

#: a clock whose update reached the player this much later than its event is paused
#: for that long (issue 35 §4; ``SK_CLOCK_PAUSE_MIN_MS``); publication takes milliseconds
CLOCK_PAUSE_MIN_MS = 1_000
#: outbox entries read a round trip, and at most in all, to find when a player's update was
#: published (a stream holds about 200: engine/service/publish.py DEFAULT_OUTBOX_MAXLEN)
_OUTBOX_PAGE = 100
_OUTBOX_SCAN_LIMIT = 1_000
#: how far before a version's own time the search for its publication starts: the version's
#: time is serve's clock, an entry id Redis's (a clock ahead of Redis's by up to this is covered)
_CLOCK_SKEW_MS = 2_000

#: how long fire() keeps retrying a publish that Redis refuses for a transient reason
#: (OOM, READONLY, a dropped connection…), in seconds: under dramatiq's time limit; after
#: that the message fails and is retried by dramatiq, whose re-run publishes again
PUBLISH_RETRY_S = 20.0

_COMMANDS: dict[str, type[TurnTimeout | TrusteeAct | ReadyTimeout]] = {
    "turn": TurnTimeout,
    "trustee": TrusteeAct,
    "ready": ReadyTimeout,
}


#: the command-id limit of the protocol (engine.match.commands.CommandBase.command_id)
COMMAND_ID_LIMIT = 200


def timer_command_id(match_id: str, version: int, kind: str) -> str:
    """The id of the timer command for one deadline: the same for every firing of it.

    ``timer:<kind>:<version>:<match_id>`` while that fits the 200-character limit of
    command ids; for a longer match id (the protocol allows 200 characters) the match
    id is replaced by ``#`` and 40 hex digits of its SHA-256.  Command ids are kept per
    match, so the short form only has to be unique within one match.

    >>> timer_command_id("m1", 7, "turn")
    'timer:turn:7:m1'
    >>> long = timer_command_id("x" * 200, 12345, "trustee")
    >>> long.startswith("timer:trustee:12345:#"), len(long) <= 200
    (True, True)
    """
    plain = f"timer:{kind}:{version}:{match_id}"
    if len(plain) <= COMMAND_ID_LIMIT:
        return plain
    import hashlib

    digest = hashlib.sha256(match_id.encode("utf-8", "surrogatepass")).hexdigest()[:40]
    return f"timer:{kind}:{version}:#{digest}"


def timer_command(match_id: str, version: int, kind: DeadlineKind | str) -> CommandBase:
    try:
        cls = _COMMANDS[kind]
    except KeyError:
        raise ValueError(f"unknown deadline kind {kind!r} (turn, trustee or ready)") from None
    return cls(command_id=timer_command_id(match_id, version, kind), match_id=match_id,
               version=int(version))


def make_service(store: EventStore, clock: Any, rng: Any = None,
                 on_commit: Callable[[Any], None] | None = None, *, cache_size: int = 20_000,
                 state_cache: Any = None, **kwargs: Any) -> Any:
    """The ``MatchService`` the timers (and ``serve``) run: ``on_commit`` schedules
    each new deadline, and a per-process :class:`engine.service.state_cache.StateCache`
    (``state_cache``, or a new one of ``cache_size`` states; 0 = none) spares the
    fold from the last snapshot on every command — the append's version check
    validates a cached state, so it is never trusted stale.
    """
    from engine.service.service import MatchService
    from engine.service.state_cache import StateCache

    if rng is None:
        rng = random.Random()
    if state_cache is None and cache_size > 0:
        state_cache = StateCache(cache_size)
    return MatchService(store, clock, rng, on_commit=on_commit, state_cache=state_cache, **kwargs)


@dataclass
class Runtime:
    store: EventStore
    service: Any  # engine.service.service.MatchService
    clock: Any
    scheduler: Any  # workers.scheduler.DeadlineScheduler, or None (the dispatcher reads the index)
    grace_ms: int = DEFAULT_GRACE_MS
    #: called with (command, outcome) after a timer command committed: tells the
    #: players (their ``sk:out:<player>`` streams, as the gateway does for their own commands)
    publish: Callable[[CommandBase, Any], None] | None = None
    stats: dict[str, int] = field(default_factory=dict)
    #: deadlines the sweeper skips for now after failures (workers.sweeper.SweepBackoff)
    sweep_backoff: Any = None
    #: timer command ids committed in this process whose publish failed (the retried
    #: message publishes them again; bounded)
    unpublished: set[str] = field(default_factory=set)
    #: the in-flight marks of dispatched deadlines (workers.dispatcher.DueClaims): a firing
    #: releases its deadline's mark, whatever the result
    claims: Any = None
    #: a publication later than this pauses the clock (:func:`clock_pause`); None: no pausing.
    #: Publication times are the streams' entry ids (Redis's wall clock): only a runtime on
    #: the system clock compares them (:func:`clock_pause_setting`)
    clock_pause_min_ms: int | None = None
    #: match id -> when this process first found its writes unconfirmable (a turn or ready
    #: deadline it could not act on: NOREPLICAS, CLUSTERDOWN, a lost connection)
    unconfirmed_since: dict[str, int] = field(default_factory=dict)
    _stats_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def now_ms(self) -> int:
        return read_ms(self.clock)

    def count(self, key: str) -> None:
        with self._stats_lock:
            self.stats[key] = self.stats.get(key, 0) + 1


_runtime: Runtime | None = None
_lock = threading.Lock()

RuntimeHook = Callable[[Runtime], "Runtime | None"]
_build_hooks: list[RuntimeHook] = []


def on_build(hook: RuntimeHook) -> RuntimeHook:
    """Register ``hook(runtime)``, run on every runtime :func:`from_env` builds before it
    is used (e.g. to wrap the store and service for metrics: workers/prometheus.py).
    A hook may change the runtime in place or return a replacement.  Registering the
    same hook twice has no effect.  Usable as a decorator."""
    with _lock:
        if hook not in _build_hooks:
            _build_hooks.append(hook)
    return hook


def remove_build_hook(hook: RuntimeHook) -> None:
    with _lock:
        if hook in _build_hooks:
            _build_hooks.remove(hook)


def install(rt: Runtime) -> Runtime:
    global _runtime
    with _lock:
        _runtime = rt
    return rt


def uninstall(rt: Runtime | None = None) -> None:
    global _runtime
    with _lock:
        if rt is None or _runtime is rt:
            _runtime = None


def current() -> Runtime:
    """The installed runtime, built from the environment on first use."""
    global _runtime
    rt = _runtime
    if rt is not None:
        return rt
    with _lock:
        if _runtime is None:
            _runtime = from_env()
        return _runtime


def from_env() -> Runtime:
    url = os.environ.get(STORE_URL_ENV)
    if not url:
        raise RuntimeError(
            f"{STORE_URL_ENV} is not set: a timer worker process needs the event store's Redis URL "
            "(the embedded default installs its own runtime with workers.embedded)")
    from engine.store.redis_store import RedisEventStore
    from workers.dispatcher import claims_for
    from workers.scheduler import DeadlineScheduler

    from engine.store.replicas import ReplicaAcks, resolve_replica_acks

    store = RedisEventStore.from_url(url)
    # a timer's append waits for N replicas: SK_REPLICA_ACKS, else 1 on a Cluster whose every
    # master has a replica, else 0 (issue 35 §3)
    acks, why = resolve_replica_acks(store.client, None, os.environ.get("SK_REPLICA_ACKS", ""))
    log.info("replica acks %d (%s)", acks, why)
    if acks:
        store.replica_acks = ReplicaAcks(store.client, acks)
    clock = SystemClock()
    scheduler = DeadlineScheduler(clock) if timer_messages_from_env() else None
    # the old path alone (messages per commit, no dispatcher here): nothing marks deadlines
    # in flight, so firing them releases nothing (a dispatcher in another process still
    # marks: run every worker with its dispatcher on, the default)
    legacy_only = scheduler is not None and env_int("SK_DISPATCH_INTERVAL_MS", 1) == 0
    service = make_service(store, clock, None, on_commit=scheduler.on_commit if scheduler else None,
                           cache_size=env_int("SK_STATE_CACHE", 20_000))
    grace = env_int(GRACE_ENV, DEFAULT_GRACE_MS)
    log.info("timer runtime: store %s, grace %d ms", url.split("@")[-1], grace)
    publish = None if os.environ.get("SK_TIMERS_PUBLISH", "1") == "0" else gateway_publisher(store.client)
    rt = Runtime(store=store, service=service, clock=clock, scheduler=scheduler,
                 grace_ms=grace, publish=publish, claims=None if legacy_only else claims_for(store),
                 clock_pause_min_ms=clock_pause_setting(clock))
    for hook in list(_build_hooks):
        rt = hook(rt) or rt
    return rt


def clock_pause_setting(clock: Any) -> int | None:
    """``SK_CLOCK_PAUSE_MIN_MS`` (default :data:`CLOCK_PAUSE_MIN_MS`; 0: clocks never pause)
    for a runtime on the system clock; None for any other clock (a test's): publication
    times are Redis's wall-clock times, comparable with the system clock only."""
    if not isinstance(clock, SystemClock):
        return None
    n = env_int("SK_CLOCK_PAUSE_MIN_MS", CLOCK_PAUSE_MIN_MS)
    return n if n > 0 else None


def timer_messages_from_env() -> bool:
    """``SK_TIMER_MESSAGES`` set to 1 / true / yes / on: the old per-commit timer messages."""
    return os.environ.get(TIMER_MESSAGES_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def gateway_publisher(client: Any, **delivery: Any) -> Callable[[CommandBase, Any], None] | None:
    """Publish a timer outcome to the players' outbound streams exactly as the
    command gateway publishes a player's command (per-player redacted events +
    the player's full view): a timeout notice, a trustee play, a removal reaches
    the players although no gateway handled a command.  ``delivery``: the
    :class:`~engine.service.publish.Publisher`'s ``outbox_ttl``, ``outbox_maxlen``
    and ``full_view_every`` (default: :func:`delivery_from_env`, the same settings
    as ``serve``'s).  None if the gateway module is not available."""
    try:
        from engine.service.publish import Publisher
    except ImportError:  # pragma: no cover
        return None
    # the publisher alone: the timers never consume or create the command channels (the
    # worker's Redis user may only read sk:{b*}:inbox, for clock_pause; docs/SECURITY.md)
    publisher = Publisher(client, consumer="sk-timers", **(delivery or delivery_from_env()))
    return lambda command, outcome: publisher.publish(command, outcome)


#: the environment variables that set the player outboxes' delivery, read by ``serve``
#: (its --outbox-ttl / --outbox-maxlen / --full-view-every defaults) and by the timer workers
DELIVERY_ENV = {"outbox_ttl": "SK_OUTBOX_TTL", "outbox_maxlen": "SK_OUTBOX_MAXLEN",
                "full_view_every": "SK_FULL_VIEW_EVERY"}


def delivery_from_env() -> dict[str, int]:
    """``{outbox_ttl, outbox_maxlen, full_view_every}`` from ``SK_OUTBOX_TTL``,
    ``SK_OUTBOX_MAXLEN``, ``SK_FULL_VIEW_EVERY`` (unset: the Publisher's defaults), so
    the workers' updates expire and are capped like the ones ``serve`` writes."""
    from engine.service.publish import DEFAULT_FULL_VIEW_EVERY, DEFAULT_OUTBOX_MAXLEN, DEFAULT_OUTBOX_TTL

    defaults = {"outbox_ttl": DEFAULT_OUTBOX_TTL, "outbox_maxlen": DEFAULT_OUTBOX_MAXLEN,
                "full_view_every": DEFAULT_FULL_VIEW_EVERY}
    return {k: env_int(DELIVERY_ENV[k], v) for k, v in defaults.items()}


def fire(match_id: str, version: int, kind: str, rt: Runtime | None = None,
         source: str = "message", *, release: bool = True) -> FireResult:
    """Act on one deadline (idempotent; see the module docstring).

    Once it returns, the deadline's in-flight mark is released (``rt.claims``,
    unless ``release`` is False: the caller releases a batch at once); when it
    raises, the mark stays and the dispatcher sends the deadline again after its
    in-flight lease, with back-off (workers/dispatcher.py)."""
    rt = rt or current()
    result = _fire(match_id, version, kind, rt, source)
    if release and rt.claims is not None:
        rt.claims.release([(match_id, int(version), kind)])
    return result


def _fire(match_id: str, version: int, kind: str, rt: Runtime, source: str) -> FireResult:
    cmd = timer_command(match_id, version, kind)
    # Cheap pre-check: a deadline whose version the match has left is a no-op
    # (stale, or this very command already applied: a duplicate).  Skipping
    # ``execute`` here spares the service's full-stream duplicate lookup, which
    # matters when a backlog makes the sweeper and late messages overlap.
    # Versions only grow, so a cached state already past ``version`` proves the
    # deadline stale without a round trip (most timer messages are stale: every
    # commit sends one, and the one before it is superseded).
    cached_version = getattr(rt.service, "cached_version", None)
    known = cached_version(match_id) if callable(cached_version) else None
    if isinstance(known, int) and known > int(version) and cmd.command_id in rt.unpublished:
        known = None  # committed here but its publish failed: the re-run below publishes it again
    if isinstance(known, int) and known > int(version):
        log.debug("%s %s v%d (%s): stale, the match is at v%d or later", kind, match_id, version, source, known)
        rt.count("stale")
        return "stale"
    if isinstance(known, int) and known == int(version):
        # the cached state is at this deadline's version: decide on it at once (the
        # append's version check validates it; a match that moved on meanwhile makes
        # execute decide again on the truth, where this command is stale or a duplicate)
        state_now, current_version = None, None
    else:
        try:
            state_now = rt.service.load_state(match_id)
            current_version = state_now.version
        except Exception as exc:
            if is_transient(exc):
                raise  # the store cannot answer: the message is retried (never lost)
            state_now, current_version = None, None
    if current_version is not None and current_version > int(version) and rt.publish is not None:
        # this very deadline may have been committed by a worker that died before it
        # published (a redelivered message): publish its stored events again
        if _republish(rt, cmd, state_now):
            rt.count("duplicate")
            return "duplicate"
    if current_version is not None and current_version != int(version):
        log.debug("%s %s v%d (%s): stale or duplicate, the match is at v%d",
                  kind, match_id, version, source, current_version)
        rt.count("stale")
        return "stale"
    if kind in ("turn", "ready") and (state_now is not None or known == int(version)):
        if state_now is None:  # the cached state is at this version: read from the cache
            state_now = rt.service.load_state(match_id)
        try:
            pause = clock_pause(rt, state_now, int(version), kind)
        except Exception as exc:
            _unconfirmed(rt, match_id, exc)
            raise
        if pause is not None:
            by_ms, reason = pause
            cmd = ExtendClock(command_id=f"clock:{reason}:{int(version)}:{match_id}"[:COMMAND_ID_LIMIT],
                              match_id=match_id, version=int(version), by_ms=by_ms, reason=reason)
    try:
        outcome = rt.service.execute(cmd)
    except WrongVersion as exc:
        # another writer appended between our load and append: this deadline is stale now
        log.debug("%s %s v%d (%s): conflict, %s", kind, match_id, version, source, exc)
        rt.count("conflict")
        return "conflict"
    except StaleCommand as exc:
        log.debug("%s %s v%d (%s): stale, %s", kind, match_id, version, source, exc)
        rt.count("stale")
        return "stale"
    except Rejected as exc:
        log.info("%s %s v%d (%s): refused (%s) %s", kind, match_id, version, source, exc.code, exc)
        rt.count("rejected")
        return "rejected"
    except Exception as exc:
        if kind in ("turn", "ready"):
            _unconfirmed(rt, match_id, exc)
        raise
    rejection = getattr(outcome, "rejection", None)
    if rejection is not None:
        if isinstance(rejection, StaleCommand) or getattr(rejection, "code", None) == "stale":
            log.debug("%s %s v%d (%s): stale, %s", kind, match_id, version, source, rejection)
            rt.count("stale")
            return "stale"
        log.info("%s %s v%d (%s): refused %s", kind, match_id, version, source, rejection)
        rt.count("rejected")
        return "rejected"
    if getattr(outcome, "duplicate", False):
        log.debug("%s %s v%d (%s): duplicate, already handled", kind, match_id, version, source)
        if rt.publish is not None and getattr(outcome, "events", None):
            # applied before, maybe by a worker that died before publishing: publish the
            # stored events again (updates are at-least-once; players dedupe on version)
            publish_outcome(rt, cmd, outcome)
        rt.count("duplicate")
        return "duplicate"
    if rt.publish is not None:
        publish_outcome(rt, cmd, outcome)
    if isinstance(cmd, ExtendClock):
        rt.unconfirmed_since.pop(match_id, None)
        log.info("%s %s v%d (%s): clock paused %d ms (%s)", kind, match_id, version, source, cmd.by_ms, cmd.reason)
        rt.count("extended")
        _count_clock_paused(kind, cmd.reason)
        return "extended"
    rt.count("committed")
    rt.count(f"committed_{source}")
    return "committed"


def clock_pause(rt: Runtime, state: Any, version: int, kind: str) -> tuple[int, str] | None:
    """``(by_ms, reason)`` when the ``kind`` clock of ``version`` must move later instead of
    running out, None when it may run out (issue 35 §4).

    * The match's writes must be confirmable now (the store's replica acks: an INCR + WAIT
      on its node; a transient failure propagates, the deadline is retried later and the
      player's clock counts as paused from then).  After such a period the player gets a
      fresh clock: ``unconfirmed``, by ``now + the clock's length - deadline``.
    * No Play / Pass (turn) or Ready (ready) of the players the clock runs for may wait in the
      bucket's inbox, added by the deadline and not handled by the command service
      (:func:`unhandled_in_time`): they get a fresh clock, ``unhandled``, so that the command
      is decided first; bounded like the publication pauses in a row.
    * The update that started the clock must be in the stream of each player the clock runs
      for, published in time: the clock is moved by how late it was published (never
      published yet: until now), when that is more than :attr:`Runtime.clock_pause_min_ms`
      and the moved deadline is still ahead (``unpublished``).  A player whose socket a
      gateway holds, connected when the clock started, must also have been handed it
      (``undelivered``).  A turn clock starts
      with ``version``; the ready clock with the last seat change (``table_version``), and
      runs on through the other player's Ready: it counts from its start, and a handing of a
      later update by the deadline shows the player the table in time.
    """
    if state is None or state.version != version or state.deadline_kind != kind or state.deadline_at is None:
        return None  # stale or moved on: execute says so
    now = rt.now_ms()
    confirm = getattr(rt.store, "confirm_replicated", None)
    if callable(confirm) and getattr(rt.store, "replica_acks", None) is not None:
        confirm(state.match_id)  # NOREPLICAS / CLUSTERDOWN propagate: not now
    cfg = state.config
    length = int(round(1000 * (cfg.turn_seconds if kind == "turn" else cfg.ready_seconds))) if cfg else 0
    since = rt.unconfirmed_since.get(state.match_id)
    if since is not None:
        by = now + length - state.deadline_at
        if by >= 1:
            return by, "unconfirmed"
        rt.unconfirmed_since.pop(state.match_id, None)
    if rt.clock_pause_min_ms is None:
        return None  # not on the system clock: the streams' entry ids are not comparable
    if kind == "turn":
        seat = state.seats[state.turn] if state.turn is not None else None
        players = [seat.player] if seat is not None else []
    else:
        players = [s.player for s in state.seats if s is not None and not s.ready]
    client = getattr(rt.store, "client", None)
    if client is None or not players:
        return None
    buckets = int(getattr(rt.store, "buckets", keys.DEFAULT_BUCKETS))
    if (unhandled_in_time(client, state, kind, players, buckets)
            and paused_in_a_row(rt.store, state.match_id, version) < max(length, _grace_ms(cfg))):
        # the player acted in time; the command service has not taken it yet (serve down, cut
        # off, or handing the bucket over): a whole clock from now, for it to be decided first
        return max(1, now + length - state.deadline_at), "unhandled"
    if rt.publish is None:
        return None  # nobody here publishes: no publication to wait for
    connected = {s.player for s in state.seats if s is not None and s.connected}
    started, since, started_at = version, int(state.last_ts or 0), int(state.last_ts or 0)
    if kind == "ready":  # set by the last seat change, moved by the pauses since
        started, started_at = state.table_version, state.deadline_at - length
        first = rt.store.load(state.match_id, after=max(0, started - 1))
        since = int(first[0].ts) if first and first[0].seq == started else started_at
        connected = connected_at_start(first, started, connected)
    delay, reason = 0, "unpublished"
    for player in players:
        published = published_at(client, player, state.match_id, started, since)
        at, why = (now, "unpublished") if published is None else (published, "unpublished")
        if published is not None and player in connected:
            through_gateway, delivered = delivered_at(client, player, state.match_id, started, now)
            in_time = kind == "ready" and delivered is not None and delivered <= state.deadline_at
            if through_gateway and (delivered is None or delivered > published) and not in_time:
                at, why = (now if delivered is None else delivered), "undelivered"
        if at - started_at > delay:
            delay, reason = at - started_at, why
    if delay > rt.clock_pause_min_ms and now < state.deadline_at + delay:
        if paused_in_a_row(rt.store, state.match_id, version) >= max(length, _grace_ms(cfg)):
            # the updates carrying the paused clock did not reach the player either (publishing
            # is broken, or the player's gateway is gone for good): the pauses in a row stop
            # after the room's reconnect grace (at least one clock's length), so a match never
            # waits for ever
            return None
        return delay, reason
    return None


def connected_at_start(events: Any, started: int, now: set[str]) -> set[str]:
    """The players connected when the clock of version ``started`` began, from those connected
    ``now`` and the match's ``events`` since: a player's first PlayerDisconnected or
    PlayerReconnected after ``started`` tells their state before it.  One away since (their
    gateway died, say) is checked by their receipt like one connected."""
    at_start = set(now)
    told: set[str] = set()
    for e in events:
        if e.seq <= started or not isinstance(e, (PlayerDisconnected, PlayerReconnected)) or e.player in told:
            continue
        told.add(e.player)
        if isinstance(e, PlayerDisconnected):
            at_start.add(e.player)
        else:
            at_start.discard(e.player)
    return at_start


#: inbox entries read per round trip, and at most in all, to find a player's command added
#: before their deadline; a longer backlog by the deadline counts as unhandled (serve is behind)
_INBOX_PAGE = 500
_INBOX_SCAN_LIMIT = 10_000
_TAKES_TURN = {"turn": ("Play", "Pass"), "ready": ("Ready",)}


def unhandled_in_time(client: Any, state: Any, kind: str, players: list[str],
                      buckets: int = keys.DEFAULT_BUCKETS) -> bool:
    """Whether one of ``players`` added to the match's bucket inbox (``sk:{b<N>}:inbox``), by the
    ``kind`` clock's deadline, a command that would act on it (``turn``: a Play or Pass of the
    player on turn; ``ready``: a Ready), decided on the current table (no ``expected_version``,
    or one the table has not moved past), that the command service (group ``sk-service``) has
    not handled yet: never read by it, or read and not acknowledged (its reader died).  As
    many entries as ``_INBOX_SCAN_LIMIT`` unhandled by the deadline say True: serve is behind.
    A worker not allowed to read the inbox (an ACL from before this check) says False."""
    stream = keys.inbox_key(keys.bucket_of(state.match_id, buckets))
    deadline = str(int(state.deadline_at))
    acts = _acts_on(state, _TAKES_TURN.get(kind, ()), players)
    try:
        if not client.exists(stream):
            return False  # no inbox: nothing was sent
        last = "0-0"
        for g in client.xinfo_groups(stream):
            if _text(g.get("name")) == keys.SERVICE_GROUP:
                last = _text(g.get("last-delivered-id")) or "0-0"
        scanned, start = 0, f"({last}"
        while scanned < _INBOX_SCAN_LIMIT:  # never read by the service
            page = client.xrange(stream, min=start, max=deadline, count=_INBOX_PAGE)
            if any(acts(fields) for _id, fields in page):
                return True
            scanned += len(page)
            if len(page) < _INBOX_PAGE:
                break
            start = f"({_text(page[-1][0])}"
        start = "-"
        while last != "0-0" and scanned < _INBOX_SCAN_LIMIT:  # read and not acknowledged
            pending = client.xpending_range(stream, keys.SERVICE_GROUP, min=start, max=deadline,
                                            count=_INBOX_PAGE)
            pipe = client.pipeline(transaction=False)
            for p in pending:
                pipe.xrange(stream, min=p["message_id"], max=p["message_id"], count=1)
            if any(acts(fields) for found in (pipe.execute() if pending else ())
                   for _id, fields in found):
                return True
            scanned += len(pending)
            if len(pending) < _INBOX_PAGE:
                break
            start = f"({_text(pending[-1]['message_id'])}"
    except Exception as exc:
        if is_transient(exc) and not isinstance(exc, redis_errors.NoPermissionError):
            raise  # not now: the deadline is tried again
        log.warning("cannot read %s (%s): a command not handled yet does not pause the clock", stream, exc)
        return False
    return scanned >= _INBOX_SCAN_LIMIT


def _acts_on(state: Any, types: tuple[str, ...], players: list[str]) -> Callable[[Any], bool]:
    """Whether an inbox entry's fields hold a command of ``types`` by one of ``players`` that
    would be decided on ``state``'s current table."""
    from engine.service.inbox_message import decode

    def acts(fields: Any) -> bool:
        f = {_text(k): v for k, v in fields.items()}
        try:
            cmd = decode(f.get("c", f.get("j")), "c" not in f)
        except Exception:
            return False  # not a command: the service dead-letters it
        ev = getattr(cmd, "expected_version", None)
        return bool(cmd.match_id == state.match_id and getattr(cmd, "type", None) in types
                    and getattr(cmd, "player", None) in players
                    and (ev is None or state.table_version <= ev <= state.version))

    return acts


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value) if value is not None else ""


def _grace_ms(cfg: Any) -> int:
    return int(round(1000 * cfg.reconnect_grace_seconds)) if cfg is not None else 0


def paused_in_a_row(store: EventStore, match_id: str, version: int, look_back: int = 20) -> int:
    """The milliseconds the clock was moved by the ``unpublished`` / ``undelivered`` pauses that
    end the match's log at ``version`` (0: its last event is no such pause)."""
    if version <= 0:
        return 0
    total = 0
    for e in reversed(list(store.load(match_id, after=max(0, version - look_back)))):
        if not isinstance(e, ClockExtended) or e.reason == "unconfirmed":
            break
        total += e.by_ms
    return total


def delivered_at(client: Any, player: str, match_id: str, version: int, now_ms: int) -> tuple[bool, int | None]:
    """``(through_gateway, at_ms)`` from the player's delivery receipt (``sk:seen:{player}``,
    gateway/receipts.py, engine/service/receipts.py): whether a gateway's socket of theirs is
    open (its last word is not that the player's socket closed), and when it was handed the
    update of ``match_id`` at ``version`` or later (None: not yet, the gateway died or
    restarts; or handed over, never acknowledged by a client that acknowledges, by a gateway
    whose liveness beat stopped: ``handed_at``)."""
    from engine.store import keys
    from engine.service.receipts import handed_at, read

    try:
        receipt = read(client.get(keys.receipt_key(player)))
        beat: int | None = None
        if (receipt is not None and receipt.state == "open" and receipt.gateway and receipt.acked is not None
                and receipt.match == match_id and receipt.acked < version <= receipt.version):
            raw = client.get(keys.gateway_beat_key(receipt.gateway))
            try:
                beat = None if raw is None else int(raw)
            except ValueError:
                beat = None
    except Exception as exc:
        from redis.exceptions import NoPermissionError

        if is_transient(exc) and not isinstance(exc, NoPermissionError):
            raise  # not now: the deadline is tried again
        # a receipt this worker may not read (an ACL from before receipts): publication alone
        log.warning("cannot read %s's delivery receipt (%s): the clock pauses for publication only", player, exc)
        return False, None
    return handed_at(receipt, match_id, version, beat, now_ms)


def _unconfirmed(rt: Runtime, match_id: str, exc: BaseException) -> None:
    """A transient failure before a turn or ready clock could be acted on: the match's
    writes cannot be confirmed now; its player's clock counts as paused from now on."""
    if not is_transient(exc):
        return
    if len(rt.unconfirmed_since) > 100_000:  # bounded
        rt.unconfirmed_since.clear()
    rt.unconfirmed_since.setdefault(match_id, rt.now_ms())


def published_at(client: Any, player: str, match_id: str, version: int, since_ms: int | None = None) -> int | None:
    """When the first entry of match ``match_id`` at ``version`` or later reached ``player``'s
    stream (``sk:out:{player}``; its entry id's milliseconds), None when none has yet.

    The stream is read oldest first from ``since_ms`` (the version's own time, less
    :data:`_CLOCK_SKEW_MS`; None: from its start), so the entries written after the update --
    answers to the player's own Syncs, a spectator's views -- never hide it.  A stream whose
    entries since then were trimmed (more than its cap written since) says nothing of when
    the update came: ``since_ms``, published in time, never a pause a flood could buy."""
    from engine.store import keys

    stream = keys.outbox_key(player)
    from_ms = None if since_ms is None else max(0, since_ms - _CLOCK_SKEW_MS)
    if from_ms is not None and _trimmed_since(client, stream, from_ms):
        return since_ms
    start = "-" if from_ms is None else f"{from_ms}-0"
    read = 0
    while read < _OUTBOX_SCAN_LIMIT:
        page = client.xrange(stream, min=start, max="+", count=_OUTBOX_PAGE)
        for entry_id, fields in page:
            f = {(k.decode() if isinstance(k, bytes) else k): v for k, v in fields.items()}
            match = f.get("match")
            if (match.decode() if isinstance(match, bytes) else match) != match_id:
                continue
            try:
                at_version = int(f.get("version") or 0)
            except (TypeError, ValueError):
                continue
            if at_version >= version:
                return _entry_ms(entry_id)
        if len(page) < _OUTBOX_PAGE:
            break
        read += len(page)
        last = page[-1][0]
        start = "(" + (last.decode() if isinstance(last, bytes) else last)
    return None


def _entry_ms(entry_id: Any) -> int:
    return int((entry_id.decode() if isinstance(entry_id, bytes) else entry_id).split("-", 1)[0])


def _trimmed_since(client: Any, stream: str, ms: int) -> bool:
    """Whether ``stream`` lost entries (trimmed to its cap) and now starts after ``ms``."""
    from redis.exceptions import ResponseError

    try:
        info = client.xinfo_stream(stream)
    except ResponseError:  # no such stream
        return False
    first = info.get("first-entry")
    added = info.get("entries-added")
    if not first or added is None:
        return False
    return int(added) > int(info.get("length") or 0) and _entry_ms(first[0]) > ms


def _count_clock_paused(kind: str, reason: str) -> None:
    try:
        from projections import metrics
    except Exception:  # pragma: no cover - metrics are optional here
        return
    metrics.observe_clock_paused(kind, reason)


def fire_batch(items: Any, rt: Runtime | None = None, source: str = "dispatch") -> dict[str, int]:
    """Fire a dispatched batch ``[[match_id, version, kind], …]``; returns the count of each result.

    A deadline whose firing fails does not stop the others: a permanent failure is
    logged and counted (``shuangkou_sweeper_failures_total{kind}``) and its mark stays,
    so the dispatcher sends it again once its in-flight lease runs out, with back-off;
    the first transient Redis failure is raised after the rest of the batch, so that
    dramatiq retries the message soon (the fired ones are then stale, from the cache).
    The marks of the deadlines that were fired are released in one round trip.
    """
    rt = rt or current()
    done: list[tuple[str, int, str]] = []
    results: dict[str, int] = {}
    transient: Exception | None = None
    for item in items:
        match_id, version, kind = str(item[0]), int(item[1]), str(item[2])
        try:
            result: str = fire(match_id, version, kind, rt, source, release=False)
        except Exception as exc:
            result = "error"
            if is_transient(exc):
                transient = transient or exc
                log.warning("%s %s v%d (%s): the store is unavailable (%s)", kind, match_id[:80], version,
                            source, exc)
            else:
                log.exception("%s %s v%d (%s): firing failed (dispatched again after its lease)",
                              kind, match_id[:80], version, source)
                rt.count("failed")
                _count_failure(kind)
        else:
            done.append((match_id, version, kind))
        results[result] = results.get(result, 0) + 1
    if rt.claims is not None and done:
        rt.claims.release(done)
    if transient is not None:
        raise transient
    return results


def _count_failure(kind: str) -> None:
    try:
        from projections import metrics
    except Exception:  # pragma: no cover - metrics are optional here
        return
    metrics.observe_sweeper_failure(kind)


def publish_outcome(rt: Runtime, cmd: CommandBase, outcome: Any, retry_s: float | None = None,
                    sleep: Callable[[float], None] | None = None) -> None:
    """Publish a committed timer command's outcome, retrying transient Redis failures
    (OOM, READONLY, LOADING, a dropped connection…) with back-off for ``retry_s``
    seconds (:data:`PUBLISH_RETRY_S`); then the error propagates, the dramatiq message
    fails and is retried, and its re-run publishes the stored events again
    (:func:`fire`).  A MatchFinished update must reach the players (issue 11 §2).
    A permanent failure (an unencodable view: a bug) is logged; the events are stored."""
    import time as _time

    if rt.publish is None:
        return
    wait = sleep or _time.sleep
    budget = PUBLISH_RETRY_S if retry_s is None else retry_s
    end = _time.monotonic() + budget
    backoff = Backoff(first=0.05, cap=2.0)
    while True:
        try:
            rt.publish(cmd, outcome)
            rt.unpublished.discard(cmd.command_id)
            return
        except Exception as exc:
            if not is_transient(exc):
                log.exception("%s: could not publish the outcome (stored; the next update carries "
                              "the full view)", cmd.command_id)
                return
            rt.count("publish_retries")
            _count_publish_retry()
            delay = backoff.next()
            if _time.monotonic() + delay > end:
                log.error("%s: publishing the outcome failed for %.0fs: %s", cmd.command_id, budget, exc)
                if len(rt.unpublished) > 10_000:
                    rt.unpublished.clear()
                rt.unpublished.add(cmd.command_id)
                raise
            log.warning("%s: publish refused (%s), retrying in %.2fs", cmd.command_id, exc, delay)
            wait(delay)


def _count_publish_retry() -> None:
    try:
        from projections.metrics import TIMER_PUBLISH_RETRIES
    except Exception:  # pragma: no cover - metrics are optional here
        return
    TIMER_PUBLISH_RETRIES.inc()


def _republish(rt: Runtime, cmd: CommandBase, state: Any) -> bool:
    """If ``cmd`` (a timer command) was applied before, publish its stored events again
    with the current state; True when it was."""
    lookup = getattr(rt.store, "command_range", None)
    if not callable(lookup):
        return False
    found = lookup(cmd.match_id, cmd.command_id)
    if not found:
        return False
    first, last = found
    if last < first:
        return False
    events = [e for e in rt.store.load(cmd.match_id, after=first - 1) if e.seq <= last]
    if not events:
        return False
    from engine.service.service import Outcome

    log.info("%s: applied before (seqs %d..%d), publishing its events again", cmd.command_id, first, last)
    confirm = getattr(rt.store, "confirm_replicated", None)
    if callable(confirm):
        confirm(cmd.match_id)  # published only once on the replicas (issue 35 §3): NOREPLICAS retries
    publish_outcome(rt, cmd, Outcome(tuple(events), state, None, True))
    return True
