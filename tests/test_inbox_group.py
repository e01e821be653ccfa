"""The bucket streams of one node read together (issue 38 §1): engine.service.inbox.run_together
and engine.service.ownership.InboxGroup.

On a plain Redis, serve reads the player inboxes of every bucket it owns with one XREADGROUP and
runs their commands in one round of appends (a read carries every bucket's commands, as one
stream's would); each stream keeps its own acknowledgements, so equal entry ids on two streams
are two messages; a stream taken out of the group is not read again and its acknowledgements
are sent.  Counted on a redis-server of this module alone (INFO commandstats).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from engine.config import load_config
from engine.match.commands import Ready, encode_command
from engine.service.channels import PLAYER, ChannelService
from engine.service.client import GatewayClient
from engine.service.inbox import InboxConsumer, run_together
from engine.service.ownership import InboxGroup
from engine.service.service import MatchService
from engine.service.shuffle import seeded_random, seeded_server_seeds
from engine.service.state_cache import StateCache
from engine.store import keys
from engine.store.redis_store import RedisEventStore
from tests.conftest import RedisServer, own_redis_server
from tests.wire_support import record_riders

pytestmark = pytest.mark.redis

CONFIG = load_config("points").to_record()


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    yield from own_redis_server()  # commandstats are server-wide


def calls(r: Any) -> Counter[str]:
    return Counter({k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in r.info("commandstats").items()})


def rig(r: Any, n: int) -> tuple[MatchService, dict[str, InboxConsumer], list[str]]:
    """``n`` seated matches in ``n`` different buckets, and a player-channel consumer per bucket stream."""
    clock = iter(range(1_000_000, 10**12, 1000))
    svc = MatchService(RedisEventStore(r), lambda: next(clock), seeded_random(1), state_cache=StateCache(),
                       server_seeds=seeded_server_seeds(1))
    mids: list[str] = []
    seen: set[int] = set()
    k = 0
    while len(mids) < n:
        mid, k = f"g{k}", k + 1
        if keys.bucket_of(mid) not in seen:
            seen.add(keys.bucket_of(mid))
            mids.append(mid)
    setup = InboxConsumer(r, svc, "t", stream="sk:setup")
    lobby = GatewayClient(r, inbox="sk:setup", ops="sk:setup")
    for mid in mids:
        lobby.create_match(mid, CONFIG)
        for p in "ab":
            lobby.sit(mid, mid + p)
    while setup.run_once(block_ms=None, count=50):
        pass
    consumers = {keys.inbox_key(keys.bucket_of(m)): InboxConsumer(r, ChannelService(svc, PLAYER), "t",
                                                                  stream=keys.inbox_key(keys.bucket_of(m)))
                 for m in mids}
    return svc, consumers, mids


def pending(r: Any, stream: str) -> int:
    return int(r.xpending(stream, keys.SERVICE_GROUP)["pending"])


def test_one_read_and_one_round_of_appends_serve_every_buckets_commands(real_redis) -> None:
    r = real_redis
    svc, consumers, mids = rig(r, 4)
    group = list(consumers.values())
    assert run_together(group, block_ms=None) == 0  # each consumer's own pending entries first: none
    client = GatewayClient(r)
    for mid in mids:
        client.ready(mid, mid + "a")
    before = calls(r)
    assert run_together(group, block_ms=None) == 4
    spent = calls(r) - before
    assert spent["xreadgroup"] == 1  # one read for the four streams (not one per stream)
    assert spent["evalsha"] == 4  # every command appended ...
    assert all(svc.state_cache.get(m).version == 4 for m in mids)  # type: ignore[union-attr]
    for mid in mids:  # ... with its publication carried: the player's update is there
        assert r.xlen(keys.outbox_key(mid + "a")) >= 1
    # the acknowledgements go with the next read, each to its own stream
    assert sum(pending(r, s) for s in consumers) == 4
    assert run_together(group, block_ms=None) == 0
    assert sum(pending(r, s) for s in consumers) == 0
    assert sum(c.stats.accepted for c in group) == 4


def test_equal_entry_ids_on_two_streams_are_two_messages_each_acknowledged_on_its_own(real_redis) -> None:
    r = real_redis
    _svc, consumers, mids = rig(r, 2)
    group = list(consumers.values())
    run_together(group, block_ms=None)
    for mid in mids:  # the same explicit id on both streams
        command = Ready(command_id=f"same-{mid}", match_id=mid, player=mid + "a")
        r.xadd(keys.inbox_key(keys.bucket_of(mid)), {"c": encode_command(command)}, id="9999999999999-1")
    assert run_together(group, block_ms=None) == 2
    run_together(group, block_ms=None)
    assert all(pending(r, s) == 0 for s in consumers)
    assert all(c.stats.accepted == 1 for c in group)


def test_a_group_reads_its_members_and_a_stream_taken_out_is_read_no_more(real_redis) -> None:
    r = real_redis
    svc, consumers, mids = rig(r, 2)
    (s1, c1), (s2, c2) = consumers.items()
    m1, m2 = (next(m for m in mids if keys.inbox_key(keys.bucket_of(m)) == s) for s in (s1, s2))
    group = InboxGroup("test group", block_ms=50)
    try:
        w1, w2 = group.add(c1), group.add(c2)
        client = GatewayClient(r)
        client.ready(m1, m1 + "a")
        client.ready(m2, m2 + "a")
        end = time.monotonic() + 20
        while time.monotonic() < end and c1.stats.accepted + c2.stats.accepted < 2:
            time.sleep(0.02)
        assert (c1.stats.accepted, c2.stats.accepted) == (1, 1)
        w2.stop()  # out of the reads; its acknowledgement sent
        assert pending(r, s2) == 0
        v2 = svc.state_cache.get(m2).version  # type: ignore[union-attr]
        client.ready(m2, m2 + "b")
        client.ready(m1, m1 + "b")
        end = time.monotonic() + 20
        while time.monotonic() < end and c1.stats.accepted < 2:
            time.sleep(0.02)
        assert c1.stats.accepted == 2
        assert c2.stats.accepted == 1  # its stream is read no more: the command waits there
        time.sleep(0.3)  # several of the group's rounds
        assert c2.stats.accepted == 1 and svc.state_cache.get(m2).version == v2  # type: ignore[union-attr]
        assert r.xlen(s2) == 2 and pending(r, s2) == 0  # not even delivered
        w1.stop()
        assert pending(r, s1) == 0
    finally:
        group.stop()


def test_a_hand_over_of_several_buckets_waits_for_one_round_not_one_each(real_redis) -> None:
    """Issue 38: the group blocks 0.5 s like every loop; handing four buckets over takes their
    streams out together and waits for the round in hand once (one after another would wait
    for a round per bucket)."""
    from engine.service.ownership import BucketOwner, GroupedWork

    r = real_redis
    _svc, consumers, _mids = rig(r, 4)
    group = InboxGroup("test group", block_ms=200)
    try:
        streams = sorted(consumers)
        works = {b: GroupedWork([group.add(consumers[s])]) for b, s in enumerate(streams)}
        owner = BucketOwner(r, "hand-over-test", lambda b: works[b], buckets=4, ttl_ms=4000, tick_ms=500)
        assert owner.tick() == {0, 1, 2, 3}
        end = time.monotonic() + 20
        while time.monotonic() < end and group._done < 2:  # the group reads its four streams
            time.sleep(0.02)
        before = group._started
        owner.release_all()
        assert group._done - before <= 1  # the round in hand, once
        assert not group._members
        assert not any(r.exists(keys.owner_key(b)) for b in range(4))
    finally:
        group.stop()


def test_a_buckets_player_and_operator_streams_are_read_together_each_under_its_own_channel(real_redis) -> None:
    """A Cluster's serve (engine.service.ownership.SlotGroupWork): a bucket's ``sk:{b<N>}:inbox``
    and ``sk:{b<N>}:ops`` share its slot, so one group reads both with one XREADGROUP; each
    stream's commands still go through its own channel (a player command on the operator
    stream is refused ``not_allowed``), and stopping acknowledges everything and ends the thread."""
    from engine.service.channels import OPS
    from engine.service.ownership import SlotGroupWork

    r = real_redis
    svc, consumers, mids = rig(r, 1)
    mid = mids[0]
    bucket = keys.bucket_of(mid)
    other = next(m for m in (f"h{k}" for k in range(10_000)) if keys.bucket_of(m) == bucket)
    player = consumers[keys.inbox_key(bucket)]
    ops = InboxConsumer(r, ChannelService(svc, OPS), "t", stream=keys.ops_key(bucket))
    run_together([player, ops], block_ms=None)  # each consumer's own pending entries first: none
    client = GatewayClient(r)
    client.ready(mid, mid + "a")  # the player channel
    client.create_match(other, CONFIG)  # the operator channel, same bucket
    wrong = Ready(command_id="on-ops", match_id=mid, player=mid + "b")
    r.xadd(keys.ops_key(bucket), {"c": encode_command(wrong)})  # a player command on the operator stream
    before = calls(r)
    assert run_together([player, ops], block_ms=None) == 3
    assert (calls(r) - before)["xreadgroup"] == 1  # one read for the bucket's two streams
    assert svc.state_cache.get(mid).version == 4  # type: ignore[union-attr]
    assert svc.load_state(other) is not None and svc.load_state(other).version >= 1
    assert (player.service.refused, ops.service.refused) == (0, 1)  # type: ignore[union-attr]
    client.sit(other, "z1")
    work = SlotGroupWork([player, ops], "test bucket", block_ms=50)
    try:
        end = time.monotonic() + 20
        while time.monotonic() < end and ops.stats.accepted < 2:
            time.sleep(0.02)
        assert ops.stats.accepted == 2
    finally:
        work.stop()
    assert pending(r, keys.inbox_key(bucket)) == 0 and pending(r, keys.ops_key(bucket)) == 0
    assert not work.group._thread.is_alive()


def test_a_group_reads_again_at_once_after_a_redirection_and_within_a_second_of_an_outage(monkeypatch) -> None:
    """After a MOVED (the slots were asked again) the bucket streams are read again at once,
    the back-off left where it was; while a node is away the waits double up to
    READ_RETRY_CAP_S (1 s), so a replica promoted in a fail-over is read within a second."""
    import types

    import redis.exceptions as rex

    from engine.service import inbox
    from engine.store.transient import READ_RETRY_CAP_S

    errors = [rex.ConnectionError("refused")] * 7 + [rex.MovedError("5566 127.0.0.1:7001"),
                                                      rex.ConnectionError("refused")]

    def failing(*_a: Any, **_k: Any) -> int:
        raise errors.pop(0)

    waits: list[float] = []

    class Recorder:
        def is_set(self) -> bool:
            return not errors

        def wait(self, delay: float) -> bool:
            waits.append(delay)
            return False

    group = InboxGroup("t-retry", block_ms=10)
    group.stop()
    monkeypatch.setattr(inbox, "run_together", failing)
    group._members = [types.SimpleNamespace(stats=types.SimpleNamespace(oversized=0), _backlog=False)]
    group._stop = Recorder()  # type: ignore[assignment]
    group._run()
    assert READ_RETRY_CAP_S == 1.0
    assert waits == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 0.05, 1.0]
    assert group._members[0]._backlog is True  # what the failed round read is read again first


def test_on_one_redis_serves_loop_reads_on_its_own_after_the_appends(real_redis, monkeypatch) -> None:
    """Issue 38: on one Redis the next read takes no ride (the publications go inside the
    appends' scripts: a read sent with them would be served before the round finished, and
    a command coming meanwhile would wait a round more): the read, the appends, the read."""
    r = real_redis
    _svc, consumers, mids = rig(r, 4)
    group = list(consumers.values())
    run_together(group, block_ms=None)
    client = GatewayClient(r)
    for mid in mids:
        client.ready(mid, mid + "a")
    riders = record_riders(monkeypatch)
    assert run_together(group, block_ms=300, carry_on=lambda: True) == 4
    assert not riders
    assert sum(pending(r, s) for s in consumers) == 4  # acknowledged with the next read
    assert run_together(group, block_ms=None) == 0
    assert sum(pending(r, s) for s in consumers) == 0


def test_every_xack_a_read_could_not_run_goes_with_the_next_read() -> None:
    """A read's round trip whose XACKs failed on two streams: both streams' acknowledgements are
    queued again, ahead of those taken since, and the first failure is raised."""
    import types

    import redis.exceptions as rex

    from engine.service.inbox import _read_replies

    a, b, c = (types.SimpleNamespace(_unsent_acks=[f"{n}-9"]) for n in (1, 2, 3))
    first, second = rex.ConnectionError("a"), rex.ResponseError("b")
    acking: list[Any] = [(a, ["1-1"]), (b, ["2-1"]), (c, ["3-1"])]
    with pytest.raises(rex.ConnectionError):
        _read_replies(acking, [], [first, 1, second, None], direct=True)
    assert (a._unsent_acks, b._unsent_acks, c._unsent_acks) == (["1-1", "1-9"], ["2-9"], ["3-1", "3-9"])
