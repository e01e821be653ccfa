"""Test helpers around engine/store/wire.py."""

from __future__ import annotations

from typing import Any

import pytest

from engine.store import wire


def record_riders(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every :class:`engine.store.wire.Rider` made from now on (the test's monkeypatch undoes it)."""
    riders: list[Any] = []
    real = wire.Rider

    class Rider(real):  # type: ignore[misc,valid-type]
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            riders.append(self)

    monkeypatch.setattr(wire, "Rider", Rider)
    return riders
