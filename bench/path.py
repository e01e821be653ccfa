"""The one-node command path, stage by stage: serve's CPU µs and Redis's work per player command.

    python bench/path.py [--matches 16] [--runs 3] [--per-stream | --one-stream | --alone] [--json]

In this process, on a redis-server of its own (no persistence): bot matches played through
the bucket inboxes as ``serve`` runs them on one node (one
:class:`~engine.service.inbox.InboxConsumer` per bucket stream behind the player channel, the
streams read together by :func:`~engine.service.inbox.run_together`, a
:class:`~engine.service.service.MatchService` with its state cache, the publication carried
by the append, the acknowledgements sent with the next read, the collector tuned as serve
tunes it).  Each round sends one command per live match (as gateways do: no ``reply_to``)
and the consumers read once, so the Redis figures are exact counts.
``--per-stream``: each consumer whose stream got a command reads it alone (a Cluster's
serve, a thread per stream); ``--one-stream``: every player command through the one
unbucketed ``sk:inbox`` and its one consumer (the layout before the bucket inboxes);
``--alone``: each command is read and handled before the next one is sent (one command
per read, as at concurrency 1: what a lone player's latency pays).

Per player command, medians over ``--runs`` runs (seeds 7, 8, …):

* ``serve_cpu_us``: the thread's CPU time (``time.thread_time_ns``: user + system, the
  round trips' system calls included) in each stage: ``read`` (XREADGROUP, the last read's
  XACK in its pipeline), ``decode`` (the inbox entry to a command), ``decide``
  (``decide_and_apply``), ``build updates`` (the players' redacted updates, built before
  the append that carries them), ``append`` (the script call; the notices, the updates and
  their TTLs run inside it), ``cache+hook`` (after the commit), ``publish rest+ack`` (what
  no append carried, the acknowledgement's bookkeeping), ``other`` (the loop itself);
* ``redis_commands``: INFO commandstats calls by command (a script's own calls included)
  around the consumers' work only; ``redis_commands_total``;
* ``redis_cpu_us``: the server's used_cpu_user + used_cpu_sys over the same windows;
* ``load``: the machine's load average when it ended (the CPU figures move with it; the
  counts do not).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import start_redis_server, stop_redis_server  # noqa: E402

STAGES = ("read", "decode", "decide", "build updates", "append", "cache+hook", "publish rest+ack")
cpu: Counter[str] = Counter()


def timed(stage: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*a: Any, **k: Any) -> Any:
        t0 = time.thread_time_ns()
        try:
            return fn(*a, **k)
        finally:
            cpu[stage] += time.thread_time_ns() - t0
    return wrapper


def instrument() -> Callable[..., Any]:
    """Wrap each stage's function with a CPU-time counter; returns the timed ``run_once``."""
    from engine.service import inbox as inbox_mod
    from engine.service import inbox_message as im
    from engine.service import service as svc_mod
    from engine.service.publish import Publisher
    from engine.store.redis_store import RedisEventStore

    inbox_mod.InboxConsumer._read = timed("read", inbox_mod.InboxConsumer._read)  # type: ignore[method-assign]
    inbox_mod._read_together = timed("read", inbox_mod._read_together)
    im.MessageHandler.prepare = timed("decode", im.MessageHandler.prepare)  # type: ignore[method-assign]
    svc_mod.decide_and_apply = timed("decide", svc_mod.decide_and_apply)  # type: ignore[assignment]
    Publisher.outputs = timed("build updates", Publisher.outputs)  # type: ignore[method-assign]
    RedisEventStore.append_many = timed("append", RedisEventStore.append_many)  # type: ignore[method-assign]
    svc_mod.MatchService._committed = timed("cache+hook", svc_mod.MatchService._committed)  # type: ignore
    inbox_mod.InboxConsumer._commit = timed("publish rest+ack", inbox_mod.InboxConsumer._commit)  # type: ignore
    return timed("total", inbox_mod.InboxConsumer.run_once)


def _calls(r: Any) -> Counter[str]:
    return Counter({k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in r.info("commandstats").items()
                    if k != "cmdstat_info"})


def _server_cpu(r: Any) -> float:
    info = r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def one(run_once: Callable[..., Any], matches: int, seed: int, mode: str = "together",
        alone: bool = False) -> dict[str, Any]:
    import redis

    from engine.config import load_config
    from engine.service.channels import PLAYER, ChannelService
    from engine.service.client import GatewayClient
    from engine.service.gc_tuning import tune_gc
    from engine.service.inbox import InboxConsumer, run_together
    from engine.service.service import MatchService
    from engine.service.shuffle import seeded_random, seeded_server_seeds
    from engine.service.state_cache import StateCache
    from engine.store import keys
    from engine.store.redis_store import RedisEventStore
    from engine.tools.bot import Bot, choose_for

    proc, url, workdir = start_redis_server()
    try:
        r = redis.Redis.from_url(url)
        clock = iter(range(1_000_000, 10**12, 1000))
        cache = StateCache()
        svc = MatchService(RedisEventStore(r), lambda: next(clock), seeded_random(seed), state_cache=cache,
                           server_seeds=seeded_server_seeds(seed))
        setup = InboxConsumer(r, svc, "bench", stream="sk:setup")  # the lobby's commands: not measured
        one_stream = mode == "one-stream"
        streams_read = [keys.INBOX] if one_stream else [keys.inbox_key(b) for b in range(keys.DEFAULT_BUCKETS)]
        consumers = {st: InboxConsumer(r, ChannelService(svc, PLAYER), "bench", stream=st) for st in streams_read}
        client = GatewayClient(r, inbox=keys.INBOX) if one_stream else GatewayClient(r)
        lobby = GatewayClient(r, inbox="sk:setup", ops="sk:setup")
        config = load_config("points").to_record()
        mids = [f"path-{i}" for i in range(matches)]
        for mid in mids:
            lobby.create_match(mid, config)
            for p in "ab":
                lobby.sit(mid, mid + p)
            for p in "ab":
                lobby.ready(mid, mid + p)
        while setup.run_once(block_ms=None, count=50):
            pass
        together = timed("total", run_together)
        together(list(consumers.values()), block_ms=None)  # their own pending entries first: none
        gc.collect()
        tune_gc()  # as serve does at start-up
        cpu.clear()
        bot, rng = Bot("greedy", random.Random(seed)), random.Random(seed)
        n, got, server = 0, Counter[str](), 0.0
        while True:
            live = [m for m in mids if (s := cache.get(m)) is not None and s.phase == "playing"]
            if not live:
                break
            streams = set()
            for mid in rng.sample(live, len(live)):
                s = cache.get(mid)
                assert s is not None
                play = choose_for(bot, s, s.current_player)
                sent = (client.pass_(mid, s.current_player, expected_version=s.version) if play is None else
                        client.play(mid, s.current_player, cards=list(play.cards), expected_version=s.version))
                streams.add(client.stream_for(sent.command))
                n += 1
                if alone:  # each command read and handled before the next is sent (concurrency 1)
                    before, cpu0 = _calls(r), _server_cpu(r)
                    together(list(consumers.values()), block_ms=None, count=50)
                    got += _calls(r) - before
                    server += _server_cpu(r) - cpu0
            if alone:
                continue
            before, cpu0 = _calls(r), _server_cpu(r)
            if mode == "together":
                together(list(consumers.values()), block_ms=None, count=50)
            else:
                for stream, c in consumers.items():
                    if stream in streams:
                        run_once(c, block_ms=None, count=50, defer_ack=True)
            got += _calls(r) - before
            server += _server_cpu(r) - cpu0
        before = _calls(r)
        for c in consumers.values():
            c.flush_acks()
        got += _calls(r) - before
        stages = {k: cpu.get(k, 0) / 1000 / n for k in STAGES}
        stages["other"] = cpu["total"] / 1000 / n - sum(stages.values())
        stages["total"] = cpu["total"] / 1000 / n
        return {"commands": n, "serve_cpu_us": stages, "redis_commands": {k: v / n for k, v in got.items()},
                "redis_cpu_us": server * 1e6 / n}
    finally:
        gc.unfreeze()
        stop_redis_server(proc, workdir)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--matches", type=int, default=16, help="matches in flight (one command each per round)")
    ap.add_argument("--runs", type=int, default=3)
    how = ap.add_mutually_exclusive_group()
    how.add_argument("--one-stream", dest="mode", action="store_const", const="one-stream",
                     help="every player command through sk:inbox")
    how.add_argument("--per-stream", dest="mode", action="store_const", const="per-stream",
                     help="each bucket stream read alone (a Cluster's serve)")
    ap.add_argument("--alone", action="store_true",
                    help="each command read and handled before the next is sent (concurrency 1)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.alone and args.mode:
        ap.error("--alone reads the streams together: not with --per-stream or --one-stream")
    run_once = instrument()
    mode = args.mode or "together"
    runs = [one(run_once, args.matches, 7 + k, mode, args.alone) for k in range(args.runs)]
    names = sorted(set().union(*(x["redis_commands"] for x in runs)))
    out: dict[str, Any] = {
        "matches": args.matches, "runs": args.runs, "mode": mode + (", alone" if args.alone else ""), "commands": [x["commands"] for x in runs],
        "serve_cpu_us": {k: round(statistics.median(x["serve_cpu_us"][k] for x in runs), 1)
                         for k in runs[0]["serve_cpu_us"]},
        "redis_commands": {k: round(statistics.median(x["redis_commands"].get(k, 0.0) for x in runs), 3)
                           for k in names},
        "redis_cpu_us": round(statistics.median(x["redis_cpu_us"] for x in runs), 1),
        "load": [round(x, 2) for x in os.getloadavg()],
    }
    out["redis_commands_total"] = round(sum(out["redis_commands"].values()), 3)
    if args.json:
        print(json.dumps(out))
        return 0
    print(f"{args.matches} matches in flight, {mode}, medians of {args.runs} runs; load {out['load']}")
    for k, v in out["serve_cpu_us"].items():
        print(f"  serve CPU µs per command, {k:<17} {v:>7}")
    print(f"  Redis CPU µs per command {out['redis_cpu_us']:>25}")
    print(f"  Redis commands per command {out['redis_commands_total']:>23}: "
          + ", ".join(f"{k} {v}" for k, v in sorted(out["redis_commands"].items(), key=lambda kv: -kv[1])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
