"""The WebSocket protocol: JSON messages both ways (docs/PROTOCOL.md "WebSocket", gateway/schemas/).

Client → server messages are validated here (:func:`parse_client_message`); a
message may carry a ``command_id`` (the gateway makes one when it is absent and
echoes it back on the ``update`` or ``rejected`` it causes).  A message that
names a ``player`` other than the token's subject is refused ``not_allowed``.

>>> parse_client_message('{"type": "Play", "text": "3 3", "expected_version": 7}', "alice").text
'3 3'
>>> parse_client_message('{"type": "Pass", "player": "bob"}', "alice")
Traceback (most recent call last):
...
gateway.protocol.ClientError: not_allowed: this socket speaks for alice, not for bob

Server → client messages are built by :func:`update`, :func:`rejected`, :func:`lobby`,
:func:`settled` and :func:`welcome` (plain dicts, ready for ``json.dumps``).
"""

from __future__ import annotations

import json
import uuid
from typing import Annotated, Any, Literal, Union, get_args

import orjson
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from engine.lobby.commands import AnyLobbyCommand
from engine.lobby.series_commands import AnySeriesCommand
from engine.match.commands import SAY_IDS, Command, readable_validation_error
from engine.rules.combo import Kind
from projections.views import brief_of_view

#: every kind of message a gateway sends a client (gateway/schemas/server.json's oneOf, the
#: ``kind`` label of ``shuangkou_gateway_messages_out_total``)
SERVER_KINDS: tuple[str, ...] = ("update", "rejected", "lobby", "settled", "welcome", "ack", "rating", "say",
                                 "private_table", "series")

#: a rank label in a command (engine.rules.cards.RANK_LABELS, and T for 10)
RankLabel = Literal["3", "4", "5", "6", "7", "8", "9", "10", "J", "Q", "K", "A", "2", "SJ", "BJ", "T"]

MAX_MESSAGE_BYTES = 16 * 1024
CLIENT_ID_MAX = 100

#: client message types that become an engine command for the socket's player
PLAYER_COMMAND_TYPES = frozenset({"Ready", "Play", "Pass", "RequestTrustee", "CancelTrustee", "Escape",
                                  "Leave", "Sync", "Say"})
#: the client messages of a private table's series (issue 39), sent on the lobby channel
SERIES_TYPES = ("CreateTable", "JoinTable", "CancelTable", "RequestEnd", "VoteEnd")
#: every client message type
CLIENT_TYPES = PLAYER_COMMAND_TYPES | {"Join", "Watch", "Auth", "Seen", *SERIES_TYPES}


def _type_names(union: Any) -> frozenset[str]:
    return frozenset(m.model_fields["type"].default for m in get_args(get_args(union)[0]))


#: the engine's commands (a match's, the lobby's, a series'): one a client may not send is
#: ``not_allowed`` (the operator's, the clocks', the process managers'); any other name is no
#: message at all, ``bad_command`` (docs/PROTOCOL.md, "Rejection codes")
ENGINE_TYPES = _type_names(Command) | _type_names(AnyLobbyCommand) | _type_names(AnySeriesCommand)

#: gateway-level rejection codes (the engine's own codes are in engine/match/errors.py)
BAD_COMMAND = "bad_command"
NOT_ALLOWED = "not_allowed"
NOT_SEATED = "not_seated"
UNKNOWN_MATCH = "unknown_match"
STALE = "stale"
UNKNOWN_ROOM = "unknown_room"
SEAT_REFUSED = "seat_refused"
RATE_LIMITED = "rate_limited"  # over the socket's message or Sync rate (gateway/guard.py), or a Say too soon
UNKNOWN_PHRASE = "unknown_phrase"  # a Say whose phrase is not one of the fixed ids (gateway/say.py)
#: the codes the gateway itself refuses with (the engine's are engine.match.errors' ``code``s);
#: the schemas' ``rejected.code`` enum is both (gateway/schemas_gen.py)
GATEWAY_CODES = (BAD_COMMAND, NOT_ALLOWED, NOT_SEATED, UNKNOWN_MATCH, STALE, UNKNOWN_ROOM, SEAT_REFUSED,
                 RATE_LIMITED, UNKNOWN_PHRASE)


class ClientError(ValueError):
    """A client message refused by the gateway itself (never forwarded to the engine)."""

    def __init__(self, code: str, reason: str, command_id: str | None = None):
        super().__init__(f"{code}: {reason}")
        self.code = code
        self.reason = reason
        self.command_id = command_id


class _Msg(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    command_id: str = Field(default_factory=lambda: uuid.uuid4().hex, min_length=1, max_length=CLIENT_ID_MAX)
    player: str | None = Field(None, description="optional; must be the token's subject")


class Auth(_Msg):
    type: Literal["Auth"]
    token: str = Field(min_length=1, max_length=4096)
    version: int | None = Field(None, ge=0, description="resume: the last match version this client saw")
    match: str | None = Field(None, min_length=1, max_length=200, description="resume: the match of that "
                              "version; another than the table's: the version is not applied (the current view)")


class Join(_Msg):
    type: Literal["Join"]
    room: str = Field(min_length=1, max_length=100)


class Watch(_Msg):
    type: Literal["Watch"]
    match: str = Field(min_length=1, max_length=200)


class Ready(_Msg):
    type: Literal["Ready"]
    client_seed: str | None = Field(None, max_length=1000, description="the player's entropy for the fair deal: "
                                    "1-64 printable characters (docs/FAIRNESS.md); the gateway fills in a random "
                                    "one when absent")


class Play(_Msg):
    type: Literal["Play"]
    cards: tuple[Annotated[int, Field(ge=0, le=107)], ...] | None = Field(None, min_length=1, max_length=27)
    text: str | None = Field(None, min_length=1, max_length=400)
    reading_kind: Kind | None = Field(None, description="which reading of the cards you mean, when they have "
                                      "several (e.g. 5 5 5 5 as a bomb)")
    reading_rank: RankLabel | None = Field(None, description="the top rank of the reading you mean (a rank label; "
                                           "T = 10)")
    expected_version: int | None = Field(None, ge=0)

    @model_validator(mode="after")
    def _one_of(self) -> Play:
        if (self.cards is None) == (self.text is None):
            raise ValueError("give exactly one of cards (ids) or text (card notation)")
        return self


class Pass(_Msg):
    type: Literal["Pass"]
    expected_version: int | None = Field(None, ge=0)


class RequestTrustee(_Msg):
    type: Literal["RequestTrustee"]


class CancelTrustee(_Msg):
    type: Literal["CancelTrustee"]


class Escape(_Msg):
    type: Literal["Escape"]


class Leave(_Msg):
    type: Literal["Leave"]


class Sync(_Msg):
    type: Literal["Sync"]
    version: int | None = Field(None, ge=0, description="resume: send every update after this version")
    match: str | None = Field(None, min_length=1, max_length=200, description="the match of that version; "
                              "another than the table's: the current view instead")


class Seen(_Msg):
    """The client read the updates of ``match`` up to ``version`` (docs/PROTOCOL.md §8 "Seen"):
    no answer; refused ``bad_command`` when this socket was sent no such version.  A clock
    whose update the gateway handed over, unacknowledged, just before it died then pauses."""

    type: Literal["Seen"]
    version: int = Field(ge=0, description="the highest update version of the match the client read")
    match: str | None = Field(None, min_length=1, max_length=200, description="the match of that update "
                              "(its ``match``); absent: the socket's current match")


class Say(_Msg):
    type: Literal["Say"]
    phrase: str = Field(min_length=1, max_length=40, description="a quick phrase or emote id (docs/PROTOCOL.md "
                        "§8 \"Quick phrases\"); any other is refused unknown_phrase",
                        json_schema_extra={"enum": list(SAY_IDS)})


class CreateTable(_Msg):
    """Open a private table (issue 39): answered ``private_table created`` with its code."""

    type: Literal["CreateTable"]
    room: str = Field(min_length=1, max_length=100)
    hands: Literal[4, 8, 16] = Field(description="the series' number of hands")
    spectators: bool = Field(False, description="others may watch")
    bots: bool = Field(False, description="a bot takes the empty seat when nobody joined in time")


class JoinTable(_Msg):
    """Take the second seat of a private table by its 6-character code (``/t/<code>``)."""

    type: Literal["JoinTable"]
    code: str = Field(min_length=6, max_length=6, pattern=r"^[A-Za-z0-9]{6}$")


class CancelTable(_Msg):
    """The owner cancels their private table before its first deal."""

    type: Literal["CancelTable"]


class RequestEnd(_Msg):
    """Ask to end the series early: a vote the other player answers (VoteEnd)."""

    type: Literal["RequestEnd"]


class VoteEnd(_Msg):
    """Answer the open vote to end the series."""

    type: Literal["VoteEnd"]
    agree: bool


ClientMessage = Annotated[
    Union[Auth, Join, Watch, Ready, Play, Pass, RequestTrustee, CancelTrustee, Escape, Leave, Sync, Say, Seen,
          CreateTable, JoinTable, CancelTable, RequestEnd, VoteEnd],
    Field(discriminator="type"),
]
_ADAPTER: TypeAdapter[Any] = TypeAdapter(ClientMessage)


def encodable(text: str) -> bool:
    """Is ``text`` valid Unicode text (no lone surrogate, which no UTF-8 frame can carry)?"""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _loose_id(data: Any) -> str | None:
    cid = data.get("command_id") if isinstance(data, dict) else None
    return cid if isinstance(cid, str) and 0 < len(cid) <= CLIENT_ID_MAX and encodable(cid) else None


def parse_client_message(raw: str | bytes, player: str, max_bytes: int = MAX_MESSAGE_BYTES) -> Any:
    """The validated message; :class:`ClientError` (``bad_command`` / ``not_allowed``) otherwise.

    ``player`` is the socket's token subject: a ``player`` field naming anyone else is
    refused ``not_allowed`` (impersonation), before anything else is looked at.  ``max_bytes``:
    ``gateway --max-message-bytes`` (the transport closes a larger frame 1009 unread; this
    catches a text whose characters fit but whose UTF-8 does not)."""
    size = len(raw) if isinstance(raw, bytes) else len(raw.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise ClientError(BAD_COMMAND, f"message too large ({size} bytes, limit {max_bytes})")
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise ClientError(BAD_COMMAND, "not JSON") from None
    except RecursionError:  # nested deeper than the decoder goes: still just a bad message
        raise ClientError(BAD_COMMAND, "JSON nested too deeply") from None
    if not isinstance(data, dict):
        raise ClientError(BAD_COMMAND, "a message must be a JSON object")
    cid = _loose_id(data)
    if isinstance(data.get("command_id"), str) and not encodable(data["command_id"]):
        raise ClientError(BAD_COMMAND, "command_id must be valid Unicode text (a lone surrogate is not)")
    named = data.get("player")
    if named is not None and named != player:
        raise ClientError(NOT_ALLOWED, f"this socket speaks for {player}, not for {str(named)[:100]}", cid)
    for key in ("match_id", "seat"):  # engine fields a client may not set
        if key in data:
            raise ClientError(NOT_ALLOWED, f"{key!r} is set by the gateway, not by the client", cid)
    mtype = data.get("type")
    if mtype is None or not isinstance(mtype, str) or not mtype:  # malformed: bad_command
        raise ClientError(BAD_COMMAND, f'a message needs a "type": one of {", ".join(sorted(CLIENT_TYPES))}', cid)
    if mtype not in CLIENT_TYPES:
        what = "a message a client may send" if mtype in ENGINE_TYPES else "a message"
        raise ClientError(NOT_ALLOWED if mtype in ENGINE_TYPES else BAD_COMMAND,
                          f"{mtype[:40]!r} is not {what} (one of {', '.join(sorted(CLIENT_TYPES))})", cid)
    try:
        return _ADAPTER.validate_python(data)
    except ValidationError as exc:  # "field: message" for each problem, no URL, no input echoed
        raise ClientError(BAD_COMMAND, readable_validation_error(exc, skip=1), cid) from None


# -- server → client -------------------------------------------------------------------------
def encode(message: dict[str, Any]) -> str:
    """A server message as one compact JSON text (orjson: a third of the standard library's
    CPU per frame; the standard library for what orjson refuses, an int beyond 64 bits).

    >>> encode({"kind": "lobby", "state": "queued", "room": "新手", "n": [1, None, True]})
    '{"kind":"lobby","state":"queued","room":"新手","n":[1,null,true]}'
    >>> encode({"big": 2 ** 70})
    '{"big":1180591620717411303424}'
    """
    try:
        return orjson.dumps(message, option=orjson.OPT_NON_STR_KEYS).decode("utf-8")
    except TypeError:  # orjson.JSONEncodeError
        return json.dumps(message, separators=(",", ":"), ensure_ascii=False)


def update(match: str, version: int, events: list[dict[str, Any]], view: dict[str, Any] | None,
           command_id: str | None = None, brief: dict[str, Any] | None = None) -> dict[str, Any]:
    """An ``update``: every event carries the update's own ``command_id`` (the client's, or
    null: never the engine's internal id); ``brief`` from the engine, else read off the view."""
    if brief is None and view is not None:
        brief = brief_of_view(view, version)
    return {"kind": "update", "match": match, "version": version, "command_id": command_id,
            "events": [{**e, "command_id": command_id} for e in events], "view": view, "brief": brief}


def rejected(command_id: str | None, code: str, reason: str, view: dict[str, Any] | None = None,
             match: str | None = None, retry_after_ms: int | None = None) -> dict[str, Any]:
    """A refusal; ``retry_after_ms`` only with the lobby's ``cooldown`` (when a Join is accepted again)."""
    out: dict[str, Any] = {"kind": "rejected", "command_id": command_id, "code": code, "reason": reason,
                           "view": view, "match": match}
    if retry_after_ms is not None:
        out["retry_after_ms"] = int(retry_after_ms)
    return out


def ack(command_id: str) -> dict[str, Any]:
    """The answer to a command the engine accepted with no change (a Ready from a player already
    ready, or after the deal: docs/PROTOCOL.md §8), to a Sync with a version once the
    updates after it went out, and to a command sent again whose update the client already
    has (a view covered it).

    >>> ack("r1")
    {'kind': 'ack', 'command_id': 'r1'}
    """
    return {"kind": "ack", "command_id": command_id}


def lobby(state: str, room: str | None, table: str | None = None, match: str | None = None,
          reason: str | None = None, bot_level: str | None = None,
          command_id: str | None = None) -> dict[str, Any]:
    """Where the player is; ``bot_level``: the level of a bot opponent at the table
    (``easy`` / ``normal`` / ``hard``, docs/BOTS.md), None when the opponent is a person;
    ``command_id``: the player's Join, Leave or Sync (not at a table) that caused the message, else None."""
    return {"kind": "lobby", "state": state, "room": room, "table": table, "match": match, "reason": reason,
            "bot_level": bot_level, "command_id": command_id}


def say(match: str, player: str, phrase: str, command_id: str | None = None) -> dict[str, Any]:
    """A quick phrase or emote said at the table (to both players and the spectators);
    ``command_id``: the sender's own Say's, on the sender's copy only, else None.

    >>> say("m1", "alice", "thanks")
    {'kind': 'say', 'match': 'm1', 'player': 'alice', 'phrase': 'thanks', 'command_id': None}
    """
    return {"kind": "say", "match": match, "player": player, "phrase": phrase, "command_id": command_id}


def settled(match: str, scores: dict[str, int], breakdown: dict[str, Any],
            balances: dict[str, int]) -> dict[str, Any]:
    return {"kind": "settled", "match": match, "scores": scores, "breakdown": breakdown, "balances": balances}


def welcome(player: str, role: str, room: str | None, gateway: str, expires_at: int | None = None,
            name: str | None = None, renewed: bool = False, limits: Any = None) -> dict[str, Any]:
    """The token was accepted (``renewed``: a renewal on an open socket); the socket closes 4401
    at ``expires_at`` (the token's exp, seconds since the epoch) unless renewed before.
    ``name``: the token's display name (gateway/names.py), None without one.  ``limits``
    (:class:`gateway.limits.Limits`, the defaults when None): the rates in force, ``rate``
    messages a second with a ``burst``, ``sync_rate`` Syncs a second, so a client paces itself."""
    from gateway.limits import Limits

    lim = limits if limits is not None else Limits()
    return {"kind": "welcome", "player": player, "role": role, "room": room, "gateway": gateway, "name": name,
            "expires_at": expires_at, "renewed": renewed, "rate": lim.rate, "burst": lim.burst,
            "sync_rate": lim.sync_rate}
