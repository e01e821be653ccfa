"""Hardening of the inbox consumer (issue 11 §1, §2, §6, §7, §8, §9; issue 9's attributable
malformed commands): poison messages, transient Redis errors, Sync and views in rejections,
expected_version, validation of inbox entries, expiring and compact delivery streams,
dead consumers.  fakeredis for the fast cases, a real redis-server where Redis itself
must refuse (OOM, delivery counts)."""

from __future__ import annotations

import json
from typing import Any

import msgpack
import pytest
import redis as redis_mod

from engine.config import load_config
from engine.match.commands import Play, Sync, encode_command
from engine.service.client import GatewayClient
from engine.service.inbox import INTERNAL_ERROR, InboxConsumer
from engine.service.publish import Publisher
from engine.service.service import MatchService
from engine.service.shuffle import seeded_random
from engine.store import keys
from engine.store.redis_errors import is_transient
from engine.store.redis_store import RedisEventStore

CONFIG = load_config("points").to_record()

#: the exact entry of issue 11 §1: a lone surrogate in the player id (JSON.stringify makes these)
POISON = {"j": '{"type":"Sit","command_id":"x","match_id":"m","player":"\\ud800"}'}


@pytest.fixture(params=["fakeredis", pytest.param("redis", marks=pytest.mark.redis)])
def r(request):
    return request.getfixturevalue({"fakeredis": "fake_redis", "redis": "real_redis"}[request.param])


def make_service(r) -> MatchService:
    return MatchService(RedisEventStore(r), clock=lambda: 1_000_000, rng=seeded_random(7))


def drain(gw: InboxConsumer) -> int:
    total = 0
    while (n := gw.run_once(block_ms=None, count=50)):
        total += n
    return total


def dead_letters(r) -> list[dict]:
    return [{k.decode(): v for k, v in f.items()} for _, f in r.xrange(keys.DEAD_LETTERS)]


def start_match(client: GatewayClient, gw: InboxConsumer, match_id: str = "m1") -> None:
    client.create_match(match_id, CONFIG)
    client.sit(match_id, "alice")
    client.sit(match_id, "bob")
    client.ready(match_id, "alice")
    client.ready(match_id, "bob")
    assert drain(gw) == 5


class Crash(BaseException):
    """The process dies while handling the message (not an Exception: nothing catches it)."""


# -- §1 poison messages ---------------------------------------------------------------------------
def test_the_exact_poison_entry_is_a_bad_command_and_the_batch_goes_on(r):
    service = make_service(r)
    gw = InboxConsumer(r, service, "w1")
    client = GatewayClient(r, ops=keys.INBOX)
    r.xadd(keys.INBOX, POISON)
    client.create_match("m1", CONFIG)
    client.sit("m1", "alice")
    assert gw.run_once(block_ms=None, count=10) == 3  # the poison and the rest of its batch
    [dead] = dead_letters(r)
    assert dead["dead_code"] == b"bad_command" and b"UTF-8" in dead["dead_reason"]
    assert service.store.version("m1") == 2
    assert r.xpending(keys.INBOX, keys.SERVICE_GROUP)["pending"] == 0
    assert gw.trim_inbox() == 3 and r.xlen(keys.INBOX) == 0  # nothing pins the trim


def test_a_lone_surrogate_in_an_id_of_a_known_player_is_rejected_to_them(r):
    gw = InboxConsumer(r, make_service(r), "w1")
    r.xadd(keys.INBOX, {"j": '{"type":"Pass","command_id":"\\udfff","match_id":"m","player":"alice"}'})
    assert gw.run_once(block_ms=None) == 1
    [msg] = GatewayClient(r, ops=keys.INBOX).updates("alice")
    assert (msg.kind, msg.code) == ("rejected", "bad_command") and "UTF-8" in msg.reason
    assert dead_letters(r) == [] and gw.stats.rejected == 1


@pytest.mark.redis
def test_own_pending_rereads_count_toward_the_delivery_limit(real_redis):
    """A message that kills its consumer every time: restarted under the same name (what the
    docs recommend), the consumer re-reads it from its own pending entries; after
    max_deliveries it is dead-lettered instead of killing the consumer again."""
    r = real_redis
    service = make_service(r)
    client = GatewayClient(r, ops=keys.INBOX)
    crashes = []

    class Killer:
        def execute(self, command):
            if command.type == "Sit" and command.player == "alice":
                crashes.append(command.command_id)
                raise Crash
            return service.execute(command)

        def stored_events(self, match_id, command_id):
            return service.stored_events(match_id, command_id)

    client.create_match("m1", CONFIG)
    client.sit("m1", "alice")
    after = client.sit("m1", "bob")
    for _ in range(10):
        gw = InboxConsumer(r, Killer(), "w1", max_deliveries=3)
        try:
            drain(gw)
            break
        except Crash:
            continue
    assert len(crashes) == 3  # deliveries 1..3 ran; the 4th was dead-lettered unread
    # bob's Sit, read in the same batch, did not spend its deliveries: it was applied
    [dead] = dead_letters(r)
    assert b"delivered 4 times" in dead["dead_reason"]
    assert r.xpending(keys.INBOX, keys.SERVICE_GROUP)["pending"] == 0
    assert [e.command_id for e in service.store.load("m1")][-1] == after.command_id


@pytest.mark.redis
def test_a_stored_command_over_the_limit_is_published_not_dead_lettered(real_redis):
    r = real_redis
    service = make_service(r)
    client = GatewayClient(r, ops=keys.INBOX)

    class DiesAfterAppend:
        def execute(self, command):
            service.execute(command)
            raise Crash

        def stored_events(self, match_id, command_id):
            return service.stored_events(match_id, command_id)

    client.create_match("m1", CONFIG)
    sit = client.sit("m1", "alice")
    assert InboxConsumer(r, service, "w1").run_once(block_ms=None, count=1) == 1
    for _ in range(4):
        with pytest.raises(Crash):
            InboxConsumer(r, DiesAfterAppend(), "w1", max_deliveries=2).run_once(block_ms=None)
    gw = InboxConsumer(r, service, "w1", max_deliveries=2)
    assert gw.run_once(block_ms=None) == 1
    assert dead_letters(r) == []
    [msg] = client.updates("alice")
    assert (msg.command_id, msg.body["duplicate"]) == (sit.command_id, True)


def test_the_delivery_limit_dead_letters_a_stuck_entry_and_frees_the_trim(r):
    service = make_service(r)
    client = GatewayClient(r, ops=keys.INBOX)
    gw = InboxConsumer(r, service, "w1", max_deliveries=2)
    r.xadd(keys.INBOX, POISON)
    r.xreadgroup(keys.SERVICE_GROUP, "ghost", {keys.INBOX: ">"}, count=1)
    for _ in range(3):
        r.xautoclaim(keys.INBOX, keys.SERVICE_GROUP, "ghost", 0, start_id="0-0")
    client.create_match("m1", CONFIG)
    drain(gw)
    assert gw.trim_inbox() == 0  # the stuck entry pins everything after it ...
    assert gw.reclaim(min_idle_ms=0) == 1  # ... until it is over the limit and dead-lettered
    assert gw.trim_inbox() == 2 and r.xlen(keys.INBOX) == 0
    assert [d["dead_reason"][:9] for d in dead_letters(r)] == [b"delivered"]


def test_an_unencodable_output_dead_letters_that_message_alone(r):
    service = make_service(r)
    gw = InboxConsumer(r, service, "w1")
    client = GatewayClient(r, ops=keys.INBOX)
    real = gw.publisher.outputs

    def outputs(command, outcome, reply_to=None, msg_id=None):
        out = real(command, outcome, reply_to, msg_id)
        if command.command_id == "poison":
            out[0].fields["kind"] = "\ud800"  # redis-py cannot encode it: the pipeline fails unsent
        return out

    gw.publisher.outputs = outputs
    client.create_match("m1", CONFIG)
    client.sit("m1", "alice", command_id="poison")
    good = client.sit("m1", "bob")
    assert gw.run_once(block_ms=None, count=10) == 3
    [dead] = dead_letters(r)
    assert dead["dead_code"] == INTERNAL_ERROR.encode() and b"UnicodeEncodeError" in dead["dead_reason"]
    assert [m.command_id for m in client.updates("bob")] == [good.command_id]
    assert r.xpending(keys.INBOX, keys.SERVICE_GROUP)["pending"] == 0


def test_a_cluster_clients_permanent_error_on_the_outputs_dead_letters_that_message_alone(r):
    """A Cluster client's own error that is not an outage (a bug: a command it cannot route)
    goes the per-message way like any other exception: dead-lettered, never a wedge."""
    service = make_service(r)
    gw = InboxConsumer(r, service, "w1", max_deliveries=2)
    client = GatewayClient(r, ops=keys.INBOX)
    real = gw.publisher.write

    def write(writes, raise_on_error=True):
        if any(w.stream == keys.outbox_key("alice") for w in writes):
            raise redis_mod.exceptions.RedisClusterException("No way to dispatch this command to Redis Cluster.")
        return real(writes, raise_on_error=raise_on_error)

    gw.publisher.write = write
    client.create_match("m1", CONFIG)
    client.sit("m1", "alice", command_id="unroutable")
    assert gw.run_once(block_ms=None, count=10) == 2
    [dead] = dead_letters(r)
    assert b"RedisClusterException" in dead["dead_reason"]
    assert r.xpending(keys.INBOX, keys.SERVICE_GROUP)["pending"] == 0


def test_a_permanent_redis_error_of_one_command_dead_letters_it_alone(r):
    service = make_service(r)

    class WrongType:
        def execute(self, command):
            if command.type == "Sit":
                raise redis_mod.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value")
            return service.execute(command)

    gw = InboxConsumer(r, WrongType(), "w1")
    client = GatewayClient(r, ops=keys.INBOX)
    client.create_match("m1", CONFIG)
    sit = client.sit("m1", "alice")
    client.create_match("m2", CONFIG)
    assert gw.run_once(block_ms=None, count=10) == 3
    [dead] = dead_letters(r)
    assert b"WRONGTYPE" in dead["dead_reason"] and dead["inbox_id"] == sit.stream_id.encode()
    assert service.store.version("m2") == 1


# -- §2 transient errors --------------------------------------------------------------------------
@pytest.mark.parametrize("exc, transient", [
    (redis_mod.exceptions.OutOfMemoryError("command not allowed when used memory > 'maxmemory'."), True),
    (redis_mod.exceptions.MasterDownError("Link with MASTER is down and replica-serve-stale-data is set to 'no'."), True),
    (redis_mod.exceptions.TryAgainError("Multiple keys request during rehashing of slot"), True),
    (redis_mod.exceptions.ClusterDownError("The cluster is down"), True),
    (redis_mod.exceptions.BusyLoadingError("Redis is loading the dataset in memory"), True),
    (redis_mod.exceptions.ReadOnlyError("You can't write against a read only replica."), True),
    (redis_mod.ResponseError("BUSY Redis is busy running a script. You can only call SCRIPT KILL"), True),
    (redis_mod.ResponseError("OOM command not allowed when used memory > 'maxmemory'."), True),
    (redis_mod.ConnectionError("Connection refused"), True),
    (redis_mod.TimeoutError("Timeout reading from socket"), True),
    (redis_mod.ResponseError("UNBLOCKED force unblock from blocking operation, instance state changed "
                             "(master -> replica?)"), True),
    (redis_mod.ResponseError("Command # 2 (WAIT 1 2000) of pipeline caused error: UNBLOCKED force unblock"), True),
    (redis_mod.ResponseError("Command # 1 (XADD s * a b) of pipeline caused error: WRONGTYPE Operation"), False),
    (redis_mod.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"), False),
    (redis_mod.ResponseError("BUSYGROUP Consumer Group name already exists"), False),
    (ValueError("not redis"), False),
])
def test_which_redis_errors_are_transient(exc, transient):
    assert is_transient(exc) is transient


def _xread(r: Any) -> Any:
    return r.xread({"s": "$"}, block=10_000)


def _confirm(r: Any) -> Any:
    """engine/store/replicas.py's confirmation: INCR, then WAIT for a replica there is none of."""
    pipe = r.pipeline(transaction=False)
    pipe.execute_command("INCR", "sk:{m}:marker")
    pipe.execute_command("WAIT", 1, 10_000)
    return pipe.execute()


@pytest.mark.redis
@pytest.mark.parametrize("call, blocked", [(_xread, "xread"), (_confirm, "wait")], ids=["xread", "pipelined-wait"])
def test_a_blocking_call_on_a_master_that_becomes_a_replica_fails_transiently(call, blocked):
    """Redis answers a client blocked in XREAD BLOCK or WAIT ``UNBLOCKED …`` when its master
    turns replica (a fail-over; a stopped or cut-off master rejoining), in a pipeline with
    redis-py's ``Command # N (…) of pipeline caused error:`` before it: the server's state, not
    the command's, so the call is made again (on the new master), not dead-lettered."""
    import threading
    import time

    from tests.conftest import start_redis_server, stop_redis_server

    servers = [start_redis_server(), start_redis_server()]
    try:
        old, new = (redis_mod.Redis.from_url(url) for _proc, url, _dir in servers)
        host, port = new.connection_pool.connection_kwargs["host"], new.connection_pool.connection_kwargs["port"]
        def demote() -> None:  # once the read is blocked
            watcher = redis_mod.Redis.from_url(servers[0][1])
            while not any(c.get("cmd") == blocked for c in watcher.client_list()):
                time.sleep(0.01)
            watcher.replicaof(host, port)

        t = threading.Thread(target=demote)
        t.start()
        with pytest.raises(redis_mod.ResponseError) as got:
            call(old)
        t.join()
        assert "UNBLOCKED" in str(got.value) and is_transient(got.value)
    finally:
        for proc, _url, workdir in servers:
            stop_redis_server(proc, workdir)


@pytest.mark.parametrize("failure", [
    redis_mod.exceptions.OutOfMemoryError("command not allowed when used memory > 'maxmemory'."),
    # a Cluster client mid-fail-over (not a RedisError: issue 24 §4, ride through it)
    redis_mod.exceptions.RedisClusterException("startup_nodes could not agree on a valid slots cache: a vs b"),
], ids=["oom", "cluster-refresh"])
def test_transient_errors_of_the_service_are_retried_never_dead_lettered(r, failure):
    service = make_service(r)
    failures = []

    class Failing:
        def execute(self, command):
            if len(failures) < 12:  # far more than max_deliveries
                failures.append(1)
                raise failure
            return service.execute(command)

    gw = InboxConsumer(r, Failing(), "w1", max_deliveries=2)
    client = GatewayClient(r, ops=keys.INBOX)
    client.create_match("m1", CONFIG)
    for _ in range(12):
        with pytest.raises(type(failure)):
            gw.run_once(block_ms=None)
    assert gw.run_once(block_ms=None) == 1
    assert dead_letters(r) == [] and service.store.version("m1") == 1


@pytest.mark.redis
def test_an_oom_episode_loses_no_accepted_update(own_real_redis):
    """Redis refuses writes (maxmemory reached) after a Play was appended: the update waits,
    is never dead-lettered however long the episode lasts, and reaches both players once
    the limit is lifted.  On a server of its own (the limit refuses every client's writes)."""
    r = own_real_redis
    service = make_service(r)
    gw = InboxConsumer(r, service, "w1", max_deliveries=2)
    client = GatewayClient(r, ops=keys.INBOX)
    start_match(client, gw)
    st = service.load_state("m1")
    on_turn = st.current_player
    card = sorted(st.seat(st.turn).hand)[0]

    class FillsUpAfterAppend:
        def execute(self, command):
            outcome = service.execute(command)
            r.config_set("maxmemory", "1")  # the next write is refused: OOM
            return outcome

    gw.service = FillsUpAfterAppend()
    sent = client.play("m1", on_turn, cards=[card])
    try:
        for _ in range(6):
            with pytest.raises(redis_mod.exceptions.OutOfMemoryError):
                gw.run_once(block_ms=None)
            gw.service = service
    finally:
        r.config_set("maxmemory", "0")
    assert drain(gw) == 1
    assert dead_letters(r) == []
    for p in ("alice", "bob"):
        assert sent.command_id in [m.command_id for m in client.updates(p) if m.kind == "update"]
    assert service.load_state("m1").version == st.version + 1


# -- Sync and views in rejections -----------------------------------------------------------------
def finish_by_escape(client, gw):
    start_match(client, gw)
    client.escape("m1", "alice")
    assert gw.run_once(block_ms=None) == 1


def test_sync_returns_the_view_of_a_finished_match(r):
    service = make_service(r)
    gw = InboxConsumer(r, service, "w1")
    client = GatewayClient(r, ops=keys.INBOX)
    finish_by_escape(client, gw)
    version = service.load_state("m1").version
    before = client.updates("bob")[-1].id
    sent = client.sync("m1", "bob")
    assert gw.run_once(block_ms=None) == 1
    [msg] = client.updates("bob", last_id=before)
    assert (msg.kind, msg.command_id, msg.version) == ("sync", sent.command_id, version)
    assert msg.view["phase"] == "finished" and msg.view["result"]["winner"] == "bob"
    assert service.load_state("m1").version == version  # a read: nothing appended
    assert service.stored_events("m1", sent.command_id) == ()


def test_a_rejection_carries_the_current_view(r):
    service = make_service(r)
    gw = InboxConsumer(r, service, "w1")
    client = GatewayClient(r, ops=keys.INBOX)
    finish_by_escape(client, gw)
    before = client.updates("alice")[-1].id
    client.pass_("m1", "alice")
    gw.run_once(block_ms=None)
    [msg] = client.updates("alice", last_id=before)
    assert (msg.kind, msg.code) == ("rejected", "match_over")
    assert msg.view["phase"] == "finished" and msg.version == service.load_state("m1").version
    assert msg.view["you"] == "alice"


# -- §6 expected_version --------------------------------------------------------------------------
def test_a_command_for_an_older_version_is_stale_and_never_applied(r):
    service = make_service(r)
    gw = InboxConsumer(r, service, "w1")
    client = GatewayClient(r, ops=keys.INBOX)
    start_match(client, gw)
    st = service.load_state("m1")
    on_turn = st.current_player
    card = sorted(st.seat(st.turn).hand)[0]
    before = client.updates(on_turn)[-1].id
    client.play("m1", on_turn, cards=[card], expected_version=st.version - 1)
    gw.run_once(block_ms=None)
    [msg] = client.updates(on_turn, last_id=before)
    assert (msg.kind, msg.code) == ("rejected", "stale") and msg.view["version"] == st.version
    assert service.load_state("m1").version == st.version
    client.play("m1", on_turn, cards=[card], expected_version=st.version)
    gw.run_once(block_ms=None)
    assert service.load_state("m1").version == st.version + 1


def test_the_client_sends_the_version_it_saw_by_default(r):
    service = make_service(r)
    gw = InboxConsumer(r, service, "w1")
    client = GatewayClient(r, ops=keys.INBOX)
    start_match(client, gw)
    st = service.load_state("m1")
    on_turn = st.current_player
    client.updates(on_turn)  # reading the updates is seeing the version
    sent = client.play("m1", on_turn, cards=[sorted(st.seat(st.turn).hand)[0]])
    assert sent.command.expected_version == st.version
    assert client.pass_("m9", "nobody").command.expected_version is None  # never saw this match
    assert client.pass_("m1", on_turn, expected_version=None).command.expected_version is None


# -- §7 validation --------------------------------------------------------------------------------
def test_an_integer_beyond_64_bits_is_a_bad_command_not_an_internal_error(r):
    gw = InboxConsumer(r, make_service(r), "w1")
    r.xadd(keys.INBOX, {"j": json.dumps({"type": "Play", "command_id": "c", "match_id": "m", "player": "alice",
                                         "cards": [2**70]})})
    r.xadd(keys.INBOX, {"j": json.dumps({"type": "Pass", "command_id": "d", "match_id": "m", "player": "alice",
                                         "expected_version": 2**64})})
    assert gw.run_once(block_ms=None) == 2
    assert [(m.kind, m.code) for m in GatewayClient(r, ops=keys.INBOX).updates("alice")] == [("rejected", "bad_command")] * 2
    assert dead_letters(r) == []


def test_unknown_or_oversized_entry_fields_are_refused_before_processing(r):
    service = make_service(r)
    gw = InboxConsumer(r, service, "w1")
    cmd = encode_command(Sync(command_id="s", match_id="m1", player="alice"))
    r.xadd(keys.INBOX, {"c": cmd, "pad": b"x" * 10})
    r.xadd(keys.INBOX, {"c": cmd, "reply_to": "sk:reply:" + "x" * 400})
    r.xadd(keys.INBOX, {"c": cmd, "j": b"{}"})
    assert gw.run_once(block_ms=None) == 3
    msgs = GatewayClient(r, ops=keys.INBOX).updates("alice")
    assert [(m.kind, m.code) for m in msgs] == [("rejected", "bad_command")] * 3
    assert "unknown inbox entry field" in msgs[0].reason and "too large" in msgs[1].reason


# -- §8 delivery streams ----------------------------------------------------------------------------
def test_outbox_and_reply_streams_expire_and_are_capped(r):
    service = make_service(r)
    gw = InboxConsumer(r, service, "w1", outbox_ttl=600, outbox_maxlen=5)
    client = GatewayClient(r, reply_to="sk:reply:gw-1", ops=keys.INBOX)
    start_match(client, gw)
    client.pass_("m-none", "ghost-1")  # a rejection for a player with no stream
    for _ in range(20):
        client.sync("m1", "alice")
    drain(gw)
    names = [k.decode() for k in r.scan_iter("sk:out:*")] + [k.decode() for k in r.scan_iter("sk:reply:*")]
    assert {"sk:out:{ghost-1}", "sk:out:{alice}", "sk:out:{bob}", "sk:reply:gw-1"} <= set(names)
    assert all(0 < r.ttl(k) <= 600 for k in names)
    assert r.xlen("sk:out:{alice}") < 20  # MAXLEN ~ 5 trims whole nodes: approximate, but bounded


def test_updates_are_compact_with_a_full_view_on_join_deal_and_every_n(r):
    service = make_service(r)
    gw = InboxConsumer(r, service, "w1", full_view_every=4)
    client = GatewayClient(r, ops=keys.INBOX)
    start_match(client, gw)
    st = service.load_state("m1")
    for _ in range(6):  # bots: the player on turn plays the lowest single or passes
        st = service.load_state("m1")
        p = st.current_player
        if st.to_beat is None:
            client.play("m1", p, cards=[sorted(st.seat(st.turn).hand)[0]])
        else:
            client.pass_("m1", p)
        drain(gw)
    ups = [m for m in client.updates("alice") if m.kind == "update"]
    seated = ups[0]
    assert seated.view is not None  # her join
    assert any(e["type"] == "HandDealt" for e in ups[-7].events) and ups[-7].view is not None
    plays = ups[-6:]
    assert [m.view is not None for m in plays] == [(m.version - len(m.events)) // 4 != m.version // 4
                                                   for m in plays]
    assert any(m.view is None for m in plays)
    raw = [msgpack.unpackb(f[b"body"], raw=False) for _, f in r.xrange("sk:out:{alice}")]
    assert all("version" not in b and "match_id" not in b for b in raw)  # the entry says them
    for m in plays:  # the events follow version - len(events), one version each
        assert [e["seq"] for e in m.events] == list(range(m.version - len(m.events) + 1, m.version + 1))
        assert all(e["match_id"] == "m1" for e in m.events)  # the client fills the entry's ids in


def test_publisher_with_full_view_every_1_is_the_old_format(fake_redis):
    from engine.service.service import Outcome

    service = make_service(fake_redis)
    client = GatewayClient(fake_redis, ops=keys.INBOX)
    gw = InboxConsumer(fake_redis, service, "w1")
    start_match(client, gw)
    st = service.load_state("m1")
    pub = Publisher(fake_redis, consumer="t", full_view_every=1)
    events = service.store.load("m1")[-1:]
    [w, _] = pub.outputs(Play(command_id="x", match_id="m1", player="alice", cards=(1,)),
                         Outcome(tuple(events), st))
    assert "view" in msgpack.unpackb(w.fields["body"], raw=False)


# -- the stream / policy parameters (for an operator channel) --------------------------------------
def test_a_consumer_on_another_stream_with_a_policy(r):
    service = make_service(r)
    ops = InboxConsumer(r, service, "ops-1", stream="sk:ops",
                        accepts=lambda c: None if c.type == "CreateMatch" else f"{c.type} is not an operator command")
    client = GatewayClient(r, inbox="sk:ops", reply_to="sk:reply:ops", ops="sk:ops")
    client.create_match("m1", CONFIG)
    client.pass_("m1", "alice")
    assert ops.run_once(block_ms=None) == 2
    assert service.store.version("m1") == 1
    [msg] = client.updates("alice")
    assert (msg.kind, msg.code) == ("rejected", "not_allowed") and "not an operator command" in msg.reason
    assert [m.kind for m in client.replies()] == ["accepted", "rejected"]
    assert dead_letters(r) == [] and r.xlen(keys.INBOX) == 0


# -- §9 dead consumers --------------------------------------------------------------------------------
def test_dead_consumers_are_removed_once_their_pending_entries_are_reclaimed(r):
    service = make_service(r)
    client = GatewayClient(r, ops=keys.INBOX)
    gw = InboxConsumer(r, service, "w1", forget_idle_ms=0)
    client.create_match("m1", CONFIG)
    r.xreadgroup(keys.SERVICE_GROUP, "dead-1", {keys.INBOX: ">"}, count=1)  # dies holding it
    r.xgroup_createconsumer(keys.INBOX, keys.SERVICE_GROUP, "dead-2")  # dies idle
    names = {c["name"].decode() for c in r.xinfo_consumers(keys.INBOX, keys.SERVICE_GROUP)}
    assert {"dead-1", "dead-2"} <= names
    assert gw.reclaim(min_idle_ms=0) == 1
    names = {c["name"].decode() for c in r.xinfo_consumers(keys.INBOX, keys.SERVICE_GROUP)}
    assert names == {"w1"}
    assert service.store.version("m1") == 1


def test_json_nested_too_deeply_is_a_bad_command_not_a_wedge(r):
    """json.loads raises RecursionError (not a ValueError) on deep nesting: once it wedged
    the consumer (bench/poison.py)."""
    service = make_service(r)
    gw = InboxConsumer(r, service, "w1")
    r.xadd(keys.INBOX, {"j": "[" * 50_000})
    GatewayClient(r, ops=keys.INBOX).create_match("m1", CONFIG)
    assert gw.run_once(block_ms=None, count=10) == 2
    [dead] = dead_letters(r)
    assert b"nested too deeply" in dead["dead_reason"] and service.store.version("m1") == 1


@pytest.mark.parametrize("loop", ["run_once", "run_together"])
def test_a_publication_one_node_refuses_waits_alone_while_the_buckets_other_matches_go_on(r, monkeypatch, loop):
    """Issue 35 §3, no node's outage holds another node's work: on a Redis Cluster the
    writes of a message go to the nodes of its players' streams.  One of them away (here:
    alice's stream refuses with CLUSTERDOWN), that message's command is stored and its
    publication waits, *parked*: the messages after it, of matches that do not write to that
    node, are handled meanwhile.  Once the node is back, the parked message is published at
    its retry (a duplicate of the stored command, nothing applied twice) and acknowledged --
    by a consumer's own loop and by serve's group reads (``run_together``) alike."""
    from engine.service import inbox as inbox_mod
    from engine.service.inbox import run_together

    now = [1000.0]

    class Clock:
        @staticmethod
        def monotonic() -> float:
            return now[0]

    monkeypatch.setattr(inbox_mod, "time", Clock)
    service = make_service(r)
    gw = InboxConsumer(r, service, "w1")
    gw.park_publications = True  # what a Cluster client gets
    drain(gw)
    client = GatewayClient(r, ops=keys.INBOX)
    client.create_match("m1", CONFIG)
    client.create_match("m2", CONFIG)
    assert drain(gw) == 2
    real = gw.publisher.write
    away = [True]

    def write(writes, raise_on_error=True):
        out = real([w for w in writes if not (away[0] and w.stream == keys.outbox_key("alice"))],
                   raise_on_error=raise_on_error)
        if not away[0]:
            return out
        it = iter(out)  # alice's writes refused, the others written
        return [redis_mod.exceptions.ClusterDownError("The cluster is down")
                if w.stream == keys.outbox_key("alice") else next(it) for w in writes]

    gw.publisher.write = write

    def once() -> int:
        return gw.run_once(block_ms=None) if loop == "run_once" else run_together([gw], block_ms=None)

    def drain_all() -> int:
        total = 0
        while (n := once()):
            total += n
        return total

    sit = client.sit("m1", "alice")
    with pytest.raises(redis_mod.exceptions.ClusterDownError):
        once()
    assert service.store.version("m1") == 2  # stored; its publication waits
    for p in ("carol", "dave"):  # m2's players' streams are on nodes that answer
        client.sit("m2", p)
    assert once() == 2  # handled although alice's Sit is still pending
    assert service.store.version("m2") == 3
    assert r.xpending(keys.INBOX, keys.SERVICE_GROUP)["pending"] >= 1
    away[0] = False
    now[0] += inbox_mod.PARK_MAX_S  # its retry is due
    assert drain_all() == 1
    assert sit.command_id in [m.command_id for m in client.updates("alice") if m.kind == "update"]
    gw.flush_acks()
    assert r.xpending(keys.INBOX, keys.SERVICE_GROUP)["pending"] == 0
    assert service.store.version("m1") == 2  # applied once
