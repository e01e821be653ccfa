"""Fast tests of the gateway's parts: tokens, client message validation (impersonation and
non-player commands refused), spectator redaction equal to the engine's spectator view,
the committed JSON Schemas and the engine command ids."""

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


POLICY = tokens.TokenPolicy(max_lifetime=3600, audience="shuangkou", issuer="rooms.example")
SOON = 4102444800 - 600  # exp for "now" = 4102444200 below


@pytest.mark.parametrize("claims, policy, reason", [
    ({"sub": "a", "exp": 4102444200 + 2592001}, tokens.TokenPolicy(), "runs 2592001 s, longer than this gateway "
                                                                       "takes (2592000 s)"),
    ({"sub": "a", "exp": 4102444200 + 3601, "aud": "shuangkou", "iss": "rooms.example"}, POLICY,
     "the token runs 3601 s"),
    ({"sub": "a", "exp": SOON, "iss": "rooms.example"}, POLICY, "lacks the 'aud' claim"),
    ({"sub": "a", "exp": SOON, "aud": "shuangkou"}, POLICY, "lacks the 'iss' claim"),
    ({"sub": "a", "exp": SOON, "aud": "billing", "iss": "rooms.example"}, POLICY, "not for this gateway"),
    ({"sub": "a", "exp": SOON, "aud": ["billing", "ops"], "iss": "rooms.example"}, POLICY, "not for this gateway"),
    ({"sub": "a", "exp": SOON, "aud": "shuangkou", "iss": "elsewhere"}, POLICY, "not from this gateway's issuer"),
    ({"sub": "a", "exp": SOON, "aud": "shuangkou"}, tokens.TokenPolicy(), "not for this gateway"),  # no aud asked
])
def test_tokens_this_gateways_policy_refuses(claims, policy, reason):
    """--token-max-lifetime, --token-audience, --token-issuer (docs/SECURITY.md): a token minted
    for years, one for another service signing with the same secret, or from another issuer."""
    with pytest.raises(tokens.TokenError) as exc:
        tokens.verify(SECRET, jwt.encode(claims, SECRET, "HS256"), now=4102444200, policy=policy)
    assert reason in str(exc.value) and exc.value.code == "invalid"


def test_a_token_the_policy_asks_for_is_taken():
    ok = {"sub": "a", "exp": 4102444200 + 3600, "iss": "rooms.example"}
    for aud in ("shuangkou", ["billing", "shuangkou"]):
        ident = tokens.verify(SECRET, jwt.encode({**ok, "aud": aud}, SECRET, "HS256"), now=4102444200, policy=POLICY)
        assert ident.player == "a"
    assert tokens.verify(SECRET, tokens.mint(SECRET, "b", ttl_seconds=3600, audience="shuangkou",
                                             issuer="rooms.example"), policy=POLICY).player == "b"
    with pytest.raises(ValueError, match="positive"):
        tokens.TokenPolicy(max_lifetime=0)
    with pytest.raises(ValueError, match="empty"):
        tokens.TokenPolicy(audience=" ")


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
    assert main(["token", "bob", "--secret-file", str(f), "--audience", "shuangkou", "--issuer", "rooms"]) == 0
    policy = tokens.TokenPolicy(audience="shuangkou", issuer="rooms")
    assert tokens.verify(SECRET, capsys.readouterr().out.strip(), policy=policy).player == "bob"


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


@pytest.mark.parametrize("raw", ['{"command_id": "c1"}', '{"command_id": "c1", "type": 5}',
                                 '{"command_id": "c1", "type": null}', '{"command_id": "c1", "type": ""}',
                                 '{"command_id": "c1", "type": ["Play"]}'])
def test_a_message_without_a_type_is_told_so(raw: str) -> None:
    """No type, or one that is no message name: bad_command, said as such (not "5 is not a
    message a client may send", which is what a name of no client message gets: not_allowed)."""
    with pytest.raises(protocol.ClientError) as exc:
        protocol.parse_client_message(raw, "alice")
    assert (exc.value.code, exc.value.command_id) == ("bad_command", "c1")
    assert exc.value.reason.startswith('a message needs a "type": one of ') and "Play" in exc.value.reason


@pytest.mark.parametrize("name, code, said", [
    ("TurnTimeout", "not_allowed", "is not a message a client may send"),  # the clock's
    ("CreateMatch", "not_allowed", "is not a message a client may send"),  # the operator's
    ("OpenTable", "not_allowed", "is not a message a client may send"),  # the lobby's managers'
    ("StartHand", "not_allowed", "is not a message a client may send"),  # a series'
    ("Dance", "bad_command", "is not a message (one of "),  # nobody's: an unknown type
    ("play", "bad_command", "is not a message (one of "),
])
def test_a_type_no_client_may_send_is_not_allowed_and_an_unknown_one_is_bad(name: str, code: str, said: str) -> None:
    """docs/PROTOCOL.md "Rejection codes": an engine command a client may not send is
    ``not_allowed``; a type that names no message is malformed, ``bad_command``."""
    with pytest.raises(protocol.ClientError) as exc:
        protocol.parse_client_message(json.dumps({"command_id": "c1", "type": name}), "alice")
    assert (exc.value.code, exc.value.command_id) == (code, "c1")
    assert exc.value.reason.startswith(f"{name!r} {said}")


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


def test_lobby_messages_and_refusals_carry_the_command_id_and_retry_after_ms():
    """Issue 34 §7: a ``lobby`` message carries the client's command_id of the Join or Leave
    that caused it, else null; a ``cooldown`` refusal carries ``retry_after_ms``."""
    from gateway import protocol

    assert protocol.lobby("queued", "points", command_id="c")["command_id"] == "c"
    assert protocol.lobby("queued", "points")["command_id"] is None
    r = protocol.rejected("c", "cooldown", "wait", retry_after_ms=5000)
    assert r["retry_after_ms"] == 5000 and "retry_after_ms" not in protocol.rejected("c", "stale", "x")


@pytest.mark.parametrize("flags, needle", [
    (["--trusted-proxy", "10.0.0.0/33"], "--trusted-proxy: "),
    (["--trusted-proxy", "127.0.0.1", "--trusted-proxy", "proxy.example"], "--trusted-proxy: 'proxy.example'"),
    (["--max-sockets-per-watcher", "0"], "--max-sockets-per-watcher must be at least 1"),
])
def test_the_gateways_edge_flags_are_refused_by_name(flags, needle):
    """A bad edge flag is refused with the flag's name (the CLI prints it and exits 2)."""
    import argparse

    from shuangkou.cli import gateway as cli_gateway

    parser = argparse.ArgumentParser()
    cli_gateway.add_arguments(parser)
    with pytest.raises(ValueError) as err:
        cli_gateway.edge_settings(parser.parse_args(["--secret-file", "unused", *flags]))
    assert str(err.value).startswith(needle), str(err.value)
