"""Event store throughput: the full Lua append path against raw XADD, and replay speed.

    python bench/store.py [--quick] [--runs 5]

Starts its own redis-server on a free loopback port (or uses $REDIS_URL — the
bench writes under ``bench:*`` and the store's ``sk:*`` keys and FLUSHES THE DB,
so point it at a scratch database).  Prints figures (median of the runs); it
asserts nothing about time.  Measured, all from one process and one connection:

* appends/s through ``RedisEventStore.append`` (pydantic event -> msgpack, the
  Lua script: version + command-id check, XADD, deadline, match set, command id; a
  feed notification only for a batch that is announced, not for plays and passes alone)
  with 1 event per call like a real turn, and with batches of 2–3 events (a play that
  ends the match, a timeout + auto pass);
* the same with pre-encoded payloads (``append_encoded``: the script's own cost);
* raw XADD of a payload of the same size, one XADD per round trip (redis-py);
* ``redis-benchmark`` XADD with 1 client (no Python at all), when the binary is there;
* replay: events/s folded through ``engine.match.evolve.apply`` (decode included / excluded).
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import redis  # noqa: E402

from engine.match.events import CardsPlayed, EventBase, Passed, Reading, decode_event, encode_event  # noqa: E402
from engine.match.deadline import Deadline  # noqa: E402
from engine.store.redis_store import RedisEventStore  # noqa: E402

MATCHES = 200


# -- a throw-away redis-server --------------------------------------------------------------------
def start_redis() -> tuple[subprocess.Popen, str, str]:
    path = shutil.which("redis-server")
    if path is None:
        sys.exit("redis-server not found: install it or set REDIS_URL")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    workdir = tempfile.mkdtemp(prefix="sk-bench-")
    proc = subprocess.Popen([path, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", workdir, "--loglevel", "warning"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    for _ in range(200):
        try:
            if redis.Redis.from_url(url).ping():
                return proc, url, workdir
        except redis.ConnectionError:
            time.sleep(0.025)
    proc.kill()
    sys.exit("redis-server did not start")


# -- realistic events ---------------------------------------------------------------------------
def play(match_id: str, seq: int, cmd: str) -> CardsPlayed:
    return CardsPlayed(match_id=match_id, seq=seq, ts=1_790_000_000_000 + seq, command_id=cmd,
                       player="player-alice-0001", cards=(12, 13, 66), by="player",
                       reading=Reading(kind="triple", top=7, size=3, counts=(3,)))


def passed(match_id: str, seq: int, cmd: str) -> Passed:
    return Passed(match_id=match_id, seq=seq, ts=1_790_000_000_000 + seq, command_id=cmd,
                  player="player-bob-0002", by="auto")


def turn_events(match_id: str, after: int, n: int, cmd: str) -> list[EventBase]:
    return [(play if (after + i) % 2 == 0 else passed)(match_id, after + 1 + i, cmd) for i in range(n)]


# -- measurements -------------------------------------------------------------------------------
class AppendWorkload:
    """Appends spread over MATCHES matches, each at the right version (so none is refused)."""

    def __init__(self, store: RedisEventStore, batch: tuple[int, ...], tag: str, mode: str):
        self.store, self.batch, self.tag, self.mode = store, batch, tag, mode
        self.versions = {f"{tag}-{i}": 0 for i in range(MATCHES)}
        self.ids = list(self.versions)
        self.k = 0

    def prepare(self, ops: int) -> list:
        """Untimed part: for "encoded" the payloads, for "objects" the event objects."""
        plan = []
        for _ in range(ops):
            m = self.ids[self.k % MATCHES]
            n = self.batch[self.k % len(self.batch)]
            v = self.versions[m]
            cmd = f"{self.tag}-c{self.k}"
            dl = Deadline(m, v + n, 1_790_000_030_000 + self.k, "turn")
            if self.mode == "full":
                plan.append((m, v, cmd, n, dl))
            else:
                events = turn_events(m, v, n, cmd)
                plan.append((m, v, cmd, [encode_event(e) for e in events] if self.mode == "encoded" else events, dl))
            self.versions[m] = v + n
            self.k += 1
        return plan

    def run(self, plan: list) -> tuple[int, float]:
        """Timed part; returns (events appended, seconds)."""
        store = self.store
        t0 = time.perf_counter()
        if self.mode == "full":  # like a real turn: events built and encoded in the loop
            total = 0
            for m, v, cmd, n, dl in plan:
                store.append(m, v, cmd, turn_events(m, v, n, cmd), dl)
                total += n
        elif self.mode == "encoded":
            for m, v, cmd, payloads, dl in plan:
                store.append_encoded(m, v, cmd, payloads, dl)
            total = sum(len(p[3]) for p in plan)
        else:
            for m, v, cmd, events, dl in plan:
                store.append(m, v, cmd, events, dl)
            total = sum(len(p[3]) for p in plan)
        return total, time.perf_counter() - t0


class RawXadd:
    def __init__(self, client: redis.Redis, payload: bytes, tag: str):
        self.client, self.payload = client, payload
        self.keys = [f"bench:{tag}:{i}" for i in range(MATCHES)]
        self.k = 0

    def prepare(self, ops: int) -> list:
        plan = [self.keys[(self.k + i) % MATCHES] for i in range(ops)]
        self.k += ops
        return plan

    def run(self, plan: list) -> tuple[int, float]:
        xadd, fields = self.client.xadd, {"e": self.payload}
        t0 = time.perf_counter()
        for key in plan:
            xadd(key, fields)
        return len(plan), time.perf_counter() - t0


def server_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def interleaved(client: redis.Redis, workloads: dict[str, object], ops: int,
                chunk: int = 250) -> dict[str, tuple[float, float, float]]:
    """Per workload: (events/s wall clock, client CPU µs/call, server CPU µs/call).

    The workloads run in alternating chunks so that a busy machine slows them
    all alike (the ratios are what matters; absolute rates swing with the load
    of a shared machine, and CPU times inflate under contention too).  A
    "call" is one round trip."""
    done = {k: 0 for k in workloads}
    calls = {k: 0 for k in workloads}
    secs = {k: 0.0 for k in workloads}
    ccpu = {k: 0.0 for k in workloads}
    scpu = {k: 0.0 for k in workloads}
    for _ in range(max(1, ops // chunk)):
        for name, w in workloads.items():
            plan = w.prepare(chunk)  # type: ignore[attr-defined]
            s0 = server_cpu(client)
            c0 = time.process_time()
            n, t = w.run(plan)  # type: ignore[attr-defined]
            ccpu[name] += time.process_time() - c0
            scpu[name] += server_cpu(client) - s0
            done[name] += n
            calls[name] += len(plan)
            secs[name] += t
    return {k: (done[k] / secs[k], ccpu[k] / calls[k] * 1e6, scpu[k] / calls[k] * 1e6) for k in workloads}


def redis_benchmark(url: str, n: int, payload_len: int) -> float | None:
    binary = shutil.which("redis-benchmark")
    if binary is None:
        return None
    u = redis.connection.parse_url(url)
    cmd = [binary, "-h", u.get("host", "127.0.0.1"), "-p", str(u.get("port", 6379)), "-n", str(n),
           "-c", "1", "--csv", "XADD", "bench:rb", "*", "e", "x" * payload_len]
    if u.get("password"):
        cmd[1:1] = ["-a", u["password"]]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in out.splitlines()[::-1]:
        parts = [p.strip('"') for p in line.split('","')]
        if len(parts) >= 2:
            try:
                return float(parts[1])
            except ValueError:
                continue
    return None


def sample_match() -> list[EventBase]:
    """A real match through MatchService: each leader plays its lowest single, the other passes."""
    from engine.service.shuffle import seeded_random
    from engine.match.commands import CreateMatch, Pass, Play, Ready, Sit
    from engine.config import load_config
    from engine.service.service import FixedBalances, MatchService
    from engine.store.memory import InMemoryEventStore

    store = InMemoryEventStore()
    svc = MatchService(store, clock=lambda: 1_790_000_000_000, rng=seeded_random(3),
                       balances=FixedBalances({"a": 100_000, "b": 100_000}))  # from the ledger
    cfg = load_config("points").to_record()
    k = 0

    def run(cmd_cls, **kw):
        nonlocal k
        k += 1
        return svc.execute(cmd_cls(command_id=f"c{k}", match_id="replay", **kw))

    run(CreateMatch, config=cfg)
    run(Sit, player="a")
    run(Sit, player="b")
    run(Ready, player="a")
    out = run(Ready, player="b")
    state = out.state
    while state.phase == "playing":
        p = state.current_player
        if state.to_beat is None:
            out = run(Play, player=p, cards=(min(state.seat(state.turn).hand),))
        else:
            out = run(Pass, player=p)
        if out.rejection is not None:
            raise RuntimeError(out.rejection.reason)
        state = out.state
    return store.load("replay")


def bench_replay(runs: int, quick: bool) -> list[str]:
    try:
        from engine.match.evolve import apply
        from engine.match.state import MatchState
    except ImportError:
        apply = None
    lines = []
    try:
        events = sample_match()
    except Exception as exc:  # the domain is being written by others: fall back to synthetic events
        lines.append(f"  (sample match failed: {exc!r}; synthetic plays/passes, decode only)")
        events, apply = turn_events("replay", 0, 60, "c"), None
    payloads = [encode_event(e) for e in events]
    reps = 50 if quick else 300
    decode_rates, fold_rates, both_rates = [], [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        for _ in range(reps):
            decoded = [decode_event(p) for p in payloads]
        decode_rates.append(reps * len(payloads) / (time.perf_counter() - t0))
        if apply is not None:
            t0 = time.perf_counter()
            for _ in range(reps):
                s = MatchState(match_id="replay")
                for e in events:
                    s = apply(s, e)
            fold_rates.append(reps * len(events) / (time.perf_counter() - t0))
            t0 = time.perf_counter()
            for _ in range(reps):
                s = MatchState(match_id="replay")
                for p in payloads:
                    s = apply(s, decode_event(p))
            both_rates.append(reps * len(events) / (time.perf_counter() - t0))
    assert decoded == events
    lines.append(f"  sample match: {len(events)} events ({sum(map(len, payloads)) // len(payloads)} B/event avg)")
    lines.append(f"  decode_event only             {statistics.median(decode_rates):>12,.0f} events/s")
    if apply is not None:
        lines.append(f"  evolve.apply (decoded)        {statistics.median(fold_rates):>12,.0f} events/s")
        lines.append(f"  decode + evolve.apply         {statistics.median(both_rates):>12,.0f} events/s"
                     f"   (a {len(events)}-event match rebuilds in "
                     f"{len(events) / statistics.median(both_rates) * 1e3:.2f} ms)")
    else:
        lines.append("  engine.match.evolve is not available: decode_event only")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer operations (a smoke run)")
    ap.add_argument("--runs", type=int, default=5, help="runs per figure (median reported)")
    args = ap.parse_args()
    ops = 2_000 if args.quick else 20_000
    runs = 3 if args.quick else args.runs

    url = os.environ.get("REDIS_URL")
    proc = workdir = None
    if not url:
        proc, url, workdir = start_redis()
    client = redis.Redis.from_url(url)
    try:
        client.flushdb()
        info = client.info("server")
        store = RedisEventStore(client)
        payload = encode_event(play("m", 1, "c-00000000"))
        print(f"redis {info['redis_version']} at {url}; {ops} ops/run, median of {runs} runs, "
              f"{MATCHES} matches, event ~{len(payload)} B")
        results: dict[str, list[float]] = {}

        def record(name: str, value: float) -> None:
            results.setdefault(name, []).append(value)

        ratios: list[float] = []
        cpu: dict[str, list[tuple[float, float]]] = {}
        for r in range(runs):
            rates = interleaved(client, {
                "raw": RawXadd(client, payload, f"r{r}"),
                "full1": AppendWorkload(store, (1,), f"f1r{r}", "full"),
                "full23": AppendWorkload(store, (2, 3), f"f23r{r}", "full"),
                "obj1": AppendWorkload(store, (1,), f"o1r{r}", "objects"),
                "enc1": AppendWorkload(store, (1,), f"e1r{r}", "encoded"),
                "enc23": AppendWorkload(store, (2, 3), f"e23r{r}", "encoded"),
            }, ops)
            for k, (rate, c_us, s_us) in rates.items():
                record(k, rate)
                cpu.setdefault(k, []).append((c_us, s_us))
            ratios.append(rates["full1"][0] / rates["raw"][0])
            client.flushdb()
        med = {k: statistics.median(v) for k, v in results.items()}
        raw = med["raw"]
        med_cpu = {k: (statistics.median(c for c, _ in v), statistics.median(s_ for _, s_ in v))
                   for k, v in cpu.items()}
        print("append (one process, one connection): wall-clock events/s, then CPU per call "
              "(this process / redis-server)")
        rows = [
            ("raw XADD, 1 per round trip", "raw"),
            ("store.append 1 ev/call, events built+encoded in loop", "full1"),
            ("store.append 2-3 ev/call, events built+encoded", "full23"),
            ("store.append 1 ev/call, event objects prebuilt", "obj1"),
            ("append_encoded 1 ev/call (pre-encoded)", "enc1"),
            ("append_encoded 2-3 ev/call (pre-encoded)", "enc23"),
        ]
        print(f"  {'':<55}{'events/s':>10}  {'vs raw':>7}  {'client µs':>9}  {'server µs':>9}")
        for label, key in rows:
            c_us, s_us = med_cpu[key]
            extra = "" if key == "raw" else f"{med[key] / raw:7.1%}"
            print(f"  {label:<55}{med[key]:>10,.0f}  {extra:>7}  {c_us:9.1f}  {s_us:9.1f}")
        ratio = statistics.median(ratios)
        print(f"  target: full append (1 ev/call) >= 40% of raw XADD -> "
              f"{'met' if ratio >= 0.4 else 'NOT met'} (median of per-run ratios {ratio:.1%}, "
              f"runs: {', '.join(f'{x:.0%}' for x in ratios)})")
        cpu_raw, cpu_full = sum(med_cpu["raw"]), sum(med_cpu["full1"])
        print(f"  CPU per call (client+server): raw XADD {cpu_raw:.1f} µs, full append {cpu_full:.1f} µs"
              f" -> CPU-bound ratio {cpu_raw / cpu_full:.1%}")
        rb = redis_benchmark(url, ops * 5, len(payload))
        if rb is not None:
            print(f"  redis-benchmark XADD -c 1 (C client, no Python)        {rb:>10,.0f}")
        else:
            print("  redis-benchmark: not available")
        print("replay:")
        for line in bench_replay(runs, args.quick):
            print(line)
    finally:
        client.close()
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=10)
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
