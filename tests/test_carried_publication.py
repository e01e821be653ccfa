"""A command's publication travels with its append (issue 13: the c1 latency).

The inbox offers the publisher's outputs to ``MatchService.execute_many`` (``carry``);
the append script writes them in its own step once the events are in
(engine/store/append.lua, after the events' payloads): one round trip per read less (on a
Redis Cluster only the streams of the match's node: tests/test_cluster_packed.py).
What is published is exactly what the separate publication wrote (a hypothesis property
over random bot matches and read sizes); what the store did not append (a wrong version,
a duplicate, a refusal) is published afterwards as before, once; a delivery stream of
the wrong type makes the append write none of them (the message is dead-lettered as
before); a store that cannot carry (in-memory, another Redis) never does.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.config import load_config
from engine.match.commands import Pass
from engine.match.events import PlayerReady
from engine.service.client import GatewayClient
from engine.service.inbox import InboxConsumer
from engine.service.publish import Publisher
from engine.service.service import MatchService
from engine.service.shuffle import seeded_random, seeded_server_seeds
from engine.service.state_cache import StateCache
from engine.store import keys
from engine.store.base import AppendRequest, EventStore, Write
from engine.store.memory import InMemoryEventStore
from engine.store.redis_store import RedisEventStore
from engine.tools.bot import Bot, choose_for

CONFIG = load_config("points").to_record()


@pytest.fixture(params=["fakeredis", pytest.param("redis", marks=pytest.mark.redis)])
def r(request):
    return request.getfixturevalue({"fakeredis": "fake_redis", "redis": "real_redis"}[request.param])


class NoCarry:
    """A store that says it cannot carry writes (the separate publication, as before)."""

    def __init__(self, store: EventStore):
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def can_carry(self, client: Any) -> bool:
        return False


class CountingPublisher(Publisher):
    """Counts the writes the inbox publishes itself (not carried by an append)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.written: list[Write] = []

    def write(self, writes: Any, raise_on_error: bool = True) -> list[Any]:
        self.written.extend(writes)
        return super().write(writes, raise_on_error)


def service(store: Any, seed: int = 1) -> MatchService:
    clock = iter(range(1_000_000, 10**12, 1000))
    return MatchService(store, lambda: next(clock), seeded_random(seed), state_cache=StateCache(),
                        server_seeds=seeded_server_seeds(seed))


def consumer(r: Any, store: Any, seed: int = 1) -> tuple[InboxConsumer, MatchService]:
    svc = service(store, seed)
    gw = InboxConsumer(r, svc, "w1")
    gw.publisher = CountingPublisher(r, consumer="w1", stats=gw.stats)
    gw.handler.publisher = gw.publisher
    return gw, svc


def drain(gw: InboxConsumer, count: int = 10) -> None:
    while gw.run_once(block_ms=None, count=count):
        pass


def play_matches(r: Any, store: Any, seed: int, matches: int, batch: int) -> InboxConsumer:
    """Bot matches through the inbox, ``batch`` messages per read (commands of several matches)."""
    gw, svc = consumer(r, store, seed)
    client = GatewayClient(r, ops=keys.INBOX, reply_to="sk:reply:t")
    rng = random.Random(seed)
    mids = [f"m{seed}-{i}" for i in range(matches)]
    n = iter(range(10**6))

    def cid() -> str:  # the same ids in both runs
        return f"c{next(n)}"

    for mid in mids:
        client.create_match(mid, CONFIG, cid())
        for p in ("a", "b"):
            client.sit(mid, f"{mid}{p}", cid())
        for p in ("a", "b"):
            client.ready(mid, f"{mid}{p}", cid())
    drain(gw, batch)
    bot = Bot("greedy", rng)
    for _ in range(400):
        live = [m for m in mids if svc.load_state(m).phase == "playing"]
        if not live:
            break
        for mid in rng.sample(live, min(len(live), batch)):
            s = svc.load_state(mid)
            play = choose_for(bot, s, s.current_player)
            if play is None:
                client.pass_(mid, s.current_player, cid(), expected_version=s.version)
            else:
                client.play(mid, s.current_player, cards=list(play.cards), command_id=cid(),
                            expected_version=s.version)
        drain(gw, batch)
    return gw


def seat(client: GatewayClient, gw: InboxConsumer) -> None:
    """Match m1 with players a and b seated, ready and dealt."""
    client.create_match("m1", CONFIG)
    client.sit("m1", "a")
    client.sit("m1", "b")
    client.ready("m1", "a")
    client.ready("m1", "b")
    drain(gw)


def delivered(r: Any) -> dict[tuple[str, bytes], list[dict[bytes, bytes]]]:
    """Every outbox and reply stream's entries (fields only, but the inbox entry's id), by
    stream and match: the order that counts (a reply stream mixes matches in any order)."""
    out: dict[tuple[str, bytes], list[dict[bytes, bytes]]] = {}
    for key in sorted(r.scan_iter(match="sk:out:*")) + sorted(r.scan_iter(match="sk:reply:*")):
        for _, f in r.xrange(key):
            out.setdefault((key.decode(), f[b"match"]), []).append(
                {k: v for k, v in f.items() if k != b"inbox_id"})
    return out


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 10_000), batch=st.sampled_from([1, 3, 10]))
def test_what_an_append_carries_is_exactly_what_the_publisher_wrote(seed, batch) -> None:
    import fakeredis

    carried = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    separate = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    gw_carried = play_matches(carried, RedisEventStore(carried), seed, 3, batch)
    gw_separate = play_matches(separate, NoCarry(RedisEventStore(separate)), seed, 3, batch)
    got, want = delivered(carried), delivered(separate)
    assert sum(len(v) for v in want.values()) > 30  # a positive control: there is something to compare
    assert got == want
    # the separate run published everything itself; the carried one only what no append took
    assert len(gw_separate.publisher.written) >= sum(len(v) for v in want.values())
    assert len(gw_carried.publisher.written) < len(gw_separate.publisher.written) / 3
    for gw in (gw_carried, gw_separate):
        assert not carried.xpending(keys.INBOX, keys.SERVICE_GROUP)["pending"]
    assert gw_carried.stats.accepted == gw_separate.stats.accepted > 0
    assert gw_carried.stats.published == gw_separate.stats.published
    for key in list(carried.scan_iter(match="sk:out:*")) + list(carried.scan_iter(match="sk:reply:*")):
        assert carried.ttl(key) > 0  # carried entries expire like published ones


def test_a_play_is_appended_and_published_in_one_step(r) -> None:
    gw, svc = consumer(r, RedisEventStore(r))
    client = GatewayClient(r, ops=keys.INBOX, reply_to="sk:reply:t")
    seat(client, gw)
    st1 = svc.load_state("m1")
    gw.publisher.written.clear()
    sent = client.play("m1", st1.current_player, cards=[st1.seat(st1.turn).hand[0]], expected_version=st1.version)
    assert gw.run_once(block_ms=None) == 1
    assert gw.publisher.written == []  # nothing published apart from the append
    reply = client.replies()[-1]
    assert (reply.kind, reply.command_id, reply.version) == ("accepted", sent.command_id, st1.version + 1)
    for p in ("a", "b"):
        [(_, last)] = r.xrevrange(keys.outbox_key(p), count=1)
        assert last[b"command_id"].decode() == sent.command_id and int(last[b"version"]) == st1.version + 1




class MovingStore(RedisEventStore):
    """A store whose slot map places player a's stream on another node until its first round
    of appends is sent, then on the match's node (a slot moved between two rounds)."""

    moved = False

    def carries(self, match_id: str, streams: Any) -> list[bool]:
        return [self.moved or stream != keys.outbox_key("a") for stream in streams]

    def append_many(self, requests: Any) -> Any:
        try:
            return super().append_many(requests)
        finally:
            self.moved = True


def test_a_stream_left_to_the_publisher_is_not_carried_later_in_the_same_read(r) -> None:
    """A stream whose entry a round left to the publisher (another node's) gets no carried
    entry from a later round of the same read, even once the slot map places it on the
    match's node: the carried one would reach it first."""
    store = MovingStore(r)
    gw, svc = consumer(r, store)
    client = GatewayClient(r, ops=keys.INBOX, reply_to="sk:reply:t")
    seat(client, gw)
    st1 = svc.load_state("m1")
    store.moved = False
    gw.publisher.written.clear()
    first = client.play("m1", st1.current_player, cards=[st1.seat(st1.turn).hand[0]], expected_version=st1.version)
    other = "b" if st1.current_player == "a" else "a"
    second = client.pass_("m1", other, expected_version=st1.version + 1)
    assert gw.run_once(block_ms=None) == 2  # one read, two rounds (one append of a match a round)
    assert {m.command_id: m.kind for m in client.replies()}.keys() >= {first.command_id, second.command_id}
    assert [w.version for w in gw.publisher.written if w.stream == keys.outbox_key("a")] \
        == [st1.version + 1, st1.version + 2]  # both published by the publisher, in order
    assert versions_on(r, "a")[-2:] == [st1.version + 1, st1.version + 2]
    assert versions_on(r, "b")[-2:] == [st1.version + 1, st1.version + 2]  # b's: carried
    assert not any(w.stream == keys.outbox_key("b") for w in gw.publisher.written)


def test_a_stale_command_and_a_duplicate_are_published_after_the_round_once(r) -> None:
    gw, svc = consumer(r, RedisEventStore(r))
    other = service(RedisEventStore(r), seed=1)  # another writer: its own cache
    client = GatewayClient(r, ops=keys.INBOX, reply_to="sk:reply:t")
    seat(client, gw)
    st1 = svc.load_state("m1")
    first = client.play("m1", st1.current_player, cards=[st1.seat(st1.turn).hand[0]], expected_version=st1.version)
    drain(gw)
    st2 = svc.load_state("m1")
    # the other writer moves the match on behind our cache: our round's append is a wrong version
    behind = other.execute(Pass(command_id="other-pass", match_id="m1", player=st2.current_player,
                                expected_version=st2.version))
    assert behind.rejection is None
    gw.publisher.written.clear()
    client.send(first.command)
    late = client.pass_("m1", st2.current_player, expected_version=st2.version)
    assert gw.run_once(block_ms=None) == 2
    kinds = {m.command_id: (m.kind, m.code) for m in client.replies() if m.command_id in
             (first.command_id, late.command_id)}
    assert kinds[first.command_id] == ("duplicate", None)
    assert kinds[late.command_id][0] == "rejected"
    assert [w.fields["kind"] for w in gw.publisher.written if w.stream == "sk:reply:t"] == ["duplicate", "rejected"]
    # nothing was carried by the append the store refused: the late pass has no update,
    # its player one rejection; the duplicate's updates were published again, once
    def kinds_of(cid: str, player: str) -> list[bytes]:
        return [f[b"kind"] for _, f in r.xrange(keys.outbox_key(player)) if f[b"command_id"].decode() == cid]

    assert sorted(kinds_of(late.command_id, "a") + kinds_of(late.command_id, "b")) == [b"rejected"]
    assert kinds_of(first.command_id, "a") == kinds_of(first.command_id, "b") == [b"update", b"update"]
    assert [f[b"kind"] for _, f in r.xrange("sk:reply:t") if f[b"command_id"].decode() == late.command_id] \
        == [b"rejected"]


def test_a_reply_stream_of_the_wrong_type_is_written_by_nobody_and_the_message_dead_lettered(r) -> None:
    gw, svc = consumer(r, RedisEventStore(r))
    client = GatewayClient(r, ops=keys.INBOX, reply_to="sk:reply:t")
    seat(client, gw)
    st1 = svc.load_state("m1")
    r.set("sk:reply:broken", "a string, not a stream")
    broken = GatewayClient(r, ops=keys.INBOX, reply_to="sk:reply:broken")
    before = {p: r.xlen(keys.outbox_key(p)) for p in ("a", "b")}
    sent = broken.play("m1", st1.current_player, cards=[st1.seat(st1.turn).hand[0]], expected_version=st1.version)
    assert gw.run_once(block_ms=None) == 1
    assert svc.store.command_range("m1", sent.command_id) is not None  # the events are in
    assert r.get("sk:reply:broken") == b"a string, not a stream"
    # the append carried none of its entries (one key was not a stream): they were published
    assert any(w.stream == "sk:reply:broken" for w in gw.publisher.written)
    [dead] = [f for _, f in r.xrange(keys.DEAD_LETTERS)]
    assert b"WRONGTYPE" in dead[b"dead_reason"] or b"wrong kind" in dead[b"dead_reason"]
    # the players' updates: once each, by the usual publication (its reply alone refused)
    assert {p: r.xlen(keys.outbox_key(p)) for p in ("a", "b")} == {p: n + 1 for p, n in before.items()}


def test_only_a_store_on_the_publishers_own_plain_redis_carries(r) -> None:
    import fakeredis

    store = RedisEventStore(r)
    assert store.can_carry(r)
    elsewhere = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    assert not store.can_carry(elsewhere)
    assert not InMemoryEventStore().can_carry(r)
    e = PlayerReady(match_id="m", seq=1, ts=0, command_id="c", player="a")
    with pytest.raises(ValueError, match="cannot carry"):
        InMemoryEventStore().append_many([AppendRequest("m", 0, "c", (e,), None,
                                                        (Write("sk:out:a", {"kind": "x"}, 10),))])
    # a service whose carry names another Redis publishes as before
    gw, svc = consumer(r, store)
    outs = svc.execute_many([], carry=None)
    assert outs == []


def versions_on(r: Any, player: str, match: bytes = b"m1") -> list[int]:
    """The versions of ``player``'s entries of ``match``, in stream order."""
    return [int(f[b"version"]) for _, f in r.xrange(keys.outbox_key(player))
            if f.get(b"match") == match and b"version" in f]


def test_an_uncarried_append_holds_back_the_later_commands_of_its_match(r) -> None:
    """An append that could not carry its publication (a reply stream of the wrong type:
    the script writes none of its entries) is published after the appends; a later
    command of the same match in that read must not be carried past it (each player's
    stream in version order, docs/PROTOCOL.md §5)."""
    gw, svc = consumer(r, RedisEventStore(r))
    client = GatewayClient(r, ops=keys.INBOX, reply_to="sk:reply:t")
    seat(client, gw)
    st1 = svc.load_state("m1")
    r.hset("sk:reply:broken", "not", "a stream")
    broken = GatewayClient(r, ops=keys.INBOX, reply_to="sk:reply:broken")
    first = broken.play("m1", st1.current_player, cards=[st1.seat(st1.turn).hand[0]],
                        expected_version=st1.version)
    nxt = "b" if st1.current_player == "a" else "a"
    second = client.pass_("m1", nxt, expected_version=st1.version + 1)
    assert gw.run_once(block_ms=None, count=10) == 2
    assert svc.store.command_range("m1", first.command_id) is not None
    assert svc.store.command_range("m1", second.command_id) is not None  # both accepted
    for p in ("a", "b"):
        got = versions_on(r, p)
        assert got == sorted(got), (p, got)
        assert got[-2:] == [st1.version + 1, st1.version + 2]


MAX_ID = "18446744073709551615-18446744073709551615"


@pytest.mark.parametrize("alone", [True, False], ids=["alone", "in-a-round"])
def test_a_carried_write_the_server_refuses_after_the_events_is_not_a_failed_append(r, alone) -> None:
    """A reply stream whose last id is the largest there is (anyone who may XADD to it can
    make it so): the script's XADD of the
    reply fails *after* the events, the command id and the deadline are stored (Lua does
    not roll back).  The command is accepted once: its message is acknowledged, its players'
    updates are on their streams once (in order), it is not dead-lettered as an engine
    failure of an append that did not happen, and the stats count it accepted."""
    gw, svc = consumer(r, RedisEventStore(r))
    client = GatewayClient(r, ops=keys.INBOX, reply_to="sk:reply:t")
    seat(client, gw)
    st1 = svc.load_state("m1")
    r.xadd("sk:reply:full", {"x": "1"}, id=MAX_ID)
    full = GatewayClient(r, ops=keys.INBOX, reply_to="sk:reply:full")
    if not alone:  # another match's command in the same round: the pipelined path
        client.create_match("m2", CONFIG)
        client.sit("m2", "c")
        drain(gw)
        client.sit("m2", "d")
    accepted = gw.stats.accepted
    sent = full.play("m1", st1.current_player, cards=[st1.seat(st1.turn).hand[0]], expected_version=st1.version)
    gw.run_once(block_ms=None, count=10)
    drain(gw)
    assert svc.store.command_range("m1", sent.command_id) is not None  # the events are in
    assert not r.xpending(keys.INBOX, keys.SERVICE_GROUP)["pending"]
    dead = [f for _, f in r.xrange(keys.DEAD_LETTERS)]
    assert not [f for f in dead if b"not executed" in f.get(b"dead_reason", b"")]
    for p in ("a", "b"):
        mine = [f for _, f in r.xrange(keys.outbox_key(p)) if f[b"command_id"].decode() == sent.command_id]
        assert len(mine) == 1, (p, mine)
        got = versions_on(r, p)
        assert got == sorted(got)
    assert gw.stats.accepted == accepted + (1 if alone else 2)


@pytest.mark.parametrize("bad", ["maxlen", "fields", "exhausted", "wrongtype"])
def test_a_carried_write_that_fails_in_the_script_is_undone_and_the_events_stay(r, bad) -> None:
    """Whatever makes one carried write fail inside the script -- a malformed maxlen, more
    fields than Lua can unpack, a stream out of ids, a key that is not a stream -- the append still succeeds
    (``wrote`` False: the caller publishes), and the entries written before it are removed
    again (a stream the script created is gone) so nothing is published twice."""
    store = RedisEventStore(r)
    r.xadd("sk:out:old", {"kind": "earlier"})
    r.xadd("sk:reply:full", {"x": "1"}, id=MAX_ID)
    r.set("sk:reply:str", "a string, not a stream")
    last: Write = {"maxlen": Write("sk:reply:x", {"kind": "r"}, "not-a-number"),  # type: ignore[arg-type]
                   "fields": Write("sk:reply:x", {f"f{i}": "v" for i in range(10_000)}, 10),
                   "exhausted": Write("sk:reply:full", {"kind": "r"}, 10, 60),
                   "wrongtype": Write("sk:reply:str", {"kind": "r"}, 10, 60)}[bad]
    writes = (Write("sk:out:new", {"kind": "update"}, 10, 60), Write("sk:out:old", {"kind": "update"}, 10, 60), last)
    e = PlayerReady(match_id="mx", seq=1, ts=0, command_id="c1", player="a")
    [result] = store.append_many([AppendRequest("mx", 0, "c1", (e,), None, writes)])
    assert not isinstance(result, Exception) and not result.duplicate
    assert (result.version, result.wrote) == (1, False)
    assert store.version("mx") == 1 and store.command_range("mx", "c1") is not None
    assert not r.exists("sk:out:new") and not r.exists("sk:reply:x")
    assert r.get("sk:reply:str") == b"a string, not a stream"
    assert [f[b"kind"] for _, f in r.xrange("sk:out:old")] == [b"earlier"]
    # and the same append with good writes carries them all
    ok = (Write("sk:out:new", {"kind": "update"}, 10, 60), Write("sk:out:old", {"kind": "update"}, 10, 60))
    e2 = PlayerReady(match_id="mx", seq=2, ts=0, command_id="c2", player="b")
    [result] = store.append_many([AppendRequest("mx", 1, "c2", (e2,), None, ok)])
    assert result.wrote and r.xlen("sk:out:new") == 1 and r.xlen("sk:out:old") == 2
    assert 0 < r.ttl("sk:out:new") <= 60


class BrokenBalances:
    """A ledger that fails for good on one player (an engine-side error, not transient)."""

    def balance(self, player: str, mode: str) -> int:
        if player == "z":
            raise ValueError("no ledger record for z")
        return 5000


def test_a_command_the_engine_failed_on_holds_back_the_later_commands_of_its_match(r) -> None:
    """A command the engine fails on is dead-lettered after the appends; a later command
    of the same match in that read is published after it, not carried ahead of it (the
    reply stream's entries of one match in message order)."""
    gw, svc = consumer(r, RedisEventStore(r))
    client = GatewayClient(r, ops=keys.INBOX, reply_to="sk:reply:t")
    seat(client, gw)
    svc.balances = BrokenBalances()
    st1 = svc.load_state("m1")
    failing = client.sit("m1", "z")
    sent = client.play("m1", st1.current_player, cards=[st1.seat(st1.turn).hand[0]], expected_version=st1.version)
    assert gw.run_once(block_ms=None, count=10) == 2
    assert svc.store.command_range("m1", sent.command_id) is not None
    order = [(f[b"command_id"].decode(), f[b"kind"]) for _, f in r.xrange("sk:reply:t")
             if f[b"command_id"].decode() in (failing.command_id, sent.command_id)]
    assert order == [(failing.command_id, b"dead"), (sent.command_id, b"accepted")]


@pytest.mark.parametrize("others", [0, 1], ids=["alone", "with-another-match"])
def test_an_append_redis_refuses_for_good_dead_letters_its_own_message(r, others) -> None:
    """The store refuses one match's append for good (its command-id hash is not a hash):
    that message alone is dead-lettered with the reason; the read does not fail, and the
    other match's command in it is accepted and published once."""
    gw, svc = consumer(r, RedisEventStore(r))
    client = GatewayClient(r, ops=keys.INBOX, reply_to="sk:reply:t")
    seat(client, gw)
    if others:
        client.create_match("m2", CONFIG)
        drain(gw)
    st1 = svc.load_state("m1")
    b = svc.store.bucket_of("m1")
    r.delete(keys.commands_key("m1", b))
    r.set(keys.commands_key("m1", b), "corrupt")
    sent = client.play("m1", st1.current_player, cards=[st1.seat(st1.turn).hand[0]], expected_version=st1.version)
    other = client.sit("m2", "c") if others else None
    assert gw.run_once(block_ms=None, count=10) == 1 + others  # does not raise
    [dead] = [f for _, f in r.xrange(keys.DEAD_LETTERS)]
    assert b"WRONGTYPE" in dead[b"dead_reason"] and b"not executed" not in dead[b"dead_reason"]
    assert not r.xpending(keys.INBOX, keys.SERVICE_GROUP)["pending"]
    if other is not None:
        assert [f[b"kind"] for _, f in r.xrange(keys.outbox_key("c"))] == [b"update"]
        assert [m.kind for m in client.replies() if m.command_id == other.command_id] == ["accepted"]
    assert [m.kind for m in client.replies() if m.command_id == sent.command_id] == ["dead"]


@pytest.mark.redis
@pytest.mark.parametrize("carried", [True, False])
def test_a_players_stream_gets_its_notice_and_a_reply_stream_none(real_redis, carried) -> None:
    """The notice (``SPUBLISH <stream> ""``, engine/store/keys.py "Notices") follows each entry
    of a stream a gateway reads on notices; a reply stream, read by polling, gets none:
    whether the append carries the entries or the publisher writes them."""
    r = real_redis
    sub = r.pubsub()
    sub.ssubscribe("sk:out:n1", "sk:reply:n1")
    for _ in range(2):
        assert sub.get_message(timeout=2)["type"] == "ssubscribe"
    pub = Publisher(r, consumer="t")
    writes = [pub._delivery("sk:out:n1", {"kind": "update"}), pub._delivery("sk:reply:n1", {"kind": "accepted"})]
    assert [w.notice for w in writes] == [True, False]
    if carried:
        e = PlayerReady(match_id="mn", seq=1, ts=0, command_id="c1", player="a")
        [result] = RedisEventStore(r).append_many([AppendRequest("mn", 0, "c1", (e,), None, tuple(writes))])
        assert result.wrote
    else:
        assert all(isinstance(x, bytes) for x in pub.write(writes))
    assert r.xlen("sk:out:n1") == r.xlen("sk:reply:n1") == 1
    got = []
    while (m := sub.get_message(timeout=0.5)) is not None:
        got.append(m["channel"])
    sub.close()
    assert got == [b"sk:out:n1"]
