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
from engine.service.publish import Publisher, Stale
from engine.store import keys, wire
from engine.store.base import AppendRequest
from engine.store.redis_store import RedisEventStore
from tests.conftest import RedisServer, own_redis_server
from tests.wire_support import record_riders

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


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    yield from own_redis_server()  # SCRIPT FLUSH is server-wide


class Trips:
    """Records each packed round trip (the port it went to, its commands' names) and fails a
    test that reaches redis-py's pipelines or the Cluster client's own command path."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, allow_cluster: bool = False) -> None:
        self.trips: list[tuple[int, list[str]]] = []
        self.cluster_calls: list[str] = []
        self.batches: list[int] = []  # nodes per round_trips call
        self.rides: list[list[str]] = []  # per rider taken: the commands of the round trip it rode on
        one, many = wire.round_trip, wire.round_trips

        def round_trip(client: Any, commands: Any) -> Any:
            self.trips.append((self.port(client), [self.name(c) for c in commands]))
            return one(client, commands)

        def round_trips(calls: Any, rider: Any = None) -> Any:
            self.batches.append(len(calls))
            for client, commands in calls:
                self.trips.append((self.port(client), [self.name(c) for c in commands]))
            boards = next((c for c, _ in calls if rider is not None and rider.boards(c)), None)
            out = many(calls, rider)
            if boards is not None:  # the commands the rider went after
                self.rides.append([self.name(c) for client, cs in calls if client is boards for c in cs])
            return out

        monkeypatch.setattr(wire, "round_trip", round_trip)
        monkeypatch.setattr(wire, "round_trips", round_trips)
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
    with CLUSTER SETSLOT … NODE, the new owner's config epoch bumped to the greatest), and wait
    until every master says so."""
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
        if p == to_port:
            # the new owner's claim must carry the greatest config epoch, or a master (or the old
            # owner's replica) still gossiping the old owner's higher epoch takes the slot back
            local_cluster.node(p).execute_command("CLUSTER BUMPEPOCH")

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
    cluster.script_load(store._append.script)  # on every master: no NOSCRIPT in this test
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


def _updates(pub: Publisher, players: list[str], version: int, match: str = "mp", duplicate: bool = False) -> list[Any]:
    return [pub._delivery(keys.outbox_key(p), {"kind": "update", "match": match, "command_id": f"c{version}",
                                               "version": version, "body": b"x"}, version, duplicate)
            for p in players]


def _shape(replies: list[Any]) -> list[Any]:
    return [r if isinstance(r, Stale) else type(r).__name__ for r in replies]


def test_the_publisher_writes_each_nodes_updates_packed_with_the_same_replies(
        cluster: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every update, entry and reply of one write goes packed: every node's commands written,
    then their replies read (one round trip per node, side by side); the updates by EVALSHA of
    the fence script, the one that a rejection follows on its stream by EVAL.  The replies are those of redis-py's Cluster pipeline (the path of a
    client the module cannot serve): entry ids, Stale for an update below the stream's version,
    a re-publication written."""
    pub = Publisher(cluster, consumer="s1")

    def batch(tag: str) -> tuple[list[str], list[list[Any]]]:
        players = [f"{tag}{i}" for i in range(9)]
        assert len({port_of(cluster, keys.outbox_key(p)) for p in players}) == 3
        return players, [
            [*_updates(pub, players, 7), pub._delivery(keys.outbox_key(players[0]), {"kind": "rejected", "code": "x"}),
             pub._delivery(keys.REPLY_PREFIX + tag, {"kind": "accepted"})],
            [*_updates(pub, players[:4], 3), *_updates(pub, players[4:], 9)],  # Stale, then written
            _updates(pub, players[:3], 2, duplicate=True),  # a re-publication: always written
        ]

    packed_players, packed_rounds = batch("pw")
    redis_py_players, redis_py_rounds = batch("rp")
    with monkeypatch.context() as m:
        m.setattr(wire, "by_node", lambda *_a: None)  # redis-py's Cluster pipeline
        expected = [_shape(pub.write(w, raise_on_error=False)) for w in redis_py_rounds]
    trips = Trips(monkeypatch)
    got = [_shape(pub.write(w, raise_on_error=False)) for w in packed_rounds]
    assert got == expected
    assert got[1] == [Stale(7)] * 4 + ["bytes"] * 5 and pub.stats.fenced == 8
    assert trips.batches == [3, 3, len({port_of(cluster, keys.outbox_key(p)) for p in packed_players[:3]})]
    assert trips.cluster_calls == []
    names = [n for _p, ns in trips.trips for n in ns]
    assert names.count("EVAL") == 1 and names.count("EVALSHA") == 8 + 9 + 3
    for tag, players in (("pw", packed_players), ("rp", redis_py_players)):
        first = [f for _i, f in cluster.xrange(keys.outbox_key(players[0]))]
        assert [(f[b"kind"], f.get(b"version")) for f in first] == [
            (b"update", b"7"), (b"rejected", None), (b"update", b"2")]
        assert cluster.xlen(keys.outbox_key(players[5])) == 2
        assert cluster.xlen(keys.REPLY_PREFIX + tag) == 1


def test_a_node_without_scripts_takes_the_updates_in_order(cluster: Any, local_cluster: Any,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """After SCRIPT FLUSH on every master (a restarted or promoted node knows no script) the
    publisher's updates are written in the order given (an update, then the rejection after it,
    on the same stream): that update goes by EVAL, which loads the script on its node, and the
    other nodes answer NOSCRIPT to their EVALSHAs, which ran nothing and go again by EVAL, one
    packed round trip per node; then every node has the script.  The store's appends load
    theirs."""
    pub = Publisher(cluster, consumer="s1")
    store = RedisEventStore(cluster)
    players = [f"ns{i}" for i in range(9)]
    assert len({port_of(cluster, keys.outbox_key(p)) for p in players}) == 3
    for p in local_cluster.masters():
        local_cluster.node(p).script_flush()
    with monkeypatch.context() as m:
        trips = Trips(m)  # redis-py's pipelines refused: nothing goes a second way
        replies = pub.write([*_updates(pub, players, 4),
                             pub._delivery(keys.outbox_key(players[0]), {"kind": "rejected", "code": "x"})])
        assert trips.batches == [3, 2] and trips.cluster_calls == []
        home = port_of(cluster, keys.outbox_key(players[0]))
        first = {port: names for port, names in trips.trips[:3]}
        assert first[home][0] == "EVAL" and set(first[home][1:]) == {"EVALSHA", "XADD", "EXPIRE", "SPUBLISH"}
        away = sorted(port_of(cluster, keys.outbox_key(p)) for p in players if port_of(cluster, keys.outbox_key(p)) != home)
        assert sorted(port for port, _n in trips.trips[3:]) == sorted(set(away))
        assert sorted(n for _port, names in trips.trips[3:] for n in names) == ["EVAL"] * len(away)
        assert all(isinstance(r, bytes) for r in pub.write(_updates(pub, players, 5)))
        assert trips.batches[2:] == [3] and all(set(names) == {"EVALSHA"} for _p, names in trips.trips[5:])
    assert all(isinstance(r, bytes) for r in replies)
    assert [f[b"kind"] for _i, f in cluster.xrange(keys.outbox_key(players[0]))] == [b"update", b"rejected", b"update"]
    assert all(cluster.xlen(keys.outbox_key(p)) == 2 for p in players[1:])
    mids = [f"nsm{k}" for k in range(40) if store.bucket_of(f"nsm{k}") == 3][:2]
    results = store.append_many([request(m) for m in mids])
    assert [r.version for r in results] == [1, 1]  # type: ignore[union-attr]
    assert store.append(f"nsx{mids[0]}", 0, "c1", [ready(f"nsx{mids[0]}", 1)], None).version == 1


def test_a_publication_to_a_moved_slot_reaches_its_new_node(cluster: Any, local_cluster: Any,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A player's stream whose slot was handed to another master: that node answers MOVED, the
    slots are asked again and those writes go through the Cluster client's pipeline (the
    update by EVAL: the rejection follows it on its stream); the other nodes' writes stand as
    written."""
    pub = Publisher(cluster, consumer="s1")
    players = [f"mp{i}" for i in range(9)]
    moving = players[0]
    slot = int(cluster.keyslot(keys.outbox_key(moving)))
    was = int(cluster.nodes_manager.slots_cache[slot][0].port)
    to = next(p for p in local_cluster.masters() if p != was)
    move_slot(local_cluster, slot, to)
    trips = Trips(monkeypatch, allow_cluster=True)
    replies = pub.write(_updates(pub, players, 5) + [pub._delivery(keys.outbox_key(moving), {"kind": "rejected"})])
    assert all(isinstance(r, bytes) for r in replies)
    assert trips.batches[0] == 3 and "XADD" in dict(trips.trips[:3])[was]  # sent to the slot's old node first
    assert int(cluster.nodes_manager.slots_cache[slot][0].port) == to
    assert [f[b"kind"] for _i, f in cluster.xrange(keys.outbox_key(moving))] == [b"update", b"rejected"]
    assert all(cluster.xlen(keys.outbox_key(p)) == 1 for p in players[1:])
    assert local_cluster.node(to).xlen(keys.outbox_key(moving)) == 2


def test_round_trips_gives_each_client_its_replies_or_its_failure(cluster: Any) -> None:
    """Several clients at once: a client whose connection fails gets its ConnectionError, the
    others their replies."""
    from tests.cluster_support import free_ports

    a, b = (cluster.get_redis_connection(n) for n in cluster.get_primaries()[:2])
    dead = redis.Redis(port=free_ports(1)[0], socket_connect_timeout=1)
    out = wire.round_trips([(a, [wire.pack("PING"), wire.pack("ECHO", "a")]), (dead, [wire.pack("PING")]),
                            (b, [wire.pack("ECHO", "b")])])
    assert out[0] in ([True, b"a"], [b"PONG", b"a"])
    assert isinstance(out[1], redis.ConnectionError)
    assert out[2] == [b"b"]
    assert wire.round_trips([(a, [wire.pack("ECHO", "again")])]) == [[b"again"]]  # its connection kept
    with pytest.raises(ValueError):  # one client twice would share its connection
        wire.round_trips([(a, [wire.pack("PING")]), (a, [wire.pack("PING")])])


def test_on_one_node_the_publisher_goes_packed_in_order(redis_server: RedisServer,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A plain client: one packed round trip; a stream's last update of the round by EVALSHA,
    an update that another write of its stream follows by EVAL.  After SCRIPT FLUSH (a
    restarted server) each stream keeps the order of the writes: the EVALs run (and load the
    script), and the EVALSHAs, each its stream's last, come back NOSCRIPT, ran nothing and go
    again by EVAL in a round trip of their own."""
    client = redis_server.client()
    client.flushdb()
    pub = Publisher(client, consumer="s1")
    client.script_flush()
    trips = Trips(monkeypatch)
    players = ["a", "b"]
    replies = pub.write([*_updates(pub, players, 3), pub._delivery(keys.outbox_key("a"), {"kind": "sync"}),
                         pub._delivery(keys.REPLY_PREFIX + "g", {"kind": "accepted"})])
    assert all(isinstance(r, bytes) for r in replies)
    assert [n for _p, n in trips.trips] == [["EVAL", "EVALSHA", "XADD", "EXPIRE", "SPUBLISH", "XADD", "EXPIRE"]]
    assert [f[b"kind"] for _i, f in client.xrange(keys.outbox_key("a"))] == [b"update", b"sync"]
    assert pub.write(_updates(pub, players, 2), raise_on_error=False) == [Stale(3), Stale(3)]
    for versions in ([4, 5], [6], [7, 8]):
        client.script_flush()
        del trips.trips[:]
        rounds = [u for v in versions for u in _updates(pub, players, v)]
        if versions == [7, 8]:  # b's rejection between its two updates, and between a's
            rounds.insert(2, pub._delivery(keys.outbox_key("b"), {"kind": "rejected"}))
        assert all(isinstance(r, bytes) for r in pub.write(rounds))
        if versions == [6]:  # each stream's only update: NOSCRIPT, then EVAL
            assert [n for _p, n in trips.trips] == [["EVALSHA"] * 2, ["EVAL"] * 2]
        else:  # the EVALs first in the round load the script for the EVALSHAs after them
            assert len(trips.trips) == 1 and trips.trips[0][1].count("EVALSHA") == 2
    assert [f.get(b"version") for _i, f in client.xrange(keys.outbox_key("a"))] == [
        b"3", None, b"4", b"5", b"6", b"7", b"8"]
    assert [f.get(b"version") for _i, f in client.xrange(keys.outbox_key("b"))][1:] == [
        b"4", b"5", b"6", b"7", None, b"8"]
    assert pub.write(_updates(pub, players, 9)) and trips.trips[-1][1] == ["EVALSHA"] * 2
    client.close()


def test_a_node_away_sends_the_writes_through_the_cluster_client(cluster: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The slot map names a node that does not answer (a connection error): the slots are asked
    again; a publication's writes for it and a lone append go through the Cluster client (the
    other nodes' writes stand as written); a round's appends raise that error, and the same
    round run again reaches the slot's node."""
    from redis.cluster import ClusterNode

    from tests.cluster_support import free_ports

    store = RedisEventStore(cluster)
    pub = Publisher(cluster, consumer="s1")
    dead = ClusterNode("127.0.0.1", free_ports(1)[0], server_type="primary")

    def away(key: str) -> tuple[int, Any]:
        slot = int(cluster.keyslot(key))
        real = cluster.nodes_manager.slots_cache[slot][0]
        cluster.nodes_manager.slots_cache[slot] = [dead]
        return slot, real

    trips = Trips(monkeypatch, allow_cluster=True)
    players = [f"aw{i}" for i in range(9)]
    slot, real = away(keys.outbox_key(players[0]))
    replies = pub.write(_updates(pub, players, 2))
    assert all(isinstance(r, bytes) for r in replies)
    assert cluster.nodes_manager.slots_cache[slot][0].name == real.name
    assert all(cluster.xlen(keys.outbox_key(p)) == 1 for p in players)
    assert dead.port in dict(trips.trips)

    lone = "away-lone"
    slot, real = away(keys.events_key(lone, store.bucket_of(lone)))
    assert store.append(lone, 0, "c1", [ready(lone, 1)], None).version == 1
    assert cluster.nodes_manager.slots_cache[slot][0].name == real.name

    b = store.bucket_of(lone)
    mids = [m for m in (f"aw{k}" for k in range(2000)) if store.bucket_of(m) == b][:2]
    away(keys.events_key(mids[0], b))
    with pytest.raises(redis.ConnectionError):
        store.append_many([request(m) for m in mids])
    assert cluster.nodes_manager.slots_cache[slot][0].name == real.name
    assert [r.version for r in store.append_many([request(m) for m in mids])] == [1, 1]  # type: ignore[union-attr]


@pytest.mark.parametrize("error", [redis.exceptions.ClusterDownError("CLUSTERDOWN The cluster is down"),
                                   redis.exceptions.TryAgainError("TRYAGAIN")])
def test_a_lone_append_the_node_cannot_take_now_goes_through_the_cluster_client(
        cluster: Any, monkeypatch: pytest.MonkeyPatch, error: Exception) -> None:
    """CLUSTERDOWN (mid-fail-over) or TRYAGAIN from the node: the append goes again through the
    Cluster client, which waits and retries as it does for any call, and ends written once;
    TRYAGAIN (a slot moving) asks nothing of the slot map, CLUSTERDOWN asks it anew."""
    store = RedisEventStore(cluster)
    refreshed: list[str] = []
    real_initialize = cluster.nodes_manager.initialize
    monkeypatch.setattr(cluster.nodes_manager, "initialize",
                        lambda *a, **k: (refreshed.append("slots"), real_initialize(*a, **k))[1])
    sent = wire.round_trip

    def refuse_once(client: Any, commands: Any) -> Any:
        monkeypatch.setattr(wire, "round_trip", sent)
        return [error]

    monkeypatch.setattr(wire, "round_trip", refuse_once)
    mid = f"cd-{type(error).__name__}"
    assert store.append(mid, 0, "c1", [ready(mid, 1)], None).version == 1
    assert store.version(mid) == 1
    assert refreshed == ([] if isinstance(error, redis.exceptions.TryAgainError) else ["slots"])


class NoCarryStore(RedisEventStore):
    """A store whose appends carry nothing, as with ``--replica-acks`` 1 or more (the default
    on a Cluster whose masters have replicas): every publication goes on its own."""

    def can_carry(self, client: Any) -> bool:
        return False


def _ride_rig(cluster: Any) -> tuple[Any, Any, str, list[str], str, int]:
    """A match seated by two players whose streams the node of its bucket holds (every
    publication goes there: its store carries none, :class:`NoCarryStore`), and the bucket's
    player-channel consumer: (service, consumer, match, players, inbox, the node's port)."""
    from engine.config import load_config
    from engine.service.channels import PLAYER, ChannelService
    from engine.service.client import GatewayClient
    from engine.service.inbox import InboxConsumer, run_together
    from engine.service.service import MatchService
    from engine.service.shuffle import seeded_random, seeded_server_seeds
    from engine.service.state_cache import StateCache

    clock = iter(range(1_000_000, 10**12, 1000))
    svc = MatchService(NoCarryStore(cluster), lambda: next(clock), seeded_random(1), state_cache=StateCache(),
                       server_seeds=seeded_server_seeds(1))
    # every rig's match in bucket 0: the rigs share its stream, each reading as a consumer of its own
    mid = next(m for m in (f"ride-{time.monotonic_ns()}-{k}" for k in range(1000)) if keys.bucket_of(m) == 0)
    stream = keys.inbox_key(keys.bucket_of(mid))
    node = port_of(cluster, stream)
    players = [p for p in (f"{mid}-p{i}" for i in range(200)) if port_of(cluster, keys.outbox_key(p)) == node][:2]
    setup = InboxConsumer(cluster, svc, mid, stream="{ride}:setup")  # a consumer of its own: no one's pending
    lobby = GatewayClient(cluster, inbox="{ride}:setup", ops="{ride}:setup")
    lobby.create_match(mid, load_config("points").to_record())
    for p in players:
        lobby.sit(mid, p)
    while setup.run_once(block_ms=None, count=50):
        pass
    consumer = InboxConsumer(cluster, ChannelService(svc, PLAYER), mid, stream=stream)
    assert run_together([consumer], block_ms=None) == 0
    return svc, consumer, mid, players, stream, node


def _both_ready(cluster: Any, mid: str, players: list[str], stream: str) -> Any:
    """The first player's Ready now, the second's once the first one's update is out (the
    bucket's reader is then waiting on its ride); returns the sending thread."""
    import threading

    from engine.match.commands import Ready, encode_command

    seen = len(cluster.xrange(keys.outbox_key(players[0])))

    def second() -> None:
        end = time.monotonic() + 20
        while time.monotonic() < end and len(cluster.xrange(keys.outbox_key(players[0]))) <= seen:
            time.sleep(0.005)
        cluster.xadd(stream, {"c": encode_command(Ready(command_id=f"{mid}-r2", match_id=mid, player=players[1]))})

    t = threading.Thread(target=second, daemon=True)
    t.start()
    cluster.xadd(stream, {"c": encode_command(Ready(command_id=f"{mid}-r1", match_id=mid, player=players[0]))})
    return t


def test_the_next_read_rides_on_the_publications_to_the_buckets_node(cluster: Any, local_cluster: Any,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 38: on a Cluster a bucket's next read goes after the round's last writes to its
    node -- the publications (an update to a player whose stream that node holds) -- in their
    write, not with the appends (a read sent with them would take the first command to arrive
    during the publications, not what came meanwhile).  Every command is handled, the reads
    after the first cost no round trip of their own."""
    from engine.service.inbox import run_together

    svc, consumer, mid, players, stream, node = _ride_rig(cluster)
    t = _both_ready(cluster, mid, players, stream)
    trips = Trips(monkeypatch, allow_cluster=True)
    riders = record_riders(monkeypatch)
    before = int(local_cluster.node(node).info("commandstats")["cmdstat_xreadgroup"]["calls"])
    assert run_together([consumer], block_ms=300, carry_on=lambda: True) == 2  # both, in one call
    t.join()
    reads = int(local_cluster.node(node).info("commandstats")["cmdstat_xreadgroup"]["calls"]) - before
    sent = [r for r in riders if r.sent]
    assert len(sent) >= 2  # each read after the first rode (the last one made after it unsent) ...
    assert reads == 1 + len(sent)
    alone = [names for port, names in trips.trips if port == node and "XREADGROUP" in names]
    assert alone == [["XREADGROUP"]]  # ... and only the first had a round trip of its own
    assert len(trips.rides) == len(sent) and all(set(names) == {"EVALSHA"} for names in trips.rides)  # the updates
    assert svc.state_cache.get(mid).phase == "playing"  # type: ignore[union-attr]  # both Ready: dealt
    assert consumer.stats.accepted == 2
    consumer.flush_acks()


def test_a_ride_whose_reply_is_lost_leaves_its_entries_to_be_read_again(cluster: Any,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A ride's read that ran and whose reply never came back (the connection lost): its
    entries are pending on the reader, read again first; nothing is lost, nothing handled
    twice."""
    from engine.service.inbox import run_together

    svc, consumer, mid, players, stream, _node = _ride_rig(cluster)
    real_finish = wire.InFlight.finish

    def lost(self: Any) -> list[Any]:
        real_finish(self)  # the read ran on the server: the entry is delivered ...
        raise redis.ConnectionError("lost")  # ... and the reply never arrived

    monkeypatch.setattr(wire.InFlight, "finish", lost)
    t = _both_ready(cluster, mid, players, stream)
    with pytest.raises(redis.ConnectionError):
        run_together([consumer], block_ms=5000, carry_on=lambda: True)
    t.join()
    assert consumer.stats.accepted == 1 and consumer._backlog  # its own pending entries first
    monkeypatch.setattr(wire.InFlight, "finish", real_finish)
    for _ in range(10):
        run_together([consumer], block_ms=None)
    assert consumer.stats.accepted == 2
    assert svc.state_cache.get(mid).phase == "playing"  # type: ignore[union-attr]
    consumer.flush_acks()
    assert not cluster.xpending_range(stream, keys.SERVICE_GROUP, "-", "+", 10, consumername=mid)  # all acknowledged


def _due_in_every_bucket(cluster: Any, tag: str) -> tuple[RedisEventStore, list[str]]:
    """A match with a deadline due at 1,000 ms in each of the 16 buckets."""
    from engine.match.deadline import Deadline

    store = RedisEventStore(cluster)
    mids: dict[int, str] = {}
    k = 0
    while len(mids) < store.buckets:
        mids.setdefault(store.bucket_of(f"{tag}{k}"), f"{tag}{k}")
        k += 1
    for mid in mids.values():
        store.append(mid, 0, f"{mid}-c", [], Deadline(match_id=mid, version=0, at_ms=1_000, kind="turn"))
    return store, sorted(mids.values())


def _carry_rig(cluster: Any, local_reply: bool) -> tuple[Any, Any, str, list[str], str, list[Any]]:
    """A match in bucket 0 seated by a player whose stream the match's node holds and one
    whose stream another node holds, a consumer of the bucket's stream that replies to a
    stream on (``local_reply``) or off that node and records what it publishes itself:
    (service, consumer, match, [local player, remote player], reply stream, written)."""
    from engine.config import load_config
    from engine.service.client import GatewayClient
    from engine.service.inbox import InboxConsumer
    from engine.service.service import MatchService
    from engine.service.shuffle import seeded_random, seeded_server_seeds
    from engine.service.state_cache import StateCache

    clock = iter(range(1_000_000, 10**12, 1000))
    svc = MatchService(RedisEventStore(cluster), lambda: next(clock), seeded_random(1), state_cache=StateCache(),
                       server_seeds=seeded_server_seeds(1))
    mid = next(m for m in (f"carry-{time.monotonic_ns()}-{k}" for k in range(1000)) if keys.bucket_of(m) == 0)
    node = port_of(cluster, keys.events_key(mid, 0))
    near = next(p for p in (f"{mid}-n{i}" for i in range(200)) if port_of(cluster, keys.outbox_key(p)) == node)
    far = next(p for p in (f"{mid}-f{i}" for i in range(200)) if port_of(cluster, keys.outbox_key(p)) != node)
    reply = next(r for r in (f"{keys.REPLY_PREFIX}{{{mid}-r{i}}}" for i in range(200))
                 if (port_of(cluster, r) == node) == local_reply)
    consumer = InboxConsumer(cluster, svc, mid, stream="{carry}:in")
    written: list[Any] = []
    real_write = consumer.publisher.write

    def write(writes: Any, *args: Any, **kwargs: Any) -> Any:
        written.extend(writes)
        return real_write(writes, *args, **kwargs)

    consumer.publisher.write = write  # type: ignore[method-assign]
    client = GatewayClient(cluster, inbox="{carry}:in", ops="{carry}:in", reply_to=reply)
    client.create_match(mid, load_config("points").to_record())
    for p in (near, far):
        client.sit(mid, p)
    for p in (near, far):
        client.ready(mid, p)
    while consumer.run_once(block_ms=None, count=50):
        pass
    return svc, consumer, mid, [near, far], reply, written


@pytest.mark.parametrize("local_reply", [True, False], ids=["reply-near", "reply-far"])
def test_an_append_carries_the_streams_its_node_holds_and_the_rest_is_published(
        cluster: Any, local_reply: bool) -> None:
    """Issue 38: on a Cluster an append carries the entries of the streams the match's node
    holds (append.lua reaches them there), the publisher writes the others; each player gets
    every update once, in version order, and each stream's fence holds the last version, a
    carried one too (a late older update is refused after it)."""
    svc, consumer, mid, (near, far), reply, written = _carry_rig(cluster, local_reply)
    state = svc.state_cache.get(mid)
    assert state is not None and state.phase == "playing" and state.version >= 5
    streams = {w.stream for w in written}
    assert keys.outbox_key(far) in streams  # another node's: published
    assert keys.outbox_key(near) not in streams  # the match's node's: carried
    assert (reply in streams) is (not local_reply)
    for p in (near, far):
        got = [int(f[b"version"]) for _, f in cluster.xrange(keys.outbox_key(p)) if f.get(b"kind") == b"update"]
        assert got == sorted(set(got)) and got[-1] == state.version  # once each, in order, up to now
        assert int(float(cluster.hget(keys.outbox_versions_key(p), mid))) == state.version
        assert cluster.ttl(keys.outbox_key(p)) > 0 and cluster.ttl(keys.outbox_versions_key(p)) > 0
    replies = [f[b"kind"] for _, f in cluster.xrange(reply)]
    assert len(replies) == 5 and set(replies) == {b"accepted"}  # create, two Sits, two Readys
    assert consumer.stats.accepted == 5
    consumer.flush_acks()
    # a delayed publication of an older update (a writer that lost the bucket) is refused
    late = consumer.publisher._delivery(keys.outbox_key(near), {"kind": "update", "match": mid},
                                        version=state.version - 1)
    assert consumer.publisher.write([late], raise_on_error=False) == [Stale(state.version)]


def test_an_entry_the_slot_map_misplaced_is_not_carried_and_nothing_of_it_stays(cluster: Any) -> None:
    """A stream another node holds (a slot map gone stale) fails the carried writes in the
    script: the events are in, no carried entry stays anywhere, the caller is told (not
    ``wrote``) and publishes them itself."""
    from engine.store.base import Write

    store = RedisEventStore(cluster)
    mid = f"misplaced-{time.monotonic_ns()}"
    node = port_of(cluster, keys.events_key(mid, store.bucket_of(mid)))
    near = next(p for p in (f"{mid}-n{i}" for i in range(200)) if port_of(cluster, keys.outbox_key(p)) == node)
    far = next(p for p in (f"{mid}-f{i}" for i in range(200)) if port_of(cluster, keys.outbox_key(p)) != node)
    assert store.carries(mid, [keys.outbox_key(near), keys.outbox_key(far)]) == [True, False]
    e = PlayerReady(match_id=mid, seq=1, ts=0, command_id="c1", player=near)
    writes = (Write(keys.outbox_key(near), {"kind": "update", "match": mid}, 100, 60, version=1),
              Write(keys.outbox_key(far), {"kind": "update", "match": mid}, 100, 60, version=1))
    for rq in ([AppendRequest(mid, 0, "c1", (e,), None, writes)],
               [AppendRequest(mid, 1, "c2", (e.model_copy(update={"seq": 2, "command_id": "c2"}),), None, writes),
                AppendRequest(f"{mid}-x", 0, "c3", (e.model_copy(update={"match_id": f"{mid}-x"}),), None)]):
        result = store.append_many(rq)[0]
        assert not isinstance(result, Exception) and not result.wrote
    assert store.version(mid) == 2
    for p in (near, far):
        assert cluster.xlen(keys.outbox_key(p)) == 0 and not cluster.exists(keys.outbox_versions_key(p))


def _claimed(claims: Any, now_ms: int, tag: str) -> list[str]:
    return sorted(c.deadline.match_id for c in claims.claim(now_ms, 2_000) if c.deadline.match_id.startswith(tag))


def test_the_dispatchers_claims_go_one_round_trip_per_node(cluster: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 38: a tick of the deadline dispatcher claims the 16 buckets with one EVALSHA each
    (each bucket its own slot), packed into one round trip per master, every master written
    before any is read; the claims are those of one call a bucket, each deadline claimed once."""
    from workers.dispatcher import RedisClaims

    store, mids = _due_in_every_bucket(cluster, "dpn")
    claims = RedisClaims(cluster, store.buckets, bucket_of=store.bucket_of)
    claims.claim(0, 2_000)  # the masters learn the script (the first tick's NOSCRIPT: the test below)
    trips = Trips(monkeypatch)  # redis-py's pipelines refused
    assert _claimed(claims, 2_000, "dpn") == mids
    assert trips.batches == [3] and len(trips.trips) == 3
    assert sorted(n for _p, names in trips.trips for n in names) == ["EVALSHA"] * 16
    assert trips.cluster_calls == []
    assert _claimed(claims, 2_001, "dpn") == []  # marked in flight: not claimed again


def test_a_node_without_the_claim_script_gets_it_through_the_cluster_client(
        cluster: Any, local_cluster: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A master that lost its scripts (SCRIPT FLUSH, as a restarted or promoted node) answers
    its buckets' claims NOSCRIPT (the script did not run): those buckets are claimed alone
    through the Cluster client, which loads the script; nothing is missed or claimed twice, and
    the next tick goes packed again."""
    from workers.dispatcher import RedisClaims

    store, mids = _due_in_every_bucket(cluster, "dns")
    claims = RedisClaims(cluster, store.buckets, bucket_of=store.bucket_of)
    claims.claim(0, 2_000)  # the script known to every master
    flushed = local_cluster.masters()[0]
    local_cluster.node(flushed).script_flush()
    on_flushed = [b for b in range(store.buckets) if port_of(cluster, keys.deadlines_key(b)) == flushed]
    with monkeypatch.context() as m:
        trips = Trips(m, allow_cluster=True)
        assert _claimed(claims, 2_000, "dns") == mids
        assert trips.batches == [3]
        # the first one answered NOSCRIPT once more, loaded it and ran it; the others found it
        assert trips.cluster_calls.count("SCRIPT LOAD") == 1 and len(on_flushed) > 0
        assert trips.cluster_calls.count("EVALSHA") == len(on_flushed) + 1
    with monkeypatch.context() as m:
        trips = Trips(m)
        assert _claimed(claims, 2_001, "dns") == [] and trips.batches == [3] and trips.cluster_calls == []


def test_a_node_away_holds_back_only_its_own_buckets_claims(cluster: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The slot map names a node that does not answer for one bucket: the other buckets' claims
    stand as the packed round trips made them, and that bucket is claimed alone through the
    Cluster client, which finds the slot's node; a bucket whose node the Cluster cannot reach
    at all (CLUSTERDOWN there too) is left for the next tick, the others dispatched."""
    from redis.cluster import ClusterNode

    from tests.cluster_support import free_ports
    from workers.dispatcher import RedisClaims

    store, mids = _due_in_every_bucket(cluster, "dna")
    claims = RedisClaims(cluster, store.buckets, bucket_of=store.bucket_of)
    dead = ClusterNode("127.0.0.1", free_ports(1)[0], server_type="primary")
    slot = int(cluster.keyslot(keys.deadlines_key(0)))
    real = cluster.nodes_manager.slots_cache[slot][0]
    cluster.nodes_manager.slots_cache[slot] = [dead]
    with monkeypatch.context() as m:
        trips = Trips(m, allow_cluster=True)
        assert _claimed(claims, 2_000, "dna") == mids
        assert dead.port in dict(trips.trips) and trips.cluster_calls == ["EVALSHA"]
    assert cluster.nodes_manager.slots_cache[slot][0].name == real.name

    store, mids = _due_in_every_bucket(cluster, "dnb")
    cut = store.bucket_of(mids[1])
    real_claim = claims._claim

    class Down:  # the Cluster client's own path: the node cannot be reached
        sha = real_claim.sha

        def __call__(self, keys: Any, args: Any) -> Any:
            raise redis.exceptions.ClusterDownError("CLUSTERDOWN The cluster is down")

    claims._claim = Down()  # type: ignore[assignment]
    cut_slot = int(cluster.keyslot(keys.deadlines_key(cut)))
    cluster.nodes_manager.slots_cache[cut_slot] = [dead]
    try:
        assert _claimed(claims, 2_000, "dnb") == [m for m in mids if m != mids[1]]
        assert claims.next_due_ms is None  # what the skipped bucket holds is unknown: tick again
    finally:
        claims._claim = real_claim
        cluster.nodes_manager.initialize()
    assert _claimed(claims, 2_001, "dnb") == [mids[1]]
