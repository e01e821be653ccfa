"""What the gateway hands to the routes of ``gateway.web`` (the browser client).

>>> ctx = WebContext(redis=None, secret=b"s" * 32, dev=True, bots=False)
>>> ctx.dev, ctx.bots
(True, False)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class WebContext:
    """``redis``: the gateway's ``redis.asyncio`` client; ``secret``: the token signing secret
    (``gateway.tokens.mint`` / ``verify``); ``dev``: ``--dev`` (a person may get a token by
    typing a name); ``bots``: ``--bots`` (an empty seat is filled with the trustee bot);
    ``hub``: the running :class:`gateway.session.Hub` (rooms, lobby, metrics), None in tests;
    ``redis_url``: the URL the gateway connected with (the replay viewer's fallback);
    ``allow_live_replay``: ``--allow-live-replay`` (the replay viewer shows matches still
    being played, both hands included: dangerous); ``frame_ancestors``: the origins that may
    frame the pages and post them a token (``--frame-ancestors``)."""

    redis: Any
    secret: bytes
    dev: bool = False
    bots: bool = False
    hub: Any = None
    redis_url: str | None = None
    allow_live_replay: bool = False
    frame_ancestors: tuple[str, ...] = ()
