"""Tests that run an outside tool (promtool, redis-server, docker compose): without it they
fail, so a machine that lacks it never passes by skipping; ``SK_ALLOW_NO_<TOOL>=1`` skips
them instead where that is known and meant (a developer's machine; docker compose in CI)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest


def _docker_compose() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30).returncode == 0


def need(tool: str, install: str) -> None:
    """Fail the calling test unless ``tool`` runs here (``docker compose``: the plugin too);
    skip it instead only with ``SK_ALLOW_NO_<TOOL>=1`` (``promtool`` → ``SK_ALLOW_NO_PROMTOOL``)."""
    have = _docker_compose() if tool == "docker compose" else shutil.which(tool) is not None
    if have:
        return
    allow = "SK_ALLOW_NO_" + tool.split()[0].replace("-", "_").upper()
    msg = f"this test needs {tool} ({install}); set {allow}=1 to skip it instead"
    if os.environ.get(allow) == "1":
        pytest.skip(msg)
    pytest.fail(msg, pytrace=False)
