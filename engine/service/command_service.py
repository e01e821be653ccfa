"""One command service for every aggregate (docs/ARCHITECTURE.md "How a command flows").

:class:`CommandService` runs a command on the aggregate it names along one straight path:

1. **load**: the aggregate's cached state (unverified), or its stream (verified);
2. **decide** (``decide_and_apply``: the events and the state after them), with the
   context the aggregate's :class:`Aggregate` builds (the clock, ids, configs: everything
   from outside, recorded in the events);
3. **append** with the state's version as the expected version (the store checks the
   command id first, then the version, atomically);
4. **publish**: the cache, then ``on_commit`` (the process managers, a publisher).

One retry rule: a decision is made again on the stream's state whenever the state it was
made on may be stale -- a :class:`WrongVersion` from the append, or a refusal decided on
a cached (unverified) state.  Catching up a cached state costs no retry; a conflict on a
verified state does, up to ``retries``, after which the :class:`WrongVersion` propagates
(the caller redelivers).  A refusal never raises: it comes back in the :class:`Outcome`,
unless the command id's events are stored (a retried command: a duplicate).

The aggregate is a value: :class:`Aggregate` says how to name, build, decide and frame
it; :class:`Streams` how to read and append its events.  The lobby's queue and table use
it as is (engine/service/lobby.py); the match's :class:`engine.service.service.MatchService`
still runs its own loop (it pipelines appends, carries publications and snapshots).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from engine.match.errors import Rejected
from engine.store.base import WrongVersion

_log = logging.getLogger(__name__)

S = TypeVar("S")
C = TypeVar("C")
C_contra = TypeVar("C_contra", contravariant=True)


class Aggregate(Protocol[S, C_contra]):
    """How one kind of aggregate is named, started, decided and folded."""

    def id_of(self, command: C_contra) -> str:
        """The id of the aggregate ``command`` is for (its stream)."""
        ...

    def empty(self, ident: str) -> S:
        """The state before the first event."""
        ...

    def version(self, state: S) -> int: ...

    def replay(self, events: Sequence[Any], state: S) -> S:
        """``state`` after ``events`` (events at or below its version are skipped)."""
        ...

    def context(self, command: C_contra, state: S) -> Any:
        """The decide context for ``command`` on ``state`` (reads the world: clock, ids…)."""
        ...

    def decide_and_apply(self, state: S, command: C_contra, ctx: Any) -> tuple[list[Any], S]: ...


class Appended(Protocol):
    """An append's result (engine/store/base.py, engine/store/lobby_store.py)."""

    @property
    def version(self) -> int: ...

    @property
    def duplicate(self) -> bool: ...

    @property
    def events(self) -> tuple[Any, ...]: ...


class Streams(Protocol):
    """The event store as one aggregate kind sees it."""

    def load(self, ident: str, after: int = 0) -> list[Any]: ...

    def append(self, ident: str, expected_version: int, command_id: str, events: Sequence[Any]) -> Appended: ...

    def command_events(self, ident: str, command_id: str) -> list[Any]: ...


class Cache(Protocol):
    def get(self, ident: str) -> Any | None: ...

    def put(self, ident: str, state: Any) -> None: ...


class DictCache:
    """A small per-process cache of states by aggregate id (newest version kept)."""

    def __init__(self, size: int = 50_000):
        self.size = size
        self._states: dict[str, Any] = {}

    def get(self, ident: str) -> Any | None:
        return self._states.get(ident)

    def put(self, ident: str, state: Any) -> None:
        old = self._states.get(ident)
        if old is not None and getattr(old, "version", 0) > getattr(state, "version", 0):
            return
        if len(self._states) >= self.size and ident not in self._states:
            self._states.pop(next(iter(self._states)))
        self._states[ident] = state


@dataclass(frozen=True)
class Outcome(Generic[S]):
    """What one command did: its events (appended now, or the stored ones of a duplicate),
    the state after it, or the refusal."""

    ident: str
    events: tuple[Any, ...]
    state: S
    rejection: Rejected | None = None
    duplicate: bool = False
    attempts: int = field(default=1, compare=False)

    @property
    def accepted(self) -> bool:
        return self.rejection is None


class CommandService(Generic[S, C]):
    """Load, decide, append, publish (the module docstring); one instance per aggregate kind."""

    def __init__(self, aggregate: Aggregate[S, C], streams: Streams, *, cache: Cache | None = None,
                 retries: int = 5, on_commit: Callable[[Outcome[S]], None] | None = None):
        self.aggregate = aggregate
        self.streams = streams
        self.cache = cache
        self.retries = retries
        self.on_commit = on_commit

    def load(self, ident: str) -> S:
        """The aggregate's state from its stream (on top of the cached state, if any)."""
        cached = self.cache.get(ident) if self.cache is not None else None
        base = cached if cached is not None else self.aggregate.empty(ident)
        state = self.aggregate.replay(self.streams.load(ident, after=self.aggregate.version(base)), base)
        if self.cache is not None:
            self.cache.put(ident, state)
        return state

    def execute(self, command: C) -> Outcome[S]:
        agg = self.aggregate
        ident = agg.id_of(command)
        cid: str = getattr(command, "command_id")
        state = self.cache.get(ident) if self.cache is not None else None
        verified = state is None
        if state is None:
            state = self.load(ident)
        attempts, conflicts = 0, 0
        while True:
            attempts += 1
            try:
                events, new = agg.decide_and_apply(state, command, agg.context(command, state))
            except Rejected as rej:
                if not verified:  # never refuse on a cached state: decide again on the stream's
                    state, verified = self.load(ident), True
                    continue
                stored = self.streams.command_events(ident, cid) if agg.version(state) else []
                if stored:
                    return Outcome(ident, tuple(stored), state, None, True, attempts)
                return Outcome(ident, (), state, rej, False, attempts)
            if not events:
                return Outcome(ident, (), state, None, False, attempts)
            try:
                result = self.streams.append(ident, agg.version(state), cid, events)
            except WrongVersion:
                if verified:
                    conflicts += 1
                    if conflicts >= self.retries:
                        raise
                state, verified = self.load(ident), True
                continue
            if result.duplicate:
                return Outcome(ident, tuple(result.events), self.load(ident), None, True, attempts)
            if self.cache is not None:
                self.cache.put(ident, new)
            outcome: Outcome[S] = Outcome(ident, tuple(events), new, None, False, attempts)
            if self.on_commit is not None:
                try:
                    self.on_commit(outcome)
                except Exception:  # the append was the commit; the managers re-derive from the stream
                    _log.exception("on_commit failed after %s on %s", cid, ident)
            return outcome
