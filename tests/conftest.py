"""Shared fixtures (keep this file generic: other suites add their own fixtures here).

Redis:
- ``fake_redis`` / ``fake_redis_store``: a fresh fakeredis server (with Lua) per test.
- ``redis_server``: a real Redis for the whole session — ``REDIS_URL`` if set,
  else a ``redis-server`` started on a free loopback port (no persistence) and
  stopped at the end.  Without either, tests using it FAIL with a clear message,
  unless ``SK_ALLOW_NO_REDIS=1`` (then they are skipped).  Mark such tests
  ``@pytest.mark.redis``.
- ``real_redis`` / ``real_redis_store``: a client on that server, flushed before each test
  (so a ``REDIS_URL`` must point at a scratch database: FLUSHDB runs on it).
- ``own_real_redis``: a client on a redis-server of one test alone, for a test that changes
  the server for all its clients (CONFIG SET, SCRIPT FLUSH: :data:`SERVER_WIDE`).  On the
  shared server such a test fails (``_shared_redis_left_alone``): CI's two xdist workers share
  one ``REDIS_URL``, and a ``maxmemory`` of 1 there refuses the other worker's writes too.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.gateway_support import DEPLOYMENTS
from tests.timeouts import pytest_timeout_set_timer  # noqa: F401 (a test that hangs shows its tasks)


# -- stores ---------------------------------------------------------------------------------
@pytest.fixture
def memory_store():
    from engine.store.memory import InMemoryEventStore

    return InMemoryEventStore()


@pytest.fixture
def fake_redis():
    import fakeredis

    client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    yield client
    client.close()


@pytest.fixture
def fake_redis_store(fake_redis):
    from engine.store.redis_store import RedisEventStore

    return RedisEventStore(fake_redis)


# -- a real redis-server ---------------------------------------------------------------------
DBS_PER_WORKER = 8


def _worker_index() -> int:
    """0 without pytest-xdist, N for worker ``gwN``: each worker gets its own databases."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else 0


def _with_db(url: str, db: int) -> str:
    base, _, last = url.rpartition("/")
    return f"{base}/{db}" if last.isdigit() else f"{url.rstrip('/')}/{db}"


@dataclass
class RedisServer:
    """A real redis-server.  ``url`` points at this test process's first database;
    ``db_url(k)`` at its k-th (0 <= k < 8), so parallel pytest-xdist workers
    sharing one server (``REDIS_URL``) never flush each other's data."""

    base_url: str
    process: subprocess.Popen | None  # None when REDIS_URL points at an external server
    shared: bool = False  # the session's server (every test of the run; with REDIS_URL, every worker)

    def db_url(self, k: int) -> str:
        if not 0 <= k < DBS_PER_WORKER:
            raise ValueError(f"database {k} out of this worker's range 0..{DBS_PER_WORKER - 1}")
        return _with_db(self.base_url, _worker_index() * DBS_PER_WORKER + k)

    @property
    def url(self) -> str:
        return self.db_url(0)

    def client(self, **kwargs):
        import redis

        return redis.Redis.from_url(self.url, **kwargs)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_redis_server(binary: str = "redis-server", timeout: float = 10.0) -> tuple[subprocess.Popen, str, str]:
    """Start a throw-away redis-server on a free loopback port; returns (process, url, workdir).

    Also used by bench/store.py.  Tries a few ports (another process may grab
    the free port between the probe and the bind).
    """
    import redis

    path = shutil.which(binary)
    if path is None:
        raise FileNotFoundError(f"{binary} not found on PATH")
    last_error = ""
    for _attempt in range(5):
        port = _free_port()
        workdir = tempfile.mkdtemp(prefix="sk-redis-")
        proc = subprocess.Popen(
            [path, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--databases", "64",
             "--dir", workdir, "--daemonize", "no", "--loglevel", "warning"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        url = f"redis://127.0.0.1:{port}/0"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                last_error = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
                break
            try:
                client = redis.Redis.from_url(url, socket_connect_timeout=0.2)
                if client.ping():
                    client.close()
                    return proc, url, workdir
            except redis.ConnectionError:
                time.sleep(0.02)
        else:
            proc.kill()
            last_error = "did not answer PING in time"
        shutil.rmtree(workdir, ignore_errors=True)
    raise RuntimeError(f"could not start {binary}: {last_error}")


def stop_redis_server(proc: subprocess.Popen, workdir: str | None = None) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    if proc.stdout:
        proc.stdout.close()
    if workdir:
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    url = os.environ.get("REDIS_URL")
    if url:
        yield RedisServer(base_url=url, process=None, shared=True)
        return
    yield from _started_redis_server("these tests need a real Redis: set REDIS_URL, or install redis-server "
                                     "(apt-get install redis-server)", shared=True)


def own_redis_server() -> Iterator[RedisServer]:
    """A redis-server of one test module alone, for a module-scoped ``redis_server`` override:
    for tests that change server-wide state (``SCRIPT FLUSH``), which on the shared server
    (``REDIS_URL``, every xdist worker) would pull the scripts from under the others' calls."""
    yield from _started_redis_server("these tests need redis-server (apt-get install redis-server)")


def _started_redis_server(missing: str, shared: bool = False) -> Iterator[RedisServer]:
    """A redis-server started here and stopped after; without one, ``missing`` fails the
    tests (or skips them with ``SK_ALLOW_NO_REDIS=1``)."""
    if shutil.which("redis-server") is None:
        msg = f"{missing}; set SK_ALLOW_NO_REDIS=1 to skip them instead"
        if os.environ.get("SK_ALLOW_NO_REDIS") == "1":
            pytest.skip(msg)
        pytest.fail(msg, pytrace=False)
    proc, url, workdir = start_redis_server()
    try:
        yield RedisServer(base_url=url, process=proc, shared=shared)
    finally:
        stop_redis_server(proc, workdir)


@pytest.fixture
def real_redis(redis_server):
    client = redis_server.client()
    client.flushdb()
    yield client
    client.close()


@pytest.fixture
def own_real_redis():
    """A client on a redis-server started for this test alone (stopped after it)."""
    servers = own_redis_server()
    client = next(servers).client()
    try:
        yield client
    finally:
        client.close()
        servers.close()


#: commands that change a redis-server for every client, whatever its database (``calls`` in
#: INFO commandstats; a refused call is not counted)
SERVER_WIDE = ("config|set", "config|resetstat", "script|flush", "function|flush", "flushall", "client|pause",
               "client|kill", "debug", "shutdown")


def server_wide_calls(server: RedisServer) -> dict[str, int]:
    """How many :data:`SERVER_WIDE` commands ``server`` has run so far, by name."""
    client = server.client()
    try:
        stats = client.info("commandstats")
    finally:
        client.close()
    return {name: int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in SERVER_WIDE}


@pytest.fixture(autouse=True)
def _shared_redis_left_alone(request):
    """A test on the shared ``redis_server`` runs none of :data:`SERVER_WIDE`: it would change
    the server under every other test (with ``REDIS_URL``, the other xdist worker's too).
    Such a test takes ``own_real_redis`` (or overrides ``redis_server`` with ``own_redis_server``)."""
    if "redis_server" not in request.fixturenames:
        yield
        return
    server = request.getfixturevalue("redis_server")
    if not server.shared:
        yield
        return
    before = server_wide_calls(server)
    yield
    after = server_wide_calls(server)
    ran = {name: after[name] - before[name] for name in SERVER_WIDE if after[name] != before[name]}
    if ran:
        pytest.fail(f"server-wide commands ran on the shared redis-server during this test: {ran}; a test that "
                    "changes the server for all its clients takes own_real_redis", pytrace=False)


@pytest.fixture
def real_redis_store(real_redis):
    from engine.store.redis_store import RedisEventStore

    return RedisEventStore(real_redis)


# -- deployments ------------------------------------------------------------------------------
@pytest.fixture(scope="module", params=DEPLOYMENTS)
def deployment(request) -> str:
    """Each deployment docs/OPERATIONS.md offers (tests.gateway_support.DEPLOYMENTS): a test
    whose stack takes this fixture runs once with ``serve --broker-url`` + a dramatiq worker
    and once with ``serve`` alone (timers in-process)."""
    return request.param
