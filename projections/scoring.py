"""Effective xiang and the multiplier lookups of settlement (R-8.3 … R-10). Pure.

A player's *effective xiang* for a match is the largest of (R-8.3):

(i)   the xiang of any bomb they played (single-rank bombs, chain bombs,
      three jokers = 6, four jokers = 7);
(ii)  R-9: two single-rank bombs (kind ``"bomb"``) of the same xiang X whose
      ranks are consecutive, played at different times → X+1.
      Joker-completed bombs count with their rank (R-9.2; a ``bomb`` Combo's
      ``top`` *is* its rank); three or more in a row still give only X+1;
      ranks are consecutive as in chain bombs (R-2.2): with the room's
      ``chain_bomb_twos`` on, A then 2 count; with it off, 3…A only;
(iii) R-10, only when ``config.separate_bombs``: the number of single-rank
      4-xiang bombs 3 → 5, 4 → 6, 5 → 7, ≥ 6 → 8; two (or more) single-rank
      5-xiang bombs → 6; nothing else (R-10.1).

>>> from engine.config import load_config
>>> from engine.rules.classify import classify
>>> cfg = load_config("points")
>>> effective_xiang([classify("4 4 4 4"), classify("5 5 5 BJ")], cfg)
XiangResult(xiang=5, source='R-9: 4 4 4 4 and 5 5 5 BJ consecutive → 5')
>>> effective_xiang([], cfg)
XiangResult(xiang=0, source='no bomb')
>>> effective_xiang([classify("A A A A"), classify("2 2 2 2")], cfg).xiang    # R-9.2
5
>>> effective_xiang([classify("A A A A"), classify("2 2 2 2")],
...                 cfg.model_copy(update={"chain_bomb_twos": False})).xiang
4
>>> contribution_of(7, cfg), doubling_of(7, cfg), doubling_of(0, cfg)
(4, 8, 1)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engine.rules.cards import RANK_LABELS, chain_top
from engine.rules.combo import BOMB_KINDS, Combo
from engine.config import XIANGS, RoomConfig

MIN_XIANG = XIANGS[0]   # 4
MAX_XIANG = XIANGS[-1]  # 12

# number of separate single-rank 4-xiang bombs → effective xiang
_R10_FOURS = ((6, 8), (5, 7), (4, 6), (3, 5))


@dataclass(frozen=True, slots=True)
class XiangResult:
    """A player's effective xiang (0 when they played no bomb) and why (R-8.3)."""

    xiang: int
    source: str


def bomb_text(c: Combo) -> str:
    """The cards of a bomb in the card notation, ranks only, separated by spaces (the 10s stay
    readable), wild jokers last: ``7 7 7 7 7 7 7``, ``5 5 5 BJ``, ``SJ SJ BJ``.

    >>> from engine.rules.classify import classify
    >>> bomb_text(classify("4 4 4 4 5 5 5 5 6 6 6 6")), bomb_text(classify("SJ BJ BJ"))
    ('4 4 4 4 5 5 5 5 6 6 6 6', 'SJ BJ BJ')
    >>> bomb_text(classify("10 10 10 10")), bomb_text(classify("10 10 10 SJ"))
    ('10 10 10 10', '10 10 10 SJ')
    """
    natural = [RANK_LABELS[r] for r, n in enumerate(c.counts[:13]) for _ in range(n)]
    jokers = [RANK_LABELS[r] for r in (13, 14) for _ in range(c.counts[r])] if len(c.counts) == 15 else []
    return " ".join(natural + jokers)


def _played(bombs: Sequence[Combo]) -> XiangResult | None:
    best: Combo | None = None
    for c in bombs:
        if c.kind in BOMB_KINDS and c.xiang is not None and (best is None or c.xiang > (best.xiang or 0)):
            best = c
    if best is None:
        return None
    return XiangResult(best.xiang or 0, f"played {bomb_text(best)} ({best.xiang}-xiang)")


def _r9(bombs: Sequence[Combo], chain_bomb_twos: bool = True) -> XiangResult | None:
    """R-9.1/R-9.2: two single-rank bombs, same xiang X, consecutive ranks → X+1.

    Consecutive as in chain bombs (R-2.2): 3…2 with ``chain_bomb_twos``, else 3…A.
    """
    top_rank = chain_top(chain_bomb_twos)
    singles = [c for c in bombs if c.kind == "bomb" and c.xiang is not None and c.top <= top_rank]
    best: tuple[int, Combo, Combo] | None = None
    for i, a in enumerate(singles):
        for b in singles[i + 1:]:
            if a.xiang == b.xiang and abs(a.top - b.top) == 1:
                x = min((a.xiang or 0) + 1, MAX_XIANG)
                if best is None or x > best[0]:
                    lo, hi = (a, b) if a.top < b.top else (b, a)
                    best = (x, lo, hi)
    if best is None:
        return None
    x, lo, hi = best
    return XiangResult(x, f"R-9: {bomb_text(lo)} and {bomb_text(hi)} consecutive → {x}")


def _r10(bombs: Sequence[Combo]) -> XiangResult | None:
    """R-10.1: separate single-rank 4-xiang bombs (3→5 … ≥6→8), two 5-xiang bombs → 6."""
    fours = sum(1 for c in bombs if c.kind == "bomb" and c.xiang == 4)
    fives = sum(1 for c in bombs if c.kind == "bomb" and c.xiang == 5)
    best: XiangResult | None = None
    for need, x in _R10_FOURS:
        if fours >= need:
            best = XiangResult(x, f"R-10: {fours} separate 4-xiang bombs → {x}")
            break
    if fives >= 2 and (best is None or best.xiang < 6):
        best = XiangResult(6, f"R-10: {fives} separate 5-xiang bombs → 6")
    return best


def effective_xiang(bombs: Sequence[Combo], config: RoomConfig) -> XiangResult:
    """The effective xiang of one player's bombs in one match (R-8.3).

    ``bombs`` are the readings of the player's plays in order (non-bombs are
    ignored).  On a tie the first source in the order played bomb, R-9, R-10
    is named.
    """
    candidates = [_played(bombs), _r9(bombs, config.chain_bomb_twos)]
    if config.separate_bombs:
        candidates.append(_r10(bombs))
    best: XiangResult | None = None
    for cand in candidates:
        if cand is not None and (best is None or cand.xiang > best.xiang):
            best = cand
    return best if best is not None else XiangResult(0, "no bomb")


def contribution_of(xiang: int, config: RoomConfig) -> int:
    """Contribution multiplier c of an effective xiang (R-8.5); 0 below 4-xiang."""
    if xiang < MIN_XIANG:
        return 0
    return int(config.contribution[min(xiang, MAX_XIANG)])


def doubling_of(xiang: int, config: RoomConfig) -> int:
    """Doubling multiplier b of an effective xiang (R-8.4); 1 when there is no bomb."""
    if xiang < MIN_XIANG:
        return 1
    return int(config.doubling[min(xiang, MAX_XIANG)])


def standing_contribution(bombs_by_player: dict[str, Sequence[Combo]], config: RoomConfig) -> dict[str, int]:
    """R-8.5 "instant" view: each player's current contribution multiplier c.

    The money behind it (X·c from the opponent) is paid at settlement; read
    models show this as soon as a bomb is played.
    """
    return {p: contribution_of(effective_xiang(b, config).xiang, config) for p, b in bombs_by_player.items()}
