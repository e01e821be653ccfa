"""The gateway's browser hardening at the HTTP edge (issue 23 item 6): security headers on
every page and an Origin check on ``/ws``.

* Every HTTP response gets ``Content-Security-Policy`` (:func:`content_security_policy`:
  ``default-src 'self'``, ``connect-src 'self'`` plus the page's own ``ws://``/``wss://``
  origin, no inline script, ``frame-ancestors`` from ``--frame-ancestors``, default
  ``'none'``), ``X-Content-Type-Options: nosniff`` and ``Referrer-Policy: no-referrer``.
* A WebSocket handshake whose ``Origin`` is not allowed (:meth:`EdgePolicy.origin_allowed`)
  is refused with HTTP 403 and a reason, before the app sees it.  A handshake without an
  ``Origin`` header is not a browser's: it passes (its token is its credential).

>>> p = EdgePolicy(frame_ancestors=("https://casino.example",))
>>> content_security_policy(p, "gw.example:8080").split("; ")[2]
"connect-src 'self' ws://gw.example:8080 wss://gw.example:8080"
>>> content_security_policy(p, "x; script-src *").split("; ")[2]  # a forged Host adds nothing
"connect-src 'self'"
>>> p.origin_allowed("http://gw.example:8080", "gw.example:8080"), p.origin_allowed("https://evil.example", "gw.example:8080")
(True, False)
>>> EdgePolicy(dev=True).origin_allowed("https://evil.example", "gw.example:8080")
True
"""

from __future__ import annotations

import contextvars
import json
import logging
import re

from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

ANY = "*"
_HOST = re.compile(r"[A-Za-z0-9.\-]+(:\d{1,5})?|\[[0-9A-Fa-f:.]+\](:\d{1,5})?")


def normalize_origin(text: str) -> str:
    """``scheme://host[:port]`` in lower case, as browsers send ``Origin``; ValueError otherwise.

    >>> normalize_origin("HTTPS://Casino.Example/")
    'https://casino.example'
    >>> normalize_origin("casino.example")
    Traceback (most recent call last):
    ...
    ValueError: an origin is scheme://host[:port], got 'casino.example'
    """
    if text == ANY:
        return ANY
    parts = urlsplit(text.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.path not in ("", "/") \
            or parts.query or parts.fragment or "@" in parts.netloc:
        raise ValueError(f"an origin is scheme://host[:port], got {text!r}")
    return f"{parts.scheme}://{parts.netloc}".lower()


@dataclass(frozen=True)
class EdgePolicy:
    """``frame_ancestors``: the origins that may frame the pages and hand them a token by
    ``postMessage`` (``--frame-ancestors``; empty: none).  ``allowed_origins``: the page
    origins whose scripts may open ``/ws`` (``--allowed-origin``; empty: the gateway's own
    origin, or any with ``dev``; ``*``: any)."""

    frame_ancestors: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    dev: bool = False

    def origin_allowed(self, origin: str | None, host: str | None) -> bool:
        if origin is None:
            return True  # not a browser: the token is its credential
        if ANY in self.allowed_origins or (self.dev and not self.allowed_origins):
            return True
        try:
            got = normalize_origin(origin)
        except ValueError:
            return False  # "null" (a sandboxed frame, a file: page) and anything malformed
        if self.allowed_origins:
            return got in self.allowed_origins
        own = (host or "").lower()
        return bool(own) and got in (f"http://{own}", f"https://{own}")


def content_security_policy(policy: EdgePolicy, host: str | None) -> str:
    """The page's CSP: its own files only, no inline script, its own socket, framed only by
    ``policy.frame_ancestors``."""
    connect = "'self'"
    if host and _HOST.fullmatch(host):  # never a header value into the policy unchecked
        connect += f" ws://{host} wss://{host}"
    ancestors = " ".join(policy.frame_ancestors) if policy.frame_ancestors else "'none'"
    return "; ".join((
        "default-src 'self'", "script-src 'self'", f"connect-src {connect}", "img-src 'self' data:",
        "style-src 'self'", "object-src 'none'", "base-uri 'none'", "form-action 'self'",
        f"frame-ancestors {ancestors}",
    ))


def _header(scope: Scope, name: bytes) -> str | None:
    for k, v in scope.get("headers") or ():
        if k == name:
            return bytes(v).decode("latin-1")
    return None


class EdgeMiddleware:
    """ASGI middleware applying :class:`EdgePolicy`; ``on_refuse(reason)`` counts a refusal
    (the gateway's metrics)."""

    def __init__(self, app: ASGIApp, policy: EdgePolicy, on_refuse: Callable[[str], None] | None = None):
        self.app = app
        self.policy = policy
        self.on_refuse = on_refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope.get("type")
        host = _header(scope, b"host")
        if kind == "websocket":
            origin = _header(scope, b"origin")
            if not self.policy.origin_allowed(origin, host):
                if self.on_refuse is not None:
                    self.on_refuse("origin")
                await deny(scope, send, 403, "forbidden_origin",
                           f"origin {str(origin)[:100]!r} may not open this socket (shuangkou gateway --allowed-origin)")
                return
            await self.app(scope, receive, send)
            return
        if kind != "http":
            await self.app(scope, receive, send)
            return
        extra = [(b"content-security-policy", content_security_policy(self.policy, host).encode("latin-1")),
                 (b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer")]

        async def send_with_headers(message: Message) -> None:
            if message.get("type") == "http.response.start":
                message = dict(message)
                message["headers"] = [*(message.get("headers") or ()), *extra]
            await send(message)

        await self.app(scope, receive, send_with_headers)



#: set in the task of a handshake :func:`deny` refused (read by :class:`DeniedHandshakeFilter`)
_DENIED: contextvars.ContextVar[bool] = contextvars.ContextVar("sk_denied_handshake", default=False)

#: what uvicorn's websockets-sansio protocol logs at ERROR once an app that sent a denial
#: response returns: it never marks that handshake complete (Kludex/uvicorn#3138, open)
INCOMPLETE_HANDSHAKE = "ASGI callable returned without completing handshake."


class DeniedHandshakeFilter(logging.Filter):
    """Drops uvicorn's spurious ERROR after a handshake :func:`deny` refused (it runs in that
    handshake's task, so it sees the mark); the same line for any other handshake stays."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (_DENIED.get() and record.getMessage() == INCOMPLETE_HANDSHAKE)


async def deny(scope: Scope, send: Send, status: int, error: str, reason: str) -> None:
    """Refuse a WebSocket handshake with HTTP ``status`` and ``{"error", "reason"}`` when the
    server can send a denial response (uvicorn can), else by closing before the accept (which
    servers answer with 403)."""
    _DENIED.set(True)  # this task's own context: the ASGI app runs in it, and uvicorn's log after it
    if "websocket.http.response" in (scope.get("extensions") or {}):
        body = json.dumps({"error": error, "reason": reason}).encode()
        await send({"type": "websocket.http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "websocket.http.response.body", "body": body})
        return
    await send({"type": "websocket.close", "code": 1008, "reason": reason[:120]})
