"""End to end on a real redis-server: `shuangkou serve` + a dramatiq worker process
(with dramatiq's Prometheus middleware, workers/prometheus.py), matches
played through GatewayClient, /metrics scraped over HTTP and compared with the
stored events; SIGTERM stops serve with exit code 0."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.processes import stop_group, tail, wait_for

pytestmark = [pytest.mark.redis, pytest.mark.worker]

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _scrape(port: int) -> dict[str, float]:
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict[str, float] = {}
    for line in body.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name_labels, _, value = line.rpartition(" ")
        out[name_labels] = out.get(name_labels, 0.0) + float(value)
    return out


def _sum(samples: dict[str, float], name: str, **labels: str) -> float:
    total = 0.0
    for key, v in samples.items():
        base, _, rest = key.partition("{")
        if base != name:
            continue
        if all(f'{k}="{val}"' in rest for k, val in labels.items()):
            total += v
    return total








@pytest.fixture
def stack(redis_server, tmp_path):
    import redis

    store_url, broker_url = redis_server.db_url(0), redis_server.db_url(1)
    for url in (store_url, broker_url):
        with redis.Redis.from_url(url) as c:
            c.flushdb()
    env = dict(os.environ, SK_REDIS_URL=store_url, SK_BROKER_URL=broker_url, PYTHONUNBUFFERED="1",
               SK_SWEEP_INTERVAL_MS="200")
    # stdout/stderr go to files: a pipe nobody reads fills up and blocks a chatty process
    serve_out, serve_err, worker_log = tmp_path / "serve.out", tmp_path / "serve.err", tmp_path / "worker.log"
    logs = (serve_err, worker_log)
    procs: list[subprocess.Popen] = []
    files = [open(serve_out, "wb"), open(serve_err, "wb"), open(worker_log, "wb")]
    try:
        serve = subprocess.Popen([sys.executable, "-m", "shuangkou", "serve", "--redis", store_url, "--broker-url",
                                  broker_url, "--metrics-port", "0", "--metrics-addr", "127.0.0.1",
                                  "--consumer", "it-1"], cwd=ROOT, env=env, stdout=files[0], stderr=files[1],
                                 start_new_session=True)
        procs.append(serve)
        mp = tmp_path / "prom"
        mp.mkdir()
        wport = _free_port()
        wenv = dict(env, SK_DRAMATIQ_PROMETHEUS="1", PROMETHEUS_MULTIPROC_DIR=str(mp), dramatiq_prom_db=str(mp),
                    dramatiq_prom_port=str(wport), dramatiq_prom_host="127.0.0.1")
        worker = subprocess.Popen([sys.executable, "-m", "dramatiq", "--processes", "1", "--threads", "2",
                                   "workers.prometheus", "workers.actors"],
                                  cwd=ROOT, env=wenv, stdout=files[2], stderr=subprocess.STDOUT,
                                  start_new_session=True)
        procs.append(worker)

        def serve_port() -> int | None:
            assert serve.poll() is None, "serve exited:\n" + tail(serve_err)
            for line in serve_out.read_text(errors="replace").splitlines():
                if line.startswith("metrics-port "):
                    return int(line.split()[1])
            return None

        port = wait_for(serve_port, 60, "serve did not report its metrics port", logs)

        def worker_up() -> bool:
            assert worker.poll() is None, "the worker exited:\n" + tail(worker_log)
            try:
                _scrape(wport)
                return True
            except OSError:
                return False

        wait_for(worker_up, 60, "the worker's metrics never came up", logs)
        yield {"store_url": store_url, "serve": serve, "worker": worker, "port": port, "wport": wport,
               "logs": logs}
    finally:
        for p in procs:
            stop_group(p)
        for f in files:
            f.close()


def _play(store_url: str, n: int, timeout_every: int, room: str = "points") -> list[str]:
    """n matches of a points ``room`` through the inbox; every `timeout_every`-th turn the bot
    lets the clock run out."""
    import random

    import redis

    from engine.tools.bot import Bot, choose_for
    from engine.service.client import GatewayClient
    from engine.config import load_config
    from engine.service.service import MatchService
    from engine.store.redis_store import RedisEventStore

    client = redis.Redis.from_url(store_url)
    gw = GatewayClient(client, reply_to="sk:reply:it")
    reader = MatchService(RedisEventStore(client), lambda: int(time.time() * 1000), random.Random(0))
    cfg = load_config("points").model_copy(update={"name": room, "turn_seconds": 1.0, "trustee_delay_seconds": 0.05})
    bot = Bot("greedy", random.Random(5))
    last = "0"

    def send(sent) -> None:
        nonlocal last
        end = time.monotonic() + 20
        while time.monotonic() < end:
            for msg in gw.replies(last, block_ms=1000):
                last = msg.id
                if msg.command_id == sent.command_id:
                    return
        raise AssertionError(f"no reply to {sent.command}")

    ids = []
    for m in range(n):
        mid = f"it-{m}"
        ids.append(mid)
        send(gw.create_match(mid, cfg.to_record()))
        send(gw.sit(mid, "a"))
        send(gw.sit(mid, "b"))
        send(gw.ready(mid, "a"))
        send(gw.ready(mid, "b"))
        if m == n - 1:
            send(gw.escape(mid, "b"))  # points room: forfeit
        turn = 0
        end = time.monotonic() + 60
        while time.monotonic() < end:
            st = reader.load_state(mid)
            if st.phase == "finished":
                break
            seat = st.seat(st.turn)
            turn += 1
            if seat.trusteed or turn % timeout_every == 0:
                v = st.version
                while reader.load_state(mid).version == v and time.monotonic() < end:
                    time.sleep(0.02)
                continue
            play = choose_for(bot, st, seat.player)
            if play is None:
                send(gw.pass_(mid, seat.player))
            else:
                send(gw.play(mid, seat.player, cards=play.cards))
        assert reader.load_state(mid).phase == "finished", mid
    return ids


def test_serve_and_worker_metrics_match_what_happened(stack):
    import redis

    from engine.match.events import MatchFinished, TurnTimedOut
    from engine.store.redis_store import RedisEventStore

    from engine.config import load_config
    from engine.service.rooms import RedisRooms

    # a registered points room by another name: the metrics label it by its name, not its mode
    RedisRooms(redis.Redis.from_url(stack["store_url"])).add("it-room", load_config("points"))
    ids = _play(stack["store_url"], n=4, timeout_every=7, room="it-room")
    store = RedisEventStore(redis.Redis.from_url(stack["store_url"]))
    finished = timeouts = 0
    kous: dict[str, int] = {}
    for mid in ids:
        for e in store.load(mid):
            if isinstance(e, MatchFinished):
                finished += 1
                kous[e.kou] = kous.get(e.kou, 0) + 1
            elif isinstance(e, TurnTimedOut):
                timeouts += 1
    assert finished == 4 and timeouts > 0

    # provably fair deals (docs/FAIRNESS.md): every match served can be verified from its record,
    # and no log line of serve or the worker carries a server seed
    for mid in ids:
        out = subprocess.run([sys.executable, "-m", "shuangkou", "verify-deal", mid, "--redis", stack["store_url"],
                              "--json"], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stdout + out.stderr
        assert json.loads(out.stdout)["status"] == "ok"
    seeds = [store.load(mid)[0].server_seed for mid in ids]
    assert all(seeds) and len(set(seeds)) == len(ids)
    logs = "".join(p.read_text(errors="replace") for p in stack["logs"] if p.exists())
    assert not any(seed in logs or seed.upper() in logs for seed in seeds)

    serve_m: dict[str, float] = {}
    worker_m: dict[str, float] = {}

    def both(name, **labels):
        return _sum(serve_m, name, **labels) + _sum(worker_m, name, **labels)

    def settled() -> bool:
        """The ledger projection has caught up and every process has counted the matches."""
        nonlocal serve_m, worker_m
        serve_m, worker_m = _scrape(stack["port"]), _scrape(stack["wport"])
        return (both("shuangkou_matches_finished_total") >= 4
                and _sum(serve_m, "shuangkou_projection_events_total", projection="ledger") >= 4
                and _sum(serve_m, "shuangkou_projection_lag_events") == 0
                and _sum(worker_m, "dramatiq_messages_total", actor_name="fire_deadlines") >= 1)

    wait_for(settled, 30, "the metrics did not catch up with the stored events", stack["logs"])

    assert both("shuangkou_matches_created_total") == 4
    assert both("shuangkou_matches_started_total") == 4
    assert both("shuangkou_matches_finished_total") == 4
    for kou, n in kous.items():
        assert both("shuangkou_matches_finished_total", kou=kou) == n
    assert both("shuangkou_turn_timeouts_total") == timeouts
    assert _sum(worker_m, "shuangkou_turn_timeouts_total") == timeouts  # timers fire in the worker
    assert both("shuangkou_escapes_total", policy="forfeit") == 1
    assert _sum(worker_m, "shuangkou_timer_lateness_seconds_count", kind="turn") >= timeouts
    assert _sum(serve_m, "shuangkou_command_duration_seconds_count") > 0
    assert _sum(serve_m, "shuangkou_append_duration_seconds_count") > 0
    assert _sum(serve_m, "shuangkou_projection_events_total", projection="ledger") >= 4
    assert _sum(serve_m, "shuangkou_projection_lag_events") == 0
    assert _sum(serve_m, "shuangkou_score_transfer_count", config="it-room") == 4  # each winner's gain, its room
    # the dispatcher sends the due deadlines in batches (fire_deadlines), none per commit
    assert _sum(worker_m, "dramatiq_messages_total", actor_name="fire_deadlines") >= 1
    assert _sum(worker_m, "dramatiq_messages_total", actor_name="fire_deadline") == 0

    serve = stack["serve"]
    serve.send_signal(signal.SIGTERM)
    assert serve.wait(timeout=30) == 0, tail(stack["logs"][0])
