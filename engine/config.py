"""Operator room configuration (R-14), validated by pydantic.

One file per room type under ``config/`` (``points.toml``, ``wealth.toml``).
A match records the full config it starts with (R-11.3) in its first event,
so a later edit to a file never changes an old match's replay.

>>> cfg = load_config("points")
>>> cfg.mode, cfg.kou.single, cfg.doubling[7], cfg.heavenly_bomb
('points', 2, 8, 'top')
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

CONFIG_DIR = Path(__file__).resolve().parent.parent / "config"
XIANGS = tuple(range(4, 13))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KouConfig(_Strict):
    """R-7: kou by the loser's cards left, and its multiplier a."""

    flat: int = Field(1, ge=0)
    single: int = Field(2, ge=0)
    double: int = Field(4, ge=0)
    single_from: int = Field(7, ge=1, description="cards left from which the kou is single")
    double_from: int = Field(12, ge=1, description="cards left from which the kou is double")

    @model_validator(mode="after")
    def _thresholds(self) -> KouConfig:
        if not 1 < self.single_from < self.double_from <= 27:
            raise ValueError("need 1 < single_from < double_from <= 27")
        return self

    def kou_of(self, cards_left: int) -> Literal["flat", "single", "double"]:
        if cards_left >= self.double_from:
            return "double"
        if cards_left >= self.single_from:
            return "single"
        return "flat"

    def multiplier(self, kou: str) -> int:
        return int(getattr(self, kou))


class Level(_Strict):
    """R-11: a level, the balance needed to reach it and its base score X."""

    level: int = Field(ge=0)
    need: int = Field(ge=0)
    base: int = Field(gt=0)


class RoomConfig(_Strict):
    """Everything an operator can set for a room (R-14)."""

    name: str = Field(min_length=1)
    mode: Literal["points", "wealth"]
    kou: KouConfig = KouConfig()
    contribution: dict[int, int] = Field(description="R-8.5 contribution multiplier c by effective xiang 4..12")
    doubling: dict[int, int] = Field(description="R-8.4 doubling multiplier b by effective xiang 4..12")
    levels: tuple[Level, ...] = Field(min_length=1)
    escape_policy: Literal["trustee", "forfeit"] = "forfeit"
    escape_penalty_multiple: int = Field(12, ge=0, description="R-12.2/12.3 the 12 of 12·X")
    escape_transfer_ratio: float = Field(ge=0.0, le=1.0)
    separate_bombs: bool = False
    heavenly_bomb: Literal["top", "bottom"] = "top"
    turn_seconds: float = Field(15.0, gt=0)
    ready_seconds: float = Field(30.0, gt=0)
    trustee_delay_seconds: float = Field(0.5, ge=0)
    timeouts_before_trustee: int = Field(3, ge=1)
    reclaim_after_reconnect: bool = False
    cap_loss_at_balance: bool = False

    @field_validator("contribution", "doubling")
    @classmethod
    def _full_table(cls, table: dict[int, int]) -> dict[int, int]:
        missing = [x for x in XIANGS if x not in table]
        if missing:
            raise ValueError(f"missing rows for xiang {missing} (need every xiang 4..12)")
        extra = sorted(x for x in table if x not in XIANGS)
        if extra:
            raise ValueError(f"rows for xiang {extra} do not exist (xiang is 4..12)")
        negative = sorted(x for x, v in table.items() if v < 0)
        if negative:
            raise ValueError(f"negative multiplier at xiang {negative}")
        return dict(sorted(table.items()))

    @field_validator("levels")
    @classmethod
    def _ascending(cls, levels: tuple[Level, ...]) -> tuple[Level, ...]:
        for lo, hi in zip(levels, levels[1:]):
            if not (lo.level < hi.level and lo.need < hi.need):
                raise ValueError(f"levels must ascend in level and need (at level {hi.level})")
        return levels

    def level_of(self, balance: int) -> Level | None:
        """The highest level whose need the balance meets, or None (R-11.1)."""
        best = None
        for lv in self.levels:
            if balance >= lv.need:
                best = lv
        return best

    def to_record(self) -> dict[str, Any]:
        """Plain data for the MatchCreated event (keys as strings for msgpack)."""
        data = self.model_dump(mode="json")
        return data

    @classmethod
    def from_record(cls, data: dict[str, Any]) -> RoomConfig:
        return cls.model_validate(data)


class ConfigError(ValueError):
    """A config file could not be loaded; ``problems`` lists each with its key path."""

    def __init__(self, source: str, problems: list[str]):
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: " + "; ".join(problems))


def _problems(exc: ValidationError) -> list[str]:
    out = []
    for err in exc.errors():
        path = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        out.append(f"{path}: {msg}")
    return out


def resolve_config_path(name_or_path: str | Path) -> Path:
    """``points``/``wealth`` (any file stem in config/) or a path to a TOML file."""
    p = Path(name_or_path)
    if p.suffix == ".toml" or p.exists():
        return p
    return CONFIG_DIR / f"{name_or_path}.toml"


def load_config(name_or_path: str | Path) -> RoomConfig:
    """Load and validate a room config; raises :class:`ConfigError` listing every problem."""
    path = resolve_config_path(name_or_path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(str(path), ["file not found"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(path), [f"not valid TOML: {exc}"]) from None
    return parse_config(raw, str(path))


def parse_config(raw: dict[str, Any], source: str = "config") -> RoomConfig:
    raw = dict(raw)
    for table in ("contribution", "doubling"):
        if isinstance(raw.get(table), dict):
            converted: dict[Any, Any] = {}
            for k, v in raw[table].items():
                try:
                    converted[int(k)] = v
                except (TypeError, ValueError):
                    converted[k] = v
            raw[table] = converted
    try:
        return RoomConfig.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(source, _problems(exc)) from None
