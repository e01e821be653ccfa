"""Issue 11 §5 and the timers' part of §2: timer command ids fit for every valid match id,
a failing deadline never hides the others from the sweeper, and a committed timer
command's update (MatchFinished included) is never swallowed by a failed publish."""

from __future__ import annotations

import random

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.match.commands import TurnTimeout
from engine.match.deadline import Deadline
from engine.match.events import MatchFinished, TurnTimedOut
from engine.store.memory import InMemoryEventStore
from tests.test_workers import Match as _Match
from tests.test_workers import T0, cfg
from workers import runtime as rt_mod
from workers.clock import FakeClock
from workers.embedded import EmbeddedTimers
from workers.sweeper import SweepBackoff, sweep

class Match(_Match):
    """tests.test_workers.Match with short command ids (its own embed the match id)."""

    def cmd(self, cls, **fields):
        self.n += 1
        return self.t.execute(cls(command_id=f"c{self.n}", match_id=self.mid, **fields))


OOM = redis.exceptions.OutOfMemoryError("command not allowed when used memory > 'maxmemory'.")


# ---- timer command ids -------------------------------------------------------------------------

@settings(max_examples=300, deadline=None)
@given(match_id=st.text(min_size=1, max_size=200), version=st.integers(0, 10**12),
       kind=st.sampled_from(["turn", "trustee", "ready"]))
def test_every_valid_match_id_gives_a_valid_timer_command(match_id, version, kind):
    cmd = rt_mod.timer_command(match_id, version, kind)   # pydantic checks the 200-character limit
    assert len(cmd.command_id) <= 200 and cmd.match_id == match_id
    assert cmd.command_id == rt_mod.timer_command_id(match_id, version, kind)


def test_long_ids_stay_distinct_per_version_and_kind():
    mid = "x" * 200
    ids = {rt_mod.timer_command_id(mid, v, k) for v in (1, 2) for k in ("turn", "trustee", "ready")}
    assert len(ids) == 6
    assert rt_mod.timer_command_id("y" * 200, 1, "turn") != rt_mod.timer_command_id(mid, 1, "turn")


@pytest.mark.parametrize("length", [185, 186, 190, 200])
def test_a_long_match_id_times_out_like_any_other(length):
    """From ~186 characters timers never fired (the command id exceeded 200)."""
    clock = FakeClock(T0)
    with EmbeddedTimers(clock=clock, rng=random.Random(3), deal_on_ready=False) as t:
        m = Match(t, cfg(turn_seconds=15), mid="L" * length).start()
        evs = m.new_events(lambda: t.advance(15))
        assert isinstance(evs[0], TurnTimedOut) and len(evs[0].command_id) <= 200
        t.lose_pending_timers()
        d = m.state().deadline()
        done = t.sweep(now_ms=d.at_ms + 10_000)
        assert [r for _, r in done] == ["committed"]


# ---- the sweeper never lets failing deadlines hide the others ----------------------------------

class _Failing:
    """A service that fails (a bug, a corrupt stream) on the matches named ``bad-*``."""

    def __init__(self, service):
        self._service = service
        self.calls: dict[str, int] = {}

    def __getattr__(self, name):
        return getattr(self._service, name)

    def load_state(self, match_id):
        if match_id.startswith("bad-"):
            self.calls[match_id] = self.calls.get(match_id, 0) + 1
            raise ValueError("corrupt stream")
        return self._service.load_state(match_id)

    def execute(self, command):
        if command.match_id.startswith("bad-"):
            raise ValueError("corrupt stream")
        return self._service.execute(command)


def test_200_failing_deadlines_do_not_hide_the_good_one():
    clock = FakeClock(T0)
    with EmbeddedTimers(clock=clock, rng=random.Random(3), deal_on_ready=False) as t:
        m = Match(t, cfg(turn_seconds=15), mid="good").start()
        good = m.state().deadline()
        t.lose_pending_timers()
        for i in range(200):  # overdue before the good one, so they fill the first page
            t.store.append(f"bad-{i:03}", 0, "c", [],
                           Deadline(match_id=f"bad-{i:03}", version=0, at_ms=T0 - 1000 + i, kind="turn"))
        failing = _Failing(t.service)
        t.runtime.service = failing
        from projections import metrics

        before = metrics.SWEEPER_FAILURES.labels("turn")._value.get()
        now = good.at_ms + 10_000
        done = sweep(t.runtime, now_ms=now, limit=200)
        results = {}
        for d, r in done:
            results.setdefault(r, []).append(d.match_id)
        assert results["committed"] == ["good"]
        assert len(results["error"]) == 200
        assert metrics.SWEEPER_FAILURES.labels("turn")._value.get() - before == 200
        assert isinstance(t.store.load("good", after=good.version)[0], TurnTimedOut)
        # the next sweep skips them (back-off) instead of retrying every interval …
        again = sweep(t.runtime, now_ms=now + 10, limit=200)
        bad_again = [r for d, r in again if d.match_id.startswith("bad-")]
        assert bad_again == ["backoff"] * 200
        assert all(n == 1 for n in failing.calls.values())
        # … and tries each again once its back-off has passed
        later = sweep(t.runtime, now_ms=now + 1_000, limit=200)
        assert sum(1 for _, r in later if r == "error") == 200
        assert all(n == 2 for n in failing.calls.values())


def test_a_transient_failure_ends_the_sweep_without_backing_anything_off():
    clock = FakeClock(T0)
    with EmbeddedTimers(clock=clock, rng=random.Random(3), deal_on_ready=False) as t:
        m = Match(t, cfg(turn_seconds=15)).start()
        d = m.state().deadline()
        t.lose_pending_timers()
        real = t.runtime.service

        class Down:
            def __getattr__(self, name):
                return getattr(real, name)

            def execute(self, command):
                raise redis.ConnectionError("store down")

        t.runtime.service = Down()
        with pytest.raises(redis.ConnectionError):
            sweep(t.runtime, now_ms=d.at_ms + 10_000)
        assert len(t.runtime.sweep_backoff) == 0
        t.runtime.service = real
        assert [r for _, r in sweep(t.runtime, now_ms=d.at_ms + 10_000)] == ["committed"]


def test_sweep_backoff_is_bounded():
    b = SweepBackoff(first_ms=10, cap_ms=20, max_entries=3)
    for i in range(10):
        b.failed((f"m{i}", 1, "turn"), 0)
    assert len(b) == 3 and b.skip(("m9", 1, "turn"), 5) and not b.skip(("m0", 1, "turn"), 5)


# ---- fire() never swallows a failed publish ----------------------------------------------------

def _finish_by_timer(t, m):
    """Let the clock run until the match finishes by timeouts and trusteeship."""
    for _ in range(200):
        if m.state().phase == "finished":
            return
        t.advance(15)
    raise AssertionError("the match did not finish")


def test_a_publish_refused_by_oom_is_retried_and_match_finished_reaches_the_players():
    clock = FakeClock(T0)
    published: list[tuple[str, tuple[str, ...]]] = []
    refusals = {"left": 0}

    def publish(command, outcome):
        if refusals["left"]:
            refusals["left"] -= 1
            raise OOM
        published.append((command.command_id, tuple(type(e).__name__ for e in outcome.events)))

    with EmbeddedTimers(clock=clock, rng=random.Random(3), deal_on_ready=False, publish=publish) as t:
        m = Match(t, cfg(turn_seconds=15, trustee_delay_seconds=0.5)).start()
        refusals["left"] = 3  # the next publish is refused three times
        _finish_by_timer(t, m)
        assert refusals["left"] == 0
        assert t.runtime.stats.get("publish_retries") == 3
        assert any("MatchFinished" in kinds for _, kinds in published)
        # every committed timer command was published exactly once
        timer_ids = {e.command_id for e in m.events() if e.command_id.startswith("timer:")}
        assert {cid for cid, _ in published} == timer_ids
        assert len(published) == len(timer_ids)


def test_a_publish_that_keeps_failing_raises_and_the_redelivered_message_publishes_again():
    """The worker's publish fails past its retry budget (or the worker dies after the commit):
    the message is retried by dramatiq; the re-run finds the command stored and publishes
    its events again, MatchFinished included."""
    store = InMemoryEventStore()
    clock = FakeClock(T0)
    sent: list[tuple[str, bool, tuple[str, ...]]] = []
    down = {"on": False}

    def publish(command, outcome):
        if down["on"]:
            raise redis.ConnectionError("connection reset")
        sent.append((command.command_id, outcome.duplicate, tuple(type(e).__name__ for e in outcome.events)))

    with EmbeddedTimers(store, clock=clock, rng=random.Random(3), deal_on_ready=False, publish=publish) as t:
        m = Match(t, cfg(turn_seconds=15, trustee_delay_seconds=0.5)).start()
        t.lose_pending_timers()
        fired = 0
        for _ in range(200):                                  # fire each deadline by hand
            d = m.state().deadline()
            if d is None:
                break
            clock.set(max(d.at_ms, clock.now_ms()))
            before = m.state().version
            down["on"] = True
            old_retry, rt_mod.PUBLISH_RETRY_S = rt_mod.PUBLISH_RETRY_S, 0.01
            try:
                with pytest.raises(redis.ConnectionError):
                    rt_mod.fire("m1", d.version, d.kind, t.runtime)
            finally:
                rt_mod.PUBLISH_RETRY_S = old_retry
                down["on"] = False
            assert m.state().version > before                 # committed although not published
            assert rt_mod.fire("m1", d.version, d.kind, t.runtime) == "duplicate"   # the redelivery
            cid, dup, kinds = sent[-1]
            assert cid == rt_mod.timer_command_id("m1", d.version, d.kind) and dup is True
            assert kinds == tuple(type(e).__name__ for e in m.events(after=before))
            fired += 1
        assert fired > 3 and isinstance(m.events()[-1], MatchFinished)
        assert "MatchFinished" in sent[-1][2]
        assert len(sent) == fired                              # one publish per redelivery, none lost


def test_fire_raises_a_transient_store_error_instead_of_calling_it_stale():
    clock = FakeClock(T0)
    with EmbeddedTimers(clock=clock, rng=random.Random(3), deal_on_ready=False) as t:
        m = Match(t, cfg(turn_seconds=15)).start()
        d = m.state().deadline()
        real = t.runtime.service

        class Loading:
            def __getattr__(self, name):
                return getattr(real, name)

            def cached_version(self, match_id):
                return None

            def load_state(self, match_id):
                raise redis.exceptions.BusyLoadingError("Redis is loading the dataset in memory")

        t.runtime.service = Loading()
        with pytest.raises(redis.exceptions.BusyLoadingError):
            rt_mod.fire("m1", d.version, d.kind, t.runtime)
        t.runtime.service = real
        assert rt_mod.fire("m1", d.version, d.kind, t.runtime) == "committed"
        assert isinstance(TurnTimeout, type)
