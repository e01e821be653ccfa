"""dramatiq actors of the timer workers.

Run them with ``dramatiq workers.actors -p N -t M`` and the environment
``SK_BROKER_URL`` (dramatiq's own Redis) and ``SK_REDIS_URL`` (the event
store); see docs/WORKERS.md.  Importing this module installs the broker from
``SK_BROKER_URL`` unless a broker was already installed (the embedded
default installs a StubBroker first).

* ``fire_deadline(match_id, version, kind)`` — the turn timer (R-13.1), the
  trustee's play (R-13.3) and the ready timer (R-13.2): executes
  TurnTimeout / TrusteeAct / ReadyTimeout for that version through
  ``MatchService.execute``; stale or duplicate → no-op (logged at debug).
* ``fire_deadlines([[match_id, version, kind], …])`` — a batch of due deadlines that
  the dispatcher (workers/dispatcher.py, a thread of every worker process, one
  active at a time) took from the store's deadline index; ``fire_deadline`` is the
  same for one deadline (the old per-commit messages, ``SK_TIMER_MESSAGES=1``).
* ``sweep_deadlines()`` — one sweep of overdue deadlines (the worker process
  also sweeps on its own thread every ``SK_SWEEP_INTERVAL_MS``; this actor is
  for operators and cron-style triggering).
"""

from __future__ import annotations

import logging

import dramatiq
import dramatiq.broker
from dramatiq.brokers.stub import StubBroker

from workers import runtime as _rt
from workers.broker import QUEUE, TIME_LIMIT_MS, register_actors, setup_broker
from workers.sweeper import DispatcherMiddleware, SweeperMiddleware, WorkerTuning, sweep

log = logging.getLogger("workers.timers")

_broker = dramatiq.broker.global_broker
if _broker is None:
    _broker = setup_broker()
if not isinstance(_broker, StubBroker):
    # a real worker process: poll fast, sweep on a thread (the embedded default runs its own)
    _broker.add_middleware(WorkerTuning())
    _broker.add_middleware(SweeperMiddleware())
    _broker.add_middleware(DispatcherMiddleware())


@dramatiq.actor(queue_name=QUEUE, broker=_broker, max_retries=3, time_limit=TIME_LIMIT_MS)
def fire_deadline(match_id: str, version: int, kind: str) -> None:
    """Act on the deadline ``kind`` that was set at ``version`` of ``match_id``."""
    _rt.fire(match_id, int(version), kind, source="message")


@dramatiq.actor(queue_name=QUEUE, broker=_broker, max_retries=3, time_limit=TIME_LIMIT_MS)
def fire_deadlines(deadlines: list) -> None:  # type: ignore[type-arg]
    """Act on a batch of due deadlines ``[[match_id, version, kind], …]`` sent by the
    dispatcher (workers/dispatcher.py); one failing deadline never stops the others."""
    _rt.fire_batch(deadlines, source="dispatch")


@dramatiq.actor(queue_name=QUEUE, broker=_broker, max_retries=0, time_limit=TIME_LIMIT_MS)
def sweep_deadlines() -> None:
    """Fire every deadline overdue by more than the grace period."""
    done = sweep()
    fired = sum(1 for _, r in done if r == "committed")
    if fired:
        log.info("sweep_deadlines fired %d overdue deadline(s)", fired)


ACTORS: list[dramatiq.Actor] = [fire_deadline, fire_deadlines, sweep_deadlines]  # type: ignore[type-arg]
register_actors(ACTORS)
