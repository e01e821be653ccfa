"""A player's versions never go back (issue 35 §2): the fence of engine/store/publish.lua.

A serve replica cut off from Redis past its lease keeps the writes it had in hand; they may
land after its successor took the bucket over, re-published the command (a duplicate) and
went on.  The fence ``sk:outv:{<player>}`` (match id -> the highest version written, less one
half when only a re-publication wrote it) refuses such an update, and a second copy of one; a
re-publication (marked duplicate) and every other entry pass.  On a real redis-server (the
script's EVAL, its SPUBLISH and its reply as the server gives them).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.config import load_config
from engine.match import commands as c
from engine.service.client import GatewayClient
from engine.service.publish import Publisher, Stale
from engine.service.service import MatchService
from engine.service.shuffle import seeded_random, seeded_server_seeds
from engine.store import keys
from engine.store.memory import InMemoryEventStore
from engine.tools.bot import Bot, choose_for

pytestmark = pytest.mark.redis

CONFIG = load_config("points").to_record()


def service() -> MatchService:
    clock = iter(range(1_000_000, 10**12, 1000))
    return MatchService(InMemoryEventStore(), lambda: next(clock), seeded_random(1),
                        server_seeds=seeded_server_seeds(1))


def played(svc: MatchService, moves: int, start: bool = True) -> list[tuple[c.CommandBase, Any]]:
    """Match m1 (players a and b) dealt (``start``) and ``moves`` more turns played: each
    command and its outcome."""
    import random

    out = []
    if start:
        for cmd in (c.CreateMatch(command_id="c0", match_id="m1", config=CONFIG),
                                 c.Sit(command_id="c1", match_id="m1", player="a"),
                                 c.Sit(command_id="c2", match_id="m1", player="b"),
                                 c.Ready(command_id="c3", match_id="m1", player="a"),
                                 c.Ready(command_id="c4", match_id="m1", player="b")):
            out.append((cmd, svc.execute(cmd)))
    bot = Bot("greedy", random.Random(1))
    for _ in range(moves):
        s = svc.load_state("m1")
        p = s.current_player
        choice = choose_for(bot, s, p)
        cid = f"t{s.version}"
        cmd = (c.Pass(command_id=cid, match_id="m1", player=p, expected_version=s.version)
               if choice is None else
               c.Play(command_id=cid, match_id="m1", player=p, cards=list(choice.cards),
                      expected_version=s.version))
        out.append((cmd, svc.execute(cmd)))
    return out


def versions_read(r: Any, player: str) -> list[tuple[int, bool]]:
    """(version, duplicate) of each update on the player's stream, in stream order."""
    return [(m.version, bool(m.body.get("duplicate"))) for m in GatewayClient(r).updates(player)
            if m.kind == "update" and m.version is not None]


def test_a_stale_replicas_late_update_is_refused_after_its_successors(real_redis) -> None:
    r = real_redis
    svc = service()
    history = played(svc, 4)
    new, stale = Publisher(r, consumer="s1"), Publisher(r, consumer="s2")
    for cmd, outcome in history[:-1]:  # s2 owns the bucket
        stale.publish(cmd, outcome)
    # s2 decided the last command, then was cut off: its writes wait in its socket
    late_cmd, late_outcome = history[-1]
    late = stale.outputs(late_cmd, late_outcome)
    # s1 took the bucket over: the command again (a duplicate, re-published), then the next ones
    again = svc.execute(late_cmd)
    assert again.duplicate
    new.publish(late_cmd, again)
    for cmd, outcome in played(svc, 3, start=False):
        new.publish(cmd, outcome)
    top = int(svc.load_state("m1").version)
    assert top > int(late_outcome.state.version)
    # the heal: s2's writes land
    replies = stale.write(late, raise_on_error=False)
    updates = [(w, rep) for w, rep in zip(late, replies) if w.fields.get("kind") == "update"]
    assert updates and all(rep == Stale(top) for _w, rep in updates)
    assert stale.stats.fenced == len(updates) and new.stats.fenced == 0
    for player in ("a", "b"):
        seen = versions_read(r, player)
        fresh = [v for v, dup in seen if not dup]
        assert fresh == sorted(fresh) and fresh[-1] == top  # never back, the newest last
        assert (int(again.state.version), True) in seen  # the re-publication is written
        assert int(r.hget(keys.outbox_versions_key(player), "m1")) == top
        assert 0 < r.ttl(keys.outbox_versions_key(player)) <= Publisher(r, consumer="x").outbox_ttl  # type: ignore[operator]


def test_without_the_fence_the_player_would_read_it_going_back(real_redis) -> None:
    """The control: the same late write, its fence left out (a plain XADD), takes the player back."""
    r = real_redis
    svc = service()
    history = played(svc, 4)
    pub = Publisher(r, consumer="s1")
    for cmd, outcome in history:
        pub.publish(cmd, outcome)
    old_cmd, old_outcome = history[-3]
    unfenced = [w._replace(version=None) for w in pub.outputs(old_cmd, old_outcome) if w.fields.get("kind") == "update"]
    pub.write(unfenced)
    fresh = [v for v, dup in versions_read(r, "a") if not dup]
    assert fresh != sorted(fresh)


def test_the_fence_is_per_match_and_only_for_updates(real_redis) -> None:
    r = real_redis
    pub = Publisher(r, consumer="s1")
    a = keys.outbox_key("a")

    def update(match: str, v: int, duplicate: bool = False) -> Any:
        return pub._delivery(a, {"kind": "update", "match": match, "command_id": f"{match}:{v}", "version": v,
                                 "body": b""}, v, duplicate)

    assert not isinstance(pub.write([update("m1", 9)])[0], Stale)
    assert not isinstance(pub.write([update("m2", 3)])[0], Stale)  # another match: its own fence
    assert pub.write([update("m1", 4)]) == [Stale(9)]
    assert not isinstance(pub.write([update("m1", 4, duplicate=True)])[0], Stale)  # a re-publication
    assert pub.write([update("m1", 9)]) == [Stale(9)]  # the same version again: written once
    rejected = pub._delivery(a, {"kind": "rejected", "match": "m1", "command_id": "x", "version": 2})
    assert rejected.version is None and not isinstance(pub.write([rejected])[0], Stale)
    assert [int(f[b"version"]) for _i, f in r.xrange(a)] == [9, 3, 4, 2]
    assert {k: int(v) for k, v in r.hgetall(keys.outbox_versions_key("a")).items()} == {b"m1": 9, b"m2": 3}


def test_a_round_written_again_after_its_reply_was_lost_writes_each_update_once(real_redis) -> None:
    """A publication whose reply is lost after the server ran it is sent again whole (a
    Cluster's ``wire.by_node`` re-sends a node's commands): each update is on the player's
    stream once, its second copy refused (:class:`Stale` at its own version); the entries
    that carry no version (the report) are written again, as every plain write is."""
    r = real_redis
    svc = service()
    pub = Publisher(r, consumer="s1")
    cmd, outcome = played(svc, 2)[-1]
    round_ = pub.outputs(cmd, outcome, reply_to=keys.reply_key("round"))
    top = int(outcome.state.version)
    assert not any(isinstance(x, (Stale, Exception)) for x in pub.write(round_))
    again = pub.write(round_)
    assert [x for w, x in zip(round_, again) if w.version is not None] == [Stale(top), Stale(top)]
    assert not any(isinstance(x, (Stale, Exception)) for w, x in zip(round_, again) if w.version is None)
    for player in ("a", "b"):
        assert [v for v, _dup in versions_read(r, player)].count(top) == 1
    assert r.xlen(keys.reply_key("round")) == 2
    assert pub.stats.fenced == 2


def test_a_re_publication_at_the_current_version_lets_that_versions_one_update_through(real_redis) -> None:
    """A re-publication (a duplicate command answered again: its old events, the match's current
    version V) can reach the stream before the update of the command that made V (a timer's
    redelivered command while the inbox's pipeline is still on its way).  That update is written,
    once; what is below V stays refused."""
    r = real_redis
    svc = service()
    history = played(svc, 4)
    pub = Publisher(r, consumer="s1")
    for cmd, outcome in history[:-1]:
        pub.publish(cmd, outcome)
    made, made_outcome = history[-1]  # made V; its updates not out yet
    top = int(made_outcome.state.version)
    old_cmd, _old = history[-2]
    again = svc.execute(old_cmd)  # the earlier command once more: a duplicate, at V
    assert again.duplicate and int(again.state.version) == top
    pub.publish(old_cmd, again)
    late = pub.outputs(made, made_outcome)
    assert not any(isinstance(x, (Stale, Exception)) for x in pub.write(late))  # V's own update
    assert pub.write(late) == [Stale(top), Stale(top)]  # not twice
    below = [w for w in pub.outputs(*history[-2]) if w.version is not None]
    assert pub.write(below) == [Stale(top), Stale(top)]
    for player in ("a", "b"):
        mine = [(m.command_id, m.version, bool(m.body.get("duplicate"))) for m in GatewayClient(r).updates(player)
                if m.kind == "update"]
        assert mine[-2:] == [(old_cmd.command_id, top, True), (made.command_id, top, False)]
        assert int(r.hget(keys.outbox_versions_key(player), "m1")) == top


def test_a_fenced_update_still_wakes_the_reader(real_redis) -> None:
    """The notice (SPUBLISH of the stream's name) goes out from the script."""
    r = real_redis
    pub = Publisher(r, consumer="s1")
    ps = r.pubsub()
    ps.ssubscribe(keys.outbox_key("a"))
    ps.get_message(timeout=1.0)  # the subscription's confirmation
    pub.write([pub._delivery(keys.outbox_key("a"), {"kind": "update", "match": "m1", "command_id": "c",
                                                      "version": 1, "body": b""}, 1)])
    got = ps.get_message(timeout=2.0)
    ps.close()
    assert got is not None and got["type"] == "smessage" and got["channel"] == keys.outbox_key("a").encode()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(order=st.lists(st.tuples(st.integers(1, 12), st.booleans()), min_size=1, max_size=25))
def test_whatever_the_order_of_the_writes_the_stream_never_goes_back(real_redis, order) -> None:
    """Updates and re-publications (``True``: duplicate, at the match's current version) in any
    order: every re-publication is written; an update only above every update written before
    it and not below a re-publication's version, and at most once per version."""
    r = real_redis
    r.delete(keys.outbox_key("a"), keys.outbox_versions_key("a"))
    pub = Publisher(r, consumer="s1")
    for v, dup in order:
        pub.write([pub._delivery(keys.outbox_key("a"), {"kind": "update", "match": "m1", "command_id": f"c{v}",
                                                          "version": v, "body": b"", "dup": int(dup)}, v, dup)],
                  raise_on_error=False)
    written = [(int(f[b"version"]), f[b"dup"] == b"1") for _i, f in r.xrange(keys.outbox_key("a"))]
    kept, high, top = [], 0, 0  # the highest update written, and the highest version written at all
    for v, dup in order:
        if dup or (v > high and v >= top):
            kept.append((v, dup))
            high, top = (high if dup else v), max(top, v + (0 if dup else 1))
    assert written == kept
    fresh = [v for v, dup in written if not dup]
    assert fresh == sorted(set(fresh))  # never back, never twice
    assert pub.stats.fenced == len(order) - len(kept)


# -- expiry (engine/store/keys.py "Expiry") ---------------------------------------------------
def _slack(ttl: int) -> int:
    return min(ttl // 10, 3600)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ttl=st.sampled_from([1, 5, 9, 10, 600, 86_400, 200_000]),
       left=st.one_of(st.none(), st.floats(0.02, 1.0)), fence_left=st.one_of(st.none(), st.floats(0.02, 1.0)),
       fresh_fence=st.booleans())
def test_after_a_fenced_update_both_keys_live_at_least_ttl_less_the_slack(real_redis, ttl, left, fence_left,
                                                                           fresh_fence) -> None:
    """Whatever the keys' remaining times before it (None: no TTL), after an update the stream
    and its fence each expire no sooner than ``ttl - min(ttl // 10, 3600)`` s and no later than
    ``ttl`` s from now."""
    r = real_redis
    a, fence = keys.outbox_key("a"), keys.outbox_versions_key("a")
    r.delete(a, fence)
    pub = Publisher(r, consumer="s1", outbox_ttl=ttl)
    r.xadd(a, {"kind": "update"})
    r.hset(fence, "m0", 1)
    for key, share in ((a, left), (fence, fence_left)):
        if share is not None:
            r.pexpire(key, max(1, int(ttl * 1000 * share)))
    # 1: a re-publication at the fence's version, written without the fence's HSET
    version = 2 if fresh_fence else 1
    r.hset(fence, "m1", 1)
    assert not isinstance(pub.write([pub._delivery(a, {"kind": "update", "match": "m1", "command_id": "c",
                                                       "version": version, "body": b""}, version,
                                                   duplicate=not fresh_fence)])[0], Stale)
    floor_ms = (ttl - _slack(ttl)) * 1000 - 1000  # a second for the test's own round trips
    for key in (a, fence):
        assert floor_ms <= r.pttl(key) <= ttl * 1000, (key, r.pttl(key))


def test_a_fresh_ttl_is_not_written_again_by_each_update(own_real_redis) -> None:
    """An update whose keys' TTLs have run down less than the slack sends no EXPIRE (nothing
    replicated for the TTL); the first update of a new stream does, and so does one after the
    slack has run down.  (A server of its own: the counts are server-wide.)"""
    r = own_real_redis
    a, fence = keys.outbox_key("a"), keys.outbox_versions_key("a")
    pub = Publisher(r, consumer="s1", outbox_ttl=86_400)

    def expires(version: int) -> int:
        before = int(r.info("commandstats").get("cmdstat_expire", {}).get("calls", 0))
        pub.write([pub._delivery(a, {"kind": "update", "match": "m1", "command_id": f"c{version}",
                                     "version": version, "body": b""}, version)])
        return int(r.info("commandstats").get("cmdstat_expire", {}).get("calls", 0)) - before

    assert expires(1) == 2  # a new stream and fence: both get their TTL
    assert [expires(v) for v in range(2, 12)] == [0] * 10
    r.pexpire(fence, (86_400 - 3600) * 1000 - 5000)  # the fence's TTL has run down an hour
    assert expires(12) == 2
    assert r.pttl(a) > (86_400 - 60) * 1000 and r.pttl(fence) > (86_400 - 60) * 1000
    r.persist(a)  # a stream without a TTL (written by a plain XADD) gets one again
    assert expires(13) == 2 and r.ttl(a) > 0


def test_the_script_is_sent_without_its_comment_lines() -> None:
    """An EVAL carries publish.lua's text each time: its documentation stays in the file, the
    lines kept (Lua's error messages name the file's lines)."""
    import importlib.resources

    from engine.service.publish import PUBLISH_LUA

    source = importlib.resources.files("engine.store").joinpath("publish.lua").read_text(encoding="utf-8")
    assert PUBLISH_LUA.count("\n") == source.count("\n")
    assert not any(line.lstrip().startswith("--") for line in PUBLISH_LUA.splitlines())
    assert len(PUBLISH_LUA.encode()) < len(source.encode()) / 2


_SCRIPTS = [
    "-- a comment\nreturn 'x'",
    "local s = [[\n-- not a comment: a line of a long string\n]]\nreturn s",
    "local s = [==[\n  -- nor is this\n]==]\nreturn s",
    "--[[ a block\ncomment ]]\nreturn 'y'",
    "local t = {}\n-- a comment\nt[#t + 1] = '--'\nreturn t[1]",
]


@pytest.mark.parametrize("script", _SCRIPTS)
def test_a_script_without_its_comment_lines_returns_what_the_script_returns(real_redis, script) -> None:
    """What is sent (:func:`without_comment_lines`) runs as the file does: a line of a long
    string that starts with ``--`` is kept, and the line count with it."""
    from engine.store.scripts import without_comment_lines

    sent = without_comment_lines(script)
    assert sent.count("\n") == script.count("\n")
    assert real_redis.eval(sent, 0) == real_redis.eval(script, 0)


def test_publish_doctests() -> None:
    import doctest

    import engine.service.publish as publish_module
    from engine.store import scripts

    assert doctest.testmod(publish_module).failed == 0
    sent = doctest.testmod(scripts)  # without_comment_lines: what an EVAL sends
    assert sent.attempted > 0 and sent.failed == 0
