"""Writes the JSON Schemas of the WebSocket protocol into ``gateway/schemas/``.

* ``client.json`` — every client → server message (from :mod:`gateway.protocol`'s models);
* ``server.json`` — every server → client message (update, rejected, lobby, settled, welcome),
  with the view and the events inlined under ``$defs`` (one self-contained file);
* ``view.json`` — a player's or a spectator's view of a match (projections/views.py);
* ``events.json`` — every event as a player or spectator receives it (engine/match/events.py,
  redacted by ``projections.views.redact_event``).

and ``gateway/static/js/client.d.ts``, the TypeScript types of client.js (:func:`typescript`).

They are JSON Schema 2020-12 documents that compile in ajv's default strict mode: tagged unions
are ``oneOf`` over ``const`` tags (no OpenAPI ``discriminator``), enumerations are ``enum``,
and every property has a type and a description (:data:`FIELD_DOCS`: generation fails on a
field nobody described).  The files are generated from the models, committed, and checked
against a fresh generation by tests/test_schemas.py; regenerate after changing a message, a
view or an event::

    python -m gateway.schemas_gen
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, get_args

from pydantic import TypeAdapter

from engine.service.lobby_notes import LOBBY_REASONS
from projections.ratings import TIERS

TIER_IDS = tuple(t for t, _ in TIERS)

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"
TYPES_FILE = Path(__file__).resolve().parent / "static" / "js" / "client.d.ts"
DRAFT = "https://json-schema.org/draft/2020-12/schema"

_NULLABLE_STR = {"type": ["string", "null"]}
_INT = {"type": "integer"}
_CAUSE = ("the command that caused it: your own command_id when your command did, else null "
          "(the same as the update's command_id)")
_NAT = {"type": "integer", "minimum": 0}
_CARD = {"type": "integer", "minimum": 0, "maximum": 107}
def _phases() -> list[str]:
    from typing import get_args

    from engine.match.state import Phase

    return list(get_args(Phase))


#: a match's phases (engine.match.state.Phase): new, seating, playing, finished, abandoned
_PHASES = _phases()


def _move_defs(schema: dict[str, Any], prefix: str = "") -> tuple[dict[str, Any], dict[str, Any]]:
    """Split pydantic's ``$defs`` off a schema (refs rewritten to ``#/$defs/<prefix><name>``)."""
    defs = schema.pop("$defs", {})
    text = json.dumps(schema)
    dtext = json.dumps(defs)
    for name in defs:
        text = text.replace(f'"#/$defs/{name}"', f'"#/$defs/{prefix}{name}"')
        dtext = dtext.replace(f'"#/$defs/{name}"', f'"#/$defs/{prefix}{name}"')
    return json.loads(text), {prefix + k: v for k, v in json.loads(dtext).items()}


def _standard(node: Any) -> Any:
    """``node`` without what is not JSON Schema 2020-12: the OpenAPI ``discriminator`` (the
    unions are ``oneOf`` over ``const`` tags, which every validator understands)."""
    if isinstance(node, dict):
        return {k: _standard(v) for k, v in node.items() if k != "discriminator"}
    if isinstance(node, list):
        return [_standard(v) for v in node]
    return node


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    return {"anyOf": [schema, {"type": "null"}]}


def _obj(props: dict[str, Any], required: list[str] | None = None, title: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "additionalProperties": False,
                           "required": sorted(props) if required is None else sorted(required), "properties": props}
    if title:
        out["title"] = title
    return out


def _describe(node: Any, owner: str) -> None:
    """Give every property under ``node`` its description (gateway/schema_docs.py); raises
    ``KeyError`` naming a property nobody described.  ``owner``: the $defs name or the path."""
    from gateway.schema_docs import describe

    if isinstance(node, list):
        for v in node:
            _describe(v, owner)
        return
    if not isinstance(node, dict):
        return
    props = node.get("properties") or {}
    for name, prop in list(props.items()):
        if "description" not in prop:
            text = describe(owner, name)
            if text is None:
                raise KeyError(f"no description for {owner}.{name} (gateway/schema_docs.py)")
            props[name] = prop = {**prop, "description": text}  # a copy: the building blocks are shared
        _describe(prop, f"{owner}.{name}")
    for key in ("anyOf", "oneOf", "allOf", "items", "additionalProperties"):
        if key in node:
            _describe(node[key], owner)


def combo_reading_schema() -> dict[str, Any]:
    """A reading as views and briefs show it (``engine.rules.combo.Combo.to_json``)."""
    from engine.rules.cards import RANK_LABELS
    from engine.rules.combo import Kind

    return _obj({
        "kind": {"enum": list(get_args(Kind)), "description": "the combination (docs/PROTOCOL.md \"Readings\")"},
        "rank": {"enum": list(RANK_LABELS)},
        "size": {"type": "integer", "minimum": 1},
        "xiang": {"type": ["integer", "null"]}, "chain": {"type": ["integer", "null"]},
        "regular": {"type": ["boolean", "null"]}, "m": {"type": ["integer", "null"]},
        "bomb_sizes": _nullable({"type": "array", "items": _INT}),
        "jokers_as": {"type": "array", "items": {"enum": list(RANK_LABELS)}},
    }, title="A reading: what combination the cards were played as")


def play_reading_schema() -> dict[str, Any]:
    """The short reading of a play in ``view.history`` and ``brief.trick_plays``
    (``projections.views.play_reading``)."""
    from engine.rules.cards import RANK_LABELS
    from engine.rules.combo import Kind

    return _obj({
        "kind": {"enum": list(get_args(Kind)), "description": "the combination (docs/PROTOCOL.md \"Readings\")"},
        "rank": {"enum": list(RANK_LABELS)}, "xiang": {"type": ["integer", "null"]},
    }, title="A play's short reading: its kind, top rank and xiang (null unless a bomb)")


def _play(with_trick: bool) -> dict[str, Any]:
    props: dict[str, Any] = {"player": {"type": "string"}, "cards": {"type": "array", "items": _CARD, "minItems": 1},
                             "reading": {"$ref": "#/$defs/play_reading"}}
    if with_trick:
        props = {"trick": _NAT, **props}
    return _obj(props)


def client_schema() -> dict[str, Any]:
    from gateway.protocol import ClientMessage

    schema = TypeAdapter(ClientMessage).json_schema(mode="validation")
    body, defs = _move_defs(schema)
    for name, d in defs.items():
        _describe(d, name)
    return _standard({"$schema": DRAFT, "$id": "client.json", "title": "A client → server WebSocket message",
                      **body, "$defs": defs})


def events_schema() -> dict[str, Any]:
    from engine.config import RoomConfig
    from engine.match.events import PRIVATE_FIELDS, Event
    from engine.rules.combo import Kind

    schema = TypeAdapter(Event).json_schema(mode="serialization")
    body, defs = _move_defs(schema, "event_")
    config, config_defs = _move_defs(TypeAdapter(RoomConfig).json_schema(mode="serialization"), "config_")
    defs.update(config_defs)
    defs["config_RoomConfig"] = config
    defs["event_MatchCreated"]["properties"]["config"] = {"$ref": "#/$defs/config_RoomConfig"}
    hd = defs["event_HandDealt"]["properties"]
    # what a receiver gets (projections.views.redact_event): its own hand at its seat, null elsewhere
    hd["hands"] = {"type": "array", "minItems": 2, "maxItems": 2,
                   "items": {"anyOf": [{"type": "array", "items": _CARD}, {"type": "null"}]}}
    hd["set_aside"] = {"type": "null"}
    hd["lead_card"] = _nullable(_CARD)
    hd["hand_sizes"] = {"type": "array", "items": _NAT, "minItems": 2, "maxItems": 2}
    hd["set_aside_count"] = _NAT
    cp = defs["event_CardsPlayed"]["properties"]
    cp["cards"] = {"type": "array", "items": _CARD, "minItems": 1}
    reading = defs["event_Reading"]
    reading["title"] = "A reading as events carry it (engine.match.events.Reading)"
    reading["properties"]["kind"] = {"enum": list(get_args(Kind)),
                                     "description": "the combination (docs/PROTOCOL.md \"Readings\")"}
    reading["properties"]["top"] = {"type": "integer", "minimum": 0, "maximum": 14}
    reading["properties"]["counts"] = {"type": "array", "items": _NAT, "minItems": 15, "maxItems": 15}
    reading["properties"]["jokers_as"] = {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 14},
                                          "description": "the rank indices the wild jokers stand for (財神, R-4)"}
    # fair deals (docs/FAIRNESS.md): MatchCreated's server seed is private and never on the wire
    # (engine.match.events.PRIVATE_FIELDS); the commitment and the reveal are
    for type_name, private in PRIVATE_FIELDS.items():
        for name in private:
            defs[f"event_{type_name}"]["properties"].pop(name, None)
    for name, d in defs.items():  # the id of the command that caused it, as the update's (docs/PROTOCOL.md §8)
        if name.startswith("event_") and "command_id" in d.get("properties", {}):
            d["properties"]["command_id"] = {**_NULLABLE_STR, "description": _CAUSE}
    for name, d in defs.items():  # every field is present on the wire
        if name.startswith("event_") and d.get("type") == "object" and "properties" in d:
            d["required"] = sorted(d["properties"])
    # the balance is the seated player's own: the opponent and spectators get the event without it
    defs["event_PlayerSeated"]["properties"]["balance"] = {
        **_INT, "description": "points or coins the player held when seated: only in the seated player's own "
                               "copy of the event (absent in the opponent's and spectators')"}
    defs["event_PlayerSeated"]["required"].remove("balance")
    for name, d in defs.items():
        _describe(d, name)
    return _standard({"$schema": DRAFT, "$id": "events.json",
                      "title": "A match event as a player or spectator receives it", **body, "$defs": defs})


def view_schema() -> dict[str, Any]:
    from engine.match.events import TrusteeReason

    seat = _obj({"seat": {"type": "integer", "minimum": 0, "maximum": 1}, "player": {"type": "string"},
                 "level": _NAT, "base": _NAT, "ready": {"type": "boolean"},
                 "cards_left": _NAT, "timeouts": _NAT,
                 "trustee": {"enum": [*get_args(TrusteeReason), None]}, "connected": {"type": "boolean"},
                 "escaped": {"type": "boolean"}, "plays": _NAT,
                 "bombs": {"type": "array", "items": {"type": "string"}}})
    props: dict[str, Any] = {
        "match_id": {"type": "string"}, "version": _NAT,
        "phase": {"enum": _PHASES},
        "mode": {"enum": ["points", "wealth", None]},
        "you": _NULLABLE_STR,
        "seats": {"type": "array", "maxItems": 2, "items": {"anyOf": [seat, {"type": "null"}]}},
        "turn": _NULLABLE_STR, "your_turn": {"type": "boolean"}, "leading": {"type": "boolean"},
        "trick": _NAT, "table_count": _NAT, "table": {"type": "string"},
        "table_ids": {"type": "array", "items": _CARD},
        "last_play": _nullable(_obj({
            "player": {"type": "string"}, "cards": {"type": "array", "items": _CARD}, "text": {"type": "string"},
            "reading": {"$ref": "#/$defs/reading"}, "describe": {"type": "string"}})),
        "deadline": _nullable(_obj({"at_ms": _INT, "kind": {"enum": ["turn", "trustee", "ready"]},
                                    "version": _NAT})),
        "contribution": {"type": "object", "additionalProperties": _obj({
            "xiang": {"type": ["integer", "null"]}, "source": {"type": "string"}, "c": _INT, "net": _INT})},
        "hand": _nullable(_obj({"ids": {"type": "array", "items": _CARD}, "text": {"type": "string"}})),
        "opponent": _nullable(_obj({"player": {"type": "string"}, "cards_left": _NAT})),
        "fair": _nullable(_obj({  # docs/FAIRNESS.md; null before fair deals
            "commitment": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
            "client_seeds": _nullable({"type": "array", "minItems": 2, "maxItems": 2, "items": {"type": "string"}}),
            "server_seed": _nullable({"type": "string", "pattern": "^[0-9a-f]{64}$"})})),
        "result": _nullable(_obj({
            "winner": {"type": "string"}, "loser": {"type": "string"},
            "kou": {"enum": ["flat", "single", "double", "escape"]},
            "reason": {"enum": ["out", "escape"]},
            "cards_left": {"type": "object", "additionalProperties": _NAT}})),
        "history": {"type": "array", "items": _play(True)},
    }
    # a view from an engine before the history (issue 36) has none
    required = sorted(k for k in props if k not in ("opponent", "history"))
    out = {"$schema": DRAFT, "$id": "view.json",
           "title": "A player's view of a match (a spectator's: you null, hand null, no opponent key)",
           **_obj(props, required), "$defs": {"reading": combo_reading_schema(),
                                              "play_reading": play_reading_schema()}}
    _describe(out, "view")
    _describe(out["$defs"]["reading"], "reading")
    _describe(out["$defs"]["play_reading"], "play_reading")
    return out


def brief_schema() -> dict[str, Any]:
    """The ``brief`` of every update (projections.views.brief, docs/PROTOCOL.md §8)."""
    out = _obj({
        "version": _NAT, "phase": {"enum": _PHASES}, "turn": _NULLABLE_STR, "trick": _NAT,
        "last_play": _nullable(_obj({"player": {"type": "string"}, "cards": {"type": "array", "items": _CARD},
                                     "reading": {"$ref": "#/$defs/reading"}})),
        "deadline_ms": {"type": ["integer", "null"]},
        "cards_left": {"type": "object", "additionalProperties": _NAT},
        "hand": _nullable({"type": "array", "items": _CARD}),
        "trick_plays": {"type": "array", "items": _play(False)},
    }, title="What the table shows now: render from the newest brief without folding events")
    _describe(out, "brief")
    return out


def breakdown_schema() -> dict[str, Any]:
    """A settlement's breakdown as a player receives it (projections.settlement, ``breakdown_for``)."""
    level = _obj({"level": _NAT, "base": _NAT, "balance": _INT}, required=["level", "base"])
    common: dict[str, Any] = {
        "mode": {"enum": ["points", "wealth"]}, "room": {"type": "string"}, "X": _NAT,
        "X_from": _obj({"rule": {"type": "string"}, "lower": {"type": "string"},
                        "levels": {"type": "object", "additionalProperties": level}}),
        "xiang": {"type": "object", "additionalProperties": _obj({
            "xiang": _NAT, "source": {"type": "string"}, "c": _NAT, "b": _NAT})},
        "c": {"type": "object", "additionalProperties": _NAT},
        "cap": _nullable(_obj({"rule": {"const": "R-11.2"}, "payer": {"type": "string"}, "balance": _INT,
                               "owed": _NAT, "paid": _NAT, "applied": {"type": "boolean"}},
                              required=["rule", "payer", "owed", "paid", "applied"])),
        "burned": _NAT,
    }
    normal = {**common, "kou": {"enum": ["flat", "single", "double"]}, "a": _NAT, "a_from": {"type": "string"},
              "b": _NAT, "b_from": {"type": "string"}, "win_term": _NAT, "win_formula": {"type": "string"},
              "contribution": {"type": "object", "additionalProperties": _INT},
              "contribution_formula": {"type": "string"},
              "escaped_to_trustee": {"type": "array", "items": {"type": "string"}}}
    esc_props = {"rule": {"type": "string"}, "penalty": _NAT, "penalty_formula": {"type": "string"},
                 "contribution": _NAT, "contribution_formula": {"type": "string"}, "doubling": _NAT,
                 "doubling_formula": {"type": "string"}, "escaper_contribution": _NAT, "formula": {"type": "string"},
                 "escaper": {"type": "string"}, "opponent": {"type": "string"}, "owed": _NAT, "paid": _NAT,
                 "transfer_ratio": {"type": "number", "minimum": 0, "maximum": 1}, "received": _NAT,
                 "received_formula": {"type": "string"}}
    optional = {"contribution_formula", "doubling_formula", "escaper_contribution"}
    escape = {**common, "escape": _obj(esc_props, required=[k for k in esc_props if k not in optional]),
              "c_note": {"type": "string"}}
    out = {"title": "How the scores were computed (docs/SETTLEMENT.md)", "oneOf": [
        _obj(normal, required=[k for k in normal if k != "escaped_to_trustee"], title="A match played out"),
        _obj(escape, title="A match ended by an escape (R-12.2, R-12.3)")]}
    _describe(out, "breakdown")
    return out


def rejection_codes() -> list[str]:
    """Every code a ``rejected`` may carry: the engine's (each :class:`Rejected`'s ``code``),
    the gateway's (:data:`gateway.protocol.GATEWAY_CODES`) and ``internal_error``."""
    import engine.lobby.errors  # noqa: F401 - the lobby's codes are in the hierarchy whatever was imported
    from engine.match.errors import Rejected
    from engine.service.publish import INTERNAL_ERROR
    from gateway.protocol import GATEWAY_CODES

    codes: set[str] = {INTERNAL_ERROR, *GATEWAY_CODES}
    todo: list[type[Rejected]] = [Rejected]
    while todo:
        cls = todo.pop()
        codes.add(cls.code)
        todo.extend(cls.__subclasses__())
    return sorted(codes)


def server_schema() -> dict[str, Any]:
    events = events_schema()
    view = view_schema()
    defs: dict[str, Any] = dict(events.pop("$defs"))
    events.pop("$schema"), events.pop("$id"), events.pop("title")
    defs["event"] = events
    view_defs = view.pop("$defs")
    defs["reading"] = view_defs["reading"]
    defs["play_reading"] = view_defs["play_reading"]
    view.pop("$schema"), view.pop("$id")
    defs["view"] = view
    defs["brief"] = brief_schema()
    defs["breakdown"] = breakdown_schema()
    nullable_view = _nullable({"$ref": "#/$defs/view"})

    def msg(kind: str, props: dict[str, Any], title: str) -> dict[str, Any]:
        out = _obj({"kind": {"const": kind}, **props}, title=title)
        _describe(out, kind)
        return out

    defs["update"] = msg("update", {
        "match": {"type": "string"}, "version": _NAT, "command_id": _NULLABLE_STR,
        "events": {"type": "array", "items": {"$ref": "#/$defs/event"}}, "view": nullable_view,
        "brief": {"$ref": "#/$defs/brief"}},
        "The match changed (events as you may see them; the brief always; the view on some updates)")
    defs["rejected"] = msg("rejected", {
        "command_id": _NULLABLE_STR, "code": {"enum": rejection_codes()}, "reason": {"type": "string"},
        "view": nullable_view, "match": _NULLABLE_STR, "retry_after_ms": _NAT},
        "Your command was refused; nothing changed")
    # the lobby's cooldown (issue 34) says when to Join again; no other refusal carries it
    defs["rejected"]["required"] = [k for k in defs["rejected"]["required"] if k != "retry_after_ms"]
    defs["lobby"] = msg("lobby", {
        "state": {"enum": ["queued", "seated", "removed"]}, "room": _NULLABLE_STR, "table": _NULLABLE_STR,
        "match": _NULLABLE_STR, "reason": _nullable({"enum": list(LOBBY_REASONS)}),
        "bot_level": {"enum": ["easy", "normal", "hard", "trustee", None]}, "command_id": _NULLABLE_STR},
        "Where you are in the lobby (bot_level: the level of a bot opponent, null for a person)")
    # the Join or Leave that caused it (issue 34): a gateway before it sends none
    defs["lobby"]["required"] = [k for k in defs["lobby"]["required"] if k != "command_id"]
    defs["settled"] = msg("settled", {
        "match": {"type": "string"}, "scores": {"type": "object", "additionalProperties": _INT},
        "breakdown": {"$ref": "#/$defs/breakdown"}, "balances": {"type": "object", "additionalProperties": _INT}},
        "A match of your table was settled: scores, breakdown, your balance from the ledger")
    defs["welcome"] = msg("welcome", {
        "player": {"type": "string"}, "role": {"enum": ["player", "spectator", "operator"]},
        "room": _NULLABLE_STR, "gateway": {"type": "string"},
        "name": {**_NULLABLE_STR, "description": "the token's display name (1-24 characters), null without one"},
        "expires_at": _INT, "renewed": {"type": "boolean"},
        "rate": {"type": "number", "exclusiveMinimum": 0}, "burst": {"type": "integer", "minimum": 1},
        "sync_rate": {"type": "number", "exclusiveMinimum": 0}},
        "The token was accepted (renewed: a renewal Auth on an open socket); the socket closes 4401 at expires_at "
        "(the token's exp, seconds since the epoch) unless renewed before")
    defs["ack"] = msg("ack", {"command_id": {"type": "string"}},
                      "Your command was accepted and changed nothing (a Ready from a player already ready, or after "
                      "the deal; a RequestEnd once the end is agreed; a JoinTable of the table you sit at)")
    # the display name is new (issue 25), the token's lifetime too (issue 23): a gateway before them
    # sends no "name", "expires_at", "renewed"
    # the rates in force are newer still (issue 36)
    defs["welcome"]["required"] = [k for k in defs["welcome"]["required"]
                                   if k not in ("name", "expires_at", "renewed", "rate", "burst", "sync_rate")]
    # display names (issue 25): the gateway adds them to the messages that name a table's players
    names = {"type": "object", "additionalProperties": {"type": "string", "minLength": 1, "maxLength": 24},
             "description": "player id -> display name, for the players that have one (gateway/names.py)"}
    for k in ("update", "lobby", "settled"):
        defs[k]["properties"]["names"] = names
    shown = _obj({"rating": _INT, "tier": {"enum": list(TIER_IDS)}}, title="A rating as shown")
    _describe(shown, "rating_shown")
    defs["rating"] = msg("rating", {
        "match": {"type": "string"}, "room": {"type": "string"}, "season": {"type": "string"},
        "before": shown, "after": copy.deepcopy(shown), "provisional": {"type": "boolean"}},
        "A settled match of a ranked room moved your rating (docs/RANKED.md)")
    from engine.match.commands import SAY_IDS

    defs["say"] = msg("say", {
        "match": {"type": "string"}, "player": {"type": "string"}, "phrase": {"enum": list(SAY_IDS)},
        "command_id": _NULLABLE_STR},
        "A quick phrase or emote said at the table (to both players and the spectators; not in the match log)")
    # private tables (issue 39): the owner's code, the series' vote, tally and standings
    totals = {"type": "object", "additionalProperties": _INT, "description": "player -> the sum of their scores"}
    summary = _obj({"series_id": {"type": "string"}, "hand": _NAT, "hands": {"enum": [4, 8, 16]},
                    "totals": totals}, title="A series' running totals after a hand")
    _describe(summary, "series_summary")
    defs["series_summary"] = summary
    defs["settled"]["properties"]["series"] = {"$ref": "#/$defs/series_summary", "description": "a private table's "
                                               "series after this hand: its running totals (issue 39)"}
    defs["settled"]["required"] = [k for k in defs["settled"]["required"] if k != "series"]
    defs["private_table"] = msg("private_table", {
        "state": {"enum": ["created"]}, "code": {"type": "string", "pattern": "^[A-Za-z0-9]{6}$"},
        "link": {"type": "string", "pattern": "^/t/[A-Za-z0-9]{6}$"}, "series_id": {"type": "string"},
        "hands": {"enum": [4, 8, 16]}, "command_id": _NULLABLE_STR},
        "Your private table is open: share its code or link (CreateTable's answer, and a reconnect's)")
    hand = _obj({"match": {"type": "string"}, "scores": totals}, title="One settled hand of a series")
    bomb = _obj({"player": _NULLABLE_STR, "xiang": _NAT, "match": _NULLABLE_STR, "hand": _nullable(_NAT),
                 "by_player": {"type": "object", "additionalProperties": _NAT}}, title="The series' biggest bomb")
    standings = _obj({"totals": totals, "per_hand": {"type": "array", "items": hand},
                      "hands_won": {"type": "object", "additionalProperties": _NAT}, "biggest_bomb": bomb},
                     title="The final standings of a series")
    _describe(standings, "standings")
    defs["standings"] = standings
    defs["series"] = msg("series", {
        "state": {"enum": ["vote", "vote_passed", "vote_refused", "finished", "tally"]},
        "series_id": {"type": "string"}, "command_id": _NULLABLE_STR,
        "by": {"type": "string", "description": "vote: who asked; vote_passed / vote_refused: who answered"},
        "deadline_ms": _NAT, "timed_out": {"type": "boolean", "description": "nobody answered: counts as agreed"},
        "reason": {"enum": ["completed", "dissolved", "escaped", "abandoned", "not_joined", "cancelled"]},
        "standings": {"$ref": "#/$defs/standings"}, "hand": _NAT, "hands": {"enum": [4, 8, 16]}, "totals": totals,
        "dissolving": {"type": "boolean", "description": "tally (a reconnect's): a vote to end passed during the "
                       "running hand; the series ends at its settlement"}},
        "A private table's series: a vote to end it, its outcome, the running tally (a reconnect's) or the final "
        "standings")
    defs["series"]["required"] = ["kind", "state", "series_id", "command_id"]
    from gateway.protocol import SERVER_KINDS

    kinds = list(SERVER_KINDS)
    return _standard({"$schema": DRAFT, "$id": "server.json", "title": "A server → client WebSocket message",
                      "oneOf": [{"$ref": f"#/$defs/{k}"} for k in kinds], "$defs": defs})


def generate() -> dict[str, dict[str, Any]]:
    return {"client.json": client_schema(), "server.json": server_schema(), "view.json": view_schema(),
            "events.json": events_schema()}


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False, sort_keys=True) + "\n"


def load(name: str) -> dict[str, Any]:
    return json.loads((SCHEMA_DIR / name).read_text(encoding="utf-8"))


# -- TypeScript ------------------------------------------------------------------------------------

def _ts_name(ref: str) -> str:
    name = ref.rsplit("/", 1)[-1]
    name = name.removeprefix("event_").removeprefix("config_")
    return "".join(part[:1].upper() + part[1:] for part in name.replace("-", "_").split("_"))


_TS_NAMES = {"event": "MatchEvent", "update": "UpdateMessage", "rejected": "RejectedMessage", "ack": "AckMessage",
             "lobby": "LobbyMessage", "settled": "SettledMessage", "welcome": "WelcomeMessage",
             "rating": "RatingMessage", "say": "SayMessage", "private_table": "PrivateTableMessage",
             "series": "SeriesMessage", "series_summary": "SeriesSummary", "standings": "Standings",
             "Reading": "EventReading", "reading": "Reading", "play_reading": "PlayReading", "view": "View",
             "brief": "Brief",
             "breakdown": "Breakdown"}


def _ts_ref(ref: str) -> str:
    name = ref.rsplit("/", 1)[-1]
    if name in _TS_NAMES:
        return _TS_NAMES[name]
    if name.startswith("event_") and name.removeprefix("event_") in _TS_NAMES:
        return _TS_NAMES[name.removeprefix("event_")]
    return _ts_name(ref) + ("Event" if name.startswith("event_") else "")


def _ts(node: Any, indent: str = "") -> str:
    """The TypeScript type of a schema node (the subset gateway/schemas uses)."""
    if not isinstance(node, dict) or not node:
        return "unknown"
    if "$ref" in node:
        return _ts_ref(node["$ref"])
    if "const" in node:
        return json.dumps(node["const"])
    if "enum" in node:
        return " | ".join(json.dumps(v) for v in node["enum"])
    for key in ("oneOf", "anyOf"):
        if key in node:
            return " | ".join(dict.fromkeys(_ts(v, indent) for v in node[key]))
    t = node.get("type")
    if isinstance(t, list):
        return " | ".join(_ts({**node, "type": x}, indent) for x in t)
    if t in ("integer", "number"):
        return "number"
    if t in ("string", "boolean", "null"):
        return str(t)
    if t == "array":
        item = _ts(node.get("items", {}), indent)
        return f"Array<{item}>"
    if t == "object":
        props = node.get("properties")
        if not props:
            extra = node.get("additionalProperties")
            return f"Record<string, {_ts(extra, indent) if isinstance(extra, dict) else 'unknown'}>"
        required = set(node.get("required", ()))
        inner = indent + "  "
        lines = ["{"]
        for name, prop in props.items():
            doc = prop.get("description")
            if doc:
                lines.append(f"{inner}/** {doc.replace('*/', '* /')} */")
            opt = "" if name in required else "?"
            lines.append(f"{inner}{name}{opt}: {_ts(prop, inner)};")
        lines.append(indent + "}")
        return "\n".join(lines)
    return "unknown"


_TS_CLIENT = """
/** A client message with its optional fields (command_id is made for you when absent). */
export type Command = ClientMessage;

export interface UpdateEvent { message: UpdateMessage; brief: Brief | null; view: View | null; events: MatchEvent[] }
export interface RejectedEvent { message: RejectedMessage; command: ClientMessage | null;
  code: RejectedMessage["code"]; reason: string }
export interface AckEvent { message: AckMessage; command: ClientMessage | null }
export interface RetryEvent { command: ClientMessage; tries: number; delay_ms: number }
export interface ClosedEvent { code: number; reason: string; reconnecting: boolean }
export type LinkState = "connecting" | "open" | "reconnecting" | "refused" | "closed";
export interface StateEvent { state: LinkState; code?: number; reason?: string }
export interface ClientEvents {
  update: UpdateEvent; lobby: LobbyMessage; settled: SettledMessage; rating: RatingMessage; rejected: RejectedEvent; ack: AckEvent;
  /** a quick phrase or emote said at the table (yours too) */
  say: SayMessage;
  /** your private table is open: its code and link (issue 39) */
  private_table: PrivateTableMessage;
  /** a private table's series: a vote to end, its outcome, the tally, the final standings */
  series: SeriesMessage;
  closed: ClosedEvent; welcome: WelcomeMessage; state: StateEvent; link: StateEvent; retry: RetryEvent;
  /** a server message of a kind client.js does not handle itself */
  message: ServerMessage | Record<string, unknown>; error: unknown;
}
/** The table from the newest brief alone (client.state): render from it without folding events. */
export interface ClientState {
  match: string | null; version: number | null; phase: Brief["phase"] | null; turn: string | null;
  your_turn: boolean; hand: number[] | null; trick: number; trick_plays: Brief["trick_plays"];
  last_play: Brief["last_play"]; deadline_ms: number | null; cards_left: Record<string, number>;
}
export interface Limits { rate: number; burst: number; sync_rate: number }

export interface CardInfo { id: number; rank: number; rank_label: RankLabel; suit: "S" | "H" | "C" | "D" | null;
  deck: 0 | 1; joker: boolean }
export type RankLabel = "3" | "4" | "5" | "6" | "7" | "8" | "9" | "10" | "J" | "Q" | "K" | "A" | "2" | "SJ" | "BJ";
export declare const RANKS: readonly RankLabel[];
export declare const SUITS: readonly ("S" | "H" | "C" | "D")[];
export declare const DECK_SIZE: 54;
export declare const NUM_CARDS: 108;
export declare const FINAL_CLOSE_CODES: readonly number[];
export declare const RATE_CLOSE_CODE: 4429;
/** A socket open this long (ms) counts as stable: the next drop's reconnect starts from the shortest delay. */
export declare const STABLE_MS: 10000;
export declare const DEFAULT_LIMITS: Readonly<Limits>;
export declare const RETRIED_TYPES: readonly ("Play" | "Pass" | "Ready")[];
/** The quick phrase ids a Say may carry (docs/PROTOCOL.md §8 "Quick phrases"). */
export declare const PHRASES: readonly SayMessage["phrase"][];
/** The emote ids a Say may carry. */
export declare const EMOTES: readonly SayMessage["phrase"][];
/** At most one Say every this many milliseconds (a sooner one is refused rate_limited). */
export declare const SAY_INTERVAL_MS: 3000;
export declare const cards: {
  rank(id: number): number; suit(id: number): "S" | "H" | "C" | "D" | null; deck(id: number): number;
  isJoker(id: number): boolean; label(id: number): string; info(id: number): CardInfo;
  sort(ids: readonly number[]): number[]; text(ids: readonly number[]): string;
  byRank(ids: readonly number[]): Record<number, number[]>;
};
export declare function briefOf(message: { version: number; view?: View | null; brief?: Brief | null }): Brief | null;
export declare function stateOf(match: string | null, brief: Brief | null, player: string | null): ClientState;

export interface ClientOptions {
  url: string; token: string;
  /** a WebSocket class: the global one by default (browsers, Node 22); Node < 22: the ws package's */
  WebSocket?: unknown;
  auth?: "message" | "query"; version?: number | null; match?: string | null; reconnect?: boolean;
}
export interface PlayOptions { reading_kind?: Reading["kind"]; reading_rank?: string; expected_version?: number | null }
export declare class Client {
  constructor(options: ClientOptions);
  readonly url: string; token: string; version: number | null; match: string | null; brief: Brief | null;
  view: View | null; state: ClientState; lobby: LobbyMessage | null; rating: RatingMessage | null; player: string | null;
  role: WelcomeMessage["role"] | null; link: LinkState | "idle"; limits: Limits;
  pending: Map<string, ClientMessage>; queue: ClientMessage[];
  on<K extends keyof ClientEvents>(name: K, fn: (payload: ClientEvents[K]) => void): () => void;
  off<K extends keyof ClientEvents>(name: K, fn: (payload: ClientEvents[K]) => void): void;
  once<K extends keyof ClientEvents>(name: K, test?: (payload: ClientEvents[K]) => boolean): Promise<ClientEvents[K]>;
  emit<K extends keyof ClientEvents>(name: K, payload: ClientEvents[K]): void;
  setState(link: LinkState, detail?: { code?: number; reason?: string }): void;
  connect(): this; close(): void; receive(message: ServerMessage): void;
  answered(commandId: string): void; retry(command: ClientMessage): boolean; pump(): void;
  /** on a new socket: the moves, a Sync for the view and the Watch whose answer a drop may have taken, again (same command_id) */
  resend(): void;
  /** whether a Play or Pass is still within its turn, a Ready still seated */
  stillCounts(command: ClientMessage): boolean;
  /** the current match becomes `match`; the one before is remembered as left */
  moveTo(match: string): void; remember(match: string): void;
  /** the match a Watch asked for (a spectator's reconnect watches it again) */
  watching: string | null;
  /** the last matches moved on from: a late answer about one does not take the client back */
  left: Set<string>;
  /** acknowledge a read update (Seen): the first on a socket, then those that start your clock */
  seen(message: UpdateMessage): void;
  /** this socket sent a Seen */
  acking: boolean;
  send(message: Partial<ClientMessage> & { type: ClientMessage["type"] }): string;
  renew(token: string): void;
  expected(): number | null;
  join(room: string): string; ready(clientSeed?: string): string;
  play(cards: readonly number[] | string, options?: PlayOptions): string;
  pass(options?: { expected_version?: number | null }): string;
  sync(version?: number, match?: string | null): string; watch(match: string): string; leave(): string; escape(): string;
  requestTrustee(): string; cancelTrustee(): string;
  /** a quick phrase or emote (one of PHRASES or EMOTES) to the table; at most one every 3 s */
  say(phrase: SayMessage["phrase"]): string;
  /** open a private table for a series of 4, 8 or 16 hands: answered by a private_table event */
  createTable(room: string, hands: 4 | 8 | 16, options?: { spectators?: boolean; bots?: boolean }): string;
  /** take the second seat of a private table by its 6-character code */
  joinTable(code: string): string;
  /** the owner cancels the table before its first deal */
  cancelTable(): string;
  /** ask to end the series early (a vote the other player answers) */
  requestEnd(): string;
  /** answer the open vote to end the series */
  voteEnd(agree: boolean): string;
}
"""


def typescript() -> str:
    """``client.d.ts``: the types of every message (from the schemas) and of client.js's API."""
    client, server = client_schema(), server_schema()
    out = ["// Generated by gateway/schemas_gen.py from gateway/schemas/*.json: do not edit.",
           "// The types of client.js (an ES module beside this file) and of every WebSocket message.", ""]
    seen: set[str] = set()
    for schema in (client, server):
        for name, d in schema["$defs"].items():
            ts_name = _ts_ref(name) if schema is server else _ts_name(name) + "Message"
            if ts_name in seen:
                continue
            seen.add(ts_name)
            if d.get("title"):
                out.append(f"/** {d['title']} */")
            out.append(f"export type {ts_name} = {_ts(d)};")
            out.append("")
    client_names = [_ts_name(r["$ref"]) + "Message" for r in client["oneOf"]]
    out.append("/** " + client["title"] + " */")
    out.append("export type ClientMessage = " + " | ".join(client_names) + ";")
    out.append("/** " + server["title"] + " */")
    out.append("export type ServerMessage = " + " | ".join(_ts_ref(r["$ref"]) for r in server["oneOf"]) + ";")
    return "\n".join(out) + "\n" + _TS_CLIENT


def main() -> None:
    SCHEMA_DIR.mkdir(exist_ok=True)
    for name, schema in generate().items():
        (SCHEMA_DIR / name).write_text(render(copy.deepcopy(schema)), encoding="utf-8")
        print(SCHEMA_DIR / name)
    TYPES_FILE.write_text(typescript(), encoding="utf-8")
    print(TYPES_FILE)


if __name__ == "__main__":
    main()
