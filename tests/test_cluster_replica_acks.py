"""Replica acknowledgements on a real Redis Cluster (issue 35 §3, §6): three masters with a
replica each, on loopback, started here.

* The default: 1 when every master has a replica (CLUSTER SHARDS), 0 when one has none;
  an explicit value wins.
* Pipelined appends go to each node as a plain pipeline (never redis-py's Cluster pipeline,
  which refuses EVALSHA), each ending with its own INCR + WAIT: a master whose replica is
  gone fails its own requests with NOREPLICAS and nothing else.
* ``execute_many`` keeps the other matches' outcomes; a duplicate found without an append
  waits for the replicas too.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from engine.match.events import PlayerReady
from engine.store import keys
from engine.store.base import AppendRequest, AppendResult
from engine.store.redis_errors import is_transient
from engine.store.redis_store import RedisEventStore
from engine.store.replicas import ReplicaAcks, replicas_per_master, resolve_replica_acks

pytestmark = [pytest.mark.redis, pytest.mark.slow]


@pytest.fixture
def local_cluster() -> Iterator[Any]:
    """A fresh cluster per test: the tests take replicas away."""
    from tests.cluster_support import require_redis_binaries, start_cluster

    require_redis_binaries()
    c = start_cluster(masters=3, replicas=1)
    try:
        _wait_online(c)
        yield c
    finally:
        c.stop()


def _wait_online(c: Any) -> None:
    from tests.cluster_support import _wait

    _wait(lambda: len(c.masters()) == 3 and all(c.online_replicas(m) for m in c.masters()), 30,
          "every master's replica online")


def _client(c: Any) -> Any:
    from engine.store.connect import connect

    return connect(c.url)


def _one_match_per_master(c: Any, store: RedisEventStore) -> dict[int, str]:
    """master port -> a match id whose bucket lives there."""
    out: dict[int, str] = {}
    k = 0
    while len(out) < 3:
        mid = f"ra-{k}"
        k += 1
        out.setdefault(c.master_of(keys.events_key(mid, store.bucket_of(mid))), mid)
    return out


def _replica_of(c: Any, master: int) -> int:
    [replica] = c.online_replicas(master)
    return replica


def _ready(mid: str, seq: int, cid: str) -> PlayerReady:
    return PlayerReady(match_id=mid, seq=seq, ts=0, command_id=cid, player="a")


def test_the_default_is_one_when_every_master_has_a_replica_and_zero_when_one_has_none(local_cluster):
    client = _client(local_cluster)
    try:
        assert replicas_per_master(client) == 1
        assert resolve_replica_acks(client)[0] == 1
        assert resolve_replica_acks(client, 0) == (0, "--replica-acks")  # an explicit value wins
        assert resolve_replica_acks(client, None, "0") == (0, "SK_REPLICA_ACKS")
        master = local_cluster.masters()[0]
        local_cluster.kill(_replica_of(local_cluster, master))

        def gone() -> bool:
            return replicas_per_master(client) == 0

        from tests.cluster_support import _wait

        _wait(gone, 30, "the killed replica marked failed")
        n, why = resolve_replica_acks(client)
        assert (n, why) == (0, "a master of the Cluster has no replica")
    finally:
        client.close()


#: the WAIT timeout of these tests: a healthy replica on a loaded 2-core CI machine can take
#: a few hundred ms to answer; a node whose replica was killed makes its WAIT last this long
ACK_TIMEOUT_MS = 2_000


def test_pipelined_appends_on_a_cluster_wait_per_node_and_one_node_short_fails_only_its_own(local_cluster):
    from tests.cluster_support import _wait

    # a replica still loading its first sync acknowledges nothing: the first round must not meet one
    _wait(lambda: all(local_cluster.online_replicas(m) for m in local_cluster.masters()), 30,
          "every master's replica online")
    client = _client(local_cluster)
    try:
        store = RedisEventStore(client)
        store.replica_acks = ReplicaAcks(client, 1, timeout_ms=ACK_TIMEOUT_MS)
        seen: list[str] = []
        store.replica_acks.on_wait = lambda result, _s: seen.append(result)
        by_master = _one_match_per_master(local_cluster, store)
        rounds = [AppendRequest(mid, 0, f"{mid}-c1", (_ready(mid, 1, f"{mid}-c1"),), None)
                  for mid in by_master.values()]
        results = store.append_many(rounds)
        assert all(isinstance(r, AppendResult) and not r.duplicate for r in results), results
        assert seen == ["ok", "ok", "ok"]  # one WAIT per node, in that node's own pipeline
        # take one master's replica away: its WAIT falls short, the others' do not
        victim = sorted(by_master)[0]
        local_cluster.kill(_replica_of(local_cluster, victim))
        seen.clear()
        again = [AppendRequest(mid, 1, f"{mid}-c2", (_ready(mid, 2, f"{mid}-c2"),), None)
                 for mid in by_master.values()]
        results = store.append_many(again)
        for (master, mid), r in zip(by_master.items(), results):
            if master == victim:
                assert isinstance(r, redis.ResponseError) and str(r).startswith("NOREPLICAS 0 of 1"), r
                assert is_transient(r)  # not acknowledged: redelivered, a duplicate then
            else:
                assert isinstance(r, AppendResult) and r.version == 2, (mid, r)
        assert sorted(seen) == ["noreplicas", "ok", "ok"]
        # a duplicate of the victim's unconfirmed append waits again, and fails again
        [dup] = store.append_many([again[list(by_master).index(victim)]])
        assert isinstance(dup, redis.ResponseError) and str(dup).startswith("NOREPLICAS")
        with pytest.raises(redis.ResponseError, match="^NOREPLICAS"):
            store.confirm_replicated(by_master[victim])
        store.confirm_replicated(by_master[sorted(by_master)[1]])  # a healthy node's: returns
    finally:
        client.close()


def test_pipelined_appends_on_a_cluster_never_use_the_cluster_pipeline(local_cluster, monkeypatch):
    """§6: redis-py's Cluster pipeline refuses EVALSHA ("Calling pipelined function evalsha is
    blocked when running redis in cluster mode"); the store never asks it for one."""
    from redis.cluster import ClusterPipeline

    def refused(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("append_many used redis-py's Cluster pipeline")

    monkeypatch.setattr(ClusterPipeline, "execute", refused)
    client = _client(local_cluster)
    try:
        store = RedisEventStore(client)  # no replica acks: the plain pipelined path
        by_master = _one_match_per_master(local_cluster, store)
        mids = list(by_master.values())
        requests = [AppendRequest(mid, 0, f"{mid}-p", (_ready(mid, 1, f"{mid}-p"),), None) for mid in mids]
        requests.append(AppendRequest(mids[0], 0, f"{mids[0]}-q", (_ready(mids[0], 1, f"{mids[0]}-q"),), None))
        results = store.append_many(requests)
        assert [type(r).__name__ for r in results] == ["AppendResult"] * 3 + ["WrongVersion"]
        for mid in mids:
            assert store.version(mid) == 1
    finally:
        client.close()


def test_execute_many_keeps_the_other_masters_matches_going(local_cluster):
    """§3: one master without its replica holds only its own matches' commands."""
    from engine.config import load_config
    from engine.match.commands import CreateMatch
    from engine.service.service import MatchService, Outcome
    from engine.service.shuffle import seeded_random
    from engine.service.state_cache import StateCache

    from tests.cluster_support import _wait

    _wait(lambda: all(local_cluster.online_replicas(m) for m in local_cluster.masters()), 30,
          "every master's replica online")
    client = _client(local_cluster)
    try:
        store = RedisEventStore(client)
        store.replica_acks = ReplicaAcks(client, 1, timeout_ms=ACK_TIMEOUT_MS)
        service = MatchService(store, lambda: 1_000, seeded_random(1), state_cache=StateCache(100))
        by_master = _one_match_per_master(local_cluster, store)
        cfg = load_config("points").to_record()
        victim = sorted(by_master)[0]
        local_cluster.kill(_replica_of(local_cluster, victim))
        commands = [CreateMatch(match_id=mid, command_id=f"{mid}-create", config=cfg) for mid in by_master.values()]
        results = service.execute_many(commands)
        for (master, _mid), r in zip(by_master.items(), results):
            if master == victim:
                assert isinstance(r, redis.ResponseError) and str(r).startswith("NOREPLICAS"), r
            else:
                assert isinstance(r, Outcome) and r.rejection is None and not r.duplicate, r
    finally:
        client.close()


def test_due_deadlines_skip_only_the_buckets_of_a_node_that_cannot_answer(local_cluster, monkeypatch):
    """The sweeper's read of the due deadlines: a node cut off (its pipeline part fails with
    CLUSTERDOWN) holds back only its own buckets' deadlines."""
    from engine.match.deadline import Deadline

    client = _client(local_cluster)
    try:
        store = RedisEventStore(client)
        by_master = _one_match_per_master(local_cluster, store)
        for mid in by_master.values():
            store.append(mid, 0, f"{mid}-d", [], Deadline(match_id=mid, version=0, at_ms=1_000, kind="turn"))
        assert sorted(d.match_id for d in store.due_deadlines(2_000)) == sorted(by_master.values())
        victim = sorted(by_master)[0]
        cut = by_master[victim]
        cut_key = keys.deadlines_key(store.bucket_of(cut))
        down = redis.exceptions.ClusterDownError("CLUSTERDOWN The cluster is down")

        def pipeline(*_a: Any, **_k: Any) -> Any:
            raise down

        real = client.zrangebyscore

        def zrangebyscore(key: Any, *a: Any, **k: Any) -> Any:
            if (key.decode() if isinstance(key, bytes) else key) == cut_key:
                raise down
            return real(key, *a, **k)

        monkeypatch.setattr(client, "pipeline", pipeline)
        monkeypatch.setattr(client, "zrangebyscore", zrangebyscore)
        assert sorted(d.match_id for d in store.due_deadlines(2_000)) == sorted(
            m for m in by_master.values() if m != cut)
    finally:
        client.close()


def test_the_lobbys_wait_takes_no_turn_of_the_gateways_bound(local_cluster):
    """gateway/gated.py bounds the commands in flight; a WAIT (up to 2 s on a master whose
    replicas do not answer) held one of those turns, so a few of them stopped the players'
    commands to every other master.  The WAIT now goes outside the bound."""
    import asyncio

    from engine.store.replicas import AsyncReplicaAcks
    from gateway.gated import GatedCluster

    async def main() -> int:
        client = GatedCluster.from_url(local_cluster.url, max_connections=4)  # two turns
        try:
            await client.initialize()
            acks = AsyncReplicaAcks(client, 1, 2_000)
            held, release = asyncio.Event(), asyncio.Event()
            inside = 0

            async def hold() -> None:
                nonlocal inside
                async with client.turn():
                    inside += 1
                    if inside == 2:
                        held.set()
                    await release.wait()

            holders = [asyncio.create_task(hold()) for _ in range(2)]
            await held.wait()  # every turn is taken
            await asyncio.wait_for(acks.confirm(["sk:{lobby}:seq"]), 60)  # a bound, not a timing
            release.set()
            await asyncio.gather(*holders)
            return acks.waits
        finally:
            await client.aclose()

    assert asyncio.run(main()) == 1
