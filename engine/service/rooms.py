"""Registered rooms: operators register room configs under a name; CreateMatch names one.

A match never trusts a config from a player's message: the lobby creates matches
with ``{"type": "CreateMatch", "room": NAME}`` and the command service reads the
room's config from this registry (a full ``config`` is accepted only from operator
tools on the operator channel, validated the same way).  Every config is validated
(:func:`engine.config.parse_config`, with its bounds) before it is stored, and it is
stored under its name: the config's ``name`` is the room's name, so metrics are
labelled by registered room names, a bounded set.

Redis: ``sk:rooms`` (hash) room name → config record (JSON).  ``shuangkou serve``
registers the shipped configs as ``points`` and ``wealth`` when they are absent.

>>> rooms = InMemoryRooms()
>>> register_shipped(rooms)
['points', 'wealth']
>>> rooms.get("wealth").mode, rooms.get("nope")
('wealth', None)
"""

from __future__ import annotations

import json
import threading
from typing import Any, Protocol

from engine.config import RoomConfig, load_config, parse_config
from engine.store.keys import ROOMS_KEY
SHIPPED = ("points", "wealth")
MAX_ROOMS = 200  # the metrics label set stays bounded


class RoomError(ValueError):
    """A room could not be registered (bad config, name taken, too many rooms)."""


class RoomRegistry(Protocol):
    def get(self, name: str) -> RoomConfig | None: ...

    def names(self) -> list[str]: ...

    def add(self, name: str, config: RoomConfig | dict[str, Any], replace: bool = False) -> bool: ...


def named(name: str, config: RoomConfig | dict[str, Any]) -> RoomConfig:
    """``config`` validated (a record is parsed with every bound) and renamed to ``name``."""
    if not 0 < len(name) <= 100 or not name.isprintable():
        raise RoomError(f"a room name is 1-100 printable characters, got {name!r}")
    if isinstance(config, RoomConfig):
        record = config.to_record()
    elif isinstance(config, dict):
        record = dict(config)
    else:
        raise RoomError("a room config is a table of keys")
    record["name"] = name
    try:
        return parse_config(record, f"room {name}")
    except ValueError as exc:
        raise RoomError(str(exc)) from None


class InMemoryRooms:
    def __init__(self) -> None:
        self._rooms: dict[str, RoomConfig] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> RoomConfig | None:
        with self._lock:
            return self._rooms.get(name)

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._rooms)

    def add(self, name: str, config: RoomConfig | dict[str, Any], replace: bool = False) -> bool:
        """Register; False when ``name`` is taken and ``replace`` is not set (nothing changes)."""
        cfg = named(name, config)
        with self._lock:
            if name in self._rooms and not replace:
                return False
            if name not in self._rooms and len(self._rooms) >= MAX_ROOMS:
                raise RoomError(f"at most {MAX_ROOMS} rooms can be registered")
            self._rooms[name] = cfg
            return True


class RedisRooms:
    """The registry on Redis (one hash, ``sk:rooms``).

    :meth:`get` reads the hash each time; when that read fails for a transient reason (the
    master of ``sk:rooms`` cut off or failing over) it answers the config it last read for
    that name, so that one master's outage does not hold every CreateMatch on the others.
    A room never read before still raises."""

    def __init__(self, client: Any):
        self.client = client
        self._last: dict[str, RoomConfig] = {}
        self._lock = threading.Lock()

    def get(self, name: str) -> RoomConfig | None:
        from engine.store.redis_errors import REDIS_FAILURES, is_transient

        try:
            raw = self.client.hget(ROOMS_KEY, name)
        except REDIS_FAILURES as exc:
            with self._lock:
                last = self._last.get(name)
            if last is None or not is_transient(exc):
                raise
            return last
        cfg = None if raw is None else RoomConfig.from_record(json.loads(raw))
        with self._lock:
            if cfg is None:
                self._last.pop(name, None)
            else:
                self._last[name] = cfg
        return cfg

    def names(self) -> list[str]:
        return sorted(k.decode() if isinstance(k, bytes) else k for k in self.client.hkeys(ROOMS_KEY))

    def add(self, name: str, config: RoomConfig | dict[str, Any], replace: bool = False) -> bool:
        cfg = named(name, config)
        text = json.dumps(cfg.to_record(), sort_keys=True)
        if replace:
            if not self.client.hexists(ROOMS_KEY, name) and self.client.hlen(ROOMS_KEY) >= MAX_ROOMS:
                raise RoomError(f"at most {MAX_ROOMS} rooms can be registered")
            self.client.hset(ROOMS_KEY, name, text)
            return True
        if self.client.hlen(ROOMS_KEY) >= MAX_ROOMS and not self.client.hexists(ROOMS_KEY, name):
            raise RoomError(f"at most {MAX_ROOMS} rooms can be registered")
        return bool(self.client.hsetnx(ROOMS_KEY, name, text))


def register_shipped(rooms: RoomRegistry) -> list[str]:
    """Register the shipped configs (config/points.toml, config/wealth.toml) where absent;
    returns the names now registered among them."""
    for name in SHIPPED:
        if rooms.get(name) is None:
            rooms.add(name, load_config(name))
    return [n for n in SHIPPED if rooms.get(n) is not None]
