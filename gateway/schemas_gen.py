"""Writes the JSON Schemas of the WebSocket protocol into ``gateway/schemas/``.

* ``client.json`` — every client → server message (from :mod:`gateway.protocol`'s models);
* ``server.json`` — every server → client message (update, rejected, lobby, settled, welcome),
  with the view and the events inlined under ``$defs`` (one self-contained file);
* ``view.json`` — a player's or a spectator's view of a match (projections/views.py);
* ``events.json`` — every event as a player or spectator receives it (engine/match/events.py,
  redacted by ``projections.views.redact_event``).

The files are generated from the models, committed, and checked against a fresh generation by
tests/test_gateway_unit.py; regenerate after changing a message, a view or an event::

    python -m gateway.schemas_gen
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"


def _phases() -> tuple[str, ...]:
    from typing import get_args

    from engine.match.state import Phase

    return tuple(get_args(Phase))


#: a match's phases (engine.match.state.Phase): new, seating, playing, finished, abandoned
PHASES = _phases()
DRAFT = "https://json-schema.org/draft/2020-12/schema"

_NULLABLE_STR = {"type": ["string", "null"]}
_INT = {"type": "integer"}
_CAUSE = ("the command that caused it: your own command_id when your command did, else null "
          "(the same as the update's command_id)")


def _move_defs(schema: dict[str, Any], prefix: str = "") -> tuple[dict[str, Any], dict[str, Any]]:
    """Split pydantic's ``$defs`` off a schema (refs rewritten to ``#/$defs/<prefix><name>``)."""
    defs = schema.pop("$defs", {})
    text = json.dumps(schema)
    dtext = json.dumps(defs)
    for name in defs:
        text = text.replace(f'"#/$defs/{name}"', f'"#/$defs/{prefix}{name}"')
        dtext = dtext.replace(f'"#/$defs/{name}"', f'"#/$defs/{prefix}{name}"')
    return json.loads(text), {prefix + k: v for k, v in json.loads(dtext).items()}


def client_schema() -> dict[str, Any]:
    from gateway.protocol import ClientMessage

    schema = TypeAdapter(ClientMessage).json_schema(mode="validation")
    body, defs = _move_defs(schema)
    return {"$schema": DRAFT, "$id": "client.json", "title": "A client → server WebSocket message",
            **body, "$defs": defs}


def events_schema() -> dict[str, Any]:
    from engine.match.events import Event

    schema = TypeAdapter(Event).json_schema(mode="serialization")
    body, defs = _move_defs(schema, "event_")
    hd = defs["event_HandDealt"]["properties"]
    # what a receiver gets (projections.views.redact_event): its own hand at its seat, null elsewhere
    hd["hands"] = {"type": "array", "minItems": 2, "maxItems": 2,
                   "items": {"anyOf": [{"type": "array", "items": _INT}, {"type": "null"}]}}
    hd["set_aside"] = {"type": "null"}
    hd["lead_card"] = {"anyOf": [_INT, {"type": "null"}]}
    hd["hand_sizes"] = {"type": "array", "items": _INT, "minItems": 2, "maxItems": 2}
    hd["set_aside_count"] = _INT
    # fair deals (docs/FAIRNESS.md): MatchCreated's server seed is private and never on the wire
    # (engine.match.events.PRIVATE_FIELDS); the commitment and the reveal are
    from engine.match.events import PRIVATE_FIELDS

    for type_name, private in PRIVATE_FIELDS.items():
        for name in private:
            defs[f"event_{type_name}"]["properties"].pop(name, None)
    for d in defs.values():  # the id of the command that caused it, as the update's (docs/PROTOCOL.md §8)
        if "command_id" in d.get("properties", {}):
            d["properties"]["command_id"] = {**_NULLABLE_STR, "description": _CAUSE}
    for d in defs.values():  # every field is present on the wire
        if d.get("type") == "object" and "properties" in d:
            d["required"] = sorted(d["properties"])
    ps = defs["event_PlayerSeated"]["properties"]
    ps["balance"] = {"anyOf": [_INT, {"type": "null"}], "description": ps["balance"].get("description", "")}
    return {"$schema": DRAFT, "$id": "events.json", "title": "A match event as a player or spectator receives it",
            **body, "$defs": defs}


def view_schema() -> dict[str, Any]:
    seat = {"type": "object", "additionalProperties": False,
            "required": ["seat", "player", "level", "base", "ready", "cards_left", "timeouts", "trustee",
                         "connected", "escaped", "plays", "bombs"],
            "properties": {"seat": {"type": "integer", "minimum": 0, "maximum": 1}, "player": {"type": "string"},
                           "level": _INT, "base": _INT, "ready": {"type": "boolean"},
                           "cards_left": {"type": "integer", "minimum": 0}, "timeouts": _INT,
                           "trustee": _NULLABLE_STR, "connected": {"type": "boolean"},
                           "escaped": {"type": "boolean"}, "plays": _INT,
                           "bombs": {"type": "array", "items": {"type": "string"}}}}
    props: dict[str, Any] = {
        "match_id": {"type": "string"}, "version": _INT,
        "phase": {"enum": list(PHASES)},
        "mode": {"enum": ["points", "wealth", None]},
        "you": _NULLABLE_STR,
        "seats": {"type": "array", "maxItems": 2, "items": {"anyOf": [seat, {"type": "null"}]}},
        "turn": _NULLABLE_STR, "your_turn": {"type": "boolean"}, "leading": {"type": "boolean"},
        "trick": _INT, "table_count": _INT, "table": {"type": "string"},
        "table_ids": {"type": "array", "items": _INT},
        "last_play": {"anyOf": [{"type": "null"}, {
            "type": "object", "additionalProperties": False,
            "required": ["player", "cards", "text", "reading", "describe"],
            "properties": {"player": {"type": "string"}, "cards": {"type": "array", "items": _INT},
                           "text": {"type": "string"}, "reading": {"type": "object"},
                           "describe": {"type": "string"}}}]},
        "deadline": {"anyOf": [{"type": "null"}, {
            "type": "object", "additionalProperties": False, "required": ["at_ms", "kind", "version"],
            "properties": {"at_ms": _INT, "kind": {"enum": ["turn", "trustee", "ready"]}, "version": _INT}}]},
        "contribution": {"type": "object", "additionalProperties": {
            "type": "object", "required": ["xiang", "source", "c", "net"],
            "properties": {"xiang": {"type": ["integer", "null"]}, "c": _INT, "net": _INT}}},
        "hand": {"anyOf": [{"type": "null"}, {
            "type": "object", "additionalProperties": False, "required": ["ids", "text"],
            "properties": {"ids": {"type": "array", "items": _INT}, "text": {"type": "string"}}}]},
        "opponent": {"anyOf": [{"type": "null"}, {
            "type": "object", "additionalProperties": False, "required": ["player", "cards_left"],
            "properties": {"player": {"type": "string"}, "cards_left": _INT}}]},
        "fair": {"anyOf": [{"type": "null"}, {  # docs/FAIRNESS.md; null before fair deals
            "type": "object", "additionalProperties": False,
            "required": ["commitment", "client_seeds", "server_seed"],
            "properties": {"commitment": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
                           "client_seeds": {"anyOf": [{"type": "null"}, {
                               "type": "array", "minItems": 2, "maxItems": 2, "items": {"type": "string"}}]},
                           "server_seed": {"anyOf": [{"type": "null"},
                                                     {"type": "string", "pattern": "^[0-9a-f]{64}$"}],
                                           "description": "null until the match is finished"}}}]},
        "result": {"anyOf": [{"type": "null"}, {
            "type": "object", "additionalProperties": False,
            "required": ["winner", "loser", "kou", "reason", "cards_left"],
            "properties": {"winner": {"type": "string"}, "loser": {"type": "string"},
                           "kou": {"enum": ["flat", "single", "double", "escape"]},
                           "reason": {"enum": ["out", "escape"]},
                           "cards_left": {"type": "object", "additionalProperties": _INT}}}]},
    }
    required = sorted(k for k in props if k != "opponent")
    return {"$schema": DRAFT, "$id": "view.json",
            "title": "A player's view of a match (a spectator's: you null, hand null, no opponent key)",
            "type": "object", "additionalProperties": False, "required": required, "properties": props}


def brief_schema() -> dict[str, Any]:
    """The ``brief`` of every update (projections.views.brief, docs/PROTOCOL.md §8)."""
    props = {
        "version": {**_INT, "description": "the match version this brief is of (the update's version)"},
        "phase": {"enum": list(PHASES), "description": "the match's phase (abandoned: ended before the deal)"},
        "turn": {**_NULLABLE_STR, "description": "the player on turn; null outside the playing phase"},
        "trick": {**_INT, "description": "tricks ended so far (a pass ends one, R-6.2)"},
        "last_play": {"anyOf": [{"type": "null"}, {
            "type": "object", "additionalProperties": False, "required": ["player", "cards", "reading"],
            "properties": {"player": {"type": "string"}, "cards": {"type": "array", "items": _INT},
                           "reading": {"type": "object"}}}],
            "description": "the play to beat; null when the player on turn leads (after a pass ended the trick)"},
        "deadline_ms": {"type": ["integer", "null"], "description": "when the running clock fires (ms since the epoch)"},
        "cards_left": {"type": "object", "additionalProperties": _INT, "description": "each seated player's card count"},
    }
    return {"title": "What the table shows now: render from the newest brief without folding events",
            "type": "object", "additionalProperties": False, "required": sorted(props), "properties": props}


def server_schema() -> dict[str, Any]:
    events = events_schema()
    view = view_schema()
    defs: dict[str, Any] = dict(events.pop("$defs"))
    events.pop("$schema"), events.pop("$id"), events.pop("title")
    defs["event"] = events
    view.pop("$schema"), view.pop("$id")
    defs["view"] = view
    nullable_view = {"anyOf": [{"$ref": "#/$defs/view"}, {"type": "null"}]}
    defs["brief"] = brief_schema()

    def msg(kind: str, props: dict[str, Any], title: str) -> dict[str, Any]:
        p = {"kind": {"const": kind}, **props}
        return {"title": title, "type": "object", "additionalProperties": False, "required": sorted(p),
                "properties": p}

    defs["update"] = msg("update", {
        "match": {"type": "string"}, "version": _INT, "command_id": _NULLABLE_STR,
        "events": {"type": "array", "items": {"$ref": "#/$defs/event"}}, "view": nullable_view,
        "brief": {"$ref": "#/$defs/brief"}},
        "The match changed (events as you may see them; the view on the first update, on Sync, on resync)")
    defs["rejected"] = msg("rejected", {
        "command_id": _NULLABLE_STR, "code": {"type": "string"}, "reason": {"type": "string"},
        "view": nullable_view, "match": _NULLABLE_STR}, "Your command was refused; nothing changed")
    defs["lobby"] = msg("lobby", {
        "state": {"enum": ["queued", "seated", "removed"]}, "room": _NULLABLE_STR, "table": _NULLABLE_STR,
        "match": _NULLABLE_STR, "reason": _NULLABLE_STR}, "Where you are in the lobby")
    defs["settled"] = msg("settled", {
        "match": {"type": "string"}, "scores": {"type": "object", "additionalProperties": _INT},
        "breakdown": {"type": "object"}, "balances": {"type": "object", "additionalProperties": _INT}},
        "A match of your table was settled: scores, breakdown, your balance from the ledger")
    defs["welcome"] = msg("welcome", {
        "player": {"type": "string"}, "role": {"enum": ["player", "spectator", "operator"]},
        "room": _NULLABLE_STR, "gateway": {"type": "string"}}, "The token was accepted")
    kinds = ["update", "rejected", "lobby", "settled", "welcome"]
    return {"$schema": DRAFT, "$id": "server.json", "title": "A server → client WebSocket message",
            "oneOf": [{"$ref": f"#/$defs/{k}"} for k in kinds], "$defs": defs}


def generate() -> dict[str, dict[str, Any]]:
    return {"client.json": client_schema(), "server.json": server_schema(), "view.json": view_schema(),
            "events.json": events_schema()}


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False, sort_keys=True) + "\n"


def load(name: str) -> dict[str, Any]:
    return json.loads((SCHEMA_DIR / name).read_text(encoding="utf-8"))


def main() -> None:
    SCHEMA_DIR.mkdir(exist_ok=True)
    for name, schema in generate().items():
        (SCHEMA_DIR / name).write_text(render(copy.deepcopy(schema)), encoding="utf-8")
        print(SCHEMA_DIR / name)


if __name__ == "__main__":
    main()
