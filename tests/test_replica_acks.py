"""``--replica-acks N`` / ``SK_REPLICA_ACKS`` (issue 24 §4): one contract for the sync waiter
(serve, the workers, the ledger) and the asyncio one (the gateway's lobby), on a real
redis-server with and without a replica.  The Cluster path runs in tests/test_cluster_stack.py."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from engine.store.redis_errors import is_transient
from engine.store.replicas import AsyncReplicaAcks, ReplicaAcks, marker_key
from tests.conftest import start_redis_server, stop_redis_server
from tests.gateway_support import ROOT

pytestmark = [pytest.mark.redis]


class Node:
    def __init__(self) -> None:
        self.proc, self.url, self.workdir = start_redis_server()

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url)

    def stop(self) -> None:
        stop_redis_server(self.proc, self.workdir)


@pytest.fixture(scope="module")
def pair() -> Iterator[tuple[Node, Node]]:
    """A primary and its replica (REPLICAOF), caught up."""
    primary, replica = Node(), Node()
    try:
        host, port = primary.url.split("//")[1].split("/")[0].split(":")
        replica.client().replicaof(host, port)
        deadline = time.monotonic() + 20
        while replica.client().info("replication").get("master_link_status") != "up":
            assert time.monotonic() < deadline, "the replica did not connect"
            time.sleep(0.05)
        yield primary, replica
    finally:
        replica.stop()
        primary.stop()


@pytest.fixture(scope="module")
def alone() -> Iterator[Node]:
    """A primary without a replica: WAIT 1 never gets its acknowledgement."""
    node = Node()
    try:
        yield node
    finally:
        node.stop()


def _sync(url: str, n: int, timeout_ms: int) -> tuple[Any, Any]:
    acks = ReplicaAcks(redis.Redis.from_url(url), n, timeout_ms)
    return acks, acks.confirm


def _async(url: str, n: int, timeout_ms: int) -> tuple[Any, Any]:
    import redis.asyncio as aioredis

    acks = AsyncReplicaAcks(aioredis.Redis.from_url(url), n, timeout_ms)

    def confirm(keys: list[str]) -> None:
        async def main() -> None:
            try:
                await acks.confirm(keys)
            finally:
                await acks.client.aclose()

        asyncio.run(main())

    return acks, confirm


WAITERS = [pytest.param(_sync, id="sync"), pytest.param(_async, id="asyncio")]
KEYS = ["sk:{b3}:m:x:events", "sk:{b3}:m:y:events", "sk:{ledger}:settled", b"sk:{lobby}:seq"]


@pytest.mark.parametrize("make", WAITERS)
def test_n_zero_sends_nothing(make, alone):
    acks, confirm = make(alone.url, 0, 50)
    before = alone.client().dbsize()
    confirm(KEYS)
    assert acks.waits == 0 and alone.client().dbsize() == before


@pytest.mark.parametrize("make", WAITERS)
def test_one_wait_per_hash_tag_and_the_replica_holds_the_writes(make, pair):
    primary, replica = pair
    marker = marker_key("sk:{b3}:m:x:events")
    before = int(primary.client().get(marker) or 0)
    primary.client().set("sk:{b3}:written-before", "1")  # another connection's write, before the wait
    acks, confirm = make(primary.url, 1, 2_000)
    confirm(KEYS)
    assert acks.waits == 3  # {b3}, {ledger}, {lobby}: one INCR + WAIT each
    assert int(primary.client().get(marker)) == before + 1
    # WAIT returned: the replica has the marker and every write the primary made before it
    assert int(replica.client().get(marker)) == before + 1
    assert replica.client().get("sk:{b3}:written-before") == b"1"


@pytest.mark.parametrize("make", WAITERS)
def test_too_few_replicas_is_a_transient_noreplicas(make, alone):
    _acks, confirm = make(alone.url, 1, 50)
    with pytest.raises(redis.ResponseError) as err:
        confirm(["sk:{lobby}:seq"])
    assert str(err.value).startswith("NOREPLICAS 0 of 1 replica(s) acknowledged {lobby}")
    assert is_transient(err.value)  # the command stays pending and is redelivered


@pytest.mark.parametrize("make", WAITERS)
def test_a_negative_count_is_refused(make, alone):
    with pytest.raises(ValueError, match="0 or more"):
        make(alone.url, -1, 50)


@pytest.mark.parametrize("value, message", [
    ("x", "SK_REPLICA_ACKS must be a whole number, got 'x'"),
    ("-2", "SK_REPLICA_ACKS must be 0 or more, got -2"),
])
def test_the_gateway_refuses_a_bad_sk_replica_acks(value, message, tmp_path, alone):
    secret = tmp_path / "secret"
    secret.write_text("s" * 40)
    env = {**dict(__import__("os").environ), "SK_REPLICA_ACKS": value}
    proc = subprocess.run([sys.executable, "-m", "shuangkou", "gateway", "--redis", alone.url,
                           "--secret-file", str(secret), "--port", "0"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr and "Traceback" not in proc.stderr


def test_a_duplicate_found_through_a_refusal_waits_for_the_replicas(alone, pair):
    """Issue 35 §3: a retried CreateMatch is refused (the match exists) and then found stored:
    a ``duplicate``.  It is answered only once the original write is on the replicas -- without
    one in time it is a transient NOREPLICAS (redelivered), never a duplicate reply."""
    import random

    from engine.config import load_config
    from engine.match.commands import CreateMatch
    from engine.service.service import MatchService
    from engine.store.redis_store import RedisEventStore

    cfg = load_config("points").to_record()
    create = CreateMatch(match_id="acks-dup", command_id="acks-dup-create", config=cfg)
    for node, answered in ((alone, False), (pair[0], True)):
        first = MatchService(RedisEventStore(node.client()), lambda: 1_000, random.Random(0))
        assert first.execute(create).rejection is None  # written, no wait (as a master cut off would)
        store = RedisEventStore(node.client())
        store.replica_acks = ReplicaAcks(store.client, 1, 2_000 if answered else 200)  # a replica answers within 2 s
        retry = MatchService(store, lambda: 2_000, random.Random(0))
        if answered:
            outcome = retry.execute(create)
            assert outcome.duplicate and store.replica_acks.waits == 1
            from engine.store import keys

            assert pair[1].client().exists(keys.events_key("acks-dup", store.bucket_of("acks-dup"))) == 1
        else:
            with pytest.raises(redis.ResponseError, match="^NOREPLICAS 0 of 1") as err:
                retry.execute(create)
            assert is_transient(err.value)


def test_the_default_on_a_single_node_is_zero_and_an_explicit_value_wins(pair, alone, monkeypatch):
    """Issue 35 §3: without a flag or SK_REPLICA_ACKS a single node (with or without a replica
    of its own: no Cluster, no CLUSTER SHARDS) waits for nobody; the Cluster's case runs in
    tests/test_cluster_replica_acks.py."""
    from engine.store.replicas import replicas_per_master, resolve_replica_acks

    for node in (alone, pair[0]):
        client = node.client()
        assert replicas_per_master(client) is None
        assert resolve_replica_acks(client) == (0, "a single node: no replica to wait for")
        assert resolve_replica_acks(client, 2) == (2, "--replica-acks")
        assert resolve_replica_acks(client, None, " 1 ") == (1, "SK_REPLICA_ACKS")
    with pytest.raises(ValueError, match="SK_REPLICA_ACKS must be a whole number"):
        resolve_replica_acks(None, None, "one")


def test_the_value_in_force_is_a_gauge():
    from projections import metrics

    metrics.set_replica_acks(1)
    assert "shuangkou_replica_acks" in metrics.exposed_names()
    assert metrics.REGISTRY.get_sample_value("shuangkou_replica_acks") == 1
    metrics.set_replica_acks(0)
    assert metrics.REGISTRY.get_sample_value("shuangkou_replica_acks") == 0


def test_serve_logs_and_exports_the_replica_acks_in_force(alone, tmp_path):
    """serve on a single node: ``replica acks 0 (a single node ...)`` in its log at start, and
    ``shuangkou_replica_acks 0`` on /metrics; ``--replica-acks 1`` is logged as the flag's."""
    import os
    import urllib.request

    from tests.processes import wait_for

    for extra, line, value in (([], "replica acks 0 (a single node: no replica to wait for)", 0.0),
                               (["--replica-acks", "1"], "replica acks 1 (--replica-acks)", 1.0)):
        out, err = tmp_path / f"serve{value}.out", tmp_path / f"serve{value}.err"
        env = {k: v for k, v in os.environ.items() if k != "SK_REPLICA_ACKS"}
        with open(out, "wb") as fo, open(err, "wb") as fe:
            proc = subprocess.Popen([sys.executable, "-m", "shuangkou", "serve", "--redis", alone.url,
                                     "--metrics-port", "0", "--no-projections", *extra],
                                    cwd=ROOT, env=env, stdout=fo, stderr=fe)
            try:
                wait_for(lambda: "ready consumer" in out.read_text() or proc.poll() is not None, 60,
                         "serve did not start", (err,))
                assert proc.poll() is None, err.read_text()[-2000:]
                assert line in err.read_text()
                port = next(int(x.split()[1]) for x in out.read_text().splitlines() if x.startswith("metrics-port"))
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
                assert f"shuangkou_replica_acks {value}" in body
            finally:
                proc.terminate()
                proc.wait(timeout=30)


def test_a_duplicate_operator_entry_waits_for_the_replicas(alone):
    """Issue 35 §3: a Credit retried after its first answer was lost is answered ``duplicate``
    only once the booked entry is on the replicas; without one in time, NOREPLICAS."""
    from projections.ledger import ENTRY_APPLIED, LedgerEntry, RedisLedger

    entry = LedgerEntry("credit", "acks-ledger-p", "wealth", 100, "acks-ledger-credit-1", 1, "test", "op")
    assert RedisLedger(alone.client()).record_entry(entry) == ENTRY_APPLIED  # booked, no wait
    ledger = RedisLedger(alone.client())
    ledger.replica_acks = ReplicaAcks(ledger.client, 1, 100)
    with pytest.raises(redis.ResponseError, match="^NOREPLICAS 0 of 1"):
        ledger.record_entry(entry)


def test_concurrent_asyncio_waits_share_rounds(pair, alone):
    """Issue 35 §3: callers of one hash tag that wait at the same time share one INCR + WAIT
    (the round's INCR comes after each of their writes): one WAIT out per tag, not one per
    caller holding a connection each.  Too few replicas: every caller gets NOREPLICAS."""
    import redis.asyncio as aioredis

    async def many(url: str, n: int, timeout_ms: int) -> tuple[list[Any], int]:
        client = aioredis.Redis.from_url(url)
        acks = AsyncReplicaAcks(client, 1, timeout_ms)
        try:
            for k in range(n):  # each caller's own write first, then its wait
                await client.set(f"sk:{{lobby}}:round-{k}", k)
            out = await asyncio.gather(*(acks.confirm(["sk:{lobby}:seq"]) for _ in range(n)),
                                       return_exceptions=True)
            return out, acks.waits
        finally:
            await client.aclose()

    primary, replica = pair
    out, waits = asyncio.run(many(primary.url, 20, 2_000))  # a replica answers within 2 s
    assert out == [None] * 20 and 1 <= waits <= 2, (out, waits)
    assert replica.client().get("sk:{lobby}:round-19") == b"19"  # the replica had every caller's write
    out, waits = asyncio.run(many(alone.url, 20, 200))
    assert all(isinstance(x, redis.ResponseError) and str(x).startswith("NOREPLICAS 0 of 1") for x in out), out
    assert waits <= 2


class _MovedNode:
    """A Cluster node that answers the INCR + WAIT round with MOVED (its slot failed over)."""

    def pipeline(self, transaction: bool = False) -> Any:
        return self

    def execute_command(self, *args: Any) -> None:
        pass

    def execute(self) -> None:
        raise redis.exceptions.MovedError("3999 127.0.0.1:7001")

    async def execute_pipeline(self, commands: list[Any]) -> None:
        for c in commands:
            c.result = redis.exceptions.MovedError("3999 127.0.0.1:7001")


def _moved_cluster(cls: type, learned: list[str]) -> Any:
    """A ``cls`` (redis-py's Cluster client) whose every node answers MOVED; ``learned`` records
    each topology refresh."""
    node = _MovedNode()

    async def known() -> None:  # the client's own initialize: a no-op once the slots are known
        pass

    async def initialize() -> None:
        learned.append("initialize")

    def initialize_sync() -> None:
        learned.append("initialize")

    manager = type("NodesManager", (), {"initialize": staticmethod(
        initialize if cls.__module__.startswith("redis.asyncio") else initialize_sync)})()
    # never built, so nothing to close: redis-py's __del__ would fail on what it lacks
    client = object.__new__(type(cls.__name__, (cls,), {"__del__": lambda self: None}))
    for name, value in (("get_node_from_key", lambda key: node), ("get_redis_connection", lambda n: n),
                        ("initialize", known), ("nodes_manager", manager)):
        setattr(client, name, value)
    return client


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "asyncio"])
def test_a_moved_slot_makes_the_waiter_learn_the_topology_again(asynchronous):
    """A MOVED answer (redis-py's MovedError, whose text has no MOVED prefix) refreshes the slots
    before it is raised, so the next round goes to the promoted node."""
    from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
    from redis.cluster import RedisCluster

    learned: list[str] = []
    if asynchronous:
        acks: Any = AsyncReplicaAcks(_moved_cluster(AsyncRedisCluster, learned), 1, 100)
        with pytest.raises(redis.exceptions.MovedError):
            asyncio.run(acks.confirm(["sk:{b3}:m:x:events"]))
    else:
        acks = ReplicaAcks(_moved_cluster(RedisCluster, learned), 1, 100)
        with pytest.raises(redis.exceptions.MovedError):
            acks.confirm(["sk:{b3}:m:x:events"])
    assert learned == ["initialize"]
