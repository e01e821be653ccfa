"""Pipeline benchmark: bot matches through `shuangkou serve` on a real local redis-server.

    python bench/pipeline.py [--quick] [--matches N] [--concurrency C]

Starts its own redis-server (no persistence) on a free loopback port, then:

* raw single-client XADD rate (one round trip per entry, same server, same run);
* `shuangkou simulate --redis URL --external` (commands through GatewayClient →
  inbox → serve's InboxConsumer → MatchService → Lua append) with 1 and with 2
  `shuangkou serve` processes (timers in-process, no timeouts simulated):
  matches/s, events/s, client-side command round-trip latency p50/p99;
* events/s as a share of the raw XADD rate;
* the command path's own cost, without threads, clients or timers in the way:
  the inbox of an in-process simulate run is recorded and replayed through one
  InboxConsumer + MatchService in this process (same seed, so the same deals):
  wall and CPU µs per command, with the state cache and without.

Prints figures; it is not a timed test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis() -> tuple[subprocess.Popen, str, str]:
    import redis

    workdir = tempfile.mkdtemp(prefix="sk-bench-")
    port = free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", workdir],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    end = time.monotonic() + 10
    while True:
        try:
            redis.Redis.from_url(url).ping()
            return proc, url, workdir
        except redis.ConnectionError:
            if time.monotonic() > end:
                raise
            time.sleep(0.05)


def raw_xadd_rate(url: str, n: int) -> float:
    import redis

    r = redis.Redis.from_url(url)
    payload = b"x" * 120  # about one msgpack event
    t0 = time.perf_counter()
    for i in range(n):
        r.xadd("bench:raw", {"e": payload})
    dt = time.perf_counter() - t0
    r.delete("bench:raw")
    return n / dt


def run_pipeline(url: str, services: int, matches: int, concurrency: int) -> dict:
    import redis

    redis.Redis.from_url(url).flushdb()
    env = dict(os.environ, PYTHONUNBUFFERED="1", SK_LOG_LEVEL="WARNING")
    procs = []
    for i in range(services):
        p = subprocess.Popen([sys.executable, "-m", "engine", "serve", "--redis", url, "--consumer", f"bench-{i}",
                              "--batch", "20"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
        procs.append(p)
    try:
        for p in procs:  # wait for "ready"
            end = time.monotonic() + 30
            while time.monotonic() < end:
                line = p.stdout.readline()
                if line.startswith("ready"):
                    break
                if not line and p.poll() is not None:
                    raise RuntimeError("serve exited")
        out = subprocess.run([sys.executable, "-m", "engine", "simulate", "-n", str(matches), "--redis", url,
                              "--external", "--json", "--seed", "1", "--concurrency", str(concurrency)],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
        if out.returncode not in (0, 1):
            raise RuntimeError(out.stderr[-2000:])
        return json.loads(out.stdout)
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


def gateway_cpu(url: str, matches: int) -> list[tuple[str, int, float, float]]:
    """Record an in-process simulate run's inbox, replay it single-threaded; (mode, n, wall µs, cpu µs)."""
    import random

    import redis

    from engine.service.inbox import InboxConsumer
    from engine.service.service import MatchService
    from engine.service.state_cache import StateCache
    from engine.store import keys
    from engine.store.redis_store import RedisEventStore

    r = redis.Redis.from_url(url)
    r.flushdb()
    env = dict(os.environ, SK_LOG_LEVEL="WARNING")
    subprocess.run([sys.executable, "-m", "engine", "simulate", "-n", str(matches), "--redis", url, "--json",
                    "--seed", "7", "--concurrency", "4", "--no-progress"], cwd=ROOT, env=env,
                   capture_output=True, text=True, timeout=900, check=False)
    # both channels' entries (sk:ops: CreateMatch/Sit, sk:inbox: the players'), in the order they
    # were sent, replayed through one stream and one consumer: the command path alone
    recorded = list(r.xrange(keys.INBOX)) + list(r.xrange(keys.OPS))
    msgs = [f for _, f in sorted(recorded, key=lambda e: keys.stream_pos(e[0]))]
    out = []
    for mode in ("state cache", "no cache"):
        r.flushdb()
        svc = MatchService(RedisEventStore(r), lambda: int(time.time() * 1000), random.Random(7),
                           state_cache=StateCache() if mode == "state cache" else None)
        gw = InboxConsumer(r, svc, "bench")
        pipe = r.pipeline(transaction=False)
        for f in msgs:
            pipe.xadd(keys.INBOX, f)
        pipe.execute()
        c0, t0, n = time.process_time(), time.perf_counter(), 0
        while n < len(msgs):
            n += gw.run_once(block_ms=None, count=20)
        out.append((mode, n, (time.perf_counter() - t0) / n * 1e6, (time.process_time() - c0) / n * 1e6))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small run (about 20 s)")
    ap.add_argument("--matches", type=int, default=None)
    ap.add_argument("--concurrency", type=int, default=16, help="matches in flight (simulate threads)")
    args = ap.parse_args()
    if shutil.which("redis-server") is None:
        print("redis-server not found on PATH", file=sys.stderr)
        return 2
    matches = args.matches or (40 if args.quick else 200)
    xadds = 5_000 if args.quick else 20_000
    proc, url, workdir = start_redis()
    try:
        raw = raw_xadd_rate(url, xadds)
        print(f"redis-server {url} (no persistence); python {sys.version.split()[0]}; {os.cpu_count()} CPUs")
        print(f"raw single-client XADD: {raw:,.0f} entries/s ({xadds} sequential round trips)")
        print()
        print(f"{'serve procs':>11} {'matches':>8} {'matches/s':>10} {'events/s':>9} {'cmd p50 ms':>11} "
              f"{'cmd p99 ms':>11} {'events/s ÷ raw XADD':>20} {'ok':>4}")
        for services in (1, 2):
            r = run_pipeline(url, services, matches, args.concurrency)
            ok = "yes" if not r["mismatches"] and not r["errors"] and r["finished"] == matches else "NO"
            print(f"{services:>11} {r['finished']:>8} {r['matches_per_s']:>10.1f} {r['events_per_s']:>9.0f} "
                  f"{r['command_latency_ms']['p50']:>11.2f} {r['command_latency_ms']['p99']:>11.2f} "
                  f"{r['events_per_s'] / raw:>20.3f} {ok:>4}")
        print()
        print(f"(simulate --concurrency {args.concurrency}: client round trip = XADD to the inbox, serve decides "
              "and appends, reply stream read; events/s counts stored match events)")
        print()
        print("command path alone (a recorded inbox replayed by one InboxConsumer + MatchService, one thread, "
              "no timers, no projections):")
        for mode, n, wall, cpu in gateway_cpu(url, 20 if args.quick else 60):
            print(f"  {mode:12s} {n:>6} commands: {wall:7.0f} µs wall, {cpu:7.0f} µs CPU per command")
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
