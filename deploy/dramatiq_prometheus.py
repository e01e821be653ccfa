"""dramatiq entry point for the worker containers: the project's actors plus
dramatiq's Prometheus middleware (not in dramatiq's default middleware).

    dramatiq dramatiq_prometheus workers.actors --path /app/deploy

dramatiq imports this module as the "broker" argument: it imports
``workers.actors`` (which installs the broker from ``SK_BROKER_URL``) and adds
``dramatiq.middleware.Prometheus`` to that broker.  Every worker process then
records ``dramatiq_*`` metrics in ``$dramatiq_prom_db`` and the main process
serves that directory on ``$dramatiq_prom_port`` (9191).  Set
``PROMETHEUS_MULTIPROC_DIR`` to the same directory so the engine's own metrics
observed in workers (projections.metrics) are served there too.
See docs/OPERATIONS.md, "Metrics".
"""

from __future__ import annotations

import dramatiq
from dramatiq.middleware.prometheus import Prometheus

import workers.actors  # noqa: F401  (declares the actors, installs the broker)

from projections.metrics import InstrumentedService, InstrumentedStore
from workers import runtime as _runtime

_from_env = _runtime.from_env


def _instrumented_from_env():
    """The worker runtime, with the engine metrics wrapped around its service
    (timer lateness, command latency, counts of what the timers did)."""
    rt = _from_env()
    rt.store = InstrumentedStore(rt.store)
    rt.service.store = rt.store
    rt.service = InstrumentedService(rt.service, store=rt.store, clock=rt.clock)
    return rt


_runtime.from_env = _instrumented_from_env

broker = dramatiq.get_broker()
if not any(isinstance(m, Prometheus) for m in broker.middleware):
    broker.add_middleware(Prometheus())
