"""A throw-away Redis Cluster on loopback for tests and bench/cluster.py (issue 24 §8).

``start_cluster(masters=3, replicas=1)`` starts ``masters * (1 + replicas)``
``redis-server --cluster-enabled yes`` processes (no persistence), joins them with
``redis-cli --cluster create`` and waits until every node says ``cluster_state:ok``.
``hosts`` binds each node to its own loopback address (``127.0.0.11`` …: the nemesis harness,
tests/nemesis/, cuts the network between them inside a private network namespace).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

import redis


def free_ports(n: int) -> list[int]:
    """n free ports whose cluster bus ports (+10000) are free too."""
    ports: list[int] = []
    while len(ports) < n:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        if p + 10000 > 65535 or p in ports:
            continue
        try:
            with socket.socket() as s2:
                s2.bind(("127.0.0.1", p + 10000))
        except OSError:
            continue
        ports.append(p)
    return ports


def _wait(predicate, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while True:
        try:
            if predicate():
                return
        except (redis.RedisError, OSError):
            pass
        if time.monotonic() > end:
            raise TimeoutError(f"waited {timeout:.0f}s for {what}")
        time.sleep(0.05)


@dataclass
class LocalCluster:
    """A running loopback cluster: its node ports, processes and work directory."""

    ports: list[int]
    procs: dict[int, subprocess.Popen]
    workdir: str
    node_timeout_ms: int
    killed: set[int] = field(default_factory=set)
    log_dir: str | None = None  # the nodes' logs (start_cluster(log_dir=...)), kept after stop
    hosts: dict[int, str] = field(default_factory=dict)  # port -> the address it is bound to (127.0.0.1)

    def host(self, port: int) -> str:
        return self.hosts.get(port, "127.0.0.1")

    def cluster_log(self, limit: int = 120) -> str:
        """The nodes' log lines about roles, fail-overs and syncs, in time order: what a
        durability failure needs to be explained (empty without ``log_dir``)."""
        if not self.log_dir:
            return ""
        words = ("ailover", "FAIL", "MASTER", "master", "REPLICA", "replica", "sync", "state changed",
                 "epoch", "Configuration change")
        lines = []
        for p in self.ports:
            path = os.path.join(self.log_dir, f"node-{p}.log")
            if not os.path.exists(path):
                continue
            with open(path, errors="replace") as f:
                for line in f:
                    if any(w in line for w in words):
                        parts = line.split(None, 5)  # pid:role day mon year time message
                        at = parts[4] if len(parts) > 5 else ""
                        lines.append((at, f"{p} {line.rstrip()}"))
        lines.sort()
        return "\n".join(x for _at, x in lines[-limit:])

    @property
    def url(self) -> str:
        """A URL naming one (live) node: what ``--redis`` is given."""
        port = next(p for p in self.ports if p not in self.killed)
        return f"redis://{self.host(port)}:{port}/0"

    def node(self, port: int) -> redis.Redis:
        return redis.Redis(host=self.host(port), port=port, socket_timeout=5)

    def masters(self) -> list[int]:
        """Ports of the live masters (as the live nodes see them)."""
        out = set()
        for p in self.ports:
            if p in self.killed:
                continue
            try:
                for addr, info in self.node(p).execute_command("CLUSTER NODES").items():
                    flags = info["flags"]
                    if "master" in flags and "fail" not in flags:
                        out.add(int(addr.split("@")[0].rsplit(":", 1)[1]))
                return sorted(out - self.killed)
            except (redis.RedisError, OSError):
                continue
        return []

    def master_of(self, key: str) -> int:
        slot = int(self.node(self.live()[0]).execute_command("CLUSTER KEYSLOT", key))
        for p in self.live():
            try:
                for start, end, master, *_ in self.node(p).execute_command("CLUSTER SLOTS"):
                    if start <= slot <= end:
                        return int(master[1])
            except (redis.RedisError, OSError):
                continue
        raise LookupError(key)

    def online_replicas(self, master: int) -> list[int]:
        """Ports of ``master``'s replicas that finished their sync (``state=online``): a replica
        still waiting for its RDB is connected, yet acknowledges nothing (WAIT) and holds nothing."""
        info = self.node(master).info("replication")
        return [int(v["port"]) for k, v in info.items()
                if k.startswith("slave") and isinstance(v, dict) and v.get("state") == "online"]

    def live(self) -> list[int]:
        return [p for p in self.ports if p not in self.killed]

    def restart(self, *ports: int) -> None:
        """Start killed nodes again, all at once (empty, their nodes.conf kept): each rejoins as a replica."""
        for port in ports:
            self.procs[port] = _spawn_node(port, self.workdir, self.node_timeout_ms, self.log_dir, self.host(port))
        for port in ports:
            _wait(lambda port=port: self.node(port).ping(), 10, f"redis-server on {port}")
            self.killed.discard(port)

    def kill(self, port: int) -> None:
        """SIGKILL one node."""
        self.procs[port].send_signal(signal.SIGKILL)
        self.procs[port].wait(timeout=10)
        self.killed.add(port)

    def pause(self, port: int) -> None:
        """SIGSTOP one node (:meth:`resume` lets it run on)."""
        self.procs[port].send_signal(signal.SIGSTOP)

    def resume(self, port: int) -> None:
        self.procs[port].send_signal(signal.SIGCONT)

    def wait_ok(self, timeout: float = 30.0) -> None:
        """Until every live node reports ``cluster_state:ok`` (after a fail-over: a replica promoted)."""
        def ok() -> bool:
            return all(self.node(p).cluster("info").get("cluster_state") == "ok" for p in self.live())

        _wait(ok, timeout, "cluster_state:ok")

    def stop(self) -> None:
        for p, proc in self.procs.items():
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _spawn_node(port: int, workdir: str, node_timeout_ms: int, log_dir: str | None = None,
                host: str = "127.0.0.1") -> subprocess.Popen:
    """One node; with ``log_dir`` its log goes to ``log_dir/node-<port>.log`` (appended: a restart adds to it).

    Each node has its own RDB file name in the shared ``workdir``: a replica's full sync
    saves the received RDB to ``--dbfilename`` and loads it from there, so replicas sharing
    one ``dump.rdb`` and syncing at once loaded *each other's* masters' data (the fail-over
    test then found the head of a stream missing on the promoted replica).  A master starts
    a replica's sync at once (no 5 s diskless delay: nothing is gained by waiting here)."""
    log = ["--logfile", os.path.join(os.path.abspath(log_dir), f"node-{port}.log")] if log_dir else []
    # a node on its own address speaks from it to the others (the bus, replication), and says it
    # is there: else its connections come from 127.0.0.1 and nobody learns where it is; protected
    # mode would refuse its peers (it trusts 127.0.0.1 alone)
    own = (["--bind-source-addr", host, "--cluster-announce-ip", host, "--protected-mode", "no"]
           if host != "127.0.0.1" else [])
    if log_dir:
        os.makedirs(log_dir, exist_ok=True)
    return subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", host, "--cluster-enabled", "yes",
         "--cluster-config-file", f"nodes-{port}.conf", "--cluster-node-timeout", str(node_timeout_ms),
         "--save", "", "--appendonly", "no", "--dir", workdir, "--dbfilename", f"dump-{port}.rdb",
         "--repl-diskless-sync-delay", "0",
         # a master lost (until its replica is promoted) stops its own slots, not the others'
         # (docs/OPERATIONS.md: the recommended setting)
         "--cluster-require-full-coverage", "no", *own, *log],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=workdir)


def require_redis_binaries() -> None:
    """Fail the calling test unless redis-server and redis-cli are on the PATH; skip it instead
    only where ``SK_ALLOW_NO_REDIS=1`` says so (a developer's machine, never CI)."""
    import pytest

    if shutil.which("redis-server") is not None and shutil.which("redis-cli") is not None:
        return
    msg = ("the cluster test needs redis-server and redis-cli (apt-get install redis-server); "
           "set SK_ALLOW_NO_REDIS=1 to skip it instead")
    if os.environ.get("SK_ALLOW_NO_REDIS") != "1":
        pytest.fail(msg, pytrace=False)
    pytest.skip(msg)


def start_cluster(masters: int = 3, replicas: int = 1, node_timeout_ms: int = 2000,
                  log_dir: str | None = None, hosts: list[str] | None = None) -> LocalCluster:
    """Start and join a cluster (three attempts: a port taken meanwhile is retried); with
    ``log_dir`` (or ``SK_TEST_CLUSTER_LOGS``) each node logs to ``node-<port>.log`` there; with
    ``hosts`` (one address per node) node ``i`` is bound to ``hosts[i]``, else all to 127.0.0.1."""
    log_dir = log_dir or os.environ.get("SK_TEST_CLUSTER_LOGS") or None
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        raise FileNotFoundError("a Redis Cluster needs redis-server and redis-cli (apt-get install redis-server)")
    for attempt in range(3):
        workdir = tempfile.mkdtemp(prefix="sk-cluster-")
        ports = free_ports(masters * (1 + replicas))
        if hosts is not None and len(hosts) != len(ports):
            raise ValueError(f"{len(ports)} nodes, {len(hosts)} hosts")
        at = dict(zip(ports, hosts)) if hosts is not None else {}
        procs: dict[int, subprocess.Popen] = {}
        try:
            for p in ports:
                procs[p] = _spawn_node(p, workdir, node_timeout_ms, log_dir, at.get(p, "127.0.0.1"))
            for p in ports:
                _wait(lambda p=p: redis.Redis(host=at.get(p, "127.0.0.1"), port=p).ping(), 10, f"redis-server on {p}")
            out = subprocess.run(["redis-cli", "--cluster", "create",
                                  *[f"{at.get(p, '127.0.0.1')}:{p}" for p in ports],
                                  "--cluster-replicas", str(replicas), "--cluster-yes"],
                                 capture_output=True, text=True, timeout=60)
            if out.returncode != 0:
                raise RuntimeError(out.stdout + out.stderr)
            cluster = LocalCluster(ports, procs, workdir, node_timeout_ms, log_dir=log_dir, hosts=at)
            cluster.wait_ok()
            if replicas:  # every master has its replicas synced (a fail-over needs them)
                _wait(lambda: all(len(cluster.online_replicas(p)) >= replicas for p in cluster.masters()),
                      30, "replicas in sync")
            return cluster
        except BaseException as exc:  # nothing is left running, whatever went wrong
            for proc in procs.values():
                proc.kill()
                proc.wait()
            shutil.rmtree(workdir, ignore_errors=True)
            if attempt == 2 or not isinstance(exc, (OSError, redis.RedisError, RuntimeError, TimeoutError)):
                raise
    raise AssertionError("unreachable")


def env_without_redis() -> dict[str, str]:
    """The environment for a child process, without the suite's REDIS_URL/SK_REDIS_URL."""
    env = dict(os.environ)
    for k in ("REDIS_URL", "SK_REDIS_URL"):
        env.pop(k, None)
    return env
