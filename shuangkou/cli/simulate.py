"""``shuangkou simulate``: many bot-vs-bot matches through the whole pipeline,
with a progress bar and a summary an operator uses to tune a room config.

Pipeline, as in production: every command goes through a
:class:`~engine.service.client.GatewayClient` onto its channel (players' commands on
``sk:inbox``, the lobby's CreateMatch/Sit on ``sk:ops``), an
:class:`~engine.service.inbox.InboxConsumer` per channel reads it (consumer group), the
:class:`~engine.service.service.MatchService` decides and appends through the Redis
event store (Lua append, bucket feeds, deadlines), timers are dramatiq
messages handled by the real actors (turn timeouts, trusteeship), and the
finished matches are settled from their events and booked in the ledger.

* embedded (default): fakeredis with Lua, dramatiq's StubBroker with an
  in-process worker, a fake clock (a timeout costs no wall time);
* ``--redis URL`` (default ``$SK_REDIS_URL``, as for ``serve``): a real Redis,
  the real clock; the gateway runs in this
  process (``--service-threads``) unless ``--external`` (``shuangkou serve``
  processes do it), timers run in-process (StubBroker) unless ``--external``
  too (then dramatiq workers on ``SK_BROKER_URL`` fire them).

With ``--redis`` the match ids start with ``--prefix`` (default ``sim-``), then a
run id: ``sim-1a2b3c4d-00007``; ``--json`` lists them (``"match_ids"``), and
``--cleanup`` deletes the player streams (``sk:out:<player>``) and reply streams
(``sk:reply:…``) this run created once it is checked (the match streams stay:
they are the record ``shuangkou replay`` reads).  The progress bar goes to
stderr, so stdout holds only the summary.

At the end every match is replayed from its stored events
(:func:`engine.match.replay.check_stream`) and settled
(:func:`projections.settlement.settle`); the settlement must agree with the
match's MatchFinished event and with the ledger.  Any mismatch is listed and
the exit code is 1.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import statistics
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from engine.tools.levels import POLICIES

if TYPE_CHECKING:
    from engine.match.commands import CommandBase
    from engine.match.protocols import OutcomeLike, ServiceLike
    from engine.match.state import MatchState

T = TypeVar("T")
#: how long a simulated client rides a Redis outage (a fail-over) before the match is an error
RIDE_S = 60.0
#: a command with no reply for this long is sent again (same id: a duplicate for the engine)
RESEND_S = 5.0

# engine, redis, dramatiq and rich are imported inside functions: `shuangkou --help` stays fast


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-n", "--matches", type=int, default=100, help="matches to play (default 100)")
    parser.add_argument("--config", default="points", help="room config: points, wealth or a TOML path")
    parser.add_argument("--redis", metavar="URL", default=os.environ.get("SK_REDIS_URL") or None,
                        help="real Redis for the event store (default $SK_REDIS_URL; unset: embedded fakeredis)")
    parser.add_argument("--prefix", default="sim-",
                        help="start of every match id (and player and reply stream) of this run (default sim-)")
    parser.add_argument("--cleanup", action="store_true",
                        help="--redis: at the end delete the player and reply streams this run created")
    parser.add_argument("--seed", type=int, help="seed for deals and bots (default: unpredictable)")
    parser.add_argument("--bot", default="greedy", choices=POLICIES,
                        help="bot level (easy, normal, hard) or policy (greedy, trustee, random) of both "
                             "players (engine.tools.bot, docs/BOTS.md; default greedy)")
    parser.add_argument("--escape-rate", type=float, default=0.0, metavar="P",
                        help="probability that a match has a player escape at a random moment (at the "
                             "latest before the bot's play that would end it; with --timeout-rate a timer's "
                             "play may end it first)")
    parser.add_argument("--timeout-rate", type=float, default=0.0, metavar="P",
                        help="probability that a bot lets its turn clock run out (R-13.1)")
    parser.add_argument("-c", "--concurrency", type=int, default=None,
                        help="matches in flight at once (threads; default 1 embedded, 8 with --redis)")
    parser.add_argument("--service-threads", type=int, default=1,
                        help="--redis: in-process command gateway consumers (default 1)")
    parser.add_argument("--external", action="store_true",
                        help="--redis: do not run the gateway or timers here (shuangkou serve and workers do)")
    parser.add_argument("--turn-seconds", type=float, default=None,
                        help="override the config's turn clock, 1..3600 s (e.g. 1 with --redis and --timeout-rate)")
    parser.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from shuangkou.cli import CliError
    from engine.config import TIMER_SECONDS, ConfigError, load_config

    if args.matches < 1:
        raise CliError("-n must be at least 1")
    for name in ("escape_rate", "timeout_rate"):
        v = getattr(args, name)
        if not 0.0 <= v <= 1.0:
            raise CliError(f"--{name.replace('_', '-')} must be between 0 and 1")
    for name in ("concurrency", "service_threads"):
        v = getattr(args, name)
        if v is not None and v < 1:
            raise CliError(f"--{name.replace('_', '-')} must be at least 1, got {v}")
    if args.turn_seconds is not None and not args.turn_seconds > 0:  # (NaN too)
        raise CliError(f"--turn-seconds must be above 0, got {args.turn_seconds}")
    lo, hi = TIMER_SECONDS
    if args.turn_seconds is not None and not lo <= args.turn_seconds <= hi:  # what CreateMatch accepts
        raise CliError(f"--turn-seconds must be {lo:g}..{hi:g} s (a room's turn clock), got {args.turn_seconds:g}")
    if args.external and not args.redis:
        raise CliError("--external needs --redis")
    if not args.prefix or any(ch.isspace() or ch in "{}" for ch in args.prefix):
        raise CliError(f"--prefix must be non-empty, without spaces or braces, got {args.prefix!r}")
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    if args.turn_seconds is not None:
        config = config.model_copy(update={"turn_seconds": float(args.turn_seconds)})
    if args.redis:
        from shuangkou.cli.serve import connect_redis

        connect_redis(args.redis, "--redis").close()  # a readable error, not a traceback mid-run

    sim = Simulation(config, n=args.matches, redis_url=args.redis, seed=args.seed, bot=args.bot,
                     escape_rate=args.escape_rate, timeout_rate=args.timeout_rate,
                     concurrency=args.concurrency or (8 if args.redis else 1),
                     service_threads=args.service_threads, external=args.external,
                     prefix=args.prefix, cleanup=args.cleanup)
    report = sim.run(progress=not args.no_progress and not args.json)
    if args.json:
        import json

        print(json.dumps(report.to_json(), ensure_ascii=False))
    else:
        report.print()
    return 1 if report.mismatches or report.errors else 0


# ---------------------------------------------------------------------------------------------
# the simulation

def _stderr_console() -> Any:
    """The progress bar's console: stderr, so stdout holds only the summary (or the JSON)."""
    from rich.console import Console

    return Console(stderr=True)


class _Capture:
    """Wraps the service: remembers the newest state of each match (the bots read it)."""

    def __init__(self, service: ServiceLike):
        self._service = service
        self.states: dict[str, MatchState] = {}
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._service, name)

    def execute(self, cmd: CommandBase) -> OutcomeLike:
        out = self._service.execute(cmd)
        st = getattr(out, "state", None)
        if st is not None:
            with self._lock:
                old = self.states.get(cmd.match_id)
                if old is None or st.version >= old.version:
                    self.states[cmd.match_id] = st
        return out


class SimError(Exception):
    pass


@dataclass
class Report:
    config: str
    mode: str
    matches: int = 0
    finished: int = 0
    seconds: float = 0.0
    #: this process's CPU time over ``seconds`` (with ``--external``: the bots and their clients
    #: only, what a benchmark's driver costs; embedded: the engine's threads too)
    cpu_seconds: float = 0.0
    commands: int = 0
    events: int = 0
    latencies: list[float] = field(default_factory=list)
    kou: Counter = field(default_factory=Counter)
    bombs: Counter = field(default_factory=Counter)  # xiang -> bombs played
    matches_with_bomb: Counter = field(default_factory=Counter)  # xiang -> matches with at least one
    timeouts: int = 0
    trusteeships: Counter = field(default_factory=Counter)
    escapes: Counter = field(default_factory=Counter)
    auto_passes: int = 0
    transfers: list[int] = field(default_factory=list)
    burned: int = 0
    replayed_ok: int = 0
    ledger_checked: int = 0
    mismatches: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    match_ids: list[str] = field(default_factory=list)
    cleaned: int | None = None  # --cleanup: streams deleted
    redis_retries: int = 0  # calls retried after a transient Redis failure (a fail-over ridden through)

    # -- figures ----------------------------------------------------------------------------
    def _pct(self, q: float) -> float:
        if not self.latencies:
            return 0.0
        xs = sorted(self.latencies)
        return xs[min(len(xs) - 1, max(0, math.ceil(q * len(xs)) - 1))]

    def to_json(self) -> dict[str, Any]:
        t = self.transfers
        n = max(self.finished, 1)
        return {
            "config": self.config, "mode": self.mode, "matches": self.matches, "finished": self.finished,
            "seconds": round(self.seconds, 3), "cpu_seconds": round(self.cpu_seconds, 3),
            "matches_per_s": round(self.finished / self.seconds, 2) if self.seconds else None,
            "commands": self.commands, "events": self.events,
            "events_per_s": round(self.events / self.seconds, 1) if self.seconds else None,
            "command_latency_ms": {"p50": round(self._pct(0.5) * 1000, 3), "p99": round(self._pct(0.99) * 1000, 3)},
            "kou": dict(self.kou),
            "bombs_per_match": {str(x): round(c / n, 3) for x, c in sorted(self.bombs.items())},
            "matches_with_bomb": {str(x): c for x, c in sorted(self.matches_with_bomb.items())},
            "timeouts": self.timeouts, "trusteeships": dict(self.trusteeships), "escapes": dict(self.escapes),
            "auto_passes": self.auto_passes,
            "transfer": {"mean": round(statistics.fmean(t), 2) if t else None,
                         "stdev": round(statistics.pstdev(t), 2) if t else None,
                         "min": min(t) if t else None, "median": statistics.median(t) if t else None,
                         "max": max(t) if t else None},
            "burned": self.burned, "redis_retries": self.redis_retries,
            "replayed_ok": self.replayed_ok, "ledger_checked": self.ledger_checked,
            "mismatches": self.mismatches, "errors": self.errors,
            "match_ids": self.match_ids,
            **({"cleaned_streams": self.cleaned} if self.cleaned is not None else {}),
        }

    def print(self) -> None:
        from rich.console import Console
        from rich.table import Table

        console = Console()
        n = max(self.finished, 1)
        console.print(f"[bold]shuangkou simulate[/bold]: {self.matches} matches, config {self.config!r}, {self.mode}",
                      soft_wrap=True)
        head = Table(show_header=False)
        head.add_column("figure", style="bold")
        head.add_column("value", justify="right")
        head.add_row("matches finished", f"{self.finished} / {self.matches}")
        head.add_row("wall time", f"{self.seconds:.2f} s")
        head.add_row("matches/s", f"{self.finished / self.seconds:.1f}" if self.seconds else "-")
        head.add_row("commands (player)", str(self.commands))
        head.add_row("events", f"{self.events} ({self.events / self.seconds:.0f}/s)" if self.seconds else str(self.events))
        head.add_row("command latency p50 / p99", f"{self._pct(0.5) * 1000:.2f} / {self._pct(0.99) * 1000:.2f} ms")
        head.add_row("turn timeouts", f"{self.timeouts} ({self.timeouts / n:.2f}/match)")
        head.add_row("trusteeships", ", ".join(f"{k} {v}" for k, v in sorted(self.trusteeships.items())) or "0")
        head.add_row("escapes", ", ".join(f"{k} {v}" for k, v in sorted(self.escapes.items())) or "0")
        head.add_row("auto-passes", f"{self.auto_passes} ({self.auto_passes / n:.1f}/match)")
        console.print(head)

        kou = Table(title="kou (R-7)", title_justify="left")
        kou.add_column("kou")
        kou.add_column("matches", justify="right")
        kou.add_column("share", justify="right")
        for k in ("flat", "single", "double", "escape"):
            c = self.kou.get(k, 0)
            kou.add_row(k, str(c), f"{100 * c / n:.1f}%")
        console.print(kou)

        bombs = Table(title="bombs by xiang", title_justify="left")
        bombs.add_column("xiang", justify="right")
        bombs.add_column("played", justify="right")
        bombs.add_column("per match", justify="right")
        bombs.add_column("matches with one", justify="right")
        for x in range(4, 13):
            c = self.bombs.get(x, 0)
            if c or x <= 8:
                bombs.add_row(str(x), str(c), f"{c / n:.3f}", f"{100 * self.matches_with_bomb.get(x, 0) / n:.1f}%")
        console.print(bombs)

        t = self.transfers
        money = Table(title="score transfer per match (the winner's gain)", title_justify="left")
        for col in ("mean", "stdev", "min", "median", "p90", "max", "burned"):
            money.add_column(col, justify="right")
        if t:
            xs = sorted(t)
            p90 = xs[min(len(xs) - 1, math.ceil(0.9 * len(xs)) - 1)]
            money.add_row(f"{statistics.fmean(t):.1f}", f"{statistics.pstdev(t):.1f}", str(xs[0]),
                          f"{statistics.median(t):g}", str(p90), str(xs[-1]), str(self.burned))
        console.print(money)

        ok = not self.mismatches and not self.errors
        style = "green" if ok else "red"
        console.print(f"[{style}]replay check: {self.replayed_ok}/{self.finished} matches replay to their settlement"
                      f"; ledger agrees on {self.ledger_checked}; {len(self.mismatches)} mismatches,"
                      f" {len(self.errors)} errors[/{style}]", soft_wrap=True)
        for line in (self.mismatches + self.errors)[:20]:
            console.print(f"  [red]{line}[/red]", markup=True, highlight=False, soft_wrap=True)


class Simulation:
    def __init__(self, config: Any, *, n: int, redis_url: str | None, seed: int | None, bot: str,
                 escape_rate: float, timeout_rate: float, concurrency: int = 1,
                 service_threads: int = 1, external: bool = False, prefix: str = "sim-",
                 cleanup: bool = False):
        self.config = config
        self.record = config.to_record()
        self.n = n
        self.redis_url = redis_url
        self.seed = seed if seed is not None else random.SystemRandom().randrange(2**31)
        self.bot = bot
        self.escape_rate = escape_rate
        self.timeout_rate = timeout_rate
        self.concurrency = max(1, concurrency if redis_url else 1)
        self.service_threads = max(1, service_threads)
        self.external = external
        self.prefix = prefix
        self.cleanup = cleanup
        # fair deals depend on the match id: an embedded run with --seed names its matches
        # after the seed (reproducible); on a shared Redis every run gets fresh names
        self.run_id = f"s{seed}" if (seed is not None and not redis_url) else uuid.uuid4().hex[:8]
        self.players: set[str] = set()  # every player id this run sat (their sk:out streams)
        self.reply_streams: set[str] = set()
        self.report = Report(config=config.name, mode="redis" if redis_url else "embedded")
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- set-up ----------------------------------------------------------------------------
    def _setup(self) -> None:
        from engine.service.channels import channel_consumers
        from engine.service.operator import OperatorDesk
        from engine.service.rooms import RedisRooms, register_shipped
        from projections.ledger import RedisLedger
        from engine.service.state_cache import StateCache
        from engine.store.redis_store import RedisEventStore
        from projections.metrics import InstrumentedService, instrumented_store
        from workers.clock import FakeClock, SystemClock
        from workers.embedded import EmbeddedTimers

        if self.redis_url:
            # One pool for every thread: each match thread may hold a connection in a blocking
            # XREAD of its replies, each gateway thread one in XREADGROUP, the timers and the
            # projection runner a few more.  redis-py's default cap (100) fails a -c 256 run
            # with MaxConnectionsError.
            from engine.store.connect import connect

            self.client = connect(self.redis_url, max_connections=self.pool_size())
            self.clock: Any = SystemClock()
        else:
            import fakeredis

            self.client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
            self.clock = FakeClock()
        self.raw_store = RedisEventStore(self.client)
        self.store = instrumented_store(self.raw_store)
        deal_rng = random.Random(self.seed)
        self.timers = None
        self.capture: _Capture | None = None
        if self.external:
            from engine.service.service import MatchService

            # the bots read each match after every command: from the cached state plus the
            # new events (one short XRANGE), not snapshot + replay each time
            self.reader = MatchService(self.raw_store, self.clock, deal_rng, state_cache=StateCache())
            self.gateways: list[Any] = []
        else:
            # one state cache shared by the gateway's service and the timer fires
            from engine.service.shuffle import seeded_server_seeds
            from workers.runtime import gateway_publisher

            # against a real Redis the timer moves (timeouts, trustee plays, removals) reach the
            # players' sk:out:{<player>} streams as serve's in-process timers publish them
            publish = gateway_publisher(self.client) if self.redis_url else None
            # --seed makes the run reproducible: the server seeds of the fair deals too
            self.timers = EmbeddedTimers(self.store, clock=self.clock, rng=deal_rng,
                                         state_cache=StateCache(), cache_size=0,
                                         server_seeds=seeded_server_seeds(self.seed), publish=publish)
            svc = InstrumentedService(self.timers.service, store=self.store, clock=self.clock,
                                      config_name=self.config.name)
            self.capture = _Capture(svc)
            self.timers.runtime.service = self.capture  # timer fires go through it too
            self.reader = self.timers.service
            n_gw = self.service_threads if self.redis_url else 1
            # each service thread consumes both channels (engine/service/channels.py):
            # players' commands on sk:inbox, the lobby's (CreateMatch, Sit) on sk:ops
            # balances from the engine's ledger (credited through sk:ops), rooms from the registry
            ledger = RedisLedger(self.client)
            rooms = RedisRooms(self.client)
            register_shipped(rooms)
            self.timers.service.balances = ledger
            self.timers.service.rooms = rooms
            desk = OperatorDesk(ledger, rooms, service=self.capture, clock=self.clock)
            self.gateways = [gw for i in range(n_gw)
                             for gw in channel_consumers(self.client, self.capture, f"{self.prefix}{self.run_id}-{i}",
                                                         operator=desk)]
            if self.redis_url:
                for gw in self.gateways:
                    t = threading.Thread(target=gw.run, args=(self._stop,),
                                         kwargs={"block_ms": 200, "count": 50}, daemon=True)
                    t.start()
                    self._threads.append(t)

    def _teardown(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)
        if self.timers is not None:
            self.timers.stop()

    # -- talking to the pipeline -------------------------------------------------------
    def _client(self, match_id: str) -> list[Any]:
        """This thread's ``[client, last reply id]`` for commands of ``match_id``: one reply
        stream per bucket, in the bucket's slot."""
        from engine.service.client import GatewayClient
        from engine.store import keys

        local = getattr(self, "_local", None)
        if local is None:
            self._local = local = threading.local()
        clients = getattr(local, "clients", None)
        if clients is None:
            local.clients = clients = {}
        bucket = keys.bucket_of(match_id)
        entry = clients.get(bucket)
        if entry is None:
            # in the slot of the match's bucket: on a Cluster the append writes the reply too
            # (docs/PROTOCOL.md, "Replies")
            reply_to = keys.reply_key(f"{keys.bucket_tag(bucket)}:{self.prefix}{self.run_id}-{threading.get_ident()}")
            entry = clients[bucket] = [GatewayClient(self.client, reply_to=reply_to), "0"]
            with self._lock:
                self.reply_streams.add(reply_to)
        return entry

    def _ride(self, call: Callable[[], T]) -> tuple[T, bool]:
        """``call()``, retried with back-off while Redis fails transiently (a fail-over, a lost
        connection: docs/OPERATIONS.md), for at most :data:`RIDE_S`; and whether it had to."""
        from engine.store.transient import Backoff, is_transient

        backoff = Backoff(first=0.05, cap=1.0)
        give_up = time.monotonic() + RIDE_S
        retried = False
        while True:
            try:
                return call(), retried
            except Exception as exc:
                if not self.redis_url or not is_transient(exc) or time.monotonic() > give_up:
                    raise
                retried = True
                with self._lock:
                    self.report.redis_retries += 1
                time.sleep(backoff.next())

    def submit(self, cmd: Any) -> Any:
        """Send a command through the inbox; returns the reply (accepted/duplicate/rejected/dead).
        A fail-over is ridden through: a command with no reply after :data:`RESEND_S` is sent
        again (same id: the engine's duplicate), since an XADD the old master acknowledged and
        had not replicated is gone (an outage this thread need not have seen: its reply stream
        may live on another master)."""
        entry = self._client(cmd.match_id)
        c = entry[0]
        t0 = time.perf_counter()
        self._ride(lambda: c.send(cmd))
        sent_at = time.monotonic()
        stream = c.stream_for(cmd)
        if not self.redis_url:
            for gw in self.gateways:
                if stream in gw.streams:
                    gw.run_once(block_ms=None, count=10)
        deadline = time.monotonic() + 30
        while True:
            replies, retried = self._ride(lambda: list(c.replies(entry[1], block_ms=None if not self.redis_url
                                                                 else 2000, count=100)))
            if retried:
                deadline = time.monotonic() + 30
            if self.redis_url and not replies and time.monotonic() - sent_at > RESEND_S:
                self._ride(lambda: c.send(cmd))
                sent_at = time.monotonic()
            for msg in replies:
                entry[1] = msg.id
                if msg.command_id == cmd.command_id:
                    dt = time.perf_counter() - t0
                    with self._lock:
                        self.report.latencies.append(dt)
                        self.report.commands += 1
                    return msg
            if time.monotonic() > deadline:
                raise SimError(f"no reply to {cmd.type} {cmd.command_id} within 30 s (is the service running?)")
            if not self.redis_url:
                raise SimError(f"the gateway did not answer {cmd.type} {cmd.command_id}")

    def state(self, mid: str) -> Any:
        if self.capture is not None and not self.redis_url:
            st = self.capture.states.get(mid)
            if st is not None:
                return st
        return self._ride(lambda: self.reader.load_state(mid))[0]

    def wait_timer(self, mid: str, st: Any) -> Any:
        """Let the match's clock run out; the timer workers act (turn timeout / trustee play)."""
        d = st.deadline()
        if d is None:
            raise SimError(f"{mid} v{st.version}: waiting on a clock but no deadline is set")
        if not self.redis_url:
            assert self.timers is not None
            self.clock.set(d.at_ms)
            self.timers.send_fire(d.match_id, d.version, d.kind)
            self.timers.join()
            new = self.state(mid)
            if new.version == st.version:
                raise SimError(f"{mid} v{st.version}: the {d.kind} timer did nothing")
            return new
        limit = time.monotonic() + max(0.0, (d.at_ms - self.clock()) / 1000) + 15
        while time.monotonic() < limit:
            new = self._ride(lambda: self.reader.load_state(mid))[0]
            if new.version > st.version:
                return new
            time.sleep(0.01)
        raise SimError(f"{mid} v{st.version}: the {d.kind} timer never fired")

    # -- one match -------------------------------------------------------------------------
    def play_match(self, i: int) -> str:
        from engine.tools.bot import Bot, choose_for
        from engine.match.commands import CreateMatch, Credit, Escape, Pass, Play, Ready, Sit

        mid = f"{self.prefix}{self.run_id}-{i:05d}"
        rng = random.Random(self.seed * 1_000_003 + i)
        bot = Bot(self.bot, rng)
        players = (f"{mid}-a", f"{mid}-b")
        with self._lock:
            self.players.update(players)
        levels = self.config.levels
        k = 0

        def cid() -> str:
            nonlocal k
            k += 1
            return f"{mid}:{k}"

        def must(cmd: Any) -> None:
            r = self.submit(cmd)
            if r.kind not in ("accepted", "duplicate"):
                raise SimError(f"{mid}: {cmd.type} refused: {r.code} {r.reason}")

        must(CreateMatch(command_id=cid(), match_id=mid, config=self.record))
        for p in players:
            # balances come from the engine's ledger: an audited operator credit first (sk:ops)
            lv = rng.choice(levels[: max(1, len(levels) // 2)])
            amount = lv.need + rng.randrange(0, 50)
            if amount > 0:
                must(Credit(command_id=cid(), player=p, amount=amount, mode=self.config.mode,
                            reason="simulate: starting balance", operator="simulate"))
            must(Sit(command_id=cid(), match_id=mid, player=p))
        for p in players:
            must(Ready(command_id=cid(), match_id=mid, player=p))
        escape_at = rng.randrange(0, 80) if rng.random() < self.escape_rate else None
        turns = 0
        st = self.state(mid)
        for _ in range(5000):
            if st.phase == "finished":
                return mid
            if st.phase != "playing":
                raise SimError(f"{mid}: phase {st.phase} after both players were ready")
            seat = st.seat(st.turn)
            if escape_at is not None and turns >= escape_at:
                escape_at = None
                who = rng.choice([s.player for s in st.seats if s is not None and not s.escaped])
                must(Escape(command_id=cid(), match_id=mid, player=who))
            elif seat.trusteed or (self.timeout_rate and rng.random() < self.timeout_rate):
                st = self.wait_timer(mid, st)
                turns += 1
                continue
            else:
                play = choose_for(bot, st, seat.player)  # the bot sees that player's view only
                if escape_at is not None and play is not None and len(play.cards) >= len(seat.hand):
                    escape_at = turns  # the play would end the match: the escape drawn for it comes first
                    continue
                if play is None:
                    cmd: Any = Pass(command_id=cid(), match_id=mid, player=seat.player, expected_version=st.version)
                else:
                    cmd = Play(command_id=cid(), match_id=mid, player=seat.player, cards=play.cards,
                               expected_version=st.version)
                r = self.submit(cmd)
                if r.kind == "rejected" and r.code in ("not_your_turn", "stale"):
                    pass  # a timer got there first (real clock): read the state again
                elif r.kind not in ("accepted", "duplicate"):
                    raise SimError(f"{mid}: the bot's {cmd.type} was refused: {r.code} {r.reason}")
                turns += 1
            st = self.state(mid)
        raise SimError(f"{mid}: not finished after 5000 steps")

    # -- running --------------------------------------------------------------------------
    def run(self, progress: bool = True) -> Report:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._setup()
        ids: list[str] = []
        try:
            bar = Progress(TextColumn("[bold]simulate"), BarColumn(), MofNCompleteColumn(),
                           TextColumn("{task.fields[rate]}"), TimeElapsedColumn(),
                           disable=not progress, transient=False, console=_stderr_console())
            t0, cpu0 = time.perf_counter(), time.process_time()
            with bar:
                task = bar.add_task("matches", total=self.n, rate="")
                todo = list(range(self.n))
                todo_lock = threading.Lock()

                def worker() -> None:
                    while True:
                        with todo_lock:
                            if not todo:
                                return
                            i = todo.pop(0)
                        try:
                            mid = self.play_match(i)
                            with self._lock:
                                ids.append(mid)
                        except Exception as exc:  # report and go on
                            with self._lock:
                                self.report.errors.append(f"match {i}: {type(exc).__name__}: {exc}")
                        with self._lock:
                            done = len(ids) + len(self.report.errors)
                        el = time.perf_counter() - t0
                        bar.update(task, completed=done, rate=f"{done / el:.1f} matches/s" if el else "")

                if self.concurrency == 1:
                    worker()
                else:
                    threads = [threading.Thread(target=worker, daemon=True) for _ in range(self.concurrency)]
                    for t in threads:
                        t.start()
                    for t in threads:
                        t.join()
            self.report.seconds = time.perf_counter() - t0
            self.report.cpu_seconds = time.process_time() - cpu0
            self.report.matches = self.n
            self.report.match_ids = sorted(ids)
            self._verify(sorted(ids))
        finally:
            self._teardown()
        if self.cleanup and self.redis_url:
            self.report.cleaned = self.delete_streams()
        return self.report

    def pool_size(self) -> int:
        """Connections this run may hold at once (see ``_setup``), with room to spare."""
        return 2 * (self.concurrency + self.service_threads) + 32

    def delete_streams(self) -> int:
        """``--cleanup``: delete the player streams (``sk:out:<player>``) and reply streams
        this run created; returns how many existed.  Match streams stay."""
        from engine.store.keys import outbox_key

        keys = sorted({outbox_key(p) for p in self.players} | self.reply_streams)
        deleted = 0
        for start in range(0, len(keys), 500):
            pipe = self.client.pipeline(transaction=False)
            for key in keys[start:start + 500]:
                pipe.delete(key)  # one key a call: fine on a cluster too
            deleted += sum(int(n) for n in pipe.execute())
        return deleted

    # -- checking ---------------------------------------------------------------------------
    def _verify(self, ids: list[str]) -> None:
        from engine.match.events import CardsPlayed, MatchFinished, Passed, PlayerEscaped, TrusteeshipStarted, TurnTimedOut
        from engine.match.replay import check_stream, replay
        from projections.metrics import observe_settlement
        from projections.settlement import settle

        self._ids = ids
        ledger = self._ledger()
        rep = self.report
        for mid in ids:
            events = self.raw_store.load(mid)
            rep.events += len(events)
            fin = next((e for e in reversed(events) if isinstance(e, MatchFinished)), None)
            if fin is None:
                rep.mismatches.append(f"{mid}: no MatchFinished event")
                continue
            rep.finished += 1
            rep.kou[fin.kou] += 1
            seen: set[int] = set()
            for e in events:
                if isinstance(e, CardsPlayed) and e.reading.xiang is not None:
                    rep.bombs[e.reading.xiang] += 1
                    seen.add(e.reading.xiang)
                elif isinstance(e, TurnTimedOut):
                    rep.timeouts += 1
                elif isinstance(e, TrusteeshipStarted):
                    rep.trusteeships[e.reason] += 1
                elif isinstance(e, PlayerEscaped):
                    rep.escapes[e.policy] += 1
                elif isinstance(e, Passed) and e.by == "auto":
                    rep.auto_passes += 1
            for x in seen:
                rep.matches_with_bomb[x] += 1
            problems = check_stream(events)
            state = replay(events)
            try:
                s = settle(events)
            except Exception as exc:
                rep.mismatches.append(f"{mid}: settle failed: {type(exc).__name__}: {exc}")
                continue
            bad = [p for p in problems]
            if s is None:
                bad.append("settle() found no result")
            else:
                if state.finished is None or state.finished.winner != fin.winner:
                    bad.append("the replayed state does not end with the recorded winner")
                if (s.winner, s.loser, s.kou) != (fin.winner, fin.loser, fin.kou):
                    bad.append(f"settlement {s.winner}/{s.kou} != MatchFinished {fin.winner}/{fin.kou}")
                if dict(s.cards_left) != dict(fin.cards_left):
                    bad.append(f"cards left {s.cards_left} != {fin.cards_left}")
                if sum(s.scores.values()) + s.burned != 0:
                    bad.append(f"scores {s.scores} + burned {s.burned} do not sum to 0")
                if s.scores.get(s.winner, 0) < 0:
                    bad.append(f"the winner loses: {s.scores}")
                if ledger is not None:
                    booked = ledger.settlement(mid)
                    if booked is None or booked.scores != s.scores or booked.burned != s.burned:
                        bad.append(f"the ledger projection holds {booked and booked.scores} != settlement {s.scores}")
                    else:
                        rep.ledger_checked += 1
                rep.transfers.append(s.scores.get(s.winner, 0))
                rep.burned += s.burned
                observe_settlement(s.scores, self.config.name)
            if bad:
                rep.mismatches.extend(f"{mid}: {p}" for p in bad[:5])
            else:
                rep.replayed_ok += 1

    def _ledger(self) -> Any:
        """The ledger projection, caught up: the projection runner follows the bucket feeds
        (in this process; with --external the serve processes run it and we wait for them)."""
        from projections.ledger import RedisLedger
        from projections.metrics import observe_projection_applied
        from projections.runner import ProjectionRunner, RedisFeed

        ledger = RedisLedger(self.client)
        if self.external:
            import time as _t

            end = _t.monotonic() + 30
            pending = [m for m in self._ids if not ledger.is_settled(m)]
            while pending and _t.monotonic() < end:
                _t.sleep(0.1)
                pending = [m for m in pending if not ledger.is_settled(m)]
            return ledger
        runner = ProjectionRunner(self.raw_store, ledger,
                                  RedisFeed(self.client, consumer=f"{self.prefix}{self.run_id}"),
                                  on_settled=lambda _s, _applied, _room: observe_projection_applied("ledger"))
        runner.drain(500)
        for mid, err in runner.errors:
            self.report.mismatches.append(f"{mid}: projection runner: {err}")
        return ledger
