"""client.js's private table methods and events in Node over a real gateway (issue 39 §8):
tests/js/private_pair.mjs opens a table, a second client joins it by code, a vote to end passes.
Every message validates against gateway/schemas/server.json (the script's output is checked here)."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.gateway_support import ROOT, Client, start_stack
from tests.test_node_client import _node

pytestmark = [pytest.mark.redis, pytest.mark.worker, pytest.mark.slow]

SCRIPT = ROOT / "tests" / "js" / "private_pair.mjs"


def test_a_node_client_opens_a_table_and_another_joins_it_by_code(redis_server, tmp_path) -> None:
    node = _node()
    stack = start_stack(redis_server.db_url(2), redis_server.db_url(3), tmp_path,
                        {"nodepriv": {"trustee_delay_seconds": 0.0}})
    try:
        gw = stack.start_gateway("nodepriv")
        out = subprocess.run([node, str(SCRIPT), "--url", gw.url, "--token-a", stack.token("np-ann"),
                              "--token-b", stack.token("np-bob"), "--room", "nodepriv"],
                             capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert out.returncode == 0, f"exit {out.returncode}:\n{out.stderr[-3000:]}"
        got = json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        stack.stop()
    server = Client.validator("server.json")
    for m in (got["created"], got["vote"], got["own"], *got["seated"], *got["finished"]):
        server.validate(m)
    created = got["created"]
    assert created["command_id"] == got["createId"] and created["link"] == f"/t/{created['code']}"
    assert got["pending_after"] is False
    assert {s["match"] for s in got["seated"]} == {f"{created['series_id']}-1"}
    assert got["vote"]["by"] == "np-ann" and got["vote"]["command_id"] is None
    assert got["own"]["command_id"] == got["endId"]
    assert [f["reason"] for f in got["finished"]] == ["dissolved", "dissolved"]
