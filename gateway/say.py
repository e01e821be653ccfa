"""Quick phrases and emotes (快捷語, docs/PROTOCOL.md §8 "Quick phrases"): what a seated player
may Say, and how often.

* The ids are fixed (``engine.match.commands.PHRASES`` and ``EMOTES``): no free text, so
  nothing to moderate; the clients hold the localized texts.  Any other id is refused
  ``unknown_phrase`` by the gateway.
* :class:`SayLimiter` -- at most one Say every :data:`SAY_INTERVAL_S` seconds per player (on
  this gateway: a player's sockets are on one gateway at a time, a newer one replaces the
  older); a Say sooner is refused ``rate_limited`` with ``retry_after_ms``.  Pure
  bookkeeping, the clock passed in.

>>> lim = SayLimiter(interval_s=3.0)
>>> lim.take("alice", 10.0), lim.take("alice", 11.5), lim.take("bob", 11.5), lim.take("alice", 13.0)
(0, 1500, 0, 0)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.match.commands import EMOTES, PHRASES, SAY_IDS

__all__ = ["EMOTES", "PHRASES", "SAY_IDS", "SAY_INTERVAL_S", "SayLimiter", "known"]

SAY_INTERVAL_S = 3.0
MAX_TRACKED = 100_000  # players remembered at most (older entries are dropped first)


def known(phrase: str) -> bool:
    """Is ``phrase`` one of the fixed ids?

    >>> known("thanks"), known("emote_smile"), known("hello <b>")
    (True, True, False)
    """
    return phrase in SAY_IDS


@dataclass
class SayLimiter:
    """When each player may Say next."""

    interval_s: float = SAY_INTERVAL_S
    last: dict[str, float] = field(default_factory=dict)

    def take(self, player: str, now: float) -> int:
        """0 and the Say is counted; else the milliseconds until the next one is allowed (nothing counted)."""
        at = self.last.get(player)
        if at is not None and now - at < self.interval_s:
            return max(1, int((self.interval_s - (now - at)) * 1000 + 0.999))
        if len(self.last) >= MAX_TRACKED:
            for p in [p for p, t in self.last.items() if now - t >= self.interval_s] or list(self.last)[:1]:
                del self.last[p]
        self.last.pop(player, None)
        self.last[player] = now
        return 0
