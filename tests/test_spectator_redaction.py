"""Spectators see level and base, never a balance (issue 23 item 3; docs/SECURITY.md threat 8).

A spectator's socket reads a *seated player's* update stream (the gateway never reads a match
stream) and redacts it with gateway/spectate.py.  That player's own PlayerSeated carries their
balance, so the redaction must drop it.  Checked as properties over random matches on the real
path: the engine's publisher writes each player's outbox entries, the gateway's reader parses
them (gateway/outbox.py), and the spectator redaction must give exactly the engine's own
spectator redaction (``redact_event(e, None)``, ``view_for(state, None)``) with no ``balance``
anywhere.  The opponent's redaction is held to the same property: an opponent sees no balance
either.  And the race of the incident, on a real Redis through a real gateway connection: the
spectator's Watch lands before the seating is published.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import fakeredis
import pytest
from hypothesis import HealthCheck, given, settings

from engine.config import load_config
from engine.match.commands import CreateMatch, Ready, Sit
from engine.service.publish import Publisher
from engine.service.service import FixedBalances, MatchService
from engine.service.shuffle import seeded_random
from engine.store import keys
from engine.store.memory import InMemoryEventStore
from gateway.outbox import parse_entry
from gateway.spectate import spectator_brief, spectator_event, spectator_view
from projections.views import brief, redact_event, view_for
from tests.strategies import Clock, MatchSpec, Step, match_specs, play_match
from tests.test_gateway_session import FakeSocket, _with_connection, aredis  # noqa: F401  (aredis: a fixture)

PROFILE = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def balances_in(data: Any) -> list[Any]:
    """Every value of a ``balance`` key anywhere in ``data``."""
    if isinstance(data, dict):
        return [v for k, v in data.items() if k == "balance"] + [b for v in data.values() for b in balances_in(v)]
    if isinstance(data, list):
        return [b for v in data for b in balances_in(v)]
    return []


def plain(data: Any) -> Any:
    return json.loads(json.dumps(data))


def _published(steps: list[Step], players: tuple[str, ...] = ("a", "b")) -> list[tuple[str, Any, Step]]:
    """(player, parsed outbox entry, step) for every update the engine's publisher writes to the
    players' outboxes."""
    pub = Publisher(fakeredis.FakeRedis(), consumer="t")
    out = []
    for n, step in enumerate(steps):
        if step.outcome.rejection is not None:
            continue
        for w in pub.outputs(step.command, step.outcome, None, None):
            player = next((p for p in players if w.stream == keys.outbox_key(p)), None)
            if player is not None:
                out.append((player, parse_entry(f"{n + 1}-0", w.fields), step))
    return out


@PROFILE
@given(match_specs())
def test_what_a_spectator_gets_is_the_engines_spectator_redaction_and_holds_no_balance(spec: MatchSpec) -> None:
    seen_seated, _hands = _spectator_redaction_holds(spec)
    assert seen_seated >= 2  # both seatings went through the redaction (the property is not vacuous)


def test_the_spectator_redaction_sees_the_players_hands_to_drop():
    """The property above is not vacuous for hands: a match played to its end publishes briefs
    that hold the player's hand, which the spectator's copy drops.  (A random match need not:
    the deal's update carries a view, and one escaped right after its deal publishes no brief
    while it is played.)"""
    _seated, hands_seen = _spectator_redaction_holds(MatchSpec(seed=1, chaos=0.0))
    assert hands_seen > 0


def _spectator_redaction_holds(spec: MatchSpec) -> tuple[int, int]:
    """Every update of the match played from ``spec``, as a spectator reads it, is the engine's
    own spectator redaction and holds no balance; (PlayerSeated events seen, briefs seen
    holding the player's hand while the match was played)."""
    steps: list[Step] = []
    play_match(spec, on_step=steps.append)
    seen_seated = hands_seen = 0
    for player, entry, step in _published(steps):
        if entry.kind != "update":
            continue
        for got in entry.events:
            mine = spectator_event(got)
            engine_event = next(e for e in step.outcome.events if e.seq == got["seq"])
            assert plain(mine) == plain(redact_event(engine_event, None))
            assert balances_in(mine) == [], f"a spectator got a balance from {player}'s {got['type']}"
            if got["type"] == "PlayerSeated":
                seen_seated += 1
        state = step.outcome.state
        if entry.view is not None:
            assert plain(spectator_view(entry.view)) == plain(view_for(state, None))
            assert balances_in(entry.view) == []  # no view holds a balance, not even the player's own
        else:  # the stored brief: the player's own hand, which the spectator's copy drops
            assert entry.brief is not None
            assert plain(spectator_brief(entry.brief)) == plain(brief(state, None))
            if state.phase == "playing":
                assert entry.brief["hand"] is not None
                hands_seen += 1
    return seen_seated, hands_seen


@PROFILE
@given(match_specs(max_chaos=0.1))
def test_an_opponent_sees_no_balance_either(spec: MatchSpec) -> None:
    steps: list[Step] = []
    play_match(spec, on_step=steps.append)
    own = 0
    for player, entry, _step in _published(steps):
        for e in entry.events:
            if e["type"] == "PlayerSeated" and e["player"] == player:
                assert isinstance(e["balance"], int)  # the player's own (positive control of the check)
                own += 1
            else:
                assert balances_in(e) == [], f"{player} got another player's balance in {e['type']}"
    assert own == 2


def _engine_updates(match: str, balances: dict[str, int]) -> list[tuple[str, dict[Any, Any]]]:
    """The outbox entries the real engine publishes for a wealth match seated and readied."""
    clock = Clock()
    service = MatchService(InMemoryEventStore(), clock, seeded_random(7), balances=FixedBalances(balances))
    pub = Publisher(fakeredis.FakeRedis(), consumer="t")
    out: list[tuple[str, dict[Any, Any]]] = []
    commands = [CreateMatch(command_id="c0", match_id=match, config=load_config("wealth").to_record())]
    commands += [Sit(command_id=f"s-{p}", match_id=match, player=p) for p in balances]
    commands += [Ready(command_id=f"r-{p}", match_id=match, player=p) for p in balances]
    for c in commands:
        clock.now += 1000
        outcome = service.execute(c)
        assert outcome.rejection is None, outcome.rejection
        if c.type != "CreateMatch":  # the spectator's first view is at version 1
            out += [(w.stream, w.fields) for w in pub.outputs(c, outcome, None, None)]
    return out


@pytest.mark.redis
def test_a_watch_before_the_seating_never_shows_a_balance(aredis) -> None:  # noqa: F811
    """The incident: the engine was slow, the spectator's Watch came first, then the seating
    reached the seated player's stream the spectator reads."""
    balances = {"alice": 123_457, "bob": 98_765}
    updates = _engine_updates("t1-1", balances)
    assert any("123457" in json.dumps(parse_entry("1-0", f).events) for s, f in updates if s == keys.outbox_key("alice"))

    async def body(ws: FakeSocket, conn: Any, engine: Any) -> None:
        await ws.inbox.put(json.dumps({"type": "Watch", "match": "t1-1", "command_id": "w1"}))
        await ws.expect(lambda m: m["kind"] == "update" and m["match"] == "t1-1", "the spectator's first view")
        for stream, fields in updates:  # now the engine publishes the seating
            await conn.hub.redis.xadd(stream, fields)
        got: list[dict[str, Any]] = []

        def collect(m: dict[str, Any]) -> bool:
            got.append(m)
            return m["kind"] == "update" and any(e["type"] == "PlayerReady" and e["player"] == "bob"
                                                 for e in m.get("events") or ())
        await ws.expect(collect, "the seating and the Ready updates")
        text = json.dumps(got)
        seated = [e for m in got for e in m.get("events") or () if e["type"] == "PlayerSeated"]
        assert {e["player"] for e in seated} == {"alice", "bob"} and all("level" in e for e in seated)
        assert balances_in(got) == []
        assert not re.search(r"\b(123457|98765)\b", text), "a balance reached the spectator"

    async def main() -> None:
        r = aredis()  # the engine's lobby seated both at table t1 (its read model, engine/service/lobby_notes.py)
        await r.hset(keys.table_info_key("t1"), mapping={"room": "points", "a": "alice", "b": "bob", "n": "1",
                                                         "match": "t1-1", "status": "seated"})
        await r.aclose()
        await _with_connection(aredis, {"t1-1": 1}, body, player="watcher", role="spectator")

    asyncio.run(main())

