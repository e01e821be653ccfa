"""The projection runner after its consumer groups are gone (issue 13: the database flushed
under a running serve).

Before: every read answered ``NOGROUP`` and the runner retried the failing batch forever
(an ERROR every 5 s): no match finished after the flush was ever settled until serve was
restarted (``simulate --external`` then waited its 30 s for the ledger: that wait, not the
dispatcher, was the "38 % of a core" of the report).  Now the runner creates the group
again and goes on, exactly once.
"""

from __future__ import annotations

import threading

import pytest

from engine.store import keys
from engine.store.redis_store import RedisEventStore
from projections.ledger import RedisLedger
from projections.runner import ProjectionRunner, RedisFeed
from tests.test_ledger import append, match_events, totals

pytestmark = pytest.mark.redis


def _rig(client, buckets: int = 4):
    store = RedisEventStore(client, buckets=buckets)
    ledger = RedisLedger(client)
    return store, ledger, ProjectionRunner(store, ledger, RedisFeed(client, buckets=buckets))


def test_after_flushdb_the_runner_creates_its_groups_again_and_settles_new_matches(real_redis):
    store, ledger, runner = _rig(real_redis)
    append(store, match_events("before", left=7))
    assert runner.drain() > 0 and ledger.settlement("before") is not None
    real_redis.flushdb()                                           # groups, feeds, ledger: gone
    append(store, match_events("after-1", left=7))
    append(store, match_events("after-2", left=12))
    assert runner.drain() > 0
    assert ledger.settlement("after-1") is not None and ledger.settlement("after-2") is not None
    assert totals(ledger, "a", "b") == (20 + 40, -(20 + 40))       # each once
    assert runner.errors == []


def test_a_deleted_feed_gets_its_group_back_and_the_other_buckets_lose_nothing(real_redis):
    store, ledger, runner = _rig(real_redis)
    runner.feed.ensure_groups()                                    # type: ignore[attr-defined]
    mids = [f"m{i}" for i in range(12)]
    for mid in mids[:6]:
        append(store, match_events(mid, left=7))
    gone = store.bucket_of(mids[0])
    real_redis.delete(keys.feed_key(gone))                         # one feed (and its group) deleted
    for mid in mids[6:]:
        append(store, match_events(mid, left=7))
    runner.drain()
    lost = {m for m in mids[:6] if store.bucket_of(m) == gone}     # their entries went with the feed
    assert {m for m in mids if ledger.settlement(m) is not None} == set(mids) - lost
    assert totals(ledger, "a", "b") == (20 * (12 - len(lost)), -20 * (12 - len(lost)))
    runner.drain()
    assert totals(ledger, "a", "b") == (20 * (12 - len(lost)), -20 * (12 - len(lost)))  # nothing twice


def test_run_forever_settles_what_finishes_after_a_flush(real_redis):
    """The loop itself: the flush costs one warning, not a stuck runner."""
    store, ledger, runner = _rig(real_redis)
    stop = threading.Event()
    settled: list[str] = []
    done = threading.Event()

    def on_settled(s, applied: bool, room: str | None) -> None:
        settled.append(s.match_id)
        if s.match_id == "after":
            done.set()

    runner.on_settled = on_settled
    append(store, match_events("before", left=7))
    t = threading.Thread(target=runner.run_forever, args=(stop,), kwargs={"idle_seconds": 0.01,
                                                                        "poll_seconds": 0.01})
    t.start()
    try:
        for _ in range(500):                                       # bounded: the runner reads every 10 ms
            if "before" in settled:
                break
            stop.wait(0.01)
        real_redis.flushdb()
        append(store, match_events("after", left=7))
        assert done.wait(10)                                       # a bound, not a timing
    finally:
        stop.set()
        t.join(10)
    assert settled.count("after") == 1 and runner.errors == []


def _matches_in_two_buckets(store, n: int = 8) -> tuple[int, int, list[str], list[str]]:
    """``n`` match ids, split by bucket: those of one bucket and those of another."""
    mids = [f"f{i}" for i in range(64)]
    first = store.bucket_of(mids[0])
    second = next(store.bucket_of(m) for m in mids if store.bucket_of(m) != first)
    return (first, second, [m for m in mids if store.bucket_of(m) == first][:n],
            [m for m in mids if store.bucket_of(m) == second][:n])


def test_a_feed_following_its_owned_buckets_reads_only_their_new_entries(real_redis):
    """serve's runner (``follow_owned``) reads the new entries of the buckets it follows, from
    the moment it follows them until it stops: another replica's buckets cost it no read."""
    store = RedisEventStore(real_redis, buckets=4)
    ledger = RedisLedger(real_redis)
    feed = RedisFeed(real_redis, buckets=4, follow_owned=True)
    runner = ProjectionRunner(store, ledger, feed)
    mine, other, in_mine, in_other = _matches_in_two_buckets(store, 2)
    for mid in in_mine + in_other:
        append(store, match_events(mid, left=7))
    assert runner.drain() == 0                                     # no bucket followed yet
    held = feed.follow(mine)
    assert runner.drain() > 0
    assert [m for m in in_mine + in_other if ledger.settlement(m) is not None] == in_mine
    held.stop()
    feed.follow(other).stop()                                      # followed and let go: nothing read
    assert runner.drain() == 0 and all(ledger.settlement(m) is None for m in in_other)
    feed.follow(other)
    assert runner.drain() > 0 and all(ledger.settlement(m) is not None for m in in_other)
    assert totals(ledger, "a", "b") == (20 * 4, -20 * 4) and runner.errors == []


def test_entries_delivered_before_a_bucket_moved_are_still_settled(real_redis):
    """A replica that read a bucket's entries and lost the bucket before acknowledging them
    (its process restarted: the same consumer) handles them again: what is pending on a
    consumer is read whether or not it follows the bucket."""
    store = RedisEventStore(real_redis, buckets=4)
    mine, _other, in_mine, _ = _matches_in_two_buckets(store)
    for mid in in_mine:
        append(store, match_events(mid, left=7))
    before = RedisFeed(real_redis, buckets=4, follow_owned=True)
    before.follow(mine)
    delivered = before.read()                                      # read, never acknowledged
    assert {d.entry.match_id for d in delivered} == set(in_mine)
    ledger = RedisLedger(real_redis)
    runner = ProjectionRunner(store, ledger, RedisFeed(real_redis, buckets=4, follow_owned=True))
    assert runner.drain() > 0                                      # follows nothing, settles them
    assert all(ledger.settlement(m) is not None for m in in_mine) and runner.errors == []
    assert real_redis.xpending(keys.feed_key(mine), "sk-projections")["pending"] == 0


def test_a_bucket_nobody_follows_is_read_by_the_sweep(real_redis):
    """A replica run with ``serve --no-projections`` owns buckets that no runner follows: every
    runner reads every bucket's new entries once per ``sweep_every_s`` too, so their matches
    are settled and their feed entries acknowledged (then trimmed), not left to reconcile."""
    now = [0.0]
    store = RedisEventStore(real_redis, buckets=4)
    ledger = RedisLedger(real_redis)
    feed = RedisFeed(real_redis, buckets=4, follow_owned=True, sweep_every_s=5.0, clock=lambda: now[0])
    runner = ProjectionRunner(store, ledger, feed)
    _mine, other, _in_mine, in_other = _matches_in_two_buckets(store, 2)
    for mid in in_other:
        append(store, match_events(mid, left=7))
    assert runner.drain() == 0                                     # nobody follows that bucket
    now[0] = 5.0                                                   # the sweep is due
    assert runner.drain() > 0 and all(ledger.settlement(m) is not None for m in in_other)
    feed.trim()
    assert real_redis.xlen(keys.feed_key(other)) == 0 and runner.errors == []
