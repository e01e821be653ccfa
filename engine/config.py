"""Operator room configuration (R-14), validated by pydantic.

One file per room type under the repository's ``config/`` (``points.toml``,
``wealth.toml``).  The wheel ships those files inside this package, as
``engine/room_configs/`` (pyproject.toml, ``force-include``), and
:func:`builtin_configs` finds them with :mod:`importlib.resources`; in a source
checkout (editable install, ``PYTHONPATH``) it reads ``config/`` itself.
A match records the full config it starts with (R-11.3) in its first event,
so a later edit to a file never changes an old match's replay.

>>> cfg = load_config("points")
>>> cfg.mode, cfg.kou.single, cfg.doubling[7], cfg.heavenly_bomb, cfg.chain_bomb_twos
('points', 2, 8, 'top', True)
"""

from __future__ import annotations

import re
import threading
import tomllib
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Literal

import msgpack
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

#: Where the wheel puts the built-in room configs inside this package (pyproject.toml).
PACKAGED_CONFIGS = "room_configs"
#: The repository's config/ folder: the built-in configs in a source checkout.
SOURCE_CONFIG_DIR = Path(__file__).resolve().parent.parent / "config"
CONFIG_DIR = SOURCE_CONFIG_DIR  # the old name (a source checkout's config/); prefer builtin_configs()
XIANGS = tuple(range(4, 13))
#: the name of a ranked room: it is part of its ladder's key tags (engine/store/keys.py)
RANKED_NAME = re.compile(r"[A-Za-z0-9_.-]{1,40}")
#: the levels of the bots a gateway seats (engine/tools/bot.py, docs/BOTS.md)
BotLevel = Literal["easy", "normal", "hard"]


def _raise(problems: list[tuple[str, str]]) -> None:
    """Raise one ValueError carrying several problems, each with a sub-path.

    Lines look like ``@<sub-path>: <message>``; :func:`_problems` joins the
    sub-path onto the location pydantic reports for the validator.
    """
    if problems:
        raise ValueError("\n".join(f"@{sub}: {msg}" for sub, msg in problems))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


# ---- bounds (hardening issue §3/§7): every number a room may set has a sane range, and the
# worst settlement the config allows fits far inside the ledger's signed 64-bit integers
TIMER_SECONDS = (1.0, 3600.0)  # turn_seconds, ready_seconds
TRUSTEE_DELAY_SECONDS = (0.0, 10.0)
MAX_BASE = 10**9  # a level's base score X
MAX_NEED = 10**15  # a level's balance threshold
MAX_LEVELS = 100
MAX_KOU_MULTIPLIER = 1_000  # a
MAX_TABLE_MULTIPLIER = 10**6  # c (contribution) and b (doubling)
MAX_ESCAPE_MULTIPLE = 1_000  # m of m·X
MAX_TIMEOUTS_BEFORE_TRUSTEE = 100
#: the most one match may move between two players: ≤ 2^53 (exact in a float, a JSON number,
#: a JavaScript client) and 2^10 times below int64, so ledgers summing many worst-case
#: matches stay far from overflowing (the ledger checks its own sums, projections/ledger.py)
MAX_SETTLEMENT = 2**53


def worst_settlement(cfg: RoomConfig) -> int:
    """The largest amount one settlement of ``cfg`` can move (R-8, R-12), an upper bound.

    Normal win: X·a·b + X·(c_w − c_l) ≤ X·(a_max·b_max + c_max); escape forfeit:
    m·X + X·c_O + X·a_single·b_O ≤ X·(m + c_max + a_max·b_max).  So, with X the
    largest base, ``X · (a_max · b_max + c_max + m)``.

    >>> worst_settlement(load_config("points"))  # 800 · (4·256 + 128 + 12)
    931200
    """
    x = max(lv.base for lv in cfg.levels)
    a = max(cfg.kou.flat, cfg.kou.single, cfg.kou.double)
    b = max(cfg.doubling.values())
    c = max(cfg.contribution.values())
    return x * (a * b + c + cfg.escape_penalty_multiple)


def _bound(problems: list[tuple[str, str]], path: str, value: float, lo: float, hi: float, unit: str = "") -> None:
    if not lo <= value <= hi:
        problems.append((path, f"must be {lo:g}..{hi:g}{unit}, got {value:g}{unit}"))


class KouConfig(_Strict):
    """R-7: kou by the loser's cards left, and its multiplier a."""

    flat: int = Field(1, ge=0)
    single: int = Field(2, ge=0)
    double: int = Field(4, ge=0)
    single_from: int = Field(7, ge=1, description="cards left from which the kou is single")
    double_from: int = Field(12, ge=1, description="cards left from which the kou is double")

    @model_validator(mode="after")
    def _thresholds(self) -> KouConfig:
        problems = []
        if not 1 < self.single_from <= 27:
            problems.append(("single_from", f"must be 2..27 (a flat kou needs at least 1 card left, "
                                            f"a hand holds 27), got {self.single_from}"))
        if not 1 < self.double_from <= 27:
            problems.append(("double_from", f"must be 2..27 (a hand holds 27 cards), got {self.double_from}"))
        if not problems and self.single_from >= self.double_from:
            problems.append(("double_from", f"must be greater than single_from ({self.single_from}), "
                                            f"got {self.double_from}"))
        if not self.flat <= self.single <= self.double:
            problems.append(("single" if self.flat > self.single else "double",
                             f"kou multipliers must not decrease flat <= single <= double "
                             f"(R-7.2), got {self.flat}, {self.single}, {self.double}"))
        _raise(problems)
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
    chain_bomb_twos: bool = Field(True, description="R-2.2: chain bombs may run up to 2 (false: 3…A only)")
    turn_seconds: float = Field(15.0, gt=0)
    ready_seconds: float = Field(30.0, gt=0)
    trustee_delay_seconds: float = Field(0.5, ge=0)
    timeouts_before_trustee: int = Field(3, ge=1)
    reclaim_after_reconnect: bool = False
    reconnect_grace_seconds: float = Field(10.0, ge=0, le=3600, description="gateway: a dropped socket becomes "
                                           "a Disconnect (R-13.4) only after this long without a reconnect")
    #: the lobby's leave cooldown (engine/lobby/decide.py): a player who leaves a table before
    #: its deal may Join again only after this long, doubled for each such leave in a row ...
    leave_cooldown_seconds: float = Field(5.0, ge=0, le=3600, description="lobby: a player who leaves a table "
                                          "before its deal, or is removed not ready (R-13.2), may Join again "
                                          "only after this long, doubled for each such leave in a row (0: no "
                                          "cooldown)")
    #: ... up to this long
    leave_cooldown_max_seconds: float = Field(300.0, ge=0, le=86400, description="lobby: the longest leave "
                                              "cooldown (the doubling stops here)")
    #: private tables (engine/lobby/series.py, issue 39): an unclaimed table ends (``not_joined``), or a
    #: bot takes the empty seat where the owner allowed bots, this long after it was opened ...
    private_join_seconds: float = Field(600.0, ge=1, le=86400, description="private tables: an unclaimed "
                                        "table ends after this long (not_joined), or a bot takes the seat "
                                        "where the owner allowed bots")
    #: ... and a vote to end a series early lasts this long (no answer in time counts as agreed)
    end_vote_seconds: float = Field(60.0, ge=1, le=3600, description="private tables: how long a vote to "
                                    "end a series lasts; no answer in time counts as agreed")
    #: set by the lobby on the hands of a private table (never in a room file): a ladder never
    #: rates such a match (projections/ratings.py ``rated_match`` skips it as ``private``)
    private: bool = Field(False, description="a private table's hand: never rated by a ladder (set by the "
                          "lobby on the match's recorded config)")
    cap_loss_at_balance: bool = False
    #: fixed-hand Deal commands allowed on the operator channel (test rooms only; off in
    #: the shipped configs; run-script and the tests deal through the engine's own path)
    test_deals: bool = False
    #: ``gateway --bots``: the level of the bot seated in this room (docs/BOTS.md); unset:
    #: the gateway's ``--bot-level``.  Not a rule: a match plays the same whoever sits.
    bot_level: BotLevel | None = Field(None, description="gateway --bots: the level of a bot seated in this "
                                       "room (easy, normal or hard); unset: the gateway's --bot-level")
    # ---- ranked play (docs/RANKED.md): ratings, the ladder, pairing by skill
    #: the room keeps a rated ladder per season (projections/ratings.py)
    ranked: bool = Field(False, description="ranked room: its finished matches move a rating per season "
                         "(docs/RANKED.md)")
    #: matches against a bot count (tests and benches only; ranked rooms otherwise skip them)
    rate_bots: bool = Field(False, description="ranked: matches against a bot are rated too (tests, benches)")
    #: a player is shown as provisional until this many rated matches in the season
    provisional_matches: int = Field(10, ge=0, le=1000, description="ranked: rated matches before a "
                                     "player's rating stops being provisional")
    #: the queue pairs a waiting player with the closest rating within this window (rating points) ...
    match_window: float = Field(50.0, ge=0, le=100_000, description="ranked: the rating window a new "
                                "waiter is paired within (rating points)")
    #: ... which widens by this much per second waited ...
    match_window_per_second: float = Field(10.0, ge=0, le=100_000, description="ranked: how fast the "
                                           "window widens (rating points per second waited)")
    #: ... until this wait, after which anyone (or a bot, with gateway --bots) will do
    match_max_wait_seconds: float = Field(20.0, ge=0, le=3600, description="ranked: after this wait the "
                                          "player is paired with anyone, or a bot where the room has one")

    @field_validator("contribution", "doubling")
    @classmethod
    def _full_table(cls, table: dict[int, int], info: Any) -> dict[int, int]:
        problems = []
        for x in XIANGS:
            if x not in table:
                problems.append((str(x), "missing row (every xiang 4..12 needs a row)"))
        for x in sorted(table):
            if x not in XIANGS:
                problems.append((str(x), "no such xiang (rows are 4..12)"))
        floor = 1 if info.field_name == "doubling" else 0
        for x, v in sorted(table.items()):
            if v < floor:
                what = "negative multiplier" if v < 0 else "a doubling multiplier must be at least 1 (1 = no doubling)"
                problems.append((str(x), f"{what}, got {v}"))
        rows = [(x, table[x]) for x in XIANGS if x in table]
        for (x0, v0), (x1, v1) in zip(rows, rows[1:]):
            if v1 < v0 and v0 >= floor and v1 >= floor:
                problems.append((str(x1), f"must not be below the {x0}-xiang row ({v1} < {v0}): "
                                          "a stronger bomb never pays less (R-8.3 takes the largest xiang)"))
        _raise(problems)
        return dict(sorted(table.items()))

    @field_validator("levels")
    @classmethod
    def _ascending(cls, levels: tuple[Level, ...]) -> tuple[Level, ...]:
        problems = []
        for i, (lo, hi) in enumerate(zip(levels, levels[1:]), start=1):
            if lo.level >= hi.level:
                problems.append((f"[{i}].level", f"levels must ascend: level {hi.level} after level {lo.level}"))
            if lo.need >= hi.need:
                problems.append((f"[{i}].need", f"need must ascend: {hi.need} at level {hi.level} "
                                                f"is not above {lo.need} at level {lo.level}"))
        _raise(problems)
        return levels

    @model_validator(mode="after")
    def _new_players_can_sit(self) -> RoomConfig:
        # a new points player holds 0 points and must have a level (and a base X).
        if self.mode == "points" and self.levels and self.levels[0].need > 0:
            _raise([("levels[0].need", f"a points room's first level must need 0 points "
                                       f"(a new player holds 0), got {self.levels[0].need}")])
        return self

    @model_validator(mode="after")
    def _bounds(self, info: Any) -> RoomConfig:
        # a match's recorded config is replayed as it was, bounds or not
        if isinstance(info.context, dict) and info.context.get("recorded"):
            return self
        p: list[tuple[str, str]] = []
        _bound(p, "turn_seconds", self.turn_seconds, *TIMER_SECONDS, " s")
        _bound(p, "ready_seconds", self.ready_seconds, *TIMER_SECONDS, " s")
        _bound(p, "trustee_delay_seconds", self.trustee_delay_seconds, *TRUSTEE_DELAY_SECONDS, " s")
        _bound(p, "timeouts_before_trustee", self.timeouts_before_trustee, 1, MAX_TIMEOUTS_BEFORE_TRUSTEE)
        _bound(p, "escape_penalty_multiple", self.escape_penalty_multiple, 0, MAX_ESCAPE_MULTIPLE)
        if self.leave_cooldown_max_seconds < self.leave_cooldown_seconds:
            p.append(("leave_cooldown_max_seconds", f"must not be below leave_cooldown_seconds "
                                                    f"({self.leave_cooldown_max_seconds} < {self.leave_cooldown_seconds})"))
        if len(self.name) > 100:
            p.append(("name", f"at most 100 characters, got {len(self.name)}"))
        if (self.ranked or self.rate_bots) and not RANKED_NAME.fullmatch(self.name):
            p.append(("name", "a ranked room's name is 1-40 letters, digits, '_', '-' or '.' (it names the "
                              f"ladder's keys), got {self.name!r}"))
        if self.rate_bots and not self.ranked:
            p.append(("rate_bots", "only a ranked room rates matches (set ranked = true)"))
        if len(self.levels) > MAX_LEVELS:
            p.append(("levels", f"at most {MAX_LEVELS} levels, got {len(self.levels)}"))
        for i, lv in enumerate(self.levels):
            _bound(p, f"levels[{i}].base", lv.base, 1, MAX_BASE)
            _bound(p, f"levels[{i}].need", lv.need, 0, MAX_NEED)
            _bound(p, f"levels[{i}].level", lv.level, 0, 10_000)
        for kou in ("flat", "single", "double"):
            _bound(p, f"kou.{kou}", getattr(self.kou, kou), 0, MAX_KOU_MULTIPLIER)
        for table in ("contribution", "doubling"):
            for x, v in getattr(self, table).items():
                _bound(p, f"{table}.{x}", v, 0, MAX_TABLE_MULTIPLIER)
        if not p:
            worst = worst_settlement(self)
            if worst > MAX_SETTLEMENT:
                p.append(("levels", f"the worst settlement this config allows, largest base × "
                                    f"(a × b + c + escape multiple) = {worst}, exceeds {MAX_SETTLEMENT} "
                                    "(2^53): lower the bases or the multipliers"))
        _raise(p)
        return self

    def level_of(self, balance: int) -> Level | None:
        """The highest level whose need the balance meets, or None (R-11.1)."""
        best = None
        for lv in self.levels:
            if balance >= lv.need:
                best = lv
        return best

    def seat_level(self, balance: int) -> Level | None:
        """The level a player with ``balance`` sits at (R-11), None when the room refuses them.

        **Decision:** in a points room a balance below the first level (a player who lost into
        negative points) sits at the first level; in a wealth room it cannot sit (R-11.1).

        >>> from engine.config import load_config
        >>> load_config("points").seat_level(-5).level, load_config("wealth").seat_level(0) is None
        (0, True)
        """
        lv = self.level_of(balance)
        if lv is None and self.mode == "points":
            return self.levels[0]
        return lv

    def to_record(self) -> dict[str, Any]:
        """Plain data for the MatchCreated event (keys as strings for msgpack)."""
        data = self.model_dump(mode="json")
        return data

    def private_record(self) -> dict[str, Any]:
        """The record a private table's hand is created with (``CreateMatch.config``): this
        room's config with ``private`` set, so no ladder rates the match (issue 39).

        >>> load_config("points").private_record()["private"]
        True
        """
        return {**self.to_record(), "private": True}

    @classmethod
    def from_record(cls, data: dict[str, Any]) -> RoomConfig:
        """A config as a command or a record carries it (missing keys take their defaults).

        Equal records give the one validated config (:func:`_validated`)."""
        return _validated(cls, data, recorded=False)

    @classmethod
    def from_match_record(cls, data: dict[str, Any]) -> RoomConfig:
        """The config a MatchCreated event recorded (R-11.3: a match keeps its config).

        Matches recorded before ``chain_bomb_twos`` existed played chain bombs
        to A only, so a record without the key reads as ``false`` (R-2.2);
        every record written since carries the key.

        >>> old = {k: v for k, v in load_config("points").to_record().items() if k != "chain_bomb_twos"}
        >>> RoomConfig.from_match_record(old).chain_bomb_twos, RoomConfig.from_record(old).chain_bomb_twos
        (False, True)
        """
        if isinstance(data, dict) and "chain_bomb_twos" not in data:
            data = {**data, "chain_bomb_twos": False}
        return _validated(cls, data, recorded=True)


def _validated(cls: type[RoomConfig], data: Any, recorded: bool) -> RoomConfig:
    """``data`` validated as a config (``recorded``: as a MatchCreated recorded it, bounds
    unchecked), through a cache keyed by its msgpack bytes: a room's matches carry one
    record, and validating it costs more than deciding a play.  Equal bytes are equal plain
    data (msgpack tells an int from a float and a bool, a str from bytes), so the cached
    config is the one a fresh validation would give; a config is frozen, and shared already
    (a registered room's config is every match's of that room).  A refusal is not cached;
    data msgpack cannot pack is validated uncached.

    >>> rec = load_config("points").to_record()
    >>> RoomConfig.from_record(rec) is RoomConfig.from_record(dict(rec))
    True
    """
    try:
        key = (msgpack.packb(data, use_bin_type=True), recorded)
    except (TypeError, ValueError, OverflowError):
        return cls.model_validate(data, context={"recorded": recorded})
    cfg = _VALIDATED.get(key)
    if cfg is None:
        cfg = cls.model_validate(data, context={"recorded": recorded})
        with _VALIDATED_LOCK:
            _VALIDATED[key] = cfg
            while len(_VALIDATED) > _VALIDATED_MAX:
                del _VALIDATED[next(iter(_VALIDATED))]  # the oldest first
    return cfg


#: :func:`_validated`'s cache: (record bytes, recorded) -> config, the oldest dropped first
_VALIDATED: dict[tuple[bytes, bool], RoomConfig] = {}
_VALIDATED_MAX = 256
_VALIDATED_LOCK = threading.Lock()


class ConfigError(ValueError):
    """A config file could not be loaded; ``problems`` lists each with its key path."""

    def __init__(self, source: str, problems: list[str]):
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: " + "; ".join(problems))


def _join(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if part == "[key]":
            continue
        if isinstance(part, int) and out == "levels":
            out += f"[{part}]"
        elif out:
            out += f".{part}"
        else:
            out = str(part)
    return out


def _problems(exc: ValidationError) -> list[str]:
    """Every problem of a validation error as ``key.path: message`` lines."""
    out = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        path = _join(loc)
        kind = err["type"]
        if kind == "value_error":
            text = str(err.get("ctx", {}).get("error", err["msg"]))
            for line in text.splitlines():
                if line.startswith("@"):
                    sub, _, msg = line[1:].partition(": ")
                    full = path + sub if sub.startswith("[") else (f"{path}.{sub}" if path else sub)
                    out.append(f"{full}: {msg}")
                else:
                    out.append(f"{path or '(top level)'}: {line}")
            continue
        msg = err["msg"]
        if kind == "extra_forbidden":
            msg = "unknown key"
        elif kind == "missing":
            msg = "missing (this key is required)"
        elif "[key]" in loc:
            msg = "not an xiang number (rows are 4..12)"
        elif "input" in err and not isinstance(err["input"], (dict, list, tuple)):
            msg = f"{msg} (got {err['input']!r})"
        out.append(f"{path or '(top level)'}: {msg}")
    return out


def builtin_config_dir() -> Traversable:
    """The folder of the built-in room configs.

    Installed from a wheel: ``engine/room_configs`` inside the package, found with
    :func:`importlib.resources.files` (so it works from a zip or any loader too).
    In a source checkout that folder does not exist and the repository's
    ``config/`` is used.

    >>> sorted(builtin_configs())[:2]
    ['points', 'wealth']
    """
    packaged = resources.files(__package__ or "engine").joinpath(PACKAGED_CONFIGS)
    if packaged.is_dir():
        return packaged
    return SOURCE_CONFIG_DIR


def builtin_configs() -> dict[str, Traversable]:
    """The built-in room configs by name (the file stem): ``{"points": …, "wealth": …}``."""
    folder = builtin_config_dir()
    if not folder.is_dir():
        return {}
    return {entry.name[: -len(".toml")]: entry for entry in folder.iterdir()
            if entry.name.endswith(".toml") and entry.is_file()}


def resolve_config_path(name_or_path: str | Path) -> Path | Traversable:
    """A built-in room's name (``points``, ``wealth``) or a path to a TOML file.

    A name with no ``.toml`` suffix that is not an existing file is looked up among
    :func:`builtin_configs`; an unknown name gives a path that does not exist (so
    :func:`load_config` reports "file not found" naming it).
    """
    p = Path(name_or_path)
    if p.suffix == ".toml" or p.exists():
        return p
    found = builtin_configs().get(str(name_or_path))
    if found is not None:
        return found
    return Path(f"{name_or_path}.toml")


def _source_name(path: Path | Traversable) -> str:
    """How a config is named in messages: a built-in by ``<name>.toml (built-in)``."""
    if isinstance(path, Path):
        return str(path)
    return f"{path.name} (built-in)"


def load_config(name_or_path: str | Path) -> RoomConfig:
    """Load and validate a room config; raises :class:`ConfigError` listing every problem.

    ``name_or_path`` is a built-in room's name (``points``, ``wealth``; see
    :func:`builtin_configs`) or a path to a TOML file.
    """
    resolved = resolve_config_path(name_or_path)
    path = _source_name(resolved)
    try:
        text = resolved.read_text(encoding="utf-8")
    except FileNotFoundError:
        if isinstance(resolved, Path) and str(resolved) == f"{name_or_path}.toml" and Path(name_or_path).suffix != ".toml":
            rooms = ", ".join(sorted(builtin_configs())) or "none"
            raise ConfigError(str(name_or_path), [f"(file): file not found (not a TOML file, nor a built-in "
                                                  f"room config: {rooms})"]) from None
        raise ConfigError(str(path), ["(file): file not found"]) from None
    except IsADirectoryError:
        raise ConfigError(str(path), ["(file): is a directory, not a TOML file"]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(str(path), [f"(file): not UTF-8 text ({exc.reason} at byte {exc.start})"]) from None
    except OSError as exc:
        raise ConfigError(str(path), [f"(file): cannot read: {exc.strerror or exc}"]) from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(path), [f"(file): not valid TOML: {exc}"]) from None
    return parse_config(raw, path)


def parse_config(raw: dict[str, Any], source: str = "config") -> RoomConfig:
    """Validate already-parsed data (a TOML table); raises :class:`ConfigError`."""
    if not isinstance(raw, dict):
        raise ConfigError(source, [f"(top level): must be a table of keys, got {type(raw).__name__}"])
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
