"""Event stores: the contract (:mod:`engine.store.base`), an in-memory store and
a Redis Streams store (key layout: :mod:`engine.store.keys`, docs/PROTOCOL.md)."""

from engine.store.base import (
    AppendRequest,
    AppendResult,
    EventStore,
    FeedEntry,
    Snapshot,
    WrongVersion,
)
from engine.store.memory import InMemoryEventStore

__all__ = [
    "AppendRequest", "AppendResult", "EventStore", "FeedEntry", "InMemoryEventStore",
    "RedisEventStore", "Snapshot", "WrongVersion",
]


def __getattr__(name: str):  # redis is imported only when the Redis store is used
    if name == "RedisEventStore":
        from engine.store.redis_store import RedisEventStore

        return RedisEventStore
    raise AttributeError(name)
