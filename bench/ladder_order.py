"""How often the rating fold orders the bot levels, from their head-to-head win rates alone.

    python bench/ladder_order.py [--rates FILE] [--matches 200,400,800] [--ladders N] [--seed S] [--json]

Each simulated ladder is what bench/matchmaking.py's bot ladder is, with the card play replaced
by a draw: matches among ``easy greedy normal hard``, the six pairs in turn, two matches a pair
at a time, the stronger level winning with the pair's win rate; folded in order by the
projection's own code (:class:`projections.ladders.MemoryRatingStore`).  It prints, per number of
matches, the share of ``--ladders`` ladders (default 300) that rate ``easy < greedy < normal <
hard``.  ``--rates``: a bench/bots.py ``--json`` report whose pairs are ``strong_vs_weak`` or
``weak_vs_strong`` (default: the levels' figures in docs/BOTS.md).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from projections.ladders import MemoryRatingStore  # noqa: E402
from projections.ratings import RatedMatch  # noqa: E402

LEVELS = ("easy", "greedy", "normal", "hard")
#: the stronger level's win rate per pair (docs/BOTS.md, 800 matches a pair)
MEASURED = {("greedy", "easy"): 0.743, ("normal", "easy"): 0.912, ("hard", "easy"): 0.960,
            ("normal", "greedy"): 0.710, ("hard", "greedy"): 0.917, ("hard", "normal"): 0.731}


def rates_of(report: dict[str, object]) -> dict[tuple[str, str], float]:
    """The stronger level's win rate per pair, from a bench/bots.py report."""
    out: dict[tuple[str, str], float] = {}
    for pair, row in report.items():
        if "_vs_" not in pair or not isinstance(row, dict):
            continue
        a, b = pair.split("_vs_")
        rate = float(row["win_rate"])
        if LEVELS.index(a) > LEVELS.index(b):
            out[(a, b)] = rate
        else:
            out[(b, a)] = 1.0 - rate
    return out


def ordered_share(rates: dict[tuple[str, str], float], matches: int, ladders: int, seed: int) -> float:
    """The share of ``ladders`` simulated ladders of ``matches`` matches that order the levels."""
    pairs = [(LEVELS[j], LEVELS[i]) for i in range(len(LEVELS)) for j in range(i + 1, len(LEVELS))]
    rng = random.Random(seed)
    ok = 0
    for _ in range(ladders):
        store = MemoryRatingStore()
        store.start_season("sim", 0)
        for k in range(matches):
            strong, weak = pairs[(k // 2) % len(pairs)]
            won = rng.random() < rates[(strong, weak)]
            winner, loser = (f"bot-{strong}", f"bot-{weak}") if won else (f"bot-{weak}", f"bot-{strong}")
            store.apply(RatedMatch(f"m{k:06d}", "sim", 1000 + k, winner, loser), "sim")
        lad = store.ladder("sim", "sim")
        shown = [lad.skill(f"bot-{lv}").rating for lv in LEVELS]
        ok += all(x < y for x, y in zip(shown, shown[1:]))
    return ok / ladders


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rates", help="a bench/bots.py --json report (default: docs/BOTS.md's figures)")
    ap.add_argument("--matches", default="200,400,800", help="comma-separated ladder lengths")
    ap.add_argument("--ladders", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rates = rates_of(json.loads(Path(args.rates).read_text())) if args.rates else MEASURED
    missing = [p for p in MEASURED if p not in rates]
    if missing:
        ap.error(f"--rates lacks the pairs {missing}")
    lengths = [int(m) for m in args.matches.split(",") if m.strip()]
    if args.ladders < 1 or not lengths or min(lengths) < 1:
        ap.error("--ladders ≥ 1, --matches ≥ 1")
    report = {str(m): round(ordered_share(rates, m, args.ladders, args.seed), 4) for m in lengths}
    print(json.dumps({"ladders": args.ladders, "ordered": report}) if args.json else
          "\n".join(f"{m} matches: ordered in {v:.1%} of {args.ladders} ladders" for m, v in report.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
