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
made on may be stale -- a :class:`WrongVersion` from the append, or a refusal or a no-op
decided on a cached (unverified) state.  Catching up a cached state costs no retry; a conflict on a
verified state does, up to ``retries``, after which the :class:`WrongVersion` propagates
(the caller redelivers).  A refusal never raises: it comes back in the :class:`Outcome`,
unless the command id's events are stored (a retried command: a duplicate).

The aggregate is a value: :class:`Aggregate` says how to name, build, decide and frame
it; :class:`Streams` how to read and append its events.  Every aggregate runs here: the
match (:meth:`engine.service.service.MatchService.execute`: its snapshot is the streams'
``base``, its deadline goes with each append, a Sync reads the truth), a room's queue and
a table (engine/service/lobby.py).  What the match adds around it: pipelined rounds of
appends (``MatchService.execute_many``), which fall back to this path for anything but a
plain accepted append.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from engine.match.errors import Rejected
from engine.store.base import StreamTrimmed, WrongVersion

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
    """The event store as one aggregate kind sees it.  ``append`` gets the state after the
    events too (a match records its next deadline with them); a store may offer
    ``base(ident)``, a saved state to replay the tail on (a match's snapshot), and
    ``confirm(ident)``, called before a duplicate found without an append is answered (the
    original write on the replicas, ``--replica-acks``)."""

    def load(self, ident: str, after: int = 0) -> list[Any]: ...

    def version(self, ident: str) -> int: ...

    def append(self, ident: str, expected_version: int, command_id: str, events: Sequence[Any],
               state: Any) -> Appended: ...

    def command_events(self, ident: str, command_id: str) -> list[Any]: ...


class Cache(Protocol):
    """The newest known states by aggregate id (never trusted: an append checks them)."""

    def get(self, ident: str) -> Any | None: ...

    def put(self, ident: str, state: Any) -> None: ...

    def replace(self, ident: str, state: Any) -> None:
        """Keep ``state`` even if the cached one looks newer (the stream is behind it)."""
        ...


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
        self.replace(ident, state)

    def replace(self, ident: str, state: Any) -> None:
        if len(self._states) >= self.size and ident not in self._states:
            self._states.pop(next(iter(self._states)))
        self._states[ident] = state


@dataclass(frozen=True)
class Outcome(Generic[S]):
    """What one command did: its events (appended now, or the stored ones of a duplicate),
    the state after it (``before``: the state it was decided on), or the refusal;
    ``attempts``: the decisions made on a verified state (catching up a cache is free)."""

    ident: str
    events: tuple[Any, ...]
    state: S
    rejection: Rejected | None = None
    duplicate: bool = False
    attempts: int = field(default=1, compare=False)
    before: S | None = field(default=None, compare=False)

    @property
    def accepted(self) -> bool:
        return self.rejection is None

    @property
    def committed(self) -> bool:
        """Events were appended now (not a refusal, a duplicate or a read)."""
        return self.rejection is None and not self.duplicate and bool(self.events)


class CommandService(Generic[S, C]):
    """Load, decide, append, publish (the module docstring); one instance per aggregate kind."""

    def __init__(self, aggregate: Aggregate[S, C], streams: Streams, *, cache: Cache | None = None,
                 retries: int = 5, on_commit: Callable[[Outcome[S]], None] | None = None,
                 reads_truth: Callable[[C], bool] | None = None):
        self.aggregate = aggregate
        self.streams = streams
        self.cache = cache
        self.retries = retries
        self.on_commit = on_commit
        #: commands decided on the stream's state, never a cached one (a match's Sync: no
        #: append checks what it reads)
        self.reads_truth = reads_truth

    # -- loading ------------------------------------------------------------------------------
    def load(self, ident: str, fresh: bool = False) -> S:
        """The aggregate's state: the cached state (``fresh``: ignored) or the store's saved
        base (a snapshot), and the stream after it; cached.  When the events after a base
        were archived, once more from the store's base; then :class:`StreamTrimmed`."""
        agg = self.aggregate
        for again in (False, True):
            base = None if fresh or again or self.cache is None else self.cache.get(ident)
            if base is None:
                saved = getattr(self.streams, "base", None)
                base = saved(ident) if saved is not None else None
            if base is None:
                base = agg.empty(ident)
            after = agg.version(base)
            events = self.streams.load(ident, after=after)
            if not events or events[0].seq == after + 1:
                state = agg.replay(events, base)
                if self.cache is not None:
                    self.cache.put(ident, state)
                return state
            # the events after the base were archived (a queue's trim): once more from the
            # store's newest snapshot, then never a fold across the gap
        raise StreamTrimmed(ident, after, events[0].seq)

    def catch_up(self, ident: str, state: S, actual: int | None = None) -> S:
        """The stream's state, from ``state`` that may be stale (``actual``: the stream's
        version a :class:`WrongVersion` reported): the tail after it when the stream is
        ahead, ``state`` when the stream is at its version, else a fresh load (a stream
        behind the cache was deleted or rebuilt: the cache is replaced)."""
        agg, v = self.aggregate, self.aggregate.version(state)
        if actual is None or actual > v:
            tail = self.streams.load(ident, after=v)
            if tail and tail[0].seq == v + 1 and (actual is None or tail[-1].seq >= actual):
                new = agg.replay(tail, state)
                if self.cache is not None:
                    self.cache.put(ident, new)
                return new
            if not tail and actual is None and v and self.streams.version(ident) == v:
                return state
        fresh = self.load(ident, fresh=True)
        if self.cache is not None:
            self.cache.replace(ident, fresh)
        return fresh

    def _stored(self, ident: str, cid: str, state: S, conflicts: int) -> Outcome[S] | None:
        """The duplicate outcome of a command id whose events are stored (confirmed on the
        replicas first, issue 35 §3); None when it has none."""
        stored = self.streams.command_events(ident, cid) if self.aggregate.version(state) else []
        if not stored:
            return None
        confirm = getattr(self.streams, "confirm", None)
        if confirm is not None:
            confirm(ident)
        return Outcome(ident, tuple(stored), state, None, True, conflicts + 1, state)

    # -- the path of a command ----------------------------------------------------------------
    def execute(self, command: C) -> Outcome[S]:
        agg = self.aggregate
        ident = agg.id_of(command)
        cid: str = getattr(command, "command_id")
        truth = self.reads_truth is not None and self.reads_truth(command)
        state = self.cache.get(ident) if self.cache is not None and not truth else None
        verified = state is None
        if state is None:
            state = self.load(ident) if truth else self.load(ident, fresh=True)
        conflicts = 0
        while True:
            try:
                events, new = agg.decide_and_apply(state, command, agg.context(command, state))
            except Rejected as rej:
                if not verified:  # never refuse on a cached state: decide again on the stream's
                    state, verified = self.catch_up(ident, state), True
                    continue
                again = self._stored(ident, cid, state, conflicts)
                return again if again is not None else Outcome(ident, (), state, rej, False, conflicts + 1, state)
            if not events:  # a read or a no-op: nothing to append, judged on the stream's state
                if not verified:
                    state, verified = self.catch_up(ident, state), True
                    continue
                # a redelivered command whose publication failed is a duplicate to publish
                # again, not a no-op (a second Ready is acked only when it is another command)
                again = None if truth else self._stored(ident, cid, state, conflicts)
                return again if again is not None else Outcome(ident, (), state, None, False, conflicts + 1, state)
            try:
                result = self.streams.append(ident, agg.version(state), cid, events, new)
            except WrongVersion as exc:
                if verified:
                    conflicts += 1
                    if conflicts >= self.retries:
                        raise
                state, verified = self.catch_up(ident, state, exc.actual), True
                continue
            if result.duplicate:
                return Outcome(ident, tuple(result.events), self.load(ident), None, True, conflicts + 1, state)
            if self.cache is not None:
                self.cache.put(ident, new)
            outcome: Outcome[S] = Outcome(ident, tuple(events), new, None, False, conflicts + 1, state)
            if self.on_commit is not None:
                try:
                    self.on_commit(outcome)
                except Exception:  # the append was the commit; the managers re-derive from the stream
                    _log.exception("on_commit failed after %s on %s", cid, ident)
            return outcome
