"""Scheduling the timer message for a match's next deadline.

After every committed outcome the new state's deadline (``state.deadline()``:
``turn`` at last event + ``turn_seconds``, ``trustee`` at + ``trustee_delay_seconds``,
``ready`` at + ``ready_seconds`` — computed by :mod:`engine.match.evolve` from the
match's own config and event timestamps) is sent as one ``fire_deadline``
message delayed by ``at_ms - now`` (never negative).

The message carries ``(match_id, version, kind)``; firing it executes the
timer command whose id is derived from those three (see
:func:`workers.actors.timer_command`), so a late, duplicated or stale message
is a no-op by construction.  A lost message is found by the deadline sweeper.

Two ways to send:

* :class:`DramatiqSender` — ``fire_deadline.send_with_options(delay=…)``; the
  broker holds the message until its eta (production, embedded with a real clock);
* :class:`ManualTimers` — a heap released by :meth:`ManualTimers.release_due`
  when a test moves its :class:`~workers.clock.FakeClock`; released messages go
  through the same broker/actor path, just without a dramatiq delay.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import os
import threading
from collections.abc import Callable
from typing import Any, Protocol

import dramatiq
from dramatiq import Message
from dramatiq.broker import Broker

from engine.match.deadline import Deadline
from workers.broker import BROKER_URL_ENV, FIRE_ACTOR, QUEUE, make_broker
from workers.clock import read_ms

log = logging.getLogger(__name__)


class Sender(Protocol):
    def __call__(self, deadline: Deadline, delay_ms: int) -> None: ...


def fire_message(deadline: Deadline, queue_name: str = QUEUE) -> Message:
    """The ``fire_deadline`` message for ``deadline`` (built by name: no actor import)."""
    return Message(queue_name=queue_name, actor_name=FIRE_ACTOR,
                   args=(deadline.match_id, deadline.version, deadline.kind), kwargs={}, options={})


class DramatiqSender:
    """Send ``fire_deadline`` through dramatiq's current global broker, with a delay."""

    def __call__(self, deadline: Deadline, delay_ms: int) -> None:
        broker = dramatiq.get_broker()
        broker.enqueue(fire_message(deadline), delay=max(0, int(delay_ms)) or None)


class BrokerSender:
    """Send ``fire_deadline`` messages on a given broker without touching
    dramatiq's global broker or the actor objects — for processes that only
    *schedule* (the inbox consumer / ``serve``), e.g.
    ``DeadlineScheduler(clock, BrokerSender(make_broker(os.environ["SK_BROKER_URL"])))``."""

    def __init__(self, broker: Broker, queue_name: str = QUEUE):
        self.broker = broker
        self.queue_name = queue_name
        broker.declare_queue(self.queue_name)

    def __call__(self, deadline: Deadline, delay_ms: int) -> None:
        self.broker.enqueue(fire_message(deadline, self.queue_name), delay=max(0, int(delay_ms)) or None)


class ManualTimers:
    """Timers held in a heap until a (fake) clock passes their ``at_ms``."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Deadline]] = []
        self._seq = itertools.count()
        self._lock = threading.Lock()

    def __call__(self, deadline: Deadline, delay_ms: int) -> None:
        with self._lock:
            heapq.heappush(self._heap, (deadline.at_ms, next(self._seq), deadline))

    def __len__(self) -> int:
        return len(self._heap)

    def next_at(self) -> int | None:
        with self._lock:
            return self._heap[0][0] if self._heap else None

    def pop_due(self, now_ms: int) -> Deadline | None:
        with self._lock:
            if self._heap and self._heap[0][0] <= now_ms:
                return heapq.heappop(self._heap)[2]
            return None

    def pending(self) -> list[Deadline]:
        with self._lock:
            return [d for _, _, d in sorted(self._heap)]

    def drop_all(self) -> list[Deadline]:
        """Lose every pending message (tests: a crashed worker, a lost message)."""
        with self._lock:
            lost = [d for _, _, d in sorted(self._heap)]
            self._heap.clear()
            return lost


class DeadlineScheduler:
    """Turns committed outcomes into delayed ``fire_deadline`` messages.

    ``clock``: anything :func:`workers.clock.read_ms` reads (the delay is
    ``at_ms - now``).  ``sender``: :class:`DramatiqSender` by default.
    Use :meth:`on_commit` as ``MatchService``'s ``on_commit`` hook.
    """

    def __init__(self, clock: Any = None, sender: Sender | Callable[[Deadline, int], None] | None = None):
        self.clock = clock
        self.sender = sender if sender is not None else DramatiqSender()
        self.sent = 0

    def schedule(self, deadline: Deadline | None) -> None:
        if deadline is None:
            return
        delay = max(0, deadline.at_ms - read_ms(self.clock))
        try:
            self.sender(deadline, delay)
            self.sent += 1
        except Exception:  # the sweeper fires it anyway; never fail the command for this
            log.exception("could not schedule %s for %s v%d (the sweeper will fire it)",
                          deadline.kind, deadline.match_id, deadline.version)

    def on_commit(self, outcome: Any) -> None:
        """Schedule the deadline of a freshly committed outcome.

        Rejections and duplicates schedule nothing: a duplicate's deadline was
        scheduled when it first committed (or, if that process died in
        between, the sweeper fires it); rescheduling on every redelivered
        message would only multiply stale messages.
        """
        if getattr(outcome, "rejection", None) is not None or getattr(outcome, "duplicate", False):
            return
        state = getattr(outcome, "state", None)
        if state is None:
            return
        self.schedule(state.deadline())


def scheduler_from_env(clock: Any = None, url: str | None = None) -> DeadlineScheduler:
    """The scheduler a command-service process (``serve``) hooks into its MatchService:
    messages go to the dramatiq Redis at ``SK_BROKER_URL``.

        scheduler = scheduler_from_env(clock)
        service = MatchService(store, clock, rng, on_commit=scheduler.on_commit)
    """
    url = url or os.environ.get(BROKER_URL_ENV)
    if not url:
        raise RuntimeError(f"{BROKER_URL_ENV} is not set (the dramatiq Redis the timer workers consume)")
    return DeadlineScheduler(clock, BrokerSender(make_broker(url)))
