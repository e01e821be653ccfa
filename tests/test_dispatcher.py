"""The deadline dispatcher (issue 13 §5, workers/dispatcher.py): claims of due deadlines
from the store's index, in-flight marks and their leases, the dispatcher lease, batched
enqueues, and failing deadlines that never hide the others.

Claims run as Lua on a real redis-server (and on fakeredis, which the embedded default
uses) and in memory for the in-memory store: the same table of cases for each.
"""

from __future__ import annotations

import doctest
import random
import threading

import pytest
from dramatiq import Message

from engine.match.deadline import Deadline
from engine.match.events import TurnTimedOut
from engine.store.memory import InMemoryEventStore
from engine.store.redis_store import RedisEventStore
from tests.test_timer_safety import Match, _Failing
from tests.test_workers import T0, cfg
from workers import dispatcher as dispatcher_mod
from workers.broker import FIRE_MANY_ACTOR, QUEUE, timer_middleware, timer_redis_broker_class
from workers.clock import FakeClock
from workers.dispatcher import (
    BrokerDispatch,
    Claim,
    Dispatcher,
    DispatcherLease,
    MemoryClaims,
    RedisClaims,
    batches_of,
    claims_for,
    lease_ms,
)
from workers.embedded import EmbeddedTimers


def test_the_module_examples_hold():
    result = doctest.testmod(dispatcher_mod)
    assert result.attempted >= 3 and result.failed == 0


def _deadline(mid: str, version: int, at_ms: int, kind: str = "turn") -> Deadline:
    return Deadline(match_id=mid, version=version, at_ms=at_ms, kind=kind)  # type: ignore[arg-type]


def _record(store, d: Deadline) -> None:
    """Record ``d`` as the match's deadline, as an append does (no events needed)."""
    store.append(d.match_id, store.version(d.match_id), f"c-{d.version}-{d.kind}", [], d)


@pytest.fixture(params=["memory", "fakeredis", "redis"])
def store_and_claims(request):
    if request.param == "memory":
        store = InMemoryEventStore()
    elif request.param == "fakeredis":
        store = RedisEventStore(request.getfixturevalue("fake_redis"))
    else:
        store = RedisEventStore(request.getfixturevalue("real_redis"))
    return store, claims_for(store, first_lease_ms=1_000)


def test_claims_for_picks_lua_for_redis_stores_and_memory_otherwise(fake_redis):
    assert isinstance(claims_for(RedisEventStore(fake_redis)), RedisClaims)
    assert isinstance(claims_for(InMemoryEventStore()), MemoryClaims)


def test_a_due_deadline_is_claimed_once_until_its_lease_runs_out(store_and_claims):
    store, claims = store_and_claims
    d = _deadline("m1", 4, T0)
    _record(store, d)
    assert claims.claim(T0 - 1, 10) == []                        # not due yet
    assert claims.claim(T0, 10) == [Claim(d, 1)]
    assert claims.retry_at(d) == T0 + 1_000
    assert claims.claim(T0 + 999, 10) == []                      # in flight
    assert claims.claim(T0 + 1_000, 10) == [Claim(d, 2)]         # lease over: again, attempt 2
    assert claims.retry_at(d) == T0 + 1_000 + 2_000              # the lease doubled
    claims.release([("m1", 4, "turn")])
    assert claims.retry_at(d) is None
    assert claims.claim(T0 + 1_001, 10) == [Claim(d, 1)]         # released: a fresh first attempt


def test_a_replaced_deadline_is_never_claimed_and_a_stale_release_keeps_the_new_mark(store_and_claims):
    store, claims = store_and_claims
    old = _deadline("m1", 4, T0)
    _record(store, old)
    assert claims.claim(T0, 10) == [Claim(old, 1)]
    new = _deadline("m1", 5, T0 + 10)                             # a commit replaced it
    _record(store, new)
    assert claims.claim(T0 + 10, 10) == [Claim(new, 1)]          # the new one, not in flight
    claims.release([("m1", 4, "turn")])                          # the old firing finishes late
    assert claims.retry_at(new) == T0 + 10 + 1_000               # the new mark stands
    assert claims.claim(T0 + 20, 10) == []
    _record(store, _deadline("m1", 6, T0 + 50, "trustee"))
    assert [c.deadline.version for c in claims.claim(T0 + 40, 10)] == []  # due later


def test_claims_come_earliest_first_and_read_past_marked_ones(store_and_claims):
    store, claims = store_and_claims
    for i in range(30):
        _record(store, _deadline(f"m{i:02}", 1, T0 + i))
    first = claims.claim(T0 + 100, 10)                           # at most 10 over all buckets … or per bucket
    got = [c.deadline.match_id for c in first]
    assert got == sorted(got, key=lambda m: int(m[1:])) and len(got) >= 10
    rest = claims.claim(T0 + 100, 1_000)
    assert {c.deadline.match_id for c in rest} == {f"m{i:02}" for i in range(30)} - set(got)


def test_concurrent_claimers_take_each_deadline_once(real_redis):
    store = RedisEventStore(real_redis)
    for i in range(200):
        _record(store, _deadline(f"m{i}", 1, T0 + i))
    claimers = [RedisClaims(real_redis, store.buckets) for _ in range(4)]
    got: list[list[Claim]] = [[] for _ in claimers]
    barrier = threading.Barrier(len(claimers))

    def run(k: int) -> None:
        barrier.wait()
        for _ in range(20):
            got[k] += claimers[k].claim(T0 + 1_000, 16)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(claimers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [c.deadline.match_id for cs in got for c in cs]
    assert sorted(ids) == sorted(f"m{i}" for i in range(200))  # all of them, none twice


def test_the_lease_of_attempts_doubles_up_to_the_cap():
    assert [lease_ms(a, 5_000) for a in (1, 2, 3, 4, 5, 6, 50)] == [5_000, 10_000, 20_000, 40_000, 60_000,
                                                                   60_000, 60_000]


def test_batches_spread_over_the_worker_threads_and_keep_the_order():
    cs = [Claim(_deadline(f"m{i}", 1, i)) for i in range(40)]
    batches = batches_of(cs, size=16, spread=4)
    assert [len(b) for b in batches] == [10, 10, 10, 10]
    assert [d.match_id for b in batches for d in b] == [f"m{i}" for i in range(40)]
    sizes = [len(b) for b in batches_of(cs * 5, size=16, spread=4)]
    assert len(sizes) == 13 and sum(sizes) == 200 and set(sizes) == {15, 16}  # even, none above 16
    assert batches_of([], 16, 4) == []


# ---- the dispatcher lease ------------------------------------------------------------------------

def test_one_dispatcher_holds_the_lease_until_it_drops_it_or_it_expires(real_redis):
    a, b = DispatcherLease(real_redis, ttl_ms=10_000), DispatcherLease(real_redis, ttl_ms=10_000)
    assert a.hold() and not b.hold()
    assert a.hold() and not b.hold()                             # renewed, still a's
    assert 0 < real_redis.pttl(a.key) <= 10_000
    a.drop()
    assert b.hold() and not a.hold()
    real_redis.delete(b.key)                                     # b's lease expired (it died)
    assert a.hold() and real_redis.get(a.key).decode() == a.token
    assert not b.hold() and not b.held


def test_in_process_lease_is_always_held():
    assert DispatcherLease(None).hold()


# ---- enqueueing ------------------------------------------------------------------------------------

def test_enqueue_many_puts_every_batch_on_the_queue_in_one_call(real_redis):
    broker = timer_redis_broker_class()(client=real_redis, namespace="sk-dramatiq", middleware=timer_middleware())
    sender = BrokerDispatch(broker)
    ds = [_deadline(f"m{i}", i, T0) for i in range(5)]
    assert sender.send([ds[:3], ds[3:]]) == 2
    assert sender.queue_length() == 2
    fetched = [Message.decode(m) for m in broker.do_fetch(QUEUE, 10)]
    assert [m.actor_name for m in fetched] == [FIRE_MANY_ACTOR] * 2
    assert [m.args[0] for m in fetched] == [[["m0", 0, "turn"], ["m1", 1, "turn"], ["m2", 2, "turn"]],
                                            [["m3", 3, "turn"], ["m4", 4, "turn"]]]
    assert all("eta" not in m.options for m in fetched)


class _Queue:
    def __init__(self, length: int):
        self.length = length
        self.sent: list[list[Deadline]] = []

    def send(self, batches):
        self.sent += batches
        return self.length

    def queue_length(self):
        return self.length


def test_a_full_queue_stops_the_claims_until_it_drains():
    store = InMemoryEventStore()
    claims = MemoryClaims(store)
    queue = _Queue(length=10)
    d = Dispatcher(claims, queue, FakeClock(T0), backlog_limit=5)
    _record(store, _deadline("a", 1, T0))
    assert d.tick() == 1 and d.backlog == 10                     # the queue is long now
    _record(store, _deadline("b", 1, T0))
    assert d.tick() == 0 and claims.retry_at(_deadline("b", 1, T0)) is None  # b waits, unclaimed
    queue.length = 0
    assert d.tick() == 1 and [x.match_id for b in queue.sent for x in b] == ["a", "b"]


# ---- failing deadlines through the dispatcher --------------------------------------------------------

@pytest.mark.parametrize("store", ["memory", "fakeredis"])
def test_200_failing_deadlines_do_not_hide_the_good_one_from_the_dispatcher(store):
    from projections import metrics

    clock = FakeClock(T0)
    with EmbeddedTimers(store, clock=clock, rng=random.Random(3), deal_on_ready=False, lease_ms=1_000) as t:
        m = Match(t, cfg(turn_seconds=15), mid="good").start()
        good = m.state().deadline()
        for i in range(200):  # due before the good one
            t.store.append(f"bad-{i:03}", 0, "c", [],
                           _deadline(f"bad-{i:03}", 0, good.at_ms - 1000 + i))
        failing = _Failing(t.service)
        t.runtime.service = failing
        before = metrics.SWEEPER_FAILURES.labels("turn")._value.get()
        clock.set(good.at_ms)
        assert t.dispatcher.tick() == 201
        t.join()
        assert isinstance(t.store.load("good", after=good.version)[0], TurnTimedOut)
        assert metrics.SWEEPER_FAILURES.labels("turn")._value.get() - before == 200
        assert all(n == 1 for n in failing.calls.values()) and len(failing.calls) == 200
        assert t.claims.in_flight() == 200                      # the failing ones stay marked
        assert t.dispatcher.tick() == 0                          # … and are not sent every tick
        clock.set(good.at_ms + 1_000)                            # their first lease (from the deadline) is over
        assert t.dispatcher.tick() == 200 and t.dispatcher.redispatched == 200
        t.join()
        assert all(n == 2 for n in failing.calls.values())
        clock.set(good.at_ms + 2_500)
        assert t.dispatcher.tick() == 0                          # the second lease is 2 s
        assert t.runtime.stats.get("failed") == 400



def test_in_flight_of_names_the_deadlines_whose_lease_stands(store_and_claims):
    """What the sweeper leaves to the dispatcher (workers/sweeper.py)."""
    store, claims = store_and_claims
    a, b, c = _deadline("a", 1, T0), _deadline("b", 1, T0), _deadline("c", 1, T0)
    for d in (a, b, c):
        _record(store, d)
    claims.claim(T0, 10)
    claims.release([("b", 1, "turn")])
    assert claims.in_flight_of([a, b, c], T0 + 999) == {a, c}
    assert claims.in_flight_of([a, b, c], T0 + 1_000) == set()      # leases over
    replaced = _deadline("c", 2, T0 + 5)
    _record(store, replaced)
    assert claims.in_flight_of([a, replaced], T0 + 1) == {a}         # c's mark is for v1


def test_a_bucket_its_node_cannot_claim_holds_back_only_its_own_deadlines(fake_redis):
    """Issue 35 §3: on a Cluster each bucket is claimed on its own node; one node cut off
    (CLUSTERDOWN) leaves the other buckets' due deadlines dispatched, and the claimer ticks
    again every interval (it cannot say what the skipped bucket holds)."""
    import redis

    store = RedisEventStore(fake_redis)
    claims = RedisClaims(fake_redis, store.buckets, first_lease_ms=1_000, bucket_of=store.bucket_of)
    mids = {}
    k = 0
    while len(mids) < 2:  # two matches in two buckets
        mid = f"cut-{k}"
        k += 1
        mids.setdefault(store.bucket_of(mid), mid)
    (cut, cut_mid), (ok, ok_mid) = sorted(mids.items())
    for mid in (cut_mid, ok_mid):
        store.append(mid, 0, "c", [], Deadline(match_id=mid, version=0, at_ms=T0, kind="turn"))
    claims.cluster = True  # one call a bucket, as on a Cluster
    real = claims._claim

    def claim(keys, args):
        if keys[0] == dispatcher_mod.keys.deadlines_key(cut):
            raise redis.exceptions.ClusterDownError("CLUSTERDOWN The cluster is down")
        return real(keys=keys, args=args)

    claims._claim = claim
    got = claims.claim(T0 + 1, 100)
    assert [c.deadline.match_id for c in got] == [ok_mid]
    assert claims.next_due_ms is None

    def down(keys, args):
        raise redis.exceptions.ClusterDownError("CLUSTERDOWN The cluster is down")

    claims._claim = down
    with pytest.raises(redis.exceptions.ClusterDownError):  # every node away: the tick fails
        claims.claim(T0 + 2, 100)
