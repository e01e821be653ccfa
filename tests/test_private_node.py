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


def test_the_node_example_opens_a_table_and_a_second_one_joins_it_by_code(redis_server, tmp_path) -> None:
    """examples/client/node-bot.mjs --create-table prints the code; a second bot --join-table CODE
    sits; both play the first hand and print its settlement with the series' totals."""
    node = _node()
    bot = ROOT / "examples" / "client" / "node-bot.mjs"
    stack = start_stack(redis_server.db_url(2), redis_server.db_url(3), tmp_path,
                        {"nodeex": {"trustee_delay_seconds": 0.0}})
    owner = None
    try:
        gw = stack.start_gateway("nodeex")
        owner = subprocess.Popen([node, str(bot), "--url", gw.url, "--token", stack.token("ne-ann"), "--room",
                                  "nodeex", "--create-table", "4", "--timeout", "120"],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
        assert owner.stdout is not None
        created = json.loads(owner.stdout.readline())
        friend = subprocess.run([node, str(bot), "--url", gw.url, "--token", stack.token("ne-bob"), "--room",
                                 "nodeex", "--join-table", created["code"], "--timeout", "120"],
                                capture_output=True, text=True, timeout=150, cwd=tmp_path)
        rest, err = owner.communicate(timeout=150)
        assert friend.returncode == 0, friend.stderr[-3000:]
        assert owner.returncode == 0, err[-3000:]
    finally:
        if owner is not None and owner.poll() is None:
            owner.kill()
            owner.wait()
        stack.stop()
    assert created["link"] == f"/t/{created['code']}"
    a, b = json.loads(rest.strip().splitlines()[-1]), json.loads(friend.stdout.strip().splitlines()[-1])
    assert a["match"] == b["match"] == f"{created['series_id']}-1"
    assert a["series"] == b["series"] and a["series"]["hand"] == 1 and a["series"]["totals"] == a["scores"]
