"""The embedded default: timers without any server (docs/ARCHITECTURE.md "Embedded default").

One process holds everything: an event store (in memory, or fakeredis with
Lua — the same Lua append as production), dramatiq's ``StubBroker`` and an
in-process dramatiq ``Worker`` running the real actors of
:mod:`workers.actors`, the :class:`~workers.scheduler.DeadlineScheduler`
hooked into the :class:`~engine.service.service.MatchService` and the deadline
sweeper.  Only the connections differ from production.

    with EmbeddedTimers() as timers:             # real clock: timers fire by themselves
        timers.service.execute(cmd)              # player commands (play, simulate)
        ...

    clock = FakeClock()
    with EmbeddedTimers(clock=clock) as timers:  # tests: time moves only when told
        timers.advance(15)                       # fires every deadline due in 15 s, in order

Timers work as in production (workers/dispatcher.py): no message is sent on a
commit; a :class:`~workers.dispatcher.Dispatcher` claims the deadlines that fall
due from the store's deadline index (Lua on fakeredis, the same rules in memory
for the in-memory store) and enqueues them on the StubBroker as
``fire_deadlines`` batches.  With a real clock a dispatcher thread ticks every
``dispatch_interval_ms`` and a sweeper thread runs, as in a worker process.
With a :class:`~workers.clock.FakeClock` :meth:`EmbeddedTimers.advance` moves
the clock to each deadline in turn, runs one dispatcher tick there and waits
for the worker (``broker.join`` / ``worker.join``), so the events carry the
deadline's timestamp.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterable
from typing import Any

import dramatiq
from dramatiq import Worker
from dramatiq.brokers.stub import StubBroker

from engine.store.base import EventStore
from workers import runtime as rt_mod
from workers.broker import QUEUE, bind_actors, make_broker
from workers.clock import FakeClock, SystemClock, read_ms
from engine.match.deadline import Deadline
from workers.dispatcher import (
    DEFAULT_LEASE_MS,
    BrokerDispatch,
    Dispatcher,
    DispatcherLease,
    DispatcherThread,
    claims_for,
)
from workers.scheduler import DeadlineScheduler, DramatiqSender
from workers.sweeper import SweeperThread, sweep

log = logging.getLogger("workers.embedded")


def make_store(kind: str = "memory") -> EventStore:
    """``memory`` (InMemoryEventStore) or ``fakeredis`` (RedisEventStore on fakeredis, with Lua)."""
    if kind == "memory":
        from engine.store.memory import InMemoryEventStore

        return InMemoryEventStore()
    if kind == "fakeredis":
        import fakeredis

        from engine.store.redis_store import RedisEventStore

        return RedisEventStore(fakeredis.FakeRedis(server=fakeredis.FakeServer()))
    raise ValueError(f"unknown embedded store {kind!r} (memory or fakeredis)")


class EmbeddedTimers:
    """Store + service + StubBroker + in-process worker + dispatcher (+ sweeper).

    Only one instance may run at a time in a process (the actors use the
    installed runtime and the global broker).

    ``publish(command, outcome)`` is called after each committed timer command
    (a terminal UI refreshes on it); ``publish="gateway"`` with a fakeredis
    store publishes to the players' ``sk:out:<player>`` streams like production.
    ``lease_ms``: the first in-flight lease of a dispatched deadline (then it is
    dispatched again).  ``timer_messages=True``: the old path instead, a delayed
    ``fire_deadline`` message per commit (real clock only; no dispatcher).
    """

    def __init__(self, store: EventStore | str | None = None, *, clock: Any = None, rng: Any = None,
                 worker_threads: int = 2, sweep_interval_ms: int = 250, grace_ms: int = 500,
                 dispatch_interval_ms: int = 25, lease_ms: int = DEFAULT_LEASE_MS,
                 timer_messages: bool = False, publish: Any = None, start: bool = True,
                 **service_kwargs: Any):
        self.store: EventStore = make_store(store or "memory") if store is None or isinstance(store, str) else store
        self.clock = clock if clock is not None else SystemClock()
        self.fake = isinstance(self.clock, FakeClock) or hasattr(self.clock, "advance")
        if timer_messages and self.fake:
            raise ValueError("timer_messages needs a real clock (a fake clock moves through the dispatcher)")
        self.scheduler: DeadlineScheduler | None = DeadlineScheduler(self.clock, DramatiqSender()) \
            if timer_messages else None
        self.claims = claims_for(self.store, first_lease_ms=lease_ms)
        self.service = rt_mod.make_service(
            self.store, self.clock, rng if rng is not None else random.Random(),
            on_commit=self.scheduler.on_commit if self.scheduler is not None else None, **service_kwargs)
        self.runtime = rt_mod.Runtime(store=self.store, service=self.service, clock=self.clock,
                                      scheduler=self.scheduler, grace_ms=grace_ms,
                                      publish=publish, claims=self.claims,
                                      clock_pause_min_ms=rt_mod.clock_pause_setting(self.clock))
        if publish == "gateway":
            self.runtime.publish = rt_mod.gateway_publisher(self.store.client)  # type: ignore[attr-defined]
        self.broker: StubBroker = make_broker(None)  # type: ignore[assignment]
        self.dispatcher = Dispatcher(self.claims, BrokerDispatch(self.broker), self.clock,
                                     spread=worker_threads)
        self.worker_threads = worker_threads
        self.sweep_interval_ms = sweep_interval_ms
        self.dispatch_interval_ms = 0 if timer_messages else dispatch_interval_ms
        self.worker: Worker | None = None
        self.sweeper: SweeperThread | None = None
        self.dispatch_thread: DispatcherThread | None = None
        self._previous_broker: Any = None
        if start:
            self.start()

    # -- life cycle -----------------------------------------------------------------
    def start(self) -> EmbeddedTimers:
        from workers import actors

        self._previous_broker = dramatiq.broker.global_broker
        dramatiq.set_broker(self.broker)
        bind_actors(self.broker, actors.ACTORS)
        rt_mod.install(self.runtime)
        # poll every 20 ms: the stub consumer only moves due delayed messages between polls
        self.worker = Worker(self.broker, worker_threads=self.worker_threads, worker_timeout=20)
        self.worker.start()
        if not self.fake and self.dispatch_interval_ms > 0:
            self.dispatch_thread = DispatcherThread(lambda: self.dispatcher, DispatcherLease(None),
                                                    self.dispatch_interval_ms)
            self.dispatch_thread.start()
        if not self.fake and self.sweep_interval_ms > 0:
            self.sweeper = SweeperThread(self.sweep_interval_ms, runtime=self.runtime)
            self.sweeper.start()
        return self

    def stop(self) -> None:
        if self.dispatch_thread is not None:
            self.dispatch_thread.stop()
            self.dispatch_thread = None
        if self.sweeper is not None:
            self.sweeper.stop()
            self.sweeper = None
        if self.worker is not None:
            self.worker.stop(timeout=5000)
            self.worker = None
        self.broker.close()
        rt_mod.uninstall(self.runtime)
        if self._previous_broker is not None:
            dramatiq.set_broker(self._previous_broker)

    def __enter__(self) -> EmbeddedTimers:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- driving ----------------------------------------------------------------------
    @property
    def queue(self) -> str:
        return QUEUE

    def now_ms(self) -> int:
        return read_ms(self.clock)

    def execute(self, command: Any) -> Any:
        """Run a command through the service (its deadline goes to the store's index)."""
        return self.service.execute(command)

    def join(self, timeout_ms: int | None = None) -> None:
        """Wait until every message sent so far (delayed ones included) is processed."""
        self.broker.join(self.queue, timeout=timeout_ms, fail_fast=True)
        assert self.worker is not None
        self.worker.join()

    def send_fire(self, match_id: str, version: int, kind: str) -> None:
        """Send one ``fire_deadline`` message now (tests: duplicates, stale messages)."""
        from workers.actors import fire_deadline

        fire_deadline.send(match_id, version, kind)

    def deadlines(self, until_ms: int | None = None) -> list[Deadline]:
        """The recorded deadlines at or before ``until_ms`` (None: all), earliest first."""
        return self.store.due_deadlines(2**62 if until_ms is None else until_ms, 1_000_000)

    def next_at(self, until_ms: int | None = None) -> int | None:
        """When the dispatcher will next send something (fake clock): the earliest
        deadline not in flight, or the end of an in-flight lease; None if nothing is
        recorded (at or before ``until_ms``)."""
        best: int | None = None
        for d in self.deadlines(until_ms):
            if best is not None and d.at_ms >= best:
                break  # earliest first: nothing later can be earlier
            retry = self.claims.retry_at(d)
            at = d.at_ms if retry is None else max(d.at_ms, retry)
            if until_ms is not None and at > until_ms:
                continue
            best = at if best is None else min(best, at)
        return best

    def advance(self, seconds: float, *, max_fires: int = 100_000) -> int:
        """Fake clock only: move time forward, dispatching every deadline that falls
        due on the way, in order, through the broker and the worker; returns how many
        deadlines were dispatched."""
        if not self.fake or not hasattr(self.clock, "set"):
            raise RuntimeError("advance() needs a FakeClock (with a real clock timers fire by themselves)")
        target = self.now_ms() + int(round(seconds * 1000))
        fired = 0
        while fired < max_fires:
            at = self.next_at(target)
            if at is None:
                break
            self.clock.set(at)
            sent = self.dispatcher.tick()
            if sent == 0:
                break
            self.join()
            fired += sent
        self.clock.set(target)
        return fired

    def run_until_quiet(self, max_seconds: float = 3600, *, max_fires: int = 100_000) -> int:
        """Fake clock: keep jumping to the next deadline until none is left
        (every match finished or waiting on a person with no clock) or ``max_seconds`` pass."""
        end = self.now_ms() + int(max_seconds * 1000)
        fired = 0
        while fired < max_fires:
            nxt = self.next_at(end)
            if nxt is None:
                break
            n = self.advance(max(0, nxt - self.now_ms()) / 1000, max_fires=max_fires - fired)
            if n == 0:
                break
            fired += n
        return fired

    def lose_pending_timers(self) -> list[Deadline]:
        """Fake clock: every recorded deadline counts as dispatched and its message
        as lost (a crash, a flushed broker): the dispatcher sends it again only once its
        in-flight lease has run out; the sweeper fires it after the grace period."""
        return [c.deadline for c in self.claims.claim(self.now_ms(), 1_000_000, due_ms=2**62)]

    def release(self, deadlines: Iterable[Deadline]) -> None:
        """Forget the in-flight marks of ``deadlines`` (tests)."""
        self.claims.release((d.match_id, d.version, d.kind) for d in deadlines)

    def sweep(self, now_ms: int | None = None) -> list[Any]:
        """One sweep of overdue deadlines (in this thread)."""
        return sweep(self.runtime, now_ms=now_ms)

    def wait_finished(self, match_id: str, timeout_s: float = 30.0) -> Any:
        """Real clock: wait until the match is over (finished or abandoned); returns its state."""
        end = time.monotonic() + timeout_s
        while True:
            st = self.service.load_state(match_id)
            if st.over or time.monotonic() > end:
                return st
            time.sleep(0.02)
