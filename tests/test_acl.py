"""deploy/redis/users.acl on a real redis-server (issue 12, docs/SECURITY.md): every process
plays its part under its own Redis user -- serve as ``service``, a dramatiq worker as
``worker``, the projection runner as ``projections``, the lobby (``shuangkou ledger``,
CreateMatch/Sit) as ``lobby``, a player gateway as ``gateway``, ``shuangkou replay`` as
``readonly`` -- matches with a timeout and an escape finish and settle, and the gateway
user is refused on every key and command it must not touch."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.redis, pytest.mark.worker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
ACL_FILE = ROOT / "deploy" / "redis" / "users.acl"
BROKER_ACL_FILE = ROOT / "deploy" / "redis" / "broker.acl"
#: the development passwords of deploy/redis/users.acl and broker.acl (docs/SECURITY.md: replace them)
PASSWORDS = {u: f"dev-{u}-pw" for u in ("gateway", "lobby", "service", "worker", "projections", "readonly",
                                        "dramatiq")}


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _acl_server(acl_file: Path, probe_user: str):
    """A redis-server loading ``acl_file``; yields a function user -> URL (the dev passwords)."""
    import redis

    workdir = tempfile.mkdtemp(prefix="sk-acl-")
    # the shipped file, plus an admin user for this test only (to print ACL LOG on a failure)
    text = acl_file.read_text() + "user acl-admin on >acl-admin ~* &* +@all\n"
    (Path(workdir) / "users.acl").write_text(text)
    port = _free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", workdir, "--aclfile", str(Path(workdir) / "users.acl"),
                             "--loglevel", "warning"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def url(user: str) -> str:
        return f"redis://{user}:{PASSWORDS[user]}@127.0.0.1:{port}/0"

    def acl_log() -> list:
        admin = redis.Redis(host="127.0.0.1", port=port, username="acl-admin", password="acl-admin")
        return [(e.get("username"), e.get("reason"), e.get("object")) for e in admin.acl_log(count=20)]

    ACL_LOG.append(acl_log)

    try:
        end = time.monotonic() + 10
        while True:
            assert proc.poll() is None, proc.stdout.read().decode(errors="replace")  # type: ignore[union-attr]
            try:
                if redis.Redis.from_url(url(probe_user), socket_connect_timeout=0.2).ping():
                    break
            except redis.ConnectionError:
                if time.monotonic() > end:
                    raise
                time.sleep(0.05)
        yield url
    finally:
        ACL_LOG.remove(acl_log)
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout:
            proc.stdout.close()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def acl_redis():
    """A redis-server loading the shipped deploy/redis/users.acl; yields a function user -> URL."""
    with _acl_server(ACL_FILE, "readonly") as url:
        yield url


@pytest.fixture
def acl_broker():
    """dramatiq's Redis loading the shipped deploy/redis/broker.acl (user ``dramatiq``)."""
    with _acl_server(BROKER_ACL_FILE, "dramatiq") as url:
        yield url


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


ACL_LOG: list = []  # callables returning each running ACL server's ACL LOG


def _wait(check, timeout_s: float, what: str, logs=()):
    end = time.monotonic() + timeout_s
    while not (value := check()):
        if time.monotonic() > end:
            denied = [entry for log in ACL_LOG for entry in log()]
            pytest.fail(f"{what}\nACL LOG: {denied}\n" + "\n".join(p.read_text(errors="replace")[-3000:]
                                                                    for p in logs))
        time.sleep(0.05)
    return value


def _permitted(calls: dict, scripts: bool = False) -> list[str]:
    """The names of ``calls`` that Redis carried out instead of refusing them (NOPERM); with
    ``scripts``, a script's refused call (a ResponseError naming the permission) is a refusal too."""
    import redis

    allowed = []
    for what, call in calls.items():
        try:
            call()
        except redis.exceptions.NoPermissionError:
            continue
        except redis.exceptions.ResponseError as exc:
            text = str(exc)
            if scripts and ("NOPERM" in text or "can't access" in text or "permission" in text.lower()):
                continue
            raise
        allowed.append(what)
    return allowed


def test_the_default_user_is_off_and_passwords_are_checked(acl_redis):
    import redis

    host = acl_redis("readonly").split("@")[1]
    with pytest.raises(redis.AuthenticationError):
        redis.Redis.from_url(f"redis://{host}").ping()  # no user: default is off
    with pytest.raises(redis.AuthenticationError):
        redis.Redis.from_url(f"redis://gateway:wrong@{host}").ping()


def test_every_process_under_its_own_user(acl_redis, acl_broker, tmp_path):
    import redis

    from engine.config import load_config
    from engine.match.commands import AddRoom, CreateMatch, Sit
    from engine.service.client import GatewayClient
    from engine.service.service import MatchService
    from engine.store import keys
    from engine.store.redis_store import RedisEventStore
    from engine.tools.bot import Bot, choose_for
    from projections.ledger import RedisLedger, balance_key, journal_key
    from projections.runner import ProjectionRunner, RedisFeed

    broker_url = acl_broker("dramatiq")  # dramatiq's Redis under its ACL file too (compose does so)
    env = dict(os.environ, PYTHONUNBUFFERED="1", SK_BROKER_URL=broker_url, SK_SWEEP_INTERVAL_MS="200",
               SK_LOG_LEVEL="INFO")
    logs = [tmp_path / "serve.log", tmp_path / "worker.log"]
    files = [open(p, "wb") for p in logs]
    procs: list[subprocess.Popen] = []
    stop = threading.Event()
    try:
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "shuangkou", "serve", "--redis", acl_redis("service"), "--broker-url", broker_url,
             "--no-projections", "--consumer", "acl-1"], cwd=ROOT, env=env, stdout=files[0],
            stderr=subprocess.STDOUT, start_new_session=True))
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "dramatiq", "--processes", "1", "--threads", "2", "workers.actors"],
            cwd=ROOT, env=dict(env, SK_REDIS_URL=acl_redis("worker")), stdout=files[1], stderr=subprocess.STDOUT,
            start_new_session=True))
        _wait(lambda: b"ready consumer=acl-1" in logs[0].read_bytes() or procs[0].poll() is not None, 60,
              "serve did not start", logs)
        assert procs[0].poll() is None, logs[0].read_text()

        # projections, under their own user
        proj = redis.Redis.from_url(acl_redis("projections"))
        runner = ProjectionRunner(RedisEventStore(proj), RedisLedger(proj), RedisFeed(proj, consumer="acl-proj"))
        t = threading.Thread(target=runner.run_forever, args=(stop,), daemon=True)
        t.start()

        # the lobby: credits through the CLI, a fast room, matches created by room name and seated
        for player in ("alice", "bob"):
            out = subprocess.run([sys.executable, "-m", "shuangkou", "ledger", "credit", player, "5000",
                                  "--reason", "acl test deposit", "--operator", "op-acl", "--redis",
                                  acl_redis("lobby")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, out.stderr
        lobby_r = redis.Redis.from_url(acl_redis("lobby"))
        lobby = GatewayClient(lobby_r, reply_to="sk:reply:ops-lobby")
        reader = MatchService(RedisEventStore(redis.Redis.from_url(acl_redis("readonly"))), clock=lambda: 0,
                              rng=random.Random(0))
        replies: dict[str, str] = {}

        def await_reply(client, sent) -> str:
            def got():
                for m in client.replies("0"):
                    replies[m.command_id] = m.kind if m.code is None else f"{m.kind}:{m.code}"
                return replies.get(sent.command_id if hasattr(sent, "command_id") else sent)
            return _wait(got, 30, f"no reply to {sent}", logs)

        fast = load_config("wealth").model_copy(update={"turn_seconds": 1.0, "trustee_delay_seconds": 0.05})
        cmd = AddRoom(command_id="room-fast", name="fast", config=fast.to_record())
        lobby.send(cmd)
        assert await_reply(lobby, cmd.command_id) == "accepted"

        gateway_r = redis.Redis.from_url(acl_redis("gateway"))
        gw = GatewayClient(gateway_r, reply_to="sk:reply:gateway-1")
        bot = Bot("greedy", random.Random(3))
        mids = ["acl-m0", "acl-m1"]
        for n, mid in enumerate(mids):
            for c in (CreateMatch(command_id=f"{mid}-c", match_id=mid, room="fast"),
                      Sit(command_id=f"{mid}-a", match_id=mid, player="alice"),
                      Sit(command_id=f"{mid}-b", match_id=mid, player="bob")):
                lobby.send(c)
                assert await_reply(lobby, c.command_id) == "accepted", c
            for p in ("alice", "bob"):
                assert await_reply(gw, gw.ready(mid, p)) == "accepted"
            if n == 1:
                assert await_reply(gw, gw.escape(mid, "bob")) == "accepted"
            turn = 0
            end = time.monotonic() + 90
            while time.monotonic() < end:
                st = reader.load_state(mid)
                if st.phase == "finished":
                    break
                seat = st.seat(st.turn)
                turn += 1
                if seat.trusteed or turn == 3:  # let the worker's turn clock run out once
                    v = st.version
                    _wait(lambda: reader.load_state(mid).version > v, 30, "the worker never fired", logs)
                    continue
                play = choose_for(bot, st, seat.player)
                sent = gw.pass_(mid, seat.player) if play is None else gw.play(mid, seat.player, cards=play.cards)
                await_reply(gw, sent)
            assert reader.load_state(mid).phase == "finished", mid

        ledger_ro = RedisLedger(redis.Redis.from_url(acl_redis("readonly")))
        _wait(lambda: all(ledger_ro.is_settled(m) for m in mids), 30, "matches not settled", logs)
        assert ledger_ro.balance("alice", "wealth") + ledger_ro.balance("bob", "wealth") \
            + ledger_ro.burned_total("wealth") == 10_000
        kinds = [e.kind for e in ledger_ro.entries("alice")]
        assert kinds.count("credit") == 1 and kinds.count("settlement") == 2
        # the player's own stream reached the gateway user
        assert any(m.kind == "update" for m in gw.updates("alice"))

        # read-only tools: replay checks a match and its settlement
        out = subprocess.run([sys.executable, "-m", "shuangkou", "replay", mids[0], "--redis", acl_redis("readonly")],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr

        # -- what the gateway user may never do --------------------------------------------------
        events = keys.events_key(mids[0], keys.bucket_of(mids[0]))
        b = keys.bucket_of(mids[0])
        forbidden = {
            "read a match stream (both hands)": lambda: gateway_r.xrange(events),
            "read a match's command ids": lambda: gateway_r.hgetall(keys.commands_key(mids[0], b)),
            "read a snapshot": lambda: gateway_r.get(keys.snapshot_key(mids[0], b)),
            "read a feed": lambda: gateway_r.xrange(keys.feed_key(b)),
            "write a feed": lambda: gateway_r.xadd(keys.feed_key(b), {"match": "x"}),
            "read the deadlines": lambda: gateway_r.zrange(keys.deadlines_key(b), 0, -1),
            "read the operator channel": lambda: gateway_r.xrange(keys.OPS),
            "write the operator channel": lambda: gateway_r.xadd(keys.OPS, {"j": "{}"}),
            "read the player channel": lambda: gateway_r.xrange(keys.INBOX),
            "consume the player channel": lambda: gateway_r.xreadgroup(keys.SERVICE_GROUP, "x", {keys.INBOX: ">"}),
            "create a group on the inbox": lambda: gateway_r.xgroup_create(keys.INBOX, "evil", id="0"),
            "trim the inbox": lambda: gateway_r.xtrim(keys.INBOX, maxlen=0),
            "delete the inbox": lambda: gateway_r.delete(keys.INBOX),
            "read a balance": lambda: gateway_r.hget(balance_key("wealth"), "alice"),
            "read a journal": lambda: gateway_r.hgetall(journal_key("alice")),
            "write a balance": lambda: gateway_r.hincrby(balance_key("wealth"), "alice", 10**6),
            "register a room": lambda: gateway_r.hset("sk:rooms", "evil", "{}"),
            "write a player's stream": lambda: gateway_r.xadd(keys.outbox_key("bob"), {"kind": "update"}),
            "read the dead letters": lambda: gateway_r.xrange(keys.DEAD_LETTERS),
            "read the lobby's replies": lambda: gateway_r.xrange("sk:reply:ops-lobby"),
            "list keys": lambda: gateway_r.keys("*"),
            "scan keys": lambda: gateway_r.scan(0),
            "run a script": lambda: gateway_r.eval("return 1", 0),
            "flush": lambda: gateway_r.flushall(),
            "read the config": lambda: gateway_r.config_get("*"),
            "publish": lambda: gateway_r.publish("sk", "x"),
            "read a non-sk key": lambda: gateway_r.get("dramatiq:anything"),
        }
        allowed = _permitted(forbidden)
        assert allowed == [], f"the gateway user may {allowed}"

        # every user whose writes wait for replicas (serve's, the workers', the ledger's) may send
        # the INCR + WAIT: with no replica here the answer is NOREPLICAS, not NOPERM
        from engine.store.replicas import ReplicaAcks

        for user, key in (("service", "sk:{b3}:m:x:events"), ("worker", "sk:{b3}:m:x:events"),
                          ("projections", "sk:{ledger}:settled")):
            with pytest.raises(redis.ResponseError, match="^NOREPLICAS"):
                ReplicaAcks(redis.Redis.from_url(acl_redis(user)), 1, 10).confirm([key])
        # and the lobby may not act as a player gateway nor move coins itself
        for call in (lambda: lobby_r.xadd(keys.INBOX, {"j": "{}"}), lambda: lobby_r.xrange(events),
                     lambda: lobby_r.hincrby(balance_key("wealth"), "alice", 1)):
            with pytest.raises(redis.exceptions.NoPermissionError):
                call()
        # the read-only user writes nothing
        ro = redis.Redis.from_url(acl_redis("readonly"))
        for call in (lambda: ro.xadd(keys.OPS, {"j": "{}"}), lambda: ro.hset("sk:rooms", "x", "{}")):
            with pytest.raises(redis.exceptions.NoPermissionError):
                call()
    finally:
        stop.set()
        for p in procs:
            _stop(p)
        for f in files:
            f.close()


def test_a_match_through_the_real_gateway_with_every_process_under_its_own_user(acl_redis, redis_server, tmp_path):
    """Issue 14 on issue 12's users: ``shuangkou gateway`` connects as ``gateway`` (player
    channel, outboxes with the lobby's messages, its session streams) with its lobby as ``lobby``
    (the lobby channel, places and tables read, presence, ``sk:ops``, balances), serve as
    ``service``, the timer worker as ``worker``, the projections as ``projections``.  Two
    players join over real WebSockets, are paired, play two matches to settlement (the second
    offered at the same table) and their balances are the ledger's; Redis denied nothing to
    the gateway or the lobby meanwhile.  Then the new rights' edges: neither user can forge
    what the other (or the engine) writes."""
    import asyncio

    import redis

    from engine.store import keys
    from projections.ledger import SETTLED_KEY, RedisLedger, balance_key
    from projections.runner import ProjectionRunner, RedisFeed
    from engine.store.redis_store import RedisEventStore
    from tests.gateway_support import SECRET, Client, kind, lobby, ready_and_play, write_room
    from tests.processes import stop_group, tail

    broker_url = redis_server.db_url(4)
    with redis.Redis.from_url(broker_url) as c:
        c.flushdb()
    env = dict(os.environ, PYTHONUNBUFFERED="1", SK_BROKER_URL=broker_url, SK_SWEEP_INTERVAL_MS="200",
               SK_LOG_LEVEL="INFO", PYTHONPATH=str(ROOT))
    env.pop("SK_REDIS_URL", None)
    env.pop("SK_LOBBY_REDIS_URL", None)
    secret = tmp_path / "secret"
    secret.write_bytes(SECRET)
    room = write_room(tmp_path / "aclroom.toml", "aclroom", trustee_delay_seconds=0.0)
    logs = {n: tmp_path / f"{n}.log" for n in ("serve", "worker", "gateway")}
    files = {n: open(p, "wb") for n, p in logs.items()}
    procs: list[subprocess.Popen] = []
    stop = threading.Event()

    def spawn(name: str, argv: list[str], extra_env: dict[str, str] | None = None) -> subprocess.Popen:
        p = subprocess.Popen(argv, cwd=ROOT, env=dict(env, **(extra_env or {})), stdout=files[name],
                             stderr=subprocess.STDOUT, start_new_session=True)
        procs.append(p)
        return p

    try:
        serve = spawn("serve", [sys.executable, "-m", "shuangkou", "serve", "--redis", acl_redis("service"),
                                "--broker-url", broker_url, "--no-projections", "--consumer", "acl-gw-1"])
        spawn("worker", [sys.executable, "-m", "dramatiq", "--processes", "1", "--threads", "2", "workers.actors"],
              {"SK_REDIS_URL": acl_redis("worker")})
        _wait(lambda: b"ready consumer=acl-gw-1" in logs["serve"].read_bytes() or serve.poll() is not None, 60,
              "serve did not start", list(logs.values()))
        assert serve.poll() is None, tail(logs["serve"])
        proj = redis.Redis.from_url(acl_redis("projections"))
        runner = ProjectionRunner(RedisEventStore(proj), RedisLedger(proj), RedisFeed(proj, consumer="acl-gw-proj"))
        t = threading.Thread(target=runner.run_forever, args=(stop,), daemon=True)
        t.start()
        gateway = spawn("gateway", [sys.executable, "-m", "shuangkou", "gateway", "--redis", acl_redis("gateway"),
                                    "--lobby-redis", acl_redis("lobby"), "--port", "0", "--secret-file", str(secret),
                                    "--id", "acl", "--room", str(room)])

        def port() -> int | None:
            assert gateway.poll() is None, "the gateway exited:\n" + tail(logs["gateway"])
            for line in logs["gateway"].read_text(errors="replace").splitlines():
                if line.startswith("gateway-port "):
                    return int(line.split()[1])
            return None
        url = f"ws://127.0.0.1:{_wait(port, 60, 'the gateway did not report its port', list(logs.values()))}/ws"

        from gateway.tokens import mint

        async def main() -> list[tuple[str, dict, dict]]:
            names = ("acl-alice", "acl-bob")
            clients = [await Client.connect(url, mint(SECRET, n, ttl_seconds=600), n) for n in names]
            for c in clients:
                await c.expect(kind("welcome"))
                await c.send({"type": "Join", "room": "aclroom"})
            seated = [await c.expect(lobby("seated"), what="seated") for c in clients]
            match = seated[0]["match"]
            assert seated[1]["match"] == match
            done = []
            for _n in range(2):
                a, b = await asyncio.gather(*(ready_and_play(c, match) for c in clients))
                done.append((match, a, b))
                nxt = [await c.expect(lobby("seated"), what="the next match") for c in clients]
                assert nxt[0]["table"] == seated[0]["table"] and nxt[0]["match"] != match
                match = nxt[0]["match"]
            for c in clients:
                await c.close()
            return done

        done = asyncio.run(main())
        ro = redis.Redis.from_url(acl_redis("readonly"))
        for p in ("acl-alice", "acl-bob"):
            total = sum(a["scores"][p] for _m, a, _b in done)
            last = done[-1][1] if p == "acl-alice" else done[-1][2]
            stored = ro.hget(balance_key("points"), p)
            assert last["balances"] == {p: total} and int(stored or 0) == total
        assert all(ro.hexists(SETTLED_KEY, m) for m, _a, _b in done)
        # the engine's lobby created each match in the gateway's --room room, registered by name
        firsts = [RedisEventStore(ro).load(m)[0] for m, _a, _b in done]
        assert all(e.type == "MatchCreated" and e.config.get("name") == "aclroom" for e in firsts), firsts
        # nothing the gateway or the lobby needed was denied (redis-py's optional CLIENT SETINFO aside)
        denied = [e for e in ACL_LOG[0]() if e[0] in ("gateway", "lobby") and "setinfo" not in str(e[2]).lower()
                  and e[2] != "client|setinfo"]
        assert denied == [], denied

        # -- the edges of the new rights ---------------------------------------------------------
        gateway_r = redis.Redis.from_url(acl_redis("gateway"))
        lobby_r = redis.Redis.from_url(acl_redis("lobby"))
        note = {"kind": "lobby", "m": '{"kind": "lobby", "state": "seated", "match": "forged"}'}
        forbidden = {
            "gateway: write a lobby message (a forged seated)": lambda: gateway_r.xadd(keys.outbox_key("acl-bob"),
                                                                                      note),
            "gateway: delete a session stream": lambda: gateway_r.delete("sk:gw:session:acl-bob"),
            "gateway: SET over anything but a receipt": lambda: gateway_r.set(keys.inbox_key(1), "x"),
            "gateway: read a settlement": lambda: gateway_r.hget(SETTLED_KEY, done[0][0]),
            "lobby: overwrite the operator channel": lambda: lobby_r.set(keys.OPS, "x"),
            "lobby: write the player channel": lambda: lobby_r.xadd(keys.INBOX, {"c": b"x"}),
            "lobby: write a player's stream": lambda: lobby_r.xadd(keys.outbox_key("acl-bob"), {"kind": "update"}),
            "lobby: write a settlement": lambda: lobby_r.hset(SETTLED_KEY, "m", "{}"),
            "lobby: write a balance": lambda: lobby_r.hset(balance_key("points"), "acl-bob", 10**6),
            "lobby: register a room by hand": lambda: lobby_r.hset("sk:rooms", "evil", "{}"),
            "lobby: write a session stream": lambda: lobby_r.xadd("sk:gw:session:acl-bob", {"conn": "x"}),
            "lobby: run any script": lambda: lobby_r.eval("return 1", 0),
            "lobby: a script writing outside the lobby": lambda: lobby_r.evalsha(
                lobby_r.script_load("return redis.call('SET', 'sk:ops', 'x')"), 0),
            "lobby: read a match stream": lambda: lobby_r.xrange(keys.events_key(done[0][0],
                                                                                 keys.bucket_of(done[0][0]))),
            "lobby: list keys": lambda: lobby_r.keys("sk:*"),
        }
        allowed = _permitted(forbidden, scripts=True)
        assert allowed == [], f"allowed: {allowed}"
    finally:
        stop.set()
        for p in reversed(procs):
            stop_group(p)
        for f in files.values():
            f.close()


@pytest.mark.redis
def test_the_lobby_streams_under_the_shipped_users(acl_redis, tmp_path, capsys):
    """Issue 34: the tables (``sk:{bN}:t:*``, ``sk:{bN}:tables``) and room queues
    (``sk:{r:<room>}:*``) are written by the command service (user ``service``) through the
    append script, read by ``readonly`` (``shuangkou replay --table``); no other user may
    write them: a gateway, the old lobby user, a timer worker, the projection runner."""
    import json

    import redis

    from engine.lobby.events import PlayerQueued, TableOpened
    from engine.store import keys
    from engine.store.lobby_store import RedisLobbyStore
    from shuangkou.cli import main

    svc = RedisLobbyStore(redis.Redis.from_url(acl_redis("service")))
    opened = TableOpened(aggregate="table:acl-t", seq=1, ts=5, command_id="open", table="acl-t", room="points",
                         players=("alice", "bob"), match="acl-t-1", ready_ms=1000, grace_ms=1000)
    queued = PlayerQueued(aggregate="queue:points", seq=1, ts=5, command_id="j", player="alice", since=5)
    assert svc.append("table:acl-t", 0, "open", [opened]).version == 1
    assert svc.append("queue:points", 0, "j", [queued]).version == 1
    ro = RedisLobbyStore(redis.Redis.from_url(acl_redis("readonly")))
    assert [e.type for e in ro.load("table:acl-t")] == ["TableOpened"] and list(ro.table_ids()) == ["acl-t"]
    assert main(["replay", "--table", "acl-t", "--redis", acl_redis("readonly"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["players"] == ["alice", "bob"]
    with pytest.raises(redis.exceptions.NoPermissionError):
        ro.append("table:acl-t", 1, "x", [opened.model_copy(update={"seq": 2})])
    tkeys, qkeys = keys.table_keys("acl-t"), keys.queue_keys("points")
    for user in ("gateway", "lobby", "worker", "projections", "readonly"):
        r = redis.Redis.from_url(acl_redis(user))
        for key in (tkeys[0], qkeys[0]):
            with pytest.raises(redis.exceptions.NoPermissionError):
                r.xadd(key, {"e": b"forged"})
        with pytest.raises(redis.exceptions.NoPermissionError):
            r.hset(tkeys[1], "cmd", "1-1")
        with pytest.raises(redis.exceptions.NoPermissionError):  # a forged queue state to fold from
            r.hset(keys.lobby_snapshot_key("queue:points"), mapping={"v": 99, "s": b"forged"})
        r.close()
    from engine.store.base import Snapshot

    assert svc.save_snapshot("queue:points", Snapshot(1, b"state"))  # the service's own


@pytest.mark.redis
def test_the_gateways_lobby_adapter_under_the_shipped_users(acl_redis):
    """Issue 34: what the gateway's lobby adapter (gateway/lobby.py) and its bots (gateway/bots.py)
    do works under the ``lobby`` user (``--lobby-redis``): Join, Leave and Returned on the lobby
    channel, the place, table and queue read models read, presence pushed, the bot offers set and
    the bot seats read with their group, the display names; and nothing more: neither it nor the
    ``gateway`` user may read or consume the lobby channel, write a read model, read or take back
    presence, forge a bot seat, or touch the old ``{lobby}`` keys."""
    import redis
    import redis.asyncio as aioredis

    from engine.store import keys
    from gateway import names
    from gateway.bots import BotDriver
    from gateway.lobby import Lobby, Place
    from gateway.rooms import RoomBook

    svc = redis.Redis.from_url(acl_redis("service"))  # what the engine writes
    svc.hset(keys.place_key("acl-a"), mapping={"state": "table", "room": "points", "table": "tacl",
                                               "match": "tacl-1"})
    svc.hset(keys.table_info_key("tacl"), mapping={"room": "points", "a": "acl-a", "b": "acl-b", "n": 1,
                                                   "match": "tacl-1", "status": "seated"})
    svc.hset(keys.queue_info_key("points"), "waiting", 2)
    seats = keys.bot_seats_key("points")
    svc.xadd(seats, {"bot": "bot-acl", "table": "tacl", "match": "tacl-1", "level": "easy"})

    async def adapter() -> None:
        client = aioredis.Redis.from_url(acl_redis("lobby"))
        try:
            lobby = Lobby(client, RoomBook.load(), "acl-gw")
            await lobby.join("acl-a", "points", "j1")
            assert await lobby.quit("acl-a", "l1")
            await lobby.came_back("acl-a", "points")
            place = await lobby.place("acl-a")
            assert place.state == "table" and place.table is not None and place.table.match == "tacl-1"
            assert await lobby.place("nobody") == Place("")
            assert (await lobby.table_of_match("tacl-1")) == place.table
            assert await lobby.waiting(["points", "wealth"]) == {"points": 2, "wealth": 0}
            await lobby.present({"acl-a": ("points", 1)})
            assert await lobby.balance("acl-a", "points") == 0
            await names.NameBook(client).remember("acl-a", "Ann")
            assert await names.NameBook(client).names_of(["acl-a"]) == {"acl-a": "Ann"}
            await client.sadd(keys.HIDDEN_NAMES_KEY, "acl-a")
            await client.srem(keys.HIDDEN_NAMES_KEY, "acl-a")
            bots = BotDriver(lobby, None, None)  # type: ignore[arg-type]
            bots.start = lambda bot, room=None, match=None: None  # type: ignore[method-assign]
            await bots.offer(["points", "wealth"])
            await bots.withdraw(["wealth"])
            assert await bots.take_seats(["points"], "acl-gw") == ["bot-acl"]
            # a JoinTable's attempts (gateway/session.py): counted, then refused over the limit
            assert await lobby.join_allowed("acl-a", "10.0.0.1", 2, 5, 60) == 0
            assert await lobby.join_allowed("acl-a", "10.0.0.1", 2, 5, 60) == 0
            assert 0 < await lobby.join_allowed("acl-a", "10.0.0.1", 2, 5, 60) <= 60_000
        finally:
            await client.aclose()
    asyncio.run(adapter())
    channel = keys.lobby_inbox_key(keys.room_bucket("points"))
    assert [f[b"c"].count(b'"type"') for _i, f in svc.xrange(channel)] == [1, 1, 1]
    assert svc.zscore(keys.presence_key("points"), "acl-a") == 1 and svc.get(keys.bot_offer_key("points"))

    lobby_r = redis.Redis.from_url(acl_redis("lobby"))
    gateway_r = redis.Redis.from_url(acl_redis("gateway"))
    forbidden = {
        "lobby: read the lobby channel": lambda: lobby_r.xrange(channel),
        "lobby: consume the lobby channel": lambda: lobby_r.xreadgroup("sk-lobby", "x", {channel: ">"}),
        "lobby: trim the lobby channel": lambda: lobby_r.xtrim(channel, maxlen=0),
        "lobby: write a place": lambda: lobby_r.hset(keys.place_key("acl-b"), "state", "queued"),
        "lobby: write a table's read model": lambda: lobby_r.hset(keys.table_info_key("tacl"), "status", "closed"),
        "lobby: write a queue's read model": lambda: lobby_r.hset(keys.queue_info_key("points"), "waiting", 0),
        "lobby: read the presence": lambda: lobby_r.zrange(keys.presence_key("points"), 0, -1),
        "lobby: take a player's presence back": lambda: lobby_r.zrem(keys.presence_key("points"), "acl-a"),
        "lobby: forge a bot seat": lambda: lobby_r.xadd(seats, {"bot": "evil"}),
        "lobby: delete the bot seats": lambda: lobby_r.delete(seats),
        "lobby: read a table's events": lambda: lobby_r.xrange(keys.table_keys("tacl")[0]),
        "lobby: write a room queue's stream": lambda: lobby_r.xadd(keys.queue_keys("points")[0], {"e": b"x"}),
        "lobby: the old lobby keys": lambda: lobby_r.hset("sk:{lobby}:player:acl-a", "state", "queued"),
        "lobby: a display name into any other hash": lambda: lobby_r.hset(keys.place_key("acl-a"), "x", "y"),
        "gateway: write the lobby channel (a Join for anyone)": lambda: gateway_r.xadd(channel, {"c": "{}"}),
        "gateway: read a place": lambda: gateway_r.hgetall(keys.place_key("acl-a")),
        "gateway: read a table's read model": lambda: gateway_r.hgetall(keys.table_info_key("tacl")),
        "gateway: push back a grace end (presence)": lambda: gateway_r.zadd(keys.presence_key("points"), {"x": 1}),
        "gateway: offer bots": lambda: gateway_r.set(keys.bot_offer_key("points"), "{}"),
        "gateway: take a bot seat": lambda: gateway_r.xreadgroup(keys.BOTS_GROUP, "x", {seats: ">"}),
        "gateway: write a display name": lambda: gateway_r.hset(keys.NAMES_KEY, "acl-a", "evil"),
        "gateway: the old lobby keys": lambda: gateway_r.xrange("sk:{lobby}:notes:acl-a"),
    }
    allowed = _permitted(forbidden)
    assert allowed == [], f"allowed: {allowed}"


@pytest.mark.redis
def test_the_worker_reads_the_room_registry_for_its_labels_and_may_not_change_it(acl_redis):
    """A timer worker labels its matches' metrics by room: it reads the registry ``sk:rooms``
    (a room added after it started gets its label), and may not add, change or remove a room."""
    import redis

    from engine.config import load_config
    from engine.service.rooms import RedisRooms
    from engine.store.keys import ROOMS_KEY
    from projections import metrics

    RedisRooms(redis.Redis.from_url(acl_redis("service"))).add("acl-room", load_config("points"))
    worker = redis.Redis.from_url(acl_redis("worker"))
    assert "acl-room" in RedisRooms(worker).names()
    metrics.follow_room_registry(RedisRooms(worker).names)
    try:
        assert metrics.room_label("acl-room") == "acl-room"
    finally:
        metrics.follow_room_registry(None)
    forbidden = {
        "add a room": lambda: worker.hset(ROOMS_KEY, "evil", "{}"),
        "remove one": lambda: worker.hdel(ROOMS_KEY, "acl-room"),
        "delete the registry": lambda: worker.delete(ROOMS_KEY),
    }
    allowed = _permitted(forbidden)
    assert allowed == [], f"the worker user may {allowed}"


def test_the_worker_reads_the_player_channel_and_may_not_touch_it(acl_redis):
    """A timer worker reads a bucket's player channel (its entries, the service group's position
    and pending entries: a command there before the deadline and not handled yet pauses the
    clock, workers/runtime.py ``unhandled_in_time``), and may not write it, consume it, acknowledge
    its entries for the service, trim or delete it."""
    import redis

    from engine.match.commands import Play, encode_command
    from engine.match.state import MatchState
    from engine.store import keys
    from workers.runtime import unhandled_in_time

    inbox = keys.inbox_key(keys.bucket_of("m-acl"))
    svc = redis.Redis.from_url(acl_redis("service"))
    svc.xgroup_create(inbox, keys.SERVICE_GROUP, id="0", mkstream=True)
    play = Play(command_id="p1", match_id="m-acl", player="a", cards=(0,), expected_version=7)
    entry = svc.xadd(inbox, {"c": encode_command(play)}, id="1000-0")
    worker = redis.Redis.from_url(acl_redis("worker"))
    state = MatchState(match_id="m-acl", phase="playing", version=7, table_version=7, deadline_at=2_000)
    assert unhandled_in_time(worker, state, "turn", ["a"])  # read under the worker user: not taken
    svc.xreadgroup(keys.SERVICE_GROUP, "s1", {inbox: ">"})  # taken by serve, not acknowledged
    assert unhandled_in_time(worker, state, "turn", ["a"])
    svc.xack(inbox, keys.SERVICE_GROUP, entry)  # handled
    assert not unhandled_in_time(worker, state, "turn", ["a"])
    forbidden = {
        "write the player channel": lambda: worker.xadd(inbox, {"c": encode_command(play)}),
        "consume it": lambda: worker.xreadgroup(keys.SERVICE_GROUP, "evil", {inbox: ">"}),
        "acknowledge for the service": lambda: worker.xack(inbox, keys.SERVICE_GROUP, entry),
        "create a group": lambda: worker.xgroup_create(inbox, "evil", id="0"),
        "trim it": lambda: worker.xtrim(inbox, maxlen=0),
        "delete it": lambda: worker.delete(inbox),
        "write the operator channel": lambda: worker.xadd(keys.ops_key(1), {"j": "{}"}),
        "read the operator channel": lambda: worker.xrange(keys.ops_key(1)),
    }
    allowed = _permitted(forbidden)
    assert allowed == [], f"the worker user may {allowed}"
