"""The names of the bots (engine/tools/bot.py), importable without the bots themselves
(the command line lists them as choices before anything else loads).

>>> LEVELS, DEFAULT_LEVEL
(('easy', 'normal', 'hard'), 'normal')
"""

from __future__ import annotations

from typing import get_args

from engine.config import BotLevel

#: the levels offered to players, weakest first (docs/BOTS.md)
LEVELS: tuple[str, ...] = get_args(BotLevel)
#: every policy a :class:`engine.tools.bot.Bot` plays: trusteeship (R-13.3), the old rule
#: bots kept for simulations and tests, then the levels
POLICIES: tuple[str, ...] = ("trustee", "greedy", "random", *LEVELS)
DEFAULT_LEVEL = "normal"

__all__ = ["DEFAULT_LEVEL", "LEVELS", "POLICIES"]
