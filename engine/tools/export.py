"""The match export file (``shuangkou export``): JSON Lines, one match per file.

Line 1 is a header, every further line one event as JSON
(``EventBase.model_dump(mode="json")``, the same objects ``run-script --json``
prints)::

    {"export": "shuangkou-match", "format": 1, "match_id": "m1", "exported_at_ms": 1700000000000,
     "events": 13, "settlement": {...} | null}
    {"type": "MatchCreated", "match_id": "m1", "seq": 1, ...}
    {"type": "PlayerSeated", ...}

``settlement`` is what the ledger recorded for the match when it was exported
(None when it was not settled yet); the events are the system of record, the
stored settlement is there so a dispute handler can compare the two offline.

:func:`parse_events_text` reads this format and also the older JSON forms
``{"events": [...]}`` and ``[...]`` (run-script output, archives), so
``shuangkou replay --events`` and the replay viewer take any of them.

>>> from engine.match.events import PlayerReady
>>> text = export_text([PlayerReady(match_id="m1", seq=1, ts=5, command_id="c", player="a")], None, 9)
>>> text.splitlines()[0]
'{"export": "shuangkou-match", "format": 1, "match_id": "m1", "exported_at_ms": 9, "events": 1, "settlement": null}'
>>> parsed = parse_events_text(text)
>>> [type(e).__name__ for e in parsed.by_match["m1"]], parsed.settlements
(['PlayerReady'], {'m1': None})

An archive header (``shuangkou archive``) also stores ``settlement_record``, the
ledger's full record.  :func:`settlement_differences` compares every stored form
with the settlement recomputed from the events; ``shuangkou replay --events``,
``replay --all --archive`` and the replay viewer all use it:

>>> settlement_differences({"winner": "a", "kou": "flat", "cards_left": {"b": 3}, "scores": {"a": 3, "b": -3},
...                         "burned": 0},
...                        {"settlement": {"winner": "a", "kou": "flat", "cards_left": {"b": 3},
...                                        "scores": {"a": 3, "b": -9999}, "burned": 0}})
["stored settlement differs from the replay: scores: replayed {'a': 3, 'b': -3} != stored {'a': 3, 'b': -9999} (stored form: settlement)"]
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.match.events import PRIVATE_FIELDS, EventBase, EventDecodeError, MatchFinished, event_from_dict

EXPORT_TAG = "shuangkou-match"
EXPORT_FORMAT = 1


class ExportFormatError(ValueError):
    """The text is not an export file, a run-script output or an event list (one readable line)."""


@dataclass
class ParsedEvents:
    """Events grouped by match, in file order, and the stored settlements named by export headers."""

    by_match: dict[str, list[EventBase]] = field(default_factory=dict)
    settlements: dict[str, dict[str, Any] | None] = field(default_factory=dict)
    records: dict[str, Any] = field(default_factory=dict)  # ``settlement_record`` of archive headers

    def stored_forms(self, match_id: str) -> dict[str, Any]:
        """The settlement forms the file stores for ``match_id`` (``settlement``,
        ``settlement_record``), the ones that are not null; {} when none."""
        forms = {"settlement": self.settlements.get(match_id), "settlement_record": self.records.get(match_id)}
        return {name: form for name, form in forms.items() if form is not None}


SETTLEMENT_KEYS = ("winner", "kou", "cards_left", "scores", "burned")
"""The keys of a settlement compared with its replay (the breakdown is explanation, not result)."""


def settlement_differences(recomputed: Mapping[str, Any], forms: Mapping[str, Any]) -> list[str]:
    """One problem per stored form (``{label: settlement JSON}``) that differs from the
    ``recomputed`` settlement (``Settlement.to_json()``) in any of :data:`SETTLEMENT_KEYS`,
    naming the differing keys; [] when every form agrees (or none is given)."""
    problems = []
    for label, stored in forms.items():
        if not isinstance(stored, Mapping):
            problems.append(f"stored settlement ({label}) is not an object: {type(stored).__name__}")
            continue
        keys = [k for k in SETTLEMENT_KEYS if recomputed.get(k) != stored.get(k)]
        if keys:
            detail = "; ".join(f"{k}: replayed {recomputed.get(k)!r} != stored {stored.get(k)!r}" for k in keys)
            problems.append(f"stored settlement differs from the replay: {detail} (stored form: {label})")
    return problems


def export_text(events: Sequence[EventBase], settlement: dict[str, Any] | None, exported_at_ms: int) -> str:
    """The export file of one match (header line + one line per event), ending in a newline."""
    if not events:
        raise ValueError("no events to export")
    header = {"export": EXPORT_TAG, "format": EXPORT_FORMAT, "match_id": events[0].match_id,
              "exported_at_ms": exported_at_ms, "events": len(events), "settlement": settlement}
    lines = [json.dumps(header, ensure_ascii=False)]
    finished = any(isinstance(e, MatchFinished) for e in events)
    lines += [json.dumps(_exported(e, finished), ensure_ascii=False) for e in events]
    return "\n".join(lines) + "\n"


def _exported(event: EventBase, finished: bool) -> dict[str, Any]:
    """An event as exported: before the finish without its private fields (the server
    seed of a fair deal is revealed by MatchFinished, docs/FAIRNESS.md), since an export
    may be handed to a player."""
    data = event.model_dump(mode="json")
    if not finished:
        for name in PRIVATE_FIELDS.get(str(data.get("type")), ()):
            data.pop(name, None)
    return data


def _event(item: Any, where: str) -> EventBase:
    if not isinstance(item, dict):
        raise ExportFormatError(f"{where} is not an object")
    try:
        return event_from_dict(item)
    except EventDecodeError as exc:
        why = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        raise ExportFormatError(f"{where}: {why}") from None


def parse_events_text(text: str) -> ParsedEvents:
    """Events of an export file (JSON Lines) or of a JSON ``{"events": [...]}`` / ``[...]`` document."""
    out = ParsedEvents()
    stripped = text.lstrip()
    if not stripped:
        raise ExportFormatError("holds no events")
    raw_items: list[tuple[Any, str]] = []
    whole: Any = None
    try:
        whole = json.loads(stripped)
    except RecursionError:
        raise ExportFormatError("its JSON is nested too deeply") from None
    except json.JSONDecodeError:
        whole = None
        for n, line in enumerate(stripped.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                raw_items.append((json.loads(line), f"line {n}"))
            except json.JSONDecodeError as exc:
                raise ExportFormatError(f"line {n} is not JSON: {exc.msg}") from None
            except RecursionError:
                raise ExportFormatError(f"line {n}: its JSON is nested too deeply") from None
    if whole is not None or not raw_items:
        if isinstance(whole, dict) and whole.get("export") == EXPORT_TAG:
            raw_items = [(whole, "line 1")]  # a header alone
        else:
            items = whole.get("events") if isinstance(whole, dict) else whole
            if not isinstance(items, list):
                raise ExportFormatError('expected an export (JSON Lines), {"events": [...]} or a list of events')
            raw_items = [(item, f"event {n}") for n, item in enumerate(items)]
    for item, where in raw_items:
        if isinstance(item, dict) and item.get("export") == EXPORT_TAG:
            if item.get("format") != EXPORT_FORMAT:
                raise ExportFormatError(f"{where}: export format {item.get('format')!r} is not supported "
                                        f"(this build reads {EXPORT_FORMAT})")
            mid = item.get("match_id")
            if isinstance(mid, str):
                out.settlements[mid] = item.get("settlement")
                if item.get("settlement_record") is not None:
                    out.records[mid] = item.get("settlement_record")
            continue
        e = _event(item, where)
        out.by_match.setdefault(e.match_id, []).append(e)
    if not out.by_match:
        raise ExportFormatError("holds no events")
    return out
