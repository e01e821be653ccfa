"""Chip-dumping detector benchmark: recall and false positives on a synthetic population.

    python bench/integrity.py [--matches M] [--seed S] [--quick] [--json]

Every match is played through the real engine (the match service on an in-memory event
store, the wealth room, coins), then settled and handed to the integrity projection
(projections/integrity) on a fakeredis, exactly as ``shuangkou integrity scan`` does.
The population (docs/INTEGRITY.md "Measured"):

* honest groups of 4 accounts, every pair of a group plays: levels drawn from easy, greedy
  and normal (docs/BOTS.md); a pair of easy against normal counts as ``weak_strong``;
  honest players escape one match in 50 (people do);
* ``friends``: two honest accounts who play only each other (one account in two of them
  is weak against a strong one);
* dumper groups: a dumper pair (giver, receiver) and two honest accounts; every pair of the
  group plays, the giver plays honestly against the others.  ``blatant``: against the
  receiver the giver always loses (passes whenever it could play, even a win, leads its
  lowest single, never bombs: many cards left, the kou); ``subtle``: dumps one match in
  three so, plays ``normal`` otherwise; ``escaper``: escapes in one match in two against
  the receiver, plays ``normal`` otherwise.

Matches are played in rounds (every pair one match a round), so "after 20 matches per pair"
is one moment.  At 20 and at M matches the pairs whose stored score reaches the default of
``shuangkou integrity report`` (:data:`projections.integrity.score.DEFAULT_MIN_SCORE`,
fixed before the run) are the flagged ones: ``recall`` per dumper kind, the
``false_positive_rate`` over every honest pair (groups, weak_strong, friends and the honest
pairs of the dumper groups) with its Wilson 95 % upper bound ``fpr_upper_95``.
``cpu_ms_per_match``: the integrity projection's CPU time per settled match (the thread's
CPU, so a loaded machine does not inflate it); ``engine_cpu_ms_per_command`` and
``commands_per_match``: the match service's own CPU per command in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.config import load_config  # noqa: E402
from engine.match.commands import CreateMatch, Deal, Escape, Pass, Play, Ready, Sit  # noqa: E402
from engine.rules.cards import NUM_CARDS  # noqa: E402
from engine.rules.moves import Play as Move  # noqa: E402
from engine.rules.moves import trustee_lead  # noqa: E402
from engine.tools.bot import Bot  # noqa: E402
from engine.tools.view import PlayerView, view_of  # noqa: E402

KINDS = ("blatant", "subtle", "escaper")
HONEST_LEVELS = ("easy", "greedy", "normal")
HONEST_ESCAPE_P = 0.02


@dataclass
class Account:
    """A synthetic account: a bot level, and whom (if anyone) it dumps to and how."""

    name: str
    level: str
    dumps_to: str | None = None
    kind: str | None = None
    rng: random.Random = field(default_factory=random.Random)

    def __post_init__(self) -> None:
        self.bot = Bot(self.level, self.rng)


def dump_move(view: PlayerView) -> Move | None:
    """Losing on purpose: pass whenever following, lead the lowest single."""
    if view.to_beat is not None:
        return None
    return trustee_lead(view.hand)


@dataclass
class Population:
    accounts: dict[str, Account]
    pairs: list[tuple[str, str, str]]  # (a, b, kind): kind honest/weak_strong/friends/blatant/subtle/escaper


def build(seed: int, groups: int, friends: int, dumpers: int) -> Population:
    """``groups`` honest groups of 4, ``friends`` friend pairs, ``dumpers`` groups of each dumper kind."""
    rng = random.Random(seed)
    accounts: dict[str, Account] = {}
    pairs: list[tuple[str, str, str]] = []

    def new(prefix: str, level: str | None = None) -> str:
        name = f"{prefix}{len(accounts)}"
        accounts[name] = Account(name, level or rng.choice(HONEST_LEVELS), rng=random.Random(rng.getrandbits(64)))
        return name

    def honest_kind(a: str, b: str) -> str:
        return "weak_strong" if {accounts[a].level, accounts[b].level} == {"easy", "normal"} else "honest"

    def group(members: list[str], skip: tuple[str, str] | None = None) -> None:
        for i in range(len(members)):
            for j in range(i + 1, len(members)):
                a, b = members[i], members[j]
                if skip is not None and {a, b} == set(skip):
                    continue
                pairs.append((a, b, honest_kind(a, b)))

    for _ in range(groups):
        group([new("h") for _ in range(4)])
    for k in range(friends):
        if k % 2 == 0:
            a, b = new("f", "easy"), new("f", "normal")
        else:
            a, b = new("f"), new("f")
        pairs.append((a, b, "friends"))
    for kind in KINDS:
        for _ in range(dumpers):
            giver, receiver = new("d", "normal"), new("r")
            accounts[giver].dumps_to, accounts[giver].kind = receiver, kind
            pairs.append((giver, receiver, kind))
            group([giver, receiver, new("h"), new("h")], skip=(giver, receiver))
    return Population(accounts, pairs)


class Engine:
    """Plays matches through the match service on one in-memory event store."""

    def __init__(self, store: Any = None) -> None:
        """``store``: the event store to play into (default a fresh in-memory one)."""
        from engine.service.service import FixedBalances, MatchService
        from engine.service.shuffle import seeded_random, seeded_server_seeds
        from engine.store.memory import InMemoryEventStore
        from engine.tools.script import FakeClock

        self.config = load_config("wealth")
        self.store = store if store is not None else InMemoryEventStore()
        self.clock = FakeClock()

        class Rich(FixedBalances):
            def balance(self, player: str, mode: str) -> int:
                return 5000

        self.service = MatchService(self.store, self.clock, seeded_random(0), deal_on_ready=False,
                                    server_seeds=seeded_server_seeds(0), balances=Rich({}))
        self.cpu_ms = 0.0
        self.commands = 0

    def run(self, cmd_type: Any, mid: str, **fields: Any) -> Any:
        self.commands += 1
        self.clock.advance(1000)
        t = time.thread_time()
        out = self.service.execute(cmd_type(command_id=f"{mid}:{self.commands}", match_id=mid, **fields))
        self.cpu_ms += (time.thread_time() - t) * 1000
        if out.rejection is not None:
            raise RuntimeError(f"{mid}: {cmd_type.__name__} refused: {out.rejection}")
        return out.state

    def play(self, mid: str, a: Account, b: Account, rng: random.Random) -> list[Any]:
        """One match of ``a`` (seat 0) against ``b``; its events."""
        deck = list(range(NUM_CARDS))
        rng.shuffle(deck)
        self.run(CreateMatch, mid, config=self.config.to_record())
        for p in (a, b):
            self.run(Sit, mid, player=p.name)
        for p in (a, b):
            self.run(Ready, mid, player=p.name)
        st = self.run(Deal, mid, hands=(tuple(deck[:27]), tuple(deck[27:54])), first=rng.randrange(2))
        by_name = {a.name: a, b.name: b}
        plan: dict[str, tuple[str, int]] = {}  # player -> (what, at which of their turns)
        for me, opp in ((a, b), (b, a)):
            if me.dumps_to == opp.name:
                if me.kind == "blatant":
                    plan[me.name] = ("dump", 0)
                elif me.kind == "subtle" and rng.random() < 1 / 3:
                    plan[me.name] = ("dump", 0)
                elif me.kind == "escaper" and rng.random() < 0.5:
                    plan[me.name] = ("escape", rng.randrange(1, 8))
            elif rng.random() < HONEST_ESCAPE_P:
                plan[me.name] = ("escape", rng.randrange(1, 12))
        turns = {a.name: 0, b.name: 0}
        for _ in range(2000):
            if st.phase == "finished":
                break
            p = st.current_player
            acct = by_name[p]
            view = view_of(st, p)
            assert view is not None
            what, at = plan.get(p, ("honest", 0))
            turns[p] += 1
            if what == "escape" and turns[p] >= at:
                st = self.run(Escape, mid, player=p)
                continue
            move = dump_move(view) if what == "dump" else acct.bot.choose(view)
            st = self.run(Pass, mid, player=p) if move is None else self.run(Play, mid, player=p, cards=move.cards)
        events = list(self.store.load(mid))
        return events


def wilson_upper(k: int, n: int) -> float:
    """The upper end of the Wilson 95 % interval of k successes in n (scipy)."""
    if n == 0:
        return 1.0
    from scipy.stats import binomtest

    return float(binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson").high)


def _cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a process used so far (/proc/<pid>/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def serve_baseline(matches: int = 160, concurrency: int = 16) -> dict[str, Any]:
    """``shuangkou serve``'s CPU per player command at ``concurrency`` clients, as in
    bench/pipeline.py's c16 run (one serve, projections and in-process timers on, driven by
    ``simulate --external`` in two client processes), on its own redis-server."""
    import subprocess

    from bench.pipeline import ROOT, _env, _stop, _wait_ready, start_redis

    proc, url, _ = start_redis()
    serve = subprocess.Popen([sys.executable, "-m", "shuangkou", "serve", "--redis", url, "--consumer", "bench",
                              "--batch", "20"], cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True)
    try:
        _wait_ready(serve)
        c0 = _cpu_s(serve.pid)
        sims = [subprocess.Popen([sys.executable, "-m", "shuangkou", "simulate", "-n", str(matches // 2), "--redis", url,
                                  "--external", "--json", "--seed", str(1 + k), "--concurrency", str(concurrency // 2),
                                  "--no-progress"], cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True) for k in range(2)]
        outs = [p.communicate(timeout=1800) for p in sims]
        cpu = _cpu_s(serve.pid) - c0
        reps = [json.loads(o) for o, _ in outs]
        commands = sum(int(r["commands"]) for r in reps)
        finished = sum(int(r["finished"]) for r in reps)
    finally:
        _stop(serve)
        _stop(proc)
    return {"serve_cpu_ms_per_command": round(cpu * 1000 / max(1, commands), 4), "commands": commands,
            "matches": finished, "commands_per_match": round(commands / max(1, finished), 1)}


def read_out(pop: Population, store: Any, threshold: float) -> dict[str, Any]:
    from projections.integrity.features import pair_key

    flagged = {e["pair"] for e in store.ranked(threshold)}
    recall: dict[str, float] = {}
    for kind in KINDS:
        ps = [pair_key(a, b) for a, b, k in pop.pairs if k == kind]
        recall[kind] = round(sum(p in flagged for p in ps) / len(ps), 4) if ps else 0.0
    honest = [pair_key(a, b) for a, b, k in pop.pairs if k not in KINDS]
    fp = sum(p in flagged for p in honest)
    return {"recall": recall, "fp": fp, "honest": len(honest),
            "false_positive_rate": round(fp / len(honest), 4) if honest else 0.0,
            "fpr_upper_95": round(wilson_upper(fp, len(honest)), 4),
            "flagged_honest": sorted(p for p in honest if p in flagged)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--matches", type=int, default=50, help="matches per pair (recall is read at 20 and here)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="a smoke run: fewer pairs, 20 matches, same keys")
    ap.add_argument("--groups", type=int, default=None, help="honest groups of 4 (6 pairs each)")
    ap.add_argument("--friends", type=int, default=None, help="friend pairs")
    ap.add_argument("--dumpers", type=int, default=None, help="dumper groups of each kind")
    ap.add_argument("--fakeredis", action="store_true",
                    help="keep the projection's state in fakeredis (its CPU then counts as the projection's)")
    ap.add_argument("--serve-baseline", action="store_true",
                    help="also measure serve's CPU per command at c16 (bench/pipeline.py's set-up) and report "
                         "the integrity share of it (needs redis-server)")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    ap.add_argument("--progress", metavar="FILE", help="rewrite FILE with a progress line after every round")
    args = ap.parse_args(argv)
    import fakeredis

    from projections.integrity.score import DEFAULT_MIN_SCORE
    from projections.integrity.store import IntegrityProjection, IntegrityStore

    if args.quick:
        groups, friends, dumpers, matches = 3, 4, 4, min(args.matches, 20)
    else:
        groups, friends, dumpers, matches = 40, 20, 20, args.matches
    groups = args.groups if args.groups is not None else groups
    friends = args.friends if args.friends is not None else friends
    dumpers = args.dumpers if args.dumpers is not None else dumpers
    threshold = DEFAULT_MIN_SCORE  # fixed before the run: the default of `shuangkou integrity report`
    pop = build(args.seed, groups, friends, dumpers)
    engine = Engine()
    redis_proc = None
    if shutil.which("redis-server") and not args.fakeredis:
        import redis

        from bench.pipeline import start_redis

        redis_proc, url, _version = start_redis()
        client: Any = redis.Redis.from_url(url)
    else:
        client = fakeredis.FakeRedis()
    store = IntegrityStore(client)
    from engine.tools.quality import evaluate

    proj = IntegrityProjection(store, evaluate=evaluate)
    import scipy.stats  # noqa: F401 - a one-off import, not a cost of each match
    rng = random.Random(args.seed * 7919)
    start = time.perf_counter()
    cpu0 = time.process_time()
    load0 = os.getloadavg()[0]
    marks: dict[str, dict[str, Any]] = {}
    for rnd in range(1, matches + 1):
        for i, (a, b, _kind) in enumerate(pop.pairs):
            x, y = (a, b) if rng.random() < 0.5 else (b, a)
            events = engine.play(f"r{rnd}-p{i}", pop.accounts[x], pop.accounts[y], rng)
            proj.observe(events)
        if rnd in (20, matches):
            marks[str(rnd)] = read_out(pop, store, threshold)
        if args.progress:
            Path(args.progress).write_text(f"round {rnd}/{matches}, {time.perf_counter() - start:.0f} s\n")
    redis_cpu_ms = None
    if redis_proc is not None:
        info = client.info("cpu")
        redis_cpu_ms = round((float(info["used_cpu_user"]) + float(info["used_cpu_sys"])) * 1000 / max(1, proj.matches), 3)
        from bench.pipeline import _stop

        _stop(redis_proc)
    counts = {k: sum(1 for *_, kk in pop.pairs if kk == k)
              for k in ("honest", "weak_strong", "friends", *KINDS)}
    report = {
        "matches_per_pair": matches,
        "threshold": threshold,
        "pairs": counts,
        "honest_pairs_total": marks[str(matches)]["honest"],
        "recall": {k: v["recall"] for k, v in marks.items()},
        "false_positive_rate": {k: v["false_positive_rate"] for k, v in marks.items()},
        "fpr_upper_95": {k: v["fpr_upper_95"] for k, v in marks.items()},
        "flagged_honest": {k: v["flagged_honest"] for k, v in marks.items()},
        "cpu_ms_per_match": round(proj.cpu_ms / max(1, proj.matches), 3),
        "redis_cpu_ms_per_match": redis_cpu_ms,
        "store": "redis-server" if redis_proc is not None else "fakeredis",
        "engine_cpu_ms_per_command": round(engine.cpu_ms / max(1, engine.commands), 4),
        "commands_per_match": round(engine.commands / max(1, proj.matches), 1),
        "matches": proj.matches,
        "seed": args.seed,
        "seconds": round(time.perf_counter() - start, 1),
        "process_cpu_seconds": round(time.process_time() - cpu0, 1),
        "load_average": [round(load0, 2), round(os.getloadavg()[0], 2)],
    }
    if args.serve_baseline:
        base = serve_baseline()
        report["serve_baseline"] = base
        per_match = base["serve_cpu_ms_per_command"] * report["commands_per_match"]
        report["integrity_share_of_serve"] = round(report["cpu_ms_per_match"] / per_match, 3) if per_match else None
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for k, v in report.items():
            print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
