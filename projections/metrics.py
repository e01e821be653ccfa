"""Prometheus metrics of the match engine: what an operator's dashboard and
alerts need (deploy/grafana/dashboard.json, deploy/alerts.yml).

Instrumentation is one call per handled command::

    outcome = service.execute(cmd)
    observe_outcome(outcome, "points")       # counters from the outcome's events

or, from the outside, wrap the objects once (no change to the service)::

    service = MatchService(InstrumentedStore(store), clock, rng)
    service = InstrumentedService(service, store=store, clock=clock)

Every metric lives in :data:`REGISTRY` (this module's registry; the process /
platform / GC collectors are added to it too).  :func:`start_metrics_server`
serves it over HTTP; when ``PROMETHEUS_MULTIPROC_DIR`` is set (several
processes on one host, e.g. dramatiq worker processes, or gunicorn-style
forks) it serves a :class:`prometheus_client.multiprocess.MultiProcessCollector`
over that directory instead, so every process's counters add up.

dramatiq's own metrics: ``dramatiq.middleware.Prometheus`` is *not* in
dramatiq's default middleware; the broker set-up must add it.  It then, in every
worker process, sets ``PROMETHEUS_MULTIPROC_DIR`` to ``$dramatiq_prom_db``
(default ``/tmp/dramatiq-prometheus``), records ``dramatiq_*`` metrics
(:data:`DRAMATIQ_METRICS`) and forks an exposition server on
``$dramatiq_prom_host:$dramatiq_prom_port`` (default ``0.0.0.0:9191``) that serves
the whole directory.  prometheus-client picks its value class when it is first
imported, which in a worker happens (through this module) *before* the
middleware sets the variable — so set ``PROMETHEUS_MULTIPROC_DIR`` and
``dramatiq_prom_db`` to the same directory in the worker's environment and the
engine metrics observed in worker processes (timer lateness, trustee plays…)
appear on port 9191 beside ``dramatiq_*``.  docs/OPERATIONS.md has the details.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, cast

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    GCCollector,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from engine.config import RoomConfig
from engine.match.commands import CommandBase
from engine.match.events import CardsPlayed, EventBase, room_of
from engine.match.protocols import OutcomeLike, ServiceLike
from engine.store.base import EventStore

log = logging.getLogger(__name__)

NAMESPACE = "shuangkou"
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

REGISTRY = CollectorRegistry(auto_describe=True)
if not (os.environ.get(MULTIPROC_ENV) or os.environ.get("prometheus_multiproc_dir")):
    # In multiprocess mode the per-process collectors make no sense (the
    # multiprocess collector reads the files of every process instead).
    ProcessCollector(registry=REGISTRY)
    PlatformCollector(registry=REGISTRY)
    GCCollector(registry=REGISTRY)

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_LATENESS_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0)
_TRANSFER_BUCKETS = (0, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000, 25_000, 100_000, 1_000_000)

# --- match life ------------------------------------------------------------
MATCHES_CREATED = Counter("shuangkou_matches_created", "Matches created (MatchCreated).",
                          ["config"], registry=REGISTRY)
MATCHES_STARTED = Counter("shuangkou_matches_started", "Matches dealt and under way (HandDealt).",
                          ["config"], registry=REGISTRY)
MATCHES_FINISHED = Counter("shuangkou_matches_finished",
                           "Matches finished (MatchFinished), by kou (flat/single/double/escape) and reason (out/escape).",
                           ["config", "kou", "reason"], registry=REGISTRY)
PLAYS = Counter("shuangkou_plays", "Cards played, by who acted (player/timeout/trustee).",
                ["config", "by"], registry=REGISTRY)
PASSES = Counter("shuangkou_passes", "Passes, by who acted (player/auto/timeout/trustee).",
                 ["config", "by"], registry=REGISTRY)
BOMBS = Counter("shuangkou_bombs", "Bombs played, by xiang (R-3.7..R-3.10) and kind.",
                ["config", "xiang", "kind"], registry=REGISTRY)
TIMEOUTS = Counter("shuangkou_turn_timeouts", "Turn clocks that ran out (TurnTimedOut, R-13.1).",
                   ["config"], registry=REGISTRY)
TRUSTEESHIPS = Counter("shuangkou_trusteeships", "Trusteeships started, by reason (timeouts/requested/disconnect/escape).",
                       ["config", "reason"], registry=REGISTRY)
TRUSTEESHIPS_ENDED = Counter("shuangkou_trusteeships_ended", "Trusteeships ended, by reason (cancelled/reconnected).",
                             ["config", "reason"], registry=REGISTRY)
DISCONNECTS = Counter("shuangkou_disconnects", "Players disconnected (R-13.4).", ["config"], registry=REGISTRY)
RECONNECTS = Counter("shuangkou_reconnects", "Players reconnected.", ["config"], registry=REGISTRY)
ESCAPES = Counter("shuangkou_escapes", "Players who escaped a running match, by escape policy (R-12).",
                  ["config", "policy"], registry=REGISTRY)
MATCHES_ABANDONED = Counter("shuangkou_matches_abandoned",
                            "Matches ended before the deal (MatchAbandoned), by reason (not_ready/left/seat_empty).",
                            ["config", "reason"], registry=REGISTRY)
PLAYERS_REMOVED = Counter("shuangkou_players_removed", "Seated players removed before the deal (not_ready/left/no_opponent).",
                          ["config", "reason"], registry=REGISTRY)
SCORE_TRANSFER = Histogram("shuangkou_score_transfer", "Points or coins the winner gained in a settled match.",
                           ["config"], buckets=_TRANSFER_BUCKETS, registry=REGISTRY)

# --- private tables (issue 39; engine/lobby/series.py) -----------------------
PRIVATE_TABLES_CREATED = Counter("shuangkou_private_tables_created", "Private tables opened (SeriesCreated).",
                                 ["config"], registry=REGISTRY)
PRIVATE_TABLES_FINISHED = Counter("shuangkou_private_tables_finished",
                                  "Private tables' series finished (SeriesFinished), by reason (completed/dissolved/"
                                  "escaped/abandoned/not_joined/cancelled).", ["config", "reason"], registry=REGISTRY)
SERIES_VOTES = Counter("shuangkou_series_votes",
                       "Votes to end a series early, by outcome (passed/refused/timed_out: counted as passed).",
                       ["config", "outcome"], registry=REGISTRY)

# --- command handling ------------------------------------------------------
COMMANDS = Counter("shuangkou_commands", "Commands handled, by type and result (ok/rejected/duplicate/error).",
                   ["command", "result"], registry=REGISTRY)
REJECTIONS = Counter("shuangkou_rejections", "Commands rejected, by rejection code (engine.match.errors).",
                     ["config", "code"], registry=REGISTRY)
COMMAND_LATENCY = Histogram("shuangkou_command_duration_seconds",
                            "Time to handle one command (load, decide, append).",
                            ["command"], buckets=_LATENCY_BUCKETS, registry=REGISTRY)
COMMANDS_INPROGRESS = Gauge("shuangkou_commands_inprogress", "Commands being handled right now.",
                            registry=REGISTRY, multiprocess_mode="livesum")
APPEND_LATENCY = Histogram("shuangkou_append_duration_seconds", "Time of one event-store append (the Lua script).",
                           buckets=_LATENCY_BUCKETS, registry=REGISTRY)
APPEND_CONFLICTS = Counter("shuangkou_append_conflicts", "Appends refused for a stale expected version (WrongVersion).",
                           registry=REGISTRY)
EVENTS_APPENDED = Counter("shuangkou_events_appended", "Events appended to match streams.", registry=REGISTRY)
BUCKETS_OWNED = Gauge("shuangkou_buckets_owned",
                      "Buckets whose channels this serve replica consumes (it holds their leases; issue 24 §3).",
                      registry=REGISTRY, multiprocess_mode="livesum")
STATE_CACHE_REQUESTS = "shuangkou_state_cache_requests"
REPLICA_ACKS = Gauge("shuangkou_replica_acks",
                     "Replicas every accepting, settling or balance-moving write waits for (WAIT; issue 35 §3).",
                     registry=REGISTRY, multiprocess_mode="max")
REPLICA_WAITS = Counter("shuangkou_replica_waits",
                        "WAITs for replica acknowledgements, by result (ok/noreplicas: too few within the "
                        "timeout, the command is not acknowledged and is retried).",
                        ["result"], registry=REGISTRY)
CLOCKS_PAUSED = Counter("shuangkou_clocks_paused",
                        "Turn and ready clocks moved later because the player could not have acted "
                        "(ClockExtended: update published late, undelivered by a gateway, writes unconfirmed, "
                        "a command in the inbox in time not handled yet; "
                        "issue 35 §4).",
                        ["kind", "reason"], registry=REGISTRY)
REPLICA_WAIT_LATENCY = Histogram("shuangkou_replica_wait_duration_seconds",
                                 "Time of one INCR + WAIT for replica acknowledgements.",
                                 buckets=_LATENCY_BUCKETS, registry=REGISTRY)


def set_buckets_owned(n: int) -> None:
    BUCKETS_OWNED.set(n)


def set_replica_acks(n: int) -> None:
    """The replica acks in force in this process (``shuangkou_replica_acks``)."""
    REPLICA_ACKS.set(n)


def observe_clock_paused(kind: str, reason: str) -> None:
    """A ClockExtended appended by a timer (workers/runtime.py)."""
    CLOCKS_PAUSED.labels("ready" if kind == "ready" else "turn",
                         reason if reason in ("unconfirmed", "undelivered", "unhandled") else "unpublished").inc()


def observe_replica_wait(result: str, seconds: float) -> None:
    """One WAIT (engine/store/replicas.py's ``on_wait``): ``result`` ok or noreplicas."""
    REPLICA_WAITS.labels("noreplicas" if result == "noreplicas" else "ok").inc()
    REPLICA_WAIT_LATENCY.observe(seconds)

# --- timers, projections, dead letters -------------------------------------
TIMER_LATENESS = Histogram("shuangkou_timer_lateness_seconds",
                           "How late a timer command ran after its deadline, by kind (turn/trustee/ready).",
                           ["kind"], buckets=_LATENESS_BUCKETS, registry=REGISTRY)
TIMERS_STALE = Counter("shuangkou_timers_stale", "Timer messages that found the match moved on (did nothing).",
                       ["kind"], registry=REGISTRY)
PROJECTION_EVENTS = Counter("shuangkou_projection_events", "Feed entries applied by a projection.",
                            ["projection"], registry=REGISTRY)
DEAD_LETTERS = Counter("shuangkou_dead_letters",
                       "Messages given up on (source: inbox = gateway inbox, feed = projection feed, "
                       "dramatiq = an actor's message).",
                       ["source"], registry=REGISTRY)

# --- hardening (issue 11): parked settlements, reconciliation, sweeper, timer publishes ---
#: pairs of accounts newly flagged by the integrity projection (projections/integrity, docs/INTEGRITY.md)
INTEGRITY_FLAGS = Counter("shuangkou_integrity_flags",
                          "Pairs of accounts newly flagged for chip dumping by the integrity projection (score at "
                          "or above the default threshold; a dismissed pair counts again only on new evidence).",
                          registry=REGISTRY)
SETTLEMENTS_PARKED = Counter("shuangkou_settlements_parked",
                             "Settlements moved aside for a permanent error (ledger overflow, unsettleable "
                             "events, a bug), by reason code; see sk:{ledger}:parked.",
                             ["reason"], registry=REGISTRY)
SETTLEMENTS_RECONCILED = Counter("shuangkou_settlements_reconciled",
                                 "Finished matches without a settlement that reconciliation settled "
                                 "(the feed lost their entry: should stay 0).", registry=REGISTRY)
SWEEPER_FAILURES = Counter("shuangkou_sweeper_failures",
                           "Deadlines the sweeper failed to fire (skipped and retried with back-off), by kind.",
                           ["kind"], registry=REGISTRY)
SWEEPER_BACKING_OFF = Gauge("shuangkou_sweeper_backing_off_deadlines",
                            "Deadlines the sweeper skips for now after failures (retried with back-off).",
                            registry=REGISTRY, multiprocess_mode="livesum")
TIMER_PUBLISH_RETRIES = Counter("shuangkou_timer_publish_retries",
                                "Publishes of a timer command's outcome retried after a transient Redis error.",
                                registry=REGISTRY)


def observe_parked(code: str) -> None:
    SETTLEMENTS_PARKED.labels(code).inc()


def observe_reconciled(n: int = 1) -> None:
    if n:
        SETTLEMENTS_RECONCILED.inc(n)


def observe_sweeper_failure(kind: str) -> None:
    SWEEPER_FAILURES.labels(kind).inc()


# Names of the collector-made gauges (FeedLagCollector, DeadLetterQueueCollector).
PROJECTION_LAG = "shuangkou_projection_lag_events"
PROJECTION_PENDING = "shuangkou_projection_pending_messages"
DEAD_LETTER_QUEUE = "shuangkou_dead_letter_queue_messages"
TIMERS_SCHEDULED = "shuangkou_timers_scheduled"
REDIS_MEMORY_USED = "shuangkou_redis_memory_used_bytes"
REDIS_MAXMEMORY = "shuangkou_redis_maxmemory_bytes"

#: Metrics recorded by ``dramatiq.middleware.Prometheus`` (served by the
#: worker's exposition server, not by :data:`REGISTRY`).
DRAMATIQ_METRICS: dict[str, str] = {
    "dramatiq_messages_total": "counter",
    "dramatiq_message_errors_total": "counter",
    "dramatiq_message_retries_total": "counter",
    "dramatiq_message_rejects_total": "counter",  # dead-lettered
    "dramatiq_messages_inprogress": "gauge",
    "dramatiq_delayed_messages_inprogress": "gauge",
    "dramatiq_message_duration_milliseconds": "histogram",
}

_SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "summary": ("_count", "_sum", "_created", ""),
}


def exposed_names() -> set[str]:
    """Every sample name a scrape of this module's metrics (and dramatiq's) can show.

    Used by tests/test_deploy_files.py: alerts and the dashboard may only use these.
    """
    names: set[str] = set()
    for metric in REGISTRY.collect():
        for suffix in _SUFFIXES.get(metric.type, ("",)):
            names.add(metric.name + suffix)
        for sample in metric.samples:
            names.add(sample.name)
    names |= {PROJECTION_LAG, PROJECTION_PENDING, DEAD_LETTER_QUEUE, TIMERS_SCHEDULED,
              REDIS_MEMORY_USED, REDIS_MAXMEMORY}
    for name, kind in DRAMATIQ_METRICS.items():
        base = name[: -len("_total")] if kind == "counter" else name
        for suffix in _SUFFIXES[kind]:
            names.add(base + suffix)
    return names


# --- observing outcomes ----------------------------------------------------

def _config_name_of(outcome: OutcomeLike) -> str | None:
    state = getattr(outcome, "state", None)
    config = getattr(state, "config", None)
    if isinstance(config, RoomConfig) and config.name:  # a match's state: its room (the usual case)
        return config.name
    for holder in (state, getattr(state, "config", None)):
        if holder is None:
            continue
        name = getattr(holder, "config_name", None) or (
            getattr(holder, "name", None) if holder is not state else None)
        if isinstance(name, str) and name:
            return name
    cfg = getattr(state, "config", None)
    if isinstance(cfg, dict) and isinstance(cfg.get("name"), str):
        return cfg["name"]
    return room_of(getattr(outcome, "events", ()) or ())


#: (metric, label values) -> the metric's child: ``labels()`` validates and locks on every
#: call (~1-2 µs each, several per command); a child never changes once made
_CHILDREN: dict[tuple[Any, tuple[str, ...]], Any] = {}


def _child(metric: Any, *labels: Any) -> Any:
    """``metric.labels(*labels)``, made once per label set.

    >>> _child(COMMANDS, "Play", "ok") is _child(COMMANDS, "Play", "ok")
    True
    """
    key = (metric, tuple(str(v) for v in labels))
    child = _CHILDREN.get(key)
    if child is None:
        child = _CHILDREN[key] = metric.labels(*key[1])
    return child


#: event type -> (counter, the event's attributes that label it after the config name)
_EVENT_COUNTERS: dict[str, tuple[Counter, tuple[str, ...]]] = {
    "MatchCreated": (MATCHES_CREATED, ()),
    "HandDealt": (MATCHES_STARTED, ()),
    "CardsPlayed": (PLAYS, ("by",)),
    "Passed": (PASSES, ("by",)),
    "TurnTimedOut": (TIMEOUTS, ()),
    "TrusteeshipStarted": (TRUSTEESHIPS, ("reason",)),
    "TrusteeshipEnded": (TRUSTEESHIPS_ENDED, ("reason",)),
    "PlayerDisconnected": (DISCONNECTS, ()),
    "PlayerReconnected": (RECONNECTS, ()),
    "PlayerEscaped": (ESCAPES, ("policy",)),
    "PlayerRemoved": (PLAYERS_REMOVED, ("reason",)),
    "MatchFinished": (MATCHES_FINISHED, ("kou", "reason")),
    "MatchAbandoned": (MATCHES_ABANDONED, ("reason",)),
}


def observe_events(events: Iterable[EventBase], config_name: str) -> None:
    """Update the counters from newly appended events of one match."""
    for ev in events:
        kind = getattr(ev, "type", type(ev).__name__)
        counted = _EVENT_COUNTERS.get(kind)
        if counted is None:
            continue
        counter, attrs = counted
        _child(counter, config_name, *(getattr(ev, a) for a in attrs)).inc()
        if isinstance(ev, CardsPlayed):
            xiang = getattr(ev.reading, "xiang", None)
            if xiang is not None:
                _child(BOMBS, config_name, str(xiang), ev.reading.kind).inc()


#: room names that may label metrics (the built-in and registered rooms, a bounded set);
#: any other config name is counted as "other" (a room config name is operator input)
MAX_ROOM_LABELS = 200
_room_labels: set[str] = set()
_room_labels_lock = threading.Lock()
_room_labels_seeded = False


def _seed_room_labels() -> None:
    """The built-in rooms are always known (once, on first use)."""
    global _room_labels_seeded
    if not _room_labels_seeded:
        names = builtin_config_names()
        with _room_labels_lock:
            _room_labels.update(names)
        _room_labels_seeded = True  # only once filled: a thread reading meanwhile seeds again


def register_room_labels(names: Iterable[str]) -> None:
    """Allow these room names as ``config`` label values (at most :data:`MAX_ROOM_LABELS`)."""
    _seed_room_labels()
    with _room_labels_lock:
        for name in names:
            if len(_room_labels) < MAX_ROOM_LABELS:
                _room_labels.add(name)


#: where the registered rooms are read again when a name not known yet is labelled
#: (:func:`follow_room_registry`), how often at most, when last, and the thread reading them
_room_source: Callable[[], Iterable[str]] | None = None
_room_source_every_s = 30.0
_room_source_read = -math.inf
_room_refresh: threading.Thread | None = None
_room_refresh_lock = threading.Lock()
#: the names a read was started for (a first miss reads at once; at most MAX_ROOM_LABELS)
_room_missed: set[str] = set()
#: observations of a name not known yet, held until the read in hand has answered
#: (:func:`_with_room`): at most :data:`MAX_HELD_OBSERVATIONS`, and only in a read's first
#: :data:`HOLD_S` seconds (a read that hangs holds no more)
_room_held: list[tuple[str, Callable[[str], None]]] = []
MAX_HELD_OBSERVATIONS = 10_000
HOLD_S = 5.0


def follow_room_registry(names: Callable[[], Iterable[str]] | None, every_s: float = 30.0) -> None:
    """Read the registered rooms' names from ``names`` (``RedisRooms.names``) now, and again, in a
    thread of its own, when a name not known yet is labelled: at once for a name never missed
    before, else at most every ``every_s`` seconds.  A room another replica added (AddRoom)
    gets its own label here too, not ``"other"``.  A failed read keeps what is known; None:
    no more reads."""
    global _room_source, _room_source_every_s, _room_source_read
    with _room_refresh_lock:
        _room_source, _room_source_every_s, _room_source_read = names, every_s, time.monotonic()
    if names is not None:
        _read_rooms(names)


def _read_rooms(names: Callable[[], Iterable[str]]) -> None:
    try:
        register_room_labels(names())
    except Exception as exc:  # the labels are not worth a failure: the known names stay
        log.debug("room labels not read again: %s", exc)


def _refresh_room_labels(name: str, observe: Callable[[str], None] | None = None) -> str:
    """``name`` was not known: read the registry again in a thread (never on the caller's path,
    a command's) unless one is reading, or ``name`` was missed before and the last read was
    under ``every_s`` ago.  Says "known" when ``name`` is known by now; "held" when a read is
    under way and ``observe`` is kept for the label thread to call once it answered (a read's
    first :data:`HOLD_S` s); else "other"."""
    global _room_source_read, _room_refresh
    with _room_refresh_lock:
        if name in _room_labels:  # a read answered since the caller looked
            return "known"
        source = _room_source
        if source is None:
            return "other"
        if _room_refresh is None or not _room_refresh.is_alive():  # none, or lost (a fork)
            first = name not in _room_missed and len(_room_missed) < MAX_ROOM_LABELS
            if not first and time.monotonic() - _room_source_read < _room_source_every_s:
                return "other"
            thread = threading.Thread(target=_read_then_observe, args=(source,), name="sk-room-labels", daemon=True)
            try:
                thread.start()
            except RuntimeError as exc:  # no thread to be had: nothing is held
                log.debug("room labels not read again: %s", exc)
                return "other"
            _room_refresh = thread
            _room_missed.add(name)
            _room_source_read = time.monotonic()
        if observe is None or len(_room_held) >= MAX_HELD_OBSERVATIONS \
                or time.monotonic() - _room_source_read > HOLD_S:
            return "other"
        _room_held.append((name, observe))
        return "held"


def _read_then_observe(source: Callable[[], Iterable[str]]) -> None:
    """The label thread: read the registry, then make the observations held meanwhile, until
    none is left (then no read is under way)."""
    try:
        _read_rooms(source)
    finally:
        _make_held()


def _make_held() -> None:
    global _room_refresh
    while True:
        with _room_refresh_lock:
            held = list(_room_held)
            _room_held.clear()
            if not held:
                _room_refresh = None
                return
        for name, observe in held:
            try:
                observe(name if name in _room_labels else "other")
            except Exception as exc:  # a metric is not worth the thread
                log.debug("a held observation of room %s failed: %s", name, exc)


def _known(name: str) -> bool:
    """Is ``name`` a label as it is: a known room (built-in or registered), "unknown" or "other"?"""
    _seed_room_labels()
    return name in _room_labels or name in ("unknown", "other")


def _with_room(name: str, observe: Callable[[str], None]) -> None:
    """``observe(label)`` with ``name`` when it is a known room, else with ``"other"``; a name
    not known yet whose registry read is under way waits for it (:func:`_refresh_room_labels`)."""
    if _known(name):
        observe(name)
        return
    said = _refresh_room_labels(name, observe)
    if said != "held":
        observe(name if said == "known" else "other")


def room_label(name: str) -> str:
    """``name`` when it is a known room (built-in or registered), else ``"other"``.

    >>> room_label("points"), room_label("x" * 50)
    ('points', 'other')
    """
    if _known(name):
        return name
    return name if _refresh_room_labels(name) == "known" else "other"


def observe_outcome(outcome: OutcomeLike, config_name: str | None = None) -> None:
    """Count what one ``MatchService.execute`` outcome did.

    A duplicate (retried command id) counts nothing again; a rejection counts
    under its code.  ``config_name`` labels the room type; when None it is read
    from the outcome's state (or its MatchCreated event), else ``"unknown"``.
    """
    name = config_name or _config_name_of(outcome) or "unknown"
    if getattr(outcome, "duplicate", False):
        room_label(name)  # counts nothing; a name not known yet still has the registry read
        return
    rejection = getattr(outcome, "rejection", None)
    if rejection is not None:
        code = getattr(rejection, "code", "rejected")
        _with_room(name, lambda cfg: _child(REJECTIONS, cfg, code).inc())
        return
    events = list(getattr(outcome, "events", ()) or ())
    EVENTS_APPENDED.inc(len(events))
    _with_room(name, lambda cfg: observe_events(events, cfg))


def observe_series_events(events: Iterable[Any], config_name: str) -> None:
    """Count what newly appended events of one private table's series did (its room's name:
    ``config_name``): tables opened, series finished by reason, votes by outcome."""
    events = list(events)

    def observe(cfg: str) -> None:
        for ev in events:
            kind = getattr(ev, "type", type(ev).__name__)
            if kind == "SeriesCreated":
                _child(PRIVATE_TABLES_CREATED, cfg).inc()
            elif kind == "SeriesFinished":
                _child(PRIVATE_TABLES_FINISHED, cfg, ev.reason).inc()
            elif kind == "EndVoted":
                outcome = "timed_out" if ev.timed_out else "passed" if ev.agree else "refused"
                _child(SERIES_VOTES, cfg, outcome).inc()

    _with_room(config_name, observe)


def observe_settlement(scores: dict[str, int] | None, config_name: str) -> None:
    """Record the winner's gain of one settled match (``settle(events)`` scores) under its room."""
    if scores:
        gain = max(0, max(scores.values()))
        _with_room(config_name, lambda cfg: SCORE_TRANSFER.labels(cfg).observe(gain))


def observe_settled(settlement: Any, applied: bool, room: str | None) -> None:
    """The ledger projection's ``on_settled``: one settlement handled; the winner's gain counted
    under the match's room when this call applied it (a settlement applied before is not)."""
    observe_projection_applied("ledger")
    if applied:
        observe_settlement(settlement.scores, room or "unknown")


def observe_timer_lateness(kind: str, seconds: float) -> None:
    _child(TIMER_LATENESS, kind).observe(max(0.0, seconds))


def observe_dead_letter(source: str, n: int = 1) -> None:
    DEAD_LETTERS.labels(source).inc(n)


def observe_projection_applied(projection: str, n: int = 1) -> None:
    PROJECTION_EVENTS.labels(projection).inc(n)


# --- instrumenting from the outside ----------------------------------------

_TIMER_KINDS = {"TurnTimeout": "turn", "TrusteeAct": "trustee", "ReadyTimeout": "ready"}


class InstrumentedService:
    """Wraps a ``MatchService``: times each command, counts its outcome, and
    for timer commands (TurnTimeout/TrusteeAct/ReadyTimeout) measures how late
    they ran against the deadline recorded in the store.

    Everything else is delegated, so it can stand wherever the service does.
    """

    def __init__(self, service: ServiceLike, *, store: EventStore | None = None,
                 clock: Callable[[], int] | None = None,
                 config_name: str | None = None):
        self._service = service
        self._store = store if store is not None else getattr(service, "store", None)
        self._clock = clock
        self._config_name = config_name

    def __getattr__(self, name: str) -> Any:
        return getattr(self._service, name)

    def _now_ms(self) -> int:
        clock = self._clock or getattr(self._service, "clock", None)
        if clock is not None:
            try:
                value = clock() if callable(clock) else clock.now_ms()
                return int(value)
            except Exception:
                pass
        return int(time.time() * 1000)

    def execute(self, cmd: CommandBase) -> OutcomeLike:
        ctype = getattr(cmd, "type", type(cmd).__name__)
        timer_kind = _TIMER_KINDS.get(ctype)
        deadline = None
        if timer_kind is not None and self._store is not None:
            try:
                deadline = self._store.deadline(cmd.match_id)
            except Exception:
                deadline = None
        COMMANDS_INPROGRESS.inc()
        t0 = time.perf_counter()
        try:
            outcome = self._service.execute(cmd)
        except Exception:
            _child(COMMANDS, ctype, "error").inc()
            raise
        finally:
            _child(COMMAND_LATENCY, ctype).observe(time.perf_counter() - t0)
            COMMANDS_INPROGRESS.dec()
        if getattr(outcome, "duplicate", False):
            result = "duplicate"
        elif getattr(outcome, "rejection", None) is not None:
            result = "rejected"
        else:
            result = "ok"
        _child(COMMANDS, ctype, result).inc()
        if timer_kind is not None:
            if deadline is not None and getattr(deadline, "version", None) == getattr(cmd, "version", None):
                observe_timer_lateness(timer_kind, (self._now_ms() - deadline.at_ms) / 1000.0)
            if result == "rejected" and getattr(outcome.rejection, "code", "") == "stale":
                _child(TIMERS_STALE, timer_kind).inc()
        observe_outcome(outcome, self._config_name)
        return outcome

    def execute_many(self, cmds: Any, carry: Any = None) -> list[Any]:
        """The wrapped service's ``execute_many`` (pipelined appends; one by one through
        :meth:`execute` if it has none), each command measured as :meth:`execute` does:
        its latency is the batch's (what it waited), its outcome or error counted.
        ``carry`` (engine.service.service.Carry) goes on to the wrapped service."""
        many = getattr(type(self._service), "execute_many", None)
        if many is None or any(_TIMER_KINDS.get(getattr(c, "type", "")) for c in cmds):
            from engine.store.redis_errors import is_transient

            out: list[Any] = []
            failed: Exception | None = None
            for c in cmds:
                if failed is not None:  # after a transient failure nothing more is tried
                    out.append(failed)
                    continue
                try:
                    out.append(self.execute(c))
                except Exception as exc:
                    out.append(exc)
                    if is_transient(exc):
                        failed = exc
            return out
        COMMANDS_INPROGRESS.inc(len(cmds))
        t0 = time.perf_counter()
        try:
            results = list(many(self._service, cmds, carry))
        finally:
            dt = time.perf_counter() - t0
            COMMANDS_INPROGRESS.dec(len(cmds))
        for cmd, r in zip(cmds, results):
            ctype = getattr(cmd, "type", type(cmd).__name__)
            _child(COMMAND_LATENCY, ctype).observe(dt)
            if isinstance(r, Exception):
                _child(COMMANDS, ctype, "error").inc()
                continue
            if getattr(r, "duplicate", False):
                result = "duplicate"
            elif getattr(r, "rejection", None) is not None:
                result = "rejected"
            else:
                result = "ok"
            _child(COMMANDS, ctype, result).inc()
            observe_outcome(r, self._config_name)
        return results


def instrument_runtime(rt: Any) -> Any:
    """Wrap a timer worker's runtime (:class:`workers.runtime.Runtime`) in the engine
    metrics: its store in :class:`InstrumentedStore`, its service in
    :class:`InstrumentedService` (timer lateness, command latency, counts).

    Register it with ``workers.runtime.on_build(instrument_runtime)`` (what
    workers/prometheus.py does); idempotent.
    """
    if isinstance(rt.service, InstrumentedService):
        return rt
    waiter = getattr(getattr(rt.store, "inner", rt.store), "replica_acks", None)
    set_replica_acks(getattr(waiter, "n", 0))
    if waiter is not None:
        waiter.on_wait = observe_replica_wait
    if not isinstance(rt.store, InstrumentedStore):
        rt.store = instrumented_store(rt.store)
    if hasattr(rt.service, "store"):
        rt.service.store = rt.store
    rt.service = InstrumentedService(rt.service, store=cast(EventStore, rt.store), clock=rt.clock)
    return rt


class InstrumentedStore:
    """Wraps an ``EventStore``: times ``append`` and counts version conflicts."""

    def __init__(self, store: EventStore):
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    @property
    def inner(self) -> EventStore:
        return self._store

    def append(self, *args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return self._store.append(*args, **kwargs)
        except Exception as exc:
            if type(exc).__name__ == "WrongVersion":
                APPEND_CONFLICTS.inc()
            raise
        finally:
            APPEND_LATENCY.observe(time.perf_counter() - t0)

    def append_many(self, requests: Any) -> Any:
        """The store's pipelined appends: each request's latency is the pipeline's
        (what its command waited), each WrongVersion reply a conflict."""
        t0 = time.perf_counter()
        try:
            results = self._store.append_many(requests)
        finally:
            dt = time.perf_counter() - t0
            for _ in requests:
                APPEND_LATENCY.observe(dt)
        for r in results:
            if type(r).__name__ == "WrongVersion":
                APPEND_CONFLICTS.inc()
        return results


def instrumented_store(store: EventStore) -> EventStore:
    """``store`` wrapped in :class:`InstrumentedStore`, typed as what it stands for:
    the wrapper delegates every :class:`~engine.store.base.EventStore` method."""
    return cast(EventStore, InstrumentedStore(store))


# --- collectors read at scrape time ----------------------------------------

def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class StateCacheCollector(Collector):
    """``shuangkou_state_cache_requests_total{result="hit"|"miss"}``: lookups of the process's
    state cache (engine/service/state_cache.py) that found the match's state, or did not."""

    def __init__(self, cache: Any):
        self._cache = cache

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        family = CounterMetricFamily(STATE_CACHE_REQUESTS, "State cache lookups, by result (hit/miss).",
                                     labels=["result"])
        family.add_metric(["hit"], float(self._cache.hits))
        family.add_metric(["miss"], float(self._cache.misses))
        yield family


class FeedLagCollector(Collector):
    """``shuangkou_projection_lag_events{feed,group}``: feed entries not yet
    delivered to a projection's consumer group (XINFO GROUPS ``lag``; Redis ≥ 7,
    falls back to entries after ``last-delivered-id``), plus
    ``shuangkou_projection_pending_messages`` (delivered, not acknowledged).

    ``feeds`` returns the feed stream keys (e.g. every bucket's feed) and
    ``client_for(key)`` the Redis client holding one (a cluster client is fine).
    """

    def __init__(self, client: Any, feeds: Callable[[], Sequence[str]] | Sequence[str],
                 groups: Sequence[str] | None = None):
        self._client = client
        self._feeds = feeds
        self._groups = set(groups) if groups else None

    def describe(self) -> list[Any]:
        return []

    def _lag(self, key: str, info: dict[str, Any]) -> int:
        lag = info.get("lag")
        if lag is not None:
            return int(lag)
        last = _s(info.get("last-delivered-id", "0-0"))
        try:
            return len(self._client.xrange(key, min="(" + last, max="+", count=100_000))
        except Exception:
            return 0

    def collect(self) -> Iterator[Any]:
        lag = GaugeMetricFamily(PROJECTION_LAG, "Feed entries not yet read by a projection group.",
                                labels=["feed", "group"])
        pending = GaugeMetricFamily(PROJECTION_PENDING, "Feed entries read but not acknowledged.",
                                    labels=["feed", "group"])
        feeds = self._feeds() if callable(self._feeds) else self._feeds
        for key in feeds:
            try:
                groups = self._client.xinfo_groups(key)
            except Exception:
                continue
            for g in groups:
                info = {_s(k): v for k, v in g.items()}
                name = _s(info.get("name", ""))
                if self._groups is not None and name not in self._groups:
                    continue
                lag.add_metric([key, name], self._lag(key, info))
                pending.add_metric([key, name], int(info.get("pending", 0) or 0))
        yield lag
        yield pending


class DeadLetterQueueCollector(Collector):
    """Scrape-time gauges of dramatiq's Redis, per queue:
    ``shuangkou_dead_letter_queue_messages{queue}`` (the dead-letter set
    ``{namespace}:{queue}.XQ``) and ``shuangkou_timers_scheduled{queue}`` (timer
    messages waiting for their due time in the sorted set ``{namespace}:{queue}.ZQ``
    of :mod:`workers.broker`; they are not in any worker's memory, so dramatiq's
    own ``dramatiq_delayed_messages_inprogress`` stays 0 for them)."""

    def __init__(self, client: Any, queues: Sequence[str] = ("default",), namespace: str = "dramatiq"):
        self._client = client
        self._queues = tuple(queues)
        self._namespace = namespace

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        dead = GaugeMetricFamily(DEAD_LETTER_QUEUE, "Messages in dramatiq's dead-letter queue.", labels=["queue"])
        timers = GaugeMetricFamily(TIMERS_SCHEDULED, "Timer messages waiting for their due time.",
                                   labels=["queue"])
        for q in self._queues:
            for gauge, suffix in ((dead, "XQ"), (timers, "ZQ")):
                try:
                    n = int(self._client.zcard(f"{self._namespace}:{q}.{suffix}"))
                except Exception:  # the broker's Redis is down: no sample, the scrape still works
                    continue
                gauge.add_metric([q], n)
        yield dead
        yield timers


class RedisMemoryCollector(Collector):
    """Scrape-time gauges of a Redis's memory (``INFO memory``), labelled by ``role``
    (``store``, ``broker``): ``shuangkou_redis_memory_used_bytes`` and
    ``shuangkou_redis_maxmemory_bytes`` (0 = no limit).  With ``noeviction`` a full
    Redis refuses every write: alert well before used reaches maxmemory
    (deploy/alerts.yml ``ShuangkouRedisMemoryHigh``, docs/OPERATIONS.md)."""

    def __init__(self, clients: dict[str, Any]):
        self._clients = dict(clients)

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        used = GaugeMetricFamily(REDIS_MEMORY_USED, "Memory used by Redis (INFO memory used_memory).",
                                 labels=["role"])
        limit = GaugeMetricFamily(REDIS_MAXMEMORY, "Redis maxmemory (0: no limit).", labels=["role"])
        for role, client in self._clients.items():
            try:
                info = client.info("memory")
            except Exception:  # Redis is down: no sample, the scrape still works
                continue
            used.add_metric([role], float(info.get("used_memory", 0)))
            limit.add_metric([role], float(info.get("maxmemory", 0)))
        yield used
        yield limit


# --- counters at zero from start-up ------------------------------------------
# A counter child appears in a scrape only once it has been incremented, so after a
# restart the first increase has nothing to compare with and increase()/rate() (and
# an alert on them) miss it.  Every counter whose labels come from a known, bounded
# set is therefore created at 0 for each of its label values when this module loads.

#: Where dead letters come from (``observe_dead_letter``).
DEAD_LETTER_SOURCES: tuple[str, ...] = ("inbox", "feed", "dramatiq")
#: The projections that report applied feed entries (``observe_projection_applied``).
PROJECTIONS: tuple[str, ...] = ("ledger",)
#: Why a settlement was parked (projections.ledger.LedgerRefused codes and the runner's own).
PARK_REASONS: tuple[str, ...] = ("overflow", "not_zero_sum", "bad_amount", "corrupt", "unsettleable",
                                 "unreadable", "error")
#: Results of a handled command (``InstrumentedService``).
COMMAND_RESULTS: tuple[str, ...] = ("ok", "rejected", "duplicate", "error")


def rejection_codes() -> tuple[str, ...]:
    """Every rejection ``code`` of the :class:`engine.match.errors.Rejected` hierarchy."""
    import engine.lobby.errors  # noqa: F401 - the lobby's codes are in the hierarchy whatever was imported
    from engine.match.errors import Rejected

    codes: set[str] = set()
    todo: list[type] = [Rejected]
    while todo:
        cls = todo.pop()
        code = getattr(cls, "code", None)
        if isinstance(code, str) and code:
            codes.add(code)
        todo.extend(cls.__subclasses__())
    return tuple(sorted(codes))


def command_types() -> tuple[str, ...]:
    """The ``type`` of every command (engine.match.commands)."""
    from engine.match import commands

    return tuple(sorted({cls.model_fields["type"].default for cls in vars(commands).values()
                         if isinstance(cls, type) and issubclass(cls, commands.CommandBase)
                         and cls is not commands.CommandBase and "type" in cls.model_fields
                         and isinstance(cls.model_fields["type"].default, str)}))


def _literal_values(event_type: str, attr: str) -> tuple[str, ...]:
    """The values an event's Literal field may take (``Passed.by`` -> player, auto, …)."""
    from typing import get_args

    from engine.match import events

    field = getattr(events, event_type).model_fields[attr]
    return tuple(str(v) for v in get_args(field.annotation))


def builtin_config_names() -> tuple[str, ...]:
    """The room names (``name`` key) of the built-in configs: the ``config`` label values known at start-up."""
    try:
        from engine.config import builtin_configs, load_config

        return tuple(sorted({load_config(name).name for name in builtin_configs()}))
    except Exception:  # a broken built-in must not stop the metrics
        return ()


def initialize_counters(config_names: Iterable[str] | None = None) -> None:
    """Create every counter child with a bounded label set at 0 (idempotent).

    ``config_names`` are the rooms this process will serve (default: the built-in
    configs); counters labelled by room get their other labels' every value.
    """
    from itertools import product

    for source in DEAD_LETTER_SOURCES:
        DEAD_LETTERS.labels(source)
    for projection in PROJECTIONS:
        PROJECTION_EVENTS.labels(projection)
    for kind in _TIMER_KINDS.values():
        TIMERS_STALE.labels(kind)
        SWEEPER_FAILURES.labels(kind)
        TIMER_LATENESS.labels(kind)  # a histogram the dashboard and ShuangkouTimersLate read
    for code in PARK_REASONS:
        SETTLEMENTS_PARKED.labels(code)
    for result in ("ok", "noreplicas"):  # ShuangkouReplicaAcksStalled sees the first short WAIT
        REPLICA_WAITS.labels(result)
    for kind in ("turn", "ready"):
        for reason in ("unpublished", "undelivered", "unconfirmed", "unhandled"):
            CLOCKS_PAUSED.labels(kind, reason)
    for ctype, result in product(command_types(), COMMAND_RESULTS):
        COMMANDS.labels(ctype, result)
    for ctype in command_types():  # the latency histogram too: a dashboard's quantile has its series
        COMMAND_LATENCY.labels(ctype)
    codes = rejection_codes()
    rooms = builtin_config_names() if config_names is None else tuple(config_names)
    for cfg in (*rooms, "unknown"):  # "unknown": a rejection before the match (and its room) is known
        for code in codes:
            REJECTIONS.labels(cfg, code)
    for cfg in rooms:
        for event_type, (counter, attrs) in _EVENT_COUNTERS.items():
            for values in product(*(_literal_values(event_type, a) for a in attrs)):
                counter.labels(cfg, *values)
        SCORE_TRANSFER.labels(cfg)
        for xiang, kind in _COMMON_BOMBS:  # chain bombs' (xiang, kind) start with their first play
            BOMBS.labels(cfg, xiang, kind)


#: the bombs whose series exist from start-up: plain bombs of 4 to 8 cards (R-3.7: xiang = size),
#: the three-joker (6-xiang, R-3.8) and four-joker (7-xiang, R-3.9) bombs
_COMMON_BOMBS = (*((str(n), "bomb") for n in range(4, 9)), ("6", "three_jokers"), ("7", "four_jokers"))


initialize_counters()


# --- exposition --------------------------------------------------------------

def multiprocess_dir() -> str | None:
    return os.environ.get(MULTIPROC_ENV) or os.environ.get("prometheus_multiproc_dir") or None


def serving_registry(extra_collectors: Iterable[Collector] = ()) -> CollectorRegistry:
    """The registry to expose: :data:`REGISTRY`, or in multiprocess mode a
    registry reading every process's files; ``extra_collectors`` (scrape-time
    gauges such as :class:`FeedLagCollector`) are added to it."""
    mp = multiprocess_dir()
    if mp:
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry, path=mp)
    else:
        registry = REGISTRY
    for c in extra_collectors:
        try:
            registry.register(c)
        except ValueError:  # already registered (a second server in one process)
            pass
    return registry


def start_metrics_server(port: int, addr: str = "127.0.0.1",
                         extra_collectors: Iterable[Collector] = ()) -> tuple[Any, Any]:
    """Serve ``/metrics`` on ``addr:port`` in a daemon thread; returns
    ``(server, thread)`` (``server.shutdown()`` stops it).  Port 0 picks a free
    port: read it from ``server.server_port``."""
    from prometheus_client import start_http_server

    registry = serving_registry(extra_collectors)
    return start_http_server(port, addr=addr, registry=registry)


def mark_process_dead(pid: int | None = None) -> None:
    """Multiprocess mode: drop a finished process's live gauges (call at exit)."""
    mp = multiprocess_dir()
    if mp:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid or os.getpid(), mp)


def generate_latest(extra_collectors: Iterable[Collector] = ()) -> bytes:
    from prometheus_client import generate_latest as _gen

    return _gen(serving_registry(extra_collectors))


__all__ = [
    "REGISTRY", "DRAMATIQ_METRICS", "observe_outcome", "observe_events", "observe_settlement", "observe_settled",
    "observe_timer_lateness", "observe_dead_letter", "observe_projection_applied",
    "InstrumentedService", "InstrumentedStore", "instrument_runtime", "FeedLagCollector", "DeadLetterQueueCollector",
    "RedisMemoryCollector", "observe_parked", "observe_reconciled", "observe_sweeper_failure",
    "start_metrics_server", "serving_registry", "mark_process_dead", "exposed_names", "generate_latest",
    "initialize_counters", "DEAD_LETTER_SOURCES",
]
