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
"""

from __future__ import annotations

import logging
import os
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from engine.match.commands import CommandBase, ReadyTimeout, TrusteeAct, TurnTimeout
from engine.match.errors import Rejected, StaleCommand
from engine.match.deadline import DeadlineKind
from engine.store.base import EventStore, WrongVersion
from workers.clock import SystemClock, read_ms

log = logging.getLogger("workers.timers")

STORE_URL_ENV = "SK_REDIS_URL"
GRACE_ENV = "SK_SWEEP_GRACE_MS"
DEFAULT_GRACE_MS = 2_000

FireResult = Literal["committed", "duplicate", "stale", "rejected", "conflict"]

_COMMANDS: dict[str, type[CommandBase]] = {
    "turn": TurnTimeout,
    "trustee": TrusteeAct,
    "ready": ReadyTimeout,
}


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise RuntimeError(f"{name}={raw!r}: expected a whole number") from None
    if value < 0:
        raise RuntimeError(f"{name}={raw!r}: must not be negative")
    return value


def timer_command_id(match_id: str, version: int, kind: str) -> str:
    """The id of the timer command for one deadline: the same for every firing of it."""
    return f"timer:{kind}:{version}:{match_id}"


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
    scheduler: Any  # workers.scheduler.DeadlineScheduler
    grace_ms: int = DEFAULT_GRACE_MS
    #: called with (command, outcome) after a timer command committed: tells the
    #: players (their ``sk:out:<player>`` streams, as the gateway does for their own commands)
    publish: Callable[[CommandBase, Any], None] | None = None
    stats: dict[str, int] = field(default_factory=dict)
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
    from workers.scheduler import DeadlineScheduler

    store = RedisEventStore.from_url(url)
    clock = SystemClock()
    scheduler = DeadlineScheduler(clock)
    service = make_service(store, clock, None, on_commit=scheduler.on_commit,
                           cache_size=_env_int("SK_STATE_CACHE", 20_000))
    grace = _env_int(GRACE_ENV, DEFAULT_GRACE_MS)
    log.info("timer runtime: store %s, grace %d ms", url.split("@")[-1], grace)
    publish = None if os.environ.get("SK_TIMERS_PUBLISH", "1") == "0" else gateway_publisher(store.client)
    rt = Runtime(store=store, service=service, clock=clock, scheduler=scheduler,
                 grace_ms=grace, publish=publish)
    for hook in list(_build_hooks):
        rt = hook(rt) or rt
    return rt


def gateway_publisher(client: Any) -> Callable[[CommandBase, Any], None] | None:
    """Publish a timer outcome to the players' outbound streams exactly as the
    command gateway publishes a player's command (per-player redacted events +
    the player's full view): a timeout notice, a trustee play, a removal reaches
    the players although no gateway handled a command.  None if the gateway
    module is not available."""
    try:
        from engine.service.inbox import InboxConsumer
    except ImportError:  # pragma: no cover
        return None
    gw = InboxConsumer(client, service=None, consumer="sk-timers")
    return lambda command, outcome: gw.publish(command, outcome)


def fire(match_id: str, version: int, kind: str, rt: Runtime | None = None,
         source: str = "message") -> FireResult:
    """Act on one deadline (idempotent; see the module docstring)."""
    rt = rt or current()
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
    if isinstance(known, int) and known > int(version):
        log.debug("%s %s v%d (%s): stale, the match is at v%d or later", kind, match_id, version, source, known)
        rt.count("stale")
        return "stale"
    try:
        current_version = rt.service.load_state(match_id).version
    except Exception:
        current_version = None
    if current_version is not None and current_version != int(version):
        log.debug("%s %s v%d (%s): stale or duplicate, the match is at v%d",
                  kind, match_id, version, source, current_version)
        rt.count("stale")
        return "stale"
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
        rt.count("duplicate")
        return "duplicate"
    if rt.publish is not None:
        try:
            rt.publish(cmd, outcome)
        except Exception:  # the events are stored; the next update carries the full view
            log.exception("%s %s v%d: could not publish the outcome", kind, match_id, version)
    rt.count("committed")
    rt.count(f"committed_{source}")
    return "committed"
