"""Ledger contract (in-memory and Redis) and the projection runner: exactly once under
redelivery and crashes (docs/ARCHITECTURE.md "Projections"; R-8, R-11, R-12.3)."""

from __future__ import annotations

import itertools

import fakeredis
import pytest

from engine.rules.classify import classify
from engine.config import load_config
from engine.match.events import (
    CardsPlayed,
    HandDealt,
    MatchCreated,
    MatchFinished,
    PlayerEscaped,
    PlayerSeated,
    Reading,
)
from engine.store import keys, wire
from engine.store.memory import InMemoryEventStore
from engine.store.redis_store import RedisEventStore
from projections.ledger import ENTRY_APPLIED, ENTRY_DUPLICATE, InMemoryLedger, LedgerEntry, RedisLedger
from projections.runner import MemoryFeed, ProjectionRunner, RedisFeed, project_match
from projections.settlement import settle

POINTS = load_config("points")
WEALTH = load_config("wealth")


def match_events(match_id, mode="points", bombs=(), escape=None, left=8, finished=True,
                 seats=((2, 10, 150), (2, 10, 150)), room=None):
    """A short match: created (in ``room``: a room of ``mode`` by another name), two seats, a
    deal, a's bombs, then the finish (a wins, or b escapes)."""
    cfg = POINTS if mode == "points" else WEALTH
    if room is not None:
        cfg = cfg.model_copy(update={"name": room})
    seq = itertools.count(1)
    env = lambda: {"match_id": match_id, "seq": next(seq), "ts": 1, "command_id": f"c-{match_id}"}  # noqa: E731
    ev = [MatchCreated(**env(), config=cfg.to_record())]
    for i, (pid, (level, base, balance)) in enumerate(zip("ab", seats)):
        ev.append(PlayerSeated(**env(), player=pid, seat=i, balance=balance, level=level, base=base))
    ev.append(HandDealt(**env(), hands=((0,), (1,)), set_aside=(), lead_card=None, first=0))
    for cards in bombs:
        ev.append(CardsPlayed(**env(), player="a", cards=(), reading=Reading.of(classify(cards))))
    if escape:
        ev.append(PlayerEscaped(**env(), player=escape, policy="forfeit"))
    if finished:
        if escape:
            ev.append(MatchFinished(**env(), winner="a", loser="b", cards_left={"a": 5, "b": 5},
                                    kou="escape", reason="escape"))
        else:
            ev.append(MatchFinished(**env(), winner="a", loser="b", cards_left={"a": 0, "b": left},
                                    kou=cfg.kou.kou_of(left), reason="out"))
    return ev


# ---- the Ledger contract -------------------------------------------------------------------


@pytest.fixture(params=["memory", "redis", pytest.param("real-redis", marks=pytest.mark.redis)])
def ledger(request):
    """The in-memory ledger, the Redis one on fakeredis (redis-py's calls) and on a real
    redis-server (its calls sent packed: engine/store/wire.py)."""
    if request.param == "memory":
        return InMemoryLedger()
    if request.param == "real-redis":
        client = request.getfixturevalue("real_redis")
        assert wire.usable(client)  # the packed calls are the ones under test
        return RedisLedger(client)
    return RedisLedger(fakeredis.FakeRedis())


def test_empty_ledger(ledger):
    assert ledger.balance("a", "points") == 0 and ledger.burned_total("wealth") == 0
    assert ledger.settlement("m") is None and not ledger.is_settled("m") and list(ledger.settled_matches()) == []


def test_apply_once(ledger):
    """R-8.6: 10·2·8 + 10·4 = 200 moves b → a, once."""
    s = settle(match_events("m1", bombs=["7 7 7 7 7 7 7"]))
    assert ledger.apply_settlement("m1", s) is True
    assert ledger.apply_settlement("m1", s) is False
    assert ledger.apply_settlement("m1", s, "points") is False
    assert (ledger.balance("a", "points"), ledger.balance("b", "points")) == (200, -200)
    assert ledger.balance("a", "wealth") == 0                      # modes are separate
    assert ledger.settlement("m1") == s and ledger.is_settled("m1")
    assert list(ledger.settled_matches()) == ["m1"]


def test_burned_is_counted_once(ledger):
    """R-12.3: the 30% that goes to no one."""
    s = settle(match_events("m2", mode="wealth", bombs=["6 6 6 6 6 6"], escape="b",
                            seats=((5, 1000, 600_000), (5, 1000, 600_000))))
    # 12·1000 + 1000·2 + 1000·2 = 16000; a receives 11200; 4800 burned
    assert s.scores == {"b": -16000, "a": 11200} and s.burned == 4800
    for _ in range(3):
        ledger.apply_settlement("m2", s)
    assert ledger.burned_total("wealth") == 4800 and ledger.burned_total("points") == 0
    assert ledger.balance("a", "wealth") + ledger.balance("b", "wealth") + ledger.burned_total("wealth") == 0


def test_grants_and_levels(ledger):
    """R-11: later matches read levels from the ledger; R-11.1 below the lowest wealth level → None."""
    assert ledger.level_for("new", WEALTH) is None
    assert ledger.level_for("new", POINTS).level == 0
    assert ledger.grant("p", "wealth", 1500, "deposit-1") is True
    assert ledger.grant("p", "wealth", 1500, "deposit-1") is False
    assert ledger.balance("p", "wealth") == 1500 and ledger.level_for("p", WEALTH).base == 10
    ledger.grant("q", "points", -30, "adjust-1")
    assert ledger.level_for("q", POINTS).level == 0                # decision: negative points sit at level 0
    assert ledger.grant("q", "points", 250, "adjust-2") and ledger.level_for("q", POINTS).base == 20


def test_bad_mode(ledger):
    with pytest.raises(ValueError):
        ledger.balance("a", "coins")


def test_entries_balances_and_settlements_go_on_after_the_server_lost_its_scripts(own_real_redis):
    """A ledger call sent packed meets NOSCRIPT after a SCRIPT FLUSH (a restart, a fail-over):
    it goes through redis-py, which loads the script, and nothing is booked twice."""
    assert wire.usable(own_real_redis)  # the packed calls, whose NOSCRIPT goes through redis-py
    ledger = RedisLedger(own_real_redis)
    entry = LedgerEntry("credit", "a", "points", 300, "dep-1", 1, "deposit", "ops-7")
    assert ledger.record_entry(entry) == ENTRY_APPLIED
    own_real_redis.script_flush()
    assert ledger.record_entry(entry) == ENTRY_DUPLICATE
    assert ledger.record_entry(LedgerEntry("credit", "b", "points", 50, "dep-2", 2, "deposit", "ops-7")) == ENTRY_APPLIED
    own_real_redis.script_flush()
    s = settle(match_events("m1", bombs=["7 7 7 7 7 7 7"]))
    assert ledger.apply_settlement("m1", s) is True
    own_real_redis.script_flush()
    assert ledger.apply_settlement("m1", s) is False
    assert (ledger.balance("a", "points"), ledger.balance("b", "points")) == (500, -150)
    assert [e.ref for e in ledger.entries("a")] == ["dep-1", "m1"]


# ---- the runner ----------------------------------------------------------------------------


@pytest.fixture(params=["memory", "redis"])
def rig(request):
    """(store, ledger, make_feed(consumer)) over one backend."""
    if request.param == "memory":
        store = InMemoryEventStore(buckets=4)
        cursors: dict[int, str] = {}
        return store, InMemoryLedger(), lambda consumer="x", **kw: MemoryFeed(store, cursors)
    client = fakeredis.FakeRedis()
    store = RedisEventStore(client, buckets=4)
    return store, RedisLedger(client), lambda consumer="ledger-1", **kw: RedisFeed(
        client, consumer=consumer, buckets=4, **kw)


def append(store, events, per_command=2):
    """Append in several commands (several feed messages per match)."""
    v = 0
    for i in range(0, len(events), per_command):
        chunk = events[i:i + per_command]
        store.append(chunk[0].match_id, v, f"cmd-{chunk[0].match_id}-{i}", chunk, None)
        v += len(chunk)


def totals(ledger, *players, mode="points"):
    return tuple(ledger.balance(p, mode) for p in players)


def test_runner_settles_finished_matches_once(rig):
    store, ledger, feed = rig
    append(store, match_events("m1", bombs=["7 7 7 7 7 7 7"]))
    append(store, match_events("m2", finished=False))
    append(store, match_events("m3", left=12, room="quick"))        # 10·4·1 = 40
    seen = []
    runner = ProjectionRunner(store, ledger, feed(), on_settled=lambda s, applied, room: seen.append((s.match_id, applied, room)))
    assert runner.drain() > 3
    assert sorted(seen) == [("m1", True, "points"), ("m3", True, "quick")]  # the room, not the mode
    assert totals(ledger, "a", "b") == (240, -240)
    assert ledger.settlement("m1").scores == {"a": 200, "b": -200} and ledger.settlement("m2") is None
    assert runner.run_once() == 0                                   # everything acked


def test_a_failing_settled_callback_parks_nothing(rig):
    """``on_settled`` is an observer (serve's metrics): its error is logged, the applied match is
    neither parked nor left pending."""
    store, ledger, feed = rig
    append(store, match_events("m1", bombs=["7 7 7 7 7 7 7"]))

    def broken(s, applied, room):
        raise RuntimeError("a metrics bug")

    runner = ProjectionRunner(store, ledger, feed(), on_settled=broken)
    assert runner.drain() > 0
    assert ledger.settlement("m1") is not None and totals(ledger, "a", "b") == (200, -200)
    assert runner.errors == [] and ledger.parked() == {}
    assert runner.run_once() == 0                                   # acknowledged


def test_redelivery_changes_nothing(rig):
    """The same message handled twice (at-least-once delivery): the ledger marker stops the second."""
    store, ledger, feed = rig
    append(store, match_events("m1", bombs=["8 8 8 8 8 8 8 8"]))
    f = feed()
    runner = ProjectionRunner(store, ledger, f)
    batch = f.read()
    for d in batch + batch:
        runner.process(d)
    for d in batch:
        f.ack(d)
    assert totals(ledger, "a", "b") == (400, -400)                   # 10·2·16 + 10·8


def test_crash_after_apply_before_ack(rig):
    """Crash between applying and acking: the message is redelivered and changes nothing."""
    store, ledger, feed = rig
    append(store, match_events("m1", bombs=["7 7 7 7 7 7 7"]))
    crashed = ProjectionRunner(store, ledger, feed())
    for d in crashed.feed.read():                                   # read + apply, never ack
        crashed.process(d)
    assert totals(ledger, "a", "b") == (200, -200)
    seen = []
    restarted = ProjectionRunner(store, ledger, feed(), on_settled=lambda s, applied, room: seen.append(applied))
    assert restarted.drain() > 0                                     # redelivered
    assert seen == [False] and totals(ledger, "a", "b") == (200, -200)
    assert restarted.run_once() == 0


def test_crash_after_read_before_apply(rig):
    """Crash between reading and applying: redelivered, applied exactly once."""
    store, ledger, feed = rig
    append(store, match_events("m1", bombs=["7 7 7 7 7 7 7"]))
    assert feed().read()                                             # read, then "crash"
    assert totals(ledger, "a", "b") == (0, 0)
    restarted = ProjectionRunner(store, ledger, feed())
    restarted.drain()
    restarted.drain()
    assert totals(ledger, "a", "b") == (200, -200)


def test_messages_after_the_finish_are_harmless(rig):
    """A finished match's messages arriving later again (e.g. a replayed feed) change nothing."""
    store, ledger, feed = rig
    append(store, match_events("m1", left=7))
    ProjectionRunner(store, ledger, feed()).drain()
    ProjectionRunner(store, ledger, feed()).drain()
    assert totals(ledger, "a", "b") == (20, -20)


def test_redis_other_consumer_claims_stale_pending():
    """A consumer that died with messages pending: another consumer claims them (XAUTOCLAIM)."""
    client = fakeredis.FakeRedis()
    store, ledger = RedisEventStore(client, buckets=4), RedisLedger(client)
    append(store, match_events("m1", bombs=["7 7 7 7 7 7 7"]))
    dead = RedisFeed(client, consumer="dead", buckets=4)
    assert dead.read()                                               # pending on "dead", never acked
    other = ProjectionRunner(store, ledger, RedisFeed(client, consumer="live", buckets=4, claim_idle_ms=0))
    assert other.drain() > 0
    assert totals(ledger, "a", "b") == (200, -200)
    for b in range(4):
        assert client.xpending("sk:{b%d}:feed" % b, "sk-projections")["pending"] == 0


def test_project_match_directly():
    """Embedded use without a feed: settle + apply, idempotent."""
    ledger = InMemoryLedger()
    ev = match_events("m9", bombs=["SJ SJ BJ"], left=12)             # 10·4·4 + 10·2 = 180
    assert project_match(ev, ledger).scores == {"a": 180, "b": -180}
    project_match(ev, ledger)
    assert totals(ledger, "a", "b") == (180, -180)
    assert project_match(match_events("m10", finished=False), ledger) is None


def test_unsettleable_match_is_recorded_and_does_not_block_the_feed(rig):
    """A finished match without its seats cannot be settled (SettlementError): recorded
    with on_error, acknowledged, and the matches after it are still settled."""
    store, ledger, feed = rig
    broken = [e for e in match_events("bad") if not isinstance(e, PlayerSeated)]
    for n, e in enumerate(broken, start=1):
        broken[n - 1] = e.model_copy(update={"seq": n})
    append(store, broken)
    append(store, match_events("m1", left=7))
    reported = []
    runner = ProjectionRunner(store, ledger, feed(), on_error=lambda m, why: reported.append(m))
    runner.drain()
    assert [m for m, _ in runner.errors] == ["bad"] and reported == ["bad"]
    assert totals(ledger, "a", "b") == (20, -20)
    assert runner.run_once() == 0                                   # the bad message was acked too


class _Exploding:
    """A store whose load of one match fails the way a bug or a corrupt event would."""

    def __init__(self, store, bad, exc):
        self._store, self._bad, self._exc = store, bad, exc

    def __getattr__(self, name):
        return getattr(self._store, name)

    def load(self, match_id, after=0):
        if match_id == self._bad:
            raise self._exc
        return self._store.load(match_id, after)


def test_a_message_that_crashes_the_projection_is_dead_lettered(rig):
    """Bad input never wedges the runner: a non-transient failure on one message is
    recorded and acknowledged; the next message is handled."""
    store, ledger, feed = rig
    append(store, match_events("boom", left=7))
    append(store, match_events("m1", left=12))
    runner = ProjectionRunner(_Exploding(store, "boom", ValueError("corrupt event")), ledger, feed())
    runner.drain()
    assert runner.errors and {m for m, _ in runner.errors} == {"boom"}
    assert "ValueError: corrupt event" in runner.errors[0][1]
    assert totals(ledger, "a", "b") == (40, -40)
    assert runner.run_once() == 0


def test_a_redis_failure_leaves_the_message_pending(rig):
    """A Redis error is transient: it propagates, nothing is acked, a later run applies it."""
    import redis

    store, ledger, feed = rig
    append(store, match_events("m1", left=7))
    f = feed()
    failing = ProjectionRunner(_Exploding(store, "m1", redis.ConnectionError("down")), ledger, f)
    with pytest.raises(redis.ConnectionError):
        failing.drain()
    assert failing.errors == [] and totals(ledger, "a", "b") == (0, 0)
    ProjectionRunner(store, ledger, f).drain()
    assert totals(ledger, "a", "b") == (20, -20)


class _Flaky:
    """A Redis client whose next call of ``name`` runs and then raises (a reply lost on the
    way back), or raises without running (``run=False``)."""

    def __init__(self, client):
        self._client = client
        self.fail: dict[str, tuple[int, bool]] = {}
        self.when = None

    def arm(self, name, times=1, run=True, when=None):
        self.fail[name] = (times, run)
        self.when = when

    def pipeline(self, *args, **kwargs):
        return _FlakyPipeline(self, self._client.pipeline(*args, **kwargs))

    def __getattr__(self, name):
        real = getattr(self._client, name)
        if name not in self.fail:
            return real

        def call(*args, **kwargs):
            times, run = self.fail.get(name, (0, True))
            if times <= 0 or (self.when is not None and not self.when(*args, **kwargs)):
                return real(*args, **kwargs)
            import redis

            if run:
                if not real(*args, **kwargs):
                    return []  # lose only a reply that delivered something
            self.fail[name] = (times - 1, run)

            raise redis.ConnectionError(f"{name}: connection lost")

        return call


class _FlakyPipeline:
    """A pipeline of a :class:`_Flaky` client: an armed command queued on it runs with the
    others, then the whole reply is lost (``run=True``, when that command delivered something)."""

    def __init__(self, flaky, pipe):
        self._flaky, self._pipe, self._queued = flaky, pipe, []

    def __getattr__(self, name):
        real = getattr(self._pipe, name)

        def queue(*args, **kwargs):
            self._queued.append((name, args, kwargs))
            real(*args, **kwargs)
            return self
        return queue

    def execute(self, raise_on_error=True):
        import redis

        queued, self._queued = self._queued, []
        replies = self._pipe.execute(raise_on_error=raise_on_error)
        for (name, args, kwargs), reply in zip(queued, replies):
            times, run = self._flaky.fail.get(name, (0, True))
            when = self._flaky.when
            if times > 0 and (when is None or when(*args, **kwargs)) and (not run or reply):
                self._flaky.fail[name] = (times - 1, run)
                raise redis.ConnectionError(f"{name}: connection lost")
        return replies


def test_a_transient_xautoclaim_error_does_not_stop_claiming_for_good():
    """A connection error on XAUTOCLAIM is transient: later reads still claim what a
    dead consumer left pending (only a server without the command turns claiming off)."""
    import redis

    client = fakeredis.FakeRedis()
    store, ledger = RedisEventStore(client, buckets=4), RedisLedger(client)
    append(store, match_events("m1", bombs=["7 7 7 7 7 7 7"]))
    assert RedisFeed(client, consumer="dead", buckets=4).read()      # pending on "dead" for good
    flaky = _Flaky(client)
    feed = RedisFeed(flaky, consumer="live", buckets=4, claim_idle_ms=0)
    feed.read()                                                      # groups ready
    flaky.arm("xautoclaim", run=False)
    runner = ProjectionRunner(store, ledger, feed)
    with pytest.raises(redis.ConnectionError):
        runner.drain()
    runner.drain()
    assert totals(ledger, "a", "b") == (200, -200)
    for b in range(4):
        assert client.xpending("sk:{b%d}:feed" % b, "sk-projections")["pending"] == 0


def test_entries_delivered_by_a_read_whose_reply_was_lost_are_read_again():
    """XREADGROUP ">" ran on the server (the entries are pending on this consumer) but its
    reply was lost: the next read re-reads them, without waiting for an idle claim."""
    import redis

    client = fakeredis.FakeRedis()
    store, ledger = RedisEventStore(client, buckets=4), RedisLedger(client)
    flaky = _Flaky(client)
    feed = RedisFeed(flaky, consumer="live", buckets=4, claim_idle_ms=None)
    runner = ProjectionRunner(store, ledger, feed)
    assert runner.drain() == 0                                       # nothing yet: no bucket may hold pending entries
    append(store, match_events("m1", bombs=["7 7 7 7 7 7 7"]))
    flaky.arm("xreadgroup", run=True, when=lambda group, consumer, streams, **kw: ">" in streams.values())
    with pytest.raises(redis.ConnectionError):
        runner.drain()
    assert sum(client.xpending("sk:{b%d}:feed" % b, "sk-projections")["pending"] for b in range(4)) > 0
    runner.drain()
    assert totals(ledger, "a", "b") == (200, -200)
    for b in range(4):
        assert client.xpending("sk:{b%d}:feed" % b, "sk-projections")["pending"] == 0


def test_redis_feed_reads_with_its_own_bookkeeping():
    """RedisFeed.read is the feed's own (the abstract Feed.read has no behaviour to inherit):
    an idle feed neither re-reads pending entries nor claims on every poll."""
    import inspect

    from projections.runner import Feed

    assert RedisFeed.read is not Feed.read
    assert "_maybe_pending" in inspect.getsource(RedisFeed.read)
    calls = []
    client = fakeredis.FakeRedis()

    class Counting:
        def pipeline(self, *a, **k):  # the feed reads the buckets in one pipeline: count its commands
            pipe = client.pipeline(*a, **k)

            class Queue:
                def __getattr__(self, name):
                    real = getattr(pipe, name)

                    def call(*a, **k):
                        calls.append((name, a[2] if name == "xreadgroup" else None))
                        return real(*a, **k)
                    return call
            return Queue()

        def __getattr__(self, name):
            real = getattr(client, name)

            def call(*a, **k):
                calls.append((name, a[2] if name == "xreadgroup" else None))
                return real(*a, **k)
            return call

    feed = RedisFeed(Counting(), consumer="c", buckets=4, claim_idle_ms=60_000)
    feed.read()
    calls.clear()
    feed.read()                                          # idle: one read of the 4 feeds' new entries
    assert [c for c in calls if c[0] == "xautoclaim"] == []
    reads = [c for c in calls if c[0] == "xreadgroup"]
    assert reads == [("xreadgroup", {keys.feed_key(b): ">" for b in range(4)})]
