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
from workers import runtime as rt_mod

log = logging.getLogger("workers.sweeper")

INTERVAL_ENV = "SK_SWEEP_INTERVAL_MS"
DEFAULT_INTERVAL_MS = 500
LEASE_KEY = "sk:timers:sweeper-lease"
MAX_ROUNDS = 20  # pages per sweep; a deadline that cannot be fired never loops forever


def sweep(rt: rt_mod.Runtime | None = None, *, now_ms: int | None = None,
          grace_ms: int | None = None, limit: int = 200) -> list[tuple[Deadline, str]]:
    """Fire the deadlines overdue by more than ``grace_ms``; returns what was done."""
    rt = rt or rt_mod.current()
    now = rt.now_ms() if now_ms is None else now_ms
    grace = rt.grace_ms if grace_ms is None else grace_ms
    done: list[tuple[Deadline, str]] = []
    seen: set[tuple[str, int, str]] = set()
    for _ in range(MAX_ROUNDS):
        due = [d for d in rt.store.due_deadlines(now - grace, limit)
               if (d.match_id, d.version, d.kind) not in seen]
        if not due:
            break
        for d in due:
            seen.add((d.match_id, d.version, d.kind))
            try:
                result = rt_mod.fire(d.match_id, d.version, d.kind, rt, source="sweeper")
            except Exception:
                log.exception("sweeper: firing %s %s v%d failed", d.kind, d.match_id, d.version)
                result = "error"
            if result == "committed":
                log.info("sweeper fired %s deadline of %s v%d, %d ms overdue",
                         d.kind, d.match_id, d.version, now - d.at_ms)
            done.append((d, result))
        if len(due) < limit:
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
        while not self._stop_event.wait(self.interval):
            if not self._lease():
                continue
            try:
                done = sweep(self.runtime)
                self.sweeps += 1
                self.fired += sum(1 for _, r in done if r == "committed")
            except Exception:
                log.exception("sweeper: sweep failed (retrying next interval)")

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
