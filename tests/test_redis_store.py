"""Redis-specific behaviour of RedisEventStore: key layout, slots, script details (fakeredis and real Redis)."""

from __future__ import annotations

import msgpack
import pytest

import redis
from redis.cluster import key_slot

from engine.match.events import PlayerReady, decode_event
from engine.store import keys
from engine.match.deadline import Deadline
from engine.store.base import Snapshot, WrongVersion
from engine.store.redis_store import LayoutMismatch, RedisEventStore
from tests.conftest import own_redis_server


@pytest.fixture(scope="module")
def redis_server():
    """This module's own redis-server: its tests SCRIPT FLUSH, which is server-wide."""
    yield from own_redis_server()


@pytest.fixture(params=["fakeredis", pytest.param("redis", marks=pytest.mark.redis)])
def client(request):
    return request.getfixturevalue({"fakeredis": "fake_redis", "redis": "real_redis"}[request.param])


def ready(match_id: str, seq: int, cmd: str = "c") -> PlayerReady:
    return PlayerReady(match_id=match_id, seq=seq, ts=seq, command_id=cmd, player="a")


def test_key_layout_and_one_slot_per_bucket(client):
    store = RedisEventStore(client)
    store.append("m1", 0, "c1", [ready("m1", 1), ready("m1", 2)], Deadline("m1", 2, 99, "turn"))
    store.save_snapshot("m1", Snapshot(2, b"s"))
    b = keys.bucket_of("m1")
    assert b == store.bucket_of("m1")
    expected = {f"sk:{{b{b}}}:m:m1:events", f"sk:{{b{b}}}:m:m1:cmds", f"sk:{{b{b}}}:m:m1:snap",
                f"sk:{{b{b}}}:feed", f"sk:{{b{b}}}:deadlines", f"sk:{{b{b}}}:deadline_info",
                f"sk:{{b{b}}}:matches"}
    assert {k.decode() for k in client.keys("*")} == expected
    assert len({key_slot(k.encode()) for k in expected}) == 1  # one Lua call = one Cluster slot
    assert key_slot(keys.events_key("有{括}號", 3).encode()) == key_slot(keys.feed_key(3).encode())


def test_entries_are_seq_ids_with_msgpack_field(client):
    store = RedisEventStore(client)
    events = [ready("m1", 1), ready("m1", 2)]
    store.append("m1", 0, "c1", events, None)
    entries = client.xrange(keys.events_key("m1", keys.bucket_of("m1")))
    assert [e[0] for e in entries] == [b"1-1", b"2-1"]
    assert [decode_event(e[1][b"e"]) for e in entries] == events
    assert client.hgetall(keys.commands_key("m1", keys.bucket_of("m1"))) == {b"c1": b"1-2"}
    # a stale writer going around the script is refused by XADD itself
    with pytest.raises(redis.ResponseError):
        client.xadd(keys.events_key("m1", keys.bucket_of("m1")), {"e": b"x"}, id="2-1")


def test_two_store_objects_share_one_redis(client):
    a, b = RedisEventStore(client), RedisEventStore(client)
    a.append("m1", 0, "c1", [ready("m1", 1)], None)
    with pytest.raises(WrongVersion):
        b.append("m1", 0, "c2", [ready("m1", 1)], None)
    assert b.append("m1", 0, "c1", [ready("m1", 1)], None).duplicate
    assert b.version("m1") == 1


def test_a_match_stream_with_a_hole_is_refused_as_before(client):
    """A stream is never trimmed in its middle: one with an entry deleted there (XDEL by a
    writer of the stream) refuses the append at its length, and a writer whose expected
    version is that length meets the first entry's refused id, as before a queue's oldest
    entries could be archived (only a stream trimmed from its start reads its version from
    its last entry): nothing is written."""
    store = RedisEventStore(client)
    store.append("m1", 0, "c1", [ready("m1", 1, "c1"), ready("m1", 2, "c1"), ready("m1", 3, "c1")], None)
    events_key = keys.events_key("m1", store.bucket_of("m1"))
    client.xdel(events_key, keys.entry_id(2))
    with pytest.raises(WrongVersion) as hole:
        store.append("m1", 3, "c2", [ready("m1", 4, "c2")], None)
    assert hole.value.actual == 2
    with pytest.raises(redis.ResponseError, match="equal or smaller"):
        store.append("m1", 2, "c3", [ready("m1", 3, "c3")], None)
    assert [k for k, _f in client.xrange(events_key)] == [b"1-1", b"3-1"]


def test_deadline_info_and_feed_fields(client):
    store = RedisEventStore(client)
    store.append("m1", 0, "c1", [ready("m1", 1)], Deadline("m1", 1, 1234, "trustee"))
    b = keys.bucket_of("m1")
    assert client.zscore(keys.deadlines_key(b), "m1") == 1234
    assert client.hget(keys.deadline_info_key(b), "m1") == b"1|trustee|1234"
    [(_, fields)] = client.xrange(keys.feed_key(b))
    assert fields == {b"match": b"m1", b"from": b"1", b"to": b"1", b"fin": b"0"}  # not finished (fin)
    raw = client.get(keys.snapshot_key("m1", b))
    assert raw is None
    store.save_snapshot("m1", Snapshot(1, b"\xff"))
    assert msgpack.unpackb(client.get(keys.snapshot_key("m1", b))) == [1, b"\xff"]


def test_the_append_never_trims_the_feed_and_trim_keeps_what_a_group_has_not_acknowledged(client):
    """Issue 11 §4: a feed is trimmed only below what every projection group acknowledged."""
    from projections.runner import RedisFeed

    store = RedisEventStore(client, buckets=1, feed_maxlen=50)
    feed = RedisFeed(client, buckets=1, feed_maxlen=50)
    feed.ensure_groups()
    for i in range(600):
        store.append(f"m{i}", 0, "c", [ready(f"m{i}", 1)], None)
    assert client.xlen(keys.feed_key(0)) == 600          # the append trims nothing
    assert feed.trim() == 0                               # nothing acknowledged: nothing may go
    got = feed.read(count=100)
    for d in got[:70]:
        feed.ack(d)                                       # 70 acknowledged, 30 delivered and pending
    assert feed.trim() == 70
    assert client.xlen(keys.feed_key(0)) == 530
    assert [e.match_id for e in store.read_feed(0, count=1)] == ["m70"]
    for d in got[70:]:
        feed.ack(d)
    assert feed.trim() == 30                              # up to what was delivered, never beyond
    assert client.xlen(keys.feed_key(0)) == 500
    client.xgroup_create(keys.feed_key(0), "another", id="0")  # a second group that read nothing
    for d in feed.read(count=500):
        feed.ack(d)
    assert feed.trim() == 0                               # the slowest group decides
    assert store.read_feed(0, count=10_000)[-1].match_id == "m599"


def test_a_short_feed_is_trimmed_below_what_every_group_acknowledged(client):
    """Issue 11 §4/§8: a settled match's feed entry does not stay in Redis until the feed
    reaches its cap: trim removes every acknowledged entry, whatever the feed's length."""
    from projections.runner import RedisFeed

    store = RedisEventStore(client, buckets=2)
    feed = RedisFeed(client, buckets=2)
    feed.ensure_groups()
    for i in range(10):
        store.append(f"m{i}", 0, "c", [ready(f"m{i}", 1)], None)
    total = sum(client.xlen(keys.feed_key(b)) for b in range(2))
    assert total == 10
    got = feed.read(count=100)
    assert len(got) == 10
    feed.ack_all(got[:4])
    pending = {d.bucket for d in got[4:]}
    removed = feed.trim()
    # per bucket, only the acknowledged entries older than its oldest pending one go
    left = {b: [e.match_id for e in store.read_feed(b, count=100)] for b in range(2)}
    assert removed + sum(map(len, left.values())) == 10 and removed <= 4
    assert all(left[b] for b in pending)
    feed.ack_all(got[4:])
    feed.trim()
    assert sum(client.xlen(keys.feed_key(b)) for b in range(2)) == 0


@pytest.mark.redis
@pytest.mark.parametrize("protocol", [2, 3])
def test_a_feed_reads_every_bucket_with_one_xreadgroup_pending_and_new(redis_server, protocol):
    """On one Redis a projection's read of the feeds is one XREADGROUP naming every bucket's feed
    (its pending entries after a restart: one more), on RESP2 and RESP3 alike; what the
    consumer read and did not acknowledge comes back to it, nothing twice in one read."""
    from projections.runner import RedisFeed

    client = redis.Redis.from_url(redis_server.url, protocol=protocol)
    client.flushdb()
    try:
        store = RedisEventStore(client, buckets=4)
        for i in range(12):
            store.append(f"m{i}", 0, "c", [ready(f"m{i}", 1)], None)
        assert len({keys.bucket_of(f"m{i}", 4) for i in range(12)}) > 1
        feed = RedisFeed(client, consumer="one", buckets=4)
        got = feed.read(count=100)
        assert sorted(d.entry.match_id for d in got) == sorted(f"m{i}" for i in range(12))
        feed.ack_all(got[:5])
        client.config_resetstat()
        again = RedisFeed(client, consumer="one", buckets=4).read(count=100)     # a restart
        assert sorted(d.entry.id for d in again) == sorted(d.entry.id for d in got[5:])
        xreadgroups = int(client.info("commandstats")["cmdstat_xreadgroup"]["calls"])
        assert xreadgroups == 2                          # this consumer's pending entries, then new ones
    finally:
        client.close()


def test_the_runner_trims_what_it_acknowledged_when_caught_up_and_when_it_stops(fake_redis):
    import threading

    from projections.ledger import RedisLedger
    from projections.runner import ProjectionRunner, RedisFeed

    store = RedisEventStore(fake_redis, buckets=2)
    feed = RedisFeed(fake_redis, buckets=2)
    feed.ensure_groups()
    for i in range(6):
        store.append(f"m{i}", 0, "c", [ready(f"m{i}", 1)], None)
    runner = ProjectionRunner(store, RedisLedger(fake_redis), feed)
    stop = threading.Event()
    calls: list[int] = []
    real_trim = feed.trim

    def counting_trim() -> int:
        calls.append(1)
        removed = real_trim()
        stop.set()  # caught up and trimmed: end the loop
        return removed

    feed.trim = counting_trim  # type: ignore[method-assign]
    runner.run_forever(stop, idle_seconds=0.01, trim_every_s=3600.0, trim_idle_s=0.0)
    assert calls == [1]                                   # once caught up; nothing new since: no final trim
    assert sum(fake_redis.xlen(keys.feed_key(b)) for b in range(2)) == 0
    for i in range(6, 9):
        store.append(f"m{i}", 0, "c", [ready(f"m{i}", 1)], None)
    stop2 = threading.Event()
    feed.trim = real_trim  # type: ignore[method-assign]
    thread = threading.Thread(target=runner.run_forever, args=(stop2,),
                              kwargs={"idle_seconds": 0.01, "trim_every_s": 1e9, "trim_idle_s": 1e9})
    thread.start()
    for _ in range(1000):  # bounded: until the runner has read and acknowledged everything
        if _all_delivered(fake_redis, feed):
            break
        stop2.wait(0.01)
    stop2.set()
    thread.join(10)
    assert not thread.is_alive()
    assert sum(fake_redis.xlen(keys.feed_key(b)) for b in range(2)) == 0  # the final trim on stop


def _all_delivered(client, feed) -> bool:
    for b in range(feed.buckets):
        key = keys.feed_key(b)
        last = client.xrevrange(key, count=1)
        if not last:
            continue
        info = {(k.decode() if isinstance(k, bytes) else k): v for k, v in client.xinfo_groups(key)[0].items()}
        if info["last-delivered-id"] != last[0][0] or int(info["pending"]):
            return False
    return True


def test_decode_responses_client_is_refused():
    import fakeredis

    with pytest.raises(ValueError, match="decode_responses"):
        RedisEventStore(fakeredis.FakeRedis(server=fakeredis.FakeServer(), decode_responses=True))


def test_layout_check(client):
    RedisEventStore(client, buckets=16).check_layout()
    RedisEventStore(client, buckets=16).check_layout()
    with pytest.raises(LayoutMismatch):
        RedisEventStore(client, buckets=32).check_layout()


@pytest.mark.redis
def test_from_url_and_script_flush(redis_server, real_redis):
    store = RedisEventStore.from_url(redis_server.url)
    store.append("m1", 0, "c1", [ready("m1", 1)], None)
    real_redis.script_flush()  # EVALSHA -> NOSCRIPT -> the script is loaded again
    store.append("m1", 1, "c2", [ready("m1", 2)], None)
    assert store.version("m1") == 2


@pytest.mark.redis
def test_resp3_client(redis_server, real_redis):
    client = redis_server.client(protocol=3)
    try:
        store = RedisEventStore(client)
        store.append("m1", 0, "c1", [ready("m1", 1)], Deadline("m1", 1, 5, "turn"))
        assert store.append("m1", 0, "c1", [ready("m1", 1)], None).duplicate
        with pytest.raises(WrongVersion):
            store.append("m1", 0, "c2", [ready("m1", 1)], None)
        assert store.load("m1") == [ready("m1", 1)]
        assert [e.match_id for e in store.read_feed(store.bucket_of("m1"))] == ["m1"]
        assert store.due_deadlines(10) == [Deadline("m1", 1, 5, "turn")]
        assert list(store.match_ids()) == ["m1"]
    finally:
        client.close()


def test_the_append_scripts_replies_are_read_by_name():
    """append.lua answers field/value pairs (never positional); the module's examples hold."""
    import doctest

    from engine.store import redis_store, replies
    from engine.store.redis_store import append_fields

    for module in (redis_store, replies):
        result = doctest.testmod(module)
        assert result.attempted > 0 and result.failed == 0, module
    assert append_fields([b"actual", 3, b"status", b"wrong_version"]) == {"actual": 3, "status": "wrong_version"}
    with pytest.raises(redis.ResponseError):
        append_fields([b"ok", 7, 1])  # the old positional form is not read as anything
