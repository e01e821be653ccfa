"""bench/matchmaking.py --json runs end to end and prints every key issue 40 names (a smoke run
on a small population: the figures themselves are the benchmark's, docs/RANKED.md §7)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
KEYS = {"players", "mean_rating_gap", "random_pairing_gap", "wait_p50_s", "wait_p99_s", "fallback_share",
        "spearman", "bot_levels_ordered", "bot_order_confidence", "bot_win_rates"}


@pytest.mark.slow
def test_matchmaking_bench_prints_the_issue_keys() -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "matchmaking.py"), "--players", "40", "--seed", "3",
                          "--bot-matches", "4", "--workers", "2", "--json"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout)
    assert KEYS <= set(report)
    assert report["players"] == 40 and set(report["spearman"]) == {"10", "30", "100"}
    assert all(-1.0 <= v <= 1.0 for v in report["spearman"].values())
    assert isinstance(report["bot_levels_ordered"], bool) and report["bot_matches_rated"] == 4
    assert 0 <= report["bot_order_confidence"] <= 1
    assert sum(r["matches"] for r in report["bot_win_rates"].values()) == 4
    assert 0 <= report["fallback_share"] <= 1 and report["wait_p50_s"] <= report["wait_p99_s"]
    assert report["mean_rating_gap"] >= 0 and report["random_pairing_gap"] >= 0


def test_bench_refuses_bad_arguments() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "matchmaking.py"), "--players", "2"],
                         cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and "--players" in out.stderr


# -- the bot ladder's statistics (bench/matchmaking.py, bench/ladder_order.py) -------------------

def _matches(rounds: int, upset: Callable[[int, str], bool] = lambda _r, _p: False) -> list:
    """``rounds`` of the six pairs of levels, the stronger winning unless ``upset(round, "strong_vs_weak")``."""
    from bench.matchmaking import LEVELS
    from projections.ratings import RatedMatch

    out = []
    for rnd in range(rounds):
        for i, weak in enumerate(LEVELS):
            for strong in LEVELS[i + 1:]:
                w, lo = (weak, strong) if upset(rnd, f"{strong}_vs_{weak}") else (strong, weak)
                out.append(RatedMatch(f"m{len(out):04d}", "botladder", len(out), f"bot-{w}", f"bot-{lo}"))
    return out


def test_bot_win_rates_count_each_pair() -> None:
    from bench.matchmaking import win_rates

    rates = win_rates(_matches(5, lambda _r, pair: pair == "hard_vs_normal"))
    assert set(rates) == {"greedy_vs_easy", "normal_vs_easy", "hard_vs_easy", "normal_vs_greedy",
                          "hard_vs_greedy", "hard_vs_normal"}
    assert all(r["matches"] == 5 for r in rates.values())
    assert rates["hard_vs_normal"]["win_rate"] == 0.0 and rates["greedy_vs_easy"]["win_rate"] == 1.0
    low, high = rates["greedy_vs_easy"]["ci95"]
    assert 0 < low < 1 == high


def test_order_confidence_is_high_for_clear_results_and_low_for_coin_flips() -> None:
    import random

    from bench.matchmaking import order_confidence

    assert order_confidence([], random.Random(1), 50) == 0.0
    assert order_confidence(_matches(30), random.Random(1), 50) == 1.0
    flips = _matches(30, lambda rnd, _p: rnd % 2 == 1)  # each pair split evenly
    assert order_confidence(flips, random.Random(1), 100) < 0.5


def test_ladder_order_needs_levels_apart() -> None:
    from bench.ladder_order import MEASURED, ordered_share

    assert ordered_share({p: 0.99 for p in MEASURED}, 200, 20, seed=1) == 1.0
    assert ordered_share({p: 0.5 for p in MEASURED}, 200, 50, seed=1) < 0.3  # one order of 24


def test_ladder_order_reads_a_bots_report(tmp_path: Path) -> None:
    report = {"deals": 1, "easy_vs_greedy": {"win_rate": 0.25}, "normal_vs_easy": {"win_rate": 0.9},
              "hard_vs_easy": {"win_rate": 0.95}, "greedy_vs_normal": {"win_rate": 0.3},
              "hard_vs_greedy": {"win_rate": 0.9}, "hard_vs_normal": {"win_rate": 0.7}}
    (tmp_path / "r.json").write_text(json.dumps(report))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "ladder_order.py"), "--rates", str(tmp_path / "r.json"),
                          "--matches", "24", "--ladders", "3", "--json"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout)
    assert got["ladders"] == 3 and set(got["ordered"]) == {"24"} and 0 <= got["ordered"]["24"] <= 1
    del report["hard_vs_normal"]
    (tmp_path / "r.json").write_text(json.dumps(report))
    bad = subprocess.run([sys.executable, str(ROOT / "bench" / "ladder_order.py"), "--rates", str(tmp_path / "r.json")],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "lacks" in bad.stderr
