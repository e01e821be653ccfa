"""The browser client's routes (issue 15 replaces this module and adds ``gateway/static/``).

``routes(ctx)`` returns Starlette routes that :func:`gateway.app.build_app` mounts beside
``/ws``, ``/healthz`` and ``/metrics``; ``ctx`` is a :class:`gateway.context.WebContext`.

>>> routes(None)
[]
"""

from __future__ import annotations

from gateway.context import WebContext


def routes(ctx: WebContext | None) -> list:
    return []
