"""Quick phrases and emotes (快捷語, issue 39 item 5; docs/PROTOCOL.md §8 "Quick phrases").

The pure part (the engine's decision, the publisher's entries, the gateway's limiter) as tables;
then the real stack over real WebSockets: the opponent and a spectator see a Say, the sender's
copy carries its command id, nothing reaches the match log, and every refusal (unknown phrase,
too soon, a spectator, a player not seated) has its code."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.match.commands import EMOTES, PHRASES, SAY_IDS, PhraseId, Say, parse_command
from engine.match.decide import decide
from engine.match.errors import BadCommand, MatchOver, NotSeated, Rejected
from engine.match.state import MatchState, Seat
from engine.match.decide import Context
from engine.service.publish import say_entries
from gateway.say import SAY_INTERVAL_S, SayLimiter, known
from tests.gateway_support import Client, kind, lobby, start_stack
from tests.strategies import match_specs, play_match


def _state(phase: str, players: tuple[str, ...] = ("a", "b")) -> MatchState:
    seats = tuple(Seat(player=p) for p in players) + (None,) * (2 - len(players))
    return MatchState(match_id="m", phase=phase, version=5, seats=seats)  # type: ignore[arg-type]


def test_the_catalogue_is_fixed_about_8_phrases_and_6_emotes():
    from typing import get_args

    assert len(PHRASES) == 8 and len(EMOTES) == 6 and len(set(SAY_IDS)) == 14
    assert get_args(PhraseId) == SAY_IDS
    assert all(known(p) for p in SAY_IDS) and not known("hello") and not known("")


@pytest.mark.parametrize("phase, player, refused", [
    ("seating", "a", None),
    ("playing", "b", None),
    ("playing", "c", NotSeated),  # not a player of this match
    ("seating", "c", NotSeated),
    ("finished", "a", MatchOver),  # only a running match
    ("abandoned", "a", MatchOver),
])
def test_say_is_decided_on_the_seat_and_appends_nothing(phase, player, refused):
    state = _state(phase)
    command = Say(command_id="c1", match_id="m", player=player, phrase="thanks")
    if refused is None:
        assert decide(state, command, Context(now_ms=1)) == []
    else:
        with pytest.raises(refused):
            decide(state, command, Context(now_ms=1))


def test_an_unknown_phrase_is_a_bad_command_at_the_engine_too():
    with pytest.raises(BadCommand):
        parse_command({"type": "Say", "command_id": "c", "match_id": "m", "player": "a", "phrase": "<b>hi</b>"})


def test_the_publisher_writes_one_say_entry_to_each_player_and_nothing_else():
    state = _state("playing")
    entries = say_entries(Say(command_id="gw:a:s1", match_id="m", player="a", phrase="emote_smile"), state)
    assert [p for p, _ in entries] == ["b", "a"]
    for _, fields in entries:
        assert fields["kind"] == "say" and fields["match"] == "m" and fields["command_id"] == "gw:a:s1"


@pytest.mark.parametrize("times, verdicts", [
    ([0.0, 0.1, 2.9, 3.0, 3.1, 6.0], [0, 2900, 100, 0, 2900, 0]),
    ([10.0, 13.5, 14.0, 16.4], [0, 0, 2500, 100]),
])
def test_the_limiter_allows_one_say_every_3_seconds(times, verdicts):
    lim = SayLimiter()
    assert SAY_INTERVAL_S == 3.0
    assert [lim.take("p", t) for t in times] == verdicts


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(spec=match_specs(), who=st.sampled_from(["a", "b", "x"]), phrase=st.sampled_from(SAY_IDS))
def test_a_say_at_any_step_of_any_match_is_refused_only_off_the_table(spec, who, phrase):
    """At every state of a random match (R-13 chaos included): a Say decides no event; it is
    refused not_seated from anyone not seated in the match, match_over once it is over, and
    accepted from a seated player before that."""
    run = play_match(spec)
    outcomes = {"accepted": 0, "not_seated": 0, "match_over": 0}
    for step in run.steps:
        state = step.outcome.state
        say = Say(command_id="s", match_id=state.match_id, player=who, phrase=phrase)
        try:
            assert decide(state, say, Context(now_ms=1)) == []
            outcome = "accepted"
        except Rejected as rej:
            outcome = rej.code
        seated = state.seat_of(who) is not None
        expected = "not_seated" if not seated and not state.over else "match_over" if state.over else "accepted"
        assert outcome == expected, (state.phase, who, outcome)
        outcomes[outcome] += 1
    assert outcomes["match_over"] >= 1 and (who == "x" or outcomes["accepted"] >= 1)


# -- the real stack ---------------------------------------------------------------------------

ROOMS: dict[str, dict[str, Any]] = {"chat": {"trustee_delay_seconds": 0.0}}


@pytest.fixture(scope="module")
def stack(redis_server, tmp_path_factory, deployment):
    s = start_stack(redis_server.db_url(2), redis_server.db_url(3), tmp_path_factory.mktemp("say"), ROOMS,
                    deployment)
    try:
        s.start_gateway("A")
        yield s
    finally:
        s.stop()


def _events(stack, match: str) -> list[Any]:
    import redis

    from engine.store.redis_store import RedisEventStore

    with redis.Redis.from_url(stack.store_url) as r:
        return list(RedisEventStore(r).load(match))


def said(player: str, phrase: str):
    return lambda m: m.get("kind") == "say" and m["player"] == player and m["phrase"] == phrase


@pytest.mark.redis
@pytest.mark.worker
@pytest.mark.slow
def test_a_say_reaches_the_opponent_and_the_spectators_and_never_the_match_log(stack):
    gw = stack.gateways[0]

    async def main() -> None:
        ca = await Client.connect(gw.url, stack.token("say-alice"), "say-alice")
        cb = await Client.connect(gw.url, stack.token("say-bob"), "say-bob")
        for c in (ca, cb):
            await c.expect(kind("welcome"))
            await c.send({"type": "Join", "room": "chat"})
        m = (await ca.expect(lobby("seated"), what="seated"))["match"]
        await cb.expect(lobby("seated"), what="seated")
        spec = await Client.connect(gw.url, stack.token("say-fan", role="spectator"), "say-fan")
        await spec.expect(kind("welcome"))
        await spec.send({"type": "Watch", "match": m})
        await spec.expect(kind("update"), what="the spectator's view")
        await ca.expect(kind("update"), what="alice's view")
        before = len(_events(stack, m))

        await ca.send({"type": "Say", "phrase": "hurry_up", "command_id": "s1"})
        mine = await ca.expect(said("say-alice", "hurry_up"), what="alice's own say")
        theirs = await cb.expect(said("say-alice", "hurry_up"), what="alice's say at bob")
        watched = await spec.expect(said("say-alice", "hurry_up"), what="alice's say at the spectator")
        assert mine == {"kind": "say", "match": m, "player": "say-alice", "phrase": "hurry_up", "command_id": "s1"}
        assert theirs == watched == {**mine, "command_id": None}

        # one every 3 s: a second at once is refused with when to try again, and reaches nobody
        await ca.send({"type": "Say", "phrase": "thanks", "command_id": "s2"})
        r = await ca.expect(kind("rejected"), what="the rate refusal")
        assert r["code"] == "rate_limited" and r["command_id"] == "s2" and 0 < r["retry_after_ms"] <= 3000

        # bob answers with an emote; an unknown id is refused
        await cb.send({"type": "Say", "phrase": "free text here"}, validate=False)
        r = await cb.expect(kind("rejected"), what="the unknown phrase refusal")
        assert r["code"] == "unknown_phrase" and "free text" not in r["reason"]
        await cb.send({"type": "Say", "phrase": "emote_cool", "command_id": "b1"})
        await ca.expect(said("say-bob", "emote_cool"), what="bob's emote at alice")
        await spec.expect(said("say-bob", "emote_cool"), what="bob's emote at the spectator")

        # a spectator may not Say; nor a player at no table
        await spec.send({"type": "Say", "phrase": "thanks", "command_id": "x1"})
        r = await spec.expect(kind("rejected"), what="the spectator's refusal")
        assert r["code"] == "not_allowed" and r["command_id"] == "x1"
        cc = await Client.connect(gw.url, stack.token("say-carol"), "say-carol")
        await cc.expect(kind("welcome"))
        await cc.send({"type": "Say", "phrase": "thanks", "command_id": "c1"})
        r = await cc.expect(kind("rejected"), what="the refusal of a player at no table")
        assert r["code"] == "not_seated" and r["command_id"] == "c1"

        # ephemeral: nothing of it in the match log
        await ca.send({"type": "Sync", "command_id": "y1"})
        await ca.expect(lambda x: x["kind"] == "update" and x["command_id"] == "y1", what="the Sync")
        assert len(_events(stack, m)) == before
        assert not any(m.get("kind") == "say" and m["phrase"] == "thanks" for c in (ca, cb, spec) for m in c.received)
        for c in (ca, cb, spec, cc):
            await c.close()

    asyncio.run(main())


def test_the_codes_and_the_ids_are_documented():
    """docs/PROTOCOL.md §8: the Codes table names unknown_phrase; "Quick phrases" lists every id."""
    from tests.gateway_support import ROOT

    text = (ROOT / "docs" / "PROTOCOL.md").read_text(encoding="utf-8")
    codes = text[text.index("### Codes"):text.index("### Stable fields")]
    assert "| `unknown_phrase` |" in codes and "`retry_after_ms`" in codes
    quick = text[text.index("### Quick phrases"):text.index("### Spectators")]
    assert all(f"`{p}`" in quick for p in SAY_IDS)
