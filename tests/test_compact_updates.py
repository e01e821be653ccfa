"""Compact updates round-trip, their briefs too (issue 11 §8, docs/PROTOCOL.md "Updates").

An outbox update leaves out what its entry says (match, command id, version),
each event's ``seq`` (the events are the versions ``version - len(events) + 1 …
version``) and a ``ts`` the events share, ``by`` when it is ``"player"``, and the
defaults and trailing zeros of a reading.  Whatever the publisher wrote, both
readers (``GatewayClient``'s :class:`OutMessage` and the gateway's
:func:`gateway.outbox.parse_entry`) must give back exactly the redacted events
(:func:`projections.views.redact_event`) — on every step of random matches,
including re-publications (``duplicate``), timeouts, trusteeship and escapes.
"""

from __future__ import annotations

from typing import Any

import fakeredis
import msgpack
from hypothesis import HealthCheck, given, settings

from engine.rules.cards import rank_of
from engine.service.client import OutMessage
from engine.service.publish import Publisher, compact_body, compact_brief, expand_events, pack
from gateway import protocol
from gateway.outbox import parse_entry
from projections.views import brief, brief_of_view, redact_event, view_for
from tests.strategies import Step, match_specs, play_match


def _wire(fields: dict[str, Any]) -> dict[bytes, bytes]:
    """The entry's fields as Redis hands them back (bytes keys and values)."""
    return {k.encode(): (v if isinstance(v, bytes) else str(v).encode()) for k, v in fields.items()}


def _plain(data: Any) -> Any:
    return msgpack.unpackb(msgpack.packb(data, use_bin_type=True), raw=False, strict_map_key=False)


def _check_step(publisher: Publisher, step: Step, duplicate: bool) -> int:
    out = step.outcome
    if out.rejection is not None or not out.events:
        return 0
    if duplicate:
        out = out.__class__(**{**out.__dict__, "duplicate": True})
    checked = 0
    for write in publisher.outputs(step.command, out):
        if write.fields.get("kind") != "update":
            continue
        player = write.stream.removeprefix("sk:out:{").removesuffix("}")
        expected = _plain([redact_event(e, player, state=out.state) for e in out.events])
        fields = _wire(write.fields)
        assert OutMessage.parse("1-0", fields).body["events"] == expected
        entry = parse_entry(b"1-0", fields)
        assert entry.body["events"] == expected
        # the brief (docs/PROTOCOL.md §8): the state's for this player (their own hand), the same
        # as read off the player's view, and small (the outbox budget: issue 26 §3, issue 36)
        # an entry with a view stores no brief: the gateway reads it off the view
        assert (entry.brief is None) == (entry.view is not None)
        sent = protocol.update(entry.match, int(entry.version or 0), entry.events, entry.view, None, entry.brief)
        mine = brief(out.state, player)
        assert sent["brief"] == _plain(mine) == _plain(brief_of_view(view_for(out.state, player)))
        seat = out.state.seat_of(player)
        assert mine["hand"] == (None if seat is None else sorted(out.state.seat(seat).hand,
                                                                  key=lambda c: (rank_of(c), c)))
        if mine["last_play"] is not None:  # the trick's last play is the play to beat
            assert mine["trick_plays"][-1]["cards"] == mine["last_play"]["cards"]
        else:
            assert mine["trick_plays"] == []
        # the outbox budget holds for the table without the trick's earlier plays; those grow
        # with the trick (a long run of singles), each stored as [player, cards, kind, rank, xiang]
        assert len(pack(compact_brief(mine)[:7] + [[]])) <= 250
        checked += 1
    return checked


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(match_specs())
def test_every_update_of_a_random_match_expands_to_its_redacted_events(spec):
    publisher = Publisher(fakeredis.FakeRedis(), consumer="t")
    checked = 0

    def on_step(step: Step) -> None:
        nonlocal checked
        checked += _check_step(publisher, step, duplicate=False)
        checked += _check_step(publisher, step, duplicate=True)

    play_match(spec, on_step=on_step)
    assert checked > 0


def test_the_compact_body_drops_what_the_update_already_says():
    events = [{"seq": 11, "ts": 5, "type": "CardsPlayed", "player": "a", "cards": [3], "by": "player",
               "reading": {"kind": "single", "top": 0, "size": 1, "counts": [1] + [0] * 14, "xiang": None}},
              {"seq": 12, "ts": 5, "type": "Passed", "player": "b", "by": "trustee"}]
    body = compact_body(events, duplicate=False)
    assert body == {"ts": 5, "events": [
        {"type": "CardsPlayed", "player": "a", "cards": [3], "reading": {"kind": "single", "top": 0, "size": 1,
                                                                          "counts": [1]}},
        {"type": "Passed", "player": "b", "by": "trustee"}]}
    full = expand_events(body, "m", "c", 12)
    assert [e["seq"] for e in full] == [11, 12] and [e["by"] for e in full] == ["player", "trustee"]
    assert full[0]["reading"]["counts"] == [1] + [0] * 14 and full[0]["ts"] == full[1]["ts"] == 5
    # a re-publication keeps each event's seq and ts: its events are older than the version
    again = compact_body(events, duplicate=True)
    assert again["duplicate"] is True and [e["seq"] for e in again["events"]] == [11, 12]
    assert [e["seq"] for e in expand_events(again, "m", "c", 99)] == [11, 12]
    # events that do not share one time stamp keep their own
    mixed = compact_body([{**events[0]}, {**events[1], "ts": 6}], duplicate=False)
    assert "ts" not in mixed and [e["ts"] for e in mixed["events"]] == [5, 6]
