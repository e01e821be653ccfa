"""Pipeline benchmark: one `shuangkou serve` next to a same-protocol floor server, on one redis-server.

    python bench/pipeline.py [--redis URL] [--json] [--quick] [--runs N] [--scale K]

Without ``--redis`` it starts its own redis-server (no persistence) on a free loopback
port (with ``--redis`` the database is flushed between runs: give it a scratch server).

At concurrency 1, 16 and 64 (closed-loop clients: each sends one command and waits
for its reply before the next):

* **serve**: one ``shuangkou serve`` process (projections and in-process timers on)
  driven by ``shuangkou simulate --external --concurrency C`` (bot matches through the
  inbox, replies on ``sk:reply:…``): player commands/s and the client round trip p50/p99
  (on this plain Redis an accepted command's updates and reply are written by its append
  script: engine/store/append.lua);
* **floor**: :func:`floor_server`, the same protocol's Redis work and no game logic: read
  a batch from the inbox (XREADGROUP), one small append script per command with the
  batch's appends pipelined (one round trip), publish each command's reply and outbox
  entry and acknowledge the batch (one round trip); driven by :func:`floor_client`
  (C threads sending Play commands through GatewayClient, waiting for each reply);
* the ratio serve ÷ floor (commands/s; p50 latency);
* ``serve_cpu_us_per_command`` / ``floor_cpu_us_per_command``: the CPU µs per command of each
  process kind in those runs, ``server`` (serve, or the floor server: /proc), ``driver``
  (``simulate``'s own ``cpu_seconds``, or the floor client's) and ``redis`` (INFO cpu): on a
  machine where they all share the cores, the ratio is as much the drivers' as the servers'.
  The driver is counted over its play; the server and Redis over the drivers' whole run (their
  start-up and, for ``simulate``, its check of the finished matches included), which weighs
  most at c1. Each figure is the median of its runs: the three need not come from one run.

Each figure is the median of ``--runs`` runs (default 3), serve and floor alternating on
the same server, after one short warm-up run of each that is not counted; ``--scale K`` (default 4) makes each run K times longer (at c1 the
unscaled run is ~0.3 s, too short for a steady p50).  Then the Redis work per player command:

* ``redis_commands_per_command``: INFO commandstats delta over the serve runs ÷ commands
  (the whole pipeline: serve, its projections, and the clients' XADD/XREAD/state reads);
  ``redis_commands_per_command_by_name`` the same per command name (``xadd``, ``xack``…);
* ``serve_commands_per_command`` / ``serve_round_trips_per_command``: serve's own share,
  live: one more serve run per concurrency in a process whose Redis connections count what
  each thread sends (a pipeline is one round trip), until the projections have drained the
  feeds; ``inbox_round_trips_per_command`` is the player command loop's part (the main
  thread), ``projections_round_trips_per_command`` the projection runner's (its thread;
  issue 13 §2 target ≤ 0.3); medians over the concurrency levels, and per level;
  ``serve_round_trips_by_shape``: per level, thread and round trip (its commands, e.g.
  ``XACK×n+XREADGROUP``), the round trips per player command.

Prints figures; it is not a timed test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
LEVELS = (1, 16, 64)
FLOOR_GROUP = "floor"

# the floor's append: the command-id check, the version check and the writes of one event
# (a Play: no feed entry, engine.match.events.announced)
FLOOR_APPEND = """
local seen = redis.call('HGET', KEYS[2], ARGV[1])
if seen then return {'dup', seen} end
local v = redis.call('XLEN', KEYS[1]) + 1
redis.call('XADD', KEYS[1], v .. '-1', 'e', ARGV[2])
redis.call('HSET', KEYS[2], ARGV[1], v .. '-' .. v)
return {'ok', v}
"""


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
                proc.kill()
                raise
            time.sleep(0.05)


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else 0.0


def _proc_cpu(pid: int) -> float | None:
    """A live process's CPU seconds (user + system, /proc/<pid>/stat); None where there is no /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _spent(before: float | None, after: float | None) -> float | None:
    """The CPU seconds between two :func:`_proc_cpu` readings; None when either had none."""
    return None if before is None or after is None else after - before


def _redis_cpu(r: Any) -> float:
    info = r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _cpu_us(seconds: dict[str, float | None], commands: int) -> dict[str, float | None]:
    return {k: None if v is None else round(v / max(commands, 1) * 1e6, 1) for k, v in seconds.items()}


def _stop(p: subprocess.Popen) -> None:
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def _wait_ready(p: subprocess.Popen) -> None:
    end = time.monotonic() + 30
    while time.monotonic() < end:
        line = p.stdout.readline()
        if line.startswith("ready"):
            return
        if not line and p.poll() is not None:
            raise RuntimeError("the server exited before it was ready")
    raise RuntimeError("the server did not get ready within 30 s")


# -- the floor ------------------------------------------------------------------------------
def floor_server(url: str, stop: threading.Event | None = None, batch: int = 20) -> None:
    """Serve the inbox with the protocol's Redis work only (until SIGTERM or ``stop``)."""
    import msgpack
    import redis

    from engine.store import keys
    from engine.store.redis_store import ensure_group, stream_replies

    r = redis.Redis.from_url(url)
    # the bucket inboxes serve reads (issue 24): one XREADGROUP over all of them, as serve does
    inboxes = [keys.inbox_key(b) for b in range(keys.DEFAULT_BUCKETS)]
    for inbox in inboxes:
        ensure_group(r, inbox, FLOOR_GROUP)
    # EVALSHA in the pipeline (a registered Script would make redis-py ask SCRIPT EXISTS
    # before each pipeline: a round trip the protocol does not have)
    sha = r.script_load(FLOOR_APPEND)
    stop = stop or threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("ready", flush=True)
    while not stop.is_set():
        reply = r.xreadgroup(FLOOR_GROUP, "floor-1", {inbox: ">" for inbox in inboxes}, count=batch, block=200)
        by_stream = [(stream, es) for stream, es in stream_replies(reply) if es]
        entries = [e for _, es in by_stream for e in es]
        if not entries:
            continue
        commands = []
        pipe = r.pipeline(transaction=False)
        for _msg_id, fields in entries:
            c = msgpack.unpackb(fields[b"c"], raw=False)
            commands.append(c)
            match = c["match_id"]
            pipe.evalsha(sha, 2, f"sk:floor:{match}:events", f"sk:floor:{match}:cmds", c["command_id"], fields[b"c"])
        results = pipe.execute()
        pipe = r.pipeline(transaction=False)
        for (_msg_id, fields), c, (_kind, version) in zip(entries, commands, results):
            body = msgpack.packb({"match_id": c["match_id"], "command_id": c["command_id"], "version": version})
            pipe.xadd(keys.outbox_key(c.get("player", "x")), {"kind": "update", "match": c["match_id"], "body": body},
                      maxlen=100, approximate=True)
            pipe.xadd(fields[b"reply_to"], {"kind": "accepted", "match": c["match_id"],
                                            "command_id": c["command_id"], "version": version},
                      maxlen=1000, approximate=True)
        for stream, es in by_stream:
            pipe.xack(stream, FLOOR_GROUP, *[m for m, _ in es])
        pipe.execute()


def floor_client(url: str, concurrency: int, commands: int) -> dict[str, float]:
    """``commands`` Play commands from ``concurrency`` closed-loop clients; cps, p50/p99 ms."""
    import redis

    from engine.service.client import GatewayClient

    pool = redis.ConnectionPool.from_url(url, max_connections=concurrency + 4)
    per = max(1, commands // concurrency)
    latencies: list[list[float]] = [[] for _ in range(concurrency)]

    def worker(i: int) -> None:
        c = GatewayClient(redis.Redis(connection_pool=pool), reply_to=f"sk:reply:floor-{i}")
        last, mine = "0", latencies[i]
        for k in range(per):
            t0 = time.perf_counter()
            sent = c.play(f"floor-m{i}", f"floor-p{i}", "3 3", expected_version=k)
            while True:
                msgs = c.replies(last, block_ms=5000, count=10)
                if not msgs:
                    raise RuntimeError("the floor server did not answer within 5 s")
                last = msgs[-1].id
                if any(m.command_id == sent.command_id for m in msgs):
                    break
            mine.append(time.perf_counter() - t0)

    threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(concurrency)]
    t0, cpu0 = time.perf_counter(), time.process_time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    dt = time.perf_counter() - t0
    flat = [x for xs in latencies for x in xs]
    return {"cps": len(flat) / dt, "p50_ms": _pct(flat, 0.5) * 1000, "p99_ms": _pct(flat, 0.99) * 1000,
            "commands": len(flat), "cpu_seconds": time.process_time() - cpu0}


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONUNBUFFERED="1", SK_LOG_LEVEL="WARNING",
                PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))


def run_floor(url: str, concurrency: int, commands: int) -> dict[str, float]:
    import redis

    redis.Redis.from_url(url).flushdb()
    me = str(Path(__file__).resolve())
    server = subprocess.Popen([sys.executable, me, "--floor-server", url], cwd=ROOT, env=_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        _wait_ready(server)
        r = redis.Redis.from_url(url)
        server0, redis0 = _proc_cpu(server.pid), _redis_cpu(r)
        out = subprocess.run([sys.executable, me, "--floor-client", url, "--concurrency", str(concurrency),
                              "--commands", str(commands)], cwd=ROOT, env=_env(), capture_output=True,
                             text=True, timeout=600)
        server1, redis1 = _proc_cpu(server.pid), _redis_cpu(r)
        if out.returncode != 0:
            raise RuntimeError(out.stderr[-2000:])
        rep = json.loads(out.stdout)
        rep["cpu_us"] = _cpu_us({"server": _spent(server0, server1),
                                 "driver": rep.pop("cpu_seconds"), "redis": redis1 - redis0}, rep["commands"])
        return rep
    finally:
        _stop(server)


def _commandstats(r: Any) -> dict[str, int]:
    """Calls per command name (``xadd``, ``xinfo|groups``; a script's own calls included),
    INFO itself left out."""
    return {k[len("cmdstat_"):]: int(v["calls"]) for k, v in r.info("commandstats").items()
            if k.startswith("cmdstat_") and k != "cmdstat_info"}


def run_serve(url: str, concurrency: int, matches: int) -> dict[str, Any]:
    import redis

    r = redis.Redis.from_url(url)
    r.flushdb()
    serve = subprocess.Popen([sys.executable, "-m", "shuangkou", "serve", "--redis", url, "--consumer", "bench",
                              "--batch", "20"], cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    # the bots' own CPU (Python, one GIL per process): above 8 matches in flight, two client processes
    clients = 1 if concurrency < 16 else 2
    try:
        _wait_ready(serve)
        before = _commandstats(r)
        serve0, redis0 = _proc_cpu(serve.pid), _redis_cpu(r)
        t0 = time.perf_counter()
        sims = [subprocess.Popen([sys.executable, "-m", "shuangkou", "simulate", "-n", str(matches // clients),
                                  "--redis", url, "--external", "--json", "--seed", str(1 + k), "--concurrency",
                                  str(concurrency // clients), "--no-progress"], cwd=ROOT, env=_env(),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for k in range(clients)]
        outs = [p.communicate(timeout=900) for p in sims]
        wall = time.perf_counter() - t0
        serve1, redis1 = _proc_cpu(serve.pid), _redis_cpu(r)
        after = _commandstats(r)
        calls = {name: n - before.get(name, 0) for name, n in after.items() if n - before.get(name, 0)}
        reps = []
        for p, (stdout, stderr) in zip(sims, outs):
            if p.returncode not in (0, 1):
                raise RuntimeError(stderr[-2000:])
            rep = json.loads(stdout)
            if rep["errors"] or rep["finished"] != matches // clients:
                raise RuntimeError(f"simulate: {rep['finished']} finished, errors {rep['errors'][:3]}")
            reps.append(rep)
        commands = sum(x["commands"] for x in reps)
        # client latencies: the median of the processes' figures (each has half the load)
        return {"cps": commands / max(max(x["seconds"] for x in reps), 1e-9) if wall else 0.0,
                "p50_ms": statistics.median(x["command_latency_ms"]["p50"] for x in reps),
                "p99_ms": max(x["command_latency_ms"]["p99"] for x in reps), "commands": commands,
                "redis_calls": calls,
                # serve and Redis over the clients' whole run (their verification after the load
                # included: a little idle work); the driver (simulate) over its play only
                "cpu_us": _cpu_us({"server": _spent(serve0, serve1),
                                   "driver": sum(x["cpu_seconds"] for x in reps), "redis": redis1 - redis0},
                                  commands)}
    finally:
        _stop(serve)


# -- serve's own Redis work per command, counted live ------------------------------------
def counted_serve(serve_args: list[str]) -> int:
    """``shuangkou serve`` in this process with every Redis connection counted per thread
    (the player command loop is the main thread; ``projections``, ``ops``, the timers'
    threads); at exit prints one JSON line ``{"counts": {thread: {commands, round_trips}},
    "shapes": {thread: {shape: round trips}}}``: a shape is one round trip's commands
    (``XACK×n+XREADGROUP``; a script call named by the module that registered it)."""
    import collections
    import itertools

    from redis.commands.core import Script
    from redis.connection import Connection

    counts: dict[str, dict[str, int]] = collections.defaultdict(lambda: {"commands": 0, "round_trips": 0})
    shapes: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    scripts: dict[str, str] = {}
    local = threading.local()
    send_packed, send_command, pack_commands = (Connection.send_packed_command, Connection.send_command,
                                                Connection.pack_commands)
    script_init = Script.__init__

    def named_script(self: Any, registered_client: Any, script: Any) -> None:
        script_init(self, registered_client, script)
        caller = sys._getframe(2)  # Script <- register_script <- the module that registers it
        scripts.setdefault(self.sha, caller.f_globals.get("__name__", "?").rsplit(".", 1)[-1])  # the first: one script, many users

    def name(args: Any) -> str:
        n = args[0].decode() if isinstance(args[0], bytes) else str(args[0])
        if n.upper() == "EVALSHA":
            sha = args[1].decode() if isinstance(args[1], bytes) else str(args[1])
            return f"EVALSHA({scripts.get(sha, sha[:8])})"
        return n.upper()

    def mine() -> dict[str, int]:
        return counts[threading.current_thread().name]

    def packed_names(command: Any) -> list[str]:
        """The commands of a write packed without redis-py's packer (engine/store/wire.py)."""
        data = b"".join(command) if isinstance(command, (list, tuple)) else bytes(command)
        out: list[str] = []
        at = 0
        while data[at:at + 1] == b"*":
            end = data.index(b"\r\n", at)
            count, at = int(data[at + 1:end]), end + 2
            args: list[bytes] = []
            for _ in range(count):
                end = data.index(b"\r\n", at)
                size = int(data[at + 1:end])
                args.append(data[end + 2:end + 2 + size])
                at = end + 2 + size + 2
            out.append(name(args[:2]))
        return out

    def counted_send_packed(self: Any, command: Any, check_health: bool = True) -> None:
        mine()["round_trips"] += 1
        names = getattr(local, "names", None)
        if not names:  # packed by engine/store/wire.py
            names = packed_names(command) or ["?"]
            mine()["commands"] += len(names)
        local.names = []
        shape = "+".join(k + ("×n" if len(list(g)) > 1 else "") for k, g in itertools.groupby(names))
        shapes[threading.current_thread().name][shape] += 1
        send_packed(self, command, check_health)

    def counted_send_command(self: Any, *args: Any, **kwargs: Any) -> None:
        mine()["commands"] += 1
        local.names = [name(args)]
        send_command(self, *args, **kwargs)

    def counted_pack_commands(self: Any, commands: Any) -> Any:
        mine()["commands"] += len(commands)
        local.names = [name(c) for c in commands]
        return pack_commands(self, commands)

    Script.__init__ = named_script  # type: ignore[method-assign]
    Connection.send_packed_command = counted_send_packed  # type: ignore[method-assign]
    Connection.send_command = counted_send_command  # type: ignore[method-assign]
    Connection.pack_commands = counted_pack_commands  # type: ignore[method-assign]
    from shuangkou.cli import main as cli_main

    try:
        rc = cli_main(["serve", *serve_args])
    finally:
        print(json.dumps({"counts": dict(counts), "shapes": {k: dict(v) for k, v in shapes.items()}}), flush=True)
    return int(rc or 0)


def serve_redis_work(url: str, concurrency: int, matches: int) -> dict[str, Any]:
    """serve's own Redis work per player command, live: one counted serve (projections and
    in-process timers on) under ``concurrency`` clients; split by thread."""
    import redis

    r = redis.Redis.from_url(url)
    r.flushdb()
    me = str(Path(__file__).resolve())
    serve = subprocess.Popen([sys.executable, me, "--counted-serve", "--redis", url, "--consumer", "bench",
                              "--batch", "20"], cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    try:
        _wait_ready(serve)
        clients = 1 if concurrency < 16 else 2
        sims = [subprocess.Popen([sys.executable, "-m", "shuangkou", "simulate", "-n", str(matches // clients),
                                  "--redis", url, "--external", "--json", "--seed", str(11 + k), "--concurrency",
                                  str(concurrency // clients), "--no-progress"], cwd=ROOT, env=_env(),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                for k in range(clients)]
        outs = [p.communicate(timeout=900) for p in sims]
        commands = sum(json.loads(o)["commands"] for o, _ in outs)
        end = time.monotonic() + 20  # let the projections settle what the clients finished
        while time.monotonic() < end and not _feeds_drained(r):
            time.sleep(0.1)
        serve.send_signal(signal.SIGTERM)
        out, _ = serve.communicate(timeout=60)
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()
    report = json.loads([line for line in out.splitlines() if line.startswith('{"counts"')][-1])
    counts = report["counts"]
    n = max(commands, 1)
    projections = counts.get("projections", {"commands": 0, "round_trips": 0})
    inbox = counts.get("MainThread", {"commands": 0, "round_trips": 0})
    return {"commands": commands,
            "serve_commands_per_command": sum(c["commands"] for c in counts.values()) / n,
            "serve_round_trips_per_command": sum(c["round_trips"] for c in counts.values()) / n,
            "inbox_commands_per_command": inbox["commands"] / n,
            "inbox_round_trips_per_command": inbox["round_trips"] / n,
            "projections_commands_per_command": projections["commands"] / n,
            "projections_round_trips_per_command": projections["round_trips"] / n,
            "by_thread": counts,
            # round trips per player command by thread and shape (those of at least 0.005)
            "shapes": {t: {k: round(v / n, 3) for k, v in sorted(sh.items(), key=lambda kv: -kv[1]) if v / n >= 0.005}
                       for t, sh in report.get("shapes", {}).items()}}


def _feeds_drained(r: Any, group: str = "sk-projections") -> bool:
    from engine.store import keys

    for b in range(keys.DEFAULT_BUCKETS):
        try:
            groups = r.xinfo_groups(keys.feed_key(b))
        except Exception:
            continue
        for g in groups:
            name = g["name"].decode() if isinstance(g["name"], bytes) else g["name"]
            if name == group and (int(g.get("pending") or 0) or int(g.get("lag") or 0)):
                return False
    return True


def _median_cpu(runs: list[dict[str, float | None]]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for k in runs[0]:
        xs = [x[k] for x in runs if x[k] is not None]
        out[k] = round(statistics.median(xs), 1) if xs else None  # type: ignore[type-var]
    return out


def measure(url: str, runs: int, quick: bool, scale: int = 1) -> dict[str, Any]:
    import redis

    out: dict[str, Any] = {}
    serve_cmds = 0
    serve_calls: dict[str, int] = {}
    if not quick:  # one short run of each, not counted: the first run on a fresh server reads slower
        run_serve(url, 1, 4)
        run_floor(url, 1, 500)
    for c in LEVELS:
        matches = max(c, 4) if quick else max(2 * c, 10) * scale
        floor_commands = max(300 if quick else 2000, (20 if quick else 60) * c) * (1 if quick else scale)
        serve_runs, floor_runs = [], []
        for _ in range(runs):
            s = run_serve(url, c, matches)
            serve_runs.append(s)
            for name, n in s["redis_calls"].items():
                serve_calls[name] = serve_calls.get(name, 0) + n
            serve_cmds += s["commands"]
            floor_runs.append(run_floor(url, c, floor_commands))
        med = {k: statistics.median(x[k] for x in serve_runs) for k in ("cps", "p50_ms", "p99_ms")}
        fmed = {k: statistics.median(x[k] for x in floor_runs) for k in ("cps", "p50_ms", "p99_ms")}
        out[f"c{c}"] = {"scale": scale, "serve_cps": round(med["cps"], 1), "floor_cps": round(fmed["cps"], 1),
                        "ratio": round(med["cps"] / fmed["cps"], 3),
                        "p50_ms": round(med["p50_ms"], 3), "floor_p50_ms": round(fmed["p50_ms"], 3),
                        "p50_ratio": round(med["p50_ms"] / fmed["p50_ms"], 3),
                        "p99_ms": round(med["p99_ms"], 3), "floor_p99_ms": round(fmed["p99_ms"], 3),
                        "runs": runs, "serve_commands": int(statistics.median(x["commands"] for x in serve_runs)),
                        # each run's serve ÷ the floor run right after it (how much the ratio moves)
                        "run_ratios": [round(a["cps"] / b["cps"], 3) for a, b in zip(serve_runs, floor_runs)],
                        "run_p50_ratios": [round(a["p50_ms"] / b["p50_ms"], 3)
                                           for a, b in zip(serve_runs, floor_runs)],
                        # CPU µs per command of each process kind, medians of the runs: the server
                        # (serve / the floor server), the driver (simulate / the floor client), Redis
                        "serve_cpu_us_per_command": _median_cpu([x["cpu_us"] for x in serve_runs]),
                        "floor_cpu_us_per_command": _median_cpu([x["cpu_us"] for x in floor_runs])}
    out["redis_commands_per_command"] = round(sum(serve_calls.values()) / max(serve_cmds, 1), 2)
    out["redis_commands_per_command_by_name"] = {
        name: round(n / max(serve_cmds, 1), 3) for name, n in sorted(serve_calls.items(), key=lambda x: -x[1])}
    # serve's own Redis work, live (a counted serve: every connection of the process counted
    # per thread), at each concurrency; the figures are medians over the levels
    work = {f"c{c}": serve_redis_work(url, c, max(c, 4) if quick else max(2 * c, 10))
            for c in ((1, 16) if quick else LEVELS)}
    for key in ("serve_commands_per_command", "serve_round_trips_per_command", "inbox_round_trips_per_command",
                "projections_round_trips_per_command"):
        out[key] = round(statistics.median(w[key] for w in work.values()), 3)
    out["projections_round_trips_per_command_by_level"] = {k: round(w["projections_round_trips_per_command"], 3)
                                                           for k, w in work.items()}
    out["serve_round_trips_per_command_by_level"] = {k: round(w["serve_round_trips_per_command"], 3)
                                                     for k, w in work.items()}
    out["serve_round_trips_by_shape"] = {k: w["shapes"] for k, w in work.items()}
    info = redis.Redis.from_url(url).info("server")
    out["redis_version"] = info.get("redis_version")
    out["cpus"] = os.cpu_count()
    return out


def main() -> int:
    if sys.argv[1:2] == ["--counted-serve"]:
        return counted_serve(sys.argv[2:])
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--redis", metavar="URL", default=None, help="a scratch redis-server (flushed!)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--quick", action="store_true", help="small smoke run")
    ap.add_argument("--runs", type=int, default=None, help="runs per figure (default 3; --quick: 1)")
    ap.add_argument("--scale", type=int, default=4,
                    help="K times more matches and floor commands per run (steadier figures; default 4)")
    ap.add_argument("--floor-server", metavar="URL", help=argparse.SUPPRESS)
    ap.add_argument("--floor-client", metavar="URL", help=argparse.SUPPRESS)
    ap.add_argument("--concurrency", type=int, default=16, help=argparse.SUPPRESS)
    ap.add_argument("--commands", type=int, default=1000, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.floor_server:
        floor_server(args.floor_server)
        return 0
    if args.floor_client:
        print(json.dumps(floor_client(args.floor_client, args.concurrency, args.commands)))
        return 0
    runs = args.runs or (1 if args.quick else 3)
    proc = workdir = None
    url = args.redis
    if url is None:
        if shutil.which("redis-server") is None:
            print("redis-server not found on PATH", file=sys.stderr)
            return 2
        proc, url, workdir = start_redis()
    try:
        if args.scale < 1:
            print("--scale must be at least 1", file=sys.stderr)
            return 2
        res = measure(url, runs, args.quick, args.scale)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=10)
            shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        print(json.dumps(res))
        return 0
    print(f"redis {res['redis_version']} (no persistence); {res['cpus']} CPUs; medians of {runs} run(s)")
    print(f"{'conc':>4} {'serve cmd/s':>11} {'floor cmd/s':>11} {'ratio':>6} {'p50 ms':>7} {'floor p50':>9} "
          f"{'p50 ×':>6} {'p99 ms':>7} {'floor p99':>9}")
    for c in LEVELS:
        x = res[f"c{c}"]
        print(f"{c:>4} {x['serve_cps']:>11.0f} {x['floor_cps']:>11.0f} {x['ratio']:>6.3f} {x['p50_ms']:>7.2f} "
              f"{x['floor_p50_ms']:>9.2f} {x['p50_ratio']:>6.2f} {x['p99_ms']:>7.2f} {x['floor_p99_ms']:>9.2f}")
    print("per run (serve ÷ the floor run after it): "
          + "; ".join(f"c{c} cmd/s {res[f'c{c}']['run_ratios']} p50 {res[f'c{c}']['run_p50_ratios']}"
                      for c in LEVELS))
    print(f"Redis commands per player command, whole pipeline (INFO commandstats): "
          f"{res['redis_commands_per_command']} ("
          + ", ".join(f"{k} {v}" for k, v in res["redis_commands_per_command_by_name"].items() if v >= 0.01) + ")")
    print(f"serve's own (a counted serve, live): {res['serve_commands_per_command']} commands, "
          f"{res['serve_round_trips_per_command']} round trips per player command "
          f"({res['inbox_round_trips_per_command']} the command loop's, "
          f"{res['projections_round_trips_per_command']} the projections')")
    for level, threads in res["serve_round_trips_by_shape"].items():
        print(f"serve's round trips per player command at {level}, by thread and shape:")
        for thread, shapes in sorted(threads.items()):
            if shapes:
                print(f"  {thread}: " + ", ".join(f"{k} {v}" for k, v in shapes.items()))
    print("projections' round trips per player command by concurrency: "
          + ", ".join(f"{k} {v}" for k, v in res["projections_round_trips_per_command_by_level"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
