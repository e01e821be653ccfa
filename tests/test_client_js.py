"""client.js's own behaviour in Node, without a gateway (tests/js/client_test.mjs, node:test with a
fake WebSocket and mocked timers): auth by message or query, resume with the last version, the brief
and view it keeps, client.state from the briefs alone, expected_version, rejections and acks matched
to their commands, pending entries cleared by their answers, pacing under the welcome's rates, the
retry of a rate-limited move, the Seen acknowledgements, final close codes, the cards helper, client.d.ts against the exports.

And the close codes: every one client.js knows is one the gateway sends and docs/PROTOCOL.md lists."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_client_js_in_node() -> None:
    node = shutil.which("node")
    assert node, "node is needed (apt-get install nodejs; .ci/run installs it)"
    out = subprocess.run([node, "--test", str(ROOT / "tests" / "js" / "client_test.mjs")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "# pass 20" in out.stdout and "# fail 0" in out.stdout, out.stdout[-2000:]


def test_every_close_code_client_js_knows_is_sent_by_the_gateway_and_documented() -> None:
    import re

    source = (ROOT / "gateway" / "static" / "js" / "client.js").read_text(encoding="utf-8")
    known = {int(c) for c in re.findall(r"\b(4\d{3})\b", source)}
    assert known >= {4401, 4409, 4429}, known
    gateway = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "gateway").glob("*.py"))
    sent = {int(c) for c in re.findall(r"^CLOSE_\w+ = (4\d{3})$", gateway, re.M)}  # what the gateway closes with
    doc = (ROOT / "docs" / "PROTOCOL.md").read_text(encoding="utf-8")
    table = doc[doc.index("Close codes of the socket"):doc.index("### Stable fields")]
    listed = {int(c) for c in re.findall(r"\*\*(4\d{3})\*\*", table)}
    assert known <= sent, f"client.js knows close codes the gateway never sends: {sorted(known - sent)}"
    assert known <= listed, f"client.js knows close codes docs/PROTOCOL.md does not list: {sorted(known - listed)}"
