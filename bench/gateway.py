"""Command round trip through the WebSocket gateway vs. straight to the inbox.

Starts a throw-away redis-server, ``shuangkou serve`` (with a dramatiq worker) and one
``shuangkou gateway``; then, per run:

* **gateway**: 200 concurrent WebSocket clients join one room, are paired at 100 tables
  and play one match each (lead the lowest single, pass when following).  The round trip
  of a command is from the client's send to the ``update``/``rejected`` echoing its
  ``command_id``.
* **inbox** (the baseline, same run): 200 asyncio players send the same kind of commands
  straight to ``sk:inbox`` and read their ``sk:out:<player>`` streams (matches created on
  the operator channel); the round trip is from the XADD to the update of that command.

Prints p50/p99 per run and the medians over the runs, with the ratio gateway / inbox::

    python bench/gateway.py [--players 200] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import start_redis_server, stop_redis_server  # noqa: E402
from tests.gateway_support import start_stack  # noqa: E402


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] * 1000 if s else float("nan")


class Tracker:
    """What a client needs to act, from full views and compact updates (events only)."""

    def __init__(self, me: str):
        self.me = me
        self.hand: list[int] = []
        self.turn: str | None = None
        self.leading = False
        self.phase = "new"
        self.version = -1
        self.other: str | None = None

    def apply(self, version: int, events: list[dict[str, Any]], view: dict[str, Any] | None) -> None:
        if version <= self.version:
            return
        if view is not None:
            self.phase, self.turn, self.leading = view["phase"], view["turn"], view["leading"]
            self.hand = list((view.get("hand") or {}).get("ids") or [])
            self.other = next((x["player"] for x in view["seats"] if x and x["player"] != self.me), None)
        else:
            for e in events:
                t = e["type"]
                if t == "CardsPlayed":
                    if e["player"] == self.me:
                        self.hand = [c for c in self.hand if c not in set(e["cards"])]
                    self.turn = self.me if e["player"] != self.me else self.other
                    self.leading = False
                elif t == "Passed":
                    self.turn = self.me if e["player"] != self.me else self.other
                    self.leading = True
                elif t == "MatchFinished":
                    self.phase = "finished"
        self.version = version

    def choose(self) -> dict[str, Any] | None:
        """Lead the lowest single card, pass when following; None when it is not our turn."""
        if self.phase != "playing" or self.turn != self.me or not self.hand:
            return None
        if self.leading:
            return {"type": "Play", "cards": [self.hand[0]], "expected_version": self.version}
        return {"type": "Pass", "expected_version": self.version}


async def ws_player(url: str, token: str, room: str, rtts: list[float], done: asyncio.Event) -> None:
    import websockets

    async with websockets.connect(f"{url}?token={token}", max_queue=None, open_timeout=60) as ws:
        await ws.send(json.dumps({"type": "Join", "room": room}))
        sent: dict[str, float] = {}
        n = 0
        acted_at = -1
        match = None
        me = tokens_sub(token)
        tracker = Tracker(me)
        while True:
            msg = json.loads(await asyncio.wait_for(ws.recv(), 120))
            k = msg["kind"]
            if k == "lobby" and msg["state"] == "seated" and match is None:
                match = msg["match"]
                await ws.send(json.dumps({"type": "Ready"}))
                continue
            if k in ("update", "rejected"):
                cid = msg.get("command_id")
                if cid in sent:
                    rtts.append(time.perf_counter() - sent.pop(cid))
            if k == "settled":
                return
            if k != "update" or msg["match"] != match:
                continue
            tracker.apply(msg["version"], msg["events"], msg["view"])
            if tracker.version == acted_at:
                continue
            cmd = tracker.choose()
            if cmd is not None:
                n += 1
                cmd["command_id"] = f"c{n}"
                acted_at = tracker.version
                sent[cmd["command_id"]] = time.perf_counter()
                await ws.send(json.dumps(cmd))


def tokens_sub(token: str) -> str:
    import jwt

    return str(jwt.decode(token, options={"verify_signature": False})["sub"])


async def run_gateway(url: str, stack: Any, players: int, room: str, tag: str) -> list[float]:
    rtts: list[float] = []
    done = asyncio.Event()
    tasks = [ws_player(url, stack.token(f"{tag}-p{i}"), room, rtts, done) for i in range(players)]
    await asyncio.gather(*tasks)
    return rtts


async def inbox_player(r: Any, player: str, match: str, rtts: list[float], start_id: str) -> None:
    from engine.store import keys
    from gateway import channels, outbox

    stream = keys.outbox_key(player)
    last = start_id
    sent: dict[str, float] = {}
    n = 0
    acted_at = -1
    ready = False
    tracker = Tracker(player)
    while True:
        reply = await r.xread({stream: last}, count=100, block=10_000)
        for _s, entries in reply or ():
            for entry_id, fields in entries:
                last = entry_id
                e = outbox.parse_entry(entry_id, fields)
                if e.command_id in sent:
                    rtts.append(time.perf_counter() - sent.pop(e.command_id))
                if e.kind != "update" or e.match != match:
                    continue
                view = e.view
                if not ready and view and view["phase"] == "seating" and any(
                        x and x["player"] == player for x in view["seats"]):
                    ready = True
                    ready_cmd = channels.player_command("Ready", match, player, f"{player}-ready")
                    await r.xadd(channels.stream_for(ready_cmd), channels.entry(ready_cmd))
                if e.version is None:
                    continue
                tracker.apply(e.version, e.events, view)
                if tracker.phase == "finished":
                    return
                if tracker.version == acted_at:
                    continue
                cmd = tracker.choose()
                if cmd is None:
                    continue
                n += 1
                cid = f"{player}-c{n}"
                acted_at = tracker.version
                fields_ = {"cards": cmd["cards"]} if cmd["type"] == "Play" else {}
                fields_["expected_version"] = cmd["expected_version"]
                command = channels.player_command(cmd["type"], match, player, cid, **fields_)
                sent[cid] = time.perf_counter()
                await r.xadd(channels.stream_for(command), channels.entry(command))


async def run_inbox(redis_url: str, players: int, cfg: Any, tag: str) -> list[float]:
    import redis.asyncio as aioredis

    from engine.store import keys
    from gateway import channels

    r = aioredis.Redis.from_url(redis_url, max_connections=players + 20, socket_timeout=30)
    rtts: list[float] = []
    try:
        tasks = []
        for t in range(players // 2):
            match = f"{tag}-m{t}"
            a, b = f"{tag}-a{t}", f"{tag}-b{t}"
            starts = {}
            for p in (a, b):
                last = await r.xrevrange(keys.outbox_key(p), count=1)
                starts[p] = last[0][0] if last else "0-0"
            create = channels.create_match(match, cfg.name, cfg.to_record())
            await r.xadd(channels.stream_for(create), channels.entry(create))
            for p in (a, b):
                sit = channels.sit(match, p, 0)
                await r.xadd(channels.stream_for(sit), channels.entry(sit))
            tasks += [inbox_player(r, a, match, rtts, starts[a]), inbox_player(r, b, match, rtts, starts[b])]
        await asyncio.gather(*tasks)
    finally:
        await r.aclose()
    return rtts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--players", type=int, default=200)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    from engine.config import load_config

    proc, url, workdir = start_redis_server()
    tmp = Path(tempfile.mkdtemp(prefix="sk-bench-gw-"))
    room = {"trustee_delay_seconds": 0.0, "turn_seconds": 120, "ready_seconds": 120}
    stack = start_stack(url.rsplit("/", 1)[0] + "/0", url.rsplit("/", 1)[0] + "/1", tmp, {"bench": room})
    try:
        gw = stack.start_gateway("bench")
        cfg = load_config(tmp / "bench.toml")
        rows = []
        for run in range(args.runs):
            t0 = time.perf_counter()
            g = asyncio.run(run_gateway(gw.url, stack, args.players, "bench", f"g{run}"))
            tg = time.perf_counter() - t0
            t0 = time.perf_counter()
            d = asyncio.run(run_inbox(stack.store_url, args.players, cfg, f"d{run}"))
            td = time.perf_counter() - t0
            rows.append((pct(g, .5), pct(g, .99), pct(d, .5), pct(d, .99)))
            print(f"run {run + 1}: gateway {len(g)} commands in {tg:.1f}s  p50 {rows[-1][0]:.2f} ms  "
                  f"p99 {rows[-1][1]:.2f} ms | inbox {len(d)} commands in {td:.1f}s  p50 {rows[-1][2]:.2f} ms  "
                  f"p99 {rows[-1][3]:.2f} ms", flush=True)
        med = [statistics.median(r[i] for r in rows) for i in range(4)]
        print(f"\n{args.players} clients ({args.players // 2} matches), medians of {args.runs} runs:")
        print(f"  through the gateway   p50 {med[0]:7.2f} ms   p99 {med[1]:7.2f} ms")
        print(f"  straight to the inbox p50 {med[2]:7.2f} ms   p99 {med[3]:7.2f} ms")
        print(f"  ratio gateway/inbox   p50 {med[0] / med[2]:7.2f}x     p99 {med[1] / med[3]:7.2f}x")
    finally:
        stack.stop()
        stop_redis_server(proc, workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
