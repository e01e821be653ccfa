"""Bot strength benchmark: duplicate deals through the real engine.

    python bench/bots.py [--deals N] [--seed S] [--workers K] [--pairs a_vs_b,...] [--json] [--progress FILE]

Every deal is played twice per pair, the seats (and so the hands) swapped, through the
match service on an in-memory event store (fixed deals, the points room); each match's
score is the first bot's points from the engine's own settlement (projections.settlement).
Per pair (``hard_vs_greedy normal_vs_greedy greedy_vs_trustee hard_vs_normal``):
``win_rate`` (matches won by the first bot) and ``win_ci95`` (its 95 % interval, over deals),
``mean_score`` (its points per match) and
``ci95`` (both ends of the mean's 95 % interval, over deals: the two matches of a deal
are one sample, which is what duplicate deals are for).  ``decision_ms``: each level's
time per decision, ``p50`` and ``p99``, measured around ``Bot.choose`` as CPU time of
the thread (the cost on one core, whatever else the machine runs; a figure, never a test).  ``deals``: how many were played.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.config import RoomConfig, load_config  # noqa: E402
from engine.match.commands import CreateMatch, Deal, Pass, Play, Ready, Sit  # noqa: E402
from engine.rules.cards import NUM_CARDS  # noqa: E402
from engine.tools.bot import Bot  # noqa: E402
from engine.tools.view import view_of  # noqa: E402

PAIRS = ("hard_vs_greedy", "normal_vs_greedy", "greedy_vs_trustee", "hard_vs_normal")


def deal(seed: int, i: int) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """Deal ``i`` of a run: two hands of 27 (R-1.3) and the seat that leads (R-1.4)."""
    rng = random.Random(seed * 1_000_003 + i)
    deck = list(range(NUM_CARDS))
    rng.shuffle(deck)
    lead = rng.randrange(54)
    return tuple(deck[:27]), tuple(deck[27:54]), 0 if lead < 27 else 1


def play_match(config: RoomConfig, hands: tuple[tuple[int, ...], tuple[int, ...]], first: int,
               bots: tuple[Bot, Bot], times: dict[str, list[float]], mid: str, store: Any = None,
               players: tuple[str, str] = ("s0", "s1"), start_ms: int | None = None) -> dict[str, int]:
    """One match, seat 0 = ``bots[0]``; the settlement's scores by player (``players``, by
    default ``s0``, ``s1``).  ``store``: the event store to play into (default a fresh
    in-memory one); ``start_ms``: the match's clock at its start."""
    from engine.service.shuffle import seeded_random, seeded_server_seeds
    from engine.service.service import FixedBalances, MatchService
    from engine.store.memory import InMemoryEventStore
    from engine.tools.script import FakeClock
    from projections.settlement import settle

    store = store if store is not None else InMemoryEventStore()
    bal = config.levels[min(2, len(config.levels) - 1)].need
    service = MatchService(store, FakeClock() if start_ms is None else FakeClock(start_ms), seeded_random(0), deal_on_ready=False,
                           server_seeds=seeded_server_seeds(0), balances=FixedBalances({p: bal for p in players}))
    n = 0

    def run(cmd_type: Any, **fields: Any) -> Any:
        nonlocal n
        n += 1
        out = service.execute(cmd_type(command_id=f"{mid}:{n}", match_id=mid, **fields))
        if out.rejection is not None:
            raise RuntimeError(f"{mid}: {cmd_type.__name__} refused: {out.rejection}")
        return out.state

    run(CreateMatch, config=config.to_record())
    for p in players:
        run(Sit, player=p)
    for p in players:
        run(Ready, player=p)
    st = run(Deal, hands=hands, first=first)
    for _ in range(2000):
        if st.phase == "finished":
            break
        p = st.current_player
        bot = bots[players.index(p)]
        view = view_of(st, p)
        assert view is not None
        t = time.thread_time()
        play = bot.choose(view)
        times.setdefault(bot.policy, []).append((time.thread_time() - t) * 1000)
        st = run(Pass, player=p) if play is None else run(Play, player=p, cards=play.cards)
    result = settle(list(store.load(mid)))
    assert result is not None, f"{mid} did not finish"
    return dict(result.scores)


def run_deals(args: tuple[int, Sequence[int], Sequence[str], str]) -> dict[str, Any]:
    """Play deals ``ids`` for every pair: {pair: [(deal score, wins), ...]}, times."""
    seed, ids, pairs, config_name = args
    config = load_config(config_name)
    out: dict[str, list[tuple[float, int]]] = {p: [] for p in pairs}
    times: dict[str, list[float]] = {}
    for i in ids:
        h0, h1, first = deal(seed, i)
        for k, pair in enumerate(pairs):
            a, b = pair.split("_vs_")
            total = 0
            wins = 0
            for swap in (0, 1):
                base = (seed * 1_000_003 + i) * 16 + k * 2 + swap
                bot_a, bot_b = Bot(a, random.Random(base * 2)), Bot(b, random.Random(base * 2 + 1))
                bots = (bot_b, bot_a) if swap else (bot_a, bot_b)
                scores = play_match(config, (h0, h1), first, bots, times, f"d{i}-{pair}-{swap}")
                mine = scores["s1" if swap else "s0"]
                total += mine
                wins += mine > 0
            out[pair].append((total / 2, wins))
    return {"pairs": out, "times": times}


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def summarize(deals: int, pairs: Sequence[str], parts: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    report: dict[str, Any] = {"deals": deals}
    for pair in pairs:
        rows = [r for part in parts for r in part["pairs"][pair]]
        scores = [s for s, _ in rows]
        mean = statistics.fmean(scores)
        half = 1.96 * statistics.stdev(scores) / math.sqrt(len(scores)) if len(scores) > 1 else float("inf")
        wins = [w / 2 for _, w in rows]  # a deal's two matches: one sample
        rate = statistics.fmean(wins)
        whalf = 1.96 * statistics.stdev(wins) / math.sqrt(len(wins)) if len(wins) > 1 else float("inf")
        report[pair] = {"win_rate": round(rate, 4),
                        "win_ci95": [round(max(0.0, rate - whalf), 4), round(min(1.0, rate + whalf), 4)],
                        "mean_score": round(mean, 2), "ci95": [round(mean - half, 2), round(mean + half, 2)],
                        "matches": 2 * len(rows)}
    times: dict[str, list[float]] = {}
    for part in parts:
        for level, xs in part["times"].items():
            times.setdefault(level, []).extend(xs)
    report["decision_ms"] = {level: {"p50": round(_pct(xs, 0.5), 3), "p99": round(_pct(xs, 0.99), 3),
                                     "mean": round(statistics.fmean(xs), 3), "n": len(xs)}
                             for level, xs in sorted(times.items())}
    report["seconds"] = round(seconds, 1)
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--deals", type=int, default=100, help="duplicate deals (each played twice per pair)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=1, help="processes (deals are split among them)")
    ap.add_argument("--pairs", default=",".join(PAIRS), help="comma-separated a_vs_b pairs")
    ap.add_argument("--config", default="points", help="room config (default: the points room)")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    ap.add_argument("--progress", metavar="FILE", help="rewrite FILE with the report so far after every chunk")
    args = ap.parse_args(argv)
    if args.deals < 1 or args.workers < 1:
        ap.error("--deals and --workers must be at least 1")
    pairs = [p.strip() for p in args.pairs.split(",") if p.strip()]
    for p in pairs:
        a, _, b = p.partition("_vs_")
        for name in (a, b):
            Bot(name)  # an unknown level fails here, before any match
    start = time.perf_counter()
    # chunks of a few deals, in order of deal id: the report covers the chunks done so far
    # (``--progress FILE`` rewrites it after each chunk, so a long run can be read midway)
    step = max(1, min(25, args.deals // (4 * args.workers) or 1))
    jobs = [(args.seed, list(range(lo, min(lo + step, args.deals))), pairs, args.config)
            for lo in range(0, args.deals, step)]
    parts: list[dict[str, Any]] = []

    def done(part: dict[str, Any]) -> None:
        parts.append(part)
        if args.progress:
            n = sum(len(next(iter(p["pairs"].values()))) for p in parts)
            Path(args.progress).write_text(json.dumps(summarize(n, pairs, parts, time.perf_counter() - start),
                                                      indent=2) + "\n")
            print(f"{n}/{args.deals} deals, {time.perf_counter() - start:.0f} s", file=sys.stderr, flush=True)

    if args.workers == 1:
        for job in jobs:
            done(run_deals(job))
    else:
        with ProcessPoolExecutor(args.workers) as pool:
            for part in pool.map(run_deals, jobs):
                done(part)
    report = summarize(args.deals, pairs, parts, time.perf_counter() - start)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{args.deals} duplicate deals (seed {args.seed}), {report['seconds']} s")
    print(f"{'pair':<20} {'win_rate':>8} {'mean_score':>10} {'ci95':>20}")
    for pair in pairs:
        r = report[pair]
        print(f"{pair:<20} {r['win_rate']:>8.3f} {r['mean_score']:>10.2f} {str(r['ci95']):>20}")
    print(f"{'level':<10} {'p50 ms':>8} {'p99 ms':>8} {'decisions':>10}")
    for level, r in report["decision_ms"].items():
        print(f"{level:<10} {r['p50']:>8.2f} {r['p99']:>8.2f} {r['n']:>10}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
