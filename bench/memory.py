"""Redis memory per finished match and per outbox entry, by key kind (issue 11 §8).

    python bench/memory.py [--matches 200] [--runs 3] [--redis URL] [--json]

Each run starts from an empty database (its own redis-server on a free loopback
port unless ``--redis``: that database is FLUSHED), starts ``shuangkou serve``
(timers in-process), runs ``shuangkou simulate --redis URL --external`` with the
default settings, waits until every finished match is settled and serve has
trimmed the acknowledged feed entries (about a second after it caught up), and then sums
``MEMORY USAGE`` of every key by kind.  It prints, as medians of the runs:

* durable bytes per finished match: every key but the command channels (``sk:inbox``,
  ``sk:ops`` and each bucket's ``sk:{b<N>}:inbox``, ``:ops`` and ``:lobby``, which serve trims
  once every group has handled them, every minute: longer than a run) and the delivery
  streams (``sk:out:*``, their fences ``sk:outv:*``, ``sk:reply:*``, which expire when idle);
  target ≤ 20 KB;
* outbox bytes per entry: ``MEMORY USAGE`` of the ``sk:out:*`` streams over their
  entries; target ≤ 700 B (every update carries its brief, docs/PROTOCOL.md §8: ≤ 250 B of it).
  The target was 650 B until the brief carried the receiver's own hand and the current trick's
  plays and the view the match's history (issue 36: a client renders from the brief alone, a
  reloaded page shows the trick history): 605 B per entry before, 676 B after (100 matches, 3
  runs), the history stored compact (``engine.service.publish.compact_view``);
* how many ``sk:out:*`` / ``sk:reply:*`` keys have no TTL (target 0);
* the breakdown by key kind (bytes, keys, bytes per finished match).

It measures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import redis  # noqa: E402

KINDS = [  # (kind, pattern) — first match wins
    ("match events", re.compile(r"^sk:\{b\d+\}:m:.*:events$")),
    ("match command ids", re.compile(r"^sk:\{b\d+\}:m:.*:cmds$")),
    ("match snapshot", re.compile(r"^sk:\{b\d+\}:m:.*:snap$")),
    ("bucket feed", re.compile(r"^sk:\{b\d+\}:feed$")),
    ("bucket deadlines", re.compile(r"^sk:\{b\d+\}:deadline")),
    ("bucket match set", re.compile(r"^sk:\{b\d+\}:matches$")),
    ("ledger settlements", re.compile(r"^sk:\{ledger\}:settled$")),
    ("ledger other", re.compile(r"^sk:\{ledger\}:")),
    ("outbox", re.compile(r"^sk:out:")),
    ("outbox fences", re.compile(r"^sk:outv:")),
    ("reply", re.compile(r"^sk:reply:")),
    ("command channels", re.compile(r"^sk:(\{b\d+\}:)?(inbox|ops|lobby)$")),
    ("dead letters", re.compile(r"^sk:dead$")),
]
NOT_DURABLE = {"outbox", "outbox fences", "reply", "command channels"}


def kind_of(key: str) -> str:
    for kind, pattern in KINDS:
        if pattern.search(key):
            return kind
    return "other"


def _start_redis():
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import start_redis_server  # type: ignore[import-not-found]

    return start_redis_server()


def measure(client: redis.Redis) -> dict:
    by_kind: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    out_entries = 0
    no_ttl = 0
    for raw in client.scan_iter(count=1000):
        key = raw.decode(errors="replace")
        kind = kind_of(key)
        by_kind[kind][0] += int(client.memory_usage(raw, samples=0) or 0)
        by_kind[kind][1] += 1
        if kind == "outbox":
            out_entries += int(client.xlen(raw))
        if kind in ("outbox", "reply") and client.ttl(raw) < 0:
            no_ttl += 1
    return {"by_kind": {k: {"bytes": v[0], "keys": v[1]} for k, v in by_kind.items()},
            "outbox_entries": out_entries, "delivery_keys_without_ttl": no_ttl}


def one_run(url: str, matches: int, seed: int) -> dict:
    client = redis.Redis.from_url(url)
    client.flushdb()
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    serve = subprocess.Popen([sys.executable, "-m", "shuangkou", "serve", "--redis", url, "--consumer", "bench-mem"],
                             cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    try:
        time.sleep(1.5)
        sim = subprocess.run([sys.executable, "-m", "shuangkou", "simulate", "--redis", url, "--external",
                              "-n", str(matches), "--seed", str(seed), "--no-progress", "--json"],
                             cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
        if sim.returncode != 0:
            raise RuntimeError(f"simulate failed: {sim.stderr[-2000:]}")
        from projections.ledger import RedisLedger

        from engine.store.redis_store import RedisEventStore

        store = RedisEventStore(client)
        ledger = RedisLedger(client)
        ids = list(store.match_ids())
        finished = [m for m in ids if store.version(m) and
                    type(store.load(m, after=store.version(m) - 1)[-1]).__name__ == "MatchFinished"]
        end = time.monotonic() + 60
        while ledger.unsettled(finished) and time.monotonic() < end:
            time.sleep(0.2)
        # serve's projection runner trims the acknowledged feed entries once it has caught up
        # (within about a second, projections/runner.py): measure the state it settles into
        from engine.store import keys

        end = time.monotonic() + 10
        while any(client.xlen(keys.feed_key(b)) for b in range(store.buckets)) and time.monotonic() < end:
            time.sleep(0.2)
        figures = measure(client)
    finally:
        serve.terminate()
        try:
            serve.wait(20)
        except subprocess.TimeoutExpired:
            serve.kill()
            serve.wait()
    n = max(len(finished), 1)
    kinds = figures["by_kind"]
    durable = sum(v["bytes"] for k, v in kinds.items() if k not in NOT_DURABLE)
    out_bytes = kinds.get("outbox", {}).get("bytes", 0)
    return {"finished": len(finished), "durable_bytes_per_match": durable / n,
            "outbox_bytes_per_entry": out_bytes / max(figures["outbox_entries"], 1),
            "delivery_keys_without_ttl": figures["delivery_keys_without_ttl"],
            "by_kind": {k: {**v, "bytes_per_match": v["bytes"] / n} for k, v in kinds.items()}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--matches", type=int, default=200)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--redis", metavar="URL", help="use this database (FLUSHED) instead of starting a server")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    proc = workdir = None
    url = args.redis
    if url is None:
        proc, url, workdir = _start_redis()
    try:
        runs = [one_run(url, args.matches, seed=1 + r) for r in range(args.runs)]
    finally:
        if proc is not None:
            from conftest import stop_redis_server  # type: ignore[import-not-found]

            stop_redis_server(proc, workdir)
    med = {k: statistics.median(r[k] for r in runs)
           for k in ("finished", "durable_bytes_per_match", "outbox_bytes_per_entry", "delivery_keys_without_ttl")}
    kinds = sorted({k for r in runs for k in r["by_kind"]})
    breakdown = {k: {f: statistics.median(r["by_kind"].get(k, {}).get(f, 0) for r in runs)
                     for f in ("bytes", "keys", "bytes_per_match")} for k in kinds}
    if args.json:
        print(json.dumps({**med, "by_kind": breakdown, "runs": len(runs)}))
        return 0
    print(f"median of {len(runs)} runs, {args.matches} matches each (simulate --redis URL --external)")
    print(f"  durable bytes per finished match : {med['durable_bytes_per_match']:>10.0f}  (target <= 20000)")
    print(f"  outbox bytes per entry           : {med['outbox_bytes_per_entry']:>10.0f}  (target <= 700)")
    print(f"  sk:out/sk:reply keys without TTL : {med['delivery_keys_without_ttl']:>10.0f}  (target 0)")
    print(f"  {'key kind':<20} {'keys':>7} {'bytes':>12} {'bytes/match':>12}")
    for k, v in sorted(breakdown.items(), key=lambda kv: -kv[1]["bytes"]):
        print(f"  {k:<20} {v['keys']:>7.0f} {v['bytes']:>12.0f} {v['bytes_per_match']:>12.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
