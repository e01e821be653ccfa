"""client.js's own behaviour in Node, without a gateway (tests/js/client_test.mjs, node:test with a
fake WebSocket): auth by message or query, resume with the last version, the brief and view it
keeps, expected_version, rejections matched to their commands, final close codes, the cards helper."""

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
    assert "# pass 4" in out.stdout and "# fail 0" in out.stdout, out.stdout[-2000:]
