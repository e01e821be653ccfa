"""One place per player across lobby threads: a claim taken when a command would place them.

The lobby checks where a player already is against read models (``place``, ``pseries``)
that its feed writes a moment after the command.  Two commands handled in that moment --
two Joins of one read, a Join and a CreateTable, two lobby threads owning two rooms -- would
both find the player nowhere.  So a seating command first claims the player's place
(``SET NX`` of :func:`engine.store.keys.place_claim_key`, ``room:<room>`` or
``series:<id>``): the second finds the first's claim and is refused ``already_placed``.

A claim ends when the read model says the same place (:meth:`PlaceClaims.caught_up`, in the
read model's write), when its command is refused (:meth:`PlaceClaims.settle`), or after
:data:`CLAIM_MS` (a thread that stopped in between).
"""

from __future__ import annotations

import threading
from typing import Any

from engine.store import keys, scripts

#: how long a claim outlives a thread that stopped before the read model said the place
CLAIM_MS = 30_000

#: engine/store/claim_release.lua, sent by EVAL (in a Cluster pipeline too)
RELEASE_LUA = scripts.sent_by_eval("claim_release.lua")


def room_claim(room: str) -> str:
    return f"room:{room}"


def series_claim(series: str) -> str:
    return f"series:{series}"


def describe(claim: str) -> str:
    """The place a claim names, as the lobby's refusals say it: a room's name, or
    ``private table <series>``."""
    kind, _, name = claim.partition(":")
    return name if kind == "room" else f"private table {name}"


class PlaceClaims:
    """The claims of one lobby thread's commands over ``client``."""

    def __init__(self, client: Any, claim_ms: int = CLAIM_MS):
        self.client = client
        self.claim_ms = claim_ms
        self._taken: dict[str, set[str]] = {}  # player -> the claims this thread took, not settled
        self._lock = threading.Lock()

    def take(self, player: str, claim: str) -> str | None:
        """Claim ``player``'s place for ``claim``: None when it is theirs now (taken, or already
        held by the same place), else the place another command claimed (:func:`describe`)."""
        key = keys.place_claim_key(player)
        for _ in range(3):  # a claim that ends between the SET and the GET: try again
            if self.client.set(key, claim, nx=True, px=self.claim_ms):
                with self._lock:
                    self._taken.setdefault(player, set()).add(claim)
                return None
            held = self.client.get(key)
            held = held.decode() if isinstance(held, bytes) else held
            if held is not None:
                return None if held == claim else describe(held)
        return None

    def settle(self, player: str, placed: bool) -> None:
        """The command that took ``player``'s claims is decided: refused (``placed`` False),
        its claims end now; placed, they end when the read model says so."""
        with self._lock:
            taken = self._taken.pop(player, set())
        if not placed:
            for claim in taken:
                self.client.eval(RELEASE_LUA, 1, keys.place_claim_key(player), claim)

    @staticmethod
    def caught_up(pipe: Any, player: str, claim: str) -> None:
        """In the pipeline that writes ``player``'s read model of ``claim``'s place: the claim
        ends (only if it is still that one)."""
        # by execute_command: a Redis Cluster's pipeline has no eval(script, ...) of its own
        pipe.execute_command("EVAL", RELEASE_LUA, 1, keys.place_claim_key(player), claim)
