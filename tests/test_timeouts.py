"""A test that hangs in ``asyncio.run`` is reported with what its tasks were waiting for
(tests/timeouts.py), alone and under xdist as CI runs the suite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.timeouts import SECTION

ROOT = Path(__file__).resolve().parents[1]

HANGS = '''
import asyncio


def test_hangs():
    async def main():
        await asyncio.create_task(asyncio.Event().wait(), name="waits-for-good")
    asyncio.run(main())


def test_passes():
    pass
'''


def _pytest(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """A pytest of its own on :data:`HANGS` in ``folder`` (its rootdir: not this suite's conftest),
    with this plugin."""
    (folder / "test_hangs.py").write_text(HANGS)
    (folder / "pytest.ini").write_text("[pytest]\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.timeouts", "-p", "no:cacheprovider", *args,
                           str(folder)], cwd=folder, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("xdist", [[], ["-n", "1"]], ids=["alone", "xdist"])
def test_a_test_that_hangs_reports_the_stacks_of_its_tasks(tmp_path, xdist):
    got = _pytest(tmp_path, "--timeout", "2", *xdist)
    out = got.stdout
    assert got.returncode == 1, out + got.stderr
    assert "1 failed, 1 passed" in out and "Timeout (>2.0s)" in out, out
    report = out[out.index(SECTION):]
    assert "waits-for-good" in report and "in wait" in report, out  # the task, at Event.wait
    assert "in main" in report  # asyncio.run's own task, awaiting it


def test_a_run_without_pytest_timeout_still_loads_the_plugin(tmp_path):
    """``-p no:timeout`` (a debugging session): the hook is optional, nothing fails."""
    got = _pytest(tmp_path, "-p", "no:timeout", "-k", "passes")
    assert got.returncode == 0 and "1 passed" in got.stdout, got.stdout + got.stderr
