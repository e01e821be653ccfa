"""Ranked matchmaking benchmark: the real queue aggregate and the real rating projection.

    python bench/matchmaking.py [--players N] [--seed S] [--rate R] [--bot-matches M] [--workers K] [--json]

A population of ``--players`` (default 2000) with a hidden strength each (a latent skill,
standard normal) arrives at the queue of a ranked room at a steady ``--rate`` (default 1
arrival per simulated second): each arrival is the idle player with the fewest arrivals so far
(ties at random), whose Join carries the rating the ladder shows them now.  The queue is
:mod:`engine.lobby` itself -- ``decide_and_apply`` with ``Join`` / ``PairTimer`` (every
simulated second) / ``ReleaseTable``, the clock only through ``LobbyContext.now_ms`` -- and
pairs by skill at the room config's rates (``match_window``, ``match_window_per_second``,
``match_max_wait_seconds``; engine/lobby/skill.py).  A paired match is decided at once, with
no card play, from the players' hidden strengths (the stronger wins with probability
``1 / (1 + exp(-(s_a - s_b) * --sharpness))``, default 1.5), then folded into the room's ladder by
the projection's own code (:meth:`projections.ladders.MemoryRatingStore.apply`, the fold of
projections/ratings.py); the players are idle again ``--match-seconds`` later.

It prints one JSON object (``--json``; else a few lines):

* ``players``; ``mean_rating_gap``: the mean rating gap of the pairs, from the ratings their
  Joins carried; ``random_pairing_gap``: the mean gap had each player of a pair met a random
  other player of the population instead (the same moments);
* ``wait_p50_s`` / ``wait_p99_s``: simulated seconds from a Join to the pairing;
* ``fallback_share``: the share of pairs made past the room's longest wait (TablePaired.fallback);
* ``spearman``: the Spearman rank correlation (scipy) of the ladder's rating with the hidden
  strength once the players averaged 10, 30 and 100 matches (keys ``"10"``, ``"30"``, ``"100"``);
* ``bot_levels_ordered``: whether ``easy < greedy < normal < hard`` on the ladder of a
  ``rate_bots`` room after ``--bot-matches`` (200) real bot-vs-bot matches -- full matches through
  the engine (bench/bots.py ``play_match``: duplicate deals, seats swapped), their events rated
  by the live projection's code (:class:`projections.ladders.RatingProjector`); ``bot_ratings``
  gives each level's rating; ``bot_win_rates`` each pair's matches and the stronger level's win
  rate with its 95 % interval (exact binomial); ``bot_order_confidence`` the share of bootstrap
  ladders (as many matches drawn with replacement from these, folded in the drawn order) that
  order the levels too: how much the verdict owes to these results rather than to their order.
* ``seconds``: the wall time.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import random
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.config import RoomConfig, load_config  # noqa: E402
from engine.lobby import commands as lc  # noqa: E402
from engine.lobby import events as ev  # noqa: E402
from engine.lobby.decide import LobbyContext, decide_and_apply  # noqa: E402
from engine.lobby.state import QueueState  # noqa: E402
from projections.ladders import MemoryRatingStore, RatingProjector  # noqa: E402
from projections.ratings import Ladder, RatedMatch  # noqa: E402

ROOM = "ranked"
SEASON = "bench"
LEVELS = ("easy", "greedy", "normal", "hard")  # weakest first, as the ladder must order them
CHECKPOINTS = (10, 30, 100)
BOOTSTRAP = 400  # bootstrap ladders behind ``bot_order_confidence``


def ranked_room(**over: Any) -> RoomConfig:
    """The points room made ranked (its matchmaking keys at their defaults unless ``over``)."""
    return load_config("points").model_copy(update={"name": ROOM, "ranked": True, **over})


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else 0.0


def simulate(players: int, seed: int, rate: float = 1.0, sharpness: float = 1.5, match_s: float = 0.0,
             cfg: RoomConfig | None = None) -> dict[str, Any]:
    """The queue and the ladder until the players averaged the last checkpoint's matches."""
    from scipy.stats import spearmanr

    cfg = cfg or ranked_room()
    rng = random.Random(seed)
    ids = [f"p{i:05d}" for i in range(players)]
    strength = {p: rng.gauss(0.0, 1.0) for p in ids}
    ratings = MemoryRatingStore()
    ratings.start_season(SEASON, 0)
    queue = QueueState(room=ROOM)
    arrivals = {p: 0 for p in ids}
    idle = [(0, rng.random(), p) for p in ids]  # a heap: (arrivals, tie-break, player)
    heapq.heapify(idle)
    busy: list[tuple[int, str]] = []  # (free again at ms, player)
    joined_at: dict[str, int] = {}
    waits: list[float] = []
    gaps: list[float] = []
    random_gaps: list[float] = []
    fallbacks = 0
    matches = 0
    spearman: dict[str, float] = {}
    step_ms = int(round(1000 / rate))
    now, n = 0, 0
    target = {k: k * players // 2 for k in CHECKPOINTS}

    def shown(p: str) -> float | None:
        sk = ratings.skill(ROOM, SEASON, p)
        return None if sk is None else sk.rating

    def decide(cmd: lc.LobbyCommand) -> list[ev.LobbyEvent]:
        nonlocal queue, n
        n += 1
        out, queue = decide_and_apply(queue, cmd, LobbyContext(now_ms=now, room=cfg, table_id=f"t{n}"))
        return out

    def handle(events: list[ev.LobbyEvent]) -> None:
        nonlocal fallbacks, matches
        todo = list(events)
        while todo:
            e = todo.pop(0)
            if not isinstance(e, ev.TablePaired):
                continue
            a, b = e.players
            ra, rb = (joined_rating[a] or 1000.0), (joined_rating[b] or 1000.0)
            gaps.append(abs(ra - rb))
            other = rng.choice(ids)
            while other == a:
                other = rng.choice(ids)
            random_gaps.append(abs(ra - (shown(other) or 1000.0)))
            fallbacks += e.fallback
            for p in (a, b):
                waits.append((now - joined_at.pop(p)) / 1000)
            p_a = 1.0 / (1.0 + math.exp(-(strength[a] - strength[b]) * sharpness))
            winner, loser = (a, b) if rng.random() < p_a else (b, a)
            ratings.apply(RatedMatch(e.match, ROOM, now, winner, loser, cfg.provisional_matches), SEASON)
            matches += 1
            todo += decide(lc.ReleaseTable(command_id=f"rel-{e.table}", room=ROOM, table=e.table, dealt=True))
            for p in (a, b):
                heapq.heappush(busy, (now + int(match_s * 1000), p))
            for k, want in target.items():
                if str(k) not in spearman and matches >= want:
                    rho = spearmanr([strength[p] for p in ids], [shown(p) or 1000.0 for p in ids]).statistic
                    spearman[str(k)] = round(float(rho), 4)

    joined_rating: dict[str, float | None] = {}
    while len(spearman) < len(CHECKPOINTS):
        now += step_ms
        while busy and busy[0][0] <= now:
            p = heapq.heappop(busy)[1]
            heapq.heappush(idle, (arrivals[p], rng.random(), p))
        handle(decide(lc.PairTimer(command_id=f"tick-{now}", room=ROOM)))
        if idle:
            p = heapq.heappop(idle)[2]  # the fewest arrivals so far, ties at random
            arrivals[p] += 1
            joined_at[p] = now
            joined_rating[p] = shown(p)
            handle(decide(lc.Join(command_id=f"j-{p}-{now}", room=ROOM, player=p, rating=joined_rating[p])))
    return {"players": players, "matches": matches,
            "mean_rating_gap": round(sum(gaps) / len(gaps), 2),
            "random_pairing_gap": round(sum(random_gaps) / len(random_gaps), 2),
            "wait_p50_s": round(_pct(waits, 0.50), 2), "wait_p99_s": round(_pct(waits, 0.99), 2),
            "fallback_share": round(fallbacks / max(matches, 1), 4), "spearman": spearman,
            "simulated_s": round(now / 1000, 1),
            "room": {k: getattr(cfg, k) for k in ("match_window", "match_window_per_second",
                                                  "match_max_wait_seconds", "provisional_matches")}}


def _bot_match(args: tuple[int, int, str, str, int]) -> list[Any]:
    """One real bot-vs-bot match of the rate_bots room; its events."""
    from engine.store.memory import InMemoryEventStore
    from engine.tools.bot import Bot

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bots import deal, play_match  # bench/bots.py

    i, seed, a, b, swap = args
    h0, h1, first = deal(seed, i // 2)
    cfg = ranked_room(name="botladder", rate_bots=True)
    levels = (b, a) if swap else (a, b)
    bots = (Bot(levels[0], random.Random(seed * 7919 + 2 * i)), Bot(levels[1], random.Random(seed * 7919 + 2 * i + 1)))
    store = InMemoryEventStore()
    mid = f"bots-{i:04d}"
    play_match(cfg, (h0, h1), first, bots, {}, mid, store=store,
               players=(f"bot-{levels[0]}", f"bot-{levels[1]}"), start_ms=1_000_000 + i * 10_000_000)
    return list(store.load(mid))


def bot_ladder(matches: int, seed: int, workers: int) -> dict[str, Any]:
    """``matches`` rated bot-vs-bot matches, the six pairs of levels in turn, each deal twice
    with the seats swapped; the ladder's rating of each level and whether they are ordered."""
    pairs = [(LEVELS[i], LEVELS[j]) for i in range(len(LEVELS)) for j in range(i + 1, len(LEVELS))]
    jobs = [(i, seed, *pairs[(i // 2) % len(pairs)], i % 2) for i in range(matches)]
    ratings = MemoryRatingStore()
    ratings.start_season(SEASON, 0)
    projector = RatingProjector(ratings)
    if workers > 1:
        with ProcessPoolExecutor(workers) as pool:
            results = list(pool.map(_bot_match, jobs, chunksize=4))
    else:
        results = [_bot_match(j) for j in jobs]
    rated = sum(projector.project(events) is not None for events in results)
    ladder = ratings.ladder("botladder", SEASON)
    shown = {lv: round(ladder.skill(f"bot-{lv}").rating, 1) for lv in LEVELS}
    matches = sorted(ladder.results.values(), key=lambda m: m.key)
    return {"bot_levels_ordered": levels_ordered(ladder), "bot_ratings": shown, "bot_matches_rated": rated,
            "bot_order_confidence": order_confidence(matches, random.Random(seed), BOOTSTRAP),
            "bot_win_rates": win_rates(matches)}


def levels_ordered(ladder: Ladder) -> bool:
    """Whether the ladder rates the bot levels ``easy < greedy < normal < hard``."""
    shown = [ladder.skill(f"bot-{lv}").rating for lv in LEVELS]
    return all(x < y for x, y in zip(shown, shown[1:]))


def order_confidence(matches: list[RatedMatch], rng: random.Random, samples: int) -> float:
    """The share of ``samples`` bootstrap ladders that order the levels: each folds as many
    matches drawn with replacement from ``matches``, in the drawn order, with the projection's
    own fold (:meth:`projections.ratings.Ladder.build`) -- how surely these results, not the
    luck of their order, put the levels in order."""
    if not matches:
        return 0.0
    ok = 0
    for _ in range(samples):
        drawn = [replace(rng.choice(matches), match_id=f"b{k:05d}", finished_ms=k) for k in range(len(matches))]
        ok += levels_ordered(Ladder.build("botladder", SEASON, drawn))
    return round(ok / samples, 4)


def win_rates(matches: list[RatedMatch]) -> dict[str, dict[str, Any]]:
    """Per pair of levels, stronger first (``"greedy_vs_easy"``): the matches, the stronger
    level's win rate and its 95 % interval (scipy's exact binomial interval)."""
    from scipy.stats import binomtest

    out: dict[str, dict[str, Any]] = {}
    for i, weak in enumerate(LEVELS):
        for strong in LEVELS[i + 1:]:
            pair = {f"bot-{weak}", f"bot-{strong}"}
            games = [m for m in matches if {m.winner, m.loser} == pair]
            if not games:
                continue
            won = sum(m.winner == f"bot-{strong}" for m in games)
            ci = binomtest(won, len(games)).proportion_ci(0.95)
            out[f"{strong}_vs_{weak}"] = {"matches": len(games), "win_rate": round(won / len(games), 4),
                                          "ci95": [round(ci.low, 4), round(ci.high, 4)]}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--players", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rate", type=float, default=1.0, help="arrivals per simulated second (default 1)")
    ap.add_argument("--sharpness", type=float, default=1.5,
                    help="how surely strength wins: P = 1/(1+exp(-Δs·k)), default 1.5")
    ap.add_argument("--match-seconds", type=float, default=0.0, help="simulated length of a match (default 0)")
    ap.add_argument("--bot-matches", type=int, default=200, help="rated bot-vs-bot matches (default 200; 0: skip)")
    ap.add_argument("--workers", type=int, default=2, help="processes for the bot matches (default 2)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    if args.players < 4 or args.rate <= 0 or args.bot_matches < 0 or args.workers < 1:
        ap.error("--players ≥ 4, --rate > 0, --bot-matches ≥ 0, --workers ≥ 1")
    t0 = time.perf_counter()
    with ProcessPoolExecutor(1) as side:  # the bot matches beside the queue (2 cores)
        bots = (side.submit(bot_ladder, args.bot_matches, args.seed, max(1, args.workers - 1))
                if args.bot_matches else None)
        report = simulate(args.players, args.seed, args.rate, args.sharpness, args.match_seconds)
        report.update(bots.result() if bots is not None else {"bot_levels_ordered": None})
    report["seconds"] = round(time.perf_counter() - t0, 1)
    if args.json:
        print(json.dumps(report))
    else:
        for k, v in report.items():
            print(f"{k}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
