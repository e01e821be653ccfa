"""bench/page.py measures what it says: the page of this checkout and of a baseline commit, each
fed the same moves at both viewports, and ``--json`` reports Chromium's counters per update
(their values stay in the benchmark, never asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent


def test_the_page_and_a_baseline_are_measured_at_both_viewports() -> None:
    out = subprocess.run([sys.executable, "bench/page.py", "--baseline", "HEAD", "--runs", "1", "--updates", "4",
                          "--json"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    rep = json.loads(out.stdout)
    assert set(rep["ratio"]) == {"desktop", "phone"}
    for code in ("head", "baseline"):
        for viewport in ("desktop", "phone"):
            got = rep[code][viewport]
            assert got["updates"] == 4
            assert set(got["median"]) == {"layouts", "style_recalcs", "layout_ms", "style_ms", "task_ms"}
            assert got["median"]["layouts"] > 0  # each update is laid out at least by its frame


def test_a_baseline_that_is_no_commit_is_refused() -> None:
    out = subprocess.run([sys.executable, "bench/page.py", "--baseline", "no-such-ref", "--runs", "1", "--updates",
                          "1"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "no-such-ref" in out.stderr
