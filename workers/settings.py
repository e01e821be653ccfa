"""Worker settings from the environment (whole numbers, checked: a typo fails at start-up)."""

from __future__ import annotations

import os


def env_int(name: str, default: int, what: str = "a whole number") -> int:
    """``$name`` as a non-negative int, ``default`` when unset or empty.

    >>> env_int("SK_SURELY_UNSET_FOR_THIS_EXAMPLE", 25)
    25
    """
    raw = os.environ.get(name, "")
    if raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise RuntimeError(f"{name}={raw!r}: expected {what}") from None
    if value < 0:
        raise RuntimeError(f"{name}={raw!r}: must not be negative")
    return value


def env_ms(name: str, default: int) -> int:
    """``$name`` as a non-negative number of milliseconds (:func:`env_int`)."""
    return env_int(name, default, "a whole number of milliseconds")
