"""Reading a player's outbound stream ``sk:out:<player>`` (docs/PROTOCOL.md §2) from asyncio.

>>> entry = parse_entry(b"1-0", {b"kind": b"rejected", b"match": b"m", b"command_id": b"c",
...                              b"code": b"not_your_turn", b"reason": b"wait"})
>>> entry.kind, entry.code, entry.version
('rejected', 'not_your_turn', None)

What the engine's lobby tells the player comes on the same stream: ``kind`` ``lobby`` or
``settled`` with the message's JSON in ``m`` (its ``body``), and a refused lobby command as a
``rejected`` with ``match`` "" (``retry_after_ms`` with ``cooldown``):

>>> parse_entry(b"2-0", {b"kind": b"lobby", b"m": b'{"kind": "lobby", "state": "queued"}'}).body["state"]
'queued'
>>> parse_entry(b"3-0", {b"kind": b"rejected", b"match": b"", b"command_id": b"c", b"code": b"cooldown",
...                      b"reason": b"wait", b"retry_after_ms": b"4000"}).retry_after_ms
4000
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import json

import msgpack

from engine.service.publish import expand_brief, expand_events, expand_view
from engine.store import keys

SCAN_LIMIT = 1000  # entries looked at when searching a stream backwards (it is capped anyway)


def _s(v: Any) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else ("" if v is None else str(v))


@dataclass(frozen=True)
class OutEntry:
    id: str
    kind: str  # update | rejected
    match: str
    command_id: str
    version: int | None = None
    code: str | None = None
    reason: str | None = None
    body: dict[str, Any] = field(default_factory=dict)
    retry_after_ms: int | None = None  # a refused Join during the leave cooldown: when to try again

    @property
    def events(self) -> list[dict[str, Any]]:
        return list(self.body.get("events") or ())

    @property
    def view(self) -> dict[str, Any] | None:
        return self.body.get("view")

    @property
    def brief(self) -> dict[str, Any] | None:
        """The update's brief (docs/PROTOCOL.md §8), when the engine stored one (an update with a
        view has none: ``gateway.protocol.update`` reads it off the view)."""
        b = self.body.get("brief")
        return b if isinstance(b, dict) else None

    @property
    def first_seq(self) -> int | None:
        ev = self.events
        return int(ev[0]["seq"]) if ev and "seq" in ev[0] else None


def parse_entry(entry_id: Any, fields: dict) -> OutEntry:
    f = {_s(k): v for k, v in fields.items()}
    body: dict[str, Any] = {}
    if "m" in f:  # a lobby or settled message: its JSON as the engine's lobby wrote it
        try:
            m = json.loads(_s(f["m"]))
        except ValueError:
            m = None
        body = m if isinstance(m, dict) else {}
    elif "body" in f:
        try:
            body = msgpack.unpackb(f["body"], raw=False, strict_map_key=False)
        except Exception:
            body = {}
    if "view" in f and "view" not in body and "m" not in f:  # a rejection that carries the player's view
        try:
            body["view"] = msgpack.unpackb(f["view"], raw=False, strict_map_key=False)
        except Exception:
            pass
    version = f.get("version")
    if body and "m" not in f:  # a compact update (docs/PROTOCOL.md "Updates"): the entry's fields fill in the ids
        match, command_id = _s(f.get("match")), _s(f.get("command_id"))
        if isinstance(body.get("events"), list):
            body["events"] = expand_events(body, match, command_id,
                                           int(version) if version not in (None, b"", "") else None)
            body.pop("ts", None)
        if isinstance(body.get("brief"), list) and version not in (None, b"", ""):
            body["brief"] = expand_brief(body["brief"], int(version))
        if "view" in body:  # its history stored compact (engine.service.publish.compact_view)
            body["view"] = expand_view(body["view"])
    return OutEntry(id=_s(entry_id), kind=_s(f.get("kind")), match=_s(f.get("match")),
                    command_id=_s(f.get("command_id")),
                    version=int(version) if version not in (None, b"", "") else None,
                    code=_s(f["code"]) if "code" in f else None,
                    reason=_s(f["reason"]) if "reason" in f else None, body=body,
                    retry_after_ms=_int(f.get("retry_after_ms")))


def _int(v: Any) -> int | None:
    try:
        return int(_s(v)) if v not in (None, b"", "") else None
    except ValueError:
        return None


async def last_id(redis: Any, stream: str) -> str:
    """The id of the stream's newest entry ("0-0" when empty): read after it for new entries only."""
    last = await redis.xrevrange(stream, count=1)
    return entry_id(last[0][0]) if last else "0-0"


def entry_id(value: Any) -> str:
    """A stream entry id as text."""
    return _s(value)


async def latest_update(redis: Any, player: str, match: str, before: str = "+") -> OutEntry | None:
    """The newest update of ``match`` in the player's stream that carries a view."""
    found = await recent_updates(redis, player, match, 1, before, with_view=True)
    return found[0] if found else None


async def recent_updates(redis: Any, player: str, match: str, n: int, before: str = "+",
                         with_view: bool = False) -> list[OutEntry]:
    """Up to ``n`` of the newest updates of ``match`` in the player's stream (those with a view
    only: ``with_view``), newest first; :data:`SCAN_LIMIT` entries looked at at most."""
    stream = keys.outbox_key(player)
    end, seen = before, 0
    out: list[OutEntry] = []
    while seen < SCAN_LIMIT:
        chunk = await redis.xrevrange(stream, max=end, min="-", count=100)
        if not chunk:
            return out
        for entry_id, fields in chunk:
            e = parse_entry(entry_id, fields)
            if e.kind == "update" and e.match == match and (e.view is not None or not with_view):
                out.append(e)
                if len(out) >= n:
                    return out
        seen += len(chunk)
        ms, k = keys.stream_pos(_s(chunk[-1][0]))
        if k > 0:
            end = f"{ms}-{k - 1}"
        elif ms > 0:
            end = f"{ms - 1}-18446744073709551615"
        else:
            return out
    return out


async def updates_after(redis: Any, player: str, match: str, version: int, upto: str) -> list[OutEntry]:
    """Every update of ``match`` after ``version`` up to the entry ``upto``, oldest first, once each."""
    stream = keys.outbox_key(player)
    out: dict[int, OutEntry] = {}
    start, seen = "-", 0
    while seen < SCAN_LIMIT:
        chunk = await redis.xrange(stream, min=start, max=upto, count=200)
        if not chunk:
            break
        for entry_id, fields in chunk:
            e = parse_entry(entry_id, fields)
            if e.kind == "update" and e.match == match and e.version is not None and e.version > version:
                out.setdefault(e.version, e)
        seen += len(chunk)
        start = "(" + _s(chunk[-1][0])
    return [out[v] for v in sorted(out)]
