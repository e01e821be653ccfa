"""The integrity projection wired up (docs/INTEGRITY.md): the projection of
:mod:`projections.integrity` with the bots' quality evaluator (:func:`engine.tools.quality.evaluate`),
following the bucket feeds with the consumer group ``sk-integrity``.  Used by
``shuangkou integrity scan`` and ``shuangkou serve --integrity``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["integrity_runner"]


def integrity_runner(client: Any, event_store: Any, consumer: str, follow_owned: bool = False) -> Any:
    """The integrity projection on ``client``, following the bucket feeds of ``event_store``
    with the consumer group ``sk-integrity`` (``integrity scan``: every feed; ``serve
    --integrity``: ``follow_owned``, the new entries of the buckets the replica owns,
    :meth:`projections.runner.RedisFeed.follow`, and every feed each 5 s)."""
    from engine.store import keys
    from engine.tools.quality import evaluate
    from projections.integrity.store import IntegrityProjection, IntegrityRunner, IntegrityStore
    from projections.runner import RedisFeed

    return IntegrityRunner(event_store, IntegrityProjection(IntegrityStore(client), evaluate=evaluate),
                           RedisFeed(client, consumer=consumer, group=keys.INTEGRITY_GROUP,
                                     buckets=getattr(event_store, "buckets", keys.DEFAULT_BUCKETS),
                                     follow_owned=follow_owned))
