"""A per-process cache of match states, shared by everything in one process
that runs commands (the command gateway's service, the timer workers).

States are immutable values, so the cache simply keeps the newest state seen
per match (bounded LRU, thread-safe).  A cached state is never *trusted* as the
truth: :class:`engine.service.service.MatchService` uses it in two ways only

* ``load_state``: the cached state plus the stream *after* its version (one
  XRANGE of the few new events instead of a snapshot read and a replay);
* ``execute``: decide against the cached state and append with its version as
  the expected version.  The store's atomic version check refuses the append
  when another writer moved the match on (:class:`~engine.store.base.WrongVersion`);
  the service then catches up from the stream and decides again.  A refusal
  (``Rejected``) decided on an unverified cached state is re-checked against
  the stream before it is reported.

So the cache saves the read before each command without weakening anything:
every command is still decided on the state at the version its append is
checked against.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

DEFAULT_SIZE = 20_000
DEFAULT_MAX_BYTES = 256 * 1024 * 1024

#: the estimated memory of one cached state: the state, its seats and its room config
#: (a RoomConfig per match: ~3 KB of pydantic objects), plus each card id held in a tuple
STATE_OVERHEAD_BYTES = 6_000
BYTES_PER_CARD = 40
BYTES_PER_PLAY = 120  # a PlayRecord of the state's history (its cards are counted in the table)


def estimated_bytes(state: Any) -> int:
    """A cheap estimate of a state's memory (no traversal of pydantic objects).

    >>> from engine.match.state import MatchState
    >>> estimated_bytes(MatchState(match_id="m"))
    6000
    """
    cards = len(getattr(state, "table", ())) + len(getattr(state, "set_aside", ()))
    for seat in getattr(state, "seats", ()):
        if seat is not None:
            cards += len(seat.hand)
    return STATE_OVERHEAD_BYTES + BYTES_PER_CARD * cards + BYTES_PER_PLAY * len(getattr(state, "history", ()))


class StateCache:
    """Bounded LRU of ``match_id -> MatchState`` keeping the highest version seen.

    Bounded twice: ``size`` states and about ``max_bytes`` of memory
    (:func:`estimated_bytes`).  A finished match is dropped (nothing is decided on it
    any more: a late command or a Sync loads it from the store)."""

    def __init__(self, size: int = DEFAULT_SIZE, max_bytes: int = DEFAULT_MAX_BYTES):
        self.size = int(size)
        self.max_bytes = int(max_bytes)
        self._states: OrderedDict[str, Any] = OrderedDict()
        self._bytes: dict[str, int] = {}
        self.bytes = 0  # estimated memory of the cached states
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def _set(self, mid: str, state: Any) -> None:
        """Cache ``state`` (lock held), or drop the match when it is over (finished or
        abandoned: no command changes it again); then evict."""
        if getattr(state, "phase", None) in ("finished", "abandoned"):
            self._pop(mid)
            return
        n = estimated_bytes(state)
        self.bytes += n - self._bytes.get(mid, 0)
        self._bytes[mid] = n
        self._states[mid] = state
        self._states.move_to_end(mid)
        while self._states and (len(self._states) > self.size or self.bytes > self.max_bytes):
            old, _ = self._states.popitem(last=False)
            self.bytes -= self._bytes.pop(old, 0)

    def _pop(self, mid: str) -> None:
        if self._states.pop(mid, None) is not None:
            self.bytes -= self._bytes.pop(mid, 0)

    def __len__(self) -> int:
        return len(self._states)

    def get(self, match_id: str) -> Any | None:
        with self._lock:
            state = self._states.get(match_id)
            if state is None:
                self.misses += 1
                return None
            self.hits += 1
            self._states.move_to_end(match_id)
            return state

    def version(self, match_id: str) -> int | None:
        """The cached version of a match (a lower bound of its version), no I/O; None if absent."""
        state = self._states.get(match_id)
        return None if state is None else state.version

    def put(self, state: Any) -> None:
        """Remember ``state`` unless a newer one of the same match is cached already."""
        if self.size <= 0 or state.version == 0:
            return
        mid = state.match_id
        with self._lock:
            old = self._states.get(mid)
            if old is None or old.version <= state.version:
                self._set(mid, state)
            else:
                self._states.move_to_end(mid)

    def replace(self, state: Any) -> None:
        """Remember ``state`` even if an older-looking one is cached (a stream found
        *behind* the cache: deleted or rebuilt)."""
        if self.size <= 0:
            return
        with self._lock:
            if state.version == 0:
                self._pop(state.match_id)
                return
            self._set(state.match_id, state)

    def discard(self, match_id: str) -> None:
        with self._lock:
            self._pop(match_id)

    def clear(self) -> None:
        with self._lock:
            self._states.clear()
            self._bytes.clear()
            self.bytes = 0
