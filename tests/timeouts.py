"""What a test that hangs was waiting for (a pytest plugin; tests/conftest.py loads it).

pytest-timeout's signal handler fails the test with the stacks of the threads, so a test that
hangs inside ``asyncio.run`` shows only the event loop waiting in ``select``.  This wraps
pytest-timeout's timer: when it fires, the stack of every task of the event loop running in
the main thread is added to the failed test's report (section ``stacks at the timeout``, which
xdist carries back too), then pytest-timeout's own handler fails the test as before.
"""

from __future__ import annotations

import asyncio
import io
import signal
import threading
from typing import Any

import pytest

SECTION = "stacks at the timeout"


@pytest.hookimpl(wrapper=True, optionalhook=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> Any:
    """pytest-timeout's timer, its SIGALRM handler preceded by :func:`stacks` (without
    pytest-timeout, ``-p no:timeout``, nothing)."""
    armed = yield
    if settings.method == "signal" and threading.current_thread() is threading.main_thread():
        fail = signal.getsignal(signal.SIGALRM)
        if callable(fail):
            def report_then_fail(signum: int, frame: Any) -> None:
                try:
                    item.add_report_section("call", SECTION, stacks())
                finally:  # the timeout's own failure, whatever the report did
                    fail(signum, frame)
            signal.signal(signal.SIGALRM, report_then_fail)
    return armed


def stacks() -> str:
    """The stack of each task of the event loop running in this thread, if one runs."""
    out = io.StringIO()
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        out.write("no event loop runs in the main thread\n")
    else:
        for task in sorted(asyncio.all_tasks(loop), key=lambda t: t.get_name()):
            out.write(f"--- {task!r}\n")
            task.print_stack(file=out)
    return out.getvalue()
