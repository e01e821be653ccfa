"""bench/matchmaking.py --json runs end to end and prints every key issue 40 names (a smoke run
on a small population: the figures themselves are the benchmark's, docs/RANKED.md §7)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
KEYS = {"players", "mean_rating_gap", "random_pairing_gap", "wait_p50_s", "wait_p99_s", "fallback_share",
        "spearman", "bot_levels_ordered"}


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
    assert 0 <= report["fallback_share"] <= 1 and report["wait_p50_s"] <= report["wait_p99_s"]
    assert report["mean_rating_gap"] >= 0 and report["random_pairing_gap"] >= 0


def test_bench_refuses_bad_arguments() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "matchmaking.py"), "--players", "2"],
                         cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 2 and "--players" in out.stderr
