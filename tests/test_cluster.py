"""The event store on a real Redis Cluster (three masters on loopback): every key of
an append shares the bucket hash tag, so the Lua append works across the cluster;
matches are played, replayed and settled, and the ledger projection follows the feeds."""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

pytestmark = pytest.mark.redis


def _free_ports(n: int) -> list[int]:
    """n free ports whose cluster bus ports (+10000) are free too."""
    ports: list[int] = []
    while len(ports) < n:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        if p + 10000 > 65535 or p in ports:
            continue
        try:
            with socket.socket() as s2:
                s2.bind(("127.0.0.1", p + 10000))
        except OSError:
            continue
        ports.append(p)
    return ports


@pytest.fixture(scope="module")
def cluster():
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        msg = ("the cluster test needs redis-server and redis-cli (apt-get install redis-server); "
               "set SK_ALLOW_NO_REDIS=1 to skip it instead")
        if os.environ.get("SK_ALLOW_NO_REDIS") != "1":
            pytest.fail(msg, pytrace=False)
        pytest.skip(msg)
    import redis
    from redis.cluster import ClusterNode, RedisCluster

    for attempt in range(3):
        workdir = tempfile.mkdtemp(prefix="sk-cluster-")
        ports = _free_ports(3)
        procs = []
        for p in ports:
            procs.append(subprocess.Popen(
                ["redis-server", "--port", str(p), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
                 "--cluster-config-file", f"nodes-{p}.conf", "--cluster-node-timeout", "5000",
                 "--save", "", "--appendonly", "no", "--dir", workdir],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        try:
            for p in ports:
                end = time.monotonic() + 10
                while True:
                    try:
                        redis.Redis(port=p).ping()
                        break
                    except redis.ConnectionError:
                        if time.monotonic() > end:
                            raise
                        time.sleep(0.05)
            out = subprocess.run(["redis-cli", "--cluster", "create", *[f"127.0.0.1:{p}" for p in ports],
                                  "--cluster-replicas", "0", "--cluster-yes"],
                                 capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, out.stdout + out.stderr
            end = time.monotonic() + 20
            while True:
                infos = [redis.Redis(port=p).cluster("info") for p in ports]
                if all(i.get("cluster_state") == "ok" for i in infos):
                    break
                assert time.monotonic() < end, infos
                time.sleep(0.1)
            client = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", p) for p in ports])
            yield client
            client.close()
            return
        except (OSError, redis.ConnectionError):
            if attempt == 2:
                raise
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
            shutil.rmtree(workdir, ignore_errors=True)


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
    # an append never carries the publication on a cluster: those streams live in other slots
    assert not store.can_carry(cluster)
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
