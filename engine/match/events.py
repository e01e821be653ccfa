"""The event catalogue of a match (docs/ARCHITECTURE.md "Event sourcing") and its msgpack codec.

Every event is a frozen pydantic model with a ``type`` tag and the envelope
fields ``match_id``, ``seq`` (1, 2, 3… within the match), ``ts`` (milliseconds
since the epoch, read from the decide context — never from a clock here),
``command_id`` (the command that caused it) and ``v`` (schema version).

>>> e = PlayerReady(match_id="m1", seq=3, ts=1000, command_id="c3", player="a")
>>> decode_event(encode_event(e)) == e
True
"""

from __future__ import annotations

from collections.abc import Iterable
from types import UnionType
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import msgpack
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from engine.rules.combo import Combo

SCHEMA_VERSION = 1

Actor = Literal["player", "timeout", "trustee"]
PassActor = Literal["player", "auto", "timeout", "trustee"]
TrusteeReason = Literal["timeouts", "requested", "disconnect", "escape"]
TrusteeEndReason = Literal["cancelled", "reconnected"]
Kou = Literal["flat", "single", "double", "escape"]


class EventBase(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    match_id: str
    seq: int = Field(ge=1)
    ts: int = Field(ge=0, description="milliseconds since the epoch, from the decide context")
    command_id: str
    v: int = SCHEMA_VERSION


class Reading(BaseModel):
    """A :class:`engine.rules.combo.Combo` as event data (the reading chosen for a play)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: str
    top: int
    size: int
    counts: tuple[int, ...]
    xiang: int | None = None
    chain: int | None = None
    m: int | None = None
    regular: bool | None = None
    jokers_as: tuple[int, ...] = ()
    bomb_sizes: tuple[int, ...] = ()

    @classmethod
    def of(cls, c: Combo) -> Reading:
        return cls(kind=c.kind, top=c.top, size=c.size, counts=c.counts, xiang=c.xiang,
                   chain=c.chain, m=c.m, regular=c.regular, jokers_as=c.jokers_as,
                   bomb_sizes=c.bomb_sizes)

    def combo(self) -> Combo:
        return Combo(kind=self.kind, top=self.top, size=self.size, counts=tuple(self.counts),  # type: ignore[arg-type]
                     xiang=self.xiang, chain=self.chain, m=self.m, regular=self.regular,
                     jokers_as=tuple(self.jokers_as), bomb_sizes=tuple(self.bomb_sizes))


class MatchCreated(EventBase):
    """First event: the full room config the match runs under (R-11.3) and, for a fair
    match (docs/FAIRNESS.md), the commitment to its server seed.

    ``commitment`` = SHA-256(server_seed ‖ UTF-8(match_id)), 64 hex digits: public, in
    every player's and spectator's view (``fair.commitment``) before any card is dealt.
    ``server_seed`` (64 hex digits) is PRIVATE: stored with the match so that any
    service replica can deal after a restart, dropped from everything sent to players
    (:func:`public_event_dict`), revealed by MatchFinished.  Both None in matches
    created before fair deals.
    """

    type: Literal["MatchCreated"] = "MatchCreated"
    config: dict[str, Any]
    commitment: str | None = Field(None, min_length=64, max_length=64)
    server_seed: str | None = Field(None, min_length=64, max_length=64, repr=False,
                                    description="PRIVATE until MatchFinished reveals it")


class PlayerSeated(EventBase):
    type: Literal["PlayerSeated"] = "PlayerSeated"
    player: str
    seat: int = Field(ge=0, le=1)
    balance: int = Field(description="points or coins held when seated (the room's mode)")
    level: int
    base: int = Field(description="the base score X of the player's level (R-11)")


class PlayerReady(EventBase):
    type: Literal["PlayerReady"] = "PlayerReady"
    player: str
    client_seed: str | None = Field(None, description="the player's entropy for a fair deal "
                                    "(docs/FAIRNESS.md); None in matches without a commitment")


class PlayerRemoved(EventBase):
    """A seated player leaves before the deal: not ready in time (R-13.2), by request, ready
    but alone when the ready clock ran out (``no_opponent``: the other Sit never came), or
    because the table closed before the deal (``table_closed``: the other player left)."""

    type: Literal["PlayerRemoved"] = "PlayerRemoved"
    player: str
    reason: Literal["not_ready", "left", "no_opponent", "table_closed"]


class HandDealt(EventBase):
    """Both hands, the 54 set-aside cards, the lead card and the first player (R-1.3, R-1.4)."""

    type: Literal["HandDealt"] = "HandDealt"
    hands: tuple[tuple[int, ...], tuple[int, ...]]
    set_aside: tuple[int, ...]
    lead_card: int | None = Field(description="the physical card that picked the leader; None for a fixed deal naming the leader")
    first: int = Field(ge=0, le=1, description="seat that leads the first trick")
    client_seeds: tuple[str, str] | None = Field(None, description="the client seeds of seats 0 and 1 "
                                                 "a fair deal was computed from; None for a fixed deal "
                                                 "or a match without a commitment")


class CardsPlayed(EventBase):
    type: Literal["CardsPlayed"] = "CardsPlayed"
    player: str
    cards: tuple[int, ...]
    reading: Reading
    by: Actor = "player"


class Passed(EventBase):
    type: Literal["Passed"] = "Passed"
    player: str
    by: PassActor = "player"


class TurnTimedOut(EventBase):
    """R-13.1: the turn clock ran out; ``count`` is this player's running total."""

    type: Literal["TurnTimedOut"] = "TurnTimedOut"
    player: str
    count: int = Field(ge=1)
    notice_zh: str
    notice_en: str


class TrusteeshipStarted(EventBase):
    type: Literal["TrusteeshipStarted"] = "TrusteeshipStarted"
    player: str
    reason: TrusteeReason


class TrusteeshipEnded(EventBase):
    type: Literal["TrusteeshipEnded"] = "TrusteeshipEnded"
    player: str
    reason: TrusteeEndReason


class PlayerDisconnected(EventBase):
    type: Literal["PlayerDisconnected"] = "PlayerDisconnected"
    player: str


class PlayerReconnected(EventBase):
    type: Literal["PlayerReconnected"] = "PlayerReconnected"
    player: str


class PlayerEscaped(EventBase):
    """R-12: the player left a running match; ``policy`` is the room's escape policy."""

    type: Literal["PlayerEscaped"] = "PlayerEscaped"
    player: str
    policy: Literal["trustee", "forfeit"]


class ClockExtended(EventBase):
    """The running turn or ready clock moved ``by_ms`` later (issue 35 §4): the player could
    not have acted meanwhile (``unpublished``: their update reached their stream late;
    ``undelivered``: no gateway handed it to their socket in time, their gateway was down;
    ``unconfirmed``: the match's writes could not be confirmed on the replicas;
    ``unhandled``: their command reached the inbox in time, the command service had not taken it)."""

    type: Literal["ClockExtended"] = "ClockExtended"
    kind: Literal["turn", "ready"]
    by_ms: int = Field(ge=1)
    reason: Literal["unpublished", "undelivered", "unconfirmed", "unhandled"]


class MatchFinished(EventBase):
    """The match is over: a hand emptied (R-6.3) or an escape forfeit (R-12.1)."""

    type: Literal["MatchFinished"] = "MatchFinished"
    winner: str
    loser: str
    cards_left: dict[str, int]
    kou: Kou
    reason: Literal["out", "escape"]
    server_seed: str | None = Field(None, description="the revealed server seed (hex) of a match "
                                    "with a commitment; None before fair deals")


class MatchAbandoned(EventBase):
    """The match ends before any card was dealt (R-13.2): nothing to settle, no ledger entry.

    ``reason``: ``not_ready`` (the ready timer ran out and removed who was not ready),
    ``left`` (the last seated player left) or ``seat_empty`` (the ready timer ran out with a
    seat nobody took).  The other terminal event beside :class:`MatchFinished`.
    """

    type: Literal["MatchAbandoned"] = "MatchAbandoned"
    reason: Literal["not_ready", "left", "seat_empty"]


Event = Annotated[
    Union[
        MatchCreated, PlayerSeated, PlayerReady, PlayerRemoved, HandDealt, CardsPlayed, Passed,
        TurnTimedOut, TrusteeshipStarted, TrusteeshipEnded, PlayerDisconnected,
        PlayerReconnected, PlayerEscaped, MatchFinished, MatchAbandoned, ClockExtended,
    ],
    Field(discriminator="type"),
]
EVENT_TYPES: tuple[type[EventBase], ...] = (
    MatchCreated, PlayerSeated, PlayerReady, PlayerRemoved, HandDealt, CardsPlayed,
    Passed, TurnTimedOut, TrusteeshipStarted, TrusteeshipEnded, PlayerDisconnected,
    PlayerReconnected, PlayerEscaped, MatchFinished, MatchAbandoned, ClockExtended,
)
_EVENT_ADAPTER: TypeAdapter[Any] = TypeAdapter(Event)


#: a match's moves, clock and connection changes (before the deal too): nothing that follows
#: the feeds acts on them (the lobby hears of a match's readiness, deal and end, the
#: projections and the integrity scan of its finish)
UNANNOUNCED: tuple[type[EventBase], ...] = (
    CardsPlayed, Passed, TurnTimedOut, TrusteeshipStarted, TrusteeshipEnded, PlayerDisconnected,
    PlayerReconnected, ClockExtended,
)


def announced(events: Iterable[EventBase]) -> bool:
    """Whether an append of ``events`` gets an entry on its bucket's feed: when one of them
    at least is not in :data:`UNANNOUNCED` (an event type added later is announced).

    >>> announced([Passed(match_id="m", seq=9, ts=0, command_id="c", player="a")])
    False
    >>> announced([PlayerReady(match_id="m", seq=3, ts=0, command_id="c", player="a")])
    True
    >>> announced([])
    False
    """
    return any(not isinstance(e, UNANNOUNCED) for e in events)


class EventDecodeError(ValueError):
    """Stored bytes are not a valid event of a known schema version."""


#: fields that are stored with the match but never sent to a player or a spectator
PRIVATE_FIELDS: dict[str, tuple[str, ...]] = {"MatchCreated": ("server_seed",)}


def room_of(events: Iterable[Any]) -> str | None:
    """The room a match was created in: its MatchCreated config's name (None without one).

    >>> room_of([MatchCreated(match_id="m", seq=1, ts=0, command_id="c", config={"name": "quick"})])
    'quick'
    """
    for e in events:
        if isinstance(e, MatchCreated):
            name = e.config.get("name")
            return name if isinstance(name, str) and name else None
    return None


def _plain(annotation: Any) -> bool:
    """Whether a field of this type holds an immutable plain value: str, int, bool, None, a
    literal, a union or a tuple of those (what pydantic's dump gives back as it is).

    >>> _plain(tuple[int, ...]), _plain(int | None), _plain(dict[str, int]), _plain(Reading)
    (True, True, False, False)
    """
    if annotation in (str, int, bool, type(None)):
        return True
    origin = get_origin(annotation)
    if origin is Literal:
        return True
    if origin in (Union, UnionType, tuple):
        return all(a is Ellipsis or _plain(a) for a in get_args(annotation))
    return False


def _nested_models(cls: type[BaseModel]) -> tuple[str, ...] | None:
    """How an instance of ``cls`` is copied without the serializer: the names of its fields
    that hold a model whose own fields are all plain (each copied the same way), every other
    field plain (:func:`_plain`); None when a field is neither (the dump builds its dict)."""
    nested: list[str] = []
    for name, f in cls.model_fields.items():
        kind = f.annotation
        if isinstance(kind, type) and issubclass(kind, BaseModel) and _nested_models(kind) == ():
            nested.append(name)
        elif not _plain(kind):
            return None
    return tuple(nested)


#: per event type copied without the serializer (:func:`_nested_models`): its fields that hold
#: a model; a type not here (a dict or a list among its fields) goes through the dump
_COPIED: dict[type[EventBase], tuple[str, ...]] = {
    cls: nested for cls in EVENT_TYPES if (nested := _nested_models(cls)) is not None}


def event_to_dict(event: EventBase) -> dict[str, Any]:
    """Every field of the event (storage, operator tools); players get :func:`public_event_dict`.
    The same dict as pydantic's ``model_dump`` (its keys in the same order), a new one each call.

    >>> e = CardsPlayed(match_id="m", seq=9, ts=0, command_id="c", player="a", cards=(5,),
    ...                 reading=Reading(kind="single", top=5, size=1, counts=(1,)))
    >>> event_to_dict(e) == e.model_dump() and event_to_dict(e)["reading"]["top"]
    5
    """
    nested = _COPIED.get(type(event))
    if nested is not None:
        data = dict(event.__dict__)
        for name in nested:
            data[name] = dict(data[name].__dict__)
        return data
    return event.model_dump(mode="python")


def public_event_dict(event: EventBase) -> dict[str, Any]:
    """The event without its private fields (``PRIVATE_FIELDS``): what may leave the engine.

    >>> e = MatchCreated(match_id="m", seq=1, ts=0, command_id="c", config={},
    ...                  commitment="a" * 64, server_seed="b" * 64)
    >>> "server_seed" in public_event_dict(e)
    False
    """
    data = event_to_dict(event)
    for name in PRIVATE_FIELDS.get(str(data.get("type")), ()):
        data.pop(name, None)
    return data


def event_from_dict(data: dict[str, Any]) -> EventBase:
    v = data.get("v", SCHEMA_VERSION)
    if v != SCHEMA_VERSION:
        raise EventDecodeError(f"event schema version {v} is not supported (this build reads {SCHEMA_VERSION})")
    try:
        return _EVENT_ADAPTER.validate_python(data)  # type: ignore[no-any-return]
    except Exception as exc:  # pydantic.ValidationError and friends
        raise EventDecodeError(f"not a valid event: {exc}") from None


def encode_event(event: EventBase) -> bytes:
    """msgpack bytes of an event (round-trips through :func:`decode_event`)."""
    return msgpack.packb(event_to_dict(event), use_bin_type=True)  # type: ignore[no-any-return]


def decode_event(data: bytes) -> EventBase:
    try:
        raw = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as exc:
        raise EventDecodeError(f"not msgpack: {exc}") from None
    if not isinstance(raw, dict):
        raise EventDecodeError("an event must be a map")
    return event_from_dict(raw)
