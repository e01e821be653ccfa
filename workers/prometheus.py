"""dramatiq entry point for the worker containers: the project's actors with the
engine's metrics around the timer runtime.

    SK_DRAMATIQ_PROMETHEUS=1 dramatiq workers.prometheus workers.actors

dramatiq imports this module as the "broker" argument; it is part of the
installed package (no ``--path``), so this works from a wheel.  It

* imports ``workers.actors``, which installs the broker from ``SK_BROKER_URL``;
  with ``SK_DRAMATIQ_PROMETHEUS=1`` that broker carries dramatiq's Prometheus
  middleware (workers/broker.py), so every worker process records
  ``dramatiq_*`` metrics in ``$dramatiq_prom_db`` and the main process serves
  that directory on ``$dramatiq_prom_port`` (9191);
* registers :func:`projections.metrics.instrument_runtime` with
  :func:`workers.runtime.on_build`, so the runtime each worker process builds
  records the engine metrics (timer lateness, command latency, counts of what
  the timers did), labelled by the rooms of the store's registry (:func:`follow_rooms`).
  Set ``PROMETHEUS_MULTIPROC_DIR`` to the same directory as ``dramatiq_prom_db`` so they
  are served on 9191 too.

See docs/OPERATIONS.md, "Metrics".
"""

from __future__ import annotations

import logging

import dramatiq

import workers.actors  # noqa: F401  (declares the actors, installs the broker)
from projections.metrics import follow_room_registry, instrument_runtime
from workers import runtime
from workers.broker import PROMETHEUS_ENV, prometheus_from_env


def follow_rooms(rt: runtime.Runtime) -> runtime.Runtime:
    """A runtime on Redis labels its metrics by the registered rooms, read again for a room
    added since (:func:`projections.metrics.follow_room_registry`): not ``other``."""
    client = getattr(getattr(rt.store, "inner", rt.store), "client", None)
    if client is not None:
        from engine.service.rooms import RedisRooms

        follow_room_registry(RedisRooms(client).names)
    return rt


runtime.on_build(instrument_runtime)
runtime.on_build(follow_rooms)

broker = dramatiq.get_broker()

if not prometheus_from_env():
    logging.getLogger(__name__).warning(
        "%s is not set: no dramatiq_* metrics (set %s=1 for dramatiq's Prometheus middleware)",
        PROMETHEUS_ENV, PROMETHEUS_ENV)
