"""The command path's writes on a real Redis Cluster go packed to each node (engine/store/wire.py).

The appends of the matches a node holds and the publisher's writes (every node's commands
written before any node's replies are read) go on the plain connections of the nodes the
Cluster client's slot map names, not through redis-py's Cluster pipeline; their replies are
what that pipeline gave (a Stale update included).  A slot that moved (a real resharding: the
slot handed to another master) ends in the right result: the slots are asked again and the
write goes where the slot is now.  A node that lost the fence script (SCRIPT FLUSH, as a
restarted or promoted node) is given it again and the write succeeds.

Three masters (no replicas) of this module alone: its tests move slots and flush scripts.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.cluster import ClusterPipeline, RedisCluster

from engine.match.events import PlayerReady
from engine.store import keys, wire
from engine.store.base import AppendRequest
from engine.store.redis_store import RedisEventStore

pytestmark = pytest.mark.redis


@pytest.fixture(scope="module")
def local_cluster() -> Iterator[Any]:
    from tests.cluster_support import require_redis_binaries, start_cluster

    require_redis_binaries()
    c = start_cluster(masters=3, replicas=0)
    yield c
    c.stop()


@pytest.fixture(scope="module")
def cluster(local_cluster: Any) -> Iterator[Any]:
    from engine.store.connect import connect

    client = connect(local_cluster.url)
    yield client
    client.close()


class Trips:
    """Records each packed round trip (the port it went to, its commands' names) and fails a
    test that reaches redis-py's pipelines or the Cluster client's own command path."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, allow_cluster: bool = False) -> None:
        self.trips: list[tuple[int, list[str]]] = []
        self.cluster_calls: list[str] = []
        one = wire.round_trip

        def round_trip(client: Any, commands: Any) -> Any:
            self.trips.append((self.port(client), [self.name(c) for c in commands]))
            return one(client, commands)

        monkeypatch.setattr(wire, "round_trip", round_trip)
        if not allow_cluster:
            def refuse(*_a: Any, **_k: Any) -> Any:
                raise AssertionError("redis-py's pipeline was used")

            monkeypatch.setattr(redis.client.Pipeline, "execute", refuse)
            monkeypatch.setattr(ClusterPipeline, "execute", refuse)
        cluster_execute = RedisCluster.execute_command

        def execute_command(client: Any, *args: Any, **kwargs: Any) -> Any:
            self.cluster_calls.append(str(args[0]))
            return cluster_execute(client, *args, **kwargs)

        monkeypatch.setattr(RedisCluster, "execute_command", execute_command)

    @staticmethod
    def port(client: Any) -> int:
        return int(client.connection_pool.connection_kwargs.get("port", 0))

    @staticmethod
    def name(packed: bytes) -> str:
        return packed.split(b"\r\n")[2].decode()


def ready(match_id: str, seq: int, cmd: str = "c") -> PlayerReady:
    return PlayerReady(match_id=match_id, seq=seq, ts=seq, command_id=cmd, player="a")


def request(match_id: str, version: int = 0, cmd: str = "c1") -> AppendRequest:
    return AppendRequest(match_id, version, cmd, (ready(match_id, version + 1, cmd),), None)


def port_of(cluster: Any, key: str) -> int:
    return int(cluster.get_node_from_key(key).port)


def slot_of_bucket(b: int) -> int:
    return int(redis.cluster.key_slot(keys.events_key("m", b).encode()))


def owner_of(local_cluster: Any, slot: int) -> int:
    """The port of the master serving ``slot``, as the Cluster itself says."""
    for s, e, master, *_ in local_cluster.node(local_cluster.live()[0]).execute_command("CLUSTER SLOTS"):
        if s <= slot <= e:
            return int(master[1])
    raise LookupError(slot)


def move_slot(local_cluster: Any, slot: int, to_port: int) -> None:
    """Hand ``slot`` to the master on ``to_port`` (its keys deleted first: an empty slot moves
    with CLUSTER SETSLOT … NODE), and wait until every master says so."""
    masters = local_cluster.masters()
    owner = owner_of(local_cluster, slot)
    if owner == to_port:
        return
    src = local_cluster.node(owner)
    while True:
        ks = src.execute_command("CLUSTER GETKEYSINSLOT", slot, 1000)
        if not ks:
            break
        src.delete(*ks)
    target_id = local_cluster.node(to_port).execute_command("CLUSTER MYID")
    for p in [to_port, owner, *[m for m in masters if m not in (to_port, owner)]]:
        local_cluster.node(p).execute_command("CLUSTER SETSLOT", slot, "NODE", target_id)

    def moved() -> bool:
        for p in masters:
            for s, e, master, *_ in local_cluster.node(p).execute_command("CLUSTER SLOTS"):
                if s <= slot <= e and int(master[1]) != to_port:
                    return False
        return True

    for _ in range(200):
        if moved():
            return
        time.sleep(0.05)
    raise AssertionError(f"slot {slot} did not move to {to_port}")


def test_a_nodes_appends_go_packed_on_its_own_connection(cluster: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lone append and each node's group of a round go as EVALSHA packed to the node holding
    the match (one round trip per node), never through redis-py's pipelines or Cluster client."""
    store = RedisEventStore(cluster)
    by_port: dict[int, list[str]] = {}
    for k in range(400):
        mid = f"pk{k}"
        by_port.setdefault(port_of(cluster, keys.events_key(mid, store.bucket_of(mid))), []).append(mid)
    assert len(by_port) == 3
    (p1, mids1), (p2, mids2), _rest = sorted(by_port.items())
    cluster.script_load(store._append.script)  # on every master (a new node's NOSCRIPT: the last test)
    trips = Trips(monkeypatch)
    lone = mids1[0]
    assert store.append(lone, 0, "c1", [ready(lone, 1)], None).version == 1
    assert trips.trips == [(p1, ["EVALSHA"])]
    trips.trips.clear()
    group = [request(m) for m in mids1[1:4]]
    other = request(mids2[0])
    results = store.append_many([*group, other])
    assert [(r.version, r.duplicate) for r in results] == [(1, False)] * 4  # type: ignore[union-attr]
    assert sorted(trips.trips) == sorted([(p1, ["EVALSHA"] * 3), (p2, ["EVALSHA"])])
    assert trips.cluster_calls == []
    trips.trips.clear()
    again = store.append_many([request(m) for m in mids1[1:3]])  # the same commands: duplicates
    assert [r.duplicate for r in again] == [True, True]  # type: ignore[union-attr]
    for m in [lone, *mids1[1:4], mids2[0]]:
        assert [e.seq for e in store.load(m)] == [1]


def test_a_slot_moved_under_a_packed_append_ends_in_the_right_result(
        cluster: Any, local_cluster: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The node the slot map names answers MOVED (the slot was handed to another master): a
    lone append asks the Cluster for its slots and goes through the Cluster client to the
    slot's node; a round's appends come back as that transient error (nothing written), the
    slots are asked again, and the same requests run again reach the new node, once each."""
    store = RedisEventStore(cluster)
    masters = local_cluster.masters()
    b1, b2 = 5, 11
    m1 = next(f"mv{k}" for k in range(10_000) if store.bucket_of(f"mv{k}") == b1)
    m2s = [f"mw{k}" for k in range(10_000) if store.bucket_of(f"mw{k}") == b2][:2]
    slot1 = slot_of_bucket(b1)
    stale1 = int(cluster.nodes_manager.slots_cache[slot1][0].port)
    move_slot(local_cluster, slot1, next(p for p in masters if p != stale1))
    assert int(cluster.nodes_manager.slots_cache[slot1][0].port) == stale1  # the client's map: stale
    trips = Trips(monkeypatch, allow_cluster=True)

    # a lone append
    assert store.append(m1, 0, "c1", [ready(m1, 1)], None).version == 1
    assert trips.trips == [(stale1, ["EVALSHA"])] and trips.cluster_calls == ["EVALSHA"]
    now1 = int(cluster.nodes_manager.slots_cache[slot1][0].port)
    assert now1 != stale1 and now1 == local_cluster.master_of(keys.events_key(m1, b1))
    assert [e.seq for e in store.load(m1)] == [1]

    # a round: the map names another master for b2's slot (as it did for b1's before)
    slot2 = slot_of_bucket(b2)
    new2 = int(cluster.nodes_manager.slots_cache[slot2][0].port)
    old2 = next(n for n in cluster.get_primaries() if int(n.port) != new2)
    cluster.nodes_manager.slots_cache[slot2] = [old2]
    trips.trips.clear()
    results = store.append_many([request(m) for m in m2s])
    assert all(isinstance(r, redis.exceptions.MovedError) for r in results)
    assert trips.trips == [(int(old2.port), ["EVALSHA", "EVALSHA"])]
    assert int(cluster.nodes_manager.slots_cache[slot2][0].port) == new2  # the slots were asked again
    assert all(store.load(m) == [] for m in m2s)  # nothing written on the wrong node
    trips.trips.clear()
    results = store.append_many([request(m) for m in m2s])  # what the caller does: run them again
    assert [(r.version, r.duplicate) for r in results] == [(1, False), (1, False)]  # type: ignore[union-attr]
    assert trips.trips == [(new2, ["EVALSHA", "EVALSHA"])]
    assert all([e.seq for e in store.load(m)] == [1] for m in m2s)
