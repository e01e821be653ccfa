"""What a fenced player update costs the Redis node that takes it: publish.lua by EVALSHA or by EVAL.

    python bench/publish.py [--updates 19200] [--streams 64] [--runs 5] [--json]

In this process, on a redis-server of its own (no persistence): ``--updates`` player updates
of ``--streams`` players' streams, each of a version above the stream's last, written by
:meth:`~engine.service.publish.Publisher.write` in rounds of one update of each stream (one
packed round trip each, as a Cluster's serve publishes what no append carried: a stream's
one update of a round, mostly).  ``--runs`` times in turn:

* ``evalsha``: the publisher as it is (EVALSHA of publish.lua for a stream's last update of
  the round: here every update; the server holds the script);
* ``eval``: the baseline, every update sent by EVAL (the script's text each time: how the
  publisher sent every update before it called the script by its SHA1).

Per update, medians of the runs: ``server_us`` (the server's used_cpu_user + used_cpu_sys)
and ``client_us`` (this process's CPU); ``server_ratio`` and ``client_ratio``: the baseline ÷
EVALSHA, each run's own, median.  It measures; it asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.store import server_cpu  # noqa: E402
from tests.conftest import start_redis_server, stop_redis_server  # noqa: E402


def one(pub: Any, updates: int, streams: int, tag: str) -> dict[str, float]:
    """Write ``updates`` fresh updates; the server's and this process's CPU µs per update."""
    from engine.store import keys

    players = [f"{tag}-p{k}" for k in range(streams)]
    writes = [pub._delivery(keys.outbox_key(players[i % streams]),
                            {"kind": "update", "match": tag, "command_id": f"c{i}", "version": 1 + i // streams,
                             "body": b"x" * 120}, 1 + i // streams)
              for i in range(updates)]
    server0, client0 = server_cpu(pub.redis), time.process_time()
    for at in range(0, updates, streams):  # a round: one update of each stream
        pub.write(writes[at:at + streams])
    server1, client1 = server_cpu(pub.redis), time.process_time()
    return {"server_us": (server1 - server0) * 1e6 / updates, "client_us": (client1 - client0) * 1e6 / updates}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--updates", type=int, default=19200)
    ap.add_argument("--streams", type=int, default=64, help="players' streams: one update of each a round")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    import redis

    from engine.service import publish
    from engine.service.publish import Publisher

    proc, url, workdir = start_redis_server()
    try:
        client = redis.Redis.from_url(url)
        pub = Publisher(client, consumer="bench")
        followed = publish._followed
        every = lambda writes: set(range(len(writes)))  # noqa: E731  (the baseline: each by EVAL)
        one(pub, 2000, args.streams, "warm")  # the script loaded, the connection made
        runs: dict[str, list[dict[str, float]]] = {"evalsha": [], "eval": []}
        for k in range(args.runs):
            for mode in ("evalsha", "eval"):
                publish._followed = followed if mode == "evalsha" else every  # type: ignore[assignment]
                client.flushdb()
                runs[mode].append(one(pub, args.updates, args.streams, f"{mode}{k}"))
        publish._followed = followed  # type: ignore[assignment]
        out: dict[str, Any] = {"updates": args.updates, "streams": args.streams, "runs": args.runs}
        for mode, rs in runs.items():
            for key in ("server_us", "client_us"):
                vals = [r[key] for r in rs]
                out[f"{mode}_{key}"] = round(statistics.median(vals), 2)
                out[f"{mode}_{key}_spread"] = [round(min(vals), 2), round(max(vals), 2)]
        for key in ("server", "client"):
            out[f"{key}_ratio"] = round(statistics.median(
                b[f"{key}_us"] / a[f"{key}_us"] for a, b in zip(runs["evalsha"], runs["eval"])), 3)
        client.close()
    finally:
        stop_redis_server(proc, workdir)
    if args.json:
        print(json.dumps(out))
    else:
        for key, value in out.items():
            print(f"{key:>26}  {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
