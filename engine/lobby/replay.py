"""Replaying a queue or a table: fold :func:`engine.lobby.evolve.apply` over its events.

:func:`check_lobby_stream` audits a stored stream's envelope (one aggregate, seq 1, 2, 3…
with no gap, a table's first event TableOpened, nothing after TableClosed); a stream is
untrusted input, so what is wrong is reported, never raised.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from engine.lobby.events import LobbyEvent, TableClosed, TableOpened
from engine.lobby.evolve import apply
from engine.lobby.state import QueueState, TableState


def replay_queue(room: str, events: Iterable[LobbyEvent], state: QueueState | None = None) -> QueueState:
    """The queue after ``events`` (on top of ``state``; events at or below its version are skipped)."""
    s = state if state is not None else QueueState(room=room)
    for e in events:
        if e.seq > s.version:
            s = apply(s, e)
    return s


def replay_table(table: str, events: Iterable[LobbyEvent], state: TableState | None = None) -> TableState:
    """The table after ``events`` (on top of ``state``, as :func:`replay_queue`)."""
    s = state if state is not None else TableState(table=table)
    for e in events:
        if e.seq > s.version:
            s = apply(s, e)
    return s


def check_lobby_stream(events: Sequence[LobbyEvent]) -> list[str]:
    """Readable problems of a whole queue or table stream (empty: sound).

    >>> check_lobby_stream([])
    ['the stream is empty']
    """
    if not events:
        return ["the stream is empty"]
    problems: list[str] = []
    agg = events[0].aggregate
    is_table = agg.startswith("table:")
    if is_table and not isinstance(events[0], TableOpened):
        problems.append(f"seq {events[0].seq}: a table's first event is {type(events[0]).__name__}, not TableOpened")
    closed = False
    for i, e in enumerate(events):
        where = f"seq {e.seq} ({type(e).__name__})"
        if e.seq != i + 1:
            problems.append(f"{where}: expected seq {i + 1} (gap or reordering)")
        if e.aggregate != agg:
            problems.append(f"{where}: aggregate {e.aggregate!r} differs from {agg!r}")
        if closed:
            problems.append(f"{where}: event after the table closed")
        closed = closed or isinstance(e, TableClosed)
    return problems
