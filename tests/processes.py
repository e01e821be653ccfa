"""Helpers for tests that start real processes (serve, dramatiq workers, gateways):
read a log's tail, poll for a condition, stop a process group by its PID."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


def tail(path: Path, chars: int = 4000) -> str:
    """The last ``chars`` characters of a log file ("" when it does not exist)."""
    return path.read_text(errors="replace")[-chars:] if path.exists() else ""


def wait_for(check: Callable[[], Any], timeout_s: float, what: str, logs: Sequence[Path] = ()) -> Any:
    """Poll ``check()`` until it returns a true value (returned); after ``timeout_s``
    fail with ``what`` and the tails of ``logs``."""
    end = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"{what} (waited {timeout_s}s)\n" +
                                 "\n".join(f"--- {p.name}:\n{tail(p)}" for p in logs))
        time.sleep(0.05)


def stop_group(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout_s: float = 20) -> int | None:
    """Signal the process group of ``proc`` (started with ``start_new_session``: dramatiq's
    worker processes too), SIGKILL what is left after ``timeout_s``; its return code."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # stragglers of the group, if any
    except ProcessLookupError:
        pass
    return proc.wait(timeout=10)
