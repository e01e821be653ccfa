"""Command round trip through the WebSocket gateway vs. straight to the inbox.

Starts a throw-away redis-server, ``shuangkou serve`` (with a dramatiq worker) and one
``shuangkou gateway``; then, per run:

* **gateway**: 200 concurrent WebSocket clients join one room, are paired at 100 tables
  and play one match each (lead the lowest single, pass when following), then leave the
  room (``--leave finish``, the default: a Leave as the match ends, so the table closes at the
  settlement and the engine does what it does on the inbox path; ``--leave settled``: after the
  ``settled`` message, by when the lobby has offered the next match, which it then creates
  and tears down).  The round trip of a command is from the client's send to the
  ``update``/``rejected`` echoing its ``command_id``.
* **inbox** (the baseline, same run): 200 asyncio players send the same kind of commands
  straight to ``sk:inbox`` and read their ``sk:out:<player>`` streams (matches created on
  the operator channel); the round trip is from the XADD to the update of that command.

Then ``--connected`` idle sockets (2,000 by default) are held at once and the gateway's
Redis connections counted (CLIENT LIST, by the name ``sk-gateway:<id>``).

Each path starts on an idle stack (:func:`quiesce`: the previous path's tail, the lobby's
next-match offers and the closed tables, is not charged to it).
Both start the play together: every player waits until all are seated (through the lobby,
or on the operator channel) before its Ready.  Commands/s count the play, from a run's first
command sent to its last answer (how fast the lobby pairs is not the commands' throughput).  Prints commands/s, p50 and p99 per run and the medians over the runs, with the ratios
gateway / inbox; ``--json`` prints the medians as one object (``gateway_cps``, ``inbox_cps``,
``gateway_p50_ms``, ``inbox_p50_ms``, ``gateway_p99_ms``, ``inbox_p99_ms``, the ratios, the
connection counts, ``cpu_us_per_command`` of each process kind on each path (serve, redis, gateway,
workers, and this process: the clients; from /proc, sampled every 0.1 s, over the play alone: the
window the commands/s count) and ``gateway_kb_per_socket``
(the gateway's RSS growth with the ``--connected`` sockets held, per socket))::

    python bench/gateway.py [--players 200] [--runs 3] [--connected 2000] [--leave finish|settled] [--json]
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

from bench.cluster import cpu_s, group_cpu_s  # noqa: E402
from tests.conftest import start_redis_server, stop_redis_server  # noqa: E402
from tests.gateway_support import start_stack  # noqa: E402



def _text(v: object) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)

def rate(answers: list[tuple[float, float]]) -> float:
    """Commands per second over the play: from the first command sent to the last answer."""
    if not answers:
        return float("nan")
    return len(answers) / max(1e-9, max(b for _a, b in answers) - min(a for a, _b in answers))


def rtts_of(answers: list[tuple[float, float]]) -> list[float]:
    return [b - a for a, b in answers]


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


async def ws_player(url: str, token: str, room: str, rtts: list[tuple[float, float]],
                    seated: asyncio.Barrier, leave: str = "finish") -> None:
    """One player: Join, Ready once every table is seated, play the match, leave the room.
    ``leave``: ``finish``, the Leave as the match's end arrives (noted: the settlement closes
    the table, as the inbox path's matches end); ``settled``, after the ``settled`` message
    (the lobby has offered the next match by then: it is created, then torn down)."""
    import websockets

    async with websockets.connect(f"{url}?token={token}", max_queue=None, open_timeout=60) as ws:
        await ws.send(json.dumps({"type": "Join", "room": room}))
        sent: dict[str, float] = {}
        n = 0
        acted_at = -1
        match = None
        me = tokens_sub(token)
        tracker = Tracker(me)
        left = False
        while True:
            msg = json.loads(await asyncio.wait_for(ws.recv(), 120))
            k = msg["kind"]
            if k == "lobby" and msg["state"] == "seated" and match is None:
                match = msg["match"]
                await seated.wait()  # every table seated: the play starts together
                await ws.send(json.dumps({"type": "Ready"}))
                continue
            if k in ("update", "rejected"):
                cid = msg.get("command_id")
                if cid in sent:
                    rtts.append((sent.pop(cid), time.perf_counter()))
            if k == "settled":  # done: the room is left (no next match waits for its ready clock)
                if not left:
                    await ws.send(json.dumps({"type": "Leave"}))
                return
            if k != "update" or msg["match"] != match:
                continue
            tracker.apply(msg["version"], msg["events"], msg["view"])
            if tracker.phase == "finished" and leave == "finish" and not left:
                left = True  # at the settlement: noted, no next match is offered
                await ws.send(json.dumps({"type": "Leave"}))
                continue
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


async def run_gateway(url: str, stack: Any, players: int, room: str, tag: str,
                      leave: str = "finish") -> list[tuple[float, float]]:
    rtts: list[tuple[float, float]] = []
    seated = asyncio.Barrier(players)
    tasks = [ws_player(url, stack.token(f"{tag}-p{i}"), room, rtts, seated, leave) for i in range(players)]
    await asyncio.gather(*tasks)
    return rtts


async def inbox_player(r: Any, player: str, match: str, rtts: list[tuple[float, float]], start_id: str,
                       seated: asyncio.Barrier) -> None:
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
                    rtts.append((sent.pop(e.command_id), time.perf_counter()))
                if e.kind != "update" or e.match != match:
                    continue
                view = e.view
                if not ready and view and view["phase"] == "seating" and any(
                        x and x["player"] == player for x in view["seats"]):
                    ready = True
                    await seated.wait()  # every match seated: the play starts together
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


async def run_inbox(redis_url: str, players: int, cfg: Any, tag: str) -> list[tuple[float, float]]:
    import redis.asyncio as aioredis

    from engine.store import keys
    from gateway import channels

    r = aioredis.Redis.from_url(redis_url, max_connections=players + 20, socket_timeout=60,
                                socket_connect_timeout=60)  # a loaded machine accepts 200 slowly
    rtts: list[tuple[float, float]] = []
    seated = asyncio.Barrier(2 * (players // 2))
    try:
        tasks = []
        for t in range(players // 2):
            match = f"{tag}-m{t}"
            a, b = f"{tag}-a{t}", f"{tag}-b{t}"
            starts: dict[str, str] = {}
            for p in (a, b):
                last = await r.xrevrange(keys.outbox_key(p), count=1)
                starts[p] = _text(last[0][0]) if last else "0-0"
            create = channels.create_match(match, cfg.name, cfg.to_record())
            await r.xadd(channels.stream_for(create), channels.entry(create))
            for p in (a, b):
                sit = channels.sit(match, p)
                await r.xadd(channels.stream_for(sit), channels.entry(sit))
            tasks += [inbox_player(r, a, match, rtts, starts[a], seated),
                      inbox_player(r, b, match, rtts, starts[b], seated)]
        await asyncio.gather(*tasks)
    finally:
        await r.aclose()
    return rtts


def gateway_connections(redis_url: str, gateway_id: str) -> int:
    """The Redis connections the gateway holds now (CLIENT LIST, by their name)."""
    import redis

    with redis.Redis.from_url(redis_url) as r:
        return sum(1 for c in r.client_list() if c.get("name") == f"sk-gateway:{gateway_id}")


async def hold_connected(url: str, stack: Any, players: int, redis_url: str, gateway_id: str,
                         gateway_pid: int) -> dict[str, int]:
    """``players`` sockets authenticated and greeted at once; the gateway's connections meanwhile."""
    import websockets

    socks: list[Any] = []
    sem = asyncio.Semaphore(100)

    async def one(i: int) -> None:
        async with sem:
            ws = await websockets.connect(f"{url}?token={stack.token(f'idle-{i}')}", open_timeout=120,
                                          max_queue=None)
            json.loads(await asyncio.wait_for(ws.recv(), 120))  # welcome: the greeting is under way
            socks.append(ws)
    try:
        await asyncio.gather(*(one(i) for i in range(players)))
        await asyncio.sleep(1.0)  # the greetings settle
        held = await asyncio.to_thread(gateway_connections, redis_url, gateway_id)
        rss = rss_kb(gateway_pid)
    finally:
        await asyncio.gather(*(ws.close() for ws in socks), return_exceptions=True)
    return {"connected_players": len(socks), "gateway_redis_connections": held, "rss_kb_held": rss}


class CpuMeter:
    """CPU seconds of each process kind of the stack (and of this process: the clients)."""

    def __init__(self, stack: Any, gateway_pid: int, redis_pid: int):
        self.serve = [p.pid for p in stack.procs if p.args[3:4] == ["serve"]]
        self.workers = [p.pid for p in stack.procs if "dramatiq" in p.args]
        self.gateway, self.redis = gateway_pid, redis_pid

    def read(self) -> dict[str, float]:
        return {"serve": sum(cpu_s(p) for p in self.serve), "gateway": cpu_s(self.gateway),
                "redis": cpu_s(self.redis), "workers": sum(group_cpu_s(p) for p in self.workers),
                "clients": time.process_time()}

    @staticmethod
    def per_command(before: dict[str, float], after: dict[str, float], commands: int) -> dict[str, float]:
        return {k: (after[k] - before[k]) * 1e6 / max(1, commands) for k in before}


class CpuSampler:
    """:class:`CpuMeter` readings every :data:`SAMPLE_S` in a thread, so the CPU of the play alone
    (the window the commands/s count: first command sent to last answer) can be told apart from
    the joining and settling around it."""

    SAMPLE_S = 0.1

    def __init__(self, meter: CpuMeter):
        import threading

        self.meter = meter
        self.samples: list[tuple[float, dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while True:
            self.samples.append((time.perf_counter(), self.meter.read()))
            if self._stop.wait(self.SAMPLE_S):
                self.samples.append((time.perf_counter(), self.meter.read()))
                return

    def per_command(self, answers: list[tuple[float, float]]) -> dict[str, float]:
        """CPU µs per command of each process kind over the play of ``answers``."""
        if not answers:
            return CpuMeter.per_command(self.samples[0][1], self.samples[-1][1], 0)
        start, end = min(a for a, _b in answers), max(b for _a, b in answers)
        before = max((s for s in self.samples if s[0] <= start), key=lambda s: s[0], default=self.samples[0])
        after = min((s for s in self.samples if s[0] >= end), key=lambda s: s[0], default=self.samples[-1])
        return CpuMeter.per_command(before[1], after[1], len(answers))


def quiesce(meter: CpuMeter, busy_cores: float = 0.1, window_s: float = 0.5, limit_s: float = 60.0) -> float:
    """Wait until the stack is idle: serve, Redis, the gateway and the workers together below
    ``busy_cores`` over ``window_s`` (at most ``limit_s``); the seconds waited.  A path's play
    must not pay for the previous one's tail: the tables the lobby offers again after each
    settlement, the Leaves and the abandoned matches of the closed sockets."""
    stack_keys = ("serve", "redis", "gateway", "workers")
    t0 = time.perf_counter()
    before = meter.read()
    while time.perf_counter() - t0 < limit_s:
        time.sleep(window_s)
        after = meter.read()
        if sum(after[k] - before[k] for k in stack_keys) < busy_cores * window_s:
            break
        before = after
    return time.perf_counter() - t0


def rss_kb(pid: int) -> int:
    return int(next((ln.split()[1] for ln in Path(f"/proc/{pid}/status").read_text().splitlines()
                     if ln.startswith("VmRSS")), "0"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--players", type=int, default=200)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--connected", type=int, default=2000,
                    help="idle sockets held at once to count the gateway's Redis connections (0: skip)")
    ap.add_argument("--json", action="store_true", help="print the medians as one JSON object")
    ap.add_argument("--leave", choices=("finish", "settled"), default="finish",
                    help="when a gateway player leaves the room: as its match ends (default: the "
                         "table closes at the settlement, the inbox path's work) or after 'settled' "
                         "(the lobby creates the next match, then tears it down)")
    args = ap.parse_args()
    from engine.config import load_config

    say = (lambda *a, **k: print(*a, file=sys.stderr, **k)) if args.json else print
    proc, url, workdir = start_redis_server()
    tmp = Path(tempfile.mkdtemp(prefix="sk-bench-gw-"))
    room = {"trustee_delay_seconds": 0.0, "turn_seconds": 120, "ready_seconds": 120}
    stack = start_stack(url.rsplit("/", 1)[0] + "/0", url.rsplit("/", 1)[0] + "/1", tmp, {"bench": room})
    try:
        gw = stack.start_gateway("bench")
        cfg = load_config(tmp / "bench.toml")
        rows = []
        cpu: dict[str, list[dict[str, float]]] = {"gateway": [], "inbox": []}
        meter = CpuMeter(stack, gw.proc.pid, proc.pid)
        peak = 0
        for run in range(args.runs):
            quiesce(meter)
            t0 = time.perf_counter()
            with CpuSampler(meter) as sampler:
                ga = asyncio.run(run_gateway(gw.url, stack, args.players, "bench", f"g{run}", args.leave))
            tg = time.perf_counter() - t0
            cpu["gateway"].append(sampler.per_command(ga))
            peak = max(peak, gateway_connections(stack.store_url, "bench"))
            quiesce(meter)
            t0 = time.perf_counter()
            with CpuSampler(meter) as sampler:
                da = asyncio.run(run_inbox(stack.store_url, args.players, cfg, f"d{run}"))
            td = time.perf_counter() - t0
            cpu["inbox"].append(sampler.per_command(da))
            g, d = rtts_of(ga), rtts_of(da)
            rows.append((pct(g, .5), pct(g, .99), pct(d, .5), pct(d, .99), rate(ga), rate(da)))
            say(f"run {run + 1}: gateway {len(g)} commands in {tg:.1f}s ({rows[-1][4]:.0f}/s)  "
                f"p50 {rows[-1][0]:.2f} ms  p99 {rows[-1][1]:.2f} ms | inbox {len(d)} commands in {td:.1f}s "
                f"({rows[-1][5]:.0f}/s)  p50 {rows[-1][2]:.2f} ms  p99 {rows[-1][3]:.2f} ms", flush=True)
        med = [statistics.median(r[i] for r in rows) for i in range(6)]
        rss_before = rss_kb(gw.proc.pid)
        held = (asyncio.run(hold_connected(gw.url, stack, args.connected, stack.store_url, "bench",
                                           gw.proc.pid))
                if args.connected else {})
        if held:
            held["gateway_kb_per_socket"] = round((held.pop("rss_kb_held") - rss_before) / args.connected, 1)
        cpu_med = {path: {k: round(statistics.median(r[k] for r in rs), 1) for k in rs[0]} for path, rs in cpu.items()}
        out = {"players": args.players, "runs": args.runs, "leave": args.leave,
               "gateway_cps": round(med[4], 1), "inbox_cps": round(med[5], 1),
               "gateway_p50_ms": round(med[0], 2), "inbox_p50_ms": round(med[2], 2),
               "gateway_p99_ms": round(med[1], 2), "inbox_p99_ms": round(med[3], 2),
               "cps_ratio": round(med[4] / med[5], 3), "p50_ratio": round(med[0] / med[2], 3),
               "gateway_redis_connections_at_players": peak, "cpu_us_per_command": cpu_med, **held}
        if args.json:
            print(json.dumps(out))
        else:
            print(f"\n{args.players} clients ({args.players // 2} matches), medians of {args.runs} runs:")
            print(f"  through the gateway   {med[4]:7.0f} commands/s  p50 {med[0]:7.2f} ms   p99 {med[1]:7.2f} ms")
            print(f"  straight to the inbox {med[5]:7.0f} commands/s  p50 {med[2]:7.2f} ms   p99 {med[3]:7.2f} ms")
            print(f"  ratio gateway/inbox   {med[4] / med[5]:7.2f}x throughput   p50 {med[0] / med[2]:7.2f}x     "
                  f"p99 {med[1] / med[3]:7.2f}x")
            print(f"  the gateway's Redis connections: {peak} with {args.players} playing"
                  + (f", {held['gateway_redis_connections']} with {held['connected_players']} connected"
                     if held else ""))
    finally:
        stack.stop()
        stop_redis_server(proc, workdir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
