"""One owner per bucket (engine/service/ownership.py, issue 24 §3): the live replicas share the
buckets under leases; a replica that starts or stops rebalances them; a replica that stops
renewing (SIGKILLed) loses them once its lease runs out; a new owner takes the former owner's
pending commands over first.  Table- and property-style, on a real Redis, with an explicit clock."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.service.ownership import BucketOwner, take_over_pending, wanted
from engine.store import keys

pytestmark = pytest.mark.redis


@given(st.integers(1, 64), st.sets(st.text("abcdef", min_size=1, max_size=4), min_size=1, max_size=8))
def test_the_wanted_shares_partition_the_buckets_evenly(buckets, replicas):
    shares = [wanted(buckets, sorted(replicas), r) for r in replicas]
    assert set().union(*shares) == set(range(buckets))
    assert sum(len(s) for s in shares) == buckets  # disjoint
    assert max(len(s) for s in shares) - min(len(s) for s in shares) <= 1


class _Work:
    def __init__(self, log, b):
        self.log, self.b = log, b
        log.append(("start", b))

    def stop(self):
        self.log.append(("stop", self.b))


def _owner(client, name, log, buckets=8, ttl=4000):
    return BucketOwner(client, name, lambda b: _Work(log, b), buckets=buckets, ttl_ms=ttl, tick_ms=500)


def test_replicas_that_start_and_stop_rebalance_and_never_share_a_bucket(real_redis):
    log: list = []
    a, b = _owner(real_redis, "a", log), _owner(real_redis, "b", log)
    t = 1_000_000
    assert a.tick(t) == set(range(8))  # alone: every bucket
    b.tick(t)  # b registers: wants 1,3,5,7 but a still holds them
    assert a.tick(t + 10) == {0, 2, 4, 6}  # a hands them over ...
    assert b.tick(t + 20) == {1, 3, 5, 7}  # ... b takes them
    for n in range(8):
        assert real_redis.get(keys.owner_key(n)).decode().startswith("a|" if n % 2 == 0 else "b|")
    b.release_all()  # a clean stop: b's buckets are free at once
    assert a.tick(t + 30) == set(range(8))
    assert ("stop", 1) in log and log.count(("start", 1)) == 3  # a, then b, then a again


def test_a_replica_that_stops_renewing_loses_its_buckets_after_the_lease_ttl(real_redis):
    log: list = []
    a, b = _owner(real_redis, "a", log, ttl=4000), _owner(real_redis, "b", log, ttl=4000)
    t = 2_000_000
    a.tick(t), b.tick(t), a.tick(t), b.tick(t)
    assert b.owned.keys() == {1, 3, 5, 7}
    # b is SIGKILLed: no more ticks. Before its registration runs out, a does not take its buckets
    assert a.tick(t + 1000) == {0, 2, 4, 6}
    # once b's registration is over (its leases expire in Redis after the same TTL) a wants them
    real_redis.zadd(keys.REPLICAS, {"b": t})  # (its last renewal is the TTL ago on a's clock)
    for n in (1, 3, 5, 7):
        real_redis.pexpire(keys.owner_key(n), 1)  # as the real clock would let it run out
    import time

    time.sleep(0.01)
    assert a.tick(t + 4001) == set(range(8))


def test_a_new_owner_takes_the_former_owners_pending_commands_first(real_redis):
    stream, group = keys.inbox_key(3), keys.SERVICE_GROUP
    real_redis.xgroup_create(stream, group, id="0", mkstream=True)
    ids = [real_redis.xadd(stream, {"n": str(i)}) for i in range(5)]
    real_redis.xreadgroup(group, "dead-replica", {stream: ">"}, count=3)  # read, never acknowledged
    assert take_over_pending(real_redis, stream, group, "new-owner") == 3
    mine = real_redis.xreadgroup(group, "new-owner", {stream: "0"}, count=10)[0][1]
    assert [m[0] for m in mine] == ids[:3]  # in stream order, before the unread ones
    pend = real_redis.xpending_range(stream, group, min="-", max="+", count=10)
    assert {p["consumer"] for p in pend} == {b"new-owner"}
    assert all(p["times_delivered"] == 2 for p in pend)  # JUSTID kept the count (+ this read)
    for i in range(600):  # more than one XAUTOCLAIM page (COUNT 500): the cursor goes on
        real_redis.xadd(stream, {"n": str(i)})
    real_redis.xreadgroup(group, "dead-replica", {stream: ">"}, count=1000)
    assert take_over_pending(real_redis, stream, group, "new-owner") == 605  # its own 3 again, then 602
    pend = real_redis.xpending(stream, group)
    assert pend["pending"] == 605 and [c["name"] for c in pend["consumers"]] == [b"new-owner"]


def test_the_state_cache_metric_counts_hits_and_misses():
    """§3: shuangkou_state_cache_requests_total{result="hit"|"miss"} reads the process's cache."""
    import dataclasses

    from engine.match.state import MatchState
    from engine.service.state_cache import StateCache
    from projections.metrics import StateCacheCollector

    cache = StateCache(10)
    cache.get("m")  # a miss
    cache.put(dataclasses.replace(MatchState(match_id="m"), version=3))
    cache.get("m")
    cache.get("m")
    [family] = list(StateCacheCollector(cache).collect())
    got = {s.labels["result"]: s.value for s in family.samples if s.name.endswith("_total")}
    assert family.name == "shuangkou_state_cache_requests" and got == {"hit": 2.0, "miss": 1.0}


def test_the_leases_held_are_renewed_while_the_replicas_registry_is_away(real_redis, monkeypatch):
    """Issue 35 §3: the registry key lives on one node; that node cut off must not stop the
    renewal of the leases on the others (their buckets would stop being consumed)."""
    import redis

    log: list = []
    a = _owner(real_redis, "a", log)
    t = 3_000_000
    assert a.tick(t) == set(range(8))
    for n in range(8):
        real_redis.pexpire(keys.owner_key(n), 100)  # about to run out

    def away(_now):
        raise redis.exceptions.ClusterDownError("CLUSTERDOWN The cluster is down")

    monkeypatch.setattr(a, "live_replicas", away)
    assert a.tick(t + 10) == set(range(8))  # nothing handed over, nothing stopped
    assert all(real_redis.pttl(keys.owner_key(n)) > 1000 for n in range(8))  # renewed
    assert ("stop", 0) not in log


def _round_trips(monkeypatch) -> list[int]:
    """A counter of the round trips every redis-py connection of this process sends."""
    from redis.connection import Connection

    sent = [0]
    original = Connection.send_packed_command

    def counted(self, command, check_health=True):
        sent[0] += 1
        return original(self, command, check_health)

    monkeypatch.setattr(Connection, "send_packed_command", counted)
    return sent


def test_a_tick_renews_every_lease_held_in_one_round_trip(own_real_redis, monkeypatch):
    """Issue 38: the registry (one pipeline) and the leases (one more), not one call per bucket.
    On a server of its own: SCRIPT FLUSH is the server's, every client's."""
    real_redis = own_real_redis
    log: list = []
    a = _owner(real_redis, "a", log, buckets=16)
    t = 4_000_000
    real_redis.script_flush()  # the lease script unknown to the node: loaded once, then pipelined
    assert a.tick(t) == set(range(16))
    a._leases.drop_many(["sk:test:nothing"], a.token)  # the drop script known to the node too
    sent = _round_trips(monkeypatch)
    assert a.tick(t + 10) == set(range(16))
    assert sent[0] == 2
    a.release_all()  # the works stopped, then every lease dropped in one round trip, then unregistered
    assert sent[0] == 2 + 2
    assert not any(real_redis.exists(keys.owner_key(n)) for n in range(16))
    assert [e for e in log if e[0] == "stop"] == [("stop", n) for n in range(16)]


def test_hold_many_answers_per_key_held_renewed_or_anothers(real_redis):
    from engine.store.lease import LeaseScripts

    leases = LeaseScripts(real_redis)
    real_redis.set("sk:test:lease:other", "someone-else", px=4000)
    real_redis.set("sk:test:lease:mine", "me", px=100)
    got = leases.hold_many(["sk:test:lease:mine", "sk:test:lease:free", "sk:test:lease:other"], "me", 4000)
    assert got == [1, 2, 0]
    assert real_redis.pttl("sk:test:lease:mine") > 1000
    assert real_redis.get("sk:test:lease:free") == b"me" and real_redis.get("sk:test:lease:other") == b"someone-else"
    real_redis.set("sk:test:lease:wrong", "x")
    real_redis.lpush("sk:test:lease:list", "x")  # a key of another type: that key's error alone
    got = leases.hold_many(["sk:test:lease:list", "sk:test:lease:mine"], "me", 4000)
    assert isinstance(got[0], Exception) and got[1] == 1
    assert leases.drop_many(["sk:test:lease:mine", "sk:test:lease:other"], "me") == [True, False]
    assert not real_redis.exists("sk:test:lease:mine") and real_redis.exists("sk:test:lease:other")
