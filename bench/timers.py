"""Timer lateness under load: N idle matches, every turn times out.

    python bench/timers.py [--matches N] [--seconds S] [--runs R] [--legacy | --no-baseline]
                           [--threads T] [--processes P] [--quick]

Starts a redis-server on a free loopback port (or uses REDIS_URL; the event
store and dramatiq get separate databases), one real dramatiq worker process
(``python -m dramatiq workers.actors -p P -t T``), and N matches in which
nobody ever acts (turn clocks of 1–2 s, trusteeship never starts), so every
turn ends in a TurnTimedOut fired by the worker.  Lateness of a timeout =
the TurnTimedOut event's ``ts`` (when it was decided and appended) minus
the deadline ``at_ms`` it fired for (recomputed by folding the stream).
Prints figures; asserts nothing.

Two timer paths, measured in the same run on the same redis-server, alternating,
``--runs`` times each (default 3), then the medians and their ratio:

* ``dispatch`` (today's): nothing is sent on commit; the worker's dispatcher moves
  the due deadlines from the store's index into dramatiq (workers/dispatcher.py);
* ``legacy`` (the baseline): every commit sends a delayed ``fire_deadline`` message
  (``SK_TIMER_MESSAGES=1``, no dispatcher).  Each match's Sit, Sit and Ready commits
  schedule 30 s ``ready`` timers that the last Ready makes stale, so ~3 stale messages
  per match come due 25–30 s after creation (docs/WORKERS.md "Lateness").

"Stale deliveries" are timer messages that committed nothing (stale, duplicate,
conflict, refused), from the worker's counts logged at shutdown; "sweeper rescues"
are deadlines the sweeper fired.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _start_redis():
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import start_redis_server  # type: ignore[import-not-found]

    return start_redis_server()


def _url(base: str, db: int) -> str:
    return base.rsplit("/", 1)[0] + f"/{db}"


def pct(xs: list[int], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = min(len(xs) - 1, max(0, int(round(p / 100 * (len(xs) - 1)))))
    return float(xs[k])


_STATS = re.compile(r"timer stats: (.*?); dispatched (\d+), dispatched again (\d+)")


def worker_stats(text: str) -> dict[str, int]:
    """Sum of the ``timer stats:`` lines the worker processes log at shutdown."""
    total: dict[str, int] = {}
    for m in _STATS.finditer(text):
        for item in m.group(1).split():
            if "=" in item:
                k, v = item.split("=", 1)
                total[k] = total.get(k, 0) + int(v)
        total["dispatched"] = total.get("dispatched", 0) + int(m.group(2))
        total["dispatched_again"] = total.get("dispatched_again", 0) + int(m.group(3))
    return total


def group_cpu_s(pgid: int) -> float:
    """CPU seconds (user + system) of the processes in process group ``pgid`` (Linux /proc)."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # field 5 of stat: the process group
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def run_once(mode: str, args: argparse.Namespace, base: str) -> dict:
    import redis

    from engine.config import load_config
    from engine.match.commands import CreateMatch, Ready, Sit
    from engine.match.events import TurnTimedOut
    from engine.match.evolve import apply
    from engine.match.state import MatchState
    from engine.service.service import MatchService
    from engine.store.redis_store import RedisEventStore
    from workers.broker import make_broker
    from workers.clock import SystemClock
    from workers.scheduler import BrokerSender, DeadlineScheduler

    store_url, broker_url = _url(base, 6), _url(base, 7)
    for u in (store_url, broker_url):
        c = redis.Redis.from_url(u)
        c.flushdb()
        c.close()
    legacy = mode == "legacy"
    log_path = Path(tempfile.mkstemp(prefix=f"sk-bench-timers-{mode}-", suffix=".log")[1])
    env = dict(os.environ, SK_REDIS_URL=store_url, SK_BROKER_URL=broker_url,
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if legacy:
        env.update(SK_TIMER_MESSAGES="1", SK_DISPATCH_INTERVAL_MS="0")
    else:
        env.update(SK_TIMER_MESSAGES="0")
    if args.no_publish:
        env["SK_TIMERS_PUBLISH"] = "0"
    log = open(log_path, "wb")
    worker = subprocess.Popen([sys.executable, "-m", "dramatiq", "workers.actors",
                               "-p", str(args.processes), "-t", str(args.threads)],
                              env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    store = RedisEventStore.from_url(store_url)
    clock = SystemClock()
    broker = make_broker(broker_url) if legacy else None
    on_commit = DeadlineScheduler(clock, BrokerSender(broker)).on_commit if broker is not None else None
    service = MatchService(store, clock, random.Random(1), on_commit=on_commit)
    rnd = random.Random(2)
    base_cfg = load_config("points")
    load_start = os.getloadavg()[0]
    try:
        time.sleep(1.0)  # let the worker boot
        t_create = time.monotonic()
        mids = []
        for i in range(args.matches):
            cfg = base_cfg.model_copy(update={"turn_seconds": round(rnd.uniform(args.turn_min, args.turn_max), 3),
                                              "timeouts_before_trustee": 100})  # the config maximum
            mid = f"bench-{i}"
            for n, cmd in enumerate([CreateMatch(command_id="x", match_id=mid, config=cfg.to_record()),
                                     Sit(command_id="x", match_id=mid, player=f"p{i}a"),
                                     Sit(command_id="x", match_id=mid, player=f"p{i}b"),
                                     Ready(command_id="x", match_id=mid, player=f"p{i}a"),
                                     Ready(command_id="x", match_id=mid, player=f"p{i}b")]):
                out = service.execute(cmd.model_copy(update={"command_id": f"{mid}-{n}"}))
                assert out.rejection is None, out.rejection
            mids.append(mid)
        created = time.monotonic() - t_create
        print(f"  [{mode}] created {len(mids)} matches in {created:.1f} s; timers running…", flush=True)
        t_run = time.monotonic()
        cpu_run = group_cpu_s(worker.pid)
        while time.monotonic() - t_run < args.seconds:
            time.sleep(1.0)
            if worker.poll() is not None:
                print("  the worker died; see", log_path)
                break
        end_ms = clock.now_ms()
        cpu_pct = 100 * (group_cpu_s(worker.pid) - cpu_run) / (time.monotonic() - t_run)
        load_end = os.getloadavg()[0]
        overdue = store.due_deadlines(end_ms - 1000, limit=10_000)
    finally:
        if worker.poll() is None:
            os.kill(worker.pid, signal.SIGTERM)  # the dramatiq parent stops its children gracefully
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()
        log.close()
        if broker is not None:
            broker.close()

    lateness: list[int] = []
    steady: list[int] = []  # deadlines from 10 s after the last match was created
    steady_from = end_ms - int(args.seconds * 1000) + 10_000
    total_events = 0
    for mid in mids:
        events = store.load(mid)
        total_events += len(events)
        st = MatchState(match_id=mid)
        for e in events:
            if isinstance(e, TurnTimedOut):
                d = st.deadline()
                if d is not None and d.kind == "turn":
                    lateness.append(e.ts - d.at_ms)
                    if d.at_ms >= steady_from:
                        steady.append(e.ts - d.at_ms)
            st = apply(st, e)
    store.client.close()
    text = log_path.read_text(errors="replace")
    stats = worker_stats(text)
    stale = sum(stats.get(k, 0) for k in ("stale", "duplicate", "conflict", "rejected"))
    n = len(lateness)
    r = {
        "mode": mode, "timeouts": n, "timeouts_per_s": n / args.seconds,
        "p50": pct(lateness, 50), "p99": pct(lateness, 99), "max": float(max(lateness)) if lateness else float("nan"),
        "steady_p99": pct(steady, 99), "cpu_pct": cpu_pct,
        "stale": stale, "rescues": stats.get("committed_sweeper", text.count("sweeper fired")),
        "dispatched_again": stats.get("dispatched_again", 0), "overdue_end": len(overdue),
        "errors": text.count("[ERROR]") + text.count("[CRITICAL]"), "stats_found": bool(stats),
        "load": (load_start, load_end), "log": str(log_path), "events": total_events,
    }
    print(f"  [{mode}] timeouts {n} ({r['timeouts_per_s']:.0f}/s), lateness ms p50 {r['p50']:.0f} "
          f"p99 {r['p99']:.0f} max {r['max']:.0f} (steady state p99 {r['steady_p99']:.0f}); worker CPU "
          f"{cpu_pct:.0f}% of a core; stale deliveries {stale}; sweeper rescues {r['rescues']}; "
          f"dispatched again {r['dispatched_again']}; > 1 s overdue at the end {len(overdue)}; "
          f"errors logged {r['errors']}; load {load_start:.1f}->{load_end:.1f}"
          + ("" if stats else "  (no worker stats line: see " + str(log_path) + ")"), flush=True)
    return r


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--matches", type=int, default=500)
    ap.add_argument("--seconds", type=float, default=30.0, help="how long the timers run, per run")
    ap.add_argument("--runs", type=int, default=3, help="runs of each path (medians are printed)")
    ap.add_argument("--legacy", action="store_true", help="only the old path: a timer message per commit")
    ap.add_argument("--no-baseline", action="store_true", help="only the dispatcher (no legacy runs)")
    ap.add_argument("--processes", type=int, default=1)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--turn-min", type=float, default=1.0)
    ap.add_argument("--turn-max", type=float, default=2.0)
    ap.add_argument("--no-publish", action="store_true", help="workers do not publish player updates")
    ap.add_argument("--quick", action="store_true", help="100 matches, 15 s, 1 run")
    args = ap.parse_args(argv)
    if args.quick:
        args.matches, args.seconds, args.runs = min(args.matches, 100), min(args.seconds, 15.0), 1
    modes = ["legacy"] if args.legacy else ["dispatch"] if args.no_baseline else ["legacy", "dispatch"]

    redis_proc = workdir = None
    base = os.environ.get("REDIS_URL")
    if not base:
        redis_proc, base, workdir = _start_redis()
    print(f"bench/timers: {args.matches} idle matches, turn clocks {args.turn_min}-{args.turn_max} s, "
          f"{args.seconds:.0f} s x {args.runs} run(s) of {' and '.join(modes)}, worker -p {args.processes} "
          f"-t {args.threads}, publish {'off' if args.no_publish else 'on'}; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs", flush=True)
    results: dict[str, list[dict]] = {m: [] for m in modes}
    try:
        for run in range(args.runs):
            for mode in modes:
                print(f"run {run + 1}/{args.runs}, {mode}:", flush=True)
                results[mode].append(run_once(mode, args, base))
    finally:
        if redis_proc is not None:
            from conftest import stop_redis_server  # type: ignore[import-not-found]

            stop_redis_server(redis_proc, workdir)

    def med(mode: str, key: str) -> float:
        return statistics.median(r[key] for r in results[mode])

    keys_ = [("p50", "lateness p50 ms"), ("p99", "lateness p99 ms"), ("max", "lateness max ms"),
             ("steady_p99", "steady-state p99 ms"), ("cpu_pct", "worker CPU % of core"),
             ("stale", "stale deliveries"), ("rescues", "sweeper rescues"), ("timeouts_per_s", "timeouts/s")]
    print(f"\nmedians of {args.runs} run(s) ({args.matches} matches):")
    print(f"{'':22}" + "".join(f"{m:>12}" for m in modes) + ("       ratio" if len(modes) == 2 else ""))
    for key, label in keys_:
        row = f"{label:22}" + "".join(f"{med(m, key):12.0f}" for m in modes)
        if len(modes) == 2:
            a, b = med("dispatch", key), med("legacy", key)
            row += f"{(a / b if b else float('nan')):12.2f}"
        print(row)
    loads = [x for rs in results.values() for r in rs for x in r["load"]]
    print(f"load average during the runs: {min(loads):.1f}–{max(loads):.1f} (other processes skew the figures)")
    if "dispatch" in results:
        d = results["dispatch"]
        target = med("dispatch", "p99") < 500 and all(r["stale"] == 0 for r in d) and all(r["rescues"] == 0 for r in d)
        print(f"target (dispatch: p99 < 500 ms, 0 stale deliveries, 0 sweeper rescues): "
              f"{'met' if target else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
