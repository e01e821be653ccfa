"""The inbox consumer (engine/service/inbox.py) and the gateway client (engine/service/client.py),
on fakeredis and on a real redis-server, with the real MatchService (and fakes where a
failure must be provoked)."""

from __future__ import annotations

import json
import threading
import time

import msgpack
import pytest

from engine.service.shuffle import seeded_random
from engine.service.client import GatewayClient, OutMessage
from engine.match.commands import MAX_COMMAND_BYTES, CreateMatch, Pass, Play, Sync, encode_command
from engine.config import load_config
from engine.service.inbox import INTERNAL_ERROR, InboxConsumer
from engine.service.publish import PUBLISH_LUA
from engine.service.service import MatchService
from engine.store import keys, wire
from engine.store.base import WrongVersion
from engine.store.redis_store import RedisEventStore

CONFIG = load_config("points").to_record()


@pytest.fixture(params=["fakeredis", pytest.param("redis", marks=pytest.mark.redis)])
def r(request):
    return request.getfixturevalue({"fakeredis": "fake_redis", "redis": "real_redis"}[request.param])


def make_service(r) -> MatchService:
    return MatchService(RedisEventStore(r), clock=lambda: 1_000_000, rng=seeded_random(7))


@pytest.fixture
def rig(r):
    service = make_service(r)
    # one stream, no channel policy: these tests are about the consumer itself
    return r, service, InboxConsumer(r, service, "w1"), GatewayClient(r, ops=keys.INBOX)


def drain(gw: InboxConsumer) -> int:
    total = 0
    while (n := gw.run_once(block_ms=None, count=50)):
        total += n
    return total


def start_match(client: GatewayClient, gw: InboxConsumer, match_id: str = "m1") -> None:
    client.create_match(match_id, CONFIG)
    client.sit(match_id, "alice")
    client.sit(match_id, "bob")
    client.ready(match_id, "alice")
    client.ready(match_id, "bob")
    assert drain(gw) == 5


def dead_letters(r) -> list[dict]:
    return [{k.decode(): v for k, v in f.items()} for _, f in r.xrange(keys.DEAD_LETTERS)]


# -- the happy path -----------------------------------------------------------------------------
def test_full_flow_updates_are_redacted(rig):
    r, service, gw, client = rig
    start_match(client, gw)
    ups = {p: client.updates(p) for p in ("alice", "bob")}
    for p, msgs in ups.items():
        assert all(m.kind == "update" for m in msgs)
        assert [m.version for m in msgs][-1] == 6  # created, 2 seated, 2 ready, dealt
    dealt_a = ups["alice"][-1].events[-1]
    dealt_b = ups["bob"][-1].events[-1]
    assert dealt_a["type"] == dealt_b["type"] == "HandDealt"
    assert dealt_a["hands"][1] is None and len(dealt_a["hands"][0]) == 27
    assert dealt_b["hands"][0] is None and len(dealt_b["hands"][1]) == 27
    assert dealt_a["set_aside"] is None
    view_a = ups["alice"][-1].view
    state = service.load_state("m1")
    assert sorted(view_a["hand"]["ids"]) == sorted(state.seat(0).hand)
    bob_cards = set(state.seat(1).hand)
    assert not bob_cards & set(view_a["hand"]["ids"])

    # the player on turn plays their lowest single; both hear of it
    on_turn = state.current_player
    other = "bob" if on_turn == "alice" else "alice"
    last = {p: ups[p][-1].id for p in ups}
    card = client.updates(on_turn)[-1].view["hand"]["ids"][0]
    sent = client.play("m1", on_turn, cards=[card])
    assert gw.run_once(block_ms=None) == 1
    for p in (on_turn, other):
        [msg] = client.updates(p, last_id=last[p])
        assert (msg.kind, msg.command_id, msg.version) == ("update", sent.command_id, 7)
        assert msg.events[0]["type"] == "CardsPlayed" and list(msg.events[0]["cards"]) == [card]
        assert msg.body["duplicate"] is False
    assert r.xpending(keys.INBOX, keys.SERVICE_GROUP)["pending"] == 0
    assert gw.stats.accepted == 6


def test_rejection_goes_to_the_player_with_code_and_reason(rig):
    r, service, gw, client = rig
    start_match(client, gw)
    state = service.load_state("m1")
    waiting = "bob" if state.current_player == "alice" else "alice"
    before = client.updates(waiting)[-1].id
    sent = client.pass_("m1", waiting)
    assert gw.run_once(block_ms=None) == 1
    [msg] = client.updates(waiting, last_id=before)
    assert (msg.kind, msg.code, msg.command_id, msg.match_id) == ("rejected", "not_your_turn", sent.command_id, "m1")
    assert msg.reason
    assert service.load_state("m1").version == 6
    assert gw.stats.rejected == 1


def test_a_ready_after_the_deal_is_acked_through_the_inbox(rig):  # issue 36: Ready is idempotent
    r, service, gw, client = rig
    start_match(client, gw)
    before = client.updates("alice")[-1].id
    sent = client.ready("m1", "alice")
    assert drain(gw) == 1
    [msg] = client.updates("alice", last_id=before)
    assert (msg.kind, msg.command_id, msg.match_id, msg.version) == ("ack", sent.command_id, "m1", 6)
    assert service.load_state("m1").version == 6 and client.updates("bob", last_id="0")[-1].version == 6
    assert r.xpending(keys.INBOX, keys.SERVICE_GROUP)["pending"] == 0


def test_reply_to_stream(r):
    gw = InboxConsumer(r, make_service(r), "w1")
    client = GatewayClient(r, ops=keys.INBOX, reply_to="sk:reply:gw-a")
    ok = client.create_match("m1", CONFIG)
    bad = client.sit("nope", "alice")
    client.send(Play(command_id="x", match_id="m1", player="zed", text="3"))
    drain(gw)
    replies = client.replies()
    assert [(m.kind, m.command_id) for m in replies] == [
        ("accepted", ok.command_id), ("rejected", bad.command_id), ("rejected", "x")]
    assert replies[1].code == "unknown_match"
    # only sk:reply:… streams are written
    r.xadd(keys.INBOX, {"c": encode_command(Pass(command_id="p", match_id="m1", player="a")),
                        "reply_to": "sk:{b1}:feed"})
    drain(gw)
    assert r.xlen("sk:{b1}:feed") == 0
    with pytest.raises(ValueError):
        GatewayClient(r, ops=keys.INBOX, reply_to="elsewhere")
    # a player channel entry (a gateway wrote it) may not answer into an operator caller's
    # stream: its reply would pass for the engine's answer to the lobby's AddRoom
    lobby_replies = keys.ops_reply_key("gw-g1")
    r.xadd(keys.INBOX, {"c": encode_command(Sync(command_id="lobby:room:x", match_id="m1", player="a")),
                        "reply_to": lobby_replies})
    drain(gw)
    assert r.xlen(lobby_replies) == 0
    ops = InboxConsumer(r, make_service(r), "w2", stream=keys.OPS)  # the operator channel: its callers'
    r.xadd(keys.OPS, {"c": encode_command(CreateMatch(command_id="o1", match_id="m9", config=CONFIG)),
                      "reply_to": lobby_replies})
    drain(ops)
    assert [f[b"command_id"] for _i, f in r.xrange(lobby_replies)] == [b"o1"]


def test_json_commands_are_accepted(rig):
    r, service, gw, client = rig
    r.xadd(keys.INBOX, {"j": json.dumps({"type": "CreateMatch", "command_id": "j1", "match_id": "mj",
                                         "config": CONFIG})})
    r.xadd(keys.INBOX, {"j": json.dumps({"type": "Sit", "command_id": "j2", "match_id": "mj",
                                         "player": "alice"})})
    assert drain(gw) == 2
    assert service.load_state("mj").version == 2
    assert client.updates("alice")[-1].view["seats"][0]["player"] == "alice"


# -- idempotency and redelivery -------------------------------------------------------------------
def test_duplicate_command_appends_nothing_and_republishes(rig):
    r, service, gw, client = rig
    sent = client.create_match("m1", CONFIG)
    client.send(sent.command)  # a gateway retry
    sit = client.sit("m1", "alice")
    client.send(sit.command)
    assert drain(gw) == 4
    assert service.store.version("m1") == 2
    msgs = client.updates("alice")
    assert [(m.command_id, m.version, m.body["duplicate"]) for m in msgs] == [
        (sit.command_id, 2, False), (sit.command_id, 2, True)]
    assert gw.stats.duplicates == 2


def test_crash_leaves_message_pending_then_reclaim(r):
    service = make_service(r)
    client = GatewayClient(r, ops=keys.INBOX)

    class Crash(BaseException):
        pass

    class CrashAfterExecute:
        def execute(self, command):
            service.execute(command)
            raise Crash

    dying = InboxConsumer(r, CrashAfterExecute(), "dying")
    created = client.create_match("m1", CONFIG)
    with pytest.raises(Crash):
        dying.run_once(block_ms=None, count=1)
    pending = r.xpending(keys.INBOX, keys.SERVICE_GROUP)
    assert pending["pending"] == 1
    assert service.store.version("m1") == 1  # the event was appended before the crash

    live = InboxConsumer(r, service, "live")
    assert live.reclaim(min_idle_ms=0) == 1
    assert r.xpending(keys.INBOX, keys.SERVICE_GROUP)["pending"] == 0
    assert service.store.version("m1") == 1  # nothing appended twice
    assert live.stats.duplicates == 1
    # the dying consumer, restarted under its name, has nothing left to do
    assert InboxConsumer(r, service, "dying").run_once(block_ms=None) == 0
    assert created.command_id


def test_restarted_consumer_finishes_its_own_pending_first(r):
    service = make_service(r)
    client = GatewayClient(r, ops=keys.INBOX)
    client.create_match("m1", CONFIG)
    client.sit("m1", "alice")
    # a consumer reads both and dies without handling them
    _group(r)
    r.xreadgroup(keys.SERVICE_GROUP, "w1", {keys.INBOX: ">"}, count=10)
    client.sit("m1", "bob")
    gw = InboxConsumer(r, service, "w1")  # same name: its backlog first (one at a time), then new messages
    assert gw.run_once(block_ms=None, count=10) == 1
    assert gw.run_once(block_ms=None, count=10) == 1
    assert r.xpending(keys.INBOX, keys.SERVICE_GROUP)["pending"] == 0
    assert gw.run_once(block_ms=None, count=10) == 1
    assert service.store.version("m1") == 3


def _group(r) -> None:
    """Create the service group the way InboxConsumer does (before any gateway exists)."""
    try:
        r.xgroup_create(keys.INBOX, keys.SERVICE_GROUP, id="0", mkstream=True)
    except Exception as exc:
        assert "BUSYGROUP" in str(exc)


def test_too_many_deliveries_go_to_dead_letters(r):
    service = make_service(r)
    client = GatewayClient(r, ops=keys.INBOX)
    _group(r)
    client.create_match("m1", CONFIG)
    r.xreadgroup(keys.SERVICE_GROUP, "ghost", {keys.INBOX: ">"}, count=10)
    gw = InboxConsumer(r, service, "w1", max_deliveries=2)
    for _ in range(2):  # each XAUTOCLAIM is one more delivery: 2, 3
        r.xautoclaim(keys.INBOX, keys.SERVICE_GROUP, "ghost", 0, start_id="0-0")
    assert gw.reclaim(min_idle_ms=0) == 1
    [dead] = dead_letters(r)
    assert b"delivered" in dead["dead_reason"]
    assert service.store.version("m1") == 0
    assert r.xpending(keys.INBOX, keys.SERVICE_GROUP)["pending"] == 0


def test_wrong_version_leaves_message_pending(r):
    class Busy:
        def execute(self, command):
            raise WrongVersion(command.match_id, 1, 2)

    client = GatewayClient(r, ops=keys.INBOX)
    gw = InboxConsumer(r, Busy(), "w1")
    client.create_match("m1", CONFIG)
    assert gw.run_once(block_ms=None) == 0
    assert gw.stats.retried == 1
    assert r.xpending(keys.INBOX, keys.SERVICE_GROUP)["pending"] == 1
    gw.service = make_service(r)
    assert gw.run_once(block_ms=None) == 1  # its own backlog is read again
    assert r.xpending(keys.INBOX, keys.SERVICE_GROUP)["pending"] == 0


# -- malformed input never stops the loop ------------------------------------------------------
def test_malformed_messages_are_dead_lettered_and_the_loop_goes_on(rig):
    """Issue 9: a malformed command attributable to a player is a ``rejected`` (bad_command)
    on that player's stream, counted as a rejection; only messages nobody can be told
    about are dead letters."""
    r, service, gw, client = rig
    r.xadd(keys.INBOX, {"c": b"\xc1 not msgpack"})
    r.xadd(keys.INBOX, {"other": b"no command field"})
    r.xadd(keys.INBOX, {"c": msgpack.packb({"type": "Fly", "command_id": "f1", "match_id": "m1",
                                            "player": "alice"})})
    r.xadd(keys.INBOX, {"c": msgpack.packb({"type": "Play", "command_id": "f2", "match_id": "m1",
                                            "player": "bob", "text": "3 ZZ"})})
    r.xadd(keys.INBOX, {"c": msgpack.packb([1, 2, 3])})
    r.xadd(keys.INBOX, {"j": b"{not json"})
    big = msgpack.packb({"type": "Sit", "command_id": "f3", "match_id": "m1", "player": "carol",
                         "pad": "x" * (MAX_COMMAND_BYTES + 10)})
    r.xadd(keys.INBOX, {"c": big})
    r.xadd(keys.INBOX, {"c": b"x" * (MAX_COMMAND_BYTES + 10)})
    ok = client.create_match("m1", CONFIG)
    assert gw.run_once(block_ms=None, count=100) == 9
    dead = dead_letters(r)
    assert len(dead) == 5
    reasons = [d["dead_reason"].decode() for d in dead]
    assert "not msgpack" in reasons[0]
    assert "unknown inbox entry field" in reasons[1]
    assert "must be a map" in reasons[2]
    assert "not JSON" in reasons[3]
    assert "too large" in reasons[4]
    # over 64 KB: a record of its size and its first 1 KB, never the entry whole (issue 23 item 7)
    assert dead[4].get("truncated") == b"1" and len(dead[4]["c"]) == 1024
    assert int(dead[4]["c_bytes"]) == MAX_COMMAND_BYTES + 10 and int(dead[4]["entry_bytes"]) == MAX_COMMAND_BYTES + 11
    assert dead[0]["c"] == b"\xc1 not msgpack" and dead[0]["dead_code"] == b"bad_command"
    # senders that can be identified hear why, as a rejection
    [fly] = client.updates("alice")
    assert (fly.kind, fly.code, fly.command_id) == ("rejected", "bad_command", "f1")
    [bad_play] = client.updates("bob")
    assert bad_play.command_id == "f2" and "ZZ" in bad_play.reason
    [too_big] = client.updates("carol")
    assert too_big.code == "bad_command" and "too large" in too_big.reason
    assert gw.stats.rejected == 3 and gw.stats.dead == 5
    assert service.store.version("m1") == 1 and ok.command_id
    assert r.xpending(keys.INBOX, keys.SERVICE_GROUP)["pending"] == 0


def test_engine_crash_is_dead_lettered_with_internal_error(r):
    class Buggy:
        def execute(self, command):
            raise ZeroDivisionError("oops")

    client = GatewayClient(r, ops=keys.INBOX)
    gw = InboxConsumer(r, Buggy(), "w1")
    sent = client.sit("m1", "alice")
    assert gw.run_once(block_ms=None) == 1
    [dead] = dead_letters(r)
    assert b"ZeroDivisionError" in dead["dead_reason"] and dead["dead_code"] == INTERNAL_ERROR.encode()
    [msg] = client.updates("alice")
    assert (msg.kind, msg.code, msg.command_id) == ("rejected", INTERNAL_ERROR, sent.command_id)


def test_trimmed_pending_message(r):
    _group(r)
    client = GatewayClient(r, ops=keys.INBOX)
    sent = client.create_match("m1", CONFIG)
    r.xreadgroup(keys.SERVICE_GROUP, "w1", {keys.INBOX: ">"}, count=10)
    r.xdel(keys.INBOX, sent.stream_id)
    gw = InboxConsumer(r, make_service(r), "w1")
    gw.run_once(block_ms=None)
    gw.reclaim(min_idle_ms=0)
    assert r.xpending(keys.INBOX, keys.SERVICE_GROUP)["pending"] == 0


# -- the loop ---------------------------------------------------------------------------------
def test_run_until_stopped(rig):
    r, service, gw, client = rig
    stop = threading.Event()
    thread = threading.Thread(target=gw.run, args=(stop,), kwargs={"block_ms": 50})
    thread.start()
    try:
        start_at = time.monotonic()
        client.create_match("m1", CONFIG)
        client.sit("m1", "alice")
        msgs: list[OutMessage] = []
        while not msgs and time.monotonic() - start_at < 5:
            msgs = client.updates("alice", block_ms=100)
        assert msgs and msgs[0].version == 2
    finally:
        stop.set()
        thread.join(timeout=5)
    assert not thread.is_alive()
    assert gw.stats.processed == 2


def test_stop_finishes_the_message_in_hand(rig):
    r, service, gw, client = rig
    stop = threading.Event()

    class StopAfterFirst:
        def execute(self, command):
            stop.set()  # a signal arrives while the first message is being handled
            return service.execute(command)

    gw.service = StopAfterFirst()
    client.create_match("m1", CONFIG)
    client.sit("m1", "alice")
    client.sit("m1", "bob")
    assert gw.run_once(block_ms=None, count=10, stop=stop) == 1
    assert service.store.version("m1") == 1
    assert r.xpending(keys.INBOX, keys.SERVICE_GROUP)["pending"] == 2  # left for the next run
    gw.service = service
    assert drain(gw) == 2
    assert service.store.version("m1") == 3


def test_trim_inbox_keeps_what_is_not_handled(rig):
    r, service, gw, client = rig
    client.create_match("m1", CONFIG)
    client.sit("m1", "alice")
    assert gw.run_once(block_ms=None, count=1) == 1  # only the first was delivered and handled
    client.sit("m1", "bob")
    assert gw.trim_inbox() == 1
    assert r.xlen(keys.INBOX) == 2
    # a delivered but unacknowledged message is kept
    r.xreadgroup(keys.SERVICE_GROUP, "ghost", {keys.INBOX: ">"}, count=1)
    assert gw.trim_inbox() == 0
    assert drain(gw) == 1
    assert r.xlen(keys.INBOX) == 2
    assert gw.reclaim(min_idle_ms=0) == 1
    assert gw.trim_inbox() == 2
    assert r.xlen(keys.INBOX) == 0


def test_client_helpers_build_valid_commands(fake_redis):
    client = GatewayClient(fake_redis)
    sends = [client.create_match("m", {}), client.sit("m", "a"), client.leave("m", "a"),
             client.ready("m", "a"), client.deal("m"), client.play("m", "a", "3 3"),
             client.play("m", "a", cards=[1, 2]), client.pass_("m", "a"), client.request_trustee("m", "a"),
             client.cancel_trustee("m", "a"), client.disconnect("m", "a"), client.reconnect("m", "a"),
             client.escape("m", "a")]
    assert len({s.command_id for s in sends}) == len(sends)
    # each command goes to its channel's stream of the match's bucket: CreateMatch, Sit and Deal
    # to sk:{b<N>}:ops, the rest to sk:{b<N>}:inbox (issue 24 §2)
    b = keys.bucket_of("m")
    assert [e[0].decode() for e in fake_redis.xrange(keys.ops_key(b))] == [s.stream_id for s in sends[:2] + sends[4:5]]
    assert fake_redis.xlen(keys.inbox_key(b)) == len(sends) - 3
    with pytest.raises(Exception):
        client.play("m", "a")  # neither text nor cards


# -- hooks ------------------------------------------------------------------------------------
def test_on_dead_is_called_with_code_and_reason(r):
    """serve counts dead letters through on_dead (no polling of gateway.stats); a failing
    callback never stops the gateway."""
    seen: list[tuple[str, str]] = []

    def on_dead(code, reason):
        seen.append((code, reason))
        raise RuntimeError("a broken metrics hook")

    gw = InboxConsumer(r, make_service(r), "w1", on_dead=on_dead)
    r.xadd(keys.INBOX, {"c": b"\xc1 not msgpack"})
    r.xadd(keys.INBOX, {"j": b"{not json"})
    assert gw.run_once(block_ms=None, count=10) == 2
    assert [c for c, _ in seen] == ["bad_command", "bad_command"]
    assert "not msgpack" in seen[0][1] and "not JSON" in seen[1][1]
    assert gw.stats.dead == 2 and len(dead_letters(r)) == 2


def test_publish_is_public_for_commands_without_an_inbox_message(r):
    """The timer workers publish the outcome of the commands they run themselves."""
    from engine.match.commands import CreateMatch, Sit

    service = make_service(r)
    service.execute(CreateMatch(command_id="c0", match_id="m1", config=CONFIG))
    cmd = Sit(command_id="c1", match_id="m1", player="alice")
    outcome = service.execute(cmd)
    publisher = InboxConsumer(r, None, "sk-timers")
    publisher.publish(cmd, outcome)
    [msg] = GatewayClient(r, ops=keys.INBOX).updates("alice")
    assert (msg.kind, msg.command_id, msg.version) == ("update", "c1", 2)
    assert publisher.stats.published == 1


def test_the_loop_survives_an_unexpected_error(rig, monkeypatch):
    """Not only Redis errors: any failure of a round is logged and the loop goes on."""
    r, service, gw, client = rig
    real = gw.run_once
    failures = []

    def flaky(*args, **kwargs):
        if not failures:
            failures.append(1)
            raise KeyError("a bug in one round")
        return real(*args, **kwargs)

    monkeypatch.setattr(gw, "run_once", flaky)
    stop = threading.Event()
    thread = threading.Thread(target=gw.run, args=(stop,), kwargs={"block_ms": 50})
    thread.start()
    try:
        client.create_match("m1", CONFIG)
        end = time.monotonic() + 10
        while gw.stats.processed < 1 and time.monotonic() < end:
            time.sleep(0.02)
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive()
    assert failures == [1] and gw.stats.processed == 1


# -- one write pipeline and one XACK per read -----------------------------------------------------
def test_a_read_is_published_in_order_then_acknowledged_once(rig, monkeypatch):
    r, service, gw, client = rig
    # a server that took one publication holds publish.lua; on a fresh one the first round's
    # updates come back NOSCRIPT and go again by EVAL (tests/test_cluster_packed.py)
    r.script_load(PUBLISH_LUA)
    sent = [client.create_match("m1", CONFIG), client.sit("m1", "alice"), client.sit("m1", "bob"),
            client.sit("m1", "carol")]  # the last one is refused: the match is full
    calls: list[str] = []
    real_pipeline, real_xack, real_by_node = r.pipeline, r.xack, wire.by_node

    def pipeline(*a, **kw):  # redis-py's path (fakeredis)
        calls.append("pipeline")
        return real_pipeline(*a, **kw)

    def by_node(*a, **kw):  # packed (a real server: engine/store/wire.py)
        out = real_by_node(*a, **kw)
        if out is not None:
            calls.append("pipeline")
        return out

    monkeypatch.setattr(wire, "by_node", by_node)

    def xack(*a, **kw):
        calls.append(f"xack {len(a) - 2}")
        return real_xack(*a, **kw)

    r.pipeline, r.xack = pipeline, xack
    try:
        assert gw.run_once(block_ms=None, count=10) == 4
    finally:
        del r.pipeline, r.xack
    assert calls == ["pipeline", "xack 4"]
    assert r.xpending(keys.INBOX, keys.SERVICE_GROUP)["pending"] == 0
    alice = client.updates("alice")
    assert [(m.kind, m.command_id) for m in alice] == [("update", sent[1].command_id), ("update", sent[2].command_id)]
    assert [(m.kind, m.command_id) for m in client.updates("carol")] == [("rejected", sent[3].command_id)]
    # updates: none for the creation (nobody seated), alice, alice + bob; carol's rejection
    assert gw.stats.processed == 4 and gw.stats.published == 0 + 1 + 2 + 1


def test_a_failed_publication_acknowledges_nothing_of_the_read(rig, monkeypatch):
    import redis as redis_mod

    r, service, gw, client = rig
    client.create_match("m1", CONFIG)
    client.sit("m1", "alice")
    real_pipeline = r.pipeline

    def down(client, *a):  # packed (a real server); None: redis-py's pipeline, below
        if wire.usable(client):
            raise redis_mod.ConnectionError("down")
        return None

    class Failing:
        def __init__(self, pipe):
            self.pipe = pipe

        def __getattr__(self, name):
            return getattr(self.pipe, name)

        def execute(self, *a, **kw):
            raise redis_mod.ConnectionError("down")

    r.pipeline = lambda *a, **kw: Failing(real_pipeline(*a, **kw))
    try:
        with monkeypatch.context() as m:
            m.setattr(wire, "by_node", down)
            with pytest.raises(redis_mod.ConnectionError):
                gw.run_once(block_ms=None, count=10)
    finally:
        del r.pipeline
    assert r.xpending(keys.INBOX, keys.SERVICE_GROUP)["pending"] == 2  # both stay pending
    assert client.updates("alice") == []
    assert drain(gw) == 2  # redelivered: the stored events are published again (duplicates)
    assert [m.body["duplicate"] for m in client.updates("alice")] == [True, True]  # create + sit
    assert gw.stats.duplicates == 2


def test_an_output_redis_refuses_dead_letters_its_message_only(rig):
    """One message whose outputs Redis refuses for good (its reply_to names a key of
    another type: WRONGTYPE) must not hold its whole read hostage: the others are
    published once and acknowledged, that one is dead-lettered (per message) and
    acknowledged, and the loop moves on -- no endless redelivery of the read."""
    r, service, gw, client = rig
    r.set("sk:reply:broken", "not a stream")
    good = client.create_match("m1", CONFIG)
    bad = GatewayClient(r, ops=keys.INBOX, reply_to="sk:reply:broken").sit("m1", "alice")
    after = client.sit("m1", "bob")
    assert gw.run_once(block_ms=None, count=10) == 3
    assert r.xpending(keys.INBOX, keys.SERVICE_GROUP)["pending"] == 0
    assert [m.command_id for m in client.updates("bob")] == [after.command_id]
    # alice's own update was written (it is not what Redis refused); her command is applied once
    assert [m.command_id for m in client.updates("alice")] == [bad.command_id, after.command_id]
    assert [e.command_id for e in service.store.load("m1")] == [good.command_id, bad.command_id,
                                                                   after.command_id]
    dead = dead_letters(r)
    assert len(dead) == 1 and dead[0]["dead_code"] == INTERNAL_ERROR.encode()
    assert b"WRONGTYPE" in dead[0]["dead_reason"] and dead[0]["inbox_id"] == bad.stream_id.encode()
    assert gw.run_once(block_ms=None, count=10) == 0


def test_an_error_reply_of_the_servers_state_is_retried_not_dead_lettered(rig, monkeypatch):
    """OOM / READONLY replies say nothing about the message: it stays pending (the others of
    the read are acknowledged) and is published once Redis takes writes again."""
    import redis as redis_mod

    r, service, gw, client = rig
    client.create_match("m1", CONFIG)
    sit = client.sit("m1", "alice")
    real_pipeline, real_by_node = r.pipeline, wire.by_node

    def oom(*a):  # packed (a real server); redis-py's pipeline below
        out = real_by_node(*a)
        if out is None:
            return None
        return out[:-1] + [redis_mod.ResponseError("OOM command not allowed when used memory > 'maxmemory'.")]

    class Oom:
        def __init__(self, pipe):
            self.pipe = pipe

        def __getattr__(self, name):
            return getattr(self.pipe, name)

        def execute(self, *a, **kw):
            out = self.pipe.execute(*a, **kw)
            return out[:-1] + [redis_mod.ResponseError("OOM command not allowed when used memory > 'maxmemory'.")]

    r.pipeline = lambda *a, **kw: Oom(real_pipeline(*a, **kw))
    try:
        with monkeypatch.context() as m:
            m.setattr(wire, "by_node", oom)
            with pytest.raises(redis_mod.ResponseError, match="OOM"):
                gw.run_once(block_ms=None, count=10)
    finally:
        del r.pipeline
    pending = r.xpending_range(keys.INBOX, keys.SERVICE_GROUP, min="-", max="+", count=10)
    assert [p["message_id"].decode() for p in pending] == [sit.stream_id]  # the create was acknowledged
    assert dead_letters(r) == []
    assert drain(gw) == 1
    assert r.xpending(keys.INBOX, keys.SERVICE_GROUP)["pending"] == 0
