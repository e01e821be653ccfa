"""Fast tests of the gateway's parts: tokens, client message validation (impersonation and
non-player commands refused), spectator redaction equal to the engine's spectator view,
the committed JSON Schemas, the engine command ids, and the lobby's Lua on a real Redis."""

from __future__ import annotations

import json
import random
import time

import jwt
import pytest

from gateway import channels, protocol, tokens
from gateway.spectate import spectator_event, spectator_view

SECRET = b"unit-secret-0123456789abcdef0123456789"


# -- tokens -----------------------------------------------------------------------------------
def test_token_round_trip_and_claims():
    t = tokens.mint(SECRET, "alice", role="spectator", ttl_seconds=60, room="points")
    ident = tokens.verify(SECRET, t)
    assert (ident.player, ident.role, ident.room) == ("alice", "spectator", "points")
    assert ident.expires_at - int(time.time()) in range(55, 61)


@pytest.mark.parametrize("token, reason", [
    (None, "no token"),
    ("", "no token"),
    ("a.b.c", "not a valid token"),
    (jwt.encode({"sub": "a", "exp": 4102444800}, b"another-secret-0123456789abcdef01", "HS256"), "signature"),
    (jwt.encode({"sub": "a", "exp": 1000}, SECRET, "HS256"), "expired"),
    (jwt.encode({"sub": "a"}, SECRET, "HS256"), "'exp'"),
    (jwt.encode({"exp": 4102444800}, SECRET, "HS256"), "'sub'"),
    (jwt.encode({"sub": "a", "exp": 4102444800, "role": "admin"}, SECRET, "HS256"), "role"),
    (jwt.encode({"sub": "", "exp": 4102444800}, SECRET, "HS256"), "sub"),
    (jwt.encode({"sub": "a" * 101, "exp": 4102444800}, SECRET, "HS256"), "sub"),
    (jwt.encode({"sub": "a", "exp": 4102444800}, SECRET, "HS512"), "not a valid token"),
    (jwt.encode({"sub": "a", "exp": 4102444800}, None, "none"), "not a valid token"),  # alg none
])
def test_bad_tokens_are_refused_with_a_reason(token, reason):
    with pytest.raises(tokens.TokenError) as exc:
        tokens.verify(SECRET, token)
    assert reason in str(exc.value)


def test_secrets_shorter_than_32_bytes_are_refused(tmp_path):
    f = tmp_path / "s"
    f.write_bytes(b"short\n")
    with pytest.raises(ValueError, match="at least 32 bytes"):
        tokens.load_secret(f)
    f.write_bytes(SECRET + b"\n")
    assert tokens.load_secret(f) == SECRET


def test_token_cli_mints_a_verifiable_token(tmp_path, capsys):
    from shuangkou.cli import main

    f = tmp_path / "s"
    f.write_bytes(SECRET)
    assert main(["token", "bob", "--secret-file", str(f), "--role", "spectator", "--ttl", "120"]) == 0
    ident = tokens.verify(SECRET, capsys.readouterr().out.strip())
    assert (ident.player, ident.role) == ("bob", "spectator")
    assert main(["token", "bob", "--secret-file", str(tmp_path / "missing")]) == 2


def test_token_new_secret_writes_32_random_bytes_mode_0600_and_never_overwrites(tmp_path, capsys):
    import os
    import stat

    from shuangkou.cli import main

    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["token", "--new-secret", str(a)]) == 0
    assert main(["token", "--new-secret", str(b)]) == 0
    assert f"--secret-file {a}" in capsys.readouterr().out
    for f in (a, b):
        assert len(f.read_bytes()) == 32 and stat.S_IMODE(os.stat(f).st_mode) == 0o600
        assert tokens.load_secret(f) == f.read_bytes()  # what a gateway reads: all 32 bytes
    assert a.read_bytes() != b.read_bytes()
    # the secret signs tokens a gateway with the same file accepts
    assert main(["token", "carol", "--secret-file", str(a)]) == 0
    assert tokens.verify(a.read_bytes(), capsys.readouterr().out.strip()).player == "carol"
    before = a.read_bytes()
    assert main(["token", "--new-secret", str(a)]) == 2  # a new secret would log everyone out
    assert "exists: not replaced" in capsys.readouterr().err and a.read_bytes() == before
    assert main(["token", "--new-secret", str(tmp_path / "no-dir" / "s")]) == 2
    assert main(["token", "bob", "--new-secret", str(tmp_path / "c")]) == 2  # one or the other
    assert main(["token"]) == 2 and "--new-secret FILE" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


# -- client messages --------------------------------------------------------------------------
@pytest.mark.parametrize("message, code", [
    ({"type": "Play", "player": "bob", "text": "3"}, "not_allowed"),
    ({"type": "Ready", "player": "bob"}, "not_allowed"),
    ({"type": "Ready", "match_id": "m"}, "not_allowed"),
    ({"type": "Sit", "balance": 2_000_000}, "not_allowed"),
    ({"type": "CreateMatch", "config": {}}, "not_allowed"),
    ({"type": "TurnTimeout", "version": 3}, "not_allowed"),
    ({"type": "TrusteeAct", "version": 3}, "not_allowed"),
    ({"type": "Disconnect"}, "not_allowed"),
    ({"type": "Reconnect"}, "not_allowed"),
    ({"type": "Deal"}, "not_allowed"),
    ({"type": "Credit", "amount": 5}, "not_allowed"),
    ({"type": 7}, "bad_command"),
    ({}, "bad_command"),
    ({"type": "Play"}, "bad_command"),
    ({"type": "Play", "text": "3", "cards": [1]}, "bad_command"),
    ({"type": "Play", "cards": [108]}, "bad_command"),
    ({"type": "Pass", "expected_version": -1}, "bad_command"),
    ({"type": "Ready", "extra": 1}, "bad_command"),
    ({"type": "Join"}, "bad_command"),
    ({"type": "Ready", "command_id": "x" * 101}, "bad_command"),
])
def test_client_messages_refused(message, code):
    with pytest.raises(protocol.ClientError) as exc:
        protocol.parse_client_message(json.dumps(message), "alice")
    assert exc.value.code == code


def test_client_message_errors_keep_the_command_id_and_big_or_broken_input_is_bad():
    with pytest.raises(protocol.ClientError) as exc:
        protocol.parse_client_message('{"type": "Pass", "player": "bob", "command_id": "c9"}', "alice")
    assert exc.value.command_id == "c9"
    for raw in ("not json", "[1, 2]", '"x"', "{" + " " * protocol.MAX_MESSAGE_BYTES + "}"):
        with pytest.raises(protocol.ClientError) as exc:
            protocol.parse_client_message(raw, "alice")
        assert exc.value.code == "bad_command"


def test_accepted_messages_and_a_filled_command_id():
    m = protocol.parse_client_message('{"type": "Play", "cards": [3, 57], "expected_version": 4}', "alice")
    assert m.cards == (3, 57) and m.expected_version == 4 and len(m.command_id) == 32
    m = protocol.parse_client_message('{"type": "Ready", "player": "alice", "command_id": "c1"}', "alice")
    assert m.command_id == "c1"
    for t in ("RequestTrustee", "CancelTrustee", "Escape", "Leave", "Sync"):
        assert protocol.parse_client_message(json.dumps({"type": t}), "a").type == t
    assert protocol.parse_client_message('{"type": "Watch", "match": "t1-1"}', "a").match == "t1-1"


def test_engine_command_ids_are_namespaced_per_player():
    ids = {channels.engine_command_id(p, c) for p, c in [("a", "b:c"), ("a:b", "c"), ("ab", "c"), ("a", "bc")]}
    assert len(ids) == 4
    assert not any(i.startswith("lobby:") for i in ids)
    assert channels.client_command_id("a:b", channels.engine_command_id("a:b", "c")) == "c"
    assert channels.client_command_id("a", channels.engine_command_id("a:b", "c")) is None
    cmd = channels.player_command("Ready", "m1", "alice", channels.engine_command_id("alice", "x"))
    assert (cmd.type, cmd.player, cmd.match_id) == ("Ready", "alice", "m1")


# -- spectators --------------------------------------------------------------------------------
def _bot_match_states(seed: int):
    from engine.config import load_config
    from engine.match.commands import CreateMatch, Ready, Sit, Pass, Play
    from engine.service.service import MatchService
    from engine.store.memory import InMemoryEventStore
    from engine.tools.bot import Bot, choose_for

    clock = iter(range(10**6, 10**9, 700))
    svc = MatchService(InMemoryEventStore(), lambda: next(clock), random.Random(seed))
    cfg = load_config("points")
    m = f"m{seed}"
    n = iter(range(10**6))
    svc.execute(CreateMatch(command_id=f"c{next(n)}", match_id=m, config=cfg.to_record()))
    for p in ("a", "b"):
        svc.execute(Sit(command_id=f"c{next(n)}", match_id=m, player=p))
    yield svc.load_state(m)
    for p in ("a", "b"):
        svc.execute(Ready(command_id=f"c{next(n)}", match_id=m, player=p))
    bot = Bot("greedy", random.Random(seed))
    outcome = None
    for _ in range(400):
        st = svc.load_state(m)
        yield st
        if st.phase == "finished":
            return
        p = st.seat(st.turn).player
        choice = choose_for(bot, st, p)
        cmd = (Pass(command_id=f"c{next(n)}", match_id=m, player=p) if choice is None else
               Play(command_id=f"c{next(n)}", match_id=m, player=p, cards=tuple(choice.cards)))
        outcome = svc.execute(cmd)
        assert outcome.rejection is None, outcome.rejection


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_spectator_view_from_a_players_view_is_the_engines_spectator_view(seed):
    from engine.match.events import HandDealt
    from projections.views import redact_event, view_for

    states = list(_bot_match_states(seed))
    assert states[-1].phase == "finished"
    for st in states:
        for p in ("a", "b"):
            derived = json.loads(json.dumps(spectator_view(view_for(st, p)), default=list))
            assert derived == json.loads(json.dumps(view_for(st, None), default=list))
    dealt = HandDealt(match_id="m", seq=4, ts=1, command_id="c", hands=(tuple(range(27)), tuple(range(27, 54))),
                      set_aside=tuple(range(54, 108)), lead_card=3, first=0)
    for p, seat in (("a", 0), ("b", 1)):
        e = spectator_event(redact_event(dealt, p, seat=seat))
        assert e["hands"] == [None, None] and e["lead_card"] is None and e["set_aside"] is None
    # the check can fail: a player's own view is not a spectator's
    assert view_for(states[-2], "a") != view_for(states[-2], None)


# -- schemas -----------------------------------------------------------------------------------
def test_real_views_and_events_validate_and_wrong_ones_do_not():
    import jsonschema

    from engine.store.memory import InMemoryEventStore  # noqa: F401  (the service above uses it)
    from gateway.schemas_gen import load
    from projections.views import view_for

    server = jsonschema.Draft202012Validator(load("server.json"))
    view = jsonschema.Draft202012Validator(load("view.json"))
    states = list(_bot_match_states(4))
    for st in states[::5] + [states[-1]]:
        for p in ("a", "b", None):
            v = json.loads(json.dumps(view_for(st, p), default=list))
            view.validate(v)
            server.validate(protocol.update(st.match_id, st.version, [], v, None))
    bad = json.loads(json.dumps(view_for(states[-1], "a"), default=list))
    bad["hand"] = "3 3"
    assert not view.is_valid(bad)
    assert not server.is_valid({"kind": "lobby", "state": "dancing", "room": None, "table": None, "match": None,
                                "reason": None})
    client = jsonschema.Draft202012Validator(load("client.json"))
    assert client.is_valid({"type": "Play", "text": "3 3", "expected_version": 4})
    assert not client.is_valid({"type": "TurnTimeout", "version": 3})


# -- the lobby's Lua ----------------------------------------------------------------------------
def _lobby_lua(real_redis, now: int = 1000):
    """The lobby script at a fixed clock: (call(op, *args) → decoded reply, notes(player) → notes)."""
    from gateway.lobby import LUA

    script = real_redis.register_script(LUA)

    def call(*args):
        out = script(keys=[], args=[args[0], now, *args[1:]])
        return [x.decode() if isinstance(x, bytes) else x for x in out] if isinstance(out, list) else out

    def notes(p):
        return [json.loads(f[b"m"]) for _id, f in real_redis.xrange(f"sk:{{lobby}}:notes:{p}")]

    return call, notes


@pytest.mark.redis
def test_lobby_lua_pairs_removes_requeues_and_advances(real_redis):
    call, notes = _lobby_lua(real_redis)
    assert call("join", "points", "a")[:1] == ["joined"]
    assert call("join", "points", "a")[:2] == ["queued", "points"]  # joining twice changes nothing
    out = call("join", "points", "b")
    assert out[0] == "joined" and out[3:] == ["t1"]
    assert call("seated", "t1", "t1-2") == 0  # another match: refused
    assert call("seated", "t1", "t1-1") == 1
    assert [n["state"] for n in notes("a")] == ["queued", "seated"]
    assert call("finished", "t1", "t1-1", "") == 1
    assert call("finished", "t1", "t1-1", "") == 0  # once
    settled = json.dumps({"kind": "settled", "match": "t1-1"})
    assert call("advance", "t1", "t1-1", settled, settled) == ["next", "t1-2"]
    assert call("advance", "t1", "t1-1", settled, settled) == []  # once
    assert call("seated", "t1", "t1-2") == 1
    assert [n["kind"] for n in notes("b")][-2:] == ["settled", "lobby"]
    # b not ready → b leaves the room, a waits again (and pairs with c)
    call("join", "points", "c")
    out = call("removed", "t1", "t1-2", "b", "not_ready")
    assert out[0] == "a" and out[1] == "|" and out[2:] == ["t2"]
    assert notes("b")[-1] == {"kind": "lobby", "state": "removed", "room": "points", "table": "t1",
                              "match": "t1-2", "reason": "not_ready", "bot_level": None, "command_id": None}
    assert notes("a")[-1]["state"] == "queued"
    assert call("removed", "t1", "t1-2", "a", "left") == []  # the table is closed
    assert real_redis.hget("sk:{lobby}:player:b", "state") is None
    assert call("dequeue", "c", "left") == 0  # c sits at t2 now
    call("join", "wealth", "d")
    assert call("dequeue", "d", "disconnected") == 1
    assert notes("d")[-1]["reason"] == "disconnected"


@pytest.mark.redis
def test_lobby_lua_both_players_leaving_at_the_settlement_both_leave_the_room(real_redis):
    """Both players Leave after the finish, before the settlement: the table closes and nobody
    goes back to the queue.  One ``leaving`` field kept the second leaver only; the first was
    requeued 'opponent_left' with no socket, and seated opposite newcomers (bench/gateway.py)."""
    call, notes = _lobby_lua(real_redis)
    call("join", "points", "a")
    call("join", "points", "b")
    assert call("seated", "t1", "t1-1") == 1 and call("finished", "t1", "t1-1", "") == 1
    assert call("quit", "a") == ["noted", "t1"]
    assert call("quit", "b") == ["noted", "t1"]
    settled = json.dumps({"kind": "settled", "match": "t1-1"})
    assert call("advance", "t1", "t1-1", settled, settled) == ["closed", "|"]
    for p in ("a", "b"):
        assert notes(p)[-1]["state"] == "removed" and notes(p)[-1]["reason"] == "left"
        assert real_redis.hget(f"sk:{{lobby}}:player:{p}", "state") is None
    assert real_redis.llen("sk:{lobby}:queue:points") == 0
    # a table noted by an older gateway (one 'leaving' field) still closes for that player
    call("join", "points", "c")
    call("join", "points", "d")
    assert call("seated", "t2", "t2-1") == 1 and call("finished", "t2", "t2-1", "") == 1
    real_redis.hset("sk:{lobby}:table:t2", "leaving", "c")
    assert call("advance", "t2", "t2-1", settled, settled) == ["closed", "d", "|"]
    assert notes("d")[-1]["reason"] == "opponent_left"


@pytest.mark.redis
def test_lobby_lua_quit_decides_a_leave_wherever_the_player_is(real_redis):
    """``quit``, a Leave in one step: out of the queue; a table whose next match is created
    closes (the other player is requeued); seated in a match: the engine decides; nowhere: {}."""
    call, notes = _lobby_lua(real_redis)
    assert call("quit", "nobody") == []
    call("join", "points", "a")
    assert call("quit", "a") == ["dequeued"] and notes("a")[-1]["reason"] == "left"
    call("join", "points", "a")
    call("join", "points", "b")
    assert call("quit", "a") == ["closed", "t1", "t1-1", "b", "|"]  # being created: closes now
    assert notes("b")[-1]["state"] == "queued" and notes("b")[-1]["reason"] == "opponent_left"
    call("join", "points", "c")  # pairs with b at t2
    assert call("seated", "t2", "t2-1") == 1
    assert call("quit", "c") == ["engine", "t2", "t2-1"]  # before the deal or in play: the engine's
    assert real_redis.hget("sk:{lobby}:player:c", "state") == b"table"


@pytest.mark.redis
def test_lobby_lua_a_leave_the_engine_decides_is_kept_when_the_table_closes_first(real_redis):
    """Both players Leave a match before its deal: each Leave goes to the engine, and the
    lobby may observe the first removal alone (the second one after, or never: both sockets
    closed).  The table closes then, and the second leaver leaves the room with it: requeued
    'opponent_left' with no socket, they were seated opposite newcomers until their grace
    ran out (bench/gateway.py, a client waiting for the opponent's Ready).  The closing step
    lists them with those who leave the match, so the lobby sends their Leave too (the
    session's may not go out once the table is closed; the engine's second is a duplicate)."""
    call, notes = _lobby_lua(real_redis)
    call("join", "points", "a")
    call("join", "points", "b")
    assert call("seated", "t1", "t1-1") == 1
    assert call("quit", "a") == ["engine", "t1", "t1-1"]
    assert call("quit", "b") == ["engine", "t1", "t1-1"]
    assert call("removed", "t1", "t1-1", "a", "left") == ["b", "|"]  # b leaves the match, not requeued
    assert call("removed", "t1", "t1-1", "b", "left") == []  # the table is closed: nothing more
    for p in ("a", "b"):
        assert notes(p)[-1]["state"] == "removed" and notes(p)[-1]["reason"] == "left"
        assert real_redis.hget(f"sk:{{lobby}}:player:{p}", "state") is None
    assert real_redis.llen("sk:{lobby}:queue:points") == 0


@pytest.mark.redis
def test_lobby_lua_a_leave_the_engine_refused_counts_for_nothing(real_redis):
    """A Leave during play is refused by the engine (R-12: leaving then is an escape): the
    player plays on.  When the match finishes (here the opponent escapes) the table closes for
    the escaper alone, and the player who had asked goes back to the queue as before."""
    call, notes = _lobby_lua(real_redis)
    call("join", "points", "c")
    call("join", "points", "d")
    assert call("seated", "t1", "t1-1") == 1
    assert call("quit", "c") == ["engine", "t1", "t1-1"]  # refused by the engine: dealt already
    assert call("finished", "t1", "t1-1", "d") == 1  # d escapes
    settled = json.dumps({"kind": "settled", "match": "t1-1"})
    assert call("advance", "t1", "t1-1", settled, settled) == ["closed", "c", "|"]
    assert notes("c")[-1]["state"] == "queued" and notes("c")[-1]["reason"] == "opponent_left"
    assert notes("d")[-1]["reason"] == "escaped"
    # and it is not carried to the table's next match either (another room: c waits in this one)
    call("join", "wealth", "e")
    call("join", "wealth", "f")
    assert call("seated", "t2", "t2-1") == 1
    assert call("quit", "e") == ["engine", "t2", "t2-1"]
    assert call("finished", "t2", "t2-1", "") == 1
    assert call("advance", "t2", "t2-1", settled, settled) == ["next", "t2-2"]
    assert call("seated", "t2", "t2-2") == 1
    assert call("removed", "t2", "t2-2", "f", "not_ready") == ["e", "|"]
    assert notes("e")[-1]["reason"] == "opponent_left"


@pytest.mark.parametrize("raw, field", [
    ('{"type": "Play", "cards": [999]}', "cards.0: a card id is 0–107"),
    ('{"type": "Play", "text": 5}', "text"),
    ('{"type": "Pass", "expected_version": -1}', "expected_version"),
])
def test_gateway_bad_command_reasons_are_readable(raw, field):
    """A reviewer's finding: refusals ended in pydantic's documentation URL line only."""
    from gateway import protocol

    with pytest.raises(protocol.ClientError) as err:
        protocol.parse_client_message(raw, "a")
    assert err.value.code == "bad_command" and field in err.value.reason
    assert "pydantic.dev" not in err.value.reason and "For further information" not in err.value.reason


@pytest.mark.parametrize("ctype, fields, needle", [
    ("Ready", {"client_seed": "\x00bad"}, "client_seed: a client seed holds printable characters only"),
    ("Ready", {"client_seed": "x" * 65}, "client_seed"),
    ("Pass", {"expected_version": 2**70}, "expected_version"),
])
def test_engine_commands_the_gateway_builds_are_refused_with_readable_reasons(ctype, fields, needle):
    from engine.match.errors import BadCommand
    from gateway import channels

    with pytest.raises(BadCommand) as err:
        channels.player_command(ctype, "m", "a", "c", **fields)
    assert needle in str(err.value) and "pydantic.dev" not in str(err.value)


@pytest.mark.redis
def test_lobby_lua_bot_table_keeps_its_level(real_redis):
    """``gateway --bots``: the bot's table keeps the level it was seated with, and the seated
    note names it (the browser shows "bot · hard"); a table of two people names none."""
    call, notes = _lobby_lua(real_redis, now=10_000)
    call("join", "points", "solo")
    table, bot = call("bot", "points", 0, "hard")
    assert bot.startswith("bot-") and real_redis.hget(f"sk:{{lobby}}:table:{table}", "bot_level") == b"hard"
    assert call("seated", table, f"{table}-1") == 1
    assert notes("solo")[-1]["bot_level"] == notes(bot)[-1]["bot_level"] == "hard"
    call("join", "points", "p1")
    made = call("join", "points", "p2")
    assert call("seated", made[3], f"{made[3]}-1") == 1
    assert notes("p1")[-1]["state"] == "seated" and notes("p1")[-1]["bot_level"] is None


def _gateway_modules_with_examples() -> list[str]:
    import pkgutil
    from pathlib import Path

    import gateway

    return [f"gateway.{m.name}" for m in pkgutil.iter_modules(gateway.__path__)
            if ">>>" in (Path(gateway.__path__[0]) / f"{m.name}.py").read_text(encoding="utf-8")]


@pytest.mark.parametrize("module", _gateway_modules_with_examples())
def test_the_gateways_docstring_examples_hold(module):
    """Every example in a gateway module's docstrings runs as written (doctest)."""
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0, (module, result)


def test_lobby_notes_name_the_join_or_leave_that_caused_them(real_redis):
    """Issue 34 §7: a ``lobby`` message carries the command_id of the player's Join or Leave
    that caused it, else null (the partner's seating, a note of an older gateway's call)."""
    from gateway import protocol

    call, notes = _lobby_lua(real_redis)
    assert call("join", "points", "a", "join-a")[:1] == ["joined"]
    assert notes("a")[-1]["command_id"] == "join-a"
    assert call("quit", "a", "leave-a") == ["dequeued"]
    assert notes("a")[-1]["state"] == "removed" and notes("a")[-1]["command_id"] == "leave-a"
    call("join", "points", "b")  # an older gateway's call: no command id
    assert notes("b")[-1]["command_id"] is None
    assert protocol.lobby("queued", "points", command_id="c")["command_id"] == "c"
    assert protocol.lobby("queued", "points")["command_id"] is None
    r = protocol.rejected("c", "cooldown", "wait", retry_after_ms=5000)
    assert r["retry_after_ms"] == 5000 and "retry_after_ms" not in protocol.rejected("c", "stale", "x")
