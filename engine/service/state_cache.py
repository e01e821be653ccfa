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


class StateCache:
    """Bounded LRU of ``match_id -> MatchState`` keeping the highest version seen."""

    def __init__(self, size: int = DEFAULT_SIZE):
        self.size = int(size)
        self._states: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

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
                self._states[mid] = state
            self._states.move_to_end(mid)
            while len(self._states) > self.size:
                self._states.popitem(last=False)

    def replace(self, state: Any) -> None:
        """Remember ``state`` even if an older-looking one is cached (a stream found
        *behind* the cache: deleted or rebuilt)."""
        if self.size <= 0:
            return
        with self._lock:
            if state.version == 0:
                self._states.pop(state.match_id, None)
                return
            self._states[state.match_id] = state
            self._states.move_to_end(state.match_id)

    def discard(self, match_id: str) -> None:
        with self._lock:
            self._states.pop(match_id, None)

    def clear(self) -> None:
        with self._lock:
            self._states.clear()
