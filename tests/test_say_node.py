"""client.js's ``say(phrase)`` and ``say`` event in Node over a real gateway (issue 39 item 5):
tests/js/say_pair.mjs seats two players, each hears the other's phrase, the sender's own copy
answers its command (nothing left pending), and the refusals come back as ``rejected`` events
(``rate_limited`` with ``retry_after_ms``, ``unknown_phrase``).  Every message validates against
gateway/schemas/server.json (the script's output is checked here)."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.gateway_support import ROOT, Client, start_stack
from tests.test_node_client import _node

pytestmark = [pytest.mark.redis, pytest.mark.worker, pytest.mark.slow]

SCRIPT = ROOT / "tests" / "js" / "say_pair.mjs"


def test_two_node_clients_say_phrases_to_each_other(redis_server, tmp_path) -> None:
    node = _node()
    stack = start_stack(redis_server.db_url(2), redis_server.db_url(3), tmp_path,
                        {"nodesay": {"trustee_delay_seconds": 0.0}})
    try:
        gw = stack.start_gateway("nodesay")
        out = subprocess.run([node, str(SCRIPT), "--url", gw.url, "--token-a", stack.token("ns-alice"),
                              "--token-b", stack.token("ns-bob"), "--room", "nodesay"],
                             capture_output=True, text=True, timeout=120, cwd=tmp_path)
        assert out.returncode == 0, f"exit {out.returncode}:\n{out.stderr[-3000:]}"
        got = json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        stack.stop()
    server = Client.validator("server.json")
    for key in ("heard", "own", "answer", "limited", "unknown"):
        server.validate(got[key])
    assert got["catalogue"] == {"phrases": 8, "emotes": 6, "interval_ms": 3000}
    assert got["heard"]["player"] == "ns-alice" and got["heard"]["command_id"] is None
    assert got["own"]["command_id"] == got["sid"] and got["pending_after"] is False
    assert got["answer"]["player"] == "ns-bob" and got["answer"]["phrase"] == "emote_cool"
    assert got["limited"]["code"] == "rate_limited" and 0 < got["limited"]["retry_after_ms"] <= 3000
    assert got["unknown"]["code"] == "unknown_phrase"
