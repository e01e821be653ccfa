"""Every metric a dashboard panel or an alert rule uses is in the very first scrape of the
process that exports it (issue 22 §4): ``increase()`` cannot see the first increment of a
series that starts with it, and a panel on a missing name shows "No data" instead of 0.

A fresh ``shuangkou serve --broker-url`` (shuangkou_*), a fresh dramatiq worker with the
Prometheus middleware (dramatiq_*) and a fresh ``shuangkou gateway`` (shuangkou_gateway_*),
on a real redis-server, each scraped once before any traffic."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from tests.processes import stop_group, tail, wait_for
from tests.test_deploy_files import _alert_rules, _dashboard_exprs, _names_in

pytestmark = [pytest.mark.redis, pytest.mark.worker, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _exporter(name: str) -> str:
    """Which process exports a metric the deploy files use."""
    if name.startswith("dramatiq_"):
        return "worker"
    if name.startswith("shuangkou_gateway_"):
        return "gateway"
    return "serve"


def _scrape(url: str) -> set[str]:
    try:
        body = urllib.request.urlopen(url, timeout=3).read().decode()
    except OSError:
        return set()
    return {line.split("{")[0].split(" ")[0] for line in body.splitlines() if line and not line.startswith("#")}


def test_every_metric_a_panel_or_an_alert_uses_is_in_the_first_scrape(redis_server, tmp_path):
    import redis

    store_url, broker_url = redis_server.db_url(5), redis_server.db_url(6)
    for url in (store_url, broker_url):
        with redis.Redis.from_url(url) as c:
            c.flushdb()
    secret = tmp_path / "secret"
    secret.write_text(os.urandom(32).hex())  # text, as a secret file is: raw bytes may end in whitespace, which is stripped
    prom_dir = tmp_path / "prom"
    prom_dir.mkdir()
    wport, gport = _free_port(), _free_port()
    env = dict(os.environ, SK_REDIS_URL=store_url, SK_BROKER_URL=broker_url, PYTHONUNBUFFERED="1",
               PYTHONPATH=str(ROOT))
    worker_env = dict(env, SK_DRAMATIQ_PROMETHEUS="1", PROMETHEUS_MULTIPROC_DIR=str(prom_dir),
                      dramatiq_prom_db=str(prom_dir), dramatiq_prom_port=str(wport))
    worker_env.pop("dramatiq_prom_host", None)  # the default: 127.0.0.1
    argv = {
        "serve": ([sys.executable, "-m", "shuangkou", "serve", "--redis", store_url, "--broker-url", broker_url,
                   "--metrics-port", "0", "--consumer", "scrape-1"], env),
        "worker": ([sys.executable, "-m", "dramatiq", "--processes", "1", "--threads", "1", "workers.prometheus",
                    "workers.actors"], worker_env),
        "gateway": ([sys.executable, "-m", "shuangkou", "gateway", "--redis", store_url, "--port", str(gport),
                     "--secret-file", str(secret)], env),
    }
    logs = {name: tmp_path / f"{name}.log" for name in argv}
    files = [open(p, "wb") for p in logs.values()]
    procs = {name: subprocess.Popen(cmd, cwd=ROOT, env=e, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
             for (name, (cmd, e)), f in zip(argv.items(), files)}
    try:
        def serve_port() -> int | None:
            assert procs["serve"].poll() is None, tail(logs["serve"])
            for line in logs["serve"].read_text(errors="replace").splitlines():
                if line.startswith("metrics-port "):
                    return int(line.split()[1])
            return None

        sport = wait_for(serve_port, 60, "serve did not report its metrics port", list(logs.values()))
        urls = {"serve": f"http://127.0.0.1:{sport}/metrics", "worker": f"http://127.0.0.1:{wport}/metrics",
                "gateway": f"http://127.0.0.1:{gport}/metrics"}
        first: dict[str, set[str]] = {}
        for name, url in urls.items():
            def scraped(name: str = name, url: str = url) -> set[str]:
                assert procs[name].poll() is None, tail(logs[name])
                return _scrape(url)

            first[name] = wait_for(scraped, 60, f"{name} served no /metrics", list(logs.values()))
        used: dict[str, set[str]] = {}
        _dash, exprs = _dashboard_exprs()
        for where, expr in exprs + [(r["alert"], r["expr"]) for r in _alert_rules()]:
            for metric in _names_in(expr):
                used.setdefault(metric, set()).add(where)
        assert {_exporter(m) for m in used} == {"serve", "worker", "gateway"}
        missing = {m: sorted(where) for m, where in used.items() if m not in first[_exporter(m)]}
        assert not missing, f"not in the first scrape of their process: {missing}"
    finally:
        for p in procs.values():
            stop_group(p)
        for f in files:
            f.close()
