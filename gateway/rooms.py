"""The rooms a gateway's lobby offers: validated room configs by name (R-11.3, R-14).

Three sources, later ones winning for a name:

* the shipped configs (``points``, ``wealth``), always there;
* the engine's room registry (``sk:rooms``, engine/service/rooms.py), read again on
  every lobby sweep (:meth:`RoomBook.refresh`): a room an operator registers with
  ``shuangkou room add`` is offered without restarting any gateway;
* ``shuangkou gateway --room FILE``: operator files (the room's name is the config's
  ``name``), which the lobby registers on the operator channel (``AddRoom``), so that
  the engine creates the table's matches from the same config (CreateMatch names the
  room, issue 12 "Rooms are registered, not sent").

>>> book = RoomBook.load()
>>> book.get("points").mode, book.get("nope") is None
('points', True)
>>> book.update_registry({"fast": {**book.get("points").to_record(), "name": "fast", "turn_seconds": 5}})
['fast']
>>> book.get("fast").turn_seconds, book.names()
(5.0, ['fast', 'points', 'wealth'])
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from engine.config import RoomConfig, builtin_configs, load_config
from engine.service.rooms import MAX_ROOMS, ROOMS_KEY, named

log = logging.getLogger("shuangkou.gateway.rooms")


class RoomBook:
    """The lobby's rooms by name.  Mutated only by :meth:`update_registry` (one assignment of a
    new dict: readers see the old or the new set, never half of one)."""

    def __init__(self, builtins: Mapping[str, RoomConfig] | None = None,
                 files: Mapping[str, RoomConfig] | None = None) -> None:
        self.builtins: dict[str, RoomConfig] = dict(builtins or {})
        #: ``--room FILE`` configs by name: the lobby registers them (AddRoom)
        self.files: dict[str, RoomConfig] = dict(files or {})
        self._registry: dict[str, RoomConfig] = {}
        self._parsed: dict[str, tuple[Any, RoomConfig]] = {}  # name -> (the registry's raw text, its config)
        self.rooms: dict[str, RoomConfig] = {**self.builtins, **self.files}

    @classmethod
    def load(cls, files: Iterable[str | Path] = ()) -> RoomBook:
        builtins: dict[str, RoomConfig] = {}
        for name in sorted(builtin_configs()):
            cfg = load_config(name)
            builtins[cfg.name] = cfg
        extra: dict[str, RoomConfig] = {}
        for f in files:
            cfg = load_config(f)
            extra[cfg.name] = cfg
        return cls(builtins, extra)

    def get(self, name: str) -> RoomConfig | None:
        return self.rooms.get(name)

    def names(self) -> list[str]:
        return sorted(self.rooms)

    def admits(self, cfg: RoomConfig, balance: int) -> bool:
        """Whether a player with ``balance`` may sit in this room (R-11.1: a wealth room refuses a
        balance below its lowest level; a points room seats every balance at level 0 or above)."""
        return cfg.seat_level(balance) is not None

    def update_registry(self, records: Mapping[str, Any]) -> list[str]:
        """Take the registry's rooms (name → config record or its JSON); a record that does not
        validate is skipped with a warning.  Returns the registered names now offered."""
        registry: dict[str, RoomConfig] = {}
        parsed: dict[str, tuple[Any, RoomConfig]] = {}
        for raw_name, raw in list(records.items())[:MAX_ROOMS]:
            name = raw_name.decode() if isinstance(raw_name, bytes) else str(raw_name)
            known = self._parsed.get(name)
            if known is not None and isinstance(raw, (str, bytes)) and known[0] == raw:
                registry[name] = known[1]  # unchanged since the last read: not validated again
                parsed[name] = known
                continue
            try:
                record = json.loads(raw) if isinstance(raw, (str, bytes)) else dict(raw)
                registry[name] = named(name, record)
                parsed[name] = (raw, registry[name])
            except (ValueError, TypeError) as exc:
                log.warning("room %r in the registry is not offered: %s", name, exc)
        self._registry = registry
        self._parsed = parsed
        self.rooms = {**self.builtins, **registry, **self.files}
        return sorted(registry)

    async def refresh(self, redis: Any) -> list[str]:
        """Read the room registry (``sk:rooms``) again (asyncio Redis client)."""
        return self.update_registry(await redis.hgetall(ROOMS_KEY))

    def registered(self, name: str) -> bool:
        """Whether the engine's registry holds ``name`` with the config this book offers."""
        mine, theirs = self.rooms.get(name), self._registry.get(name)
        return mine is not None and theirs is not None and mine.to_record() == theirs.to_record()
