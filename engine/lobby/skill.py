"""Pairing by skill in a ranked room's queue (issue 40 §4; docs/RANKED.md "Matchmaking").

Pure: the queue's decide calls :func:`choose_pair` with the waiting players, the room's
config and the decision's clock (``ctx.now_ms``); each waiting player's rating is the
snapshot their Join carried (``Join.rating``, kept in the queue's state), so a replay of
the queue never reads the ratings projection.

* A player who waited ``w`` seconds accepts a rating gap up to their *window*
  ``match_window + match_window_per_second · w`` (rating points).
* Oldest waiting player first: the closest rating among the others whose gap is inside the
  window of either of the two (the more patient one decides); ties go to who waited longer.
* After ``match_max_wait_seconds`` a player is paired with the closest anyone (``fallback``:
  the gap is outside both windows); alone, a bot may sit opposite them (the queue timer,
  ``gateway --bots``) -- never before that wait in a ranked room.
* A player without a rating (``None``: unrated) counts as :data:`UNRATED`, a new player's
  rating (projections/ratings.py: ``1000 + 40·ordinal`` with ordinal 0).

>>> from engine.config import load_config
>>> from engine.lobby.state import Waiting
>>> cfg = load_config("points").model_copy(update={"ranked": True, "match_window": 50,
...     "match_window_per_second": 10, "match_max_wait_seconds": 20})
>>> ws = (Waiting("a", 0, 1000.0), Waiting("b", 1000, 1300.0), Waiting("c", 2000, 1040.0))
>>> choose_pair(ws, cfg, 2000)
SkillPair(players=('a', 'c'), gap=40.0, fallback=False)
>>> choose_pair(ws[:2], cfg, 2000) is None  # 300 apart: a's window is 70 after 2 s
True
>>> choose_pair(ws[:2], cfg, 26000)  # b's window: 50 + 10·25 = 300
SkillPair(players=('a', 'b'), gap=300.0, fallback=False)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engine.config import RoomConfig
from engine.lobby.state import Waiting

#: the rating of a player without one (a new player: 1000 + 40 × 0)
UNRATED = 1000.0


@dataclass(frozen=True)
class SkillPair:
    players: tuple[str, str]
    gap: float
    fallback: bool


def rating_of(w: Waiting) -> float:
    return UNRATED if w.rating is None else w.rating


def window(cfg: RoomConfig, waited_ms: int) -> float:
    """The rating gap a player who waited ``waited_ms`` accepts."""
    return cfg.match_window + cfg.match_window_per_second * max(waited_ms, 0) / 1000.0


def overdue(cfg: RoomConfig, w: Waiting, now_ms: int) -> bool:
    """Whether ``w`` waited the room's maximum: anyone (or a bot) will do now."""
    return now_ms - w.since >= cfg.match_max_wait_seconds * 1000.0


def choose_pair(waiting: Sequence[Waiting], cfg: RoomConfig, now_ms: int) -> SkillPair | None:
    """The pair the queue seats now (None: nobody is close enough yet)."""
    if len(waiting) < 2:
        return None
    for i, w in enumerate(waiting):  # oldest Join first
        r, win = rating_of(w), window(cfg, now_ms - w.since)
        best: tuple[float, int] | None = None
        for j, o in enumerate(waiting):
            if j == i:
                continue
            gap = abs(rating_of(o) - r)
            if gap <= max(win, window(cfg, now_ms - o.since)) and (best is None or gap < best[0]):
                best = (gap, j)
        if best is None and overdue(cfg, w, now_ms):
            best = min((abs(rating_of(o) - r), j) for j, o in enumerate(waiting) if j != i)
            o = waiting[best[1]]
            return SkillPair((w.player, o.player), best[0], True)
        if best is not None:
            o = waiting[best[1]]
            first, second = (w, o) if i < best[1] else (o, w)
            return SkillPair((first.player, second.player), best[0], False)
    return None
