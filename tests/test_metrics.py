"""projections.metrics: observe_outcome counts, wrappers, collectors, exposition."""

from __future__ import annotations

import urllib.request
from types import SimpleNamespace

import pytest

from engine.rules.combo import Combo
from engine.config import load_config
from engine.match.errors import DoesNotBeat, StaleCommand
from engine.match.events import (
    CardsPlayed,
    HandDealt,
    MatchCreated,
    MatchFinished,
    Passed,
    PlayerDisconnected,
    PlayerEscaped,
    Reading,
    TrusteeshipStarted,
    TurnTimedOut,
)
from projections import metrics as m

CFG = "points-test"
m.register_room_labels([CFG])  # a registered room: metrics label only known rooms (issue 12)


def val(name: str, **labels: str) -> float:
    v = m.REGISTRY.get_sample_value(name, labels)
    return 0.0 if v is None else v


def _env(seq: int) -> dict:
    return {"match_id": "mx", "seq": seq, "ts": 1000 + seq, "command_id": f"c{seq}"}


def _bomb(xiang: int) -> Reading:
    size = xiang
    counts = [0] * 15
    counts[3] = size
    return Reading.of(Combo("bomb", 3, size, tuple(counts), xiang=xiang))


def _single() -> Reading:
    counts = [0] * 15
    counts[0] = 1
    return Reading.of(Combo("single", 0, 1, tuple(counts)))


def outcome(events=(), rejection=None, duplicate=False, state=None):
    return SimpleNamespace(events=list(events), rejection=rejection, duplicate=duplicate, state=state)


def test_observe_outcome_counts_each_event_kind():
    before = {
        "created": val("shuangkou_matches_created_total", config=CFG),
        "started": val("shuangkou_matches_started_total", config=CFG),
        "fin": val("shuangkou_matches_finished_total", config=CFG, kou="double", reason="out"),
        "bomb6": val("shuangkou_bombs_total", config=CFG, xiang="6", kind="bomb"),
        "bomb4": val("shuangkou_bombs_total", config=CFG, xiang="4", kind="bomb"),
        "to": val("shuangkou_turn_timeouts_total", config=CFG),
        "tr": val("shuangkou_trusteeships_total", config=CFG, reason="timeouts"),
        "dc": val("shuangkou_disconnects_total", config=CFG),
        "esc": val("shuangkou_escapes_total", config=CFG, policy="forfeit"),
        "plays": val("shuangkou_plays_total", config=CFG, by="player"),
        "tplays": val("shuangkou_plays_total", config=CFG, by="timeout"),
        "passes": val("shuangkou_passes_total", config=CFG, by="auto"),
        "events": val("shuangkou_events_appended_total"),
    }
    cfg = load_config("points").to_record()
    evs = [
        MatchCreated(**_env(1), config=cfg),
        HandDealt(**_env(2), hands=((1,), (2,)), set_aside=(), lead_card=None, first=0),
        CardsPlayed(**_env(3), player="a", cards=(12, 13, 14, 15, 66, 67), reading=_bomb(6)),
        CardsPlayed(**_env(4), player="b", cards=(0,), reading=_single(), by="timeout"),
        CardsPlayed(**_env(5), player="a", cards=(16, 17, 18, 19), reading=_bomb(4)),
        Passed(**_env(6), player="b", by="auto"),
        TurnTimedOut(**_env(7), player="b", count=3, notice_zh="x", notice_en="x"),
        TrusteeshipStarted(**_env(8), player="b", reason="timeouts"),
        PlayerDisconnected(**_env(9), player="b"),
        PlayerEscaped(**_env(10), player="b", policy="forfeit"),
        MatchFinished(**_env(11), winner="a", loser="b", cards_left={"a": 0, "b": 14}, kou="double", reason="out"),
    ]
    m.observe_outcome(outcome(evs), CFG)
    assert val("shuangkou_matches_created_total", config=CFG) == before["created"] + 1
    assert val("shuangkou_matches_started_total", config=CFG) == before["started"] + 1
    assert val("shuangkou_matches_finished_total", config=CFG, kou="double", reason="out") == before["fin"] + 1
    assert val("shuangkou_bombs_total", config=CFG, xiang="6", kind="bomb") == before["bomb6"] + 1
    assert val("shuangkou_bombs_total", config=CFG, xiang="4", kind="bomb") == before["bomb4"] + 1
    assert val("shuangkou_turn_timeouts_total", config=CFG) == before["to"] + 1
    assert val("shuangkou_trusteeships_total", config=CFG, reason="timeouts") == before["tr"] + 1
    assert val("shuangkou_disconnects_total", config=CFG) == before["dc"] + 1
    assert val("shuangkou_escapes_total", config=CFG, policy="forfeit") == before["esc"] + 1
    assert val("shuangkou_plays_total", config=CFG, by="player") == before["plays"] + 2
    assert val("shuangkou_plays_total", config=CFG, by="timeout") == before["tplays"] + 1
    assert val("shuangkou_passes_total", config=CFG, by="auto") == before["passes"] + 1
    assert val("shuangkou_events_appended_total") == before["events"] + len(evs)


def test_duplicates_count_nothing_and_rejections_count_their_code():
    fin = val("shuangkou_matches_finished_total", config=CFG, kou="flat", reason="out")
    rej = val("shuangkou_rejections_total", config=CFG, code="does_not_beat")
    ev = MatchFinished(**_env(9), winner="a", loser="b", cards_left={"a": 0, "b": 2}, kou="flat", reason="out")
    m.observe_outcome(outcome([ev], duplicate=True), CFG)
    assert val("shuangkou_matches_finished_total", config=CFG, kou="flat", reason="out") == fin
    m.observe_outcome(outcome(rejection=DoesNotBeat("3 does not beat 4")), CFG)
    m.observe_outcome(outcome(rejection=DoesNotBeat("3 does not beat 4")), CFG)
    assert val("shuangkou_rejections_total", config=CFG, code="does_not_beat") == rej + 2


def test_config_name_read_from_state_when_not_given():
    state = SimpleNamespace(config=load_config("wealth"))
    before = val("shuangkou_disconnects_total", config="wealth")
    m.observe_outcome(outcome([PlayerDisconnected(**_env(4), player="a")], state=state))
    assert val("shuangkou_disconnects_total", config="wealth") == before + 1


class _FakeService:
    def __init__(self, result):
        self.result = result
        self.calls = 0

    def execute(self, cmd):
        self.calls += 1
        return self.result


def test_instrumented_service_times_and_measures_timer_lateness():
    from engine.match.commands import TurnTimeout
    from engine.match.deadline import Deadline

    store = SimpleNamespace(deadline=lambda mid: Deadline(mid, 7, at_ms=10_000, kind="turn"))
    svc = m.InstrumentedService(_FakeService(outcome([PlayerDisconnected(**_env(8), player="a")])),
                                store=store, clock=lambda: 12_500, config_name=CFG)
    n = val("shuangkou_command_duration_seconds_count", command="TurnTimeout")
    late_n = val("shuangkou_timer_lateness_seconds_count", kind="turn")
    late_sum = val("shuangkou_timer_lateness_seconds_sum", kind="turn")
    ok = val("shuangkou_commands_total", command="TurnTimeout", result="ok")
    svc.execute(TurnTimeout(command_id="t1", match_id="mx", version=7))
    assert val("shuangkou_command_duration_seconds_count", command="TurnTimeout") == n + 1
    assert val("shuangkou_commands_total", command="TurnTimeout", result="ok") == ok + 1
    assert val("shuangkou_timer_lateness_seconds_count", kind="turn") == late_n + 1
    assert val("shuangkou_timer_lateness_seconds_sum", kind="turn") == pytest.approx(late_sum + 2.5)
    # a stale timer (version moved on): no lateness, counted as stale
    stale = val("shuangkou_timers_stale_total", kind="turn")
    svc2 = m.InstrumentedService(_FakeService(outcome(rejection=StaleCommand("moved on"))),
                                 store=store, clock=lambda: 12_500, config_name=CFG)
    svc2.execute(TurnTimeout(command_id="t2", match_id="mx", version=3))
    assert val("shuangkou_timer_lateness_seconds_count", kind="turn") == late_n + 1
    assert val("shuangkou_timers_stale_total", kind="turn") == stale + 1
    # delegation
    assert svc.calls == 1 and svc.result is not None


def test_instrumented_store_counts_appends_and_conflicts():
    from engine.store.base import WrongVersion

    class S:
        def append(self, *a, **k):
            if k.get("fail"):
                raise WrongVersion("m", 1, 2)
            return "ok"

        def version(self, mid):
            return 3

    st = m.InstrumentedStore(S())
    n = val("shuangkou_append_duration_seconds_count")
    c = val("shuangkou_append_conflicts_total")
    assert st.append("m", 0) == "ok"
    with pytest.raises(WrongVersion):
        st.append("m", 0, fail=True)
    assert st.version("m") == 3
    assert val("shuangkou_append_duration_seconds_count") == n + 2
    assert val("shuangkou_append_conflicts_total") == c + 1


def test_feed_lag_and_dead_letter_collectors_with_fakeredis():
    import fakeredis
    from prometheus_client import CollectorRegistry

    r = fakeredis.FakeRedis()
    for i in range(5):
        r.xadd("feed:0", {"i": i})
    r.xgroup_create("feed:0", "proj", id="0")
    r.xreadgroup("proj", "c1", {"feed:0": ">"}, count=2)
    r.zadd("dramatiq:default.XQ", {"a": 1, "b": 2})
    r.zadd("dramatiq:default.ZQ", {"t1": 10, "t2": 20, "t3": 30})
    reg = CollectorRegistry()
    reg.register(m.FeedLagCollector(r, ["feed:0"]))
    reg.register(m.DeadLetterQueueCollector(r))
    assert reg.get_sample_value(m.PROJECTION_LAG, {"feed": "feed:0", "group": "proj"}) == 3
    assert reg.get_sample_value(m.PROJECTION_PENDING, {"feed": "feed:0", "group": "proj"}) == 2
    assert reg.get_sample_value(m.DEAD_LETTER_QUEUE, {"queue": "default"}) == 2
    assert reg.get_sample_value(m.TIMERS_SCHEDULED, {"queue": "default"}) == 3


def test_metrics_server_serves_the_registry():
    server, thread = m.start_metrics_server(0, addr="127.0.0.1")
    try:
        port = server.server_port
        m.observe_dead_letter("inbox")
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert "shuangkou_dead_letters_total" in body
        assert "shuangkou_command_duration_seconds_bucket" in body
    finally:
        server.shutdown()


def test_multiprocess_mode_sums_processes(tmp_path):
    """Two processes writing to PROMETHEUS_MULTIPROC_DIR add up on one scrape."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=str(tmp_path))
    code = ("from projections import metrics as m\n"
            "m.observe_dead_letter('feed', 2)\n")
    for _ in range(2):
        subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)
    scrape = ("from projections import metrics as m\n"
              "print(m.generate_latest().decode())\n")
    out = subprocess.run([sys.executable, "-c", scrape], env=env, check=True, timeout=60,
                         capture_output=True, text=True).stdout
    line = [ln for ln in out.splitlines() if ln.startswith('shuangkou_dead_letters_total{source="feed"}')]
    assert line and float(line[0].split()[-1]) == 4.0


def test_exposed_names_cover_dramatiq_middleware():
    names = m.exposed_names()
    assert "dramatiq_message_rejects_total" in names
    assert "dramatiq_message_duration_milliseconds_bucket" in names
    assert "shuangkou_projection_lag_events" in names


def test_a_room_label_read_while_another_thread_seeds_them_is_the_rooms(monkeypatch):
    """A worker's first timers run in several threads: a label read while another thread fills
    the built-in room names was "other" (the labels were marked seeded before they were)."""
    import threading

    monkeypatch.setattr(m, "_room_labels_seeded", False)
    monkeypatch.setattr(m, "_room_labels", set())
    started, release = threading.Event(), threading.Event()
    real = m.builtin_config_names

    def slow() -> list[str]:
        started.set()
        release.wait(5)
        return list(real())

    monkeypatch.setattr(m, "builtin_config_names", slow)
    first = threading.Thread(target=m.room_label, args=("points",))
    first.start()
    assert started.wait(5)
    threading.Timer(0.2, release.set).start()
    assert m.room_label("points") == "points"
    first.join(5)


@pytest.fixture
def fresh_labels(monkeypatch):
    """The module's room labels as in a process that just started (restored afterwards)."""
    monkeypatch.setattr(m, "_room_labels", set())
    monkeypatch.setattr(m, "_room_labels_seeded", False)
    for name, value in (("_room_source", None), ("_room_source_every_s", 30.0), ("_room_source_read", 0.0),
                        ("_room_refresh", None), ("_room_missed", set()), ("_room_held", [])):
        monkeypatch.setattr(m, name, value)


def _label_read_answered() -> None:
    """Wait for the registry read in hand, if any (the label thread)."""
    reading = m._room_refresh
    if reading is not None:
        reading.join(5)


def test_a_worker_runtime_on_redis_labels_by_the_registered_rooms(fresh_labels, fake_redis):
    """The worker's entry module (workers/prometheus.py) has each runtime it builds on Redis
    follow the room registry: a timer of a registered room is labelled by it, not "other"."""
    from types import SimpleNamespace

    import workers.prometheus as entry
    from engine.config import load_config
    from engine.service.rooms import RedisRooms

    RedisRooms(fake_redis).add("custom", load_config("points"))
    rt = SimpleNamespace(store=SimpleNamespace(inner=SimpleNamespace(client=fake_redis)))
    assert entry.follow_rooms(rt) is rt  # type: ignore[arg-type]
    assert m.room_label("custom") == "custom"
    plain = SimpleNamespace(store=object())  # the in-memory store: nothing to read
    assert entry.follow_rooms(plain) is plain  # type: ignore[arg-type]


def test_a_room_another_replica_added_gets_its_own_label(fresh_labels, fake_redis):
    """A room added (AddRoom) on another serve replica, or in a worker, which runs no AddRoom,
    was labelled "other" until a restart: a name not known yet has the registry read again, in
    a thread (not on the command's path), at once the first time it is missed (a room added
    after the process started is labelled by its first matches), then at most every
    ``every_s``; a registry that cannot be read keeps the labels known."""
    from engine.config import load_config
    from engine.service.rooms import RedisRooms

    def label(name: str) -> str:
        """The label after any read the first one started has answered."""
        first = m.room_label(name)
        _label_read_answered()
        return first if first != "other" else m.room_label(name)

    rooms = RedisRooms(fake_redis)
    points = load_config("points")
    rooms.add("early", points)
    m.follow_room_registry(rooms.names, every_s=3600.0)
    assert m.room_label("early") == "early" and label("late") == "other"  # a read, no room yet
    rooms.add("late", points)
    assert label("late") == "other"  # missed before: read at most every every_s
    rooms.add("later", points)
    assert m.room_label("later") == "other"  # this command does not wait for the registry
    assert label("later") == "later"  # a first miss reads at once: it has answered
    m.follow_room_registry(rooms.names, every_s=0.0)  # reads now
    assert m.room_label("late") == "late"

    def down() -> list[str]:
        raise ConnectionError("the registry's master is away")

    m.follow_room_registry(down, every_s=0.0)
    assert label("late") == "late" and label("elsewhere") == "other"


def test_a_new_rooms_first_commands_count_under_its_name(fresh_labels, fake_redis):
    """A room added elsewhere after the process read the registry: its first outcomes (a
    rejection, a match's events, a series' events, a settlement) are held until the read they
    started has answered, then counted under the room's name, none under "other"; a name the
    registry does not know is counted under "other" once it answered."""
    from engine.config import load_config
    from engine.match.events import MatchCreated
    from engine.service.rooms import RedisRooms

    rooms = RedisRooms(fake_redis)
    m.follow_room_registry(rooms.names, every_s=3600.0)
    rooms.add("brand-new", load_config("points"))
    rejected = SimpleNamespace(duplicate=False, rejection=SimpleNamespace(code="not_your_turn"), events=())
    created = SimpleNamespace(duplicate=False, rejection=None, events=[
        MatchCreated(match_id="mn", seq=1, ts=1, command_id="c1", config=load_config("points").to_record())])
    before = {cfg: (val("shuangkou_rejections_total", config=cfg, code="not_your_turn"),
                    val("shuangkou_matches_created_total", config=cfg),
                    val("shuangkou_private_tables_created_total", config=cfg),
                    val("shuangkou_score_transfer_count", config=cfg)) for cfg in ("brand-new", "other")}
    m.observe_outcome(rejected, "brand-new")
    m.observe_outcome(created, "brand-new")
    m.observe_series_events([SimpleNamespace(type="SeriesCreated")], "brand-new")
    m.observe_settlement({"a": 30, "b": -30}, "brand-new")
    _label_read_answered()
    after = {cfg: (val("shuangkou_rejections_total", config=cfg, code="not_your_turn"),
                   val("shuangkou_matches_created_total", config=cfg),
                   val("shuangkou_private_tables_created_total", config=cfg),
                   val("shuangkou_score_transfer_count", config=cfg)) for cfg in ("brand-new", "other")}
    assert [a - b for a, b in zip(after["brand-new"], before["brand-new"])] == [1, 1, 1, 1]
    assert after["other"] == before["other"]
    m.observe_outcome(rejected, "never-registered")
    _label_read_answered()
    assert val("shuangkou_rejections_total", config="other", code="not_your_turn") == before["other"][0] + 1
    assert m._room_held == []


def test_holding_an_observation_never_loses_it_nor_blocks_the_reads(fresh_labels, monkeypatch):
    """Each observation of a name not known yet is made once: under the name when a read
    answered in between (even after the caller looked); under "other" at once when no thread
    can be started (and the next miss reads), when the thread left from before is gone (a
    fork), or when the read under way has hung past ``HOLD_S``."""
    import threading

    made: list[tuple[str, str]] = []

    def obs(tag: str):
        return lambda cfg: made.append((tag, cfg))

    registry: list[str] = []
    release = threading.Event()
    release.set()

    def names() -> list[str]:
        release.wait(5)
        return list(registry)

    m.follow_room_registry(names, every_s=3600.0)
    registry.append("r1")
    m._with_room("r1", obs("first"))  # a first miss: held until its read answered
    _label_read_answered()
    m._with_room("r1", obs("known"))
    assert made == [("first", "r1"), ("known", "r1")]
    m.register_room_labels(["r2"])  # known since the caller looked: not held, not "other"
    assert m._refresh_room_labels("r2", obs("late")) == "known"
    made.clear()

    real_start = threading.Thread.start
    monkeypatch.setattr(threading.Thread, "start", lambda self: (_ for _ in ()).throw(RuntimeError("no thread")))
    m._with_room("r3", obs("no-thread"))
    assert made == [("no-thread", "other")] and m._room_refresh is None and m._room_held == []
    monkeypatch.setattr(threading.Thread, "start", real_start)
    registry.append("r3")
    m._with_room("r3", obs("then"))  # r3 was never counted as read: read now
    _label_read_answered()
    assert made[-1] == ("then", "r3")

    gone = threading.Thread(target=lambda: None)
    gone.start()
    gone.join()
    monkeypatch.setattr(m, "_room_refresh", gone)  # a thread of the parent process, after a fork
    registry.append("r4")
    m._with_room("r4", obs("after-fork"))
    _label_read_answered()
    assert made[-1] == ("after-fork", "r4")

    monkeypatch.setattr(m, "HOLD_S", 0.2)
    release.clear()  # the next read hangs
    registry.append("r5")
    m._with_room("r5", obs("held"))
    assert made[-1] == ("after-fork", "r4")  # held
    import time

    time.sleep(0.3)
    m._with_room("r5", obs("past"))  # the read under way has hung past HOLD_S: not held
    assert made[-1] == ("past", "other")
    release.set()
    _label_read_answered()
    assert made[-1] == ("held", "r5") and m._room_held == [] and m._room_refresh is None
    assert [tag for tag, _cfg in made].count("held") == 1


def test_a_settlement_is_counted_under_its_room_not_its_mode(monkeypatch):
    """serve's ledger projection (``on_settled``): the winner's gain goes under the match's room
    (``quick``, a points room), as every other match metric does, and only when applied now."""
    monkeypatch.setattr(m, "_room_labels", {"points", "wealth", "quick"})
    monkeypatch.setattr(m, "_room_labels_seeded", True)
    settled = SimpleNamespace(scores={"a": 40, "b": -40}, mode="points")
    count = lambda cfg: val("shuangkou_score_transfer_count", config=cfg)  # noqa: E731
    ledger = lambda: val("shuangkou_projection_events_total", projection="ledger")  # noqa: E731
    quick, points, handled = count("quick"), count("points"), ledger()
    m.observe_settled(settled, True, "quick")
    m.observe_settled(settled, False, "quick")  # applied before: handled, not counted again
    assert count("quick") == quick + 1 and count("points") == points
    assert val("shuangkou_score_transfer_sum", config="quick") >= 40
    assert ledger() == handled + 2
