"""Timer lateness under load: N idle matches, every turn times out.

    python bench/timers.py [--matches N] [--seconds S] [--threads T] [--processes P] [--quick]

Starts a redis-server on a free loopback port (or uses REDIS_URL; the event
store and dramatiq get separate databases), one real dramatiq worker process
(``python -m dramatiq workers.actors -p P -t T``), and N matches in which
nobody ever acts (turn clocks of 1–2 s, trusteeship never starts), so every
turn ends in a TurnTimedOut fired by the worker.  Lateness of a timeout =
the TurnTimedOut event's ``ts`` (when it was decided and appended) minus
the deadline ``at_ms`` it fired for (recomputed by folding the stream).
Prints figures; asserts nothing.

The window 25–30 s after creation carries an extra load: each match's Sit,
Sit and Ready commits scheduled 30 s ``ready`` timers that the last Ready made
stale, so ~3 stale messages per match come due there within a few seconds
(docs/WORKERS.md "Lateness").
"""

from __future__ import annotations

import argparse
import os
import random
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--matches", type=int, default=500)
    ap.add_argument("--seconds", type=float, default=45.0, help="how long the timers run")
    ap.add_argument("--processes", type=int, default=1)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--turn-min", type=float, default=1.0)
    ap.add_argument("--turn-max", type=float, default=2.0)
    ap.add_argument("--no-publish", action="store_true", help="workers do not publish player updates")
    ap.add_argument("--quick", action="store_true", help="100 matches, 15 s")
    args = ap.parse_args(argv)
    if args.quick:
        args.matches, args.seconds = min(args.matches, 100), min(args.seconds, 15.0)

    import redis

    from engine.match.commands import CreateMatch, Ready, Sit
    from engine.config import load_config
    from engine.match.events import TurnTimedOut
    from engine.match.evolve import apply
    from engine.service.service import MatchService
    from engine.match.state import MatchState
    from engine.store.redis_store import RedisEventStore
    from workers.broker import make_broker
    from workers.clock import SystemClock
    from workers.scheduler import BrokerSender, DeadlineScheduler

    redis_proc = workdir = None
    base = os.environ.get("REDIS_URL")
    if not base:
        redis_proc, base, workdir = _start_redis()
    store_url, broker_url = _url(base, 6), _url(base, 7)
    for u in (store_url, broker_url):
        redis.Redis.from_url(u).flushdb()

    log_path = Path(tempfile.mkstemp(prefix="sk-bench-timers-", suffix=".log")[1])
    env = dict(os.environ, SK_REDIS_URL=store_url, SK_BROKER_URL=broker_url,
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if args.no_publish:
        env["SK_TIMERS_PUBLISH"] = "0"
    log = open(log_path, "wb")
    worker = subprocess.Popen([sys.executable, "-m", "dramatiq", "workers.actors",
                               "-p", str(args.processes), "-t", str(args.threads)],
                              env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                              start_new_session=True)
    store = RedisEventStore.from_url(store_url)
    broker = make_broker(broker_url)
    clock = SystemClock()
    scheduler = DeadlineScheduler(clock, BrokerSender(broker))
    service = MatchService(store, clock, random.Random(1), on_commit=scheduler.on_commit)
    rnd = random.Random(2)
    base_cfg = load_config("points")
    print(f"bench/timers: {args.matches} idle matches, turn clocks {args.turn_min}-{args.turn_max} s, "
          f"{args.seconds:.0f} s, worker -p {args.processes} -t {args.threads}, "
          f"publish {'off' if args.no_publish else 'on'}; load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} CPUs")
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
        print(f"created {len(mids)} matches in {created:.1f} s; timers running…")
        t_run = time.monotonic()
        while time.monotonic() - t_run < args.seconds:
            time.sleep(1.0)
            if worker.poll() is not None:
                print("the worker died; see", log_path)
                break
        end_ms = clock.now_ms()
        load_end = os.getloadavg()[0]
        overdue = store.due_deadlines(end_ms - 1000, limit=10_000)
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGTERM)
            try:
                worker.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait()
        log.close()

    lateness: list[int] = []
    by_window: dict[int, list[int]] = {}
    run_start_ms = end_ms - int(args.seconds * 1000)
    by_sweeper = 0
    total_events = 0
    finished = 0
    for mid in mids:
        events = store.load(mid)
        total_events += len(events)
        st = MatchState(match_id=mid)
        for e in events:
            if isinstance(e, TurnTimedOut):
                d = st.deadline()
                if d is not None and d.kind == "turn":
                    lateness.append(e.ts - d.at_ms)
                    w = max(0, (d.at_ms - run_start_ms) // 5000)
                    by_window.setdefault(int(w), []).append(e.ts - d.at_ms)
            st = apply(st, e)
        finished += st.phase == "finished"
    text = log_path.read_text(errors="replace")
    by_sweeper = text.count("sweeper fired")
    errors = text.count("[ERROR]") + text.count("[CRITICAL]")
    if redis_proc is not None:
        from conftest import stop_redis_server  # type: ignore[import-not-found]

        stop_redis_server(redis_proc, workdir)

    n = len(lateness)
    print(f"timeouts fired: {n} ({n / args.seconds:.0f}/s over the run), events stored: {total_events}, "
          f"matches finished: {finished}")
    if n:
        print(f"lateness ms: p50 {pct(lateness, 50):.0f}  p90 {pct(lateness, 90):.0f}  "
              f"p99 {pct(lateness, 99):.0f}  max {max(lateness)}  mean {statistics.fmean(lateness):.1f}  "
              f"min {min(lateness)}")
        steady = [x for w, xs in by_window.items() if w >= 2 for x in xs]
        if steady:
            print(f"steady state (deadlines 10 s after all matches were created): {len(steady)} timeouts, "
                  f"p50 {pct(steady, 50):.0f}  p99 {pct(steady, 99):.0f}  max {max(steady)} ms")
        print("by 5 s window of deadline time (from the end of creation): " + "  ".join(
            f"[{w * 5}s n={len(xs)} p99={pct(xs, 99):.0f}]" for w, xs in sorted(by_window.items())))
        print(f"late > 1 s: {sum(1 for x in lateness if x > 1000)}   early (< 0): {sum(1 for x in lateness if x < 0)}")
    print(f"fired by the sweeper (message lost or > grace late): {by_sweeper}; "
          f"deadlines > 1 s overdue at the end: {len(overdue)}; worker errors logged: {errors}")
    print(f"load average at the end: {load_end:.1f} (other processes on the machine skew the figures)")
    print(f"worker log: {log_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
