"""Clocks for the command service and the timer workers.

A clock reads milliseconds since the epoch.  Both classes can be called
(``clock()``) and expose ``now_ms()``; pass either to ``MatchService``.
:class:`FakeClock` only moves when a test moves it.
"""

from __future__ import annotations

import threading
import time
from typing import Any


class SystemClock:
    """Wall-clock milliseconds (``time.time()``)."""

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def __call__(self) -> int:
        return self.now_ms()

    def __repr__(self) -> str:
        return "SystemClock()"


class FakeClock:
    """A clock that only moves by :meth:`advance` / :meth:`set` (thread safe)."""

    def __init__(self, start_ms: int = 1_700_000_000_000):
        self._now = int(start_ms)
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        with self._lock:
            return self._now

    def __call__(self) -> int:
        return self.now_ms()

    def set(self, ms: int) -> None:
        """Move to ``ms`` (never backwards)."""
        with self._lock:
            if ms > self._now:
                self._now = int(ms)

    def advance(self, seconds: float) -> int:
        with self._lock:
            self._now += int(round(seconds * 1000))
            return self._now

    def __repr__(self) -> str:
        return f"FakeClock({self._now})"


def read_ms(clock: Any) -> int:
    """Milliseconds from any clock shape we meet: ``now_ms()``, a callable, or None (system)."""
    if clock is None:
        return int(time.time() * 1000)
    now_ms = getattr(clock, "now_ms", None)
    if callable(now_ms):
        return int(now_ms())
    return int(clock())
