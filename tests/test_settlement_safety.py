"""Issue 11 §3 and §4: one settlement can never credit money twice, half-apply, or stop
the others; feed trimming never loses a settlement; ``shuangkou reconcile`` settles what
the feed lost, exactly once; ``replay --all`` fails on a finished match without one."""

from __future__ import annotations

import json

import fakeredis
import pytest
import redis

from engine.store import keys
from engine.store.memory import InMemoryEventStore
from engine.store.redis_store import RedisEventStore
from engine.store.transient import is_transient
from projections.ledger import BALANCE_LIMIT, InMemoryLedger, LedgerRefused, RedisLedger, balance_key
from projections.runner import ProjectionRunner, RedisFeed, reconcile
from projections.settlement import Settlement, settle
from tests.test_ledger import append, match_events, totals

HUGE = 3 * 2**61  # the base: 3·2^61 overflows int64 once multiplied


def settlement(match_id: str, scores: dict[str, int], burned: int = 0, mode: str = "points") -> Settlement:
    return Settlement(match_id=match_id, mode=mode, winner="a", loser="b", kou="single",  # type: ignore[arg-type]
                      cards_left={"a": 0, "b": 8}, scores=scores, burned=burned, breakdown={})


@pytest.fixture(params=["memory", "fakeredis", "redis-server"])
def ledger(request):
    if request.param == "memory":
        return InMemoryLedger()
    if request.param == "fakeredis":
        return RedisLedger(fakeredis.FakeRedis())
    client = request.getfixturevalue("real_redis")
    return RedisLedger(client)


# ---- the ledger checks everything before it writes anything ---------------------------------

def test_an_overflowing_settlement_is_refused_and_writes_nothing(ledger):
    """The issue's 3·2^61 base: refused as overflow; no credit, no marker, still zero-sum."""
    s = settlement("m1", {"a": 4 * HUGE, "b": -4 * HUGE})
    with pytest.raises(LedgerRefused) as err:
        ledger.apply_settlement("m1", s)
    assert err.value.code == "overflow"
    assert totals(ledger, "a", "b") == (0, 0) and not ledger.is_settled("m1")


def test_a_balance_that_would_overflow_refuses_the_whole_settlement(ledger):
    """The amounts fit, but a's balance would leave the limit: neither a nor b changes
    (HINCRBY on b first would have debited b alone before)."""
    assert ledger.grant("a", "points", BALANCE_LIMIT - 5, ref="seed")
    s = settlement("m1", {"b": -10, "a": 10})
    with pytest.raises(LedgerRefused) as err:
        ledger.apply_settlement("m1", s)
    assert err.value.code == "overflow"
    assert totals(ledger, "a", "b") == (BALANCE_LIMIT - 5, 0) and not ledger.is_settled("m1")
    assert ledger.apply_settlement("m1", settlement("m1", {"b": -5, "a": 5})) is True  # up to the limit is fine
    assert totals(ledger, "a", "b") == (BALANCE_LIMIT, -5)


def test_a_grant_beyond_the_limit_is_refused(ledger):
    with pytest.raises(LedgerRefused) as err:
        ledger.grant("a", "wealth", BALANCE_LIMIT + 1, ref="r1")
    assert err.value.code == "overflow"
    assert ledger.grant("a", "wealth", BALANCE_LIMIT, ref="r2")
    with pytest.raises(LedgerRefused) as err:
        ledger.grant("a", "wealth", 1, ref="r3")
    assert err.value.code == "overflow"
    assert ledger.balance("a", "wealth") == BALANCE_LIMIT
    assert ledger.grant("a", "wealth", -1, ref="r3")  # the refused ref was not used up


@pytest.mark.parametrize("amount", [1.5, True, "5", None])
def test_a_grant_of_no_integer_is_refused_bad_amount(ledger, amount):
    with pytest.raises(LedgerRefused) as err:
        ledger.grant("a", "wealth", amount, ref="r1")
    assert err.value.code == "bad_amount" and ledger.balance("a", "wealth") == 0
    assert ledger.grant("a", "wealth", 5, ref="r1")  # the refused ref was not used up


def test_a_settlements_amounts_are_integers_by_its_own_validation():
    """What check_settlement_amounts no longer checks: the model refuses or coerces it."""
    from pydantic import ValidationError

    for bad in ({"scores": {"a": 1.5, "b": -1.5}}, {"burned": -1}):
        with pytest.raises(ValidationError):
            Settlement(**{**settlement("m", {"a": 1, "b": -1}).model_dump(), **bad})


@pytest.mark.parametrize("scores,burned,code", [
    ({"a": 10, "b": -9}, 0, "not_zero_sum"),                 # creates a coin
    ({"a": 7, "b": -10}, 2, "not_zero_sum"),
    ({"a": 10, "b": -10}, -0, None),
    ({"a": BALANCE_LIMIT + 1, "b": -BALANCE_LIMIT - 1}, 0, "overflow"),
])
def test_amount_checks(ledger, scores, burned, code):
    s = settlement("m", scores, burned)
    if code is None:
        assert ledger.apply_settlement("m", s)
        return
    with pytest.raises(LedgerRefused) as err:
        ledger.apply_settlement("m", s)
    assert err.value.code == code and totals(ledger, "a", "b") == (0, 0)


def test_a_corrupt_stored_balance_refuses_without_writing():
    client = fakeredis.FakeRedis()
    ledger = RedisLedger(client)
    client.hset(balance_key("points"), "b", "not-a-number")
    with pytest.raises(LedgerRefused) as err:
        ledger.apply_settlement("m1", settlement("m1", {"a": 10, "b": -10}))
    assert err.value.code == "corrupt"
    assert ledger.balance("a", "points") == 0 and not ledger.is_settled("m1")


def test_park_and_unpark(ledger):
    assert ledger.park("m1", "overflow: too big") is True
    assert ledger.park("m1", "again") is False
    assert ledger.parked()["m1"]["reason"] == "overflow: too big"
    assert ledger.unpark("m1") and ledger.parked() == {}
    ledger.park("m2", "x")
    ledger.apply_settlement("m2", settlement("m2", {"a": 1, "b": -1}))
    assert "m2" not in ledger.parked()  # applied after a fix: no longer parked


# ---- transient or permanent -------------------------------------------------------------------

def _caused(exc: BaseException, cause: BaseException) -> BaseException:
    """``exc`` raised ``from cause``, as redis-py's Cluster client raises its refresh failure."""
    exc.__cause__ = cause
    return exc


@pytest.mark.parametrize("exc,transient", [
    (redis.exceptions.OutOfMemoryError("command not allowed when used memory > 'maxmemory'."), True),
    (redis.ResponseError("OOM command not allowed when used memory > 'maxmemory'. script: abc"), True),
    (redis.exceptions.MasterDownError("Link with MASTER is down"), True),
    (redis.exceptions.TryAgainError("Multiple keys request during rehashing"), True),
    (redis.exceptions.ClusterDownError("The cluster is down"), True),
    (redis.exceptions.BusyLoadingError("Redis is loading the dataset in memory"), True),
    (redis.ResponseError("BUSY Redis is busy running a script."), True),
    (redis.exceptions.ReadOnlyError("You can't write against a read only replica."), True),
    (redis.ConnectionError("Connection refused"), True),
    (redis.TimeoutError("Timeout reading from socket"), True),
    (ConnectionResetError(104, "reset"), True),
    # a Cluster client mid-fail-over (issue 24 §4): its slots cannot be refreshed yet
    (redis.exceptions.RedisClusterException("Redis Cluster cannot be connected. Please provide at least one "
                                            "reachable node: Error 111 connecting to 127.0.0.1:7001."), True),
    (redis.exceptions.RedisClusterException("All slots are not covered after query all startup_nodes. "
                                            "10923 of 16384 covered..."), True),
    (redis.exceptions.RedisClusterException("startup_nodes could not agree on a valid slots cache: "
                                            "a vs b on slot: 7"), True),
    (redis.exceptions.SlotNotCoveredError('Slot "7" not covered by the cluster.'), True),
    (redis.exceptions.ClusterError("TTL exhausted."), True),
    (_caused(redis.exceptions.RedisClusterException("Redis Cluster cannot be connected. Please provide at least "
                                                    "one reachable node: Connection refused"),
             redis.ConnectionError("Connection refused")), True),
    # the URL names a Redis that is no Cluster node: an operator's mistake, never retried
    (_caused(redis.exceptions.RedisClusterException("Redis Cluster cannot be connected. Please provide at least "
                                                    "one reachable node: Cluster mode is not enabled on this node"),
             redis.exceptions.RedisClusterException("Cluster mode is not enabled on this node")), False),
    (redis.exceptions.RedisClusterException("Invalid args in command: ('GET',)"), False),
    (redis.exceptions.RedisClusterException("method eval() is not implemented"), False),
    (redis.ResponseError("CROSSSLOT Keys in request don't hash to the same slot"), False),
    (redis.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"), False),
    (redis.ResponseError("ERR LEDGER overflow a balance would leave the limit"), False),
    (LedgerRefused("overflow", "x"), False),
    (ValueError("a bug"), False),
])
def test_transient_or_permanent(exc, transient):
    assert is_transient(exc) is transient


def test_a_real_oom_reply_is_transient(own_real_redis):
    """What redis-server really answers when full (redis-py drops the OOM prefix); on a server
    of its own (a maxmemory of 1 refuses every client's writes)."""
    real_redis = own_real_redis
    real_redis.set("filler", "x" * 100_000)
    real_redis.config_set("maxmemory", "1")
    try:
        with pytest.raises(redis.RedisError) as err:
            real_redis.set("more", "y")
        with pytest.raises(redis.RedisError) as err2:
            real_redis.eval("return redis.call('SET', KEYS[1], 'z')", 1, "k")
    finally:
        real_redis.config_set("maxmemory", "0")
    assert is_transient(err.value) and is_transient(err2.value), (err.value, err2.value)


# ---- the runner parks a permanent failure and goes on ------------------------------------------

@pytest.fixture(params=["memory", "redis"])
def rig(request):
    if request.param == "memory":
        from projections.runner import MemoryFeed

        store = InMemoryEventStore(buckets=1)
        return store, InMemoryLedger(), MemoryFeed(store)
    client = fakeredis.FakeRedis()
    return RedisEventStore(client, buckets=1), RedisLedger(client), RedisFeed(client, buckets=1)


def test_an_overflowing_match_is_parked_and_later_matches_are_settled(rig):
    """The issue's defect: a 3·2^61 base credited the winner with no settlement and then
    the runner retried that entry forever; now it is parked with its reason and every
    later match in the bucket is settled."""
    store, ledger, feed = rig
    huge = ((2, HUGE, 150), (2, HUGE, 150))
    append(store, match_events("huge", seats=huge, left=12))       # X·a = 3·2^61·4
    append(store, match_events("m1", left=7))
    append(store, match_events("m2", left=12))
    parked = []
    runner = ProjectionRunner(store, ledger, feed, on_parked=lambda m, code, why: parked.append((m, code)))
    runner.drain()
    assert parked == [("huge", "overflow")]
    assert "overflow" in ledger.parked()["huge"]["reason"]
    assert not ledger.is_settled("huge") and ledger.is_settled("m1") and ledger.is_settled("m2")
    assert totals(ledger, "a", "b") == (60, -60)                   # zero-sum, nothing from "huge"
    assert runner.run_once() == 0                                  # acknowledged: never retried forever
    report = reconcile(store, ledger)
    assert report.unsettled_parked == ("huge",) and report.settled == ()


class _OomOnce:
    """A store whose loads fail with OOM ``times`` times (the way redis-py reports it)."""

    def __init__(self, store, times):
        self._store, self.times = store, times

    def __getattr__(self, name):
        return getattr(self._store, name)

    def load(self, match_id, after=0):
        if self.times:
            self.times -= 1
            raise redis.exceptions.OutOfMemoryError("command not allowed when used memory > 'maxmemory'.")
        return self._store.load(match_id, after)


def test_oom_is_retried_never_parked(rig):
    store, ledger, feed = rig
    append(store, match_events("m1", left=7))
    runner = ProjectionRunner(_OomOnce(store, 3), ledger, feed)
    for _ in range(3):
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            runner.drain()
    runner.drain()
    assert ledger.parked() == {} and runner.errors == [] and totals(ledger, "a", "b") == (20, -20)


class _NoScriptOnce:
    """A ledger whose settlements fail with NOSCRIPT ``times`` times: redis-py reloads a
    flushed script once, so a second flush (SCRIPT FLUSH, a restart, a fail-over to a node
    that never loaded it) within one call reaches the runner like this."""

    def __init__(self, ledger, times):
        self._ledger, self.times = ledger, times

    def __getattr__(self, name):
        return getattr(self._ledger, name)

    def apply_settlement(self, match_id, s):
        if self.times:
            self.times -= 1
            raise redis.exceptions.NoScriptError("No matching script. Please use EVAL.")
        return self._ledger.apply_settlement(match_id, s)


def test_noscript_is_retried_never_parked(rig):
    """NOSCRIPT is the server's state, not the settlement's: the entry stays pending (the CI
    failure of test_archive: a SCRIPT FLUSH storm parked a settlement as ``error``)."""
    store, ledger, feed = rig
    append(store, match_events("m1", left=7))
    flaky = _NoScriptOnce(ledger, 2)
    runner = ProjectionRunner(store, flaky, feed)
    for _ in range(2):
        with pytest.raises(redis.exceptions.NoScriptError):
            runner.drain()
    runner.drain()
    assert ledger.parked() == {} and runner.errors == [] and totals(ledger, "a", "b") == (20, -20)


def test_run_forever_backs_off_and_recovers_from_a_transient_failure():
    import threading

    store = InMemoryEventStore(buckets=1)
    from projections.runner import MemoryFeed

    ledger = InMemoryLedger()
    append(store, match_events("m1", left=7))
    stop = threading.Event()
    flaky = _OomOnce(store, 4)
    runner = ProjectionRunner(flaky, ledger, MemoryFeed(store),
                              on_settled=lambda s, applied, room: stop.set())
    t = threading.Thread(target=runner.run_forever, args=(stop,), kwargs={"idle_seconds": 0.01}, daemon=True)
    t.start()
    t.join(30)
    assert not t.is_alive() and flaky.times == 0
    assert ledger.is_settled("m1") and ledger.parked() == {}


# ---- §4: the feed cap never loses a settlement; reconcile ----------------------------------------

def _finished_matches(store, n: int) -> None:
    for i in range(n):
        ev = match_events(f"m{i}", left=7)
        store.append(f"m{i}", 0, f"c-{i}", ev, None)


@pytest.mark.redis
def test_cap_50_and_1000_matches_while_projections_are_stopped_all_settle(real_redis):
    """The issue's figure: cap 50, 1,000 matches finished while projections were stopped:
    800 were never settled.  Now the feed keeps what the group has not acknowledged."""
    store = RedisEventStore(real_redis, buckets=4, feed_maxlen=50)
    feed = RedisFeed(real_redis, buckets=4, feed_maxlen=50)
    feed.ensure_groups()                                        # serve created the group, then stopped
    _finished_matches(store, 1000)
    ledger = RedisLedger(real_redis)
    runner = ProjectionRunner(store, ledger, feed)
    assert feed.trim() == 0                                     # nothing acknowledged: nothing trimmed
    runner.drain()
    assert len(list(ledger.settled_matches())) == 1000
    assert totals(ledger, "a", "b") == (20_000, -20_000)
    assert feed.trim() > 0                                      # acknowledged entries may go now
    assert all(real_redis.xlen(keys.feed_key(b)) <= 50 for b in range(4))


@pytest.mark.redis
def test_reconcile_settles_what_the_feed_lost_exactly_once(real_redis):
    store = RedisEventStore(real_redis, buckets=4)
    store.append("live", 0, "c-live", match_events("live", finished=False), None)
    _finished_matches(store, 300)
    for b in range(4):
        real_redis.xtrim(keys.feed_key(b), maxlen=10, approximate=False)  # the feed lost most entries
    ledger = RedisLedger(real_redis)
    runner = ProjectionRunner(store, ledger, RedisFeed(real_redis, buckets=4))
    runner.drain()
    assert len(list(ledger.settled_matches())) == 40
    report = reconcile(store, ledger)
    assert report.checked == 301 and len(report.settled) == 260 and report.parked == ()
    assert len(list(ledger.settled_matches())) == 300
    again = reconcile(store, ledger)
    assert again.settled == ()
    runner.drain()
    assert totals(ledger, "a", "b") == (6000, -6000)             # 300 × 20, once each


@pytest.mark.redis
def test_reconcile_and_replay_all_commands(real_redis, redis_server, capsys):
    """``replay --all`` exits 1 while a finished match has no settlement (and names it),
    ``shuangkou reconcile`` settles it, then ``replay --all`` exits 0."""
    from shuangkou.cli import main

    store = RedisEventStore(real_redis)
    for i in range(3):
        ev = match_events(f"r{i}", left=7)
        store.append(f"r{i}", 0, f"c-{i}", ev, None)
    ledger = RedisLedger(real_redis)
    ledger.apply_settlement("r0", settle(store.load("r0")))
    url = redis_server.url
    capsys.readouterr()
    # these synthetic matches have no real deal: check_stream problems are expected; look at settlement ones
    main(["replay", "--all", "--redis", url, "--json"])
    out = json.loads(capsys.readouterr().out)
    unsettled = {r["match_id"] for r in out if any("not settled" in p for p in r["problems"])}
    assert unsettled == {"r1", "r2"}
    assert main(["reconcile", "--redis", url, "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert sorted(rep["settled"]) == ["r1", "r2"] and rep["checked"] == 3
    main(["replay", "--all", "--redis", url, "--json"])
    out = json.loads(capsys.readouterr().out)
    assert not any("settle" in p for r in out for p in r["problems"])
    assert main(["reconcile", "--redis", url]) == 0
    assert "settled 0 now" in capsys.readouterr().out


@pytest.mark.redis
def test_reconcile_exits_1_while_a_match_is_parked(real_redis, redis_server, capsys):
    from shuangkou.cli import main

    store = RedisEventStore(real_redis)
    store.append("huge", 0, "c", match_events("huge", seats=((2, HUGE, 1), (2, HUGE, 1)), left=12), None)
    assert main(["reconcile", "--redis", redis_server.url]) == 1
    out = capsys.readouterr().out
    assert "parked huge: overflow" in out
    main(["replay", "--all", "--redis", redis_server.url, "--json"])
    [r] = json.loads(capsys.readouterr().out)
    assert any("parked" in p for p in r["problems"])


def test_the_ledger_modules_examples_hold():
    """projections/ledger.py's docstring examples run as written (a refusal read by name
    from a script's reply; an amount beyond the limit refused before any script)."""
    import doctest

    from projections import ledger

    result = doctest.testmod(ledger)
    assert result.attempted >= 4 and result.failed == 0
