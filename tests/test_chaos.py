"""Issue 11 §10: the chaos test and the OOM-episode test (they stay in CI).

Chaos: a redis-server of our own with AOF ``appendfsync always`` (its own port and
``--dir``), two ``shuangkou serve`` processes, two dramatiq worker processes,
~60 concurrent matches with active, idle, disconnecting and escaping players.
Every few seconds a serve or worker process is SIGKILLed (and started again under
the same consumer name), and the store Redis once (restarted on the same port and
dir: the AOF brings everything back).  The audit: every match finished; no
sequence gaps and no event of a command applied twice; exactly one settlement per
match, equal to the one recomputed from the events; the ledger equals the sum of
the settlements (zero-sum for points); every player received the final update;
no consumer left with pending entries.

OOM episode: maxmemory is set below what Redis uses right after a command was
appended (so its publish is refused with OOM), then lifted: the command is not
dead-lettered and its update reaches both players.

Only processes this module started are stopped, by PID (their process groups).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import msgpack
import pytest

from engine.store import keys

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.redis]

N_MATCHES = 60
CHAOS_BUDGET_S = 120  # every loop below is bounded by this (or a smaller) budget


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class OwnRedis:
    """A redis-server on its own loopback port and dir, AOF ``always``; restartable in place."""

    def __init__(self, workdir: Path):
        self.binary = shutil.which("redis-server")
        if self.binary is None:
            pytest.fail("redis-server is needed for the chaos test", pytrace=False)
        self.dir = workdir
        self.port = _free_port()
        self.proc: subprocess.Popen | None = None
        self.log = open(workdir / "redis.log", "ab")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def db_url(self, n: int) -> str:
        return f"redis://127.0.0.1:{self.port}/{n}"

    def start(self) -> None:
        import redis

        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir),
             "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no",
             "--maxmemory-policy", "noeviction", "--loglevel", "warning"],
            stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        end = time.monotonic() + 20
        while time.monotonic() < end:
            assert self.proc.poll() is None, "redis-server exited"
            try:
                with redis.Redis.from_url(self.url, socket_connect_timeout=0.2) as c:
                    if c.ping():
                        return
            except redis.RedisError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not answer PING")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()


class Proc:
    """A child process in its own process group (SIGKILL reaches its children too)."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], log: Path):
        self.name, self.argv, self.env, self.log_path = name, argv, env, log
        self.proc: subprocess.Popen | None = None
        self.kills = 0

    def start(self) -> None:
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.argv, cwd=ROOT, env=self.env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.proc.wait(10)
            self.kills += 1
        self.log.close()

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(15)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # stragglers of our own group only
        except ProcessLookupError:
            pass
        self.proc.wait(10)
        if not self.log.closed:
            self.log.close()

    def tail(self) -> str:
        return self.log_path.read_text(errors="replace")[-3000:] if self.log_path.exists() else ""


def _updates(client, player: str) -> list[dict]:
    out = []
    for _id, fields in client.xrange(keys.outbox_key(player)):
        f = {k.decode(): v for k, v in fields.items()}
        if f.get("kind") == b"update":
            body = msgpack.unpackb(f["body"], raw=False, strict_map_key=False)
            body.setdefault("command_id", f.get("command_id", b"").decode())  # a compact update: the entry says it
            out.append({"match": f.get("match", b"").decode(), "version": int(f.get("version", b"0")),
                        "body": body})
    return out


def _final_update_received(client, mid: str, player: str, final_version: int) -> bool:
    return any(u["match"] == mid and u["version"] >= final_version for u in _updates(client, player))


def _audit_stream(events) -> None:
    from engine.match.events import MatchFinished
    from engine.match.replay import check_stream

    assert [e.seq for e in events] == list(range(1, len(events) + 1)), "sequence gap"
    assert check_stream(events) == [], check_stream(events)
    assert isinstance(events[-1], MatchFinished)
    runs: dict[str, list[int]] = {}
    for e in events:
        runs.setdefault(e.command_id, []).append(e.seq)
    for cid, seqs in runs.items():  # one command id -> one contiguous run: never applied twice
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), f"{cid} applied twice: {seqs}"


@pytest.mark.slow
@pytest.mark.worker
def test_chaos_sigkill_serve_workers_and_the_store(tmp_path):
    import redis

    from engine.config import load_config
    from engine.service.client import GatewayClient
    from engine.service.service import MatchService
    from engine.service.state_cache import StateCache
    from engine.store.redis_store import RedisEventStore
    from engine.tools.bot import Bot, choose_for
    from projections.ledger import RedisLedger
    from projections.settlement import settle

    t_start = time.monotonic()
    rs = OwnRedis(tmp_path)
    rs.start()
    store_url, broker_url = rs.db_url(0), rs.db_url(1)
    env = dict(os.environ, SK_REDIS_URL=store_url, SK_BROKER_URL=broker_url, PYTHONUNBUFFERED="1",
               SK_SWEEP_INTERVAL_MS="200", SK_SWEEP_GRACE_MS="500",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    serves = [Proc(f"serve-{i}", [sys.executable, "-m", "shuangkou", "serve", "--redis", store_url,
                                  "--broker-url", broker_url, "--consumer", f"chaos-{i}",
                                  "--reconcile-every", "5"], env, tmp_path / f"serve-{i}.log")
              for i in range(2)]
    workers = [Proc(f"worker-{i}", [sys.executable, "-m", "dramatiq", "workers.actors", "-p", "1", "-t", "2"],
                    env, tmp_path / f"worker-{i}.log") for i in range(2)]
    procs = serves + workers
    stats: Counter = Counter()
    try:
        for p in procs:
            p.start()
        client = redis.Redis.from_url(store_url, socket_timeout=5, socket_connect_timeout=1)
        end = time.monotonic() + 60
        while not all("ready consumer=" in s.tail() for s in serves):
            assert time.monotonic() < end, "\n".join(s.tail() for s in serves)
            time.sleep(0.1)

        gw = GatewayClient(client)
        reader = MatchService(RedisEventStore(client), lambda: int(time.time() * 1000), random.Random(0),
                              state_cache=StateCache(1000))
        cfg = load_config("points").model_copy(update={"turn_seconds": 1.0, "trustee_delay_seconds": 0.1})
        bot = Bot("greedy", random.Random(5))
        mids = [f"chaos-{i:02}" for i in range(N_MATCHES)]
        kind = {m: ("active", "idle", "disconnect", "escape")[i % 4] for i, m in enumerate(mids)}
        players = {m: (f"{m}-a", f"{m}-b") for m in mids}

        def phase(m: str) -> str:
            return reader.load_state(m).phase

        def wait_all(cond, what: str, budget: float = 60) -> None:
            end = time.monotonic() + budget
            left = list(mids)
            while left:
                left = [m for m in left if not cond(m)]
                assert time.monotonic() < end, f"{what}: {left[:5]}…"
                if left:
                    time.sleep(0.1)

        # setup without faults: each step waits for the previous one (two channels)
        for m in mids:
            gw.create_match(m, cfg.to_record())
        wait_all(lambda m: reader.load_state(m).version >= 1, "created")
        for m in mids:
            for p in players[m]:
                gw.sit(m, p)
        wait_all(lambda m: len([s for s in reader.load_state(m).seats if s]) == 2, "seated")
        for m in mids:
            for p in players[m]:
                gw.ready(m, p)
        wait_all(lambda m: phase(m) == "playing", "dealt")
        stats["setup_s"] = round(time.monotonic() - t_start, 1)

        # play under faults
        acted: dict[str, int] = {}
        turns: Counter = Counter()
        next_kill = time.monotonic() + 2.5
        kill_rng = random.Random(11)
        redis_killed = False
        deadline = time.monotonic() + CHAOS_BUDGET_S
        done: set[str] = set()
        # the faults keep coming until at least 5 process kills and the store kill have
        # happened, even when the matches finish sooner (recovery of the final updates and
        # settlements is audited too): a fast machine must not make the test easier
        while ((len(done) < len(mids) or stats["kills"] < 5 or not redis_killed)
               and time.monotonic() < deadline):
            now = time.monotonic()
            if now >= next_kill:
                if not redis_killed and stats["kills"] >= 3:
                    rs.kill()
                    stats["redis_kills"] += 1
                    time.sleep(1.0)
                    rs.start()
                    redis_killed = True
                else:
                    victim = kill_rng.choice(procs)
                    victim.kill()
                    stats["kills"] += 1
                    stats[f"kills_{victim.name.split('-')[0]}"] += 1
                    time.sleep(0.3)
                    victim.start()
                next_kill = time.monotonic() + kill_rng.uniform(2.0, 3.5)
            try:
                for m in mids:
                    if m in done:
                        continue
                    st = reader.load_state(m)
                    if st.phase == "finished":
                        done.add(m)
                        continue
                    if acted.get(m) == st.version or st.turn is None:
                        continue
                    a, b = players[m]
                    k = kind[m]
                    turns[m] += 1
                    if k == "idle":
                        continue
                    if k == "disconnect" and turns[m] == 3:
                        gw.disconnect(m, b)
                        stats["messages"] += 1
                    if k == "escape" and turns[m] == 6:
                        gw.escape(m, b)
                        stats["messages"] += 1
                        acted[m] = st.version
                        continue
                    seat = st.seat(st.turn)
                    if seat.trusteed or (k == "disconnect" and seat.player == b):
                        continue
                    if turns[m] % 9 == 0:  # let the clock run out now and then
                        acted[m] = st.version
                        continue
                    play = choose_for(bot, st, seat.player)
                    if play is None:
                        gw.pass_(m, seat.player)
                    else:
                        gw.play(m, seat.player, cards=play.cards)
                    stats["messages"] += 1
                    acted[m] = st.version
            except redis.RedisError:
                stats["driver_redis_errors"] += 1
                time.sleep(0.2)
            time.sleep(0.05)
        left = sorted(set(mids) - done)
        assert not left, f"not finished in {CHAOS_BUDGET_S}s: {left[:5]}\n" + "\n".join(
            f"--- {p.name}\n{p.tail()}" for p in procs)
        stats["play_s"] = round(time.monotonic() - t_start - stats["setup_s"], 1)

        # settle: the projections (and their reconciliation) catch up
        ledger = RedisLedger(client)
        end = time.monotonic() + 60
        while ledger.unsettled(mids) and time.monotonic() < end:
            time.sleep(0.2)
        assert not ledger.unsettled(mids), ledger.unsettled(mids)[:5]
        assert ledger.parked() == {}

        # the audit
        store = RedisEventStore(client)
        total: Counter = Counter()
        final_versions = {}
        for m in mids:
            events = store.load(m)
            _audit_stream(events)
            stats["events"] += len(events)
            final_versions[m] = events[-1].seq
            s = ledger.settlement(m)
            assert s is not None and s.scores == settle(events).scores, m
            for p, d in s.scores.items():
                total[p] += d
        for p, v in total.items():  # the ledger = the sum of the settlements …
            assert ledger.balance(p, "points") == v, p
        assert sum(total.values()) == 0  # … and zero-sum for points
        # every player received the final update (published by serve or by a worker)
        end = time.monotonic() + 30
        missing = [(m, p) for m in mids for p in players[m]]
        while missing and time.monotonic() < end:
            missing = [(m, p) for m, p in missing if not _final_update_received(client, m, p, final_versions[m])]
            if missing:
                time.sleep(0.5)
        assert not missing, missing[:5]
        # no wedged consumer: nothing pending on the command channels once the work is done
        end = time.monotonic() + 45
        pending = {}
        while time.monotonic() < end:
            from engine.service.channels import OPS, PLAYER

            pending = {s: client.xpending(s, "sk-service")["pending"] for s in PLAYER.streams() + OPS.streams()
                       if client.exists(s)}
            if not any(pending.values()):
                break
            time.sleep(0.5)
        assert not any(pending.values()), pending
        stats["dead_letters"] = client.xlen("sk:dead")
        stats["durable_bytes_per_match"] = _durable_bytes_per_match(client, len(mids))
        stats["duration_s"] = round(time.monotonic() - t_start, 1)
        print(f"\nchaos: {dict(stats)}")
        (tmp_path / "chaos.json").write_text(repr(dict(stats)))
        assert stats["kills"] >= 5 and stats["redis_kills"] == 1
    finally:
        for p in procs:
            p.stop()
        rs.stop()


def _durable_bytes_per_match(client, n: int) -> int:
    """MEMORY USAGE of every key but the inbox/ops channels and the delivery streams, per match."""
    total = 0
    for key in client.scan_iter(count=1000):
        k = key.decode(errors="replace")
        if k.startswith(("sk:out:", "sk:reply:")) or k in ("sk:inbox", "sk:ops") or k.endswith((":inbox", ":ops")):
            continue
        total += int(client.memory_usage(key) or 0)
    return total // max(n, 1)


# ---- the OOM episode ------------------------------------------------------------------------------

def test_oom_episode_loses_no_accepted_update(tmp_path):
    """maxmemory is crossed right after commands were appended (their publish is refused
    with OOM), later lifted: every accepted command's update reaches both players, none
    is dead-lettered, and the match finishes."""
    import redis

    from engine.config import load_config
    from engine.service.channels import channel_consumers
    from engine.service.client import GatewayClient
    from engine.service.service import MatchService
    from engine.store.redis_store import RedisEventStore
    from engine.tools.bot import Bot, choose_for

    rs = OwnRedis(tmp_path)
    rs.start()
    try:
        client = redis.Redis.from_url(rs.url)
        admin = redis.Redis.from_url(rs.url)
        store = RedisEventStore(client)
        episodes = {"every": 0, "n": 0}

        class CrossesTheLimit:
            """The service; every 4th command pushes Redis over maxmemory once it is appended."""

            def __init__(self, inner):
                self.inner = inner

            def __getattr__(self, name):
                return getattr(self.inner, name)

            def execute(self, command):
                out = self.inner.execute(command)
                episodes["every"] += 1
                if out.rejection is None and not out.duplicate and episodes["every"] % 4 == 0:
                    admin.config_set("maxmemory", 1)  # (noeviction) every write is refused now
                    episodes["n"] += 1
                return out

        service = CrossesTheLimit(MatchService(store, lambda: int(time.time() * 1000), random.Random(2)))
        player_ch, ops_ch = channel_consumers(client, service, "oom-1")
        gw = GatewayClient(client)
        cfg = load_config("points")

        def pump() -> None:
            """Run both consumers until their channels are empty, lifting an OOM episode when one hits."""
            for _ in range(200):
                try:
                    n = player_ch.run_once(block_ms=None, count=10) + ops_ch.run_once(block_ms=None, count=10)
                except redis.RedisError:
                    admin.config_set("maxmemory", 0)  # the episode ends
                    continue
                if admin.config_get("maxmemory")["maxmemory"] != "0":
                    admin.config_set("maxmemory", 0)
                    continue
                if n == 0:
                    return
            raise AssertionError("the consumers did not drain")

        def send(fn, *args, **kw) -> None:
            for _ in range(20):  # a gateway's XADD refused during an episode is retried
                try:
                    fn(*args, **kw)
                    return
                except redis.RedisError:
                    admin.config_set("maxmemory", 0)
            raise AssertionError("could not send")

        mid = "oom-1"
        send(gw.create_match, mid, cfg.to_record())
        pump()
        for p in ("a", "b"):
            send(gw.sit, mid, p)
        pump()
        for p in ("a", "b"):
            send(gw.ready, mid, p)
        pump()
        bot = Bot("greedy", random.Random(4))
        for _ in range(400):
            st = service.load_state(mid)
            if st.phase == "finished":
                break
            seat = st.seat(st.turn)
            play = choose_for(bot, st, seat.player)
            if play is None:
                send(gw.pass_, mid, seat.player)
            else:
                send(gw.play, mid, seat.player, cards=play.cards)
            pump()
        assert service.load_state(mid).phase == "finished"
        assert episodes["n"] >= 5
        assert client.xlen("sk:dead") == 0, client.xrange("sk:dead")
        events = store.load(mid)
        for p in ("a", "b"):
            seated = next(e.seq for e in events if type(e).__name__ == "PlayerSeated" and e.player == p)
            accepted = {e.command_id: type(e).__name__ for e in events if e.seq >= seated}  # from their seat on
            got = {u["body"]["command_id"] for u in _updates(client, p) if u["match"] == mid}
            assert set(accepted) <= got, (p, [(c, accepted[c]) for c in set(accepted) - got][:5])
            assert any(u["version"] == events[-1].seq for u in _updates(client, p))
    finally:
        rs.stop()
