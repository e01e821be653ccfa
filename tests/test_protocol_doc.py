"""docs/PROTOCOL.md §8 shows every message of a match as JSON (issue 26 §6): each one validates
against the shipped schemas (→ client.json, ← server.json), and the sequence covers every
server message kind a player meets from connect to settlement."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema

from gateway.schemas_gen import load

DOC = Path(__file__).resolve().parents[1] / "docs" / "PROTOCOL.md"


def _sequence() -> list[tuple[str, dict]]:
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("### A match, from connect to settlement"):]
    block = re.search(r"```json\n(.*?)```", section, re.S)
    assert block, "no JSON sequence in §8"
    out = []
    for line in block.group(1).splitlines():
        arrow, _, body = line.partition(" ")
        assert arrow in ("→", "←"), line
        out.append((arrow, json.loads(body)))
    return out


def test_every_message_of_the_documented_sequence_validates() -> None:
    client = jsonschema.Draft202012Validator(load("client.json"))
    server = jsonschema.Draft202012Validator(load("server.json"))
    seq = _sequence()
    for arrow, msg in seq:
        (client if arrow == "→" else server).validate(msg)
    kinds = {m["kind"] for a, m in seq if a == "←"}
    assert kinds == {"welcome", "lobby", "update", "rejected", "settled"}
    types = {m["type"] for a, m in seq if a == "→"}
    assert {"Auth", "Join", "Ready", "Play", "Pass"} <= types
    # the check can fail: a documented message off the schema
    bad = dict(seq[1][1], role="king")
    assert not server.is_valid(bad)


def test_every_phase_a_brief_may_carry_is_documented() -> None:
    """A client meets every phase of the brief's schema (an abandoned match too): §8's brief table
    and the schema's own description name each one."""
    phase = load("server.json")["$defs"]["brief"]["properties"]["phase"]
    assert "abandoned" in phase["enum"], phase
    text = DOC.read_text(encoding="utf-8")
    row = next(line for line in text.splitlines() if line.startswith("| `phase` |"))
    for value in phase["enum"]:
        assert f"`{value}`" in row, (value, row)
        assert value in phase["description"], (value, phase["description"])


def test_the_private_table_sequence_validates() -> None:
    """§8 "Private tables" (issue 39): every message of its sequence validates, and it shows
    each new message kind and command."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("### Private tables"):]
    block = re.search(r"```json\n(.*?)```", section, re.S)
    assert block, "no JSON sequence in Private tables"
    client = jsonschema.Draft202012Validator(load("client.json"))
    server = jsonschema.Draft202012Validator(load("server.json"))
    seq = []
    for line in block.group(1).splitlines():
        arrow, _, body = line.partition(" ")
        assert arrow in ("→", "←"), line
        seq.append((arrow, json.loads(body)))
    for arrow, msg in seq:
        (client if arrow == "→" else server).validate(msg)
    assert {m["type"] for a, m in seq if a == "→"} >= {"CreateTable", "JoinTable", "RequestEnd", "VoteEnd"}
    assert {m["kind"] for a, m in seq if a == "←"} >= {"private_table", "series", "settled", "lobby"}
    assert any("series" in m for a, m in seq if a == "←" and m["kind"] == "settled")
    assert not server.is_valid({**seq[1][1], "code": "toolongcode"})  # the check can fail
