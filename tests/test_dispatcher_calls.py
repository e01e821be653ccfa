"""What the deadline dispatcher asks Redis, and that its loop never spins (issue 13, perf).

* A tick is one ``EVALSHA`` for all buckets (was: ``SCRIPT EXISTS`` + 16 ``EVALSHA`` in a
  pipeline: redis-py asks ``SCRIPT EXISTS`` before every pipeline that holds a registered
  script), and releasing a fired batch is one ``EVALSHA`` too.  Counted on the connection
  (:class:`Recorder`), on a real redis-server.
* ``SCRIPT FLUSH`` in the middle of a run (a Redis restart, an operator): the next call
  answers ``NOSCRIPT``, the script is loaded and run again; no deadline is lost or fired
  twice and every match is settled exactly once.
* An idle dispatcher wakes at most every ``SK_DISPATCH_IDLE_MS`` (100 ms), not every
  25 ms, and exactly when the soonest recorded deadline falls due.
* :class:`~workers.dispatcher.DispatcherThread` waits between its iterations whatever Redis
  state it finds (lease key deleted, index keys deleted, the database flushed, the lease
  held by another process, scripts flushed, a key of the wrong type, Redis gone): counted
  with a fake clock and a fake wait, never timed.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import redis

from engine.match.deadline import Deadline
from engine.match.events import MatchFinished, TurnTimedOut
from engine.match.replay import check_stream
from engine.store import keys
from engine.store.redis_store import RedisEventStore
from projections.ledger import RedisLedger
from projections.runner import ProjectionRunner, RedisFeed, reconcile
from projections.settlement import settle
from tests.test_timer_safety import Match
from tests.test_workers import T0, cfg
from workers.clock import FakeClock
from workers.dispatcher import (
    DEFAULT_IDLE_MS,
    CLAIM_LIMIT,
    DEFAULT_INTERVAL_MS,
    HOLDER_KEY,
    NOTHING_RECORDED,
    Claim,
    Dispatcher,
    DispatcherLease,
    DispatcherThread,
    MemoryClaims,
    RedisClaims,
    claims_for,
)
from workers.embedded import EmbeddedTimers
from tests.conftest import own_redis_server


@pytest.fixture(scope="module")
def redis_server():
    """This module's own redis-server: its tests SCRIPT FLUSH, which is server-wide."""
    yield from own_redis_server()


pytestmark = pytest.mark.redis


class Recorder:
    """The commands a client sends and its round trips (one per single command, one per
    pipeline), recorded by its connections."""

    def __init__(self) -> None:
        self.round_trips: list[list[str]] = []

    def clear(self) -> None:
        self.round_trips.clear()

    @property
    def commands(self) -> list[str]:
        return [c for trip in self.round_trips for c in trip]

    def connection_class(self) -> type:
        recorder = self

        def name(args: tuple[Any, ...]) -> str:
            first = args[0].decode() if isinstance(args[0], bytes) else str(args[0])
            return first.upper()

        class Recording(redis.Connection):
            def send_command(self, *args: Any, **kwargs: Any) -> None:
                recorder.round_trips.append([name(args)])
                super().send_command(*args, **kwargs)

            def pack_commands(self, commands: Any) -> Any:
                commands = list(commands)
                recorder.round_trips.append([name(tuple(c)) for c in commands])
                return super().pack_commands(commands)

        return Recording


@pytest.fixture
def recorded(redis_server, real_redis):
    """A client on the test database whose commands are recorded (``real_redis`` flushed it)."""
    rec = Recorder()
    pool = redis.ConnectionPool.from_url(redis_server.url, connection_class=rec.connection_class())
    client = redis.Redis(connection_pool=pool)
    client.ping()  # the connection's handshake is not part of what is counted
    rec.clear()
    yield client, rec
    client.close()
    pool.disconnect()


def _deadline(mid: str, version: int, at_ms: int, kind: str = "turn") -> Deadline:
    return Deadline(match_id=mid, version=version, at_ms=at_ms, kind=kind)  # type: ignore[arg-type]


def _record(store, d: Deadline) -> None:
    store.append(d.match_id, store.version(d.match_id), f"c-{d.version}-{d.kind}", [], d)


class _Sent:
    """A sender that keeps what it was given (and when, on ``clock``)."""

    def __init__(self, clock: FakeClock | None = None) -> None:
        self.clock = clock
        self.batches: list[list[Deadline]] = []
        self.sent_at: list[tuple[int, list[Deadline]]] = []

    def send(self, batches: list[list[Deadline]]) -> int | None:
        self.batches += batches
        if self.clock is not None:
            self.sent_at += [(self.clock.now_ms(), b) for b in batches]
        return None

    def queue_length(self) -> int | None:
        return None


# ---- what a tick asks Redis ----------------------------------------------------------------------

def test_a_tick_is_one_evalsha_for_all_buckets_and_no_script_exists(recorded):
    client, rec = recorded
    store = RedisEventStore(client)
    for i in range(40):                                          # deadlines in many buckets
        _record(store, _deadline(f"m{i}", 1, T0 + i))
    assert len({store.bucket_of(f"m{i}") for i in range(40)}) > 8
    d = Dispatcher(claims_for(store), _Sent(), FakeClock(T0 + 100))
    for _ in range(2):                                           # the first call loads the script
        rec.clear()
        d.tick()
    rec.clear()
    assert d.tick() == 0                                         # idle: all in flight
    assert rec.round_trips == [["EVALSHA"]]
    _record(store, _deadline("late", 1, T0 + 100))
    rec.clear()
    assert d.tick() == 1                                         # a claim: the same single call
    assert rec.round_trips == [["EVALSHA"]]
    assert "SCRIPT" not in rec.commands


def test_releasing_a_fired_batch_is_one_evalsha(recorded):
    client, rec = recorded
    store = RedisEventStore(client)
    claims = claims_for(store)
    ds = [_deadline(f"m{i}", 1, T0) for i in range(16)]
    for d in ds:
        _record(store, d)
    assert len(claims.claim(T0, 100)) == 16
    claims.release([("m0", 1, "turn")])                          # loads the script
    rec.clear()
    claims.release([(d.match_id, d.version, d.kind) for d in ds[1:]])
    assert rec.round_trips == [["EVALSHA"]]
    assert sum(client.hlen(keys.deadline_sent_key(b)) for b in range(store.buckets)) == 0


def test_a_release_leaves_the_marks_of_newer_deadlines(real_redis):
    store = RedisEventStore(real_redis)
    claims = claims_for(store, first_lease_ms=1_000)
    old, other = _deadline("a", 1, T0), _deadline("b", 1, T0)
    _record(store, old)
    _record(store, other)
    claims.claim(T0, 10)
    new = _deadline("a", 2, T0 + 5)
    _record(store, new)
    assert claims.claim(T0 + 5, 10) == [Claim(new, 1)]
    claims.release([("a", 1, "turn"), ("b", 1, "turn")])         # a's old firing ends late
    assert claims.retry_at(new) == T0 + 5 + 1_000 and claims.retry_at(other) is None


def test_a_claim_after_script_flush_loads_the_script_and_claims_once(recorded):
    client, rec = recorded
    store = RedisEventStore(client)
    claims = claims_for(store, first_lease_ms=1_000)
    _record(store, _deadline("a", 1, T0))
    assert claims.claim(T0 - 1, 10) == []                        # loaded
    client.script_flush()
    rec.clear()
    assert claims.claim(T0, 10) == [Claim(_deadline("a", 1, T0), 1)]
    assert rec.commands == ["EVALSHA", "SCRIPT LOAD", "EVALSHA"]  # NOSCRIPT: it did not run, ran once
    assert claims.claim(T0, 10) == []                            # marked once
    client.script_flush()
    claims.release([("a", 1, "turn")])
    assert claims.retry_at(_deadline("a", 1, T0)) is None


class _FlushingClaims:
    """RedisClaims whose scripts are flushed from the server before every call."""

    def __init__(self, claims: RedisClaims, client: Any):
        self._claims = claims
        self._client = client
        self.flushes = 0

    def _flush(self) -> None:
        self._client.script_flush()
        self.flushes += 1

    def claim(self, *args: Any, **kwargs: Any) -> list[Claim]:
        self._flush()
        return self._claims.claim(*args, **kwargs)

    def release(self, fired: Any) -> None:
        self._flush()
        self._claims.release(fired)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._claims, name)


def test_script_flush_between_every_call_loses_no_deadline_and_settles_each_match_once(real_redis):
    """Scripts flushed before every claim and every release (after a claim, before its
    firing's release): every timer still fires once, every match ends and is settled once."""
    store = RedisEventStore(real_redis)
    clock = FakeClock(T0)
    mids = [f"f{i}" for i in range(6)]
    with EmbeddedTimers(store, clock=clock, rng=random.Random(5), deal_on_ready=False, lease_ms=1_000) as t:
        flushing = _FlushingClaims(t.claims, real_redis)        # type: ignore[arg-type]
        t.dispatcher.claims = flushing                           # type: ignore[assignment]
        t.runtime.claims = flushing                              # type: ignore[assignment]
        t.claims = flushing                                      # type: ignore[assignment]
        for mid in mids:
            Match(t, cfg(turn_seconds=2, trustee_delay_seconds=0.5), mid=mid).start()
        for _ in range(200):                                     # bounded: every turn times out
            if all(isinstance(store.load(m)[-1], MatchFinished) for m in mids):
                break
            t.advance(3)
        assert flushing.flushes > 20
        ledger = RedisLedger(real_redis)
        runner = ProjectionRunner(store, ledger, RedisFeed(real_redis, buckets=store.buckets))
        runner.drain()
        real_redis.script_flush()
        runner.drain()
        assert reconcile(store, ledger).settled == ()            # nothing was left unsettled
    totals: dict[str, int] = {}
    for mid in mids:
        events = store.load(mid)
        assert isinstance(events[-1], MatchFinished) and check_stream(events) == []
        timed_out = [e for e in events if isinstance(e, TurnTimedOut)]
        assert timed_out and len({e.command_id for e in timed_out}) == len(timed_out)  # none twice
        s = settle(events)
        assert s is not None and ledger.settlement(mid) == s
        for p, v in s.scores.items():
            totals[p] = totals.get(p, 0) + v
    for p, v in totals.items():                                  # each settlement applied once
        assert ledger.balance(p, "points") == v
    assert sum(real_redis.hlen(keys.deadline_sent_key(b)) for b in range(store.buckets)) == 0  # no mark left


# ---- the loop never spins ------------------------------------------------------------------------

class _FakeStop:
    """The thread's stop event: ``wait(s)`` moves the fake clock by ``s`` instead of
    sleeping, runs ``before_next(i)`` (a change of the Redis state) and says "stop" once
    ``seconds`` of fake time went by (or after ``most`` iterations: a spin)."""

    def __init__(self, clock: FakeClock, seconds: float, before_next: Callable[[int], None],
                 most: int = 100_000):
        self.clock = clock
        self.end_ms = clock.now_ms() + int(seconds * 1000)
        self.before_next = before_next
        self.most = most
        self.waits: list[float] = []

    def wait(self, seconds: float | None = None) -> bool:
        self.waits.append(float(seconds or 0))
        self.clock.set(self.clock.now_ms() + int(round((seconds or 0) * 1000)))
        if self.clock.now_ms() >= self.end_ms or len(self.waits) >= self.most:
            return True
        self.before_next(len(self.waits))
        return False

    def set(self) -> None:
        pass

    def is_set(self) -> bool:
        return False


def _flushdb(c: Any) -> None:
    c.flushdb()


def _delete_lease(c: Any) -> None:
    c.delete(HOLDER_KEY)


def _delete_indexes(c: Any) -> None:
    c.delete(*[k for b in range(keys.DEFAULT_BUCKETS)
               for k in (keys.deadlines_key(b), keys.deadline_info_key(b), keys.deadline_sent_key(b))])


def _other_holder(c: Any) -> None:
    c.set(HOLDER_KEY, "another-host:1:abc", px=60_000)


def _wrong_type(c: Any) -> None:
    c.delete(keys.deadlines_key(3))
    c.set(keys.deadlines_key(3), "not a sorted set")


def _script_flush(c: Any) -> None:
    c.script_flush()


STATES: dict[str, Callable[[Any], None]] = {
    "database flushed": _flushdb,
    "lease key deleted": _delete_lease,
    "deadline index keys deleted": _delete_indexes,
    "lease held by another holder": _other_holder,
    "a deadline index of the wrong type": _wrong_type,
    "scripts flushed": _script_flush,
}


def _run_loop(client: Any, lease_client: Any, change: Callable[[Any], None] | None, *,
              seconds: float = 10.0, every: int = 7) -> tuple[_FakeStop, Dispatcher, DispatcherThread]:
    store = RedisEventStore(client)
    clock = FakeClock(T0)
    for i in range(50):                                          # some due now, some later
        _record(store, _deadline(f"m{i}", 1, T0 - 1_000 + 300 * i))
    dispatcher = Dispatcher(claims_for(store, first_lease_ms=1_000), _Sent(clock), clock)
    thread = DispatcherThread(lambda: dispatcher, DispatcherLease(lease_client, ttl_ms=2_000))

    def before_next(i: int) -> None:
        if change is not None and i % every == 0:
            change(client)

    stop = _FakeStop(clock, seconds, before_next, most=2_000)
    thread._stop_event = stop                                    # type: ignore[assignment]
    thread.run()                                                 # in this thread, on fake time
    return stop, dispatcher, thread


#: most iterations of the loop per fake second: one per interval (plus the first)
MOST_PER_SECOND = 1000 / DEFAULT_INTERVAL_MS


@pytest.mark.parametrize("leased", [False, True], ids=["in-process", "leased"])
@pytest.mark.parametrize("state", list(STATES), ids=list(STATES))
def test_the_loop_waits_between_iterations_whatever_redis_state_it_finds(real_redis, state, leased):
    stop, dispatcher, thread = _run_loop(real_redis, real_redis if leased else None, STATES[state])
    assert len(stop.waits) < stop.most                           # it stopped on fake time, not on the cap
    assert len(stop.waits) <= 10 * MOST_PER_SECOND + 1
    spins = [w for w in stop.waits[1:] if w <= 0]
    assert spins == []                                           # never an iteration without a wait


def test_the_loop_still_dispatches_what_falls_due_after_the_flush(real_redis):
    """After FLUSHDB (lease key, index, marks gone) the dispatcher takes the lease again and
    sends a deadline recorded after the flush on the first tick at or after it is due."""
    flushed: list[int] = []

    def flush_once(c: Any) -> None:
        if not flushed:
            c.flushdb()
            flushed.append(1)
            _record(RedisEventStore(c), _deadline("after", 1, T0 + 5_000))

    _stop, dispatcher, _thread = _run_loop(real_redis, real_redis, flush_once, seconds=8.0, every=3)
    sender = dispatcher.sender
    assert isinstance(sender, _Sent) and flushed
    first = next(at for at, batch in sender.sent_at for d in batch if d.match_id == "after")
    assert T0 + 5_000 <= first <= T0 + 5_000 + DEFAULT_INTERVAL_MS


def test_the_loop_backs_off_while_redis_is_gone():
    """Redis unreachable (a closed port): the loop backs off (waits grow), never spins."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]                                # nothing listens there once closed
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    client = redis.Redis(host="127.0.0.1", port=port, socket_connect_timeout=0.2, retry=Retry(NoBackoff(), 0))
    clock = FakeClock(T0)
    dispatcher = Dispatcher(RedisClaims(client), _Sent(), clock)
    thread = DispatcherThread(lambda: dispatcher, DispatcherLease(None))
    stop = _FakeStop(clock, 30.0, lambda i: None, most=1_000)
    thread._stop_event = stop                                    # type: ignore[assignment]
    thread.run()
    assert len(stop.waits) < 40                   # 0.05 s doubling to 5 s over 30 s
    assert stop.waits[1:] == sorted(stop.waits[1:]) and max(stop.waits) == 5.0


# ---- an idle dispatcher wakes less often, and on time ---------------------------------------------

@pytest.fixture(params=["fakeredis", "redis"])
def lua_client(request):
    return request.getfixturevalue("fake_redis" if request.param == "fakeredis" else "real_redis")


def test_a_claim_reports_the_soonest_deadline_it_left(lua_client):
    store = RedisEventStore(lua_client)
    claims = claims_for(store, first_lease_ms=1_000)
    assert claims.claim(T0, 100) == [] and claims.next_due_ms == NOTHING_RECORDED  # type: ignore[attr-defined]
    for mid, at in (("a", T0), ("b", T0 + 500), ("c", T0 + 9_000)):
        _record(store, _deadline(mid, 1, at))
    assert [c.deadline.match_id for c in claims.claim(T0, 100)] == ["a"]
    assert claims.next_due_ms == T0 + 500                        # type: ignore[attr-defined]
    assert claims.claim(T0 + 9_000, 100) != [] and claims.next_due_ms == NOTHING_RECORDED  # type: ignore[attr-defined]
    lua_client.flushdb()
    store = RedisEventStore(lua_client, buckets=1)
    one = claims_for(store)                                       # one bucket, more due than a claim takes
    for i in range(5):
        _record(store, _deadline(f"x{i}", 1, T0 + 20_000))
    assert len(one.claim(T0 + 20_000, 1)) == 1 and one.next_due_ms == T0 + 20_000  # type: ignore[attr-defined]


def _idle_loop(client: Any, seconds: float, before_next: Callable[[int, FakeClock, Any], None]):
    store = RedisEventStore(client)
    clock = FakeClock(T0)
    sender = _Sent(clock)
    dispatcher = Dispatcher(claims_for(store, first_lease_ms=60_000), sender, clock)
    thread = DispatcherThread(lambda: dispatcher, DispatcherLease(None), idle_ms=DEFAULT_IDLE_MS)
    stop = _FakeStop(clock, seconds, lambda i: before_next(i, clock, store), most=2_000)
    thread._stop_event = stop                                    # type: ignore[assignment]
    thread.run()
    return stop, sender, thread


def test_an_idle_dispatcher_wakes_at_most_every_idle_ms_and_exactly_when_a_deadline_falls_due(real_redis):
    store = RedisEventStore(real_redis)
    _record(store, _deadline("later", 1, T0 + 5_000))
    stop, sender, thread = _idle_loop(real_redis, 10.0, lambda i, clock, store: None)
    assert thread.ticks <= 10_000 // DEFAULT_IDLE_MS + 2          # was one per 25 ms: 400
    sent = [(at, d) for at, b in sender.sent_at for d in b]
    assert [d.match_id for _, d in sent] == ["later"]
    assert T0 + 5_000 <= sent[0][0] <= T0 + 5_001                  # woken for it, not on the next poll


def test_a_deadline_recorded_during_an_idle_wait_is_late_by_at_most_idle_ms(real_redis):
    recorded: dict[str, int] = {}

    def record_some(i: int, clock: FakeClock, store: Any) -> None:
        now = clock.now_ms()
        if i == 5:                                                # due 10 ms from now: inside the wait
            recorded["soon"] = now + 10
        elif i == 12:                                             # due a second from now: on time
            recorded["second"] = now + 1_000
        else:
            return
        name = "soon" if i == 5 else "second"
        _record(store, _deadline(name, 1, recorded[name]))

    _stop, sender, _thread = _idle_loop(real_redis, 5.0, record_some)
    first = {d.match_id: at for at, b in sender.sent_at for d in b}
    assert set(first) == {"soon", "second"}
    assert 0 <= first["soon"] - recorded["soon"] <= DEFAULT_IDLE_MS
    assert 0 <= first["second"] - recorded["second"] <= 1        # the wait was cut to it


def test_idle_ms_at_most_the_interval_keeps_the_fixed_tick(real_redis):
    store = RedisEventStore(real_redis)
    clock = FakeClock(T0)
    dispatcher = Dispatcher(claims_for(store), _Sent(clock), clock)
    thread = DispatcherThread(lambda: dispatcher, DispatcherLease(None), interval_ms=25, idle_ms=0)
    stop = _FakeStop(clock, 1.0, lambda i: None, most=2_000)
    thread._stop_event = stop                                    # type: ignore[assignment]
    thread.run()
    assert set(stop.waits[1:]) == {0.025} and thread.ticks == 40


# ---- what a claim reads ------------------------------------------------------------------------

def _index_reads(client: Any) -> dict[str, int]:
    stats = client.info("commandstats")
    return {name: int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in ("zrange", "zrangebyscore")}


def test_a_claim_with_nothing_due_reads_each_buckets_index_once(real_redis):
    """A tick that finds nothing due (most ticks: a dispatcher ticks up to 10 times a second,
    a turn's clock runs for seconds) reads the head of each bucket's index and nothing more;
    the head is also the soonest deadline it reports."""
    store = RedisEventStore(real_redis)
    claims = claims_for(store, first_lease_ms=1_000)
    for i in range(40):
        _record(store, _deadline(f"m{i}", 1, T0 + 1_000 + 10 * i))
    real_redis.config_resetstat()
    assert claims.claim(T0, 100) == []
    assert claims.next_due_ms == T0 + 1_000                      # type: ignore[attr-defined]
    assert _index_reads(real_redis) == {"zrange": store.buckets, "zrangebyscore": 0}
    real_redis.flushdb()
    real_redis.config_resetstat()
    assert claims.claim(T0, 100) == [] and claims.next_due_ms == NOTHING_RECORDED  # type: ignore[attr-defined]
    assert _index_reads(real_redis) == {"zrange": store.buckets, "zrangebyscore": 0}


_OPS = st.lists(st.one_of(
    st.tuples(st.just("record"), st.integers(0, 7), st.integers(-3_000, 3_000)),   # match, at - now
    st.tuples(st.just("claim"), st.integers(0, 1_500), st.just(0)),                # the clock moves on
    st.tuples(st.just("release"), st.integers(0, 7), st.just(0)),                  # that match fired
), max_size=30)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_OPS, buckets=st.sampled_from([1, 3, 16]))
def test_a_claim_takes_what_memory_claims_takes_and_reports_the_soonest_left(real_redis, ops, buckets):
    """Against :class:`~workers.dispatcher.MemoryClaims` (the same rules in this process), over
    any order of recorded deadlines, claims and releases: the Lua claim takes the same
    deadlines, and ``next_due_ms`` is the soonest recorded deadline after the claim's time
    (``NOTHING_RECORDED`` when there is none)."""
    real_redis.flushdb()
    store = RedisEventStore(real_redis, buckets=buckets)
    claims = claims_for(store, first_lease_ms=1_000)
    model = MemoryClaims(store, first_lease_ms=1_000)
    now = T0
    current: dict[str, Deadline] = {}
    version: dict[str, int] = {}
    for op, a, b in ops:
        mid = f"m{a}"
        if op == "record":
            version[mid] = version.get(mid, 0) + 1
            current[mid] = _deadline(mid, version[mid], now + b)
            _record(store, current[mid])
        elif op == "release":
            if mid in current:
                d = current[mid]
                fired = [(d.match_id, d.version, d.kind)]
                claims.release(fired)
                model.release(fired)
        else:
            now += a
            got = {c.deadline.match_id: c.attempt for c in claims.claim(now, CLAIM_LIMIT)}
            want = {c.deadline.match_id: c.attempt for c in model.claim(now, CLAIM_LIMIT)}
            assert got == want
            later = [d.at_ms for d in current.values() if d.at_ms > now]
            assert claims.next_due_ms == (min(later) if later else NOTHING_RECORDED)  # type: ignore[attr-defined]
