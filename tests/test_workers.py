"""Timer workers (R-12, R-13) on the embedded runtime: StubBroker, an
in-process dramatiq Worker running the real actors, and an injected clock.

With a :class:`~workers.clock.FakeClock` the scheduler holds timer messages
until ``timers.advance(seconds)`` moves the clock past them; each due one is
then sent through the StubBroker and processed by the worker
(``broker.join`` + ``worker.join``), so no test waits for a real turn.  One
test runs on the real clock with tiny timers to exercise dramatiq's own
delay queue (StubBroker puts delayed messages on ``<queue>.DQ`` with an
``eta``; the worker's consumer holds them until the eta passes).
"""

from __future__ import annotations

import random
import threading
import time

import pytest
from dramatiq.brokers.stub import StubBroker
from dramatiq.middleware import AgeLimit, Retries, TimeLimit

from engine.rules.cards import format_ranks, parse_cards
from engine.match.commands import (
    CancelTrustee,
    CreateMatch,
    Deal,
    Disconnect,
    Escape,
    Play,
    Ready,
    Reconnect,
    RequestTrustee,
    Sit,
)
from engine.config import load_config
from engine.match.events import (
    CardsPlayed,
    MatchFinished,
    Passed,
    PlayerRemoved,
    TrusteeshipEnded,
    TrusteeshipStarted,
    TurnTimedOut,
)
from engine.match.replay import check_stream
from engine.match.deadline import Deadline
from workers import runtime as rt_mod
from workers.clock import FakeClock
from workers.embedded import EmbeddedTimers
from workers.scheduler import DeadlineScheduler, ManualTimers

POINTS = load_config("points")
T0 = 1_700_000_000_000

# small fixed deals: a leads "3"; every card distinct so the plays are easy to follow
HANDS_A = "3 5 7 9 J K"
HANDS_B = "4 6 8 10 Q A"


def cfg(**update):
    return POINTS.model_copy(update=update)


@pytest.fixture
def clock():
    return FakeClock(T0)


@pytest.fixture
def timers(clock):
    t = EmbeddedTimers(clock=clock, rng=random.Random(7), deal_on_ready=False)
    yield t
    t.stop()


class Match:
    """Drive one match through the service like a gateway would."""

    def __init__(self, t: EmbeddedTimers, config, mid: str = "m1"):
        self.t = t
        self.mid = mid
        self.config = config
        self.n = 0

    def cmd(self, cls, **fields):
        self.n += 1
        out = self.t.execute(cls(command_id=f"{self.mid}-c{self.n}", match_id=self.mid, **fields))
        return out

    def ok(self, cls, **fields):
        out = self.cmd(cls, **fields)
        assert out.rejection is None, out.rejection
        return out

    def seat_players(self, ready=("a", "b")):
        self.ok(CreateMatch, config=self.config.to_record())
        self.ok(Sit, player="a")
        self.ok(Sit, player="b")
        for p in ready:
            self.ok(Ready, player=p)

    def start(self, a: str = HANDS_A, b: str = HANDS_B, first: int = 0):
        self.seat_players()
        ids = parse_cards(a + " " + b)
        na = len(a.split())
        self.ok(Deal, hands=(tuple(ids[:na]), tuple(ids[na:])), first=first)
        return self

    def events(self, after: int = 0):
        return self.t.store.load(self.mid, after=after)

    def state(self):
        return self.t.service.load_state(self.mid)

    def new_events(self, fn):
        before = self.t.store.version(self.mid)
        fn()
        return self.events(after=before)


def kinds(events):
    return [type(e).__name__ for e in events]


# ---- broker and scheduler -------------------------------------------------------------

def test_stub_broker_middleware_never_drops_delayed_timers():
    from workers.broker import MAX_RETRIES, setup_broker

    broker = setup_broker(None, from_env=False)
    assert isinstance(broker, StubBroker)
    by_type = {type(m): m for m in broker.middleware}
    assert by_type[AgeLimit].max_age is None  # AgeLimit counts from message_timestamp, not eta
    assert by_type[Retries].max_retries == MAX_RETRIES <= 3
    assert by_type[Retries].min_backoff <= 200
    assert by_type[TimeLimit].time_limit >= 10_000
    from workers.actors import QUEUE, fire_deadline

    assert fire_deadline.broker is broker and QUEUE in broker.queues
    assert not fire_deadline.options.get("max_age")


def test_dramatiq_prometheus_middleware_is_opt_in(monkeypatch, fake_redis):
    """SK_DRAMATIQ_PROMETHEUS=1 adds dramatiq's Prometheus middleware to a Redis broker
    (the worker containers set it; deploy/compose.yaml); off by default, never on a StubBroker."""
    from dramatiq.brokers.redis import RedisBroker
    from dramatiq.middleware.prometheus import Prometheus

    from workers.broker import PROMETHEUS_ENV, make_broker

    def has_prometheus(broker):
        return any(isinstance(m, Prometheus) for m in broker.middleware)

    monkeypatch.delenv(PROMETHEUS_ENV, raising=False)
    off = make_broker("redis://127.0.0.1:1/0")
    assert isinstance(off, RedisBroker) and not has_prometheus(off)
    monkeypatch.setenv(PROMETHEUS_ENV, "1")
    on = make_broker("redis://127.0.0.1:1/0")
    assert has_prometheus(on)
    assert not has_prometheus(make_broker(None))  # the in-process StubBroker
    assert not has_prometheus(make_broker("redis://127.0.0.1:1/0", prometheus=False))
    for b in (off, on):
        b.client.close()


def test_redis_broker_keeps_delayed_messages_in_redis_until_due(fake_redis):
    """make_broker(url) is a RedisBroker whose delayed messages wait in a sorted set
    (``<queue>.ZQ``) instead of a worker's memory, and reach the queue *without* an
    ``eta`` when a fetch finds them due (one Lua call; see workers/broker.py)."""
    from dramatiq import Message
    from dramatiq.brokers.redis import RedisBroker

    from workers.actors import QUEUE
    from workers.broker import make_broker, timer_middleware, timer_redis_broker_class

    cls = timer_redis_broker_class()
    plain = make_broker("redis://127.0.0.1:1/0", prometheus=False)
    assert isinstance(plain, cls) and isinstance(plain, RedisBroker)
    plain.client.close()
    broker = cls(client=fake_redis, namespace="sk-dramatiq", middleware=timer_middleware())
    broker.declare_queue(QUEUE)

    def msg(*args):
        return Message(queue_name=QUEUE, actor_name="fire_deadline", args=args, kwargs={}, options={})

    late = broker.enqueue(msg("m", 1, "turn"), delay=60_000)
    soon = broker.enqueue(msg("m", 2, "turn"), delay=1_000)
    assert "eta" not in late.options and broker.scheduled_count(QUEUE) == 2
    assert fake_redis.llen(f"sk-dramatiq:{QUEUE}") == 0 and not fake_redis.exists(f"sk-dramatiq:{QUEUE}.DQ")
    assert broker.do_fetch(QUEUE, 8) == []  # nothing due yet
    now = int(time.time() * 1000)
    assert broker.move_due(QUEUE, now_ms=now + 5_000) == 1  # only the 1 s one is due
    got = [Message.decode(d) for d in broker.do_fetch(QUEUE, 8)]
    assert [list(m.args) for m in got] == [["m", 2, "turn"]] and "eta" not in got[0].options
    assert got[0].options["redis_message_id"] == soon.options["redis_message_id"]
    assert broker.scheduled_count(QUEUE) == 1
    broker.enqueue(msg("m", 3, "turn"))  # no delay: straight onto the queue
    assert [list(Message.decode(d).args) for d in broker.do_fetch(QUEUE, 8)] == [["m", 3, "turn"]]
    broker.flush(QUEUE)
    assert broker.scheduled_count(QUEUE) == 0


def test_stale_message_is_refused_from_the_cache_without_reading_the_store(timers, clock, monkeypatch):
    m = Match(timers, cfg()).start()
    v = timers.service.load_state(m.mid).version
    assert timers.service.cached_version(m.mid) == v

    def no_load(match_id):
        raise AssertionError("a stale message must not read the stream")

    monkeypatch.setattr(timers.service, "load_state", no_load)
    assert rt_mod.fire(m.mid, v - 1, "turn", timers.runtime) == "stale"


def test_runtime_build_hooks_wrap_the_worker_runtime(monkeypatch, fake_redis):
    """workers.runtime.on_build: workers/prometheus.py wraps the timer runtime in the
    engine metrics through it (no replacing of runtime.from_env)."""
    from engine.store.redis_store import RedisEventStore
    from projections.metrics import InstrumentedService, InstrumentedStore, instrument_runtime
    from workers import runtime

    monkeypatch.setattr(RedisEventStore, "from_url", classmethod(lambda cls, url, **kw: cls(fake_redis)))
    monkeypatch.setenv(runtime.STORE_URL_ENV, "redis://example.invalid/0")
    monkeypatch.setenv("SK_TIMERS_PUBLISH", "0")
    seen = []
    hook = runtime.on_build(lambda rt: seen.append(rt))
    runtime.on_build(instrument_runtime)
    runtime.on_build(instrument_runtime)  # registering twice changes nothing
    try:
        rt = runtime.from_env()
    finally:
        runtime.remove_build_hook(hook)
        runtime.remove_build_hook(instrument_runtime)
    assert seen == [rt]
    assert isinstance(rt.store, InstrumentedStore) and isinstance(rt.service, InstrumentedService)
    assert rt.service.store is rt.store  # the service appends through the instrumented store
    assert instrument_runtime(rt).service is rt.service  # idempotent
    plain = runtime.from_env()  # hooks removed: nothing wrapped
    assert not isinstance(plain.service, InstrumentedService)


def test_scheduler_delay_is_deadline_minus_now_never_negative(clock):
    sent = []
    s = DeadlineScheduler(clock, lambda d, delay: sent.append((d, delay)))
    s.schedule(Deadline("m", 5, T0 + 15_000, "turn"))
    s.schedule(Deadline("m", 6, T0 - 3_000, "trustee"))
    s.schedule(None)
    assert [x[1] for x in sent] == [15_000, 0]

    class O:  # an outcome
        def __init__(self, **kw):
            self.__dict__.update({"rejection": None, "duplicate": False, "state": None, **kw})

    class S:
        def deadline(self):
            return Deadline("m", 9, T0 + 500, "trustee")

    s.on_commit(O(state=S()))
    s.on_commit(O(state=S(), duplicate=True))
    s.on_commit(O(state=S(), rejection=Exception("no")))
    assert [x[0].version for x in sent] == [5, 6, 9]


def test_manual_timers_release_in_deadline_order():
    m = ManualTimers()
    m(Deadline("b", 1, 300, "turn"), 0)
    m(Deadline("a", 1, 100, "turn"), 0)
    assert m.pop_due(99) is None
    assert m.pop_due(1000).match_id == "a"
    assert m.pop_due(1000).match_id == "b"


def test_timer_command_ids_derive_from_match_version_kind():
    a = rt_mod.timer_command("m1", 7, "turn")
    assert a.type == "TurnTimeout" and a.version == 7
    assert a.command_id == rt_mod.timer_command("m1", 7, "turn").command_id
    ids = {rt_mod.timer_command(m, v, k).command_id
           for m in ("m1", "m2") for v in (7, 8) for k in ("turn", "trustee", "ready")}
    assert len(ids) == 12
    assert rt_mod.timer_command("m1", 7, "trustee").type == "TrusteeAct"
    assert rt_mod.timer_command("m1", 7, "ready").type == "ReadyTimeout"
    with pytest.raises(ValueError):
        rt_mod.timer_command("m1", 7, "nap")


# ---- turn timer ------------------------------------------------------------------

def test_turn_timeout_counts_and_notice(timers, clock):
    m = Match(timers, cfg(turn_seconds=15)).start()
    d = m.state().deadline()
    assert d.kind == "turn" and d.at_ms == clock.now_ms() + 15_000
    assert m.new_events(lambda: timers.advance(14.999)) == []  # not a millisecond early
    evs = m.new_events(lambda: timers.advance(0.001))
    assert kinds(evs)[:2] == ["TurnTimedOut", "CardsPlayed"]
    to = evs[0]
    assert (to.player, to.count) == ("a", 1)
    assert to.notice_zh == "請注意，你已經超時1次了，超時三次，系統將自動託管遊戲"
    assert "timed out 1 time" in to.notice_en
    assert to.ts == d.at_ms  # fired at the deadline
    played = evs[1]
    assert played.by == "timeout" and format_ranks(played.cards) == "3"  # lowest single leading
    assert to.command_id == rt_mod.timer_command_id("m1", d.version, "turn")

    # b's clock starts with b's turn: b times out following -> weakest single that beats 3
    evs = m.new_events(lambda: timers.advance(15))
    assert kinds(evs)[:2] == ["TurnTimedOut", "CardsPlayed"]
    assert (evs[0].player, evs[0].count) == ("b", 1)
    assert format_ranks(evs[1].cards) == "4"

    # a second timeout of a: count 2, notice says 2
    evs = m.new_events(lambda: timers.advance(15))
    assert (evs[0].player, evs[0].count) == ("a", 2)
    assert "超時2次了" in evs[0].notice_zh


def test_a_player_who_acts_in_time_resets_nothing_but_the_clock(timers, clock):
    m = Match(timers, cfg(turn_seconds=10)).start()
    timers.advance(9)
    m.ok(Play, player="a", text="3")
    # a's old clock (version at the deal) must not fire: it is stale now
    evs = m.new_events(lambda: timers.advance(9.5))
    assert evs == []
    evs = m.new_events(lambda: timers.advance(0.5))  # b's clock: 10 s after a's play
    assert kinds(evs)[0] == "TurnTimedOut" and evs[0].player == "b"
    # a's clock was replaced in the index by the play: it was never dispatched at all
    assert rt_mod.current().stats.get("stale", 0) == 0


def test_third_timeout_starts_trusteeship_then_trustee_plays_after_delay(timers, clock):
    m = Match(timers, cfg(turn_seconds=15, trustee_delay_seconds=0.5),).start(
        a="3 5 7 9 J K 2", b="4 6 8 10 Q A BJ")
    timers.advance(15 * 5)  # a, b, a, b, a  -> a's 3rd timeout
    evs = m.events()
    tos = [e for e in evs if isinstance(e, TurnTimedOut)]
    assert [(e.player, e.count) for e in tos] == [("a", 1), ("b", 1), ("a", 2), ("b", 2), ("a", 3)]
    started = [e for e in evs if isinstance(e, TrusteeshipStarted)]
    assert [(e.player, e.reason) for e in started] == [("a", "timeouts")]
    assert tos[-1].seq + 1 == started[0].seq  # in the same decision as the 3rd timeout
    assert "超時3次了" in tos[-1].notice_zh
    st = m.state()
    assert st.seat(0).trustee == "timeouts"
    # b's 3rd timeout, then it is a's turn: a is trusteed -> trustee deadline, 0.5 s
    timers.advance(15)
    st = m.state()
    assert st.current_player == "a" and st.phase == "playing"
    d = st.deadline()
    assert d.kind == "trustee" and d.at_ms == st.last_ts + 500
    evs = m.new_events(lambda: timers.advance(0.5))
    assert evs and isinstance(evs[0], (CardsPlayed, Passed)) and evs[0].by == "trustee"
    assert evs[0].ts == d.at_ms


def test_nobody_acts_match_finishes_by_itself(timers):
    m = Match(timers, cfg(turn_seconds=15, trustee_delay_seconds=0.5)).start(
        a="3 3 5 7 9 J K 2 BJ", b="4 6 6 8 10 Q A SJ")
    timers.run_until_quiet()
    st = m.state()
    assert st.phase == "finished"
    evs = m.events()
    assert check_stream(evs) == []
    assert isinstance(evs[-1], MatchFinished)
    per_player = {}
    for e in evs:
        if isinstance(e, TurnTimedOut):
            per_player.setdefault(e.player, []).append(e.count)
    for counts in per_player.values():
        assert counts == list(range(1, len(counts) + 1))
        assert len(counts) <= 3  # trusteeship after the 3rd: no further turn timeouts
    assert st.deadline() is None and timers.store.deadline("m1") is None


def test_timeouts_before_trustee_is_configurable(timers):
    m = Match(timers, cfg(timeouts_before_trustee=1)).start()
    evs = m.new_events(lambda: timers.advance(15))
    assert kinds(evs)[:3] == ["TurnTimedOut", "TrusteeshipStarted", "CardsPlayed"]
    assert evs[0].notice_zh == "請注意，你已經超時1次了，超時一次，系統將自動託管遊戲"


# ---- requested trusteeship --------------------------------------------------------

def test_request_and_cancel_trusteeship(timers, clock):
    m = Match(timers, cfg(turn_seconds=15, trustee_delay_seconds=0.5)).start()
    m.ok(RequestTrustee, player="a")
    d = m.state().deadline()
    assert d.kind == "trustee" and d.at_ms == clock.now_ms() + 500
    evs = m.new_events(lambda: timers.advance(0.5))
    assert isinstance(evs[0], CardsPlayed) and evs[0].by == "trustee" and format_ranks(evs[0].cards) == "3"
    assert not any(isinstance(e, TurnTimedOut) for e in evs)
    m.ok(Play, player="b", text="4")
    # a's turn again, a still trusteed: played for after 0.5 s
    evs = m.new_events(lambda: timers.advance(0.5))
    assert evs and evs[0].by == "trustee" and evs[0].player == "a"
    m.ok(CancelTrustee, player="a")
    assert any(isinstance(e, TrusteeshipEnded) and e.reason == "cancelled" for e in m.events())
    assert m.state().current_player == "b"
    m.ok(Play, player="b", text="6")
    st = m.state()
    assert st.current_player == "a"
    assert st.deadline().kind == "turn"  # a plays by hand again: the turn clock runs
    assert m.new_events(lambda: timers.advance(1)) == []  # and no trustee play comes


def test_trusteeship_from_timeouts_can_be_cancelled(timers):
    m = Match(timers, cfg(timeouts_before_trustee=1)).start()
    timers.advance(15)
    assert m.state().seat(0).trustee == "timeouts"
    m.ok(CancelTrustee, player="a")
    assert m.state().seat(0).trustee is None


# ---- ready timer ------------------------------------------------------------------

def test_ready_timer_removes_unready_player(timers, clock):
    m = Match(timers, cfg(ready_seconds=30))
    m.seat_players(ready=("a",))
    d = m.state().deadline()
    assert d.kind == "ready"
    assert m.new_events(lambda: timers.advance(29.9)) == []
    evs = m.new_events(lambda: timers.advance(0.1))
    assert [(type(e).__name__, getattr(e, "player", None), e.reason) for e in evs] == [
        ("PlayerRemoved", "b", "not_ready"), ("MatchAbandoned", None, "not_ready")]
    st = m.state()  # the match can never be dealt: it ends, nothing is left on a clock
    assert st.players() == ["a"] and st.phase == "abandoned" and st.deadline() is None


def test_ready_in_time_is_not_removed(timers):
    m = Match(timers, cfg(ready_seconds=30))
    m.seat_players(ready=("a",))
    timers.advance(20)
    m.ok(Ready, player="b")
    evs = m.new_events(lambda: timers.advance(60))
    assert not any(isinstance(e, PlayerRemoved) for e in evs)


# ---- disconnect / reconnect ---------------------------------------------------------

def test_disconnect_trustee_plays_and_reconnect_keeps_trustee_by_default(timers):
    m = Match(timers, cfg(reclaim_after_reconnect=False, trustee_delay_seconds=0.5)).start()
    out = m.ok(Disconnect, player="a")
    assert kinds(out.events) == ["PlayerDisconnected", "TrusteeshipStarted"]
    assert out.events[1].reason == "disconnect"
    evs = m.new_events(lambda: timers.advance(0.5))
    assert evs[0].by == "trustee" and evs[0].player == "a"
    out = m.ok(Reconnect, player="a")
    assert kinds(out.events) == ["PlayerReconnected"]  # control stays with the system
    assert m.state().seat(0).trustee == "disconnect"
    refused = m.cmd(CancelTrustee, player="a")
    assert refused.rejection is not None and refused.rejection.code == "not_allowed"
    m.ok(Play, player="b", text="4")
    evs = m.new_events(lambda: timers.advance(0.5))
    assert evs[0].by == "trustee" and evs[0].player == "a"


def test_reconnect_restores_control_when_room_allows(timers):
    m = Match(timers, cfg(reclaim_after_reconnect=True, trustee_delay_seconds=0.5)).start()
    m.ok(Disconnect, player="a")
    timers.advance(0.5)  # trustee leads for a
    out = m.ok(Reconnect, player="a")
    assert kinds(out.events) == ["PlayerReconnected", "TrusteeshipEnded"]
    assert out.events[1].reason == "reconnected"
    assert m.state().seat(0).trustee is None
    m.ok(Play, player="b", text="4")
    st = m.state()
    assert st.current_player == "a" and st.deadline().kind == "turn"
    assert m.new_events(lambda: timers.advance(1)) == []  # no trustee play any more


def _outbox(client, player):
    import msgpack

    from engine.store import keys

    out = []
    for _id, fields in client.xrange(keys.outbox_key(player)):
        f = {k.decode(): v for k, v in fields.items()}
        if f.get("kind") == b"update":  # a compact update: the entry's fields say the version
            body = msgpack.unpackb(f["body"], raw=False, strict_map_key=False)
            out.append({**body, "version": int(f["version"])})
    return out


def test_reconnect_gets_a_full_view_and_timer_outcomes_reach_the_players(clock):
    """R-13.4: the reconnecting player's update (via the command gateway) carries
    their full view at once; timer outcomes are published the same way."""
    import msgpack

    from engine.match.commands import encode_command
    from engine.service.inbox import InboxConsumer
    from engine.store import keys

    with EmbeddedTimers("fakeredis", clock=clock, rng=random.Random(1), deal_on_ready=False,
                        publish="gateway") as t:
        client = t.store.client
        m = Match(t, cfg(reclaim_after_reconnect=True, trustee_delay_seconds=0.5)).start()
        t.advance(15)  # a times out: published to both players by the worker
        ups = _outbox(client, "a")
        assert ups and ups[-1]["events"][0]["type"] == "TurnTimedOut"
        assert ups[-1]["events"][0]["notice_zh"].startswith("請注意，你已經超時1次了")
        assert _outbox(client, "b")[-1]["version"] == m.state().version

        gw = InboxConsumer(client, t.service, "gw-test")
        m.ok(Disconnect, player="b")
        before = len(_outbox(client, "b"))
        client.xadd(keys.INBOX, {"c": encode_command(Reconnect(command_id="rc1", match_id="m1", player="b"))})
        assert gw.run_once(block_ms=None) == 1
        ups = _outbox(client, "b")
        assert len(ups) == before + 1
        view = ups[-1]["view"]
        st = m.state()
        assert view["version"] == st.version and view["phase"] == "playing"
        own = [x for x in view["seats"] if x and x["player"] == "b"][0]
        assert own["cards_left"] == len(st.seat(1).hand) and own["trustee"] is None
        assert msgpack.packb(view)  # plain data
        assert format_ranks(st.seat(1).hand).split()[0] in repr(view)  # the player's own hand is in it


# ---- R-12 escape ---------------------------------------------------------------------------

def test_escape_under_trustee_policy_is_played_to_the_end(timers):
    m = Match(timers, cfg(escape_policy="trustee", trustee_delay_seconds=0.5)).start()
    out = m.ok(Escape, player="a")
    assert kinds(out.events) == ["PlayerEscaped", "TrusteeshipStarted"]
    assert out.events[1].reason == "escape"
    timers.run_until_quiet()  # b never acts either: b times out, a is played for
    evs = m.events()
    fin = evs[-1]
    assert isinstance(fin, MatchFinished) and fin.reason == "out"
    assert check_stream(evs) == []
    assert any(isinstance(e, CardsPlayed) and e.by == "trustee" and e.player == "a" for e in evs)
    refused = m.cmd(CancelTrustee, player="a")
    assert refused.rejection is not None


def test_escape_under_forfeit_policy_finishes_at_once(timers):
    m = Match(timers, cfg(escape_policy="forfeit")).start()
    out = m.ok(Escape, player="b")
    assert kinds(out.events) == ["PlayerEscaped", "MatchFinished"]
    assert out.events[1].reason == "escape" and out.events[1].winner == "a"
    assert out.state.deadline() is None and timers.store.deadline("m1") is None
    assert m.new_events(lambda: timers.advance(60)) == []  # the old turn clock is stale


# ---- stale and duplicate messages ---------------------------------------------------------

def test_stale_and_duplicate_timer_messages_are_noops(timers, clock):
    m = Match(timers, cfg()).start()
    d = m.state().deadline()
    timers.lose_pending_timers()
    clock.set(d.at_ms)
    timers.send_fire("m1", d.version, "turn")
    timers.send_fire("m1", d.version, "turn")  # duplicated delivery
    timers.join()
    after = m.events()
    assert [e for e in after if isinstance(e, TurnTimedOut)].__len__() == 1
    timers.send_fire("m1", d.version, "turn")  # redelivered much later
    timers.send_fire("m1", d.version - 1, "ready")  # set for an older version
    timers.send_fire("m1", m.state().version, "ready")  # wrong kind for the phase
    timers.send_fire("no-such-match", 3, "turn")
    timers.join()
    assert m.events() == after
    stats = rt_mod.current().stats
    assert stats["committed"] == 1
    assert stats.get("duplicate", 0) + stats.get("stale", 0) + stats.get("rejected", 0) >= 5
    assert not timers.broker.dead_letters


def test_concurrent_firings_of_one_deadline_append_once(timers, clock):
    m = Match(timers, cfg()).start()
    d = m.state().deadline()
    timers.lose_pending_timers()
    clock.set(d.at_ms + 5_000)
    results = []
    threads = [threading.Thread(target=lambda: results.append(rt_mod.fire("m1", d.version, "turn")))
               for _ in range(6)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert results.count("committed") == 1
    assert len([e for e in m.events() if isinstance(e, TurnTimedOut)]) == 1


# ---- the sweeper ------------------------------------------------------------------------------

def test_sweeper_fires_overdue_deadline_whose_message_was_lost(timers, clock):
    m = Match(timers, cfg(turn_seconds=15)).start()
    d = m.state().deadline()
    lost = timers.lose_pending_timers()  # dispatched, and the message never arrives
    assert [x.version for x in lost] == [d.version]
    grace = timers.runtime.grace_ms
    assert m.new_events(lambda: timers.advance(15 + (grace - 1) / 1000)) == []  # in flight: nothing
    assert timers.sweep(now_ms=d.at_ms + grace - 1) == []  # within grace
    # past the grace period but still in flight: the dispatcher's to finish or to send again
    assert timers.sweep(now_ms=d.at_ms + grace + 1) == [(d, "in_flight")]
    lease_over = timers.claims.retry_at(d)
    assert lease_over is not None and lease_over > d.at_ms + grace
    done = timers.sweep(now_ms=lease_over)
    assert [(x.version, r) for x, r in done] == [(d.version, "committed")]
    evs = m.events(after=d.version)
    assert isinstance(evs[0], TurnTimedOut) and evs[0].command_id == rt_mod.timer_command_id("m1", d.version, "turn")
    # the firing released the mark, and its next deadline is in the index, not in flight
    nxt = m.state().deadline()
    assert timers.store.deadline("m1") == nxt and timers.claims.retry_at(nxt) is None
    assert timers.claims.in_flight() == 0
    assert timers.sweep(now_ms=lease_over) == []  # nothing else overdue
    # the lost message turning up late is a duplicate: no-op
    timers.send_fire("m1", d.version, "turn")
    timers.join()
    assert len([e for e in m.events() if isinstance(e, TurnTimedOut)]) == 1


@pytest.mark.parametrize("store", ["memory", "fakeredis"])
def test_a_lost_dispatch_is_dispatched_again_when_its_lease_runs_out(clock, store):
    """The dispatcher's own rescue: a claimed deadline whose firing never finished is
    claimed again once its in-flight lease (counted from the deadline) has passed."""
    with EmbeddedTimers(store, clock=clock, rng=random.Random(7), deal_on_ready=False, lease_ms=3_000) as t:
        m = Match(t, cfg(turn_seconds=15)).start()
        d = m.state().deadline()
        t.lose_pending_timers()
        assert t.claims.retry_at(d) == d.at_ms + 3_000
        assert m.new_events(lambda: t.advance(17.999)) == []
        evs = m.new_events(lambda: t.advance(0.001))
        assert kinds(evs)[:1] == ["TurnTimedOut"] and evs[0].ts == d.at_ms + 3_000
        assert t.runtime.stats.get("committed_dispatch") == 1 and t.dispatcher.redispatched == 1
        assert t.claims.retry_at(d) is None


def test_the_dispatcher_sends_only_the_current_deadline_once(clock):
    """No message per commit: superseded deadlines are never sent, and a claimed one is
    not claimed again while in flight."""
    with EmbeddedTimers(clock=clock, rng=random.Random(7), deal_on_ready=False) as t:
        ms = [Match(t, cfg(turn_seconds=10), mid=f"m{i}").start() for i in range(5)]
        for m in ms:
            m.ok(Play, player="a", text="3")  # replaces a's clock with b's
        clock.advance(10)
        first = t.dispatcher.claims.claim(clock.now_ms(), 100)
        assert sorted(c.deadline.match_id for c in first) == [f"m{i}" for i in range(5)]
        assert all(c.deadline == m.state().deadline() for c, m in zip(first, ms))
        assert t.dispatcher.claims.claim(clock.now_ms(), 100) == []  # in flight
        t.release([c.deadline for c in first])
        assert t.dispatcher.tick() == 5
        t.join()
        assert t.runtime.stats == {"committed": 5, "committed_dispatch": 5}
        assert t.claims.in_flight() == 0


def test_several_sweepers_at_once_fire_each_deadline_once(clock):
    with EmbeddedTimers(clock=clock, rng=random.Random(3), deal_on_ready=False) as t:
        ms = [Match(t, cfg(), mid=f"m{i}").start() for i in range(8)]
        t.lose_pending_timers()
        clock.advance(60)
        out: list = []
        threads = [threading.Thread(target=lambda: out.extend(t.sweep())) for _ in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert sum(1 for _, r in out if r == "committed") == 8
        for m in ms:
            assert len([e for e in m.events() if isinstance(e, TurnTimedOut)]) == 1
            assert check_stream(m.events()) == []


def test_sweeper_actor_runs_through_the_broker(timers, clock):
    from workers.actors import sweep_deadlines

    m = Match(timers, cfg()).start()
    timers.lose_pending_timers()
    clock.advance(30)
    sweep_deadlines.send()
    timers.join()
    assert any(isinstance(e, TurnTimedOut) for e in m.events())


# ---- the real clock: dramatiq's delay queue -------------------------------------------------

@pytest.mark.parametrize("store,legacy", [("memory", False), ("fakeredis", False), ("memory", True)])
def test_real_clock_timers_finish_a_match(store, legacy):
    """Real clock: the dispatcher thread (or, ``legacy``, a delayed message per commit)."""
    fast = cfg(turn_seconds=1.0, trustee_delay_seconds=0.01, timeouts_before_trustee=1)  # 1 s: the floor (engine/config.py)
    t0 = time.monotonic()
    # legacy: every commit holds a delayed message in the stub worker, which prefetches at most
    # 2 x threads of them (dramatiq's delay-queue prefetch): 4 threads hold the match's 6
    with EmbeddedTimers(store, rng=random.Random(5), deal_on_ready=False, sweep_interval_ms=0,
                        timer_messages=legacy, worker_threads=4 if legacy else 2) as t:
        m = Match(t, fast).start(a="3 3 5 7 9 J K", b="4 6 6 8 10 Q")
        st = t.wait_finished("m1", timeout_s=20)
        assert st.phase == "finished", st
        evs = m.events()
        assert check_stream(evs) == []
        fired_by = "committed_message" if legacy else "committed_dispatch"
        assert t.runtime.stats.get(fired_by, 0) >= 2  # fired by delayed messages / the dispatcher
        assert t.runtime.stats.get("committed_sweeper", 0) == 0
        for prev, e in zip(evs, evs[1:]):
            if isinstance(e, TurnTimedOut):
                assert e.ts - prev.ts >= 1000  # never early
    assert time.monotonic() - t0 < 20


def test_real_clock_sweeper_thread_rescues_a_lost_message():
    fast = cfg(turn_seconds=1.0, trustee_delay_seconds=0.01, timeouts_before_trustee=1)  # 1 s: the floor (engine/config.py)
    # no dispatcher: nothing sends a message, as when every one is lost
    with EmbeddedTimers(rng=random.Random(5), deal_on_ready=False, sweep_interval_ms=50, grace_ms=100,
                        dispatch_interval_ms=0) as t:
        m = Match(t, fast).start()
        st = t.wait_finished("m1", timeout_s=20)
        assert st.phase == "finished"
        assert check_stream(m.events()) == []
        assert t.runtime.stats.get("committed_sweeper", 0) >= 2


@pytest.mark.redis
def test_a_dead_workers_moved_timer_is_requeued_while_the_queue_is_idle(real_redis):
    """A timer moved from ``.ZQ`` onto the queue and fetched by a worker that then dies
    (in its ``__acks__`` set, never acked) is put back by dramatiq's heartbeat maintenance
    -- which runs inside the dispatch script.  A live worker polling an *empty* queue
    must still run that maintenance now and then, or the message stays stuck for good."""
    from dramatiq import Message
    from dramatiq.brokers.redis import MAINTENANCE_SCALE

    from workers.actors import QUEUE
    from workers.broker import timer_middleware, timer_redis_broker_class

    cls = timer_redis_broker_class()

    def broker():
        b = cls(client=real_redis, namespace="sk-dramatiq", middleware=timer_middleware(),
                heartbeat_timeout=50, maintenance_chance=MAINTENANCE_SCALE)  # maintenance on every call
        b.declare_queue(QUEUE)
        return b

    dead, live = broker(), broker()
    dead.enqueue(Message(queue_name=QUEUE, actor_name="fire_deadline", args=("m", 1, "turn"),
                         kwargs={}, options={}), delay=1)
    time.sleep(0.01)
    assert len(dead.do_fetch(QUEUE, 8)) == 1  # moved and fetched; then the worker dies
    assert real_redis.llen(f"sk-dramatiq:{QUEUE}") == 0
    time.sleep(0.1)  # > heartbeat_timeout: the dead worker's heartbeat is stale
    got = []
    for _ in range(3):  # the live worker polls its idle queue
        got += live.do_fetch(QUEUE, 8)
    assert [list(Message.decode(d).args) for d in got] == [["m", 1, "turn"]]
