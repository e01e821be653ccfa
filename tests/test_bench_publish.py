"""bench/publish.py measures what it says: its ``evalsha`` mode is the publisher as it is
(EVALSHA of publish.lua), its baseline sends every update by EVAL, both write every update,
and ``--json`` reports the figures (their values stay in the benchmark, never asserted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import RedisServer
from tests.tool_support import need

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("mode", ["evalsha", "eval"])
def test_each_mode_writes_every_update_by_its_call(redis_server: RedisServer, mode: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from bench.publish import one
    from engine.service import publish
    from engine.store import keys, wire

    client = redis_server.client()
    client.flushdb()
    pub = publish.Publisher(client, consumer="bench")
    client.script_load(publish.PUBLISH_LUA)  # as after the benchmark's warm-up
    if mode == "eval":
        monkeypatch.setattr(publish, "_followed", lambda writes: set(range(len(writes))))
    sent: list[str] = []
    by_node = wire.by_node

    def record(c: Any, commands: Any, routes: Any, rider: Any = None) -> Any:
        sent.extend(str(command[0]) for command in commands)
        return by_node(c, commands, routes, rider)

    monkeypatch.setattr(wire, "by_node", record)
    figures = one(pub, 120, 10, f"t-{mode}")
    assert set(sent) == {mode.upper()} and len(sent) == 120
    assert all(client.xlen(keys.outbox_key(f"t-{mode}-p{k}")) == 12 for k in range(10))
    assert set(figures) == {"server_us", "client_us"}
    client.close()


def test_the_json_report_names_both_modes_and_their_ratios() -> None:
    need("redis-server", "apt-get install redis-server")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "publish.py"), "--updates", "300", "--runs", "1",
                          "--json"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout)
    for mode in ("evalsha", "eval"):
        for key in ("server_us", "client_us"):
            assert isinstance(report[f"{mode}_{key}"], float) and len(report[f"{mode}_{key}_spread"]) == 2
    assert isinstance(report["server_ratio"], float) and isinstance(report["client_ratio"], float)
    assert report["runs"] == 1 and report["updates"] == 300
