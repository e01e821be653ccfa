"""The deadline sweeper: fires every recorded deadline that is overdue by more
than a grace period, whatever happened to its timer message.

Every append records the match's next deadline in the event store in the
same atomic step (``EventStore.append(..., deadline)``), so the store always
knows which matches are waiting on the system.  A timer message can be lost
(a worker killed with SIGKILL holds its prefetched delayed messages until
dramatiq's heartbeat timeout; a send that failed after the commit; a broker
flushed by an operator): the sweeper finds the deadline and fires it through
the same idempotent path (:func:`workers.runtime.fire`), so no match ever
freezes.

Several sweepers may run (one per worker process): each firing is idempotent
(command id from match id + version + kind, versions checked by ``decide``,
appends checked by the store), so a race costs a no-op, never a doubled turn.
When the broker is a RedisBroker a short ``SET NX PX`` lease on the broker's
Redis lets only one process sweep per interval, to save the wasted work.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from typing import Any

from dramatiq.middleware import Middleware

from engine.match.deadline import Deadline
from engine.store import keys
from engine.store.transient import Backoff, is_transient
from workers import runtime as rt_mod
from workers.dispatcher import (
    DEFAULT_HOLDER_TTL_MS,
    HOLDER_TTL_ENV,
    BrokerDispatch,
    Dispatcher,
    DispatcherLease,
    DispatcherThread,
    claims_for,
)
from workers.dispatcher import DEFAULT_INTERVAL_MS as DEFAULT_DISPATCH_INTERVAL_MS
from workers.dispatcher import INTERVAL_ENV as DISPATCH_INTERVAL_ENV
from workers.settings import env_ms

log = logging.getLogger("workers.sweeper")

INTERVAL_ENV = "SK_SWEEP_INTERVAL_MS"
DEFAULT_INTERVAL_MS = 500
LEASE_KEY = keys.SWEEPER_LEASE_KEY
MAX_ROUNDS = 20  # pages per sweep; a deadline that cannot be fired never loops forever


class SweepBackoff:
    """Deadlines that failed to fire, skipped until their back-off ends (issue 11 §5).

    A deadline that fails (a bug, an event that cannot be decoded…) would otherwise be
    fired again every interval, and 200 of them filled every page of the sweep, hiding
    every other overdue deadline.  Each failure doubles its wait, from ``first_ms`` up
    to ``cap_ms``; at most ``max_entries`` are remembered (the oldest are forgotten).

    >>> b = SweepBackoff(first_ms=1000, cap_ms=4000)
    >>> key = ("m1", 5, "turn")
    >>> b.failed(key, now_ms=0), b.failed(key, now_ms=0), b.failed(key, now_ms=0), b.failed(key, now_ms=0)
    (1000, 2000, 4000, 4000)
    >>> b.skip(key, now_ms=3999), b.skip(key, now_ms=4000)
    (True, False)
    """

    def __init__(self, first_ms: int = 1_000, cap_ms: int = 60_000, max_entries: int = 10_000):
        self.first_ms = first_ms
        self.cap_ms = cap_ms
        self.max_entries = max_entries
        self._entries: dict[tuple[str, int, str], tuple[int, int]] = {}  # key -> (failures, retry at)
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def skip(self, key: tuple[str, int, str], now_ms: int) -> bool:
        with self._lock:
            entry = self._entries.get(key)
        return entry is not None and now_ms < entry[1]

    def failed(self, key: tuple[str, int, str], now_ms: int) -> int:
        """Record a failure; returns the wait before the next try, in ms."""
        with self._lock:
            n = self._entries.pop(key, (0, 0))[0] + 1
            wait = min(self.first_ms * 2 ** (n - 1), self.cap_ms)
            self._entries[key] = (n, now_ms + wait)
            while len(self._entries) > self.max_entries:
                del self._entries[next(iter(self._entries))]
            return wait

    def done(self, key: tuple[str, int, str]) -> None:
        with self._lock:
            self._entries.pop(key, None)


def backoff_of(rt: rt_mod.Runtime) -> SweepBackoff:
    """The runtime's sweep back-off (one per process's runtime: the thread and the actor share it)."""
    b = getattr(rt, "sweep_backoff", None)
    if b is None:
        b = SweepBackoff()
        rt.sweep_backoff = b
    return b


def _observe_failure(kind: str, backoff: SweepBackoff) -> None:
    try:
        from projections import metrics
    except Exception:  # pragma: no cover - metrics are optional here
        return
    metrics.observe_sweeper_failure(kind)
    metrics.SWEEPER_BACKING_OFF.set(len(backoff))


def sweep(rt: rt_mod.Runtime | None = None, *, now_ms: int | None = None,
          grace_ms: int | None = None, limit: int = 200,
          backoff: SweepBackoff | None = None) -> list[tuple[Deadline, str]]:
    """Fire the deadlines overdue by more than ``grace_ms``; returns what was done.

    A deadline the dispatcher sent whose in-flight lease is not over is left to it
    (result ``"in_flight"``).  A deadline whose firing fails is skipped (result ``"error"``), counted
    (``shuangkou_sweeper_failures_total``) and retried with back-off (``backoff``):
    the sweep reads past it, so failing deadlines never hide the others.  A
    transient Redis failure (the store is down or refusing writes) ends the sweep:
    it propagates, and the next interval tries again.
    """
    rt = rt or rt_mod.current()
    backoff = backoff_of(rt) if backoff is None else backoff
    now = rt.now_ms() if now_ms is None else now_ms
    grace = rt.grace_ms if grace_ms is None else grace_ms
    done: list[tuple[Deadline, str]] = []
    seen: set[tuple[str, int, str]] = set()
    for _ in range(MAX_ROUNDS):
        ask = limit + len(seen)  # read past what this sweep already handled or skipped
        page = rt.store.due_deadlines(now - grace, ask)
        due = [d for d in page if (d.match_id, d.version, d.kind) not in seen]
        if not due:
            break
        # deadlines the dispatcher sent and whose in-flight lease is not over are its to
        # finish (or to send again): firing them here would only make their message stale
        flying = rt.claims.in_flight_of(due, now) if rt.claims is not None else set()
        for d in due:
            key = (d.match_id, d.version, d.kind)
            seen.add(key)
            if d in flying:
                done.append((d, "in_flight"))
                continue
            if backoff.skip(key, now):
                done.append((d, "backoff"))
                continue
            result: str
            try:
                result = rt_mod.fire(d.match_id, d.version, d.kind, rt, source="sweeper")
            except Exception as exc:
                if is_transient(exc):
                    raise
                wait = backoff.failed(key, now)
                log.exception("sweeper: firing %s %s v%d failed (skipped, retried in %d ms)",
                              d.kind, d.match_id[:80], d.version, wait)
                _observe_failure(d.kind, backoff)
                result = "error"
            else:
                backoff.done(key)
            if result == "committed":
                log.info("sweeper fired %s deadline of %s v%d, %d ms overdue",
                         d.kind, d.match_id, d.version, now - d.at_ms)
            done.append((d, result))
        if len(page) < ask:
            break
    return done


class SweeperThread(threading.Thread):
    """Runs :func:`sweep` every ``interval_ms`` until :meth:`stop`."""

    def __init__(self, interval_ms: int = DEFAULT_INTERVAL_MS, *, lease_client: Any = None,
                 runtime: rt_mod.Runtime | None = None):
        super().__init__(name="sk-deadline-sweeper", daemon=True)
        self.interval = max(10, int(interval_ms)) / 1000
        self.lease_client = lease_client
        self.runtime = runtime
        self.token = uuid.uuid4().hex
        self._stop_event = threading.Event()
        self.sweeps = 0
        self.fired = 0
        self.failed = 0

    def _lease(self) -> bool:
        if self.lease_client is None:
            return True
        try:
            ms = max(10, int(self.interval * 1000 * 0.9))
            return bool(self.lease_client.set(LEASE_KEY, self.token, nx=True, px=ms))
        except Exception:
            log.warning("sweeper: lease not available, sweeping anyway", exc_info=True)
            return True

    def run(self) -> None:
        outage = Backoff(first=self.interval, cap=10.0)  # Redis down: sweep less often
        wait = self.interval
        while not self._stop_event.wait(wait):
            wait = self.interval
            if not self._lease():
                continue
            try:
                done = sweep(self.runtime)
                self.sweeps += 1
                self.fired += sum(1 for _, r in done if r == "committed")
                self.failed += sum(1 for _, r in done if r == "error")
                outage.reset()
            except Exception as exc:
                wait = outage.next()
                if is_transient(exc):
                    log.warning("sweeper: the store is unavailable (%s), retrying in %.2fs", exc, wait)
                else:
                    log.exception("sweeper: sweep failed (retrying in %.2fs)", wait)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop_event.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout)


class SweeperMiddleware(Middleware):
    """Starts a :class:`SweeperThread` in every worker process (``dramatiq workers.actors``)."""

    def __init__(self, interval_ms: int | None = None):
        if interval_ms is None:
            interval_ms = int(os.environ.get(INTERVAL_ENV, DEFAULT_INTERVAL_MS))
        self.interval_ms = interval_ms
        self.thread: SweeperThread | None = None

    def after_worker_boot(self, broker: Any, worker: Any) -> None:
        if self.interval_ms <= 0:
            return
        client = getattr(broker, "client", None)
        self.thread = SweeperThread(self.interval_ms, lease_client=client)
        self.thread.start()
        log.info("deadline sweeper running every %d ms", self.interval_ms)

    def before_worker_shutdown(self, broker: Any, worker: Any) -> None:
        if self.thread is not None:
            self.thread.stop()
            self.thread = None


class WorkerTuning(Middleware):
    """Tunes a worker for timers before its consumers start.

    dramatiq's consumers poll an idle queue with a back-off of up to
    ``worker_timeout`` (1 s by default), and due delayed messages are moved
    onto the queue only when the consumer fetches
    (:class:`workers.broker.TimerRedisBroker`), so an idle worker could fire a
    timer up to ~1 s late.  A 100 ms poll costs one cheap Redis call each.
    """

    def __init__(self, worker_timeout_ms: int | None = None, delay_prefetch: int | None = None):
        self.worker_timeout_ms = worker_timeout_ms or int(os.environ.get("SK_WORKER_POLL_MS", 100))
        self.delay_prefetch = delay_prefetch

    def before_worker_boot(self, broker: Any, worker: Any) -> None:
        if "dramatiq_worker_timeout" not in os.environ:
            worker.worker_timeout = self.worker_timeout_ms
        if self.delay_prefetch and "dramatiq_delay_queue_prefetch" not in os.environ:
            worker.delay_prefetch = self.delay_prefetch


class DispatcherMiddleware(Middleware):
    """Starts a :class:`DispatcherThread` in every worker process (``dramatiq workers.actors``);
    the lease on the broker's Redis lets one of them dispatch at a time."""

    def __init__(self, interval_ms: int | None = None):
        self.interval_ms = env_ms(DISPATCH_INTERVAL_ENV, DEFAULT_DISPATCH_INTERVAL_MS) if interval_ms is None else interval_ms
        self.thread: DispatcherThread | None = None

    def after_worker_boot(self, broker: Any, worker: Any) -> None:
        if self.interval_ms <= 0:
            log.info("deadline dispatcher off (%s=0)", DISPATCH_INTERVAL_ENV)
            return
        def make() -> Dispatcher:
            rt = rt_mod.current()
            if rt.claims is None:
                rt.claims = claims_for(rt.store)
            threads = int(getattr(worker, "worker_threads", 4) or 4)
            return Dispatcher(rt.claims, BrokerDispatch(broker), rt.clock, spread=threads)

        lease = DispatcherLease(getattr(broker, "client", None), env_ms(HOLDER_TTL_ENV, DEFAULT_HOLDER_TTL_MS))
        self.thread = DispatcherThread(make, lease, self.interval_ms)
        self.thread.start()
        log.info("deadline dispatcher running every %d ms (lease %s)", self.interval_ms, lease.token)

    def before_worker_shutdown(self, broker: Any, worker: Any) -> None:
        thread, self.thread = self.thread, None
        if thread is not None:
            thread.stop()
        rt = rt_mod._runtime
        if rt is not None:
            d = thread.dispatcher if thread is not None else None
            log.info("timer stats: %s; dispatched %d, dispatched again %d",
                     " ".join(f"{k}={v}" for k, v in sorted(rt.stats.items())) or "none",
                     d.dispatched if d else 0, d.redispatched if d else 0)
