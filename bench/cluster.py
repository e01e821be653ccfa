"""Scale-out benchmark (issue 24 §6): the whole stack on a Redis Cluster on loopback against the
same load on one plain redis-server, in the same run.

    python bench/cluster.py [--masters 3] [--replicas 1] [--serve 3] [--matches 40] [-c 8]
                            [--ws-pairs 2] [--replica-acks 0] [--runs 3] [--idle-s 3] [--json]

Each run starts its own cluster (``redis-server --cluster-enabled yes``, ``redis-cli --cluster
create``), a broker redis-server, ``--serve`` serve replicas (one ``--metrics-port`` each), one
dramatiq worker and one gateway; then the load: ``shuangkou simulate --external`` clients (through
the bucket inboxes) and ``--ws-pairs`` pairs of WebSocket clients through the gateway (Join, Ready,
the trustee plays). The same is done on one plain redis-server (``single_node_cps``).

Measured per run, printed as medians over the runs (JSON keys):

* ``cps``: commands per second (the simulate clients' commands, each answered, over the
  load's wall time); ``single_node_cps`` the same on one node;
* ``busiest_master_share``: the largest master's fraction of all commands Redis ran
  (``INFO commandstats`` calls, before and after the load);
* ``append_conflicts``: ``shuangkou_append_conflicts_total`` summed over the serve replicas;
* ``state_cache_hit_ratio``: hits / (hits + misses) of ``shuangkou_state_cache_requests_total``;
* ``cpu_us_per_command``: CPU µs per command of each process kind (``serve``, ``redis``: every
  cluster node, ``gateway``, ``workers``), from /proc before and after the load;
  ``single_node_cpu_us_per_command`` (``serve``, ``redis``): the same run's single-node leg's;
  ``redis_masters``: the masters' share of ``redis`` (the rest is the replicas applying the
  writes);
* ``cpu_ratio_to_single_node`` (``serve``, ``redis``): each run's Cluster figure ÷ its own
  single-node leg's, the median over the runs (the ratio of two legs a minute apart, less
  moved by the machine's drift than the ratio of the two medians); ``cpu_ratio_per_run``
  the runs' own;
* ``redis_commands_per_command``: of each command name (``INFO commandstats`` of every master,
  a script's own calls included), the calls per simulate command over the load;
  ``single_node_redis_commands_per_command`` the same on one node;
* ``masters_usec_per_command`` / ``replicas_usec_per_command``: of each command name, the
  µs the masters (the replicas) spent running it (``INFO commandstats`` ``usec``, wall time
  inside the command: a script's calls count in the script and again under their own names,
  and the time between commands, the event loop's reads and writes, is in none of them) per
  simulate command over the load, names under 0.5 µs left out; ``single_node_usec_per_command``
  the same on one node;
* ``masters_reads_per_command`` / ``masters_writes_per_command``: the masters' socket reads
  and writes (``INFO stats`` ``total_reads_processed`` / ``total_writes_processed``: each read
  an event-loop wake-up for one client, whatever it carried; the writes include the replication
  stream and the notices) per simulate command over the load; ``single_node_reads_per_command``
  / ``single_node_writes_per_command`` the same on one node;
* ``idle_cpu_per_s``: CPU ms per second of each process kind (``serve``, ``worker``,
  ``gateway``, ``redis``) with the stack up and idle, over ``--idle-s`` seconds (default 3)
  before the load, after as long a settling (leases, polls, sweeps: what a replica costs
  whatever the load); ``single_node_idle_cpu_per_s`` the same on one node;
* ``p50_ms``/``p99_ms`` of the simulate clients' command round trips, ``bytes_per_match``
  (used memory of the masters over the matches), ``gateway_rss_kb``;
* ``slot_shares`` (once per invocation, an extra run of the same load on one plain
  redis-server watched by ``MONITOR``, so the watching costs none of the figures above): of
  every command Redis ran (a script's own calls included), the fraction on the ledger's slot
  (``{ledger}``), the lobby's (``{lobby}``), the operator channel's (``sk:ops``) and the
  busiest bucket's (``{b<N>}``); ``per_match``: the commands a match adds to the ledger's and
  the lobby's slot over their idle rate (``lobby`` over the WebSocket matches only: the simulate
  clients do not go through the lobby); ``idle_per_s``: the stack's idle commands a second.
  ``--no-slot-shares`` skips it.
* ``lobby_commands_per_match`` (from that watched run): the Redis commands on the lobby's keys
  -- the live lobby's ``sk:{lobby}:*`` and the stored tables and queues
  (``sk:{bN}:t:*``, ``sk:{bN}:tables``, ``sk:{bN}:lobby:*``, ``sk:{r:<room>}:*``), a
  script's own calls included -- over their idle rate, ÷ the WebSocket matches finished
  (:func:`is_lobby_command`).

The machine's other load changes the figures: compare ``cps`` with ``single_node_cps`` of the
same run, not across machines.  The processes' logs go to a ``sk-bench-cluster-*`` folder under
the temporary directory, removed after a run that ends well and kept (its path on stderr)
after one that fails.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.cluster_support import start_cluster  # noqa: E402
from tests.conftest import start_redis_server, stop_redis_server  # noqa: E402
from tests.gateway_support import Client, Stack, kind, lobby, ready_and_play, start_stack  # noqa: E402
from tests.processes import wait_for  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
IDLE_S = 5.0  # the watched run's idle window (after a settling one as long), before the load


def cpu_s(pid: int) -> float:
    """utime + stime of a process and its waited-for children, in seconds (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(x) for x in fields[11:15]) / TICKS


def group_cpu_s(pgid: int) -> float:
    """CPU seconds of every live process of a process group (a dramatiq worker and its children)."""
    total = 0.0
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if os.getpgid(int(d.name)) == pgid:
                total += cpu_s(int(d.name))
        except OSError:
            continue
    return total


def commandstats(client: Any) -> dict[str, tuple[int, int]]:
    """One node's ``INFO commandstats``: ``cmdstat_<name>`` -> (calls, µs) so far."""
    return {k: (int(v.get("calls", 0)), int(v.get("usec", 0))) for k, v in client.info("commandstats").items()}


def per_name(stats: list[dict[str, tuple[int, int]]], field: int) -> dict[str, int]:
    """One field of the nodes' :func:`commandstats` (0: calls, 1: µs) by command name, summed
    over the nodes."""
    out: dict[str, int] = {}
    for node in stats:
        for k, pair in node.items():
            name = k.removeprefix("cmdstat_")
            out[name] = out.get(name, 0) + pair[field]
    return out


def usec_per_command(before: dict[str, int], after: dict[str, int], commands: int) -> dict[str, float]:
    """``after - before`` per command, the names under 0.5 µs left out, the largest first."""
    per = {k: (v - before.get(k, 0)) / max(1, commands) for k, v in after.items()}
    return {k: round(v, 1) for k, v in sorted(per.items(), key=lambda kv: -kv[1]) if v >= 0.5}


_SLOT = re.compile(r'"(sk:(?:\{([^}]+)\}|[^"{]+))')


def io_counts(client: Any) -> tuple[int, int]:
    """The node's socket reads and writes so far (its event loop's wake-ups, INFO stats)."""
    stats = client.info("stats")
    return int(stats["total_reads_processed"]), int(stats["total_writes_processed"])


def slot_of(command: str) -> str | None:
    """The slot a ``MONITOR`` line's command works on, by the first ``sk:`` key it names: the
    hash tag (``{ledger}``) or, without one, the key itself (``sk:ops``); None without a key.

    >>> slot_of('1.0 [0 127.0.0.1:5] "EVALSHA" "ab" "1" "sk:{lobby}:seq" "join"')
    '{lobby}'
    >>> slot_of('1.0 [0 lua] "XADD" "sk:ops" "*" "c" "x"'), slot_of('1.0 [0 127.0.0.1:5] "PING"')
    ('sk:ops', None)
    """
    m = _SLOT.search(command)
    if m is None:
        return None
    return "{" + m.group(2) + "}" if m.group(2) is not None else m.group(1)


_LOBBY_KEY = re.compile(r'"sk:(?:\{lobby\}|\{b\d+\}:(?:t:|tables"|lobby[:"])|\{r:|place:)')
#: the pseudo-slot :class:`SlotCounter` counts the lobby's commands under, whatever their slot
LOBBY_KEYS = "lobby-keys"


def is_lobby_command(command: str) -> bool:
    """Whether a ``MONITOR`` line's command names a key of the lobby (the live ``{lobby}`` keys,
    or a table's or a room queue's stored keys).

    >>> is_lobby_command('1.0 [0 lua] "XADD" "sk:{b3}:t:t9:events" "1-1" "e" "x"')
    True
    >>> is_lobby_command('1.0 [0 lua] "XADD" "sk:{r:points}:feed" "*"'), is_lobby_command('1 "GET" "sk:{b3}:m:t9-1:snap"')
    (True, False)
    """
    return _LOBBY_KEY.search(command) is not None


class SlotCounter:
    """Counts the commands of one node by slot (:func:`slot_of`), from ``MONITOR``, in a thread."""

    def __init__(self, url: str):
        import socket
        import threading

        host, port = url.split("//")[1].split("/")[0].split(":")
        self.sock = socket.create_connection((host, int(port)))
        self.sock.sendall(b"MONITOR\r\n")
        self.counts: dict[str, int] = {}
        self.total = 0
        self._base: tuple[dict[str, int], int, float] = ({}, 0, time.perf_counter())
        self._stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        buf = b""
        self.sock.settimeout(0.5)
        while not self._stop:
            try:
                chunk = self.sock.recv(1 << 20)
            except TimeoutError:
                continue
            except OSError:
                return
            if not chunk:
                return
            buf += chunk
            *lines, buf = buf.split(b"\r\n")
            for line in lines:
                if not line.startswith(b"+") or line == b"+OK":
                    continue
                self.total += 1
                text = line.decode("utf-8", "replace")
                slot = slot_of(text)
                if slot is not None:
                    self.counts[slot] = self.counts.get(slot, 0) + 1
                if is_lobby_command(text):
                    self.counts[LOBBY_KEYS] = self.counts.get(LOBBY_KEYS, 0) + 1

    def snapshot(self) -> tuple[dict[str, int], int, float]:
        """(counts by slot, all commands, seconds) since the last snapshot (or the start)."""
        now = time.perf_counter()
        counts, total = dict(self.counts), self.total
        out = ({k: v - self._base[0].get(k, 0) for k, v in counts.items()}, total - self._base[1], now - self._base[2])
        self._base = (counts, total, now)
        return out

    def stop(self) -> None:
        self._stop = True
        self.thread.join(timeout=5)
        self.sock.close()


def slot_shares(idle: tuple[dict[str, int], int, float], load: tuple[dict[str, int], int, float],
                matches: int, ws_matches: int) -> dict[str, Any]:
    """The slots' shares of the load window, and what a match adds to the ledger's and the
    lobby's slot over their idle rate (the polls and sweeps that run whatever the load).

    ``idle`` and ``load`` are (counts by slot, all commands, seconds) of the two windows."""
    (ic, _it, isec), (lc, lt, lsec) = idle, load
    total = max(1, lt)
    buckets = {k: v for k, v in lc.items() if re.fullmatch(r"\{b\d+\}", k)}
    busiest = max(buckets.values(), default=0)

    def per_match(slot: str, n: int) -> float:
        added = lc.get(slot, 0) - ic.get(slot, 0) * lsec / max(1e-9, isec)
        return round(max(0.0, added) / max(1, n), 1)

    return {
        "commands": lt, "seconds": round(lsec, 1),
        "ledger": round(lc.get("{ledger}", 0) / total, 4), "lobby": round(lc.get("{lobby}", 0) / total, 4),
        "ops": round(lc.get("sk:ops", 0) / total, 4), "busiest_bucket": round(busiest / total, 4),
        "per_match": {"ledger": per_match("{ledger}", matches + ws_matches),
                      "lobby": per_match("{lobby}", ws_matches), "lobby_keys": per_match(LOBBY_KEYS, ws_matches)},
        "idle_per_s": {"all": round(_it / max(1e-9, isec)), "lobby": round(ic.get("{lobby}", 0) / max(1e-9, isec)),
                       "buckets": round(sum(v for k, v in ic.items() if k.startswith("{b")) / max(1e-9, isec))},
    }


def scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = out.get(name, 0.0) + float(value)
    return out


def _serve(stack: Stack, name: str, acks: int | None, prefix: tuple[str, ...] = ()) -> int:
    """Start a serve replica with /metrics on a free port; returns the port.  ``acks`` None:
    serve's own default (no ``--replica-acks``); ``prefix`` runs it under a wrapper (the nemesis
    harness: ``setpriv`` to another uid, whose packets nftables can drop)."""
    flag = [] if acks is None else ["--replica-acks", str(acks)]
    proc, out, err = stack._spawn(name, [*prefix, sys.executable, "-m", "shuangkou", "serve", "--redis",
                                         stack.store_url, "--broker-url", stack.broker_url, "--consumer", name,
                                         "--metrics-port", "0", "--metrics-addr", "127.0.0.1", *flag])

    def port() -> int | None:
        assert proc.poll() is None, err.read_text()[-2000:]
        for line in out.read_text(errors="replace").splitlines():
            if line.startswith("metrics-port "):
                return int(line.split()[1])
        return None

    return wait_for(port, 60, f"{name} did not report its metrics port", tuple(stack.logs))


async def ws_pairs(url: str, stack: Stack, pairs: int, tag: str) -> None:
    async def pair(k: int) -> None:
        ca = await Client.connect(url, stack.token(f"{tag}a{k}"), f"{tag}a{k}")
        cb = await Client.connect(url, stack.token(f"{tag}b{k}"), f"{tag}b{k}")
        for c in (ca, cb):
            await c.expect(kind("welcome"))
            await c.send({"type": "Join", "room": "bench"})
        # the lobby pairs whoever waits: the two of a pair may sit at different tables
        sa = await ca.expect(lobby("seated"), what="seated")
        sb = await cb.expect(lobby("seated"), what="seated")
        await asyncio.gather(ready_and_play(ca, sa["match"]), ready_and_play(cb, sb["match"]))
        await ca.close()
        await cb.close()

    await asyncio.gather(*(pair(k) for k in range(pairs)))


def one(store_url: str, nodes: list[Any], masters: list[Any], broker_url: str, args: argparse.Namespace,
        tmp: Path, tag: str, watch: bool = False, master_pids: list[int] | None = None,
        replicas: Sequence[Any] = ()) -> dict[str, Any]:
    """The stack on ``store_url``, the load, the figures; with ``watch``, only the slot shares
    (``MONITOR`` on ``store_url``, a single node, during the load).  ``replicas``: clients of
    the replica nodes (their commands' time)."""
    # every process of the run waits for the same replicas (the default would be 1 on a
    # Cluster whose masters have replicas, 0 on the single-node baseline: issue 35 §3)
    os.environ["SK_REPLICA_ACKS"] = str(args.replica_acks)
    stack = start_stack(store_url, broker_url, tmp, {"bench": {"trustee_delay_seconds": 0.0}})
    try:
        stack.procs[0].terminate()  # start_stack's own serve: replaced by ours (with metrics)
        stack.procs[0].wait(timeout=30)
        ports = [_serve(stack, f"{tag}-s{i}", args.replica_acks) for i in range(args.serve)]
        serves = [p for p in stack.procs if p.args[3:4] == ["serve"] and p.poll() is None]
        worker = next(p for p in stack.procs if "dramatiq" in p.args)
        gw = stack.start_gateway("bench")
        wait_for(lambda: sum(scrape(p).get("shuangkou_buckets_owned", 0) for p in ports) == 16, 60,
                 "the replicas own the 16 buckets", tuple(stack.logs))
        idle_cpu = None
        if not watch and args.idle_s > 0:  # the stack idle: its leases, polls and sweeps
            def cpu_now() -> dict[str, float]:
                return {"serve": sum(cpu_s(p.pid) for p in serves), "worker": group_cpu_s(worker.pid),
                        "gateway": cpu_s(gw.proc.pid), "redis": sum(cpu_s(n) for n in nodes)}

            time.sleep(args.idle_s)  # settling: the buckets just taken, the first sweeps
            idle0, i0 = cpu_now(), time.perf_counter()
            time.sleep(args.idle_s)
            idle1, i1 = cpu_now(), time.perf_counter()
            idle_cpu = {k: (idle1[k] - idle0[k]) * 1000 / (i1 - i0) for k in idle0}
        before_stats = [commandstats(m) for m in masters]
        before_replicas = [commandstats(r) for r in replicas]
        before_mem = sum(int(m.info("memory")["used_memory"]) for m in masters)
        before_io = [io_counts(m) for m in masters]
        cpu0 = {"serve": sum(cpu_s(p.pid) for p in serves), "gateway": cpu_s(gw.proc.pid),
                "workers": group_cpu_s(worker.pid), "redis": sum(cpu_s(n) for n in nodes),
                "redis_masters": sum(cpu_s(n) for n in (nodes if master_pids is None else master_pids))}
        counter = SlotCounter(store_url) if watch else None
        if counter is not None:
            time.sleep(IDLE_S)
            counter.snapshot()
            time.sleep(IDLE_S)
            idle = counter.snapshot()  # the stack idle: its polls, leases and sweeps
        t0 = time.perf_counter()
        sim = subprocess.Popen([sys.executable, "-m", "shuangkou", "simulate", "--external", "--redis", store_url,
                                "-n", str(args.matches), "-c", str(args.concurrency), "--json", "--no-progress",
                                "--prefix", f"{tag}-", "--seed", "1"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=stack.env(), text=True)
        import threading

        ws = threading.Thread(target=lambda: asyncio.run(ws_pairs(gw.url, stack, args.ws_pairs, f"{tag}w")),
                              daemon=True)
        if args.ws_pairs:
            ws.start()
        sim_out, sim_err = sim.communicate(timeout=1800)
        elapsed = time.perf_counter() - t0  # the window: the simulate clients' run (the sockets beside it)
        if sim.returncode != 0:
            raise RuntimeError(f"simulate failed: {sim_err[-2000:]}")
        report = json.loads(sim_out)
        # the commands the simulate clients sent (the inboxes are trimmed while they run: their
        # lengths undercount); the few of the sockets beside them are not counted
        cmds = int(report["commands"])
        afters = [commandstats(m) for m in masters]
        after_replicas = [commandstats(r) for r in replicas]
        calls = [sum(n for n, _u in a.values()) - sum(n for n, _u in b.values()) for a, b in zip(afters, before_stats)]
        busiest = max(range(len(masters)), key=lambda i: calls[i])
        calls_before = per_name(before_stats, 0)
        by_command = {k: n - calls_before.get(k, 0) for k, n in per_name(afters, 0).items()}
        after = afters[busiest]
        io = [sum(io_counts(m)[i] - b[i] for m, b in zip(masters, before_io)) for i in range(2)]
        top = sorted(((after[k][0] - before_stats[busiest].get(k, (0, 0))[0], k) for k in after), reverse=True)[:6]
        cpu1 = {"serve": sum(cpu_s(p.pid) for p in serves), "gateway": cpu_s(gw.proc.pid),
                "workers": group_cpu_s(worker.pid), "redis": sum(cpu_s(n) for n in nodes),
                "redis_masters": sum(cpu_s(n) for n in (nodes if master_pids is None else master_pids))}
        if args.ws_pairs:
            ws.join(timeout=600)
        if counter is not None:
            time.sleep(2.0)  # the last settlements and lobby steps of the sockets' matches
            load = counter.snapshot()
            counter.stop()
            return slot_shares(idle, load, int(report["finished"]), args.ws_pairs)
        metrics = [scrape(p) for p in ports]
        conflicts = sum(m.get("shuangkou_append_conflicts_total", 0) for m in metrics)
        hits = sum(v for m in metrics for k, v in m.items() if k.startswith("shuangkou_state_cache_requests_total")
                   and 'result="hit"' in k)
        misses = sum(v for m in metrics for k, v in m.items() if k.startswith("shuangkou_state_cache_requests_total")
                     and 'result="miss"' in k)
        matches = report["finished"]
        mem = sum(int(m.info("memory")["used_memory"]) for m in masters) - before_mem
        rss = int(next((ln.split()[1] for ln in Path(f"/proc/{gw.proc.pid}/status").read_text().splitlines()
                        if ln.startswith("VmRSS")), "0"))
        return {
            "cps": cmds / elapsed,
            "busiest_master_share": max(calls) / max(1, sum(calls)),
            "append_conflicts": int(conflicts),
            "state_cache_hit_ratio": hits / max(1.0, hits + misses),
            "cpu_us_per_command": {k: (cpu1[k] - cpu0[k]) * 1e6 / max(1, cmds) for k in cpu0},
            "idle_cpu_per_s": idle_cpu or {},
            "p50_ms": report["command_latency_ms"]["p50"], "p99_ms": report["command_latency_ms"]["p99"],
            "bytes_per_match": mem / max(1, matches), "gateway_rss_kb": rss, "commands": cmds,
            "busiest_master_top": {k: n for n, k in top},
            "redis_commands_per_command": {k: round(v / max(1, cmds), 3)
                                           for k, v in sorted(by_command.items(), key=lambda kv: -kv[1]) if v},
            "masters_usec_per_command": usec_per_command(per_name(before_stats, 1), per_name(afters, 1), cmds),
            "replicas_usec_per_command": usec_per_command(per_name(before_replicas, 1), per_name(after_replicas, 1),
                                                          cmds),
            "masters_reads_per_command": round(io[0] / max(1, cmds), 2),
            "masters_writes_per_command": round(io[1] / max(1, cmds), 2),
            "seconds": elapsed, "errors": report.get("errors", 0) + report.get("mismatches", 0),
        }
    finally:
        stack.stop()


def run_once(args: argparse.Namespace, k: int, tmp: Path) -> dict[str, Any]:
    import redis

    broker_proc, broker_url, broker_dir = start_redis_server()
    try:
        cluster = start_cluster(masters=args.masters, replicas=args.replicas)
        try:
            master_ports = cluster.masters()
            masters = [redis.Redis(port=p) for p in master_ports]
            replicas = [redis.Redis(port=p) for p in cluster.ports if p not in master_ports]
            nodes = [cluster.procs[p].pid for p in cluster.ports]
            master_pids = [cluster.procs[p].pid for p in master_ports]
            (tmp / f"c{k}").mkdir()
            on_cluster = one(cluster.url, nodes, masters, broker_url, args, tmp / f"c{k}", f"bc{k}",
                             master_pids=master_pids, replicas=replicas)
        finally:
            cluster.stop()
        single_proc, single_url, single_dir = start_redis_server()
        try:
            r = redis.Redis.from_url(single_url)
            (tmp / f"s{k}").mkdir()
            # one node has no replica to wait for: the baseline runs with --replica-acks 0
            single = one(single_url, [single_proc.pid], [r], broker_url.rsplit("/", 1)[0] + "/1",
                         argparse.Namespace(**{**vars(args), "replica_acks": 0}), tmp / f"s{k}", f"bs{k}")
        finally:
            stop_redis_server(single_proc, single_dir)
    finally:
        stop_redis_server(broker_proc, broker_dir)
    on_cluster["single_node_cps"] = single["cps"]
    on_cluster["single_node_p50_ms"] = single["p50_ms"]
    on_cluster["single_node_cpu_us_per_command"] = {k: single["cpu_us_per_command"][k] for k in ("serve", "redis")}
    on_cluster["cpu_ratio_to_single_node"] = {
        k: round(on_cluster["cpu_us_per_command"][k] / single["cpu_us_per_command"][k], 3)
        if single["cpu_us_per_command"][k] else 0.0 for k in ("serve", "redis")}
    on_cluster["single_node_idle_cpu_per_s"] = single["idle_cpu_per_s"]
    on_cluster["single_node_redis_commands_per_command"] = single["redis_commands_per_command"]
    on_cluster["single_node_reads_per_command"] = single["masters_reads_per_command"]
    on_cluster["single_node_writes_per_command"] = single["masters_writes_per_command"]
    on_cluster["single_node_usec_per_command"] = single["masters_usec_per_command"]
    return on_cluster


def watched_run(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """The load once more on one plain redis-server under ``MONITOR``: the slots' shares."""
    import redis

    broker_proc, broker_url, broker_dir = start_redis_server()
    node_proc, node_url, node_dir = start_redis_server()
    try:
        (tmp / "w").mkdir()
        return one(node_url, [node_proc.pid], [redis.Redis.from_url(node_url)], broker_url,
                   argparse.Namespace(**{**vars(args), "replica_acks": 0}), tmp / "w", "bw", watch=True)
    finally:
        stop_redis_server(node_proc, node_dir)
        stop_redis_server(broker_proc, broker_dir)


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in runs[0].items():
        if isinstance(value, dict):
            digits = 3 if key.endswith("ratio_to_single_node") else 1
            out[key] = {k: round(statistics.median(r[key].get(k, 0) for r in runs), digits) for k in value}
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            m = statistics.median(r[key] for r in runs)
            out[key] = round(m, 4) if isinstance(m, float) else m
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--masters", type=int, default=3)
    ap.add_argument("--replicas", type=int, default=1, help="replicas per master")
    ap.add_argument("--serve", type=int, default=3, help="serve replicas")
    ap.add_argument("--matches", type=int, default=40, help="simulate matches per run")
    ap.add_argument("-c", "--concurrency", type=int, default=8, help="simulate clients")
    ap.add_argument("--ws-pairs", type=int, default=2, help="pairs of WebSocket players through the gateway")
    ap.add_argument("--replica-acks", type=int, default=0,
                    help="serve --replica-acks, and SK_REPLICA_ACKS for the workers and the gateway")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--idle-s", type=float, default=3.0,
                    help="seconds of idle CPU measured before the load (after as long a settling; 0: none)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-slot-shares", dest="slot_shares", action="store_false",
                    help="skip the extra run that measures the slots' shares (MONITOR)")
    args = ap.parse_args()
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix="sk-bench-cluster-"))
    try:
        runs = [run_once(args, k, tmp) for k in range(args.runs)]
        med = median_of(runs)
        med["cpu_ratio_per_run"] = [r["cpu_ratio_to_single_node"] for r in runs]
        if args.slot_shares:
            med["slot_shares"] = watched_run(args, tmp)
            med["lobby_commands_per_match"] = med["slot_shares"]["per_match"]["lobby_keys"]
    except BaseException:
        print(f"the processes' logs are kept in {tmp}", file=sys.stderr)
        raise
    shutil.rmtree(tmp, ignore_errors=True)  # a clean run's logs: nothing to look at
    med = {"masters": args.masters, "serve_replicas": args.serve, "replicas_per_master": args.replicas,
           "replica_acks": args.replica_acks, "runs": args.runs, **med}
    med["cps_ratio_to_single_node"] = round(med["cps"] / med["single_node_cps"], 3) if med["single_node_cps"] else None
    if args.json:
        print(json.dumps(med))
    else:
        for k, v in med.items():
            print(f"{k:>28}: {v}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
