"""Rules-engine benchmark: prints figures, never asserts on time.

    python bench/rules.py            # full run (~1 min)
    python bench/rules.py --quick    # a few seconds

Figures (medians over the repeats):
* classify on typical plays, µs/call, with the reading cache warm and cleared;
* can_beat and smallest_beating on random 27-card hands with 0-4 jokers
  against random previous plays, µs/call;
* random-legal-move self-play steps/s (two players, 27-card seeded deals; a
  step is one decision: a play picked uniformly from legal_plays, or -- when
  following -- a pass, which is one more equally likely choice);
* RLCard DouDizhu steps/s with random legal actions, and the ratio ours/RLCard.

Every repeat starts with the engine.rules.moves caches cleared (cold start).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.rules import moves  # noqa: E402
from engine.rules.cards import parse_cards  # noqa: E402
from engine.rules.classify import classify, interpretations_for_counts  # noqa: E402
from engine.rules.moves import can_beat, legal_plays, pick_cards, smallest_beating  # noqa: E402

TYPICAL_PLAYS = [
    "7", "BJ", "9 9", "Q SJ", "K K K", "3 4 5 6 7", "5 6 7 8 BJ", "9 10 J Q K A",
    "3 3 4 4 5 5", "6 6 7 SJ 8 8 9 9", "4 4 4 5 5 5 6 6 6", "8 8 8 8", "2 2 2 BJ",
    "5 5 5 5 5 5 SJ", "SJ SJ BJ", "SJ SJ BJ BJ", "4 4 4 4 5 5 5 5 6 6 6 6",
    "4 4 4 4 5 5 5 5 5 6 6 6 BJ", "3 3 4 4 BJ",
]
JOKERS = (52, 53, 106, 107)
NATURALS = tuple(c for c in range(108) if c % 54 < 52)


def clear_caches() -> None:
    for name in ("_legal", "_all_bombs", "_seq_window", "_seq_all", "_chain_window", "_fills",
                 "_pairs_at", "_triples_at", "_bombs_at", "_joker_only"):
        getattr(moves, name).cache_clear()


def random_hand(rng: random.Random, jokers: int) -> list[int]:
    return sorted(rng.sample(NATURALS, 27 - jokers) + rng.sample(JOKERS, jokers))


def bench_classify(repeats: int, rounds: int) -> tuple[float, float]:
    plays = [parse_cards(t) for t in TYPICAL_PLAYS]
    warm, cold = [], []
    for _ in range(repeats):
        for p in plays:
            classify(p)
        t = time.perf_counter()
        for _ in range(rounds):
            for p in plays:
                classify(p)
        warm.append((time.perf_counter() - t) / (rounds * len(plays)) * 1e6)
        clear = interpretations_for_counts.cache_clear
        t = time.perf_counter()
        for _ in range(rounds):
            for _p in plays:
                clear()
        base = time.perf_counter() - t
        t = time.perf_counter()
        for _ in range(rounds):
            for p in plays:
                clear()
                classify(p)
        cold.append((time.perf_counter() - t - base) / (rounds * len(plays)) * 1e6)
    return statistics.median(warm), statistics.median(cold)


def make_cases(rng: random.Random, n: int) -> list[tuple[list[int], object]]:
    cases = []
    for _ in range(n):
        hand = random_hand(rng, rng.randint(0, 4))
        other = random_hand(rng, rng.randint(0, 4))
        cases.append((hand, rng.choice(legal_plays(other))))
    return cases


def bench_following(repeats: int, n: int) -> dict[str, float]:
    per_call = {"can_beat": [], "smallest_beating": []}
    run_means = {"can_beat": [], "smallest_beating": []}
    for rep in range(repeats):
        cases = make_cases(random.Random(1000 + rep), n)
        clear_caches()
        for name, fn in (("can_beat", can_beat), ("smallest_beating", smallest_beating)):
            times = []
            clock = time.perf_counter_ns
            for hand, prev in cases:
                t = clock()
                fn(hand, prev)
                times.append(clock() - t)
            per_call[name].extend(times)
            run_means[name].append(sum(times) / len(times) / 1000)
    bomb_times = []
    for rep in range(repeats):
        cases = [(h, p) for h, p in make_cases(random.Random(2000 + rep), n * 3) if p.is_bomb]
        clear_caches()
        clock = time.perf_counter_ns
        for hand, prev in cases:
            t = clock()
            can_beat(hand, prev)
            bomb_times.append(clock() - t)
    per_call["can_beat (bomb prevs only)"] = bomb_times
    out = {}
    for name in per_call:
        if name not in run_means:
            out[f"{name} median µs/call"] = statistics.median(per_call[name]) / 1000
            out[f"{name} p99 µs/call"] = sorted(per_call[name])[int(len(per_call[name]) * 0.99)] / 1000
            continue
        out[f"{name} median µs/call"] = statistics.median(per_call[name]) / 1000
        out[f"{name} mean µs/call (median of runs)"] = statistics.median(run_means[name])
        out[f"{name} p99 µs/call"] = sorted(per_call[name])[int(len(per_call[name]) * 0.99)] / 1000
    return out


def self_play_game(rng: random.Random) -> int:
    deck = list(range(108))
    rng.shuffle(deck)
    hands = [sorted(deck[:27]), sorted(deck[27:54])]
    turn, prev, steps = 0, None, 0
    while True:
        hand = hands[turn]
        plays = legal_plays(hand, prev)
        steps += 1
        k = rng.randrange(len(plays) + (prev is not None))
        if k == len(plays):  # pass: the other player leads
            prev, turn = None, turn ^ 1
            continue
        combo = plays[k]
        used = set(pick_cards(hand, combo.counts))
        hands[turn] = hand = [c for c in hand if c not in used]
        if not hand:
            return steps
        prev, turn = combo, turn ^ 1


def self_play_rate(seed: int, seconds: float, cold_games: bool = False) -> tuple[float, int]:
    """Steps/s of our random self-play for ``seconds`` (caches cleared first)."""
    clear_caches()
    rng = random.Random(seed)
    steps = games = 0
    t = time.perf_counter()
    while time.perf_counter() - t < seconds:
        if cold_games:
            clear_caches()
        steps += self_play_game(rng)
        games += 1
    return steps / (time.perf_counter() - t), games


def rlcard_rate(seed: int, seconds: float) -> float:
    """Steps/s of RLCard DouDizhu with uniformly random legal actions."""
    import rlcard

    env = rlcard.make("doudizhu", config={"seed": seed})
    rng = random.Random(seed)
    steps = 0
    t = time.perf_counter()
    while time.perf_counter() - t < seconds:
        state, _ = env.reset()
        while not env.is_over():
            state, _ = env.step(rng.choice(list(state["legal_actions"])))
            steps += 1
    return steps / (time.perf_counter() - t)


def bench_self_play(repeats: int, seconds: float) -> dict[str, float]:
    """Ours (warm within a run / caches cleared every game) and RLCard,
    interleaved per repeat so that both see the same machine load."""
    try:
        import rlcard  # noqa: F401
        have_rlcard = True
    except ImportError:
        have_rlcard = False
    ours, cold, theirs, ratio, ratio_cold, games = [], [], [], [], [], 0
    for rep in range(repeats):
        r, g = self_play_rate(rep, seconds)
        c, g2 = self_play_rate(rep, seconds / 2, cold_games=True)
        ours.append(r)
        cold.append(c)
        games += g + g2
        if have_rlcard:
            x = rlcard_rate(rep, seconds)
            theirs.append(x)
            ratio.append(r / x)
            ratio_cold.append(c / x)
    out = {"ours": statistics.median(ours), "ours_cold": statistics.median(cold), "games": games}
    if have_rlcard:
        out.update(rlcard=statistics.median(theirs), ratio=statistics.median(ratio),
                   ratio_cold=statistics.median(ratio_cold))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a short run (1 repeat, small samples)")
    args = ap.parse_args(argv)
    repeats = 1 if args.quick else 5
    started = time.perf_counter()

    warm, cold = bench_classify(repeats, 50 if args.quick else 400)
    print(f"classify, typical plays ({len(TYPICAL_PLAYS)} kinds):  cached {warm:7.2f} µs/call   "
          f"uncached {cold:7.2f} µs/call")

    fig = bench_following(repeats, 200 if args.quick else 1000)
    for k, v in fig.items():
        print(f"{k:45s} {v:9.2f}")

    seconds = 1.0 if args.quick else 3.0
    sp = bench_self_play(repeats, seconds)
    print(f"self-play (random legal moves)               {sp['ours']:9.0f} steps/s  ({sp['games']} games)")
    print(f"self-play, move caches cleared every game    {sp['ours_cold']:9.0f} steps/s")
    can = fig["can_beat median µs/call"]
    line = f"targets: can_beat median < 50 µs: {'met' if can < 50 else 'MISSED'} ({can:.2f} µs)"
    if "rlcard" not in sp:
        print("RLCard not installed: no comparison")
    else:
        print(f"RLCard DouDizhu (random legal actions)       {sp['rlcard']:9.0f} steps/s")
        print(f"ratio ours / RLCard (median of repeats)      {sp['ratio']:9.2f}x"
              f"   (caches cleared every game: {sp['ratio_cold']:.2f}x)")
        line += f"; self-play >= RLCard: {'met' if sp['ratio'] >= 1 else 'MISSED'}"
        line += f"; 2x goal: {'met' if sp['ratio'] >= 2 else 'missed'}"
    print(line)
    print(f"bench runtime {time.perf_counter() - started:.1f} s")


if __name__ == "__main__":
    main()
