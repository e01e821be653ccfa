"""client.js in Node against a real gateway (issue 26 §5): ``node examples/client/node-bot.mjs
--url … --token … --room R`` plays one whole match against ``shuangkou gateway --bots`` (a real
serve, real dramatiq workers, a real gateway over real WebSockets), prints the settlement as one
JSON line with ``scores``, and exits 0.  Node 20 has no global WebSocket: the bot takes the ``ws``
package from ``npm install`` in examples/client (.ci/run does it).  Every message it received
validates against gateway/schemas/server.json, and its first move was not refused ``stale``
by the bot's trusteeship notice (issue 26 §4).

Issue 36: the bot reads nothing but ``client.state`` (its hand, the trick's plays, the turn: from
the briefs), bursts 60 Syncs on its first turn and still plays it (client.js paces under the
welcome's rates: nothing is refused ``rate_limited``), and drops its socket mid-match: client.js
reconnects, the lobby's ``seated`` note comes again, docs/PROTOCOL.md §8's snippet sends Ready on
it, and the gateway answers ``ack`` (never ``wrong_phase``).
"""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.gateway_support import ROOT, schema_problem, start_stack

pytestmark = [pytest.mark.redis, pytest.mark.worker, pytest.mark.slow]

BOT = ROOT / "examples" / "client" / "node-bot.mjs"


def _node() -> str:
    node = shutil.which("node")
    assert node, "node is needed (apt-get install nodejs; .ci/run installs it)"
    out = subprocess.run([node, "--version"], capture_output=True, text=True, check=True).stdout
    if int(out.strip().lstrip("v").split(".")[0]) < 22:
        assert (ROOT / "examples" / "client" / "node_modules" / "ws").is_dir(), \
            f"node {out.strip()} has no global WebSocket: run `npm install` in examples/client (.ci/run does it)"
    return node


def test_the_node_bot_plays_a_whole_match_against_the_gateway_bots(redis_server, tmp_path) -> None:
    node = _node()
    stack = start_stack(redis_server.db_url(2), redis_server.db_url(3), tmp_path,
                        {"nodebots": {"trustee_delay_seconds": 0.0}})
    try:
        gw = stack.start_gateway("nodebots", "--bots", "--bot-think", "0.2")  # bots think a human time by default
        record = tmp_path / "received.jsonl"
        out = subprocess.run([node, str(BOT), "--url", gw.url, "--token", stack.token("node-alice"),
                              "--room", "nodebots", "--record", str(record), "--timeout", "300",
                              "--sync-burst", "60", "--reconnect-after", "3"],
                             capture_output=True, text=True, timeout=360, cwd=tmp_path)
        assert out.returncode == 0, f"exit {out.returncode}:\n{out.stderr[-3000:]}"
        lines = out.stdout.strip().splitlines()
        assert len(lines) == 1, out.stdout
        settled = json.loads(lines[0])
        assert set(settled["scores"]) >= {"node-alice"} and len(settled["scores"]) == 2
        opponent = next(p for p in settled["scores"] if p != "node-alice")
        assert opponent.startswith("bot-")

        frames = record.read_text().splitlines()
        assert [p for p in map(schema_problem, frames) if p] == []
        messages = [json.loads(f) for f in frames]
        kinds = {m["kind"] for m in messages}
        assert {"welcome", "lobby", "update", "settled"} <= kinds
        # the bot's own moves all went through: none was refused stale (the trustee bot's
        # TrusteeshipStarted right after the deal does not move the table)
        assert [m for m in messages if m["kind"] == "rejected" and m["code"] == "stale"] == []
        mine = [e for m in messages if m["kind"] == "update" for e in m["events"]
                if e["type"] in ("CardsPlayed", "Passed") and e["player"] == "node-alice" and e.get("by") == "player"]
        assert mine, "the node bot never played by hand"
        # issue 36: the burst of Syncs cost no move, the reconnect's Ready was answered ack
        assert [m for m in messages if m["kind"] == "rejected"
                and m["code"] in ("rate_limited", "wrong_phase", "not_allowed")] == []
        assert len([m for m in messages if m["kind"] == "welcome"]) >= 2, "the socket never reconnected"
        seated = [i for i, m in enumerate(messages) if m["kind"] == "lobby" and m["state"] == "seated"]
        assert len(seated) >= 2
        acks = [i for i, m in enumerate(messages) if m["kind"] == "ack"]
        assert acks and acks[-1] > seated[1], "the Ready after the reconnect was not answered ack"
        assert all(m["rate"] == 20 and m["burst"] == 40 and m["sync_rate"] == 2
                   for m in messages if m["kind"] == "welcome")
        # events carry only the client's own command id (or null), never the engine's internal one
        ids = {e["command_id"] for m in messages if m["kind"] == "update" for e in m["events"]}
        assert all(i is None or ":" not in i for i in ids), ids
    finally:
        stack.stop()
