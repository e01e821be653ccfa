"""Display names (issue 25): what a player is called at the table, apart from their id.

A token may carry a ``name`` claim (``shuangkou token PLAYER --name 小明``, the ``--dev``
login).  :func:`clean_name` is the one rule for it: control and format characters
(Unicode categories Cc, Cf, Zl, Zp, Co, Cs, Cn) are dropped, runs of white space become one
space, and what is left must be 1–24 characters -- letters of any script, CJK included.
The gateway keeps each player's name in the lobby's ``names`` hash when they connect and
passes it, as ``names: {player: name}``, with the lobby's ``seated`` message, the
``settled`` message and every update that carries a view (spectators too).

>>> clean_name("  小明\\u200b ")
'小明'
>>> clean_name("a\\tb\\x00c")
'a bc'
>>> clean_name("\\u202e")
Traceback (most recent call last):
...
gateway.names.BadName: a name is 1–24 letters, digits or signs (control characters do not count)
"""

from __future__ import annotations

import re
import time
import unicodedata
from collections.abc import Iterable
from typing import Any

from engine.store import keys

NAME_MAX = 24
NAMES_KEY = keys.NAMES_KEY  # hash: player id -> display name (``sk:{names}:display``)
_DROP = frozenset({"Cc", "Cf", "Zl", "Zp", "Co", "Cs", "Cn"})
_SPACES = re.compile(r"\s+")


class BadName(ValueError):
    """A display name that is empty or too long once cleaned."""


def clean_name(text: object) -> str:
    """The display name ``text`` stands for; :class:`BadName` when it is not one."""
    if not isinstance(text, str):
        raise BadName("a name is text")
    kept = "".join(" " if ch.isspace() else ch for ch in unicodedata.normalize("NFC", text)
                   if ch.isspace() or unicodedata.category(ch) not in _DROP)
    name = _SPACES.sub(" ", kept).strip()
    if not 1 <= len(name) <= NAME_MAX:
        raise BadName(f"a name is 1–{NAME_MAX} letters, digits or signs (control characters do not count)")
    return name


async def remember(redis: Any, player: str, name: str | None) -> None:
    """Keep ``player``'s display name for the others at the table (a token without one: no entry)."""
    if name:
        await redis.hset(NAMES_KEY, player, name)


class NameBook:
    """One gateway's display names, read through a short-lived cache: an update with a view
    names its table's players, and asking Redis each time cost a round trip per message.

    A name this gateway :meth:`remember`\\ s is seen at once; one remembered by another
    gateway (the player reconnected there under a new name) within :attr:`ttl_s`.
    """

    def __init__(self, redis: Any, ttl_s: float = 5.0, size: int = 50_000):
        self.redis = redis
        self.ttl_s = ttl_s
        self.size = size
        self._known: dict[str, tuple[str | None, float]] = {}  # player -> (name or None, read at)

    async def remember(self, player: str, name: str | None) -> None:
        """:func:`remember`, and this gateway knows it at once."""
        await remember(self.redis, player, name)
        if name:
            self._keep(player, name)

    async def names_of(self, players: Iterable[str | None]) -> dict[str, str]:
        """:func:`names_of`, from the cache where it is fresh (one HMGET for the rest)."""
        now = time.monotonic()
        wanted = list(dict.fromkeys(p for p in players if p))
        stale = [p for p in wanted if (k := self._known.get(p)) is None or now - k[1] > self.ttl_s]
        if stale:
            fresh = await names_of(self.redis, stale)
            for p in stale:
                self._keep(p, fresh.get(p), now)
        out: dict[str, str] = {}
        for p in wanted:
            name = self._known.get(p, (None, 0.0))[0]
            if name is not None:
                out[p] = name
        return out

    def _keep(self, player: str, name: str | None, at: float | None = None) -> None:
        if len(self._known) >= self.size:
            self._known.clear()
        self._known[player] = (name, time.monotonic() if at is None else at)


async def names_of(redis: Any, players: Iterable[str | None]) -> dict[str, str]:
    """``{player: name}`` for the players that have a display name (the others are left out:
    the page shows their id, or its word for a bot)."""
    wanted = list(dict.fromkeys(p for p in players if p))
    if not wanted:
        return {}
    raws = await redis.hmget(NAMES_KEY, wanted)  # one round trip, whatever the number of players
    return {p: raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
            for p, raw in zip(wanted, raws) if raw is not None}
