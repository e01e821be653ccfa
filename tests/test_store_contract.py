"""One contract suite for every EventStore: in-memory, fakeredis (Lua via lupa), real redis-server."""

from __future__ import annotations

import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.match.events import (CardsPlayed, MatchFinished, Passed, PlayerReady, Reading, TrusteeshipStarted,
                                 TurnTimedOut)
from engine.match.deadline import Deadline
from engine.store.base import AppendResult, Snapshot, WrongVersion
from engine.store.memory import InMemoryEventStore
from engine.store.redis_store import RedisEventStore


@pytest.fixture(params=["memory", "fakeredis", pytest.param("redis", marks=pytest.mark.redis)])
def store(request):
    return request.getfixturevalue({"memory": "memory_store", "fakeredis": "fake_redis_store",
                                    "redis": "real_redis_store"}[request.param])


def evs(match_id: str, after: int, n: int, cmd: str = "c", ts: int = 1_000) -> list:
    """n realistic events with seqs after+1 … after+n (plays and passes)."""
    out = []
    for i in range(n):
        seq = after + 1 + i
        if seq % 3 == 0:
            out.append(Passed(match_id=match_id, seq=seq, ts=ts + seq, command_id=cmd, player="b"))
        elif seq % 3 == 1:
            out.append(CardsPlayed(match_id=match_id, seq=seq, ts=ts + seq, command_id=cmd, player="a",
                                   cards=(seq % 100, seq % 100 + 1),
                                   reading=Reading(kind="pair", top=5, size=2, counts=(2,))))
        else:
            out.append(PlayerReady(match_id=match_id, seq=seq, ts=ts + seq, command_id=cmd, player="a"))
    return out


def same_bucket_ids(store, n: int) -> list[str]:
    """n match ids that share one bucket."""
    target = store.bucket_of("m0")
    ids, i = [], 0
    while len(ids) < n:
        if store.bucket_of(f"m{i}") == target:
            ids.append(f"m{i}")
        i += 1
    return ids


# -- append / load / version --------------------------------------------------------------------
def test_append_load_round_trip(store):
    events = evs("m1", 0, 3, "c1")
    result = store.append("m1", 0, "c1", events, None)
    assert result == AppendResult(version=3, duplicate=False, events=tuple(events))
    assert store.load("m1") == events
    assert store.load("m1", after=1) == events[1:]
    assert store.load("m1", after=3) == []
    more = evs("m1", 3, 2, "c2")
    assert store.append("m1", 3, "c2", more, None).version == 5
    assert store.load("m1") == events + more
    assert store.load("m1", after=4) == more[1:]


def test_versions(store):
    assert store.version("nope") == 0
    assert store.load("nope") == []
    store.append("m1", 0, "c1", evs("m1", 0, 2), None)
    assert store.version("m1") == 2
    store.append("m1", 2, "c2", evs("m1", 2, 1), None)
    assert store.version("m1") == 3
    assert store.version("m2") == 0


def test_wrong_version(store):
    store.append("m1", 0, "c1", evs("m1", 0, 2), None)
    for expected in (0, 1, 3, 7):
        with pytest.raises(WrongVersion) as info:
            store.append("m1", expected, f"x{expected}", evs("m1", expected, 1), None)
        assert (info.value.match_id, info.value.expected, info.value.actual) == ("m1", expected, 2)
    with pytest.raises(WrongVersion) as info:
        store.append("fresh", 4, "c", evs("fresh", 4, 1), None)
    assert info.value.actual == 0
    assert store.version("m1") == 2
    assert store.version("fresh") == 0
    # a refused command id was not recorded: it can still be applied
    assert store.append("m1", 2, "x3", evs("m1", 2, 1, "x3"), None).duplicate is False


def test_bad_arguments(store):
    with pytest.raises(ValueError):
        store.append("m1", 0, "c", evs("m1", 1, 1), None)  # seq 2 at version 0
    with pytest.raises(ValueError):
        store.append("m1", 0, "c", evs("other", 0, 1), None)
    with pytest.raises(ValueError):
        store.append("m1", 0, "", evs("m1", 0, 1), None)
    with pytest.raises(ValueError):
        store.append("m1", 0, "c", evs("m1", 0, 1), Deadline("other", 1, 5, "turn"))
    assert store.version("m1") == 0


def test_duplicate_command_returns_original_events(store):
    first = evs("m1", 0, 2, "c1")
    store.append("m1", 0, "c1", first, Deadline("m1", 2, 5_000, "turn"))
    second = evs("m1", 2, 3, "c2")
    store.append("m1", 2, "c2", second, Deadline("m1", 5, 9_000, "turn"))
    feed_before = store.read_feed(store.bucket_of("m1"))
    # a retry of c1 (stale expected version, other events, other deadline) changes nothing
    again = store.append("m1", 0, "c1", evs("m1", 0, 1, "zzz"), None)
    assert again == AppendResult(version=2, duplicate=True, events=tuple(first))
    again2 = store.append("m1", 7, "c2", [], Deadline("m1", 9, 1, "ready"))
    assert again2 == AppendResult(version=5, duplicate=True, events=tuple(second))
    assert store.version("m1") == 5
    assert store.load("m1") == first + second
    assert store.deadline("m1") == Deadline("m1", 5, 9_000, "turn")
    assert store.read_feed(store.bucket_of("m1")) == feed_before
    # command ids are per match
    assert store.append("m2", 0, "c1", evs("m2", 0, 1, "c1"), None).duplicate is False


def test_command_without_events(store):
    store.append("m1", 0, "c1", evs("m1", 0, 2), None)
    r = store.append("m1", 2, "noop", [], Deadline("m1", 2, 3_000, "trustee"))
    assert r == AppendResult(version=2, duplicate=False, events=())
    assert store.deadline("m1") == Deadline("m1", 2, 3_000, "trustee")
    assert [e.last for e in store.read_feed(store.bucket_of("m1"))] == [2]  # no notification
    assert store.append("m1", 0, "noop", [], None) == AppendResult(version=2, duplicate=True, events=())


def test_paging_over_many_events(store):
    total = 0
    all_events = []
    for batch in range(12):
        events = evs("big", total, 100, f"c{batch}")
        store.append("big", total, f"c{batch}", events, None)
        all_events += events
        total += 100
    store.append("big", total, "last", evs("big", total, 7, "last"), None)
    all_events += evs("big", total, 7, "last")
    assert store.version("big") == 1207
    loaded = store.load("big")
    assert len(loaded) == 1207
    assert [e.seq for e in loaded] == list(range(1, 1208))
    assert loaded == all_events
    assert [e.seq for e in store.load("big", after=499)] == list(range(500, 1208))
    assert [e.seq for e in store.load("big", after=1000)] == list(range(1001, 1208))
    assert store.load("big", after=1207) == []


# -- feed -----------------------------------------------------------------------------------
def test_feed_notifications(store):
    a, b = same_bucket_ids(store, 2)
    bucket = store.bucket_of(a)
    store.append(a, 0, "c1", evs(a, 0, 2), None)
    store.append(b, 0, "c1", [PlayerReady(match_id=b, seq=1, ts=1_001, command_id="c1", player="a")], None)
    store.append(a, 2, "c2", evs(a, 2, 3), None)
    store.append(a, 2, "c2", evs(a, 2, 3), None)  # duplicate: no notification
    feed = store.read_feed(bucket)
    assert [(e.match_id, e.first, e.last) for e in feed] == [(a, 1, 2), (b, 1, 1), (a, 3, 5)]
    assert len({e.id for e in feed}) == 3
    assert store.read_feed(bucket, after=feed[0].id) == feed[1:]
    assert store.read_feed(bucket, after=feed[-1].id) == []
    assert store.read_feed(bucket, count=2) == feed[:2]
    other = next(i for i in range(store.buckets) if i != bucket)
    assert all(e.match_id not in (a, b) for e in store.read_feed(other))


def _env(seq: int) -> dict:
    return {"match_id": "m1", "seq": seq, "ts": 1_000 + seq, "command_id": f"c{seq}"}


def test_feed_leaves_a_matchs_moves_and_clock_unannounced(store):
    """An append gets a feed entry unless all its events are a match's moves or clock
    (engine.match.events.announced): the lobby and the projections act on none of them."""
    bucket = store.bucket_of("m1")
    play = {"cards": (5, 6), "reading": Reading(kind="pair", top=5, size=2, counts=(2,))}
    appends = [
        [PlayerReady(**_env(1), player="a")],                                          # announced
        [CardsPlayed(**_env(2), player="a", **play)],                                  # a move
        [Passed(**_env(3), player="b"), TurnTimedOut(**_env(4), player="a", count=1, notice_zh="超時", notice_en="timed out"),
         TrusteeshipStarted(**_env(5), player="a", reason="timeouts")],                 # moves, the clock
        [CardsPlayed(**_env(6), player="a", **play),
         MatchFinished(**_env(7), winner="a", loser="b", cards_left={"a": 0, "b": 5}, kou="single",
                       reason="out")],                                                  # the finish
    ]
    version = 0
    for events in appends:
        version = store.append("m1", version, events[0].command_id, events, None).version
    assert version == 7 and len(store.load("m1")) == 7
    assert [(e.first, e.last, e.finished) for e in store.read_feed(bucket)] == [(1, 1, False), (6, 7, True)]


# -- deadlines ------------------------------------------------------------------------------
def test_deadlines_set_replace_clear(store):
    assert store.deadline("m1") is None
    store.append("m1", 0, "c1", evs("m1", 0, 1), Deadline("m1", 1, 10_000, "ready"))
    assert store.deadline("m1") == Deadline("m1", 1, 10_000, "ready")
    store.append("m1", 1, "c2", evs("m1", 1, 1), Deadline("m1", 2, 20_000, "turn"))
    assert store.deadline("m1") == Deadline("m1", 2, 20_000, "turn")
    assert store.due_deadlines(15_000) == []
    assert store.due_deadlines(20_000) == [Deadline("m1", 2, 20_000, "turn")]
    store.append("m1", 2, "c3", evs("m1", 2, 1), None)
    assert store.deadline("m1") is None
    assert store.due_deadlines(10**15) == []


def test_due_deadlines_order_across_buckets(store):
    at = {f"m{i}": 1_000 + (i * 7919) % 50 * 10 for i in range(40)}
    for match_id, at_ms in at.items():
        store.append(match_id, 0, "c", evs(match_id, 0, 1), Deadline(match_id, 1, at_ms, "turn"))
    assert len({store.bucket_of(m) for m in at}) > 1
    now = 1_250
    want = sorted(((ms, m) for m, ms in at.items() if ms <= now))
    due = store.due_deadlines(now, limit=1000)
    assert [(d.at_ms, d.match_id) for d in due] == want
    assert all(d.version == 1 and d.kind == "turn" for d in due)
    assert store.due_deadlines(now, limit=5) == due[:5]
    assert store.due_deadlines(0) == []


# -- snapshots, match ids ------------------------------------------------------------------------
def test_snapshots(store):
    assert store.load_snapshot("m1") is None
    store.save_snapshot("m1", Snapshot(version=3, state=b"\x00\x01state"))
    assert store.load_snapshot("m1") == Snapshot(version=3, state=b"\x00\x01state")
    store.save_snapshot("m1", Snapshot(version=9, state=b""))
    assert store.load_snapshot("m1") == Snapshot(version=9, state=b"")
    assert store.load_snapshot("m2") is None


def test_match_ids(store):
    assert list(store.match_ids()) == []
    ids = {f"match-{i}" for i in range(30)} | {"有{括}號", "x"}
    for m in ids:
        store.append(m, 0, "c", evs(m, 0, 1), None)
    listed = list(store.match_ids())
    assert len(listed) == len(ids)
    assert set(listed) == ids


# -- concurrency ----------------------------------------------------------------------------
def test_concurrent_appenders_never_both_succeed(store):
    threads_n, rounds = 6, 15
    wins: list[tuple[int, int]] = []
    lock = threading.Lock()
    barrier = threading.Barrier(threads_n)

    def worker(t: int) -> None:
        for r in range(rounds):
            barrier.wait()
            expected = store.version("race")
            try:
                store.append("race", expected, f"t{t}-r{r}", evs("race", expected, 2, f"t{t}-r{r}"), None)
            except WrongVersion:
                continue
            with lock:
                wins.append((t, expected))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(threads_n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    versions = [v for _, v in wins]
    assert len(versions) == len(set(versions)), "two appenders succeeded at one version"
    loaded = store.load("race")
    assert [e.seq for e in loaded] == list(range(1, len(loaded) + 1))
    assert len(loaded) == 2 * len(wins)
    # each winner's two events are adjacent and carry its command id
    for i in range(0, len(loaded), 2):
        assert loaded[i].command_id == loaded[i + 1].command_id


def test_redis_store_works_on_real_server_and_fakeredis_alike():
    # smoke for the lazy export
    import engine.store as s

    assert s.RedisEventStore is RedisEventStore


# -- property: every implementation gives the same results -------------------------------------
MATCHES = ["p0", "p1", "p2"]
op_strategy = st.tuples(
    st.sampled_from(MATCHES),
    st.sampled_from([-1, 0, 0, 0, 0, 1]),  # expected version offset
    st.integers(0, 5),  # command id (shared pool: duplicates happen)
    st.integers(0, 3),  # events
    st.one_of(st.none(), st.tuples(st.integers(0, 40), st.sampled_from(["turn", "trustee", "ready"]))),
)


def run_ops(store, ops) -> list:
    out = []
    for match_id, offset, cmd, n, dl in ops:
        v = store.version(match_id)
        expected = max(0, v + offset)
        deadline = None if dl is None else Deadline(match_id, expected + n, dl[0] * 100, dl[1])
        try:
            r = store.append(match_id, expected, f"cmd{cmd}", evs(match_id, expected, n, f"cmd{cmd}"), deadline)
            out.append(("ok", r.version, r.duplicate, [e.seq for e in r.events], r.events))
        except WrongVersion as exc:
            out.append(("wrong", exc.expected, exc.actual))
    out.append({m: store.load(m) for m in MATCHES})
    out.append(sorted(store.match_ids()))
    out.append(store.due_deadlines(2_000, limit=50))
    out.append([store.deadline(m) for m in MATCHES])
    out.append(sorted((b, e.match_id, e.first, e.last) for b in range(store.buckets) for e in store.read_feed(b)))
    return out


ops_lists = st.lists(op_strategy, min_size=1, max_size=25)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=ops_lists)
def test_property_memory_and_fakeredis_agree(ops):
    import fakeredis

    memory = InMemoryEventStore()
    fake = RedisEventStore(fakeredis.FakeRedis(server=fakeredis.FakeServer()))
    assert run_ops(memory, ops) == run_ops(fake, ops)


@pytest.mark.redis
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=ops_lists)
def test_property_memory_and_real_redis_agree(redis_server, ops):
    client = redis_server.client()
    try:
        client.flushdb()
        assert run_ops(InMemoryEventStore(), ops) == run_ops(RedisEventStore(client), ops)
    finally:
        client.close()
