"""bench/pipeline.py --quick --json runs end to end and reports every figure issue 13 names
(a smoke run: the speed figures themselves stay in the benchmark, never asserted here)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.tool_support import need

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_pipeline_bench_quick_json_has_the_issue_keys() -> None:
    need("redis-server", "apt-get install redis-server")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("REDIS_URL", None)
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "pipeline.py"), "--quick", "--json"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout)
    for level in ("c1", "c16", "c64"):
        figures = report[level]
        for key in ("serve_cps", "floor_cps", "ratio", "p50_ms", "floor_p50_ms", "p99_ms", "floor_p99_ms"):
            assert isinstance(figures[key], (int, float)) and figures[key] > 0, (level, key, figures)
        assert figures["ratio"] == pytest.approx(figures["serve_cps"] / figures["floor_cps"], rel=0.01)
        assert len(figures["run_ratios"]) == len(figures["run_p50_ratios"]) == figures["runs"] == 1
        assert figures["run_ratios"] == [pytest.approx(figures["ratio"], rel=0.01)]  # one run: its own ratio
        # each process kind's CPU per command, serve's run and the floor's (the VM's 2 cores are shared)
        for side in ("serve_cpu_us_per_command", "floor_cpu_us_per_command"):
            assert set(figures[side]) == {"server", "driver", "redis"}, (level, side, figures[side])
            assert all(isinstance(v, float) and v > 0 for v in figures[side].values()), (level, side, figures[side])
    assert report["redis_commands_per_command"] > 0
    by_name = report["redis_commands_per_command_by_name"]
    assert by_name["evalsha"] > 0 and by_name["xreadgroup"] > 0 and "info" not in by_name
    assert abs(sum(by_name.values()) - report["redis_commands_per_command"]) < 0.05
    assert report["serve_commands_per_command"] > 0 and report["serve_round_trips_per_command"] > 0
    # the projections' own share, counted live in serve's projection thread (issue 13 §2)
    assert 0 < report["projections_round_trips_per_command"] < report["serve_round_trips_per_command"]
    assert set(report["projections_round_trips_per_command_by_level"]) == {"c1", "c16"}
    # serve's round trips by thread and shape: at c1 the command loop's append is one per command
    shapes = report["serve_round_trips_by_shape"]["c1"]
    assert shapes["read player"]["EVALSHA(redis_store)"] > 0.5, shapes
