"""deploy/: the compose file, Prometheus config, alert rules and dashboard parse,
and every metric they use is one the engine (projections.metrics), the gateway
(gateway/metrics.py) or dramatiq's Prometheus middleware actually exposes -- and
is in the very first scrape of the process that exports it (a fresh serve, worker
and gateway on a real redis-server)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml")  # PyYAML

from projections import metrics  # noqa: E402
from tests.tool_support import need

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
METRIC_RE = re.compile(r"\b((?:shuangkou|dramatiq)_[a-z0-9_]+)\b")
BUILTIN = {"up"}


def _gateway_names() -> set[str]:
    """Every sample name a gateway's /metrics can show (gateway/metrics.py)."""
    from gateway.metrics import GatewayMetrics

    names: set[str] = set()
    for metric in GatewayMetrics().registry.collect():
        names |= {metric.name + suffix for suffix in ("", "_total", "_bucket", "_sum", "_count", "_created")}
    return names


def _known() -> set[str]:
    return metrics.exposed_names() | _gateway_names() | BUILTIN


def _load_yaml(name: str):
    return yaml.safe_load((DEPLOY / name).read_text(encoding="utf-8"))


def _names_in(expr: str) -> set[str]:
    return set(METRIC_RE.findall(expr))


def _alert_rules():
    doc = _load_yaml("alerts.yml")
    return [r for g in doc["groups"] for r in g["rules"]]


def _dashboard_exprs():
    dash = json.loads((DEPLOY / "grafana" / "dashboard.json").read_text(encoding="utf-8"))
    out = []

    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                out.append((p["title"], t["expr"]))
            walk(p.get("panels", []))

    walk(dash["panels"])
    for var in dash.get("templating", {}).get("list", []):
        if var.get("type") == "datasource":  # the ${DS_PROMETHEUS} picker: no expression
            continue
        q = var.get("query")
        out.append((var["name"], q["query"] if isinstance(q, dict) else q))
    return dash, out


def test_compose_file_has_the_stack():
    doc = _load_yaml("compose.yaml")
    services = doc["services"]
    for name in ("redis-events", "redis-broker", "serve", "worker", "gateway", "prometheus", "grafana"):
        assert name in services, name
    ev = " ".join(map(str, services["redis-events"]["command"]))
    assert "--appendonly yes" in ev
    serve = services["serve"]
    assert serve["command"][0] == "serve" and "--redis" in serve["command"]
    assert serve["deploy"]["replicas"] >= 2
    worker = services["worker"]
    assert worker["entrypoint"] == ["dramatiq"] and "workers.actors" in worker["command"]
    assert worker["deploy"]["replicas"] >= 2
    # the replay viewer reads the matches as the read-only user (the gateway user may not)
    assert services["gateway"]["environment"]["SK_REPLAY_REDIS_URL"].startswith("redis://readonly:")
    env = worker["environment"]
    assert env["PROMETHEUS_MULTIPROC_DIR"] == env["dramatiq_prom_db"]
    # dramatiq's Prometheus middleware is switched on by the broker set-up (workers/broker.py)
    from workers.broker import PROMETHEUS_ENV

    assert str(env[PROMETHEUS_ENV]) == "1"
    assert worker["command"].index("workers.prometheus") < worker["command"].index("workers.actors")
    assert "--path" not in worker["command"]  # the entry module is in the installed package
    # every file the compose file mounts exists
    for svc in services.values():
        for vol in svc.get("volumes", []):
            src = vol.split(":", 1)[0]
            if src.startswith("./"):
                assert (DEPLOY / src).exists(), src
    assert (DEPLOY / "Dockerfile").read_text().count("ENTRYPOINT") == 1
    assert importlib.util.find_spec("workers.prometheus") is not None
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    assert "pip install -e" not in dockerfile and "--editable" not in dockerfile


def test_prometheus_config_scrapes_serve_workers_and_gateway_and_loads_alerts():
    doc = _load_yaml("prometheus.yml")
    assert doc["rule_files"] == ["alerts.yml"]  # beside it: /etc/prometheus/ in compose, deploy/ here
    jobs = {j["job_name"]: j for j in doc["scrape_configs"]}
    assert jobs["shuangkou-serve"]["dns_sd_configs"][0]["port"] == 9400
    assert jobs["shuangkou-worker"]["dns_sd_configs"][0]["port"] == 9191
    assert jobs["shuangkou-gateway"]["dns_sd_configs"][0] == {"names": ["gateway"], "type": "A", "port": 8080}
    compose = _load_yaml("compose.yaml")
    mounts = compose["services"]["prometheus"]["volumes"]
    assert "./prometheus.yml:/etc/prometheus/prometheus.yml:ro" in mounts
    assert "./alerts.yml:/etc/prometheus/alerts.yml:ro" in mounts


def test_compose_gateway_redis_users_and_metrics_addresses():
    """The gateway service (its own Redis users, its secret a Docker secret, port 8080); every
    Redis loads an ACL file; the metrics listeners are 0.0.0.0 only inside compose, on purpose."""
    services = _load_yaml("compose.yaml")["services"]
    doc = _load_yaml("compose.yaml")
    gw = services["gateway"]
    cmd = [str(c) for c in gw["command"]]
    assert cmd[0] == "gateway"
    assert cmd[cmd.index("--port") + 1] == "8080" and cmd[cmd.index("--host") + 1] == "0.0.0.0"
    assert cmd[cmd.index("--redis") + 1].startswith("redis://gateway:")
    assert cmd[cmd.index("--lobby-redis") + 1].startswith("redis://lobby:")
    assert cmd[cmd.index("--secret-file") + 1] == "/run/secrets/gateway_secret"
    assert gw["secrets"] == ["gateway_secret"] and "gateway_secret" in doc["secrets"]
    assert "8080:8080" in gw["ports"]
    assert "--dev" not in cmd
    assert "SK_REDIS_URL" not in gw["environment"]  # the gateway never connects as the service user
    for name in ("redis-events", "redis-broker"):
        command = [str(c) for c in services[name]["command"]]
        assert "--aclfile" in command or "--requirepass" in command, name
        acl = command[command.index("--aclfile") + 1]
        assert any(str(v).endswith(":" + acl + ":ro") and (DEPLOY / str(v).split(":")[0]).exists()
                   for v in services[name]["volumes"]), name
    for url in (services["serve"]["command"][services["serve"]["command"].index("--broker-url") + 1],
                doc["x-app"]["environment"]["SK_BROKER_URL"]):
        assert url.startswith("redis://dramatiq:"), url
    serve = [str(c) for c in services["serve"]["command"]]
    assert serve[serve.index("--metrics-addr") + 1] == "0.0.0.0"
    assert services["worker"]["environment"]["dramatiq_prom_host"] == "0.0.0.0"


def test_metrics_listen_on_loopback_by_default():
    import argparse

    from shuangkou.cli import serve
    from workers import broker

    parser = argparse.ArgumentParser()
    serve.add_arguments(parser)
    assert parser.parse_args([]).metrics_addr == "127.0.0.1"
    assert broker.PROMETHEUS_DEFAULT_HOST == "127.0.0.1"


def test_promtool_checks_the_prometheus_config():
    need("promtool", "apt-get install prometheus")
    out = subprocess.run(["promtool", "check", "config", str(DEPLOY / "prometheus.yml")], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_docker_compose_config(tmp_path):
    need("docker compose", "Docker with the compose plugin")
    secret = tmp_path / "gateway-secret"
    secret.write_bytes(b"x" * 32)
    out = subprocess.run(["docker", "compose", "-f", str(DEPLOY / "compose.yaml"), "config", "-q"],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "SK_GATEWAY_SECRET_FILE": str(secret)})
    assert out.returncode == 0, out.stdout + out.stderr


def test_alert_rules_parse_and_use_existing_metrics():
    known = _known()
    rules = _alert_rules()
    assert len(rules) >= 6
    names = {r["alert"] for r in rules}
    for wanted in ("ShuangkouTimeoutSpike", "ShuangkouEscapeSpike", "ShuangkouProjectionLag", "ShuangkouDeadLetters",
                   "ShuangkouGatewayDown", "ShuangkouGatewayAuthFailureSpike", "ShuangkouGatewayRoundTripSlow"):
        assert wanted in names
    for r in rules:
        assert r["expr"].strip() and "summary" in r["annotations"]
        used = _names_in(r["expr"])
        assert used or r["expr"].startswith("up{"), r["alert"]
        assert used <= known, (r["alert"], used - known)


def test_dashboard_parses_and_uses_existing_metrics():
    known = _known()
    dash, exprs = _dashboard_exprs()
    assert dash["uid"] and len(exprs) >= 20
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    used_all: set[str] = set()
    for title, expr in exprs:
        used = _names_in(expr)
        assert used, title
        assert used <= known, (title, used - known)
        used_all |= used
    # the dashboard shows what the brief asks for
    for base in ("shuangkou_matches_started_total", "shuangkou_matches_finished_total", "shuangkou_turn_timeouts_total",
                 "shuangkou_trusteeships_total", "shuangkou_disconnects_total", "shuangkou_escapes_total",
                 "shuangkou_rejections_total", "shuangkou_bombs_total", "shuangkou_command_duration_seconds_bucket",
                 "shuangkou_append_duration_seconds_bucket", "shuangkou_timer_lateness_seconds_bucket",
                 "shuangkou_projection_lag_events", "shuangkou_dead_letters_total", "dramatiq_message_rejects_total",
                 # the gateway row
                 "shuangkou_gateway_connections", "shuangkou_gateway_messages_in_total",
                 "shuangkou_gateway_messages_out_total", "shuangkou_gateway_auth_failures_total",
                 "shuangkou_gateway_command_round_trip_seconds_bucket", "shuangkou_gateway_lobby_queue_length"):
        assert base in used_all, base
    rows = [p["title"] for p in dash["panels"] if p["type"] == "row"]
    assert "Gateway" in rows


def test_grafana_provisioning_parses():
    ds = yaml.safe_load((DEPLOY / "grafana/provisioning/datasources/prometheus.yml").read_text())
    assert ds["datasources"][0]["uid"] == "prometheus"
    prov = yaml.safe_load((DEPLOY / "grafana/provisioning/dashboards/shuangkou.yml").read_text())
    assert prov["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"


def test_promtool_checks_rules():
    need("promtool", "apt-get install prometheus")
    out = subprocess.run(["promtool", "check", "rules", str(DEPLOY / "alerts.yml")], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_operations_doc_covers_the_runbook():
    text = (ROOT / "docs" / "OPERATIONS.md").read_text(encoding="utf-8")
    for topic in ("docker compose", "--scale", "Redis Cluster", "AOF", "BGSAVE", "shuangkou replay",
                  "PROMETHEUS_MULTIPROC_DIR", "dramatiq_prom_port"):
        assert topic in text, topic
