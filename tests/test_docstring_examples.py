"""Every example in the docstrings of engine, projections, workers and shuangkou runs as
written (doctest), as tests/test_gateway_unit.py does for the gateway's: an example that
no test ran had gone wrong unseen (a missing import, a slice one character short)."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("engine", "projections", "workers", "shuangkou")


def _modules_with_examples() -> list[str]:
    out = []
    for pkg in PACKAGES:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            if f.name != "__main__.py" and ">>>" in f.read_text(encoding="utf-8"):
                out.append(".".join(f.relative_to(ROOT).with_suffix("").parts))
    return out


MODULES = _modules_with_examples()


def test_the_modules_with_examples_are_found() -> None:
    assert {"engine.rules.moves", "engine.tools.archive", "engine.tools.view", "engine.lobby.state"} <= set(MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_the_docstring_examples_hold(module: str) -> None:
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {module} fail"
