"""The event store on a real Redis Cluster (three masters on loopback): every key of
an append shares the bucket hash tag, so the Lua append works across the cluster;
matches are played, replayed and settled, and the ledger projection follows the feeds."""

from __future__ import annotations

import random
import shutil
from typing import Any

import pytest
import redis

pytestmark = pytest.mark.redis


@pytest.fixture(scope="module")
def local_cluster():
    """Three masters and three replicas on loopback (tests/cluster_support.py)."""
    from tests.cluster_support import require_redis_binaries, start_cluster

    require_redis_binaries()
    c = start_cluster(masters=3, replicas=1)
    yield c
    c.stop()


@pytest.fixture(scope="module")
def cluster(local_cluster):
    """A redis-py Cluster client, from the shared factory (engine/store/connect.py)."""
    from engine.store.connect import connect

    client = connect(local_cluster.url)
    yield client
    client.close()


def test_cluster_has_three_masters(cluster):
    masters = [n for n in cluster.get_nodes() if n.server_type == "primary"]
    assert len(masters) == 3


def test_matches_on_redis_cluster_replay_and_settle(cluster):
    from engine.tools.bot import Bot, choose_for
    from engine.match.commands import CreateMatch, Escape, Pass, Play, Ready, Sit
    from engine.config import load_config
    from engine.match.replay import check_stream, replay
    from engine.service.service import FixedBalances, MatchService
    from engine.store import keys
    from engine.store.redis_store import RedisEventStore
    from projections.ledger import RedisLedger
    from projections.runner import ProjectionRunner, RedisFeed
    from projections.settlement import settle
    from workers.clock import FakeClock

    store = RedisEventStore(cluster)
    # an append carries only the streams its match's node holds (tests/test_cluster_packed.py)
    assert store.can_carry(cluster)
    clock = FakeClock()
    service = MatchService(store, clock, random.Random(42), snapshot_every=20,
                           balances=FixedBalances({"a": 5000, "b": 5000}))
    bot = Bot("greedy", random.Random(1))
    cfg = load_config("wealth").to_record()
    ids = [f"cl-{i}-{random.random():.6f}" for i in range(12)]
    # the matches spread over the cluster's three nodes
    nodes = {cluster.get_node_from_key(keys.events_key(m, store.bucket_of(m))).name for m in ids}
    assert len(nodes) >= 2

    for n, mid in enumerate(ids):
        k = 0

        def run(cmd_cls, **kw):
            nonlocal k
            k += 1
            out = service.execute(cmd_cls(command_id=f"{mid}:{k}", match_id=mid, **kw))
            assert out.rejection is None, out.rejection
            return out

        run(CreateMatch, config=cfg)
        run(Sit, player="a")
        run(Sit, player="b")
        run(Ready, player="a")
        st = run(Ready, player="b").state
        if n == 0:
            st = run(Escape, player="a").state
        while st.phase != "finished":
            p = st.current_player
            play = choose_for(bot, st, p)
            st = (run(Pass, player=p) if play is None else run(Play, player=p, cards=play.cards)).state
        # an idempotent retry on the cluster: the same command id appends nothing
        again = service.execute(CreateMatch(command_id=f"{mid}:1", match_id=mid, config=cfg))
        assert again.duplicate

    ledger = RedisLedger(cluster)
    runner = ProjectionRunner(store, ledger, RedisFeed(cluster, consumer="cluster-test"))
    runner.drain()
    assert runner.errors == []
    for mid in ids:
        events = store.load(mid)
        assert check_stream(events) == []
        assert replay(events).phase == "finished"
        assert store.version(mid) == len(events)
        s = settle(events)
        assert s is not None and sum(s.scores.values()) + s.burned == 0
        booked = ledger.settlement(mid)
        assert booked is not None and booked.scores == s.scores
    assert set(ids) <= set(store.match_ids())


def test_the_factory_detects_the_cluster_from_any_node(local_cluster):
    """§1: cluster_enabled:1 in INFO cluster gives redis-py's RedisCluster, from any node, no flag."""
    from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
    from redis.cluster import RedisCluster

    from engine.store.connect import connect, connect_async, is_cluster, probe

    for port in local_cluster.ports:
        url = f"redis://127.0.0.1:{port}/0"
        assert probe(url)
        client = connect(url)
        try:
            assert isinstance(client, RedisCluster) and is_cluster(client)
            assert len([n for n in client.get_nodes() if n.server_type == "primary"]) == 3
        finally:
            client.close()
    assert isinstance(connect_async(local_cluster.url), AsyncRedisCluster)


def test_a_cluster_node_url_with_a_database_other_than_0_says_so_in_one_line(local_cluster):
    """A Cluster has database 0 only: the line names that, not "does not answer as a Redis server"."""
    from engine.store.connect import RedisUnavailable, connect

    with pytest.raises(RedisUnavailable) as info:
        connect(f"redis://127.0.0.1:{local_cluster.ports[0]}/3")
    assert "Redis Cluster node" in str(info.value) and "/0" in str(info.value)
    assert "\n" not in str(info.value)


def test_cli_commands_run_on_a_cluster_node(local_cluster, tmp_path):
    """§1: the read-only dispute commands take a cluster node as --redis (no MovedError traceback)."""
    import json
    import subprocess
    import sys

    from tests.cluster_support import env_without_redis

    env = env_without_redis()
    for argv in (["matches", "--json"], ["replay", "--all", "--json"], ["reconcile", "--json"]):
        out = subprocess.run([sys.executable, "-m", "shuangkou", *argv, "--redis", local_cluster.url],
                             capture_output=True, text=True, timeout=120, env=env)
        assert out.returncode == 0, (argv, out.stdout, out.stderr)
        assert "Traceback" not in out.stderr and "MovedError" not in out.stderr
        json.loads(out.stdout or "null")


def test_replicas_synced_at_once_each_hold_their_own_masters_data():
    """The test cluster itself (tests/cluster_support.py): every replica of a fresh cluster, and
    every replica restarted at the same moment (each does a full sync), holds exactly its own
    master's keys.  With one ``dump.rdb`` shared by the nodes, replicas syncing at once loaded
    each other's RDB: the fail-over test then met a promoted replica missing a stream's head."""
    import time

    from engine.store.connect import connect
    from tests.cluster_support import start_cluster

    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        pytest.fail("the cluster test needs redis-server and redis-cli (apt-get install redis-server)", pytrace=False)
    c = start_cluster(masters=3, replicas=1)
    try:
        files = {p: c.node(p).config_get("dbfilename")["dbfilename"] for p in c.ports}
        assert len(set(files.values())) == len(c.ports), f"nodes sharing an RDB file in one dir: {files}"
        client = connect(c.url)
        for b in range(16):  # a few MB a master: loading its RDB takes a while, so the syncs overlap
            client.set(f"sk:{{b{b}}}:probe", b)
            client.xadd(f"sk:{{b{b}}}:stream", {"e": b"x" * 200_000})
            client.execute_command("SETRANGE", f"sk:{{b{b}}}:blob", 4_000_000, b"x")

        def pairs() -> list[tuple[int, int]]:
            return [(m, r) for m in c.masters() for r in c.online_replicas(m)]

        def same_keys() -> list[tuple[int, int, list[bytes], list[bytes]]]:
            out = []
            for m, r in pairs():
                mk, rk = set(c.node(m).keys("*")), set(c.node(r).keys("*"))
                if mk != rk:
                    out.append((m, r, sorted(mk - rk), sorted(rk - mk)))
            return out

        def in_sync() -> None:
            """Three replicas online, each with its master's keys (a loading one may lag: polled)."""
            end = time.monotonic() + 30
            while not (len(pairs()) == 3 and not same_keys()) and time.monotonic() < end:
                time.sleep(0.1)
            assert len(pairs()) == 3, pairs()
            assert same_keys() == []

        in_sync()
        replicas = [r for _m, r in pairs()]
        for m, _r in pairs():  # the masters serve the coming syncs together, as at a cluster's creation
            c.node(m).config_set("repl-diskless-sync-delay", 2)
        for r in replicas:
            c.kill(r)
        c.restart(*replicas)  # back at once: three full syncs side by side
        in_sync()
        client.close()
    finally:
        c.stop()


def test_the_bucket_leases_are_renewed_with_one_pipeline_per_node(cluster, monkeypatch):
    """Issue 38: a tick's lease renewals go one pipeline per master (the owner keys of 16
    buckets spread over 3 nodes), not one call per bucket; each bucket's answer its own."""
    from redis.connection import Connection

    from engine.service.ownership import BucketOwner
    from engine.store import keys

    class Work:
        def stop(self):
            pass

    owner = BucketOwner(cluster, "lease-test", lambda b: Work(), buckets=16, ttl_ms=4000, tick_ms=500)
    try:
        assert owner.tick() == set(range(16))  # acquired (the script loaded on each node)
        nodes = {cluster.get_node_from_key(keys.owner_key(b)).name for b in range(16)}
        assert len(nodes) == 3
        sent = [0]
        original = Connection.send_packed_command

        def counted(self, command, check_health=True):
            sent[0] += 1
            return original(self, command, check_health)

        monkeypatch.setattr(Connection, "send_packed_command", counted)
        for b in range(16):
            cluster.pexpire(keys.owner_key(b), 200)
        sent[0] = 0
        assert owner.tick() == set(range(16))
        assert sent[0] == 1 + len(nodes)  # the registry's pipeline, one pipeline per node
        assert all(cluster.pttl(keys.owner_key(b)) > 1000 for b in range(16))
    finally:
        owner.release_all()
    assert not any(cluster.exists(keys.owner_key(b)) for b in range(16))


def test_the_update_fence_runs_through_a_cluster_pipeline(cluster) -> None:
    """A player's updates go through engine/store/publish.lua in the publisher's one write,
    split by node: each player's stream and fence on its own node; an update below the
    stream's version of its match is refused there (issue 35 §2), on every node."""
    from engine.service.publish import Publisher, Stale
    from engine.store import keys

    players = [f"fence{i}" for i in range(12)]
    assert len({cluster.get_node_from_key(keys.outbox_key(p)).name for p in players}) > 1  # several nodes
    pub = Publisher(cluster, consumer="s1")

    def update(p: str, v: int) -> Any:
        return pub._delivery(keys.outbox_key(p), {"kind": "update", "match": "mf", "command_id": f"c{v}",
                                                  "version": v, "body": b""}, v)

    first = pub.write([update(p, 7) for p in players] + [pub._delivery("sk:reply:fence", {"kind": "accepted"})])
    assert not any(isinstance(x, (Stale, Exception)) for x in first)
    assert pub.write([update(p, 3) for p in players], raise_on_error=False) == [Stale(7)] * len(players)
    for p in players:
        assert [int(f[b"version"]) for _i, f in cluster.xrange(keys.outbox_key(p))] == [7]


def test_a_node_whose_reply_was_lost_is_sent_its_updates_again_and_writes_each_once(cluster, monkeypatch) -> None:
    """A node ran a round's commands and the reply never came back (its connection failed
    while the replies were read): ``wire.by_node`` sends that node's commands again through
    the Cluster client's pipeline.  Each update is on its player's stream once, the second
    copy refused at its own version; before, publish.lua refused only a lower version."""
    from engine.service.publish import Publisher, Stale
    from engine.store import keys, wire

    players = [f"resent{i}" for i in range(12)]
    node_of = {p: cluster.get_node_from_key(keys.outbox_key(p)).name for p in players}
    lost_node = node_of[players[0]]
    lost = [p for p in players if node_of[p] == lost_node]
    assert len(lost) < len(players)  # the other nodes' replies arrive
    real = wire.round_trips
    dropped: list[int] = []

    def reply_lost(calls: Any, rider: Any = None) -> Any:
        out = real(calls, rider)
        for i, (client, _commands) in enumerate(calls):
            if not dropped and client.connection_pool.connection_kwargs["port"] == int(lost_node.rpartition(":")[2]):
                dropped.append(i)
                out[i] = redis.exceptions.ConnectionError("the reply was lost after the node ran the commands")
        return out

    monkeypatch.setattr(wire, "round_trips", reply_lost)
    pub = Publisher(cluster, consumer="s1")
    replies = pub.write([pub._delivery(keys.outbox_key(p), {"kind": "update", "match": "mr", "command_id": "c5",
                                                            "version": 5, "body": b""}, 5) for p in players],
                        raise_on_error=False)
    assert dropped  # the lost node's commands went again
    assert [p for p, x in zip(players, replies) if x == Stale(5)] == lost
    assert not any(isinstance(x, Exception) for x in replies)
    for p in players:
        assert [int(f[b"version"]) for _i, f in cluster.xrange(keys.outbox_key(p))] == [5]


def test_a_cluster_pipeline_of_scripts_asks_no_node_for_their_keys(cluster) -> None:
    """A Cluster pipeline resolves each command's slot through the client's command parser;
    for a script call (EVAL / EVALSHA: "movable keys") redis-py would send ``COMMAND GETKEYS``
    to a node first, one round trip per call.  engine.store.connect reads the keys off the
    arguments instead: the pipeline of fenced updates and XREADGROUPs costs no GETKEYS."""
    from engine.service.publish import Publisher
    from engine.store import keys

    def getkeys() -> int:
        total = 0
        for node in cluster.get_primaries():
            stats = cluster.get_redis_connection(node).info("commandstats")
            total += int(stats.get("cmdstat_command|getkeys", {}).get("calls", 0))
        return total

    pub = Publisher(cluster, consumer="s1")
    players = [f"gk{i}" for i in range(12)]
    before = getkeys()
    pub.write([pub._delivery(keys.outbox_key(p), {"kind": "update", "match": "mg", "command_id": "c1",
                                                  "version": 1, "body": b""}, 1) for p in players])
    pipe = cluster.pipeline(transaction=False)
    for p in players:
        pipe.execute_command("EVALSHA", "0" * 40, 1, keys.outbox_key(p))
        pipe.xread({keys.outbox_key(p): "0"}, count=1)
    replies = pipe.execute(raise_on_error=False)
    assert all(isinstance(r, redis.exceptions.NoScriptError) for r in replies[::2])
    assert [len(r[0][1]) for r in replies[1::2]] == [1] * len(players)
    assert getkeys() == before


def test_the_gateways_cluster_client_asks_no_node_for_stream_or_script_keys(cluster, local_cluster) -> None:
    """The gateway's asyncio Cluster client (gateway/gated.py, built by gateway/app.py, not by
    engine.store.connect) reads the keys of its XREADs (the lobby's replies, the fan-out),
    XREADGROUPs and script calls off their arguments too: none costs a COMMAND GETKEYS."""
    import asyncio

    from engine.store import keys
    from gateway.gated import GatedCluster

    def getkeys() -> int:
        return sum(int(cluster.get_redis_connection(node).info("commandstats")
                       .get("cmdstat_command|getkeys", {}).get("calls", 0)) for node in cluster.get_primaries())

    streams = [keys.outbox_key(f"gw{i}") for i in range(6)]
    for s in streams:
        cluster.xadd(s, {"kind": "update"})

    async def main() -> list[Any]:
        client = GatedCluster.from_url(local_cluster.url, max_connections=8)
        try:
            await client.initialize()
            before = getkeys()
            got = [await client.xread({s: "0"}, count=1, block=10) for s in streams]
            got.append(await client.execute_command("EVAL", "return KEYS[1]", 1, streams[0]))
            pipe = client.pipeline(transaction=False)
            for s in streams:
                pipe.xread({s: "0"}, count=1)
            got += await pipe.execute()
            return [getkeys() - before, got]
        finally:
            await client.aclose()

    asked, got = asyncio.run(main())
    assert asked == 0
    assert all(r and len(r[0][1]) == 1 for r in got[:6] + got[7:]) and got[6] == streams[0].encode()


def test_an_inbox_read_goes_to_its_slots_node_and_a_moved_slot_is_found_again(cluster) -> None:
    """A consumer reads its stream (with the last read's XACKs) on the plain connection of the
    node serving the stream's slot, not through redis-py's Cluster pipeline; when that node
    answers MOVED (a fail-over, a resharding) the read fails as a transient error, the
    acknowledgements stay unsent, and the next read asks the Cluster and goes to the right node."""
    from redis.cluster import RedisCluster
    from redis.exceptions import MovedError

    from engine.service.inbox import InboxConsumer
    from engine.store import keys
    from engine.store.redis_errors import is_transient

    stream = "sk:{nodetest}:inbox"
    c = InboxConsumer(cluster, None, "node-test", stream=stream)
    c._backlog = False
    cluster.xadd(stream, {"x": "1"})
    node = cluster.get_node_from_key(stream)
    client = c._slot_client()
    assert isinstance(client, redis.Redis) and not isinstance(client, RedisCluster)
    assert client.connection_pool.connection_kwargs["port"] == node.port
    got = c._xreadgroup(">", None, 10)
    assert [f[b"x"] for _i, f in got] == [b"1"]
    c._unsent_acks.append(got[0][0])
    other = next(n for n in cluster.get_primaries() if n.name != node.name)
    c._node = cluster.get_redis_connection(other)  # a stale view: the slot is served elsewhere
    cluster.xadd(stream, {"x": "2"})
    with pytest.raises(MovedError) as moved:
        c._xreadgroup(">", None, 10)
    assert is_transient(moved.value)
    assert c._node is None and len(c._unsent_acks) == 1  # nothing acknowledged on the wrong node
    got = c._xreadgroup(">", None, 10)
    assert [f[b"x"] for _i, f in got] == [b"2"] and c._unsent_acks == []
    assert int(cluster.xpending(stream, keys.SERVICE_GROUP)["pending"]) == 1  # the second, not yet acknowledged
