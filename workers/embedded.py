"""The embedded default: timers without any server (DESIGN.md "Embedded default").

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

With a :class:`~workers.clock.FakeClock` the scheduler holds timer messages
in :class:`~workers.scheduler.ManualTimers` and :meth:`EmbeddedTimers.advance`
releases the due ones in deadline order: each goes through the StubBroker and
the dramatiq worker (``broker.join`` / ``worker.join``), with the clock set to
the deadline first, so the events carry the deadline's timestamp.  With a real
clock the scheduler sends dramatiq delayed messages (the StubBroker's delay
queue) and a sweeper thread runs, as in a worker process.
"""

from __future__ import annotations

import logging
import random
import time
from typing import Any

import dramatiq
from dramatiq import Worker
from dramatiq.brokers.stub import StubBroker

from engine.store.base import EventStore
from workers import runtime as rt_mod
from workers.broker import QUEUE, bind_actors, make_broker
from workers.clock import FakeClock, SystemClock, read_ms
from workers.scheduler import DeadlineScheduler, DramatiqSender, ManualTimers
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
    """Store + service + StubBroker + in-process worker + scheduler (+ sweeper).

    Only one instance may run at a time in a process (the actors use the
    installed runtime and the global broker).

    ``publish(command, outcome)`` is called after each committed timer command
    (a terminal UI refreshes on it); ``publish="gateway"`` with a fakeredis
    store publishes to the players' ``sk:out:<player>`` streams like production.
    """

    def __init__(self, store: EventStore | str | None = None, *, clock: Any = None, rng: Any = None,
                 worker_threads: int = 2, sweep_interval_ms: int = 250, grace_ms: int = 500,
                 publish: Any = None, start: bool = True, **service_kwargs: Any):
        self.store: EventStore = make_store(store or "memory") if store is None or isinstance(store, str) else store
        self.clock = clock if clock is not None else SystemClock()
        self.fake = isinstance(self.clock, FakeClock) or hasattr(self.clock, "advance")
        self.manual: ManualTimers | None = ManualTimers() if self.fake else None
        self.scheduler = DeadlineScheduler(self.clock, self.manual if self.manual is not None else DramatiqSender())
        self.service = rt_mod.make_service(
            self.store, self.clock, rng if rng is not None else random.Random(),
            on_commit=self.scheduler.on_commit, **service_kwargs)
        self.runtime = rt_mod.Runtime(store=self.store, service=self.service, clock=self.clock,
                                      scheduler=self.scheduler, grace_ms=grace_ms,
                                      publish=publish)
        if publish == "gateway":
            self.runtime.publish = rt_mod.gateway_publisher(self.store.client)  # type: ignore[attr-defined]
        self.broker: StubBroker = make_broker(None)  # type: ignore[assignment]
        self.worker_threads = worker_threads
        self.sweep_interval_ms = sweep_interval_ms
        self.worker: Worker | None = None
        self.sweeper: SweeperThread | None = None
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
        if not self.fake and self.sweep_interval_ms > 0:
            self.sweeper = SweeperThread(self.sweep_interval_ms, runtime=self.runtime)
            self.sweeper.start()
        return self

    def stop(self) -> None:
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
        """Run a command through the service (the commit schedules its deadline)."""
        out = self.service.execute(command)
        return out

    def join(self, timeout_ms: int | None = None) -> None:
        """Wait until every message sent so far (delayed ones included) is processed."""
        self.broker.join(self.queue, timeout=timeout_ms, fail_fast=True)
        assert self.worker is not None
        self.worker.join()

    def send_fire(self, match_id: str, version: int, kind: str) -> None:
        """Send one ``fire_deadline`` message now (tests: duplicates, stale messages)."""
        from workers.actors import fire_deadline

        fire_deadline.send(match_id, version, kind)

    def advance(self, seconds: float, *, max_fires: int = 100_000) -> int:
        """Fake clock only: move time forward, firing every deadline that falls
        due on the way, in order, through the broker and the worker; returns
        how many timer messages were processed."""
        if self.manual is None or not hasattr(self.clock, "set"):
            raise RuntimeError("advance() needs a FakeClock (with a real clock timers fire by themselves)")
        target = self.now_ms() + int(round(seconds * 1000))
        fired = 0
        while fired < max_fires:
            d = self.manual.pop_due(target)
            if d is None:
                break
            self.clock.set(d.at_ms)
            self.send_fire(d.match_id, d.version, d.kind)
            self.join()
            fired += 1
        self.clock.set(target)
        return fired

    def run_until_quiet(self, max_seconds: float = 3600, *, max_fires: int = 100_000) -> int:
        """Fake clock: keep jumping to the next deadline until none is left
        (every match finished or waiting on a person with no clock) or ``max_seconds`` pass."""
        assert self.manual is not None
        end = self.now_ms() + int(max_seconds * 1000)
        fired = 0
        while fired < max_fires:
            nxt = self.manual.next_at()
            if nxt is None or nxt > end:
                break
            fired += self.advance(max(0, nxt - self.now_ms()) / 1000, max_fires=max_fires - fired)
        return fired

    def lose_pending_timers(self) -> list[Any]:
        """Fake clock: drop every timer message not yet fired (a crash, a lost message)."""
        assert self.manual is not None
        return self.manual.drop_all()

    def sweep(self, now_ms: int | None = None) -> list[Any]:
        """One sweep of overdue deadlines (in this thread)."""
        return sweep(self.runtime, now_ms=now_ms)

    def wait_finished(self, match_id: str, timeout_s: float = 30.0) -> Any:
        """Real clock: wait until the match is finished; returns its state."""
        end = time.monotonic() + timeout_s
        while True:
            st = self.service.load_state(match_id)
            if st.phase == "finished" or time.monotonic() > end:
                return st
            time.sleep(0.02)
