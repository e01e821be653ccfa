"""The reference player gateway: WebSocket ``/ws`` with JWT identities, the engine's lobby
reached through an adapter, reconnect with a grace window, spectators, settlement push (docs/PROTOCOL.md
"WebSocket").  Run it with ``shuangkou gateway``.

Modules: ``tokens`` (JWT), ``protocol`` (client messages, server messages), ``channels``
(the one link to the engine's command channels), ``lobby`` (the adapter of the
engine's lobby: Join/Leave/Returned, places, tables, presence), ``session`` (one connection's socket protocol), ``reader`` (what it reads),
``fanout`` (the process's one reader, woken by notices), ``resync`` (gaps, resync, exactly
once), ``outbox`` (reading players' update streams),
``spectate`` (spectator redaction), ``metrics``, ``rooms``, ``app`` (Starlette + uvicorn),
``web`` (the browser client's routes), ``schemas/`` (JSON Schemas of every message).
"""
