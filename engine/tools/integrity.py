"""The integrity projection wired up (docs/INTEGRITY.md): the projection of
:mod:`projections.integrity` with the bots' quality evaluator (:func:`engine.tools.quality.evaluate`),
following the bucket feeds with the consumer group ``sk-integrity``.  Used by
``shuangkou integrity scan`` and ``shuangkou serve --integrity``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["integrity_runner", "integrity_thread"]


def integrity_runner(client: Any, event_store: Any, consumer: str) -> Any:
    """The integrity projection on ``client``, following the bucket feeds of ``event_store``
    with the consumer group ``sk-integrity`` (``integrity scan`` and ``serve --integrity``)."""
    from engine.store import keys
    from engine.tools.quality import evaluate
    from projections.integrity.store import IntegrityProjection, IntegrityRunner, IntegrityStore
    from projections.runner import RedisFeed

    return IntegrityRunner(event_store, IntegrityProjection(IntegrityStore(client), evaluate=evaluate),
                           RedisFeed(client, consumer=consumer, group=keys.INTEGRITY_GROUP,
                                     buckets=getattr(event_store, "buckets", keys.DEFAULT_BUCKETS)))


def integrity_thread(client: Any, event_store: Any, consumer: str, stop: Any) -> Any:
    """:func:`integrity_runner` as a daemon thread (not started) that runs until ``stop``."""
    import threading

    runner = integrity_runner(client, event_store, consumer)
    return threading.Thread(target=runner.run_forever, args=(stop,), name="integrity", daemon=True)
