"""Commands: what gateways, timers and tools ask of a match.

Frozen pydantic models with a ``type`` tag; every command carries
``command_id`` (idempotency: a retried command id appends nothing new) and
``match_id``.  ``decide`` turns a command into events or a :class:`Rejected`.
Cards travel as physical ids; gateways may send notation text, which
:func:`parse_command` reads with ``parse_cards``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

import msgpack
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator, model_validator

from engine.rules.cards import NUM_CARDS, CardNotationError, parse_tokens
from engine.match.errors import BadCommand
from engine.match.fairness import client_seed_problem

MAX_COMMAND_BYTES = 64 * 1024
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # every integer of a command fits a signed 64-bit int
MAX_NESTING = 16  # maps and lists inside a command, deepest

#: ``expected_version`` of a player command: the match version the player saw (§6 of the
#: hardening issue); a command whose match has moved since is refused as ``stale``
ExpectedVersion = Annotated[int | None, Field(None, ge=0, le=INT64_MAX)]

#: a physical card id (R-1.1: 108 cards, ids 0–107)
CardId = Annotated[int, Field(ge=0, le=NUM_CARDS - 1)]

MAX_REASON = 300  # a bad_command reason never grows beyond this many characters
_MAX_PROBLEM = 120  # nor one problem of it (a validator's message may quote the input)


def _problem_text(err: Any) -> str:
    """One pydantic error as a person reads it: no "Value error, " prefix, no input, no URL."""
    loc = [p for p in err.get("loc", ())]
    kind = err.get("type", "")
    if kind in ("greater_than_equal", "less_than_equal") and len(loc) >= 2 and loc[-2] == "cards" \
            and isinstance(loc[-1], int):
        return f"a card id is 0–{NUM_CARDS - 1} (R-1.1: the 108 physical cards)"
    msg = str(err.get("msg", "invalid"))
    for prefix in ("Value error, ", "Assertion failed, "):
        if msg.startswith(prefix):
            msg = msg[len(prefix):]
    msg = " ".join(msg.split())  # one line
    return msg if len(msg) <= _MAX_PROBLEM else msg[:_MAX_PROBLEM - 1] + "…"


def readable_validation_error(exc: ValidationError, skip: int = 0, limit: int = 4, root: str = "(command)") -> str:
    """A pydantic ``ValidationError`` as one readable ``bad_command`` reason: ``field: message``
    for each of the first ``limit`` problems (``skip`` leading parts of each location dropped,
    e.g. the command type of a tagged union; ``root`` names a problem of the whole), no input
    echoed, no documentation URL, at most :data:`MAX_REASON` characters.  A sequence's "too
    short" that only follows from its items' own errors is left out (pydantic reports it after
    dropping the bad items).

    >>> try:
    ...     Play(command_id="c", match_id="m", player="a", cards=(999,))
    ... except ValidationError as exc:
    ...     readable_validation_error(exc)
    'cards.0: a card id is 0–107 (R-1.1: the 108 physical cards)'
    >>> try:
    ...     Pass(command_id="c", match_id="m", player="a", expected_version=2**70)
    ... except ValidationError as exc:
    ...     readable_validation_error(exc)
    'expected_version: Input should be less than or equal to 9223372036854775807'
    """
    errors = exc.errors(include_url=False, include_input=False)
    item_errors = {tuple(e["loc"][:-1]) for e in errors if e["loc"] and isinstance(e["loc"][-1], int)}
    problems: list[str] = []
    for err in errors:
        if err.get("type") == "too_short" and tuple(err["loc"]) in item_errors:
            continue
        path = ".".join(str(p) for p in err["loc"][skip:]) or root  # root "": the message alone
        problems.append(f"{path}: {_problem_text(err)}" if path else _problem_text(err))
    more = len(problems) - limit
    text = "; ".join(problems[:limit]) + (f"; and {more} more" if more > 0 else "")
    return text if len(text) <= MAX_REASON else text[:MAX_REASON - 1] + "…"


def command_of(cls: type[CommandBase], **fields: Any) -> CommandBase:
    """``cls(**fields)``, or a :class:`BadCommand` with a readable reason
    (:func:`readable_validation_error`) -- what a gateway builds player commands with.

    >>> command_of(Ready, command_id="c", match_id="m", player="a", client_seed="\\x00bad")
    Traceback (most recent call last):
    ...
    engine.match.errors.BadCommand: client_seed: a client seed holds printable characters only (no control characters)
    """
    try:
        return cls(**fields)
    except ValidationError as exc:
        raise BadCommand(readable_validation_error(exc)) from None


class CommandBase(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    command_id: str = Field(min_length=1, max_length=200)
    match_id: str = Field(min_length=1, max_length=200)


class CreateMatch(CommandBase):
    """Create a match in a registered room (``room``: its name) or, from operator tools on the
    operator channel only, with a full config record (``config``).  Exactly one of the two."""

    type: Literal["CreateMatch"] = "CreateMatch"
    room: str | None = Field(None, min_length=1, max_length=100, description="a registered room's name")
    config: dict[str, Any] | None = Field(None, description="full RoomConfig record (RoomConfig.to_record())")

    @model_validator(mode="after")
    def _room_or_config(self) -> CreateMatch:
        if (self.room is None) == (self.config is None):
            raise ValueError("give exactly one of room (a registered room's name) or config (a full record)")
        return self


class Sit(CommandBase):
    """Seat a player; the engine reads their balance (points or coins) from its own ledger
    (a ``balance`` in the message is refused as an unknown field)."""

    type: Literal["Sit"] = "Sit"
    player: str = Field(min_length=1, max_length=100)


class Leave(CommandBase):
    """A seated player leaves before the deal: by their own choice (``left``), or because the
    table closed under them (``table_closed``: the lobby's, for who stays at a table whose other
    player left before this match's deal; they did not leave)."""

    type: Literal["Leave"] = "Leave"
    player: str
    expected_version: ExpectedVersion = None
    reason: Literal["left", "table_closed"] = "left"


class Ready(CommandBase):
    """The player is ready; ``client_seed`` (1–64 printable characters) is their entropy
    for a fair deal (docs/FAIRNESS.md), defaulting to one derived from the player id."""

    type: Literal["Ready"] = "Ready"
    player: str
    expected_version: ExpectedVersion = None
    client_seed: str | None = None

    @field_validator("client_seed")
    @classmethod
    def _seed(cls, value: str | None) -> str | None:
        if value is not None:
            problem = client_seed_problem(value)
            if problem is not None:
                raise ValueError(problem)
        return value


class Deal(CommandBase):
    """Deal the hands: from ``ctx.deck`` (shuffled outside decide), or a fixed deal.

    A fixed deal (tests, scripts) gives 1–27 cards a hand and the leading seat.
    """

    type: Literal["Deal"] = "Deal"
    hands: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    first: int | None = Field(None, ge=0, le=1)


class Play(CommandBase):
    """Play cards, given either as physical ids (``cards``) or as notation
    (``text``, e.g. ``"3 3"`` or ``"10H 10S"``) that ``decide`` matches against
    the player's hand (lowest ids of each rank, suits respected when given).
    ``reading_kind``/``reading_rank`` optionally name the reading when the cards
    allow several (R-4.6); otherwise the engine chooses."""

    type: Literal["Play"] = "Play"
    player: str
    expected_version: ExpectedVersion = None
    cards: tuple[CardId, ...] | None = Field(None, min_length=1, max_length=27)
    text: str | None = Field(None, min_length=1, max_length=400)
    reading_kind: str | None = None
    reading_rank: str | None = None

    @model_validator(mode="after")
    def _one_of(self) -> Play:
        if (self.cards is None) == (self.text is None):
            raise ValueError("give exactly one of cards (ids) or text (card notation)")
        if self.cards is not None and len(set(self.cards)) != len(self.cards):
            raise ValueError("the same card id is named twice")
        if self.text is not None:
            try:
                parse_tokens(self.text)
            except CardNotationError as exc:
                raise ValueError(str(exc)) from None
        return self


class Pass(CommandBase):
    type: Literal["Pass"] = "Pass"
    player: str
    expected_version: ExpectedVersion = None


class TurnTimeout(CommandBase):
    """The turn clock ran out (R-13.1); stale unless ``version`` is the match's version."""

    type: Literal["TurnTimeout"] = "TurnTimeout"
    version: int


class TrusteeAct(CommandBase):
    """The system plays for a trusteed player (R-13.3); stale unless ``version`` matches."""

    type: Literal["TrusteeAct"] = "TrusteeAct"
    version: int


class ReadyTimeout(CommandBase):
    """The ready clock ran out (R-13.2): unready seated players are removed."""

    type: Literal["ReadyTimeout"] = "ReadyTimeout"
    version: int


class ExtendClock(CommandBase):
    """The turn or ready clock of version ``version`` is moved ``by_ms`` later: the player
    could not have acted for that long (their update was published late, ``unpublished``,
    or handed to their socket late because their gateway was down, ``undelivered``, or the
    match's writes could not be confirmed, ``unconfirmed``, or their command, added to the
    inbox in time, was not handled yet, ``unhandled``; issue 35 §4).  A timer
    command, decided like a timeout (stale unless ``version`` is the match's version)."""

    type: Literal["ExtendClock"] = "ExtendClock"
    version: int
    by_ms: int = Field(ge=1, le=86_400_000)
    reason: Literal["unpublished", "undelivered", "unconfirmed", "unhandled"]


class RequestTrustee(CommandBase):
    type: Literal["RequestTrustee"] = "RequestTrustee"
    player: str
    expected_version: ExpectedVersion = None


class CancelTrustee(CommandBase):
    type: Literal["CancelTrustee"] = "CancelTrustee"
    player: str
    expected_version: ExpectedVersion = None


class Disconnect(CommandBase):
    type: Literal["Disconnect"] = "Disconnect"
    player: str
    expected_version: ExpectedVersion = None


class Reconnect(CommandBase):
    type: Literal["Reconnect"] = "Reconnect"
    player: str
    expected_version: ExpectedVersion = None


class Escape(CommandBase):
    type: Literal["Escape"] = "Escape"
    player: str
    expected_version: ExpectedVersion = None


class Sync(CommandBase):
    """Ask for the player's current view (any phase, finished matches included); appends nothing."""

    type: Literal["Sync"] = "Sync"
    player: str


#: the quick phrases (快捷語) a seated player may Say, by id; the clients hold the localized texts
PHRASES = ("hurry_up", "nice_cards", "well_played", "thanks", "sorry", "oops", "one_more", "bye")
#: the emotes a seated player may Say, by id
EMOTES = ("emote_smile", "emote_laugh", "emote_cry", "emote_angry", "emote_cool", "emote_surprised")
#: every id a Say may carry (no free text: nothing to moderate)
SAY_IDS = PHRASES + EMOTES
PhraseId = Literal["hurry_up", "nice_cards", "well_played", "thanks", "sorry", "oops", "one_more", "bye",
                   "emote_smile", "emote_laugh", "emote_cry", "emote_angry", "emote_cool", "emote_surprised"]


class Say(CommandBase):
    """A quick phrase or emote of a seated player of a match not over, to the table (both
    players and the spectators); appends nothing (the publisher writes a ``say`` entry to both
    players' streams)."""

    type: Literal["Say"] = "Say"
    player: str
    phrase: PhraseId


class OperatorCommand(CommandBase):
    """An operator command that is not about one match (ledger entries, rooms): ``match_id``
    may be left empty.  Sent on the operator channel only (engine/service/channels.py)."""

    match_id: str = Field("", max_length=200)


MAX_AMOUNT = 10**12  # one ledger entry moves at most this many points or coins


class Credit(OperatorCommand):
    """An audited ledger entry adding ``amount`` to ``player``'s balance in ``mode``."""

    type: Literal["Credit"] = "Credit"
    player: str = Field(min_length=1, max_length=100)
    amount: int = Field(gt=0, le=MAX_AMOUNT)
    mode: Literal["points", "wealth"] = "wealth"
    reason: str = Field(min_length=1, max_length=500)
    operator: str = Field(min_length=1, max_length=100)


class Debit(OperatorCommand):
    """An audited ledger entry taking ``amount`` from ``player``'s balance (never below 0)."""

    type: Literal["Debit"] = "Debit"
    player: str = Field(min_length=1, max_length=100)
    amount: int = Field(gt=0, le=MAX_AMOUNT)
    mode: Literal["points", "wealth"] = "wealth"
    reason: str = Field(min_length=1, max_length=500)
    operator: str = Field(min_length=1, max_length=100)


class AddRoom(OperatorCommand):
    """Register (``replace``: or replace) a room config under ``name``."""

    type: Literal["AddRoom"] = "AddRoom"
    name: str = Field(min_length=1, max_length=100)
    config: dict[str, Any]
    replace: bool = False
    operator: str = Field("operator", min_length=1, max_length=100)


Command = Annotated[
    Union[CreateMatch, Sit, Leave, Ready, Deal, Play, Pass, TurnTimeout, TrusteeAct, ReadyTimeout,
          ExtendClock, RequestTrustee, CancelTrustee, Disconnect, Reconnect, Escape, Sync, Say, Credit, Debit, AddRoom],
    Field(discriminator="type"),
]
_COMMAND_ADAPTER: TypeAdapter[Any] = TypeAdapter(Command)


def _flat_and_plain(data: dict[Any, Any]) -> bool:
    """True when ``data`` is a map of ASCII text keys to ASCII text, 64-bit integers,
    booleans, None or lists of 64-bit integers: plain for :func:`check_plain`, which then
    need not walk it (a player command is this; anything else is walked and explained)."""
    for k, v in data.items():
        if type(k) is not str or not k.isascii():
            return False
        t = type(v)
        if t is str:
            if not v.isascii():
                return False
        elif t is int:
            if not INT64_MIN <= v <= INT64_MAX:
                return False
        elif t is list or t is tuple:
            for x in v:
                if type(x) is not int or not INT64_MIN <= x <= INT64_MAX:
                    return False
        elif v is not None and t is not bool:
            return False
    return True


_INF = (float("inf"), float("-inf"))


def _is_plain(data: Any) -> bool:
    """True when :func:`check_plain` would pass ``data`` made of the plain types (dict,
    list, tuple, str, int, float, bool, None); False when it might not, or holds another
    type: :func:`check_plain` then walks it and names the problem.  A level at a time and
    without building the paths, so a nested command (a CreateMatch's room config) costs a
    third of that walk."""
    level: list[Any] = [data]
    depth = 0
    while level:
        if depth > MAX_NESTING:
            return False
        deeper: list[Any] = []
        for x in level:
            t = type(x)
            if t is str:
                if not x.isascii():
                    try:
                        x.encode("utf-8")
                    except UnicodeEncodeError:
                        return False
            elif t is int:
                if not INT64_MIN <= x <= INT64_MAX:
                    return False
            elif t is dict:
                deeper.extend(x.keys())
                deeper.extend(x.values())
            elif t is list or t is tuple:
                deeper.extend(x)
            elif t is float:
                if x != x or x in _INF:
                    return False
            elif x is not None and t is not bool:
                return False
        level = deeper
        depth += 1
    return True


def check_plain(data: Any) -> None:
    """Refuse what no command may hold, before validation: integers beyond 64 bits,
    text that is not encodable UTF-8 (a lone surrogate, as JavaScript's JSON.stringify
    may produce), NaN/Infinity, nesting deeper than :data:`MAX_NESTING`.

    >>> check_plain({"player": "\\ud800"})
    Traceback (most recent call last):
    ...
    engine.match.errors.BadCommand: player: not valid UTF-8 text (a lone surrogate?)
    """
    if (type(data) is dict and _flat_and_plain(data)) or _is_plain(data):
        return
    _explain(data, "", 0)


def _explain(data: Any, path: str, depth: int) -> None:
    """:func:`check_plain`'s walk: the first problem raised, named by its path."""
    where = path or "(command)"
    if depth > MAX_NESTING:
        raise BadCommand(f"{where}: nested deeper than {MAX_NESTING} levels")
    if isinstance(data, bool) or data is None:
        return
    if isinstance(data, int):
        if not INT64_MIN <= data <= INT64_MAX:
            raise BadCommand(f"{where}: integer out of the 64-bit range")
    elif isinstance(data, float):
        if data != data or data in (float("inf"), float("-inf")):
            raise BadCommand(f"{where}: NaN and Infinity are not numbers a command may hold")
    elif isinstance(data, str):
        try:
            data.encode("utf-8")
        except UnicodeEncodeError:
            raise BadCommand(f"{where}: not valid UTF-8 text (a lone surrogate?)") from None
    elif isinstance(data, dict):
        for k, v in data.items():
            _explain(k, f"{path}.(key)" if path else "(key)", depth + 1)
            _explain(v, f"{path}.{k}" if path else str(k), depth + 1)
    elif isinstance(data, (list, tuple)):
        for i, v in enumerate(data):
            _explain(v, f"{path}.{i}" if path else str(i), depth + 1)


def parse_command(data: dict[str, Any]) -> CommandBase:
    """Validate a command from plain data; a problem is a :class:`BadCommand` naming it."""
    check_plain(data)
    try:
        return _COMMAND_ADAPTER.validate_python(data)  # type: ignore[no-any-return]
    except ValidationError as exc:
        skip = 1 if isinstance(data.get("type"), str) else 0  # the loc's first part is the command type
        raise BadCommand("bad command: " + readable_validation_error(exc, skip=skip)) from None


def encode_command(cmd: CommandBase) -> bytes:
    return msgpack.packb(cmd.model_dump(mode="python"), use_bin_type=True)  # type: ignore[no-any-return]


def decode_command(data: bytes) -> CommandBase:
    if len(data) > MAX_COMMAND_BYTES:
        raise BadCommand(f"command too large: {len(data)} bytes (limit {MAX_COMMAND_BYTES})")
    try:
        raw = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as exc:
        raise BadCommand(f"command is not msgpack: {exc}") from None
    if not isinstance(raw, dict):
        raise BadCommand("a command must be a map")
    return parse_command(raw)
