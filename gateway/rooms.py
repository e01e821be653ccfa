"""The rooms a gateway's lobby offers: validated room configs by name (R-11.3, R-14).

The shipped configs (``points``, ``wealth``) are always there; ``shuangkou gateway
--room FILE`` adds operator files (the room's name is the config's ``name``).

>>> book = RoomBook.load()
>>> book.get("points").mode, book.get("nope") is None
('points', True)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from engine.config import RoomConfig, builtin_configs, load_config


@dataclass(frozen=True)
class RoomBook:
    rooms: dict[str, RoomConfig] = field(default_factory=dict)

    @classmethod
    def load(cls, files: Iterable[str | Path] = ()) -> RoomBook:
        rooms: dict[str, RoomConfig] = {}
        for name in sorted(builtin_configs()):
            cfg = load_config(name)
            rooms[cfg.name] = cfg
        for f in files:
            cfg = load_config(f)
            rooms[cfg.name] = cfg
        return cls(rooms)

    def get(self, name: str) -> RoomConfig | None:
        return self.rooms.get(name)

    def names(self) -> list[str]:
        return sorted(self.rooms)

    def admits(self, cfg: RoomConfig, balance: int) -> bool:
        """Whether a player with ``balance`` may sit in this room (R-11.1: a wealth room refuses a
        balance below its lowest level; a points room seats every balance at level 0 or above)."""
        return cfg.mode == "points" or cfg.level_of(balance) is not None
