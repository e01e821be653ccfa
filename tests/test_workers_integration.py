"""Timer workers for real: a redis-server and a real ``dramatiq workers.actors``
worker process on short timers (turn 1 s, trustee delay 0.1 s).

* a match in which neither player ever acts finishes by itself;
* several matches while the worker is killed with SIGKILL mid-match (twice)
  and a new one started each time: every match still finishes, and its
  stored stream shows no turn lost or doubled (seq contiguous, one
  TurnTimedOut per version at most, :func:`engine.match.replay.check_stream` clean);
* two worker processes: the one holding the dispatcher lease is SIGKILLed and the
  other takes the lease over and goes on firing (workers/dispatcher.py).

No process sends a timer message on commit: the workers' dispatcher reads the
store's deadline index.

The event store and dramatiq use different Redis databases of the test server
(dramatiq must have its own Redis; in production its own server).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from engine.match.commands import CreateMatch, Ready, Sit
from engine.config import load_config
from engine.match.events import MatchFinished, TurnTimedOut
from engine.match.evolve import apply
from engine.match.replay import check_stream
from engine.match.state import MatchState
from workers.clock import SystemClock
from workers.dispatcher import HOLDER_KEY

pytestmark = [pytest.mark.redis, pytest.mark.worker]

ROOT = Path(__file__).resolve().parent.parent
FAST = load_config("points").model_copy(update={"turn_seconds": 1.0, "trustee_delay_seconds": 0.1})
STORE_DB = 4
BROKER_DB = 5


@pytest.fixture
def urls(redis_server):
    import redis

    store_url, broker_url = redis_server.db_url(STORE_DB), redis_server.db_url(BROKER_DB)
    for u in (store_url, broker_url):
        c = redis.Redis.from_url(u)
        c.flushdb()
        c.close()
    return store_url, broker_url


class WorkerProcess:
    """``python -m dramatiq workers.actors -p 1 -t 2`` in its own process group."""

    def __init__(self, store_url: str, broker_url: str, log_path: Path):
        env = dict(os.environ)
        env.update(SK_REDIS_URL=store_url, SK_BROKER_URL=broker_url, SK_SWEEP_GRACE_MS="500",
                   SK_SWEEP_INTERVAL_MS="200", SK_DISPATCH_LEASE_MS="1500", SK_DISPATCHER_LEASE_TTL_MS="1000",
                   PYTHONPATH=str(ROOT) + os.pathsep + env.get("PYTHONPATH", ""))
        self.log = open(log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dramatiq", "workers.actors", "-p", "1", "-t", "2"],
            env=env, cwd=ROOT, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self) -> None:
        """SIGKILL the whole group (the dramatiq parent and its worker child)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        self.log.close()

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        if not self.log.closed:
            self.log.close()


@pytest.fixture
def env(urls, tmp_path):
    from engine.service.service import MatchService
    from engine.store.redis_store import RedisEventStore

    store_url, broker_url = urls
    store = RedisEventStore.from_url(store_url)
    clock = SystemClock()
    service = MatchService(store, clock, random.Random(11))  # no on_commit: nothing sent per commit
    workers: list[WorkerProcess] = []

    def start_worker() -> WorkerProcess:
        w = WorkerProcess(store_url, broker_url, tmp_path / "worker.log")
        workers.append(w)
        return w

    yield store, service, start_worker, tmp_path / "worker.log"
    for w in workers:
        w.stop()


def _start_match(service, mid: str) -> None:
    for n, cmd in enumerate([CreateMatch(command_id="x", match_id=mid, config=FAST.to_record()),
                             Sit(command_id="x", match_id=mid, player="a"),
                             Sit(command_id="x", match_id=mid, player="b"),
                             Ready(command_id="x", match_id=mid, player="a"),
                             Ready(command_id="x", match_id=mid, player="b")]):
        out = service.execute(cmd.model_copy(update={"command_id": f"{mid}-setup-{n}"}))
        assert out.rejection is None, out.rejection
    assert service.load_state(mid).phase == "playing"


def _wait_finished(service, mids, timeout_s: float, log_path: Path) -> None:
    end = time.monotonic() + timeout_s
    left = set(mids)
    while left and time.monotonic() < end:
        left = {m for m in left if service.load_state(m).phase != "finished"}
        time.sleep(0.2)
    if left:
        tail = log_path.read_text(errors="replace")[-4000:] if log_path.exists() else ""
        pytest.fail(f"matches not finished in {timeout_s}s: {sorted(left)}\nworker log tail:\n{tail}")


def _audit(store, mid: str) -> Counter:
    events = store.load(mid)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert check_stream(events) == [], check_stream(events)
    assert isinstance(events[-1], MatchFinished)
    # one command id -> one contiguous run of events (no command applied twice)
    runs: dict[str, list[int]] = {}
    for e in events:
        runs.setdefault(e.command_id, []).append(e.seq)
    for cid, seqs in runs.items():
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), f"{cid} applied twice: {seqs}"
    timeouts = [e for e in events if isinstance(e, TurnTimedOut)]
    assert len({e.command_id for e in timeouts}) == len(timeouts)  # no TurnTimedOut doubled for a version
    per_player: dict[str, list[int]] = {}
    for e in timeouts:
        per_player.setdefault(e.player, []).append(e.count)
    for counts in per_player.values():
        assert counts == list(range(1, len(counts) + 1))  # no timeout lost or counted twice
        assert len(counts) <= FAST.timeouts_before_trustee
    # each turn timeout came no earlier than its deadline (a ClockExtended moves it)
    state = MatchState(match_id=mid)
    for e in events:
        if isinstance(e, TurnTimedOut):
            assert state.deadline_at is not None and e.ts >= state.deadline_at, (state.deadline_at, e)
        state = apply(state, e)
    return Counter(type(e).__name__ for e in events)


def test_idle_match_finishes_by_itself(env):
    store, service, start_worker, log_path = env
    start_worker()
    t0 = time.monotonic()
    _start_match(service, "idle-1")
    _wait_finished(service, ["idle-1"], 40, log_path)
    kinds = _audit(store, "idle-1")
    assert kinds["TurnTimedOut"] == 6 and kinds["TrusteeshipStarted"] == 2
    assert time.monotonic() - t0 < 40


def test_sigkilled_workers_lose_no_turn(env, urls):
    import redis

    store, service, start_worker, log_path = env
    w = start_worker()
    mids = [f"kill-{i}" for i in range(6)]
    for mid in mids:
        _start_match(service, mid)
    for n, pause in enumerate((2.5, 3.0)):
        time.sleep(pause)
        w.kill()
        if n == 1:  # and then every timer message is lost: the broker's Redis is flushed
            redis.Redis.from_url(urls[1]).flushdb()
        time.sleep(0.3)  # deadlines fall due while no worker runs
        w = start_worker()
    _wait_finished(service, mids, 45, log_path)
    for mid in mids:
        _audit(store, mid)
    # Each new worker took the dispatcher lease over once the killed one's had expired;
    # the deadlines in flight with the killed worker (and those whose messages went with
    # the flushed broker) were fired by the sweeper or dispatched again.
    text = log_path.read_text(errors="replace")
    assert text.count("dispatcher lease acquired") >= 3


def _holder_pid(broker_client) -> int | None:
    token = broker_client.get(HOLDER_KEY)
    return None if token is None else int(token.decode().split(":")[1])


def test_the_dispatcher_lease_moves_to_the_survivor_when_its_holder_is_sigkilled(env, urls):
    import redis

    store, service, start_worker, log_path = env
    broker_client = redis.Redis.from_url(urls[1])
    a, b = start_worker(), start_worker()
    mids = [f"lease-{i}" for i in range(4)]
    for mid in mids:
        _start_match(service, mid)
    end = time.monotonic() + 30
    holder = None
    while holder is None and time.monotonic() < end:
        holder = _holder_pid(broker_client)
        time.sleep(0.05)
    assert holder is not None, "no worker took the dispatcher lease"
    by_group = {os.getpgid(holder): None}
    victim = a if a.proc.pid in by_group else b
    survivor = b if victim is a else a
    assert victim.proc.pid in by_group
    time.sleep(2.0)  # mid-match
    victim.kill()
    while time.monotonic() < end:
        now = _holder_pid(broker_client)
        if now is not None and now != holder:
            break
        time.sleep(0.05)
    new_holder = _holder_pid(broker_client)
    assert new_holder is not None and new_holder != holder
    assert os.getpgid(new_holder) == survivor.proc.pid
    _wait_finished(service, mids, 45, log_path)
    for mid in mids:
        _audit(store, mid)
