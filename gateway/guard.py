"""One socket's edge checks after its Auth (issue 23 items 2 and 5): the token's lifetime and
the socket's rates.  gateway/session.py's ``Connection`` calls it at three points: ``start``
(after the welcome), ``admit`` (each client message, before it is handled) and ``renew`` (an
``Auth`` on an open socket), and ``stop`` at the end.

* **Token lifetime**: at the token's ``exp`` the socket is closed with 4401 "the token has
  expired".  A client renews before that with ``{"type": "Auth", "token": NEW}``: a valid
  token for the same player, role and room moves the deadline and keeps the socket, its
  place and its subscription; the answer is a ``welcome`` with ``renewed: true`` and the new
  ``expires_at``.  A bad renewal is refused (``not_allowed``) and changes nothing.
* **Rates** (:class:`gateway.limits.SocketBudget`, the token subject's on this gateway, kept
  across its sockets: :class:`gateway.limits.SubjectBudgets`): a message over the rate is
  refused ``rate_limited`` (never handled, never forwarded); a Sync over the Sync rate too
  (it never reaches the engine); a socket over its rate for ``close_after_s`` is closed 4429.

Every refusal is counted in ``shuangkou_gateway_refusals_total{reason}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any, Protocol

from gateway import protocol
from gateway.limits import CLOSE_RATE_LIMITED, Limits
from gateway.tokens import Identity, TokenError, verify

CLOSE_UNAUTHORIZED = 4401


class Guarded(Protocol):
    """What the guard needs of its socket."""

    identity: Identity
    hub: Any  # the gateway's Hub: ``secret``, ``metrics``, ``gateway_id``, ``budgets``
    closed: bool

    async def send(self, message: dict[str, Any]) -> None: ...

    async def close(self, code: int, reason: str) -> None: ...


class Guard:
    def __init__(self, conn: Guarded, limits: Limits, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time):
        self.conn = conn
        self.limits = limits
        self.clock = clock
        self.wall = wall
        # the token subject's, whatever the token's role, kept across its sockets on this gateway
        # (gateway/limits.py)
        self.budget = conn.hub.budgets.budget(conn.identity.player, clock())
        self._expiry: asyncio.Task | None = None
        self._watched = False  # this socket's first Watch was admitted

    # -- the token's lifetime ---------------------------------------------------------------
    def start(self) -> None:
        """Close the socket 4401 at its token's ``exp`` (unless renewed before)."""
        self.stop()
        self._expiry = asyncio.get_running_loop().create_task(self._expire(self.conn.identity.expires_at))

    def stop(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None

    async def _expire(self, at: int) -> None:
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(max(0.0, at - self.wall()))
            if not self.conn.closed:
                self.conn.hub.metrics.refused("token_expired")
                await self.conn.close(CLOSE_UNAUTHORIZED, "the token has expired")

    async def renew(self, msg: Any) -> None:
        """An ``Auth`` on an open socket: a fresh token for the same player, role and room."""
        old = self.conn.identity
        try:
            new = verify(self.conn.hub.secret, msg.token, policy=self.conn.hub.token_policy)
        except TokenError as exc:
            raise protocol.ClientError(protocol.NOT_ALLOWED, f"the new token is refused: {exc}",
                                       msg.command_id) from None
        if (new.player, new.role, new.room) != (old.player, old.role, old.room):
            raise protocol.ClientError(protocol.NOT_ALLOWED, "a renewal must be a token for the same player, "
                                       "role and room as the socket's", msg.command_id)
        self.conn.identity = new
        self.start()
        await self.conn.send(protocol.welcome(new.player, new.role, new.room, self.conn.hub.gateway_id,
                                              new.expires_at, new.name, renewed=True, limits=self.limits))

    # -- rates ------------------------------------------------------------------------------
    async def admit(self, message_type: str, command_id: str | None) -> bool:
        """May this message be handled?  False when it was refused (the refusal is sent) or the
        socket closed 4429."""
        # a socket's first Watch is its view: a spectator's several sockets share one Sync bucket,
        # and their connects are paced (gateway/limits.py SubjectBudgets)
        first_watch = message_type == "Watch" and not self._watched
        verdict = self.budget.admit(message_type, self.clock(), view_free=first_watch)
        if verdict == "ok" and first_watch:
            self._watched = True
        if verdict == "ok":
            return True
        metrics = self.conn.hub.metrics
        if verdict == "close":
            metrics.refused("rate_closed")
            await self.conn.close(CLOSE_RATE_LIMITED, f"over {self.limits.rate:g} messages a second for "
                                                      f"{self.limits.close_after_s:g} s")
            return False
        metrics.refused(verdict)
        if verdict == "sync_limited":
            reason = (f"at most {self.limits.sync_rate:g} Sync or Watch a second reach the engine; the view "
                      f"you have is current until the next update")
        else:
            reason = (f"over {self.limits.rate:g} messages a second (a burst of {self.limits.burst}): wait a "
                      f"moment; a socket that stays over for {self.limits.close_after_s:g} s is closed 4429")
        await self.conn.send(protocol.rejected(command_id or _fresh_id(), protocol.RATE_LIMITED, reason, None,
                                               getattr(self.conn, "match", None)))
        return False


def _fresh_id() -> str:
    import uuid

    return uuid.uuid4().hex
